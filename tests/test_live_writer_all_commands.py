"""Every command, as a real process, beside a kernel-like writer appending to one session.

The writer (``tests.support.WriterProcess``: ``SessionWriter.open`` then one event per
transaction, as fast as it can) must see no error, lose nothing, and its file must never be
reported damaged, renamed, migrated or removed. A second part starts writers while
``recover --all`` and ``prune`` are running over a bigger directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb.jobs import demo
from tests.rows import all_rows
from tests.runner import run_cli
from tests.support import SRC, WriterProcess, make_session, wait_for

pytestmark = pytest.mark.slow

BAD = {"corrupt", "unreadable", "recovered", "migrated", "removed", "insecure", "foreign"}


def _entries(doc: Any, sid: str) -> list[dict[str, Any]]:
    """Every JSON object in ``doc`` that is about session ``sid``."""
    found: list[dict[str, Any]] = []
    if isinstance(doc, dict):
        if doc.get("session_id") == sid:
            found.append(doc)
        for v in doc.values():
            found += _entries(v, sid)
    elif isinstance(doc, list):
        for v in doc:
            found += _entries(v, sid)
    return found


def _docs(stdout: str) -> list[Any]:
    try:
        return [json.loads(stdout)]
    except json.JSONDecodeError:  # JSON lines (events)
        return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def _seqs_gap_free(path: Path) -> list[int]:
    got = [int(r[0]) for r in all_rows(path)["events"]]
    assert got == list(range(1, len(got) + 1))
    return got


def test_every_command_beside_a_live_writer(sessions_dir: Path, tmp_path: Path) -> None:
    for _ in range(3):
        make_session(sessions_dir, turns=2)
    make_session(sessions_dir, turns=2, revision=1)
    live, live_path = make_session(sessions_dir, turns=2, status="running")
    ino = os.stat(live_path).st_ino
    writer = WriterProcess(sessions_dir, live)
    s = ["--sessions-dir", str(sessions_dir)]
    runs: list[tuple[list[str], set[int]]] = [
        (["check", "--all", "--json"], {0, 1}),
        (["check", "--quick", "--jobs", "2", "--json"], {0, 1}),
        (["sessions", "list", "--json"], {0}),
        (["sessions", "show", live, "--json"], {0}),
        (["sessions", "tree", "--json"], {0}),
        (["events", live, "--json"], {0}),
        (["preflight", live, "--json"], {0, 1}),
        (["backup", "--all", "--to", "BACKUP", "--json"], {0}),
        (["migrate", "--all", "--json"], {0}),
        (["recover", "--all", "--json"], {0, 1}),
        (["prune", "--older-than", "0s", "--yes", "--json"], {0, 1}),
        (["plugins", "refs", "--json"], {0}),
    ]
    backups: list[Path] = []
    try:
        assert wait_for(lambda: live_path.with_name(live_path.name + "-wal").exists())
        n = 0
        for args, codes in runs:
            end = time.monotonic() + 1.5
            first = True
            while first or time.monotonic() < end:
                first = False
                n += 1
                argv = [a.replace("BACKUP", str(tmp_path / f"b{n}")) for a in args]
                r = run_cli(*s, *argv)
                assert r.returncode in codes, (argv, r.returncode, r.stderr)
                assert "Traceback" not in r.stderr, r.stderr
                for doc in _docs(r.stdout):
                    for e in _entries(doc, live):
                        for key in ("verdict", "outcome", "error_code"):
                            assert e.get(key) not in BAD, (argv, e)
                if args[0] == "prune":
                    doc = json.loads(r.stdout)
                    assert live not in doc["removed"] + doc["would_remove"]
                    refused = {d["session_id"]: d for d in doc["refused"]}
                    codes_ = {x["code"] for x in refused[live]["reasons"]}
                    assert codes_ & {"live", "running"}, refused[live]
                if args[0] == "backup":
                    backups.append(tmp_path / f"b{n}" / live_path.name)
                # the live file is still the writer's: same name, same inode
                assert os.stat(live_path).st_ino == ino
        assert writer.proc.poll() is None  # still writing
    finally:
        seqs, err = writer.stop()
    assert err == ""
    assert seqs
    stored = _seqs_gap_free(live_path)
    assert set(seqs) <= set(stored)
    assert not list(sessions_dir.glob(f"{live}.sqlite.corrupt*"))
    assert backups
    for copy in backups:
        got = _seqs_gap_free(copy)
        assert set(got) <= set(stored)
        c = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        c.close()


_CLI = [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir"]

_WRITER = r"""
import sys, json
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb import errors, kernel
from agentdb.store import Event, Producer
try:
    w = kernel.open_session(Path(sys.argv[1]), sys.argv[2])
