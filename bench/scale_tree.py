"""Build a sessions directory of N sessions, for bench_scale (and profiling).

Every session is written by the product's own writer (``SessionWriter``, ``demo._turns``:
context, message with cost, plan with items, tool call and result, apply per turn) in one of
four shapes: 1, 5, 15 or 33 model turns (7 to 199 events), ending ``completed``, ``failed`` or
``cancelled``. A byte copy of a template under a new id is not a valid session since revision 3
(the chain starts from a hash of the session id), so each is written natively, by ``jobs``
processes (~15 ms of CPU a session). The ULIDs start on 2025-01-01, a minute apart: with
``--older-than 1d`` every session is selected. ``link`` makes a smaller tree of hard links to
the first N files of a bigger one (read-only benches only: the files are shared).

Usage: .venv/bin/python bench/scale_tree.py DIR N [JOBS]
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
from pathlib import Path

import ulid

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdb import fsutil
from agentdb.jobs import demo
from agentdb.store import SessionWriter

SHAPES = ((1, "completed"), (5, "failed"), (15, "completed"), (33, "cancelled"))
STAGE = "/dev/shm" if os.path.isdir("/dev/shm") else None
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)


def session_id(i: int) -> str:
    """The i-th session's id: its minute, and ``i`` as the random part (the same every run)."""
    ms = int((T0 + dt.timedelta(minutes=i)).timestamp() * 1000)
    return str(ulid.ULID.from_bytes(ms.to_bytes(6, "big") + i.to_bytes(10, "big")))


def _write(sessions_dir: Path, lo: int, hi: int) -> None:
    # written in a RAM staging directory (the writer's fsyncs cost nothing there), then copied
    # into place without fsync: 3x faster than writing in place on this disk
    stage = Path(tempfile.mkdtemp(prefix="agentdb-scale-", dir=STAGE))
    try:
        for i in range(lo, hi):
            turns, status = SHAPES[i % len(SHAPES)]
            sid = session_id(i)
            dest = sessions_dir / f"{sid}.sqlite"
            if dest.exists():
                continue
            w = SessionWriter.create(stage, profile=("coder", "reviewer")[i % 2], session_id=sid)
            began = T0 + dt.timedelta(minutes=i)
            model = demo.MODEL_CACHED if i % 3 else demo.MODEL_OLD
            demo._turns(w, model, turns, seed=i % 97, at=began)
            w.set_status(status, at=demo._iso(began + dt.timedelta(hours=1)))  # type: ignore[arg-type]
            w.close()
            fd = os.open(dest, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                os.write(fd, w.path.read_bytes())
            finally:
                os.close(fd)
            w.path.unlink()
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def build(sessions_dir: Path, plugin_cache: Path, n: int, jobs: int = 2) -> None:
    """N sessions in ``sessions_dir`` (created; those already there are kept) and a plugin
    cache holding one of the versions the sessions use."""
    fsutil.ensure_dir(sessions_dir)
    (plugin_cache / "model" / "anthropic" / "1.4.0").mkdir(parents=True, exist_ok=True)
    step = -(-n // jobs)
    procs = [
        mp.Process(target=_write, args=(sessions_dir, lo, min(n, lo + step)))
        for lo in range(0, n, step)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0


def link(big: Path, small: Path, n: int) -> None:
    """``small``: hard links to the first ``n`` session files of ``big``, in id order."""
    fsutil.ensure_dir(small)
    for name in sorted(os.listdir(big))[:n]:
        if not (small / name).exists():
            os.link(big / name, small / name)


if __name__ == "__main__":
    root = Path(sys.argv[1])
    jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    build(root / "sessions", root / "plugins", int(sys.argv[2]), jobs)
