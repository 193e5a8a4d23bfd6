"""agentdb recover: salvage damaged sessions into replacements, keep originals as .corrupt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentdb import fsutil
from agentdb.jobs import demo
from tests.runner import run_cli, state_options


@pytest.mark.slow
def test_recovery_log_follows_sessions_dir_parent(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    moved = tmp_path / "elsewhere" / "deeper" / "sessions"
    moved.parent.mkdir(parents=True)
    state.sessions_dir.rename(moved)
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg-state")}
    damaged = state.by_role("damaged").session_id
    r = run_cli("--sessions-dir", str(moved), "recover", damaged, "--json", env=env)
    assert r.returncode == 0, r.stderr
    log = moved.parent / "recovery.log"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines and all(e["session_id"] == damaged for e in lines)
    assert not (tmp_path / "xdg-state").exists()
    assert not (tmp_path / "d" / "state" / "agent" / "recovery.log").exists()


@pytest.mark.slow
def test_corrupt_names_never_overwritten(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    damaged = state.by_role("damaged")
    taken = [damaged.path.with_name(damaged.path.name + s) for s in (".corrupt", ".corrupt.1")]
    for i, p in enumerate(taken):
        p.write_bytes(f"an older copy {i}".encode())
    before = {p: p.read_bytes() for p in taken}
    r = run_cli(*state_options(state), "recover", damaged.session_id, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["sessions"][0]
    assert out["outcome"] == "recovered"
    assert out["corrupt_path"] == str(damaged.path) + ".corrupt.2"
    assert {p: p.read_bytes() for p in taken} == before


def test_recover_json_shape(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    r = run_cli(*state_options(state), "recover", "--all", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    outs = {s["session_id"]: s for s in doc["sessions"]}
    assert set(outs) == {s.session_id for s in state.sessions}
    for s in outs.values():
        assert s["outcome"] in ("recovered", "healthy", "unreadable", "skipped_live", "refused")
        assert s["corrupt_path"] is None or isinstance(s["corrupt_path"], str)
        assert isinstance(s["tables"], dict)
    got = outs[state.by_role("damaged").session_id]
    assert got["outcome"] == "recovered" and Path(got["corrupt_path"]).is_file()
    assert all(isinstance(v["salvaged"], int) for v in got["tables"].values())
    assert got["tables"]["events"]["salvaged"] > 0
    assert "damaged" in r.stderr  # never silent
    # recover of a healthy session: 0, outcome healthy
    r = run_cli(*state_options(state), "recover", state.by_role("recent").session_id, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["sessions"][0]["outcome"] == "healthy"


@pytest.mark.slow
def test_scratch_left_by_a_killed_job_is_swept(tmp_path: Path) -> None:
    """Private scratch copies live in $XDG_CACHE_HOME/agentdb/tmp; a killed job's are removed by
    the next job (their pid no longer runs), a running job's are left alone."""
    state = demo.build(tmp_path / "d")
    cache = tmp_path / "cache-home"
    base = cache / "agentdb" / "tmp"
    base.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = fsutil.host_tag()  # scratch names carry the host: another host's are never swept
    stale = base / f"agentdb-recover-{host}-{dead.pid}-abc123"
    stale.mkdir()
    (stale / "copy.sqlite").write_bytes(b"private bytes")
    alive = base / f"agentdb-recover-{host}-{os.getpid()}-def456"
    alive.mkdir()
    sid = state.by_role("damaged").session_id
    r = run_cli(*state_options(state), "recover", sid, env={"XDG_CACHE_HOME": str(cache)})
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and alive.exists()
    assert sorted(p.name for p in base.iterdir()) == [alive.name]
