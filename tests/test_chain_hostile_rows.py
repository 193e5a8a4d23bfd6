"""Revision-3 files whose head or gap rows hash correctly but hold values the revision's DDL
forbids (written with ``ignore_check_constraints``, or by another tool), and files with many
gap records: ``check`` calls the first damage, the kernel's open recovers them, ``recover``
builds a replacement, and a walk matches many gap records without a pass per break; and the
writer never issues a number a migrated file's tail gap records as lost. Real files, the real
writer, the real recovery."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb import kernel, paths, recoverylog, salvage
from agentdb.checks import check_path
from agentdb.hashing import gaps_hash, genesis, row_hash
from agentdb.schema import chain
from agentdb.schema.revisions import REV3_HASHED
from agentdb.store import Event, Producer
from tests import rows
from tests.chain_support import edit, reseal
from tests.support import make_session

HEAD = REV3_HASHED["session_chain"]
GAP = REV3_HASHED["chain_gaps"]


def _forced(path: Path, *sql: str, gap: tuple[Any, ...] | None = None) -> None:
    """Plain SQL with the DDL's CHECKs off, ``gap`` (its hashed columns) added with its own
    hash, then the head's gap count, gaps hash and own hash recomputed: every hash holds."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA ignore_check_constraints=ON")
        with conn:
            for s in sql:
                conn.execute(s)
            if gap is not None:
                conn.execute(
                    f"INSERT INTO chain_gaps ({', '.join(GAP)}, content_hash) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (*gap, row_hash("chain_gaps", gap)),
                )
            hashes = [r[0] for r in conn.execute("SELECT content_hash FROM chain_gaps")]
            conn.execute(
                "UPDATE session_chain SET gap_count = ?, gaps_hash = ?",
                (len(hashes), gaps_hash(hashes)),
            )
            for rowid, *head in list(
                conn.execute(f"SELECT rowid, {', '.join(HEAD)} FROM session_chain")
            ):
                conn.execute(
                    "UPDATE session_chain SET content_hash = ? WHERE rowid = ?",
                    (row_hash("session_chain", head), rowid),
                )
    finally:
        conn.close()


def _codes(path: Path) -> tuple[str, set[str]]:
    result = check_path(path, path.name[:26])
    return result.verdict, {f.code for f in result.findings}


@pytest.mark.slow
@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE session_chain SET id = 5",
        "UPDATE session_chain SET origin = 'bogus'",
        "UPDATE session_chain SET origin_revision = 'three'",
    ],
)
def test_a_head_the_ddl_refuses_is_damage_and_the_kernel_recovers_it(
    sessions_dir: Path, sql: str
) -> None:
    sid, path = make_session(sessions_dir, revision=3, turns=2)
    _forced(path, sql)
    verdict, codes = _codes(path)
    assert verdict == "corrupt" and "head_mismatch" in codes
    quick = check_path(path, sid, quick=True)
    assert quick.verdict == "corrupt"
    # the writer reads and rewrites the row with id 1: it opens a recovered file, never this one
    w = kernel.open_session(sessions_dir, sid)
    try:
        w.set_status("running")
        w.emit(Event("tool_result", Producer("tool", "shell", "2.0.0"), b"after"))
        w.set_status("completed")
    finally:
        w.close()
    assert _codes(path)[0] == "ok"
    assert path.with_name(path.name + ".corrupt").exists()


@pytest.mark.slow
def test_an_inverted_gap_range_is_no_recorded_gap(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, revision=3, turns=2)
    _forced(path, gap=(1, "events", 10, 3, None, "2026-12-01T02:00:00Z"))
    verdict, codes = _codes(path)
    assert verdict == "corrupt" and "gap_record_damaged" in codes
    assert "chain_gap_recorded" not in codes


@pytest.mark.slow
@pytest.mark.parametrize(
    "gap",
    [
        (1, "bogus", 3, 3, None, "2026-12-01T02:00:00Z"),
        (1, "events", 30, 31, b"x" * 15, "2026-12-01T02:00:00Z"),
        (1, "events", 9, 2, None, "2026-12-01T02:00:00Z"),
    ],
)
def test_recover_does_not_carry_a_gap_row_the_ddl_refuses(
    sessions_dir: Path, gap: tuple[Any, ...]
) -> None:
    sid, path = make_session(sessions_dir, revision=3, turns=2)
    _forced(path, gap=gap)
    assert _codes(path)[0] == "corrupt"
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    assert _codes(path)[0] == "ok"
    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_READONLY
    )
    try:
        assert conn.execute("SELECT count(*) FROM events").fetchall() == [(12,)]
    finally:
        conn.close()


def _event(seq: int, prev: bytes, link: bytes) -> chain.Row:
    values = (seq, b"id%d" % seq, b"t", b"tool_call", b"tool", b"n", b"1", b"1", b"x")
    return chain.Row("events", 0b11111110, values, b"c" * 16, prev, link)


