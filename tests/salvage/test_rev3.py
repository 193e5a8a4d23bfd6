"""Recovery of revision-3 ("damage-evident") sessions (design §6): real files written by the
revision-3 writer, real damage to real pages, ``salvage.recover_session`` end to end.

Each replacement is judged by the chain verifier itself (``chainio.verify_full``): it must be
proven with exactly the gaps the recovery recorded and logged, every salvaged row keeping its
stored hashes byte for byte; later emits extend the chain."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb import recoverylog, salvage
from agentdb.schema import chain, chainio
from agentdb.store import Event, Producer, SessionWriter
from tests.rows import page_size, read_at, write_at, zero_page
from tests.salvage import corpus

pytestmark = pytest.mark.slow

HASH_COLS = {
    "events": "sequence, content_hash, prev_hash, chain_hash",
    "cost_ledger": "sequence, content_hash",
    "plan_items": "sequence, content_hash",
    "producers": "category, name, version, content_hash",
}


@pytest.fixture(scope="module")
def base3(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    d = tmp_path_factory.mktemp("base3")
    return corpus.build_base(d, revision=3)


@pytest.fixture
def session3(base3: tuple[str, Path], sessions_dir: Path) -> tuple[str, Path, Path]:
    """A fresh copy of the revision-3 base session in ``sessions_dir``, and a pristine copy."""
    sid, src = base3
    path = sessions_dir / src.name
    shutil.copyfile(src, path)
    path.chmod(0o600)
    pristine = sessions_dir.parent / "pristine.sqlite"
    shutil.copyfile(src, pristine)
    return sid, path, pristine


def ro(path: Path) -> apsw.Connection:
    return apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)


def full(path: Path) -> chain.ChainReport:
    conn = ro(path)
    try:
        return chainio.verify_full(conn)
    finally:
        conn.close()


def one(path: Path, sql: str, args: tuple[Any, ...] = ()) -> Any:
    conn = ro(path)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def log_gaps(sessions_dir: Path, sid: str) -> list[dict[str, Any]]:
    entry = recoverylog.entries_for(sessions_dir.parent / "recovery.log", sid)[-1]
    assert entry["event"] == "outcome" and entry["outcome"] == "recovered"
    return list(entry["gaps"])


def as_log(g: chain.Gap) -> dict[str, Any]:
    return {
        "kind": g.kind,
        "from_seq": g.from_seq,
        "to_seq": g.to_seq,
        "expected_hash": None if g.expected_hash is None else g.expected_hash.hex(),
    }


def gap_rows(path: Path) -> list[tuple[Any, ...]]:
    return one(path, "SELECT * FROM chain_gaps ORDER BY sequence")


def assert_proven(path: Path, sessions_dir: Path, sid: str) -> chain.ChainReport:
    """verify_full: ok, no unexplained break, and the recorded breaks are the recorded gap
    rows (which the log line lists too)."""
    assert one(path, "PRAGMA user_version") == [(3,)]
    r = full(path)
    assert r.ok, (r.problems, r.unexplained_breaks, r.row_failures)
    assert not r.unexplained_breaks
    logged = log_gaps(sessions_dir, sid)
    records = [g.gap for g in r.gap_records if g.gap is not None]
    assert all(g.proven for g in r.gap_records)
    new = [as_log(g) for g in records if g.kind != "meta"][-len(logged) :] if logged else []
    assert [x for x in logged if x["kind"] != "meta"] == new
    # every break the walk meets is explained by one of the recorded gaps
    for b in r.breaks:
        assert b.recorded and any(g.explains(b.gap) for g in records)
    return r


def assert_hashes_kept(path: Path, pristine: Path) -> None:
    """Every salvaged row's hash columns are byte for byte the original's."""
    for table, cols in HASH_COLS.items():
        now = one(path, f"SELECT {cols} FROM {table}")
        before = set(one(pristine, f"SELECT {cols} FROM {table}"))
        assert set(now) <= before, table
        assert now or table == "cost_ledger", table  # the only table a test loses whole


def rightmost_leaf(path: Path, table: str) -> int:
    conn = apsw.Connection(
        f"file:{path.absolute()}?immutable=1",
        flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
    )
    try:
        sql = "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path DESC"
        return int(conn.execute(sql, (table,)).fetchall()[0][0])
    finally:
        conn.close()


def head(path: Path) -> tuple[Any, ...]:
    return one(path, "SELECT head_sequence, head_hash, origin, origin_revision FROM session_chain")[
        0
    ]


# ------------------------------------------------------------------------------ tests


def test_healthy_revision_3_is_left_alone(session3: tuple[str, Path, Path]) -> None:
    sid, path, _ = session3
    before = path.read_bytes()
    out = salvage.recover_session(path.parent, sid)
    assert out.outcome == "healthy"
    assert path.read_bytes() == before


def test_lost_middle_page_records_an_events_gap(
    session3: tuple[str, Path, Path], sessions_dir: Path
) -> None:
    sid, path, pristine = session3
    zero_page(path, corpus.pages_of(path, "events", "leaf")[2])
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    kinds = [g["kind"] for g in out.gaps]
    assert "events" in kinds
    r = assert_proven(path, sessions_dir, sid)
    assert r.orphans_of_recovery > 0  # costs/plans of the lost events are kept
    assert out.gaps == log_gaps(sessions_dir, sid)
    for g in out.gaps:
        if g["kind"] == "events":  # expected: the chain_hash the lost event to_seq had
            want = one(pristine, "SELECT chain_hash FROM events WHERE sequence = ?", (g["to_seq"],))
            assert [(bytes.fromhex(g["expected_hash"]),)] == want
    assert_hashes_kept(path, pristine)
    # the head is the walk's: the last salvaged event, origin recovered from revision 3
    assert head(path)[0] == one(path, "SELECT max(sequence) FROM events")[0][0]
    assert head(path)[2:] == ("recovered", 3)
    # a revision-3 original never comes back at a lower revision
    assert one(Path(str(out.corrupt_path)), "PRAGMA user_version") == [(3,)]


def test_lost_tail_records_a_tail_gap_with_the_old_head(
    session3: tuple[str, Path, Path], sessions_dir: Path
) -> None:
    sid, path, pristine = session3
    old_seq, old_hash = head(pristine)[:2]
    zero_page(path, rightmost_leaf(path, "events"))
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    last = one(path, "SELECT max(sequence) FROM events")[0][0]
    assert last < old_seq
    tail = [g for g in out.gaps if g["kind"] == "tail"]
    assert tail == [
        {"kind": "tail", "from_seq": last + 1, "to_seq": old_seq, "expected_hash": old_hash.hex()}
    ]
    assert_proven(path, sessions_dir, sid)
    assert_hashes_kept(path, pristine)
    seq = one(path, "SELECT seq FROM sqlite_sequence WHERE name = 'events'")[0][0]
    assert seq >= old_seq  # a lost number is never given to a new event
    # later emits extend the chain from the last salvaged row; the jump is the tail record
    w = SessionWriter.open(sessions_dir, sid)
    try:
        w.set_status("running")  # the base session was completed
        w.emit(Event("tool_call", corpus.BIG, b'{"after": "recovery"}'))
    finally:
        w.close()
    r = full(path)
    assert r.ok, (r.problems, r.unexplained_breaks)
    new = one(path, "SELECT sequence, prev_hash FROM events ORDER BY sequence DESC LIMIT 1")[0]
    assert new[0] == old_seq + 1
    assert new[1] == one(path, "SELECT chain_hash FROM events WHERE sequence = ?", (last,))[0][0]
    assert ("tail", last + 1, old_seq) in [
        (b.gap.kind, b.gap.from_seq, b.gap.to_seq) for b in r.recorded
    ]


def test_lost_cost_rows_record_rows_gaps(
    session3: tuple[str, Path, Path], sessions_dir: Path
) -> None:
    sid, path, pristine = session3
    leaves = corpus.pages_of(path, "cost_ledger", "leaf")
    assert leaves
    lost_page = leaves[0]
    zero_page(path, lost_page)
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    rows_gaps = [g for g in out.gaps if g["kind"] == "rows"]
    assert rows_gaps
    kept = {r[0] for r in one(path, "SELECT sequence FROM cost_ledger")}
    lost = one(pristine, "SELECT sequence, event_sequence FROM cost_ledger")
    lost_events = {ev for seq, ev in lost if seq not in kept}
    assert lost_events
    # each event that lost a bound row is a rows gap whose expected hash is its stored chain
    assert {g["from_seq"] for g in rows_gaps} >= lost_events
    for g in rows_gaps:
        assert g["from_seq"] == g["to_seq"]
        want = one(pristine, "SELECT chain_hash FROM events WHERE sequence = ?", (g["from_seq"],))
        assert [(bytes.fromhex(g["expected_hash"]),)] == want
    assert_proven(path, sessions_dir, sid)
    assert_hashes_kept(path, pristine)


def _flip_text_in(path: Path, page: int, needle: bytes) -> int:
    """Change one letter of ``needle``'s first occurrence on ``page`` (the record still decodes,
    SQLite's integrity_check still passes); the offset changed."""
    ps = page_size(path)
    data = read_at(path, (page - 1) * ps, ps)
    at = data.find(needle)
    assert at >= 0
    off = (page - 1) * ps + at + 1
    old = read_at(path, off, 1)
    write_at(path, off, bytes([old[0] ^ 0x20]))  # a letter's case: still valid UTF-8
    return off


