"""The quick tier (``pytest -m "not slow"``) and what it must keep.

A test is slow when it carries ``@pytest.mark.slow`` or its file sets
``pytestmark = pytest.mark.slow`` (campaigns over real processes, crash loops, memory ceilings,
shell builds, fuzz replays). The full run (README's test command, .ci/run) still runs every test.

What the quick tier must keep: every module of ``src/agentdb`` imported by the tests it runs
(a module that is only a docstring, such as the man pages' package, has nothing to run).
tests/conftest.py checks it at the end of a quick-tier run of the whole suite (a module no quick
test imports, directly or through the code it runs in-process, fails that run). It is an import
check, not line coverage: a module counts once any quick test file or any code a quick test runs
in this process imported it. Files marked slow as a whole are not even collected by such a run,
so their imports do not count.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "agentdb"
TESTS = ROOT / "tests"


def modules() -> list[str]:
    """Every module of src/agentdb, dotted (a package as its own name)."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


def _is_slow_mark(node: ast.expr) -> bool:
    """``pytest.mark.slow`` (the attribute, not called)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "slow"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "pytest"
    )


@functools.cache
def slow_file(path: Path) -> bool:
    """Whether ``path`` marks all its tests slow: a module-level ``pytestmark`` that is, or is a
    list or tuple holding, ``pytest.mark.slow``."""
    try:
        text = path.read_text(encoding="utf-8")
        if "pytestmark" not in text:
            return False
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False  # let pytest report it
    for stmt in tree.body:
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if not any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            continue
        value = stmt.value
        if value is None:
            continue
        if _is_slow_mark(value):
            return True
        if isinstance(value, (ast.List, ast.Tuple)) and any(map(_is_slow_mark, value.elts)):
            return True
    return False


def _has_code(module: str) -> bool:
    """Whether the module has anything to run besides its docstring (``agentdb.man`` holds only
    data: the pages, read by path)."""
    parts = module.split(".")
    path = SRC.parent.joinpath(*parts)
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    body = ast.parse(path.read_text(encoding="utf-8")).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return bool(body)


def missing(imported: set[str]) -> list[str]:
    """The src/agentdb modules with code that are not in ``imported``."""
    return [m for m in modules() if m not in imported and _has_code(m)]
