"""The sole writer's lease: a second SessionWriter — from this process or another — is refused
with SessionBusy naming the holder's pid, and the first keeps working; probe reports the lease,
hold refuses it; the lease goes with close, and never to a child process.

Real processes and real locks throughout (the holder is a subprocess unless the test is about
one process)."""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from agentdb import errors, kernel, locks
from agentdb.jobs import demo
from agentdb.salvage import recover_session
from agentdb.store import Event, Producer, SessionReader, SessionWriter
from tests.rows import all_rows
from tests.runner import run_cli
from tests.support import SRC, make_session

TOOL = Producer("tool", "shell", "1.0")

_HOLDER = r"""
import sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb import errors, locks
from agentdb.store import Event, Producer, SessionReader, SessionWriter, Usage
sessions, sid = Path(sys.argv[1]), sys.argv[2]
w = SessionWriter.open(sessions, sid)
p = Producer("tool", "shell", "1.0")
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "emit":
        print(w.emit(Event("tool_result", p, b"x")), flush=True)
    elif cmd == "busy":  # everything a kernel process may do beside its own writer
        w.emit_batch([Event("tool_call", p, b"a"), Event("message", Producer("model", "m", "1"),
                      b"m", usage=Usage("prov", "model", 1, 2, 0.5))])
        w.info()
        w.set_status("completed")
        w.set_status("running")
        with SessionReader.open(sessions, sid) as r:  # the kernel's own reader of its session
            r.info(); r.event_count(); list(r.iter_events())
        assert locks.probe(w.path).pid == __import__("os").getpid()
        try:
            with locks.hold(w.path):
                raise SystemExit("hold succeeded beside the lease")
        except errors.SessionLive:
            pass
        try:
            SessionWriter.open(sessions, sid)
            raise SystemExit("a second writer opened")
        except errors.SessionBusy:
            pass
        child = SessionWriter.create(sessions, profile="sub", parent_session_id=sid,
                                     depth=w.info().depth + 1)
        child.emit(Event("tool_result", p, b"child"))
        child.close()
        print("done", flush=True)
    elif cmd == "close":
        w.close()
        print("closed", flush=True)
        break
"""


class Holder:
    """A SessionWriter in a subprocess, driven line by line."""

    def __init__(self, sessions_dir: Path, sid: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(sessions_dir), sid, str(SRC)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.ask("") == "ready"

    def ask(self, cmd: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if cmd:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        assert line, self.proc.stderr.read() if self.proc.stderr else ""
        return line

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.ask("close") == "closed"
        _, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err


@pytest.fixture
def holder(sessions_dir: Path) -> object:
    sid, path = make_session(sessions_dir, turns=1, status="running")
    h = Holder(sessions_dir, sid)
    yield sid, path, h
    if h.proc.poll() is None:
        h.proc.kill()
        h.proc.wait()


def _pid_on_lease(path: Path) -> int | None:
    """Read the pid byte from outside the holder, with a fresh descriptor."""
    fd = os.open(path, os.O_RDONLY)
    try:
        req = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, locks.LEASE_PID_BYTE, 1, 0)
        ltype, _, _, _, pid = struct.unpack("@hhqqi4x", fcntl.fcntl(fd, fcntl.F_OFD_GETLK, req))
        return None if ltype == fcntl.F_UNLCK else pid
    finally:
        os.close(fd)


def test_lease_bytes_are_outside_sqlite_and_hold() -> None:
    sqlite_range = range(locks.PENDING_BYTE, locks.PENDING_BYTE + locks.LOCK_RANGE)
    for b in (locks.LEASE_BYTE, locks.LEASE_PID_BYTE):
        assert b not in sqlite_range
        assert locks.PENDING_BYTE <= b < locks.PENDING_BYTE + 4096  # the unused pending page


@pytest.mark.slow
def test_second_writer_in_another_process_is_busy_and_the_first_goes_on(
    sessions_dir: Path, holder: tuple[str, Path, Holder]
) -> None:
    sid, path, h = holder
    first = int(h.ask("emit"))
    with pytest.raises(errors.SessionBusy) as got:
        SessionWriter.open(sessions_dir, sid)
    assert got.value.pid == h.proc.pid
    assert f"pid {h.proc.pid}" in str(got.value) and str(path) in str(got.value)
    assert isinstance(got.value, errors.Retryable)
    with pytest.raises(errors.SessionBusy):
        kernel.open_session(sessions_dir, sid)  # the kernel's open, recovery hook and all
    assert [int(h.ask("emit")) for _ in range(3)] == [first + 1, first + 2, first + 3]
    h.close()
    seqs = [int(r[0]) for r in all_rows(path)["events"]]
    assert seqs == list(range(1, first + 4))
    with SessionWriter.open(sessions_dir, sid) as w:  # released on close
        assert w.emit(Event("tool_result", TOOL, b"next")) == first + 4


@pytest.mark.slow
def test_second_writer_in_this_process_is_busy(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=1, status="running")
    w = SessionWriter.open(sessions_dir, sid)
    try:
        n = w.emit(Event("tool_result", TOOL, b"1"))
        with pytest.raises(errors.SessionBusy) as got:
            SessionWriter.open(str(sessions_dir), sid)
        assert got.value.pid == os.getpid()
        assert w.emit(Event("tool_result", TOOL, b"2")) == n + 1  # the first keeps working
        # the failed open closed nothing the first writer relies on: its pid is still readable
        assert _pid_on_lease(path) == os.getpid()
        assert locks.probe(path) == locks.Holder(path.name, os.getpid(), True, lease=True)
    finally:
        w.close()
    assert locks.probe(path) is None
    SessionWriter.open(sessions_dir, sid).close()


@pytest.mark.slow
def test_probe_reports_the_lease_and_jobs_refuse_it(
    sessions_dir: Path, holder: tuple[str, Path, Holder]
) -> None:
    sid, path, h = holder
    got = locks.probe(path)
    assert got is not None and got.lease and got.pid == h.proc.pid
    with pytest.raises(errors.SessionLive) as refused, locks.hold(path):
        pass
    assert str(h.proc.pid) in str(refused.value)
    assert recover_session(sessions_dir, sid).outcome == "skipped_live"
    r = run_cli("--sessions-dir", str(sessions_dir), "prune", sid, "--yes", "--json")
    doc = json.loads(r.stdout)
    assert doc["removed"] == []
    (refused_doc,) = doc["refused"]
    assert "live" in {x["code"] for x in refused_doc["reasons"]}
    h.close()
    assert locks.probe(path) is None


@pytest.mark.slow
def test_nothing_in_the_writers_process_drops_its_pid_lock(
    sessions_dir: Path, holder: tuple[str, Path, Holder]
) -> None:
    """POSIX locks go when their process closes *any* descriptor of the file: after everything
    a kernel does beside its writer (readers of its own session, probe, hold, a refused second
    writer, a child session), the pid and SQLite's own shared lock are still there."""
    sid, path, h = holder
    assert _pid_on_lease(path) == h.proc.pid
    assert h.ask("busy") == "done"
    assert _pid_on_lease(path) == h.proc.pid
    # SQLite's shared lock, too (this is what keeps recover and prune away)
    sqlite_lock = locks._probe_file(path, locks.PENDING_BYTE, locks.LOCK_RANGE)
    assert sqlite_lock is not None and sqlite_lock.pid == h.proc.pid
    assert int(h.ask("emit")) > 0
    h.close()


_CHILD = "import sys; print('started', flush=True); sys.stdin.readline()"


@pytest.mark.slow
def test_a_child_process_does_not_inherit_the_lease(sessions_dir: Path) -> None:
    """A plugin started by the kernel must not keep a dead kernel's session live."""
    sid, path = make_session(sessions_dir, turns=1, status="running")
    w = SessionWriter.open(sessions_dir, sid)
    assert w.lease is not None and w.lease.fd is not None
    flags = fcntl.fcntl(w.lease.fd, fcntl.F_GETFD)
    assert flags & fcntl.FD_CLOEXEC
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        close_fds=False,
        text=True,
    )
    try:
        # Running Python: past exec, where close-on-exec descriptors are closed (a child between
        # fork and the end of exec shares the lease for those microseconds).
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        w.close()
        assert locks.probe(path) is None  # the child holds nothing
        SessionWriter.open(sessions_dir, sid).close()
    finally:
        child.communicate("\n", timeout=30)


