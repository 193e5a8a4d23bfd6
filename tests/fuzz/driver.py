"""Run agentdb command lines on one case, each in a forked child of one process.

``python -m tests.fuzz.driver PLAN.json`` imports every agentdb module once (whichever
``agentdb`` is first on ``PYTHONPATH``: this tree's or an old commit's), then for each step
forks a child that runs the console entry point ``agentdb.cli.main.main(argv)`` with stdout
and stderr sent to files, exactly as the installed script would (an exception that escapes it
prints its traceback and exits 1, like Python does). A child still running after ``guard``
seconds is killed (a hang). Between steps the driver can record a listing of the sessions
directory (name, size, mode, SHA-1). A step ``["kernel-open", DIR, ID]`` runs the kernel's
open (:func:`kernel_open`) instead. The result is one JSON document on stdout. This module
imports nothing from agentdb at top level (the agentdb under test is the one on
``PYTHONPATH`` when :func:`main` runs).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def listing(directory: Path) -> dict[str, list[object]]:
    out: dict[str, list[object]] = {}
    for p in sorted(directory.iterdir()) if directory.is_dir() else []:
        st = os.lstat(p)
        digest = hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[p.name] = [st.st_size, oct(st.st_mode & 0o777), digest]
    return out


def kernel_open(sessions_dir: str, session_id: str) -> int:
    """The kernel's open (automatic recovery included), as a harness would call it: a
    SessionUnusable (or any agentdb error) is an answer, one line on stderr; exit 1."""
    from agentdb import errors
    from agentdb.kernel import open_session

    try:
        open_session(Path(sessions_dir), session_id).close()
    except errors.AgentdbError as e:
        print(str(e).splitlines()[0] if str(e) else type(e).__name__, file=sys.stderr)
        return 1
    return 0


def _child(argv: list[str], out: Path, err: Path) -> None:
    fo = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    fe = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fo, 1)
    os.dup2(fe, 2)
    rc = 1
    try:
        if argv[0] == "kernel-open":
            rc = kernel_open(argv[1], argv[2])
        else:
            from agentdb.cli.main import main

            rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
        rc = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(rc)


def run_step(argv: list[str], work: Path, n: int, guard: float) -> dict[str, Any]:
    out, err = work / f"{n}.out", work / f"{n}.err"
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(argv, out, err)
    hung = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - t0 > guard:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            hung = True
            break
        time.sleep(0.01)
    rc = os.waitstatus_to_exitcode(status)
    res = {
        "argv": argv,
        "rc": rc,
        "hung": hung,
        "seconds": round(time.monotonic() - t0, 3),
        "stdout": out.read_text(errors="replace"),
        "stderr": err.read_text(errors="replace"),
    }
    out.unlink()
    err.unlink()
    return res


def _preload() -> None:
    """Import every agentdb module once, here, so each forked step starts with them loaded
    (a child that imported the CLI itself paid most of a step's CPU time for it). The parent
    runs no agentdb code: each child still starts from a state no other step touched."""
    import importlib
    import pkgutil

    import agentdb

    for m in pkgutil.walk_packages(agentdb.__path__, "agentdb."):
        try:
            importlib.import_module(m.name)
        except Exception:  # an optional module (a missing extra): the child imports what it needs
            continue


def main() -> int:
    plan = json.loads(Path(sys.argv[1]).read_text())
    _preload()
    work = Path(plan["work"])
    work.mkdir(parents=True, exist_ok=True)
    sessions = Path(plan["sessions_dir"])
    results: list[dict[str, Any]] = []
    for n, step in enumerate(plan["steps"]):
        if step == "listing":
            results.append({"listing": listing(sessions)})
        else:
            results.append(run_step(step, work, n, plan.get("guard", 60)))
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
