"""What the writer refuses about a session's life and lineage, and the modes it leaves."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentdb import errors
from agentdb.schema import enums
from agentdb.store import Event, Producer, SessionWriter
from tests.rows import all_rows
from tests.support import WriterProcess, make_session

TOOL = Producer("tool", "shell", "1.0")


@pytest.mark.slow
@pytest.mark.parametrize("status", sorted(enums.TERMINAL_STATUSES))
def test_emit_into_a_terminal_session_raises(sessions_dir: Path, status: str) -> None:
    sid, path = make_session(sessions_dir, turns=1, status="running")
    with SessionWriter.open(sessions_dir, sid) as w:
        w.set_status(status)
        before = all_rows(path)["events"]
        with pytest.raises(errors.SessionEnded) as got:
            w.emit(Event("tool_result", TOOL, b"late"))
        assert "terminal" in str(got.value)
        with pytest.raises(errors.SessionEnded):
            w.emit_batch([Event("tool_result", TOOL, b"late")])
    assert all_rows(path)["events"] == before
    with SessionWriter.open(sessions_dir, sid) as w, pytest.raises(errors.SessionEnded):
        w.emit(Event("tool_result", TOOL, b"after reopening the file"))  # read from the file


@pytest.mark.slow
@pytest.mark.parametrize("status", sorted(enums.REOPENABLE_STATUSES))
def test_completed_or_cancelled_needs_the_reopen_first(sessions_dir: Path, status: str) -> None:
    sid, path = make_session(sessions_dir, turns=1, status=status)
    n = len(all_rows(path)["events"])
    with SessionWriter.open(sessions_dir, sid) as w:
        with pytest.raises(errors.SessionEnded) as got:
            w.emit(Event("tool_result", TOOL, b"x"))
        assert "set_status('running')" in str(got.value)
        w.set_status("running")  # ResumeSession
        assert w.emit(Event("tool_result", TOOL, b"x")) == n + 1
        w.set_status(status)
        with pytest.raises(errors.SessionEnded):
            w.emit(Event("tool_result", TOOL, b"y"))
    assert len(all_rows(path)["events"]) == n + 1


def test_a_session_cannot_be_its_own_parent(sessions_dir: Path) -> None:
    sid = "01J0000000000000000000000A"
    with pytest.raises(errors.InvalidLineage):
        SessionWriter.create(
            sessions_dir, profile="p", session_id=sid, parent_session_id=sid, depth=1
        )
    assert list(sessions_dir.iterdir()) == []  # nothing created


@pytest.mark.slow
def test_a_childs_depth_is_its_parents_plus_one(sessions_dir: Path) -> None:
    parent, _ = make_session(sessions_dir, turns=1, status="running", depth=2)
    for wrong in (0, 2, 4):
        with pytest.raises(errors.InvalidLineage) as got:
            SessionWriter.create(sessions_dir, profile="p", parent_session_id=parent, depth=wrong)
        assert "3" in str(got.value)
    assert len(list(sessions_dir.glob("*.sqlite"))) == 1  # nothing created
    # beside the parent's live writer (in this process), too
    with SessionWriter.open(sessions_dir, parent) as pw:
        child = SessionWriter.create(sessions_dir, profile="p", parent_session_id=parent, depth=3)
        child.close()
        pw.emit(Event("tool_result", TOOL, b"parent goes on"))
    # a parent whose file cannot be read (pruned, elsewhere): the kernel's count stands
    gone = "01J0000000000000000000000B"
    SessionWriter.create(sessions_dir, profile="p", parent_session_id=gone, depth=7).close()


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.mark.slow
def test_writer_tightens_a_readable_file_and_its_wal(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=1, status="running")
    writer = WriterProcess(sessions_dir, sid)  # killed mid-stream: its -wal stays behind
    writer.wait_for_commits(5)
    writer.stop()
    wal, shm = path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")
    assert wal.exists()
    for p in (path, wal, shm):
        os.chmod(p, 0o644)
    with SessionWriter.open(sessions_dir, sid) as w:
        assert {p.name: _mode(p) for p in (path, wal, shm)} == {
            path.name: 0o600,
            wal.name: 0o600,
            shm.name: 0o600,
        }
        w.emit(Event("tool_result", TOOL, b"x"))
    # a file that others could write is still refused, not quietly adopted
    os.chmod(path, 0o666)
    with pytest.raises(errors.InsecureFile):
        SessionWriter.open(sessions_dir, sid)
    assert _mode(path) == 0o666
