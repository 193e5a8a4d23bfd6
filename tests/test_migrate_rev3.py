"""Step 3 (design §10), on the released ladder: real files written by agentdb's writer at
revisions 1 and 2 are migrated with ``apply_steps(steps=REV3_LADDER, target=3)`` (the ladder
itself since the release) and then proven by an
independent recomputation in Python (tests/chain_oracle.py), never by the SQL under test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb import db, errors
from agentdb.checks.judge import judge
from agentdb.hashing import event_hash
from agentdb.schema import chainio, migrations, revisions
from agentdb.store import Event, Producer, SessionWriter
from tests import chain_oracle
from tests.support import make_session


def _open(path: Path) -> apsw.Connection:
    return db.open_writer(path)


def _snapshot(conn: apsw.Connection) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for table in revisions.TABLES:
        cols = ", ".join(revisions.COLUMNS[1][table])
        out[table] = [tuple(r) for r in conn.execute(f"SELECT {cols} FROM {table} ORDER BY rowid")]
    return out


def _counters(conn: apsw.Connection) -> dict[str, int]:
    return {str(n): int(s) for n, s in conn.execute("SELECT name, seq FROM sqlite_sequence")}


def _migrate(path: Path) -> tuple[int, int]:
    conn = _open(path)
    try:
        return migrations.apply_steps(conn, path, target=3, steps=migrations.REV3_LADDER)
    finally:
        conn.close()


@pytest.mark.parametrize("revision", [1, 2])
@pytest.mark.parametrize("turns", [0, 3])
def test_migrated_file_proves(sessions_dir: Path, revision: int, turns: int) -> None:
    _, path = make_session(sessions_dir, revision=revision, turns=turns)
    conn = _open(path)
    before, counters = _snapshot(conn), _counters(conn)
    conn.close()
    if turns:
        assert all(before[t] for t in revisions.TABLES), "fixture covers every table"
    assert _migrate(path) == (revision, 3)
    conn = _open(path)
    try:
        assert db.scalar(conn, "PRAGMA user_version") == 3
        assert db.scalar(conn, "PRAGMA application_id") == revisions.APPLICATION_ID
        assert chain_oracle.problems(conn) == []
        assert _snapshot(conn) == before  # rows copied, never changed
        after = _counters(conn)
        assert all(after.get(n, 0) >= s for n, s in counters.items())
        head = chain_oracle.rows(conn, "session_chain")[0]
        assert head[10:12] == ("migrated", revision)
        assert head[1] == len(before["events"])
        assert db.integrity_problems(conn) == []
        assert migrations.head_problems(conn) == []
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
        assert names - {"sqlite_sequence"} == set(revisions.REV3_TABLES)
    finally:
        conn.close()


@pytest.mark.slow
def test_an_empty_session_gets_the_genesis_head(sessions_dir: Path) -> None:
    w = SessionWriter.create(sessions_dir, profile="p", revision=2)
    sid, path = w.session_id, w.path
    w.close()
    _migrate(path)
    conn = _open(path)
    try:
        head = chain_oracle.rows(conn, "session_chain")[0]
        from agentdb.hashing import gaps_hash, genesis

        assert head[1:7] == (0, 0, 0, 0, 0, genesis(sid))
        assert head[8:10] == (0, gaps_hash([]))
        assert chain_oracle.problems(conn) == []
    finally:
        conn.close()


@pytest.mark.slow
def test_sequences_with_holes_and_shared_producers(sessions_dir: Path) -> None:
    """A revision-2 file whose events skip numbers (deleted by another tool before) migrates;
    the links then show the jumps, exactly as the chain rule says (the oracle names them)."""
    _, path = make_session(sessions_dir, revision=2, turns=2)
    conn = _open(path)
    conn.execute("PRAGMA foreign_keys=OFF")
    free = (
        "SELECT min(sequence) FROM events WHERE sequence > 1 AND sequence NOT IN (SELECT "
        "event_sequence FROM cost_ledger UNION SELECT event_sequence FROM plan_items UNION "
        "SELECT first_seen_sequence FROM producers)"
    )
    hole = int(db.scalar(conn, free))
    conn.execute("DELETE FROM events WHERE sequence = ?", (hole,))
    conn.close()
    _migrate(path)
    conn = _open(path)
    try:
        assert chain_oracle.problems(conn) == [f"event {hole + 1}: sequence after {hole - 1}"]
        # the oracle and the quick proof see naive edits made after migration
        conn.execute("UPDATE cost_ledger SET cost_usd = cost_usd + 1 WHERE rowid = 1")
        assert "cost_ledger 1: content_hash" in chain_oracle.problems(conn)
        conn.execute("DELETE FROM events WHERE sequence = (SELECT max(sequence) FROM events)")
        assert any("head" in p for p in migrations.head_problems(conn))
    finally:
        conn.close()


def test_a_bad_event_hash_is_refused(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir, revision=2, turns=2)
    conn = _open(path)
    conn.execute("UPDATE events SET content_hash = zeroblob(16) WHERE sequence = 5")
    before = _snapshot(conn)
    conn.close()
    with pytest.raises(errors.MigrationFailed, match="sequence=5 does not match its content"):
        _migrate(path)
    conn = _open(path)
    try:
        assert db.scalar(conn, "PRAGMA user_version") == 2
        assert _snapshot(conn) == before
    finally:
        conn.close()


def test_two_session_meta_rows_are_refused(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir, revision=2, turns=1)
    conn = _open(path)
    conn.execute(
        "INSERT INTO session_meta SELECT 'X' || session_id, parent_session_id, profile, "
        "status, depth, started_at, ended_at FROM session_meta"
    )
    conn.close()
    with pytest.raises(errors.MigrationFailed, match="not exactly one"):
        _migrate(path)


def test_invalid_text_in_a_derived_row_is_refused(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir, revision=2, turns=1)
    conn = _open(path)
    conn.execute("UPDATE plan_items SET tool_name = CAST(X'C328' AS TEXT) WHERE rowid = 1")
    conn.close()
    with pytest.raises(errors.MigrationFailed, match="plan_items row 1 holds TEXT"):
        _migrate(path)


def test_the_released_ladder_reaches_revision_3(sessions_dir: Path) -> None:
    """The released ladder (no ``steps``) is the one with step 3: it stops where it is asked
    to (revision 2 has no head), goes on to the current revision by default, and refuses a
    target no step reaches."""
    assert migrations.STEPS == migrations.REV3_LADDER and migrations.ladder_is_contiguous()
    _, path = make_session(sessions_dir, revision=1, turns=1)
    conn = _open(path)
    try:
        with pytest.raises(ValueError):
            migrations.apply_steps(conn, path, target=revisions.CURRENT_REVISION + 1)
        assert migrations.apply_steps(conn, path, target=2) == (1, 2)
        assert not db.scalar(conn, "SELECT 1 FROM sqlite_schema WHERE name = 'session_chain'")
        assert migrations.apply_steps(conn, path) == (2, revisions.CURRENT_REVISION)
        assert chain_oracle.problems(conn) == []
    finally:
        conn.close()


def test_a_chained_event_after_migration(sessions_dir: Path) -> None:
    """Two events with the same producer, one with a cost row: bound rows enter the chain."""
    w = SessionWriter.create(sessions_dir, profile="p", revision=1)
    prod = Producer("tool", "t", "1")
    w.emit(Event(kind="tool_call", producer=prod, payload=b"a"))
    w.emit(Event(kind="tool_result", producer=prod, payload=b"b"))
    path = w.path
    w.close()
    _migrate(path)
    conn = _open(path)
    try:
        assert chain_oracle.problems(conn) == []
        ev = chain_oracle.rows(conn, "events", "sequence")
        assert ev[1][10] == ev[0][11]
    finally:
        conn.close()


# Files with holes, as a recovery at revision 1 or 2 leaves them (the events it lost are gone,
# their rows kept) or as the spec's schema allows (revision 1 has no CHECK on sequence). Step 3
# records each break its chain shows, so the migrated file proves with recorded gaps only.
HOLES: dict[str, list[str]] = {
    "middle events lost": ["DELETE FROM events WHERE sequence IN (4, 5, 6)"],
    "first events lost": ["DELETE FROM events WHERE sequence <= 2"],
    "last events lost": [
        "DELETE FROM events WHERE sequence >= (SELECT max(sequence) - 1 FROM events)"
    ],
    "orphan rows of lost events": [
        "DELETE FROM events WHERE sequence IN "
        "(SELECT event_sequence FROM cost_ledger ORDER BY sequence LIMIT 1)",
        "DELETE FROM events WHERE sequence = (SELECT max(sequence) FROM events)",
    ],
    "a first event at sequence 0": ["UPDATE events SET sequence = 0 WHERE sequence = 1"],
    "events below zero": [
        "UPDATE events SET sequence = sequence - 10 WHERE sequence <= 3",
    ],
    # revision 1 allows any integer: the lowest one too (the fold's start must be no event's)
    "the lowest integer": ["UPDATE events SET sequence = -9223372036854775808 WHERE sequence = 1"],
    "the highest integer": [
        "UPDATE events SET sequence = 9223372036854775807 "
        "WHERE sequence = (SELECT max(sequence) FROM events)"
    ],
}


def _holed(sessions_dir: Path, revision: int, sqls: list[str]) -> tuple[str, Path]:
    sid, path = make_session(sessions_dir, revision=revision, turns=3, status=None)
    conn = apsw.Connection(str(path))  # plain SQLite, foreign keys off: rows of lost events stay
    try:
        for sql in sqls:
            conn.execute(sql)
        if revision == 2:  # a moved sequence is inside revision 2's event hash: rehash it as
            conn.create_scalar_function(  # a writer would have written it
                "h", lambda *v: event_hash(*v), 9, deterministic=True
            )
            conn.execute(
                "UPDATE events SET content_hash = h(sequence, id, timestamp, kind, "
                "producer_category, producer_name, producer_version, schema_version, payload)"
            )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return sid, path


@pytest.mark.slow
@pytest.mark.parametrize("revision", [1, 2])
@pytest.mark.parametrize("hole", sorted(HOLES))
def test_a_file_with_holes_migrates_into_recorded_gaps(
    sessions_dir: Path, revision: int, hole: str
) -> None:
    sid, path = _holed(sessions_dir, revision, HOLES[hole])
    conn = _open(path)
    before = _snapshot(conn)
    conn.close()
    assert _migrate(path) == (revision, 3)
    conn = _open(path)
    try:
        assert _snapshot(conn) == before
        report = chainio.verify_full(conn)
        assert report.ok, (report.problems, report.breaks)
        assert all(b.recorded for b in report.breaks)
        gaps = [tuple(r) for r in conn.execute("SELECT kind, from_seq, to_seq FROM chain_gaps")]
        found = [(b.gap.kind, b.gap.from_seq, b.gap.to_seq) for b in report.breaks]
        last = int(db.scalar(conn, "SELECT max(sequence) FROM events"))
        past = [g for g in gaps if g[1] > last]  # numbers issued past the last event
        assert gaps and gaps == found + past, (gaps, found)
        assert len(past) == (hole in ("last events lost", "orphan rows of lost events"))
        assert judge(path, sid).verdict == "ok"  # check agrees: every break is recorded
    finally:
        conn.close()
    w = SessionWriter.open(sessions_dir, sid)  # later emits extend the chain past the holes
    try:
        after = Event(kind="tool_call", producer=Producer("tool", "t", "1"), payload=b"after")
        if hole == "the highest integer":  # no number is left: refused, nothing written
            with pytest.raises(errors.ConstraintViolation, match="no event sequence is left"):
                w.emit(after)
        else:
            w.emit(after)
    finally:
        w.close()
    conn = _open(path)
    try:
        report = chainio.verify_full(conn)
        assert report.ok, (report.problems, report.breaks)
    finally:
        conn.close()


def _steps_to_migrate(sessions_dir: Path, n: int) -> int:
    """SQLite VM instructions (in thousands) step 3 takes on a revision-2 file of ``n`` events:
    a count, not a time, so the same on any machine."""
    w = SessionWriter.create(sessions_dir, profile="p", revision=2)
    tool = Producer("tool", "t", "1")
    for start in range(0, n, 500):
        w.emit_batch([Event("tool_call", tool, b"%d" % i) for i in range(start, start + 500)])
    w.close()
    conn = _open(w.path)
    ticks = [0]

    def tick() -> bool:
        ticks[0] += 1
        return False  # go on

    conn.set_progress_handler(tick, 1000)
    try:
        migrations.apply_steps(conn, w.path, target=3)
    finally:
        conn.set_progress_handler(None)
        conn.close()
    return ticks[0]


@pytest.mark.slow
def test_step_3_is_linear_in_the_events(tmp_path: Path) -> None:
    """The fold finds each next event by the primary key: twice the events, about twice the
    work (a fold that scanned the table per step was quadratic: the kernel's first open of a
    long session took minutes; found by the release's hostile review)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    small, large = _steps_to_migrate(a, 2000), _steps_to_migrate(b, 4000)
    assert large < 2.6 * small, (small, large)
