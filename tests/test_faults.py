"""faults.point reads the environment as it is when the point is reached: a variable set or
removed after import (``os.environ[...]``, ``monkeypatch.setenv``) or an ``os.environ`` replaced
by a test is seen, although an unarmed point looks at the dictionary behind ``os.environ``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentdb import faults

ROOT = Path(__file__).resolve().parents[1]


def _gate(tmp_path: Path) -> Path:
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "go").touch()  # the pause returns at once; ``reached`` says it was taken
    return gate


def test_a_pause_set_after_import_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = _gate(tmp_path)
    faults.point("p1")  # once unarmed
    monkeypatch.setenv(faults.PAUSE_ENV, f"p1:{gate}")
    faults.point("p2")  # another point: nothing
    assert not (gate / "reached").exists()
    faults.point("p1")
    assert (gate / "reached").exists()
    (gate / "reached").unlink()
    monkeypatch.delenv(faults.PAUSE_ENV)
    faults.point("p1")  # removed: nothing again
    assert not (gate / "reached").exists()
    os.environ[faults.PAUSE_ENV] = f"p1:{gate}"  # set directly, as the crash tests' children do
    try:
        faults.point("p1")
    finally:
        del os.environ[faults.PAUSE_ENV]
    assert (gate / "reached").exists()


def test_a_replaced_environ_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = _gate(tmp_path)
    monkeypatch.setattr(os, "environ", {faults.PAUSE_ENV: f"p1:{gate}"})
    faults.point("p1")
    assert (gate / "reached").exists()


def test_a_fault_set_after_import_kills() -> None:
    child = textwrap.dedent(
        """
        import os
        from agentdb import faults
        faults.point("here")
        os.environ["AGENTDB_FAULT"] = "here"
        faults.point("elsewhere")
        print("alive", flush=True)
        faults.point("here")
        print("not killed", flush=True)
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in (faults.ENV, faults.PAUSE_ENV)}
    env["PYTHONPATH"] = str(ROOT / "src")
    r = subprocess.run(
        [sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == -9, r.stdout + r.stderr
    assert r.stdout == "alive\n"
