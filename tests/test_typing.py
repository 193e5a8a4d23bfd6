"""The kernel API's kinds, statuses, categories and decisions, and every job's outcomes and
verdicts, are ``Literal`` types: a typo is a type error, found by mypy before any file is
written. The test runs the real mypy on two small programs: one with typos (each must be
reported, on its line) and the same program spelled right (no error at all)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("mypy")

SRC = Path(__file__).resolve().parents[1] / "src"

PROGRAM = """
from agentdb.checks.codes import finding
from agentdb.results import Finding, SessionCheck
from agentdb.store import Event, PlanItem, Producer, SessionWriter
from agentdb.jobs.migrate import MigrationOutcome
from agentdb.salvage import RecoveryOutcome
from pathlib import Path


def kernel(w: SessionWriter) -> None:
    w.emit(Event({kind!r}, Producer({category!r}, "shell", "1.0.0"), b"x"))  # line 11
    w.set_status({status!r})  # line 12
    PlanItem("t", "c", "p", "bash", {decision!r}, "rule")  # line 13


def results() -> None:
    SessionCheck("01J9Z8Q4N5X7W3V2T6R8Y0P1KM", Path("x"), {verdict!r})  # line 17
    Finding("code", "x.sqlite: problem", {severity!r})  # line 18
    MigrationOutcome("01J9Z8Q4N5X7W3V2T6R8Y0P1KM", 1, 2, {migrated!r})  # line 19
    RecoveryOutcome("01J9Z8Q4N5X7W3V2T6R8Y0P1KM", {recovered!r}, "x")  # line 20
"""

RIGHT = dict(
    kind="message",
    category="tool",
    status="completed",
    decision="deny",
    verdict="needs_migration",
    severity="warning",
    migrated="migrated",
    recovered="recovered",
)
TYPOS = dict(
    kind="mesage",
    category="tools",
    status="complete",
    decision="denied",
    verdict="needs-migration",
    severity="fatal",
    migrated="migrate",
    recovered="recover",
)
LINES = dict(
    kind=11,
    category=11,
    status=12,
    decision=13,
    verdict=17,
    severity=18,
    migrated=19,
    recovered=20,
)


def test_typos_in_kinds_statuses_outcomes_and_verdicts_fail_type_checking(tmp_path: Path) -> None:
    right, typos = tmp_path / "right.py", tmp_path / "typos.py"
    right.write_text(textwrap.dedent(PROGRAM.format(**RIGHT)))
    typos.write_text(textwrap.dedent(PROGRAM.format(**TYPOS)))
    assert "line 11" in right.read_text().splitlines()[10]  # the line numbers above hold
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-error-summary",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(right),
            str(typos),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYPATH": str(SRC)},
        timeout=600,
        cwd=tmp_path,
    )
    errors = [line for line in r.stdout.splitlines() if ": error:" in line]
    assert not [e for e in errors if e.startswith("right.py")], r.stdout + r.stderr
    got: dict[int, str] = {}
    for e in errors:
        m = re.match(r"typos\.py:(\d+): error: (.*)", e)
        assert m, e
        got[int(m.group(1))] = got.get(int(m.group(1)), "") + m.group(2)
    for name, line in LINES.items():  # mypy names the literal it refuses
        assert f"'{TYPOS[name]}'" in got.get(line, ""), (name, line, r.stdout)
    assert r.returncode == 1