@pytest.mark.slow
def test_recovery_hook_does_not_meet_its_own_kernels_lease(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=6, status="running")
    demo.damage_page(path, table="events")
    w = kernel.open_session(sessions_dir, sid)  # recovers, then takes the lease
    try:
        assert w.lease is not None and w.lease.held
        assert os.fstat(w.lease.fd or -1).st_ino == os.stat(path).st_ino  # the replacement's
        seq = w.emit(Event("tool_result", TOOL, b"after recovery"))
        assert locks.probe(path) == locks.Holder(path.name, os.getpid(), True, lease=True)
    finally:
        w.close()
    assert list(sessions_dir.glob(f"{sid}.sqlite.corrupt*"))
    with SessionReader.open(sessions_dir, sid) as r:
        assert r.events(after=seq - 1).rows[0].payload == b"after recovery"


@pytest.mark.slow
def test_create_takes_the_lease(sessions_dir: Path) -> None:
    w = SessionWriter.create(sessions_dir, profile="p")
    try:
        with pytest.raises(errors.SessionBusy):
            SessionWriter.open(sessions_dir, w.session_id)
    finally:
        w.close()


def test_the_lease_never_opens_what_is_not_a_regular_file(sessions_dir: Path) -> None:
    """A FIFO or symlink where the session should be: refused as such, at once, not opened."""
    fifo = sessions_dir / "01J0000000000000000000000F.sqlite"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(errors.NotRegularFile):
        SessionWriter.open(sessions_dir, fifo.name[:26])
    sid, path = make_session(sessions_dir, turns=1, status="running")
    link = sessions_dir / "01J0000000000000000000000S.sqlite"
    link.symlink_to(path)
    with pytest.raises(errors.NotRegularFile):
        SessionWriter.open(sessions_dir, link.name[:26])
    assert locks.probe(path) is None


_OLD_WRITER = r"""
import sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb.store import SessionWriter
w = SessionWriter.open(Path(sys.argv[1]), sys.argv[2], migrate=False)  # a revision-1 writer
print("ready", flush=True)
sys.stdin.readline()
w.close()
"""


@pytest.mark.slow
def test_migrate_never_changes_the_schema_under_a_leaseholder(sessions_dir: Path) -> None:
    """Even with --wait: the writer's next emit would write the old revision's rows."""
    sid, path = make_session(sessions_dir, revision=1)
    p = subprocess.Popen(
        [sys.executable, "-c", _OLD_WRITER, str(sessions_dir), sid, str(SRC)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        r = run_cli("--sessions-dir", str(sessions_dir), "migrate", sid, "--wait", "1", "--json")
        (out,) = json.loads(r.stdout)["sessions"]
        assert (out["outcome"], out["to"]) == ("skipped_live", 1), out
    finally:
        assert p.stdin is not None
        p.stdin.write("close\n")
        p.stdin.flush()
        p.wait(timeout=60)
    r = run_cli("--sessions-dir", str(sessions_dir), "migrate", sid, "--wait", "1", "--json")
    assert json.loads(r.stdout)["sessions"][0]["outcome"] == "migrated", r.stdout + r.stderr
