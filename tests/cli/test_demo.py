"""agentdb demo: a realistic sample state and a walk-through."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.runner import run_cli


@pytest.mark.slow
def test_demo_creates_private_directories(tmp_path: Path) -> None:
    r = run_cli("demo", str(tmp_path / "d"), "--no-walkthrough", umask=0o022)
    assert r.returncode == 0, r.stderr
    for dirpath, dirnames, _ in os.walk(tmp_path / "d"):
        for name in [".", *dirnames]:
            p = Path(dirpath) / name
            assert stat.S_IMODE(os.lstat(p).st_mode) == 0o700, p


def test_demo_builds_a_sample_state(tmp_path: Path) -> None:
    r = run_cli("demo", "--no-walkthrough", str(tmp_path / "demo"))
    assert r.returncode == 0, r.stderr
    sessions = list((tmp_path / "demo" / "state" / "agent" / "sessions").glob("*.sqlite"))
    assert len(sessions) == 9
    for role in ("parent", "child", "running", "old-revision", "pinned", "damaged"):
        assert role in r.stdout
    # nothing beside the session files: every writer closed cleanly
    others = [
        p.name
        for p in (tmp_path / "demo" / "state" / "agent" / "sessions").iterdir()
        if not p.name.endswith(".sqlite")
    ]
    assert others == []


@pytest.mark.slow
def test_demo_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep me")
    r = run_cli("demo", str(tmp_path))
    assert r.returncode == 2
    assert (tmp_path / "x").read_text() == "keep me"