except errors.AgentdbError as e:
    print("error", e.code, flush=True)
    raise SystemExit(0)
p = Producer("tool", "shell", "2.0.0")
if w.info().status != "running":
    w.set_status("running")  # ResumeSession: an ended session takes events after re-opening
print("ready", flush=True)
for n in range(200):
    print(w.emit(Event("tool_result", p, b"x" * 100)), flush=True)
sys.stdin.readline()  # stay open (live) until the test has seen the job finish
w.close()
print("closed", flush=True)
"""


def _kernel(sessions_dir: Path, sid: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(sessions_dir), sid, str(SRC)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(k: subprocess.Popen[str]) -> tuple[str, list[int]]:
    out, err = k.communicate(input="close\n", timeout=300)
    assert k.returncode == 0, err
    # the only thing a kernel may say: that it recovered the session (never silent)
    assert all("has been recovered" in line for line in err.splitlines()), err
    lines = out.split()
    if lines[0] == "error":
        return "error:" + lines[1], []
    assert lines[0] == "ready" and lines[-1] == "closed", out
    return "wrote", [int(x) for x in lines[1:-1]]


def test_writers_starting_while_recover_runs(sessions_dir: Path) -> None:
    ids = []
    for i in range(24):
        sid, p = make_session(sessions_dir, turns=4, status="running")
        if i % 3 == 0:
            demo.damage_page(p, table="events")
        ids.append((sid, p))
    originals = {sid: p.read_bytes() for sid, p in ids}
    job = subprocess.Popen(
        [*_CLI, str(sessions_dir), "recover", "--all", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    kernels = []
    for sid, _ in ids[::2]:  # damaged and healthy ones, opened while the job runs
        kernels.append((sid, _kernel(sessions_dir, sid)))
    job.communicate(timeout=300)
    assert job.returncode in (0, 1)
    for sid, k in kernels:
        what, seqs = _finish(k)
        path = sessions_dir / f"{sid}.sqlite"
        c = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok", sid
        c.close()
        stored = {int(r[0]) for r in all_rows(path)["events"]}
        assert what == "wrote", (sid, what)  # recovered by one of the two, then written
        assert set(seqs) <= stored
        for corrupt in sessions_dir.glob(f"{sid}.sqlite.corrupt*"):
            assert corrupt.read_bytes() == originals[sid]  # no kernel write went there


def test_writers_starting_while_prune_runs(sessions_dir: Path) -> None:
    ids = [make_session(sessions_dir, turns=4)[0] for _ in range(40)]
    job = subprocess.Popen(
        [*_CLI, str(sessions_dir), "prune", "--older-than", "0s", "--yes", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    kernels = [(sid, _kernel(sessions_dir, sid)) for sid in ids[5::3]]
    out, err = job.communicate(timeout=300)
    assert job.returncode in (0, 1), err
    doc = json.loads(out)
    for sid, k in kernels:
        what, seqs = _finish(k)
        path = sessions_dir / f"{sid}.sqlite"
        if sid in doc["removed"]:
            # removed under a kernel that had it open: never; it failed cleanly instead
            assert what.startswith("error"), (sid, what)
            assert not path.exists()
        else:
            assert what == "wrote", (sid, what)  # opened first: prune refused it as live
            refused = {d["session_id"]: d for d in doc["refused"]}
            assert "live" in {x["code"] for x in refused[sid]["reasons"]}
            assert path.exists()
            stored = {int(r[0]) for r in all_rows(path)["events"]}
            assert set(seqs) <= stored
    leftovers = [n for n in os.listdir(sessions_dir) if n.endswith(("-wal", "-shm"))]
    removed_names = {f"{sid}.sqlite" for sid in doc["removed"]}
    assert not [n for n in leftovers if n.rsplit("-", 1)[0] in removed_names]
