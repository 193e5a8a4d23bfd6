"""agentdb events --follow: new events as a live writer (a real subprocess) commits them;
read-only polling that creates nothing and blocks nothing; ends with the session (exit 0) or
on Ctrl-C (exit 130)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import SRC, make_session

# A kernel-like writer driven line by line on stdin: "emit N" commits N events (one
# transaction each) and answers the last sequence; "end" sets the status completed and closes.
_DRIVEN = """
import sys, json
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb.store import SessionWriter, Event, Producer
w = SessionWriter.open(Path(sys.argv[1]), sys.argv[2])
if w.info().status != "running":
    w.set_status("running")
p = Producer("tool", "shell", "2.0.0")
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "emit":
        for i in range(int(cmd[1])):
            seq = w.emit(Event("tool_result", p, json.dumps({"i": i}).encode()))
        print(seq, flush=True)
    elif cmd[0] == "end":
        w.set_status("completed")
        w.close()
        print("ended", flush=True)
        break
"""


class Driven:
    def __init__(self, sessions: Path, sid: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVEN, str(sessions), sid, str(SRC)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.ask("") == "ready"

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


AGENTDB = [sys.executable, "-m", "agentdb.cli.main"]


class Follower:
    """``agentdb events --follow ID --json`` in a real process; its lines as they come."""

    def __init__(self, sessions: Path, sid: str, *extra: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        self.proc = subprocess.Popen(
            [*AGENTDB, "--sessions-dir", str(sessions), "events", "--follow", sid, *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.buf = b""
        self.lines: list[str] = []

    def read_until(self, predicate, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
        assert self.proc.stdout is not None
        end = time.monotonic() + timeout
        while not predicate(self.lines):
            left = end - time.monotonic()
            assert left > 0, f"timed out; got {self.lines[-3:]}"
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, f"the follower ended early: {self.proc.wait()}"
                self.buf += chunk
                *done, self.buf = self.buf.split(b"\n")
                self.lines += [d.decode() for d in done]

    def sequences(self) -> list[int]:
        return [json.loads(line)["sequence"] for line in self.lines]

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        out, err = self.proc.communicate(timeout=timeout)
        self.lines += (self.buf + out).decode().splitlines()
        self.buf = b""
        return self.proc.returncode, err.decode()


def listing(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def test_follow_prints_new_events_and_ends_with_the_session(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sid, _ = make_session(sessions, turns=2, status=None)  # left running
    writer = Driven(sessions, sid)
    follower: Follower | None = None
    try:
        first = int(writer.ask("emit 3"))
        before = listing(sessions)  # the writer's -wal and -shm are there
        follower = Follower(sessions, sid, "--json")
        follower.read_until(lambda lines: len(lines) >= first)  # the events so far
        assert follower.sequences() == list(range(1, first + 1))
        # the writer is never blocked: it commits while the follower polls
        for _ in range(3):
            last = int(writer.ask("emit 5"))
            follower.read_until(lambda lines, last=last: len(lines) >= last)
        assert listing(sessions) == before  # the follower created nothing there
        assert follower.proc.poll() is None  # still following a running session
        assert writer.ask("end") == "ended"
        code, err = follower.finish()
        assert code == 0, err
        assert follower.sequences() == list(range(1, last + 1))  # each once, in order
        assert listing(sessions) == {f"{sid}.sqlite"}  # the writer checkpointed and left
    finally:
        writer.close()
        if follower is not None and follower.proc.poll() is None:
            follower.proc.kill()
            follower.proc.wait()


def test_follow_ends_on_ctrl_c_with_130(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sid, _ = make_session(sessions, turns=1, status=None)
    writer = Driven(sessions, sid)
    try:
        last = int(writer.ask("emit 2"))
        follower = Follower(sessions, sid)  # the table form: a header, then a line per event
        follower.read_until(lambda lines: len(lines) >= last + 1)
        assert follower.lines[0].split() == [
            "seq",
            "timestamp",
            "kind",
            "producer",
            "bytes",
            "payload",
        ]
        assert follower.lines[-1].split()[0] == str(last)
        follower.proc.send_signal(signal.SIGINT)
        code, err = follower.finish()
        assert code == 130, err
        assert "Traceback" not in err
    finally:
        writer.close()


def test_follow_of_an_ended_session_prints_it_and_exits_0(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sid, _ = make_session(sessions, turns=2)  # completed
    follower = Follower(sessions, sid, "--json")
    code, err = follower.finish(timeout=60)
    assert code == 0, err
    assert follower.sequences() == list(range(1, 13))


def test_follow_says_when_no_process_holds_a_running_session(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sid, _ = make_session(sessions, turns=1, status=None)  # running, nobody writing
    follower = Follower(sessions, sid, "--json")
    follower.read_until(lambda lines: len(lines) >= 6)
    assert follower.proc.stderr is not None
    deadline = time.monotonic() + 30
    err = b""
    while b"no process has the session open" not in err and time.monotonic() < deadline:
        ready, _, _ = select.select([follower.proc.stderr], [], [], 1)
        if ready:
            err += os.read(follower.proc.stderr.fileno(), 4096)
    assert b"no process has the session open" in err
    assert follower.proc.poll() is None  # following anyway, like tail -f
    follower.proc.send_signal(signal.SIGINT)
    code, _ = follower.finish()
    assert code == 130
