"""The writer's open at revision 3 (design §9): the tail the writer is about to extend is proven
on every open — a cut tail, a damaged head, a deleted derived row or a changed session_meta is
damage, and the recovery hook runs for it exactly as for a failed integrity_check. Real files,
real edits through SQLite (no mocks)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from agentdb import db, errors
from agentdb.schema import chainio
from agentdb.store import Event, Producer, SessionWriter, Usage

pytestmark = pytest.mark.slow

TOOL = Producer("tool", "t", "2")
MODEL = Producer("model", "m", "1")


def _session(sessions_dir: Path, n: int = 6) -> tuple[str, Path]:
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    for i in range(n):
        if i % 2:
            usage = Usage("prov", "mod", 10, 20, 0.001 * i)
            w.emit(Event(kind="message", producer=MODEL, payload=b"m%d" % i, usage=usage))
        else:
            w.emit(Event(kind="tool_call", producer=TOOL, payload=b"t%d" % i))
    w.close()
    return w.session_id, w.path


def _edit(path: Path, sql: str) -> None:
    """A naive edit: plain SQL through SQLite, no hash recomputed."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute(sql)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


EDITS: dict[str, str] = {
    "tail cut": "DELETE FROM events WHERE sequence = (SELECT max(sequence) FROM events)",
    "head damaged": "UPDATE session_chain SET event_count = event_count + 1",
    "head deleted": "DELETE FROM session_chain",
    "cost row deleted": "DELETE FROM cost_ledger WHERE sequence = 1",
    "profile changed": "UPDATE session_meta SET profile = 'q'",
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_damaged_tail_is_damage_on_open(sessions_dir: Path, edit: str) -> None:
    sid, path = _session(sessions_dir)
    _edit(path, EDITS[edit])
    conn = db.open_writer(path)
    try:
        assert not chainio.verify_quick(conn).ok  # integrity_check alone sees none of them
        assert db.integrity_problems(conn) == []
    finally:
        conn.close()
    with pytest.raises(errors.Corrupt, match="chain does not prove its tail"):
        SessionWriter.open(sessions_dir, sid)
    calls: list[tuple[Path, str]] = []

    def hook(p: Path, s: str) -> None:
        calls.append((p, s))  # salvages nothing: the file stays damaged

    with pytest.raises(errors.Corrupt, match=f"agentdb recover {sid}"):
        SessionWriter.open(sessions_dir, sid, recover=hook)
    assert calls == [(path, sid)]


def test_a_healthy_file_opens_and_extends_its_chain(sessions_dir: Path) -> None:
    sid, path = _session(sessions_dir)
    w = SessionWriter.open(sessions_dir, sid)
    try:
        assert w.revision == 3
        w.emit(Event(kind="tool_call", producer=TOOL, payload=b"after"))
    finally:
        w.close()
    conn = db.open_writer(path)
    try:
        report = chainio.verify_full(conn)
        assert report.ok, report.problems
        assert report.rows["events"] == 7
    finally:
        conn.close()


def test_a_changed_middle_row_is_left_to_check(sessions_dir: Path) -> None:
    """§9: the open proves the tail, not every row (a full walk per open costs 5-8x
    integrity_check); appending beside a damaged middle row hides nothing — the full walk
    still finds exactly that row afterwards."""
    sid, path = _session(sessions_dir)
    _edit(path, "UPDATE cost_ledger SET cost_usd = 9.0 WHERE sequence = 1")  # event 2's row
    w = SessionWriter.open(sessions_dir, sid)
    try:
        w.emit(Event(kind="tool_call", producer=TOOL, payload=b"after"))
    finally:
        w.close()
    conn = db.open_writer(path)
    try:
        report = chainio.verify_full(conn)
        assert report.row_failures == [("cost_ledger", 1)]
        assert report.problems == ["row_hash_mismatch"]
    finally:
        conn.close()


def test_the_tail_is_proven_after_the_kernels_judge_too(sessions_dir: Path) -> None:
    """Under the connection that will write, after any judge: a judge that says ok (here one
    that looks at nothing) does not let a cut tail be extended."""
    sid, path = _session(sessions_dir)
    _edit(path, EDITS["tail cut"])
    with pytest.raises(errors.Corrupt, match="chain does not prove its tail"):
        SessionWriter.open(sessions_dir, sid, judge=lambda p, s: None)