def test_flipped_byte_in_a_row_is_rejected_and_a_gap(
    session3: tuple[str, Path, Path], sessions_dir: Path
) -> None:
    sid, path, pristine = session3
    page = corpus.pages_of(path, "cost_ledger", "leaf")[0]
    _flip_text_in(path, page, b"anthropic")
    conn = ro(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        damaged = chainio.verify_full(conn)
    finally:
        conn.close()
    assert "row_hash_mismatch" in damaged.problems
    (bad_table, bad_seq) = damaged.row_failures[0]
    assert bad_table == "cost_ledger"
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    assert one(path, "SELECT 1 FROM cost_ledger WHERE sequence = ?", (bad_seq,)) == []
    ev = one(pristine, "SELECT event_sequence FROM cost_ledger WHERE sequence = ?", (bad_seq,))
    assert {"kind": "rows", "from_seq": ev[0][0], "to_seq": ev[0][0]} in [
        {k: g[k] for k in ("kind", "from_seq", "to_seq")} for g in out.gaps
    ]
    assert_proven(path, sessions_dir, sid)
    assert_hashes_kept(path, pristine)


def test_second_recovery_carries_the_first_gap_rows(
    session3: tuple[str, Path, Path], sessions_dir: Path
) -> None:
    sid, path, pristine = session3
    zero_page(path, corpus.pages_of(path, "events", "leaf")[2])
    assert salvage.recover_session(sessions_dir, sid).outcome == "recovered"
    first = gap_rows(path)
    assert first
    # a recovered file is proven with its gaps: recovering it again leaves it alone
    assert salvage.recover_session(sessions_dir, sid).outcome == "healthy"
    # new damage to the recovered file, away from the first gap
    zero_page(path, corpus.pages_of(path, "events", "leaf")[-4])
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    now = gap_rows(path)
    assert now[: len(first)] == first  # carried over unchanged, hashes and times included
    assert len(now) > len(first) and out.gaps
    assert_proven(path, sessions_dir, sid)
    assert_hashes_kept(path, pristine)


def test_emits_after_recovery_extend_the_chain(
    session3: tuple[str, Path, Path], sessions_dir: Path
) -> None:
    sid, path, _ = session3
    zero_page(path, corpus.pages_of(path, "events", "leaf")[2])
    assert salvage.recover_session(sessions_dir, sid).outcome == "recovered"
    top = one(path, "SELECT seq FROM sqlite_sequence WHERE name = 'events'")[0][0]
    w = SessionWriter.open(sessions_dir, sid)
    try:
        w.set_status("running")  # the base session was completed
        for i in range(3):
            w.emit(Event("tool_call", corpus.BIG, b'{"n": %d}' % i))
    finally:
        w.close()
    r = full(path)
    assert r.ok, (r.problems, r.unexplained_breaks)
    assert r.last_sequence == top + 3
    assert [b.gap.kind for b in r.breaks] == [b.gap.kind for b in r.recorded]


def test_revision_2_original_into_revision_3(sessions_dir: Path) -> None:
    sid, path = corpus.build_base(sessions_dir, revision=2)
    pristine = sessions_dir.parent / "pristine2.sqlite"
    shutil.copyfile(path, pristine)
    zero_page(path, corpus.pages_of(path, "events", "leaf")[2])
    out = salvage.recover_session(sessions_dir, sid, target_revision=3)
    assert out.outcome == "recovered", out.notes
    assert one(path, "PRAGMA user_version") == [(3,)]
    assert head(path)[2:] == ("recovered", 2)
    r = assert_proven(path, sessions_dir, sid)
    assert r.rows["events"] == out.tables["events"]["salvaged"]
    assert r.proven == r.rows
    # revision 2's event hashes are kept; the rows were hashed and chained at recovery
    now = one(path, "SELECT sequence, content_hash FROM events")
    assert set(now) <= set(one(pristine, "SELECT sequence, content_hash FROM events"))
    # a revision-2 original has no head: no meta gap
    assert "meta" not in [g["kind"] for g in out.gaps]


def test_default_target_never_lowers_a_revision(
    session3: tuple[str, Path, Path], sessions_dir: Path
) -> None:
    sid, path, _ = session3
    zero_page(path, corpus.pages_of(path, "events", "leaf")[2])
    with pytest.raises(ValueError):
        salvage.recover_session(sessions_dir, sid, target_revision=2)


@pytest.mark.parametrize("field", ["chain_hash", "prev_hash"])
def test_a_damaged_chain_field_is_restored_when_its_neighbours_attest_it(
    sessions_dir: Path, field: str
) -> None:
    """One byte of one event's chain_hash (or prev_hash) changed, its content intact: the two
    stored hashes beside it agree on the original (the next event's prev_hash, or the event
    before's chain_hash with this one's own chain_hash), so the replacement holds the original
    field, byte for byte, and no gap is recorded (the 2026-12-02 campaign's seed 540032 kept
    the damaged field and recorded rows/link gaps)."""
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    for i in range(8):
        w.emit(Event("tool_call", Producer("tool", "shell", "1"), b"e%d" % i))
    w.close()
    sid, path = w.session_id, w.path
    conn = apsw.Connection(str(path))
    try:
        want = conn.execute("SELECT sequence, prev_hash, chain_hash FROM events").fetchall()
        (old,) = conn.execute(f"SELECT {field} FROM events WHERE sequence = 4").fetchone()
        flipped = bytes(old[:5]) + bytes([old[5] ^ 0xFF]) + bytes(old[6:])
        conn.execute(f"UPDATE events SET {field} = ? WHERE sequence = 4", (flipped,))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    assert out.gaps == []
    conn = apsw.Connection(str(path))
    try:
        got = conn.execute("SELECT sequence, prev_hash, chain_hash FROM events").fetchall()
        assert chainio.verify_full(conn).ok
    finally:
        conn.close()
    assert got == want
