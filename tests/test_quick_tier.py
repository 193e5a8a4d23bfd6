"""The quick tier's rules (tests/quick_tier.py): tests do not import bench/, the slow marks are
read as pytest reads them, and the module check can fail."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests import quick_tier

BENCH = quick_tier.ROOT / "bench"


def _strings(tree: ast.AST) -> list[str]:
    """The string constants of ``tree`` that are not docstrings."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_tests_do_not_import_bench() -> None:
    scripts = {p.stem for p in BENCH.glob("*.py")} | {"bench"}
    found = []
    for path in sorted(quick_tier.TESTS.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name == Path(__file__).name or "bench" not in text:
            continue  # this file names bench/ to look for it
        tree = ast.parse(text)
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: import {n}" for n in names if n.split(".")[0] in scripts]
        found += [
            f"{path.name}: {s!r}"
            for s in _strings(tree)
            if s == "bench" or (s.startswith("bench/") and s.endswith(".py"))
        ]
    assert found == []


def test_slow_files_are_read_as_pytest_reads_them(request: pytest.FixtureRequest) -> None:
    """Every test collected from a file tests/quick_tier.py calls slow carries the slow mark
    (so skipping those files' collection in the quick tier deselects nothing else)."""
    wrong = [
        item.nodeid
        for item in request.session.items
        if quick_tier.slow_file(Path(item.path)) and item.get_closest_marker("slow") is None
    ]
    assert wrong == []


def test_slow_file_reads_the_module_mark(tmp_path: Path) -> None:
    cases = {
        "pytestmark = pytest.mark.slow\n": True,
        "pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings('x')]\n": True,
        "pytestmark = pytest.mark.filterwarnings('x')\n": False,
        "@pytest.mark.slow\ndef test_a():\n    pass\n": False,
        "def f():\n    pytestmark = pytest.mark.slow\n": False,
    }
    for i, (text, slow) in enumerate(cases.items()):
        path = tmp_path / f"test_{i}.py"
        path.write_text("import pytest\n" + text)
        assert quick_tier.slow_file(path) is slow, text


def test_the_module_check_names_what_is_missing() -> None:
    every = quick_tier.modules()
    assert {"agentdb", "agentdb.cli.main", "agentdb.db", "agentdb.checks"} <= set(every)
    assert len(every) == len(set(every)) == len(list(quick_tier.SRC.rglob("*.py")))
    assert quick_tier.missing(set(every)) == []
    assert quick_tier.missing(set(every) - {"agentdb.db"}) == ["agentdb.db"]
    assert quick_tier.missing(set(every) - {"agentdb.man"}) == []  # a docstring, no code
