"""A real ``pip install`` puts the man pages where ``man agentdb-check`` finds them, and the JSON
Schemas inside the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_pip_install_puts_man_pages_on_the_man_path(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a clean copy: the build never writes into the checkout
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".tools", "*.egg-info", "build", "__pycache__"
        ),
        symlinks=True,
    )
    prefix = tmp_path / "prefix"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            # Without it pip uninstalls the running environment's own agentdb (the editable
            # install the rest of the suite imports) before installing into the prefix.
            "--ignore-installed",
            "--prefix",
            str(prefix),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    env_clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    still = subprocess.run(
        [sys.executable, "-c", "import agentdb.cli.main"], capture_output=True, env=env_clean
    )
    assert still.returncode == 0, "the install into the prefix broke this environment's agentdb"
    pages = sorted(p.name for p in (prefix / "share" / "man" / "man1").glob("agentdb*.1"))
    assert "agentdb-check.1" in pages and "agentdb-status.1" in pages
    assert pages == sorted(p.name for p in (ROOT / "src" / "agentdb" / "man").glob("*.1"))
    env = {"PATH": f"{prefix / 'bin'}:/usr/bin:/bin", "MANPAGER": "cat", "MANWIDTH": "100"}
    w = subprocess.run(["man", "-w", "agentdb-check"], capture_output=True, text=True, env=env)
    assert w.returncode == 0, w.stderr
    assert Path(w.stdout.strip()) == prefix / "share" / "man" / "man1" / "agentdb-check.1"
    page = subprocess.run(["man", "agentdb-check"], capture_output=True, text=True, env=env)
    for section in ("EXAMPLES", "ENVIRONMENT", "FILES", "SEE ALSO"):
        assert section in page.stdout
    assert list(prefix.glob("lib/python*/site-packages/agentdb/schemas/check.json"))
