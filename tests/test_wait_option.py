"""--wait on recover and prune: a session someone has open is waited for, then acted on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.salvage import corpus
from tests.support import SRC, make_session

pytestmark = pytest.mark.slow

# A reader that keeps the session open for a while, then closes it.
_BRIEF_HOLDER = """
import sys, time, apsw
c = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)
c.execute("SELECT count(*) FROM sqlite_schema").fetchall()
print("ready", flush=True)
time.sleep(float(sys.argv[2]))
c.close()
"""


def _hold_for(path: Path, seconds: float) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", _BRIEF_HOLDER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _cli(sessions: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )


def test_recover_waits_for_a_reader_to_close(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    sid, path = corpus.build_base(sessions, turns=8)
    corpus.d_zeroed_page(path)
    holder = _hold_for(path, 600)
    try:
        r = _cli(sessions, "recover", sid, "--json")
        assert r.returncode == 1
        assert json.loads(r.stdout)["sessions"][0]["outcome"] == "skipped_live"
        r = _cli(sessions, "recover", sid, "--json", "--wait", "0.5")
        assert json.loads(r.stdout)["sessions"][0]["outcome"] == "skipped_live"
    finally:
        holder.kill()
        holder.wait()
    holder = _hold_for(path, 1.5)
    t = time.monotonic()
    r = _cli(sessions, "recover", sid, "--json", "--wait", "60")
    holder.wait()
    assert json.loads(r.stdout)["sessions"][0]["outcome"] == "recovered", r.stdout + r.stderr
    assert time.monotonic() - t < 60


def test_prune_waits_for_a_reader_to_close(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    sid, path = make_session(sessions, turns=1)
    holder = _hold_for(path, 600)
    try:
        r = _cli(sessions, "prune", sid, "--yes", "--json")
        assert r.returncode == 1
        codes = {c["code"] for x in json.loads(r.stdout)["refused"] for c in x["reasons"]}
        assert "live" in codes and path.exists()
    finally:
        holder.kill()
        holder.wait()
    holder = _hold_for(path, 1.5)
    r = _cli(sessions, "prune", sid, "--yes", "--json", "--wait", "60")
    holder.wait()
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["removed"] == [sid]
    assert not path.exists()


def test_wait_rejects_nonsense(tmp_path: Path) -> None:
    for cmd in (["recover", "--all"], ["prune", "--until", "0s", "--dry-run"]):
        for bad in ("-1", "nan", "inf", "1e9"):
            r = _cli(tmp_path, *cmd, "--wait", bad)
            assert r.returncode == 2, (cmd, bad, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1 and "--wait" in r.stderr
