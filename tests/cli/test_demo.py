"""agentdb demo: a realistic sample state and a walk-through."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runner import run_cli
from tests.support import SRC


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


@pytest.mark.slow
def test_try_it_yourself_lines_run_as_printed(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(SRC)}
    r = subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    m = re.search(r"remove it with `rm -rf (\S+)` when done", out)
    assert m, out[:500]
    root = Path(m.group(1))
    assert root.is_absolute() and root.parent == tmp_path and root.is_dir()
    tail = out.split("Try it yourself", 1)[1].splitlines()[1:]
    lines = [ln.strip() for ln in tail if ln.startswith("  ")]
    assert lines[0].startswith("export XDG_STATE_HOME=/")
    assert f"Remove the demo with: rm -rf {root}" in out
    # an `agentdb` on PATH, as after pip install
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "agentdb"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m agentdb.cli.main "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    body = "\n".join(f'{ln} >/dev/null 2>&1 </dev/null; echo "rc=$?"' for ln in lines)
    run_env = {**env, "PATH": f"{bindir}:/usr/bin:/bin", "MANPAGER": "cat", "PAGER": "cat"}
    for k in ("XDG_STATE_HOME", "XDG_CACHE_HOME"):
        run_env.pop(k, None)
    done = subprocess.run(
        ["bash", "-c", body], capture_output=True, text=True, env=run_env, timeout=300
    )
    codes = [int(c) for c in re.findall(r"rc=(\d+)", done.stdout)]
    assert len(codes) == len(lines)
    for line, code in zip(lines, codes, strict=True):
        if line.startswith("man ") and shutil.which("man") is None:
            continue
        assert code in (0, 1), (line, code)  # 1: the demo still has an interrupted session
    assert (root / "report.html").exists()  # the report line wrote where it said
    assert codes[lines.index("agentdb sessions list")] == 0  # the exported homes were used
