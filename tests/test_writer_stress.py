"""Threads x processes: one kernel process writes from many threads while other processes keep
trying to open the same session for writing. Every event the kernel was told it wrote is in
the file, in sequence with no gap; every other opener got SessionBusy naming the kernel's pid;
nothing is damaged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from agentdb import locks
from tests.rows import all_rows
from tests.support import SRC, make_session

pytestmark = pytest.mark.slow

THREADS = 8
EMITS = 40
RIVALS = 3
ATTEMPTS = 15

_KERNEL = r"""
import sys, threading
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb.store import Event, Producer, SessionWriter
threads, emits = int(sys.argv[4]), int(sys.argv[5])
w = SessionWriter.open(Path(sys.argv[1]), sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()  # the rivals are running
got, failed = [], []
def work(i):
    p = Producer("tool", f"t{i}", "1")
    for k in range(emits):
        try:
            if k % 8 == 7:
                pair = [Event("tool_call", p, b"a"), Event("tool_result", p, b"b")]
                got.extend(w.emit_batch(pair))
            else:
                got.append(w.emit(Event("tool_result", p, f"{i}:{k}".encode())))
        except Exception as e:
            failed.append(repr(e))
ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
print(" ".join(map(str, sorted(got))), flush=True)
print("failed", len(failed), failed[:3], flush=True)
sys.stdin.readline()  # stay the holder until the rivals are done
w.close()
"""

_RIVAL = r"""
import sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb import errors, kernel
from agentdb.store import SessionWriter
pids, other = set(), []
stop, n = Path(sys.argv[5]), 0
while n < int(sys.argv[4]) or not stop.exists():
    n += 1
    try:
        opener = kernel.open_session if n % 2 else SessionWriter.open
        w = opener(Path(sys.argv[1]), sys.argv[2])
        other.append("opened")
        w.close()
    except errors.SessionBusy as e:
        pids.add(e.pid)
    except Exception as e:
        other.append(repr(e))
print(sorted(pids), other, flush=True)
"""


def test_one_writer_many_threads_rivals_in_other_processes(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=2, status="running")
    start = len(all_rows(path)["events"])
    stop = str(sessions_dir.parent / "stop")  # rivals keep trying until the kernel is done
    k = subprocess.Popen(
        [sys.executable, "-c", _KERNEL, str(sessions_dir), sid, str(SRC), str(THREADS), str(EMITS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert k.stdin is not None and k.stdout is not None
    try:
        assert k.stdout.readline().strip() == "ready"
        rivals = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _RIVAL,
                    str(sessions_dir),
                    sid,
                    str(SRC),
                    str(ATTEMPTS),
                    stop,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(RIVALS)
        ]
        k.stdin.write("go\n")
        k.stdin.flush()
        seqs = [int(x) for x in k.stdout.readline().split()]
        failed = k.stdout.readline().strip()
        Path(stop).touch()
        for r in rivals:
            out, err = r.communicate(timeout=300)
            assert r.returncode == 0, err
            assert out.strip() == f"[{k.pid}] []", out  # every attempt: SessionBusy, this pid
        holder = locks.probe(path)
        assert holder is not None and holder.lease and holder.pid == k.pid
        k.stdin.write("close\n")
        k.stdin.flush()
        _, err = k.communicate(timeout=60)
        assert k.returncode == 0, err
    finally:
        if k.poll() is None:
            k.kill()
            k.wait()
    assert failed == "failed 0 []", failed
    n = THREADS * (EMITS + EMITS // 8)
    assert seqs == list(range(start + 1, start + n + 1))  # every emit returned, no gap
    stored = [int(r[0]) for r in all_rows(path)["events"]]
    assert stored == list(range(1, start + n + 1))  # zero lost events
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    assert locks.probe(path) is None


_TAKER = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb import errors
from agentdb.store import Event, Producer, SessionWriter
end = time.monotonic() + float(sys.argv[4])
got, busy, other = [], 0, []
p = Producer("tool", "shell", "1")
while time.monotonic() < end:
    try:
        w = SessionWriter.open(Path(sys.argv[1]), sys.argv[2])
    except errors.SessionBusy:
        busy += 1
        time.sleep(0.005)
        continue
    except Exception as e:
        other.append(repr(e))
        continue
    def work():
        for _ in range(5):
            got.append(w.emit(Event("tool_result", p, b"x")))
    ts = [threading.Thread(target=work) for _ in range(2)]
    for t in ts: t.start()
    for t in ts: t.join()
    w.close()
print(" ".join(map(str, got)), flush=True)
print(busy, other, flush=True)
"""


def test_processes_racing_to_open_share_the_file_one_at_a_time(sessions_dir: Path) -> None:
    """Several processes open, write from two threads, close, again and again: they race for
    the lease, one wins each time; no event is lost or doubled and the file stays sound."""
    sid, path = make_session(sessions_dir, turns=1, status="running")
    start = len(all_rows(path)["events"])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _TAKER, str(sessions_dir), sid, str(SRC), "2.5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RIVALS + 1)
    ]
    seqs: list[int] = []
    busy = 0
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        wrote, rest = out.splitlines()
        seqs += [int(x) for x in wrote.split()]
        n_busy, other = rest.split(" ", 1)
        assert other == "[]", other
        busy += int(n_busy)
    print(f"{len(seqs)} events written, {busy} opens refused busy")
    assert seqs  # somebody wrote
    assert sorted(seqs) == list(range(start + 1, start + len(seqs) + 1))  # none doubled
    stored = [int(r[0]) for r in all_rows(path)["events"]]
    assert stored == list(range(1, start + len(seqs) + 1))  # none lost
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
