"""The floors hold: every import in src/agentdb (function-level imports included) runs down.

The layering is README's "Development" section: cli -> jobs -> checks/salvage -> store/schema ->
db/fileformat -> util -> base. Each part lists the parts it may import; a module that no rule
names is a job (the floor for new operator commands). The test also fails on any import cycle
between modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "agentdb"

BASE = {"paths", "errors", "results"}
UTIL = {
    "fsutil",
    "locks",
    "recoverylog",
    "durations",
    "times",
    "faults",
    "hashing",
    "workers",
    "cores",
    "swap",
    "interrupts",
}

# part -> the parts it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "fileformat": set(),  # format readers stand alone
    "util": {"base"},
    "db": {"util", "base"},
    "schema": {"db", "util", "base"},
    "store": {"schema", "db", "util", "base"},
    "checks": {"schema", "db", "fileformat", "util", "base"},
    "salvage": {"checks", "schema", "db", "fileformat", "util", "base"},
    "jobs": {"checks", "schema", "db", "store", "util", "base", "jobs"},
    "kernel": {"store", "salvage", "checks", "util", "base"},
    "cli": {"jobs", "checks", "salvage", "store", "schema", "db", "util", "base", "kernel"},
    "man": set(),
}


def part_of(module: str) -> str:
    """``agentdb.x.y`` -> its part."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if top in BASE:
        return "base"
    if top in UTIL:
        return "util"
    if top in {"fileformat", "schema", "store", "checks", "salvage", "cli", "db", "kernel", "man"}:
        return top
    return "jobs"


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    names = list(rel.parts)
    if names[-1] == "__init__":
        names.pop()
    return ".".join(names)


def imports_of(path: Path) -> set[str]:
    """Every agentdb module this file imports, at any depth (functions and TYPE_CHECKING too)."""
    return imports_in(module_name(path), path.name == "__init__.py", path.read_text())


def imports_in(mod: str, is_package: bool, source: str) -> set[str]:
    package = mod if is_package else mod.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("agentdb"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if not target.startswith("agentdb"):
                continue
            found.add(target)
            for a in node.names:  # "from agentdb import db" imports the module agentdb.db
                sub = f"{target}.{a.name}"
                if (SRC.parent / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    SRC.parent / sub.replace(".", "/") / "__init__.py"
                ).exists():
                    found.add(sub)
    found.discard("agentdb")
    found.discard(mod)
    return found


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(SRC.rglob("*.py"))}


@pytest.mark.slow
def test_every_import_runs_down() -> None:
    wrong = []
    for mod, targets in graph().items():
        src = part_of(mod)
        for t in sorted(targets):
            dst = part_of(t)
            if dst != src and dst not in ALLOWED[src]:
                wrong.append(f"{mod} ({src}) imports {t} ({dst})")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


@pytest.mark.slow
def test_no_import_cycles() -> None:
    g = graph()
    # A package's __init__ re-exporting its own modules is not a cycle between parts of the code.
    edges = {
        m: {t for t in ts if t in g and not (m == t.rsplit(".", 1)[0] and "." in t)}
        for m, ts in g.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join([*stack[stack.index(t) :], t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_only_db_opens_sqlite() -> None:
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if p.name != "db.py" and "apsw.Connection(" in p.read_text()
    ]
    assert not offenders


def test_the_rules_can_fail() -> None:
    """The checker sees imports inside functions and relative ones, and names a wrong arrow."""
    source = "def f():\n    from agentdb.store import SessionReader\n"
    assert imports_in("agentdb.checks.file", False, source) == {"agentdb.store"}
    assert imports_in("agentdb.fileformat.header", False, "from .btree import x\n") == {
        "agentdb.fileformat.btree"
    }
    assert part_of("agentdb.checks.file") == "checks"
    assert "store" not in ALLOWED["checks"]
    assert "db" not in ALLOWED["util"] and "schema" not in ALLOWED["db"]
