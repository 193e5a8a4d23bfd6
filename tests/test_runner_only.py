"""Tests run the command line through tests/runner.py only (issue 9): no other test module
imports ``agentdb.cli.main``'s ``main``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
# runner.py is the one runner; fuzz/driver.py is a child process that calls main() directly,
# with stdout and stderr sent to files, and imports nothing from agentdb at top level.
ALLOWED = {TESTS / "runner.py", TESTS / "fuzz" / "driver.py"}


def _imports_main(tree: ast.AST) -> list[int]:
    """Lines where ``main`` of agentdb.cli.main (or that module itself) is imported."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = {a.name for a in node.names}
            if node.module in ("agentdb.cli.main", "agentdb.cli") and names & {"main", "*"}:
                lines.append(node.lineno)
        elif isinstance(node, ast.Import):
            lines += [node.lineno for a in node.names if a.name == "agentdb.cli.main"]
    return lines


def test_only_the_runner_imports_main() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path in ALLOWED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{path.relative_to(TESTS.parent)}:{n}" for n in _imports_main(tree)]
    assert not found, (
        "use the agentdb fixture, invoke or run_cli from tests/runner.py: " + ", ".join(found)
    )