@pytest.mark.slow
def test_many_recorded_gaps_are_matched_without_a_pass_per_break() -> None:
    # a recovered file whose every event lost a bound row: one recorded rows gap per event
    n = chain.MAX_GAP_RECORDS
    sid = "01JCHAINWALK00000000000000"
    links = [genesis(sid)] + [bytes([i % 256, i // 256 % 256]) * 8 for i in range(1, n + 1)]
    records = [
        chain.GapRecord.from_row(
            chain.gap_row(i, chain.Gap("rows", i, i, links[i]), "2026-12-01T02:00:00Z")
        )
        for i in range(1, n + 1)
    ]
    assert all(r.proven for r in records)
    w = chain.ChainWalk(sid, records)
    start = time.monotonic()
    for i in range(1, n + 1):
        w.event(_event(i, links[i - 1], links[i]), [[], [], []])
    elapsed = time.monotonic() - start
    r = w.report
    assert r.chain_failures == n and r.unexplained == 0 and r.links_broken == 0
    assert elapsed < 1.5, f"{elapsed:.1f}s for {n} events and {n} gap records"


def test_orphans_are_matched_by_the_union_of_recorded_spans() -> None:
    at = "2026-12-01T02:00:00Z"
    gaps = [
        chain.Gap("events", 5, 7, None),
        chain.Gap("tail", 10, 12, None),
        chain.Gap("tail", 12, 14, None),
        chain.Gap("rows", 20, 20, b"r" * 16),  # lost a bound row, not its event: no orphans
    ]
    records = [chain.GapRecord.from_row(chain.gap_row(i, g, at)) for i, g in enumerate(gaps, 1)]
    w = chain.ChainWalk(None, records)
    for seq in (4, 5, 7, 8, 10, 13, 14, 15, 20):
        values = (seq, seq, b"p", b"m", 1, 1, 0, 0, 0.5)
        w.unbound(chain.Row("cost_ledger", 0b1100, values, row_hash("cost_ledger", values)))
    assert w.report.orphans_of_recovery == 5  # 5, 7, 10, 13, 14
    assert w.report.unbound_count == 4  # 4, 8, 15, 20


@pytest.mark.slow
@pytest.mark.parametrize("revision", [1, 2])
def test_numbers_a_migrated_tail_gap_records_are_never_issued_again(
    sessions_dir: Path, revision: int
) -> None:
    # a revision-1/2 recovery that lost the last events (and the events counter with them) but
    # kept rows bound to them: step 3 records a tail gap up to those rows' events
    sid, path = make_session(sessions_dir, revision=revision, turns=3)
    edit(
        path,
        "DELETE FROM events WHERE sequence > 13",
        "UPDATE sqlite_sequence SET seq = 13 WHERE name = 'events'",
    )
    recoverylog.append(
        paths.recovery_log_path(sessions_dir),
        {"event": "outcome", "outcome": "recovered", "session_id": sid, "path": str(path)},
    )
    w = kernel.open_session(sessions_dir, sid)  # migrates to the current revision
    try:
        w.set_status("running")
        seq = w.emit(Event("tool_result", Producer("tool", "shell", "2.0.0"), b"after"))
        w.set_status("completed")
    finally:
        w.close()
    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_READONLY
    )
    try:
        gaps = conn.execute("SELECT kind, from_seq, to_seq FROM chain_gaps").fetchall()
    finally:
        conn.close()
    assert gaps == [("tail", 14, 15)]
    assert seq == 16
    verdict, codes = _codes(path)
    assert verdict == "ok", codes
    assert "orphan_of_recovery" in codes


@pytest.mark.slow
def test_rows_bound_past_a_proven_head_are_never_kept(sessions_dir: Path) -> None:
    # A row (its own hash holding) bound to event 40, past the head's last event 12. No row
    # hash names its session, so such a row may be another session's (a copied leaf, issue
    # 29) as well as a write the head's page lost: recovery keeps no row it cannot tie to
    # this session. It used to be kept inside a tail gap up to 40; it is now left out and
    # counted (foreign_ignored), the recovery is never unreadable, and the session goes on.
    sid, path = make_session(sessions_dir, revision=3, turns=2)
    edit(path, "UPDATE cost_ledger SET event_sequence = 40 WHERE sequence = 1")
    reseal(path)
    verdict, codes = _codes(path)
    assert verdict == "corrupt" and "unbound_rows" in codes
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    assert out.foreign_ignored.get("cost_ledger") == 1, out.foreign_ignored
    ledger_events = {r[1] for r in rows.all_rows(path)["cost_ledger"]}
    assert 40 not in ledger_events
    assert _codes(path)[0] == "ok"
    w = kernel.open_session(sessions_dir, sid)
    try:
        w.set_status("running")
        w.emit(Event("tool_result", Producer("tool", "shell", "2.0.0"), b"x"))
        w.set_status("completed")
    finally:
        w.close()
    assert _codes(path)[0] == "ok"
