"""The chain walk (schema/chain.py, schema/chainio.py) on real revision-3 files: naive edits in
every table are found and named, untouched files never alarm, a simulated recovery's gaps are
recorded and then explain its breaks, and the head-link prefix proof (design §4-§7, §11)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentdb import db
from agentdb.schema import chain, chainio, migrations
from agentdb.store import Event, PlanItem, Producer, SessionWriter, Usage
from tests.chain_support import SID, append, build, edit, opened
from tests.support import make_session

# 10 events: costs on 2, 5, 9; plan items on 3, 5; producers first seen at 1, 4, 8
SHAPE = [
    (0, 0, False),
    (1, 0, False),
    (0, 2, False),
    (0, 0, True),
    (2, 1, False),
    (0, 0, False),
    (0, 0, False),
    (0, 0, True),
    (1, 0, False),
    (0, 0, False),
]


def full(path: Path, **kw: object) -> chain.ChainReport:
    conn = opened(path)
    try:
        return chainio.verify_full(conn, **kw)  # type: ignore[arg-type]
    finally:
        conn.close()


def quick(path: Path) -> chain.ChainReport:
    conn = opened(path)
    try:
        return chainio.verify_quick(conn)
    finally:
        conn.close()


def gaps(report: chain.ChainReport) -> list[tuple[str, int, int]]:
    return [(b.gap.kind, b.gap.from_seq, b.gap.to_seq) for b in report.unexplained_breaks]


@pytest.fixture
def session(tmp_path: Path) -> Path:
    p = tmp_path / f"{SID}.db"
    build(p, SHAPE)
    return p


def test_untouched_file_is_proven(session: Path) -> None:
    r = full(session)
    assert r.ok, r.problems
    assert r.rows == {"events": 10, "cost_ledger": 4, "plan_items": 3, "producers": 3}
    assert r.proven == r.rows
    assert r.links_checked == 10 and r.links_broken == 0 and r.breaks == []
    assert r.tail == "matches" and r.last_sequence == 10
    q = quick(session)
    assert q.ok, q.problems


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shape=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 3), st.booleans()), min_size=0, max_size=25
    ),
    status=st.sampled_from(["running", "completed", "failed"]),
)
def test_no_false_alarm_on_any_shape(
    tmp_path: Path, shape: list[tuple[int, int, bool]], status: str
) -> None:
    p = tmp_path / f"s{len(list(tmp_path.iterdir()))}.db"
    build(p, shape, status=status)
    r, q = full(p), quick(p)
    assert r.ok, r.problems
    assert q.ok, q.problems
    assert r.rows["events"] == len(shape) == r.links_checked


@pytest.mark.parametrize(
    ("sql", "failure"),
    [
        ("UPDATE events SET payload = X'00' WHERE sequence = 3", ("events", 3)),
        ("UPDATE events SET timestamp = 'x' WHERE sequence = 10", ("events", 10)),
        ("UPDATE cost_ledger SET cost_usd = 9.5 WHERE sequence = 2", ("cost_ledger", 2)),
        ("UPDATE plan_items SET decision = 'deny' WHERE sequence = 1", ("plan_items", 1)),
        (
            "UPDATE producers SET version = '2' WHERE name = 'p4'",
            ("producers", ("model", "p4", "2")),
        ),
    ],
)
def test_changed_value_names_the_row(session: Path, sql: str, failure: tuple[str, object]) -> None:
    edit(session, sql)
    r = full(session)
    assert r.problems == ["row_hash_mismatch"]
    assert r.row_failures == [failure] and r.row_failure_count == 1
    assert r.breaks == []  # the chain holds: it is made of stored hashes


def test_changed_session_meta(session: Path) -> None:
    edit(session, "UPDATE session_meta SET profile = 'other'")
    assert full(session).problems == ["meta_hash_mismatch"]
    assert quick(session).problems == ["meta_hash_mismatch"]


@pytest.mark.parametrize(
    ("sql", "table", "gap"),
    [
        ("DELETE FROM events WHERE sequence = 4", "events", ("events", 4, 4)),
        ("DELETE FROM events WHERE sequence IN (1, 2)", "events", ("events", 1, 2)),
        ("DELETE FROM cost_ledger WHERE sequence = 3", "cost_ledger", ("rows", 5, 5)),
        ("DELETE FROM plan_items WHERE sequence = 2", "plan_items", ("rows", 3, 3)),
        ("DELETE FROM producers WHERE name = 'p8'", "producers", ("rows", 8, 8)),
    ],
)
def test_deleted_row_names_the_gap(
    session: Path, sql: str, table: str, gap: tuple[str, int, int]
) -> None:
    edit(session, sql)
    r = full(session)
    assert gap in gaps(r)
    assert "chain_break" in r.problems and "count_mismatch" in r.problems
    assert [m[0] for m in r.count_mismatches] == [table]
    q = quick(session)  # O(1): the count names the table
    assert [m[0] for m in q.count_mismatches] == [table]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10])
def test_cut_tail_with_head_left(session: Path, n: int) -> None:
    edit(
        session,
        f"DELETE FROM cost_ledger WHERE event_sequence > {10 - n}",
        f"DELETE FROM plan_items WHERE event_sequence > {10 - n}",
        f"DELETE FROM producers WHERE first_seen_sequence > {10 - n}",
        f"DELETE FROM events WHERE sequence > {10 - n}",
    )
    r = full(session)
    assert r.tail == "cut"
    assert gaps(r) == [("tail", 11 - n, 10)]
    q = quick(session)
    assert q.tail == "cut" and "head_mismatch" in q.problems


def test_events_after_the_head(session: Path) -> None:
    edit(session, "UPDATE session_chain SET head_sequence = head_sequence")  # no change
    assert full(session).ok
    shutil.copy(session, session.with_suffix(".bak"))
    append(session)
    edit(session, "DELETE FROM session_chain")
    assert full(session).tail == "head_missing"
    assert quick(session).tail == "head_missing"


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE session_chain SET event_count = 11",
        "UPDATE session_chain SET head_sequence = 9",
        "UPDATE session_chain SET origin = 'migrated'",
    ],
)
def test_altered_head(session: Path, sql: str) -> None:
    edit(session, sql)
    assert full(session).tail == "head_damaged"
    assert quick(session).tail == "head_damaged"


def test_deleted_head(session: Path) -> None:
    edit(session, "DELETE FROM session_chain")
    r = full(session)
    assert r.tail == "head_missing" and not r.ok
    assert quick(session).tail == "head_missing"


def test_swapped_events(session: Path) -> None:
    edit(
        session,
        "UPDATE events SET sequence = -3 WHERE sequence = 3",
        "UPDATE events SET sequence = 3 WHERE sequence = 4",
        "UPDATE events SET sequence = 4 WHERE sequence = -3",
    )
    r = full(session)
    assert sorted(r.row_failures) == [("events", 3), ("events", 4)]
    assert ("link", 3, 3) in gaps(r)


def test_derived_row_moved_to_another_event(session: Path) -> None:
    edit(session, "UPDATE cost_ledger SET event_sequence = 6 WHERE sequence = 1")
    r = full(session)
    assert r.row_failures == [("cost_ledger", 1)]
    assert gaps(r) == [("rows", 2, 2), ("rows", 6, 6)]


def test_unbound_row(session: Path) -> None:
    edit(session, "UPDATE cost_ledger SET event_sequence = 99 WHERE sequence = 4")
    r = full(session)
    assert r.unbound == [("cost_ledger", 4)] and "unbound_rows" in r.problems


def test_hostile_values_do_not_raise(session: Path) -> None:
    edit(
        session,
        "PRAGMA ignore_check_constraints=ON",
        "UPDATE events SET chain_hash = 'text', prev_hash = X'00' WHERE sequence = 5",
        "UPDATE cost_ledger SET event_sequence = 'x', content_hash = X'00' WHERE sequence = 1",
        "UPDATE session_chain SET head_hash = 7",
    )
    r = full(session)
    assert not r.ok and r.tail == "head_damaged"
    assert ("cost_ledger", 1) in r.row_failures and ("cost_ledger", 1) in r.unbound
    assert not quick(session).ok


# ------------------------------------------------------------------------- recovery


def recover(original: Path, replacement: Path, *deletions: str) -> list[chain.Gap]:
    """What §6 asks of a recovery, with SQL standing in for salvage: the replacement holds the
    original's rows minus ``deletions`` with their stored hashes; the walk finds the breaks,
    they are recorded, the head is rebuilt from the walk."""
    conn = opened(original)
    try:
        old = chainio.verify_full(conn)
        old_head = old.head
    finally:
        conn.close()
    shutil.copy(original, replacement)
    edit(replacement, "DELETE FROM session_chain", *deletions)
    conn = chainio.apsw.Connection(str(replacement))
    try:
        report = chainio.verify_full(conn, heads=False, max_listed=None)
        todo = chain.gaps_to_record(report, old_head, highest_sequence=old.last_sequence)
        with conn:
            records = chainio.record_gaps(conn, todo, "2026-12-01T02:00:00Z")
            head = chain.rebuild_head(
                report,
                records,
                session_id=SID,
                origin="recovered",
                origin_revision=3,
                origin_at="2026-12-01T02:00:00Z",
            )
            chainio.write_head(conn, head)
            conn.execute(
                "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'events'",
                (old_head.sequence if old_head else 0,),
            )
    finally:
        conn.close()
    return todo


LOSSES = (
    "DELETE FROM events WHERE sequence IN (4, 5, 6)",
    "DELETE FROM events WHERE sequence IN (9, 10)",
    "DELETE FROM cost_ledger WHERE sequence = 1",  # bound to event 2
)


def test_simulated_recovery_is_proven_with_recorded_gaps(session: Path, tmp_path: Path) -> None:
    repl = tmp_path / "replacement.db"
    todo = recover(session, repl, *LOSSES)
    assert [(g.kind, g.from_seq, g.to_seq) for g in todo] == [
        ("rows", 2, 2),
        ("events", 4, 6),
        ("tail", 9, 10),
    ]
    r = full(repl)
    assert r.ok, (r.problems, gaps(r))
    assert [(b.gap.kind, b.gap.from_seq) for b in r.recorded] == [("rows", 2), ("events", 4)]
    assert r.orphans_of_recovery == 5  # rows bound to lost events 4, 5, 9, kept by salvage
    assert quick(repl).ok
    # later emits extend the chain from the last salvaged event; the jump is the tail record
    assert append(repl) == 11
    r = full(repl)
    assert r.ok, (r.problems, gaps(r))
    assert ("tail", 9, 10) in [(b.gap.kind, b.gap.from_seq, b.gap.to_seq) for b in r.recorded]
    assert quick(repl).ok


def test_recovery_of_an_untouched_file_records_nothing(session: Path, tmp_path: Path) -> None:
    repl = tmp_path / "replacement.db"
    assert recover(session, repl) == []
    assert full(repl).ok


def test_recovery_with_a_lost_last_bound_row_passes_quick(session: Path, tmp_path: Path) -> None:
    repl = tmp_path / "replacement.db"
    recover(
        session,
        repl,
        "DELETE FROM cost_ledger WHERE event_sequence = 9",
        "DELETE FROM events WHERE sequence = 10",
    )
    assert full(repl).ok
    assert quick(repl).ok  # the last event's rows gap is recorded


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM chain_gaps WHERE kind = 'events'",
        "UPDATE chain_gaps SET to_seq = 7 WHERE kind = 'events'",
        "UPDATE chain_gaps SET expected_hash = NULL WHERE kind = 'rows'",
        "DELETE FROM chain_gaps WHERE kind = 'tail'",
    ],
)
def test_gap_record_deleted_or_altered(session: Path, tmp_path: Path, sql: str) -> None:
    repl = tmp_path / "replacement.db"
    recover(session, repl, *LOSSES)
    edit(repl, sql)
    r = full(repl)
    assert "gap_record_damaged" in r.problems
    if "tail" not in sql:  # the break it explained is unexplained again
        assert "chain_break" in r.problems
    if sql.startswith("DELETE"):
        assert not quick(repl).ok  # gap_count


def test_new_deletion_after_recovery_is_not_excused(session: Path, tmp_path: Path) -> None:
    repl = tmp_path / "replacement.db"
    recover(session, repl, *LOSSES)
    edit(repl, "DELETE FROM events WHERE sequence = 7")
    # the break widens the recorded 4-6 to 4-7: no record explains it
    assert gaps(full(repl)) == [("events", 4, 7)]


def test_lost_head_records_tail_and_meta(session: Path) -> None:
    conn = opened(session)
    try:
        report = chainio.verify_full(conn, heads=False, max_listed=None)
    finally:
        conn.close()
    todo = chain.gaps_to_record(report, None, highest_sequence=12)
    assert [(g.kind, g.from_seq, g.to_seq, g.expected_hash) for g in todo] == [
        ("tail", 11, 12, None),
        ("meta", 0, 0, None),
    ]
    assert chain.gaps_to_record(report, None, original_revision=2) == []


# ---------------------------------------------------------------------------- prefix


def prefix(copy: Path, sess: Path) -> chainio.PrefixProof:
    a, b = opened(copy), opened(sess)
    try:
        return chainio.proves_prefix(a, b)
    finally:
        a.close()
        b.close()


def test_prefix_proof(session: Path, tmp_path: Path) -> None:
    backup = tmp_path / "backup.db"
    shutil.copy(session, backup)
    assert prefix(backup, session) == chainio.PrefixProof(True, True, "")
    append(session)
    append(session)
    p = prefix(backup, session)
    assert p.proven and not p.identical
    assert not prefix(session, backup).proven  # the backup lacks the session's tail
    edit(session, "UPDATE events SET payload = X'01' WHERE sequence = 2")
    assert not prefix(backup, session).proven


def test_prefix_needs_no_gap_below_the_head(session: Path, tmp_path: Path) -> None:
    backup = tmp_path / "backup.db"
    shutil.copy(session, backup)
    repl = tmp_path / "replacement.db"
    recover(session, repl, "DELETE FROM events WHERE sequence IN (4, 5)")
    assert full(repl).ok
    assert not prefix(backup, repl).proven  # event 10 chains alike, but 4-5 are lost


def test_empty_copy_is_a_prefix(tmp_path: Path) -> None:
    empty, grown = tmp_path / "a.db", tmp_path / "b.db"
    build(empty, [])
    build(grown, SHAPE)
    assert prefix(empty, grown).proven


def test_caps_on_untrusted_rows(
    session: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chain, "MAX_BOUND", 1)  # event 3 binds two rows, event 5 three
    r = full(session)
    assert gaps(r) == [("rows", 3, 3), ("rows", 5, 5)] and r.unbound_count == 3
    monkeypatch.undo()
    edit(session, "UPDATE events SET payload = X'00'")
    r = full(session, max_listed=3)
    assert r.row_failure_count == 10 and len(r.row_failures) == 3
    repl = tmp_path / "replacement.db"
    recover(session, repl, *LOSSES)
    monkeypatch.setattr(chainio, "MAX_GAP_RECORDS", 2)
    r = full(repl)
    assert r.gap_records_excess and "gap_record_damaged" in r.problems


# ------------------------------------------------------------------- migrated files


@pytest.mark.parametrize("revision", [1, 2])
@pytest.mark.parametrize("turns", [0, 4])
def test_step_3_migrated_file_is_proven(sessions_dir: Path, revision: int, turns: int) -> None:
    """The walk (Python) and step 3 (SQL) agree on every hash, link and the head (A20)."""
    sid, path = make_session(sessions_dir, revision=revision, turns=turns)
    conn = db.open_writer(path)
    try:
        migrations.apply_steps(conn, path, target=3, steps=migrations.REV3_LADDER)
        r, q = chainio.verify_full(conn, session_id=sid), chainio.verify_quick(conn)
    finally:
        conn.close()
    assert r.ok, (r.problems, gaps(r), r.row_failures)
    assert q.ok, q.problems
    assert r.head is not None and r.head["origin"] == b"migrated"
    assert r.head["origin_revision"] == revision
    if turns:
        assert all(r.rows[t] for t in chain.COUNTED)


# -------------------------------------------------------------- the revision-3 writer

_MODEL = Producer("model", "m", "1")
_KERNEL = Producer("kernel", "kernel", "1")


def _event(i: int, kind: int, producer: int) -> Event:
    prod = Producer("tool", f"t{producer}", "1")
    kw = {"id": f"ev-{i:04d}", "timestamp": f"2026-12-01T00:00:{i % 60:02d}.000Z"}
    if kind == 0:
        usage = Usage("prov", "mod", 10 + i, 20, 0.001 * i, 1, 2)
        return Event(kind="message", producer=_MODEL, payload=b"m", usage=usage, **kw)
    if kind == 1:
        items = [PlanItem(f"turn{i}", f"c{i}-{k}", "prov", "tool", "allow", "r") for k in range(2)]
        return Event(kind="plan", producer=_KERNEL, payload=b"p", plan_items=items, **kw)
    return Event(kind="tool_call", producer=prod, payload=bytes([i % 256]), **kw)


@pytest.mark.slow
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=5),
        max_size=6,
    ),
    end=st.sampled_from([None, "completed", "failed"]),
)
def test_writer_files_are_proven(
    sessions_dir: Path, batches: list[list[tuple[int, int]]], end: str | None
) -> None:
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    sid, path = w.session_id, w.path
    try:
        i = 0
        for batch in batches:
            events = []
            for kind, producer in batch:
                i += 1
                events.append(_event(i, kind, producer))
            if len(events) == 1:
                w.emit(events[0])
            else:
                w.emit_batch(events)
        if end:
            w.set_status(end)
    finally:
        w.close()
    conn = db.open_readonly(path)
    try:
        r, q = chainio.verify_full(conn, session_id=sid), chainio.verify_quick(conn)
    finally:
        conn.close()
    assert r.ok, (r.problems, gaps(r), r.row_failures)
    assert q.ok, q.problems
    assert r.rows["events"] == i and r.head is not None and r.head["origin"] == b"created"


@pytest.mark.slow
def test_writer_file_naive_edits(sessions_dir: Path) -> None:
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    path = w.path
    try:
        w.emit_batch([_event(i, i % 3, i % 2) for i in range(1, 10)])
    finally:
        w.close()
    edit(path, "DELETE FROM plan_items WHERE sequence = 3")
    conn = db.open_readonly(path)
    try:
        r = chainio.verify_full(conn)
    finally:
        conn.close()
    bound = [b.gap for b in r.unexplained_breaks]
    assert [(g.kind, g.from_seq) for g in bound] == [("rows", 4)]  # plan items 3, 4: event 4
