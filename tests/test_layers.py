"""The floors hold: every file of src/agentdb sits on exactly one part of the map in
docs/architecture.json, and every import (function-level imports included) follows one of its
arrows and breaks none of its nevers. No catch-all: a file on no part fails. The test also fails
on any import cycle between modules.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "agentdb"
MAP = json.loads((ROOT / "docs" / "architecture.json").read_text())


def _rules() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    parts = {name: part["is"] for name, part in MAP["parts"].items()}
    allowed: dict[str, set[str]] = {name: set() for name in parts}
    for a, b in MAP["arrows"]:
        allowed[a].add(b)
    return parts, allowed


PARTS, ALLOWED = _rules()


def part_of_path(path: Path) -> str | None:
    """The one part whose ``is`` names this file (a folder ends with "/")."""
    rel = str(path.relative_to(ROOT))
    found = [
        name
        for name, members in PARTS.items()
        for m in members
        if (rel.startswith(m) if m.endswith("/") else rel == m)
    ]
    assert len(found) <= 1, f"{rel} is on {found}"
    return found[0] if found else None


def path_of(module: str) -> Path:
    p = ROOT / "src" / module.replace(".", "/")
    return p / "__init__.py" if (p / "__init__.py").exists() else p.with_suffix(".py")


def part_of(module: str) -> str:
    part = part_of_path(path_of(module))
    assert part is not None, f"{module} sits on no part of docs/architecture.json"
    return part


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


def test_every_file_sits_on_a_part() -> None:
    loose = [str(p.relative_to(ROOT)) for p in sorted(SRC.rglob("*.py")) if not part_of_path(p)]
    assert not loose, "files on no part of docs/architecture.json:\n" + "\n".join(loose)


def test_every_import_runs_down() -> None:
    wrong = []
    for mod, targets in graph().items():
        src = part_of(mod)
        for t in sorted(targets):
            dst = part_of(t)
            if dst != src and dst not in ALLOWED[src]:
                wrong.append(f"{mod} ({src}) imports {t} ({dst})")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_no_arrow_breaks_a_never() -> None:
    broken = [f"{a} -> {b}: {why}" for a, b, why in MAP["never"] if b in ALLOWED[a]]
    assert not broken, broken


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
    assert part_of("agentdb.checks.file") == "Checks"
    assert "Store" not in ALLOWED["Checks"]
    assert "Db" not in ALLOWED["Util"] and "Schema" not in ALLOWED["Db"]
    assert part_of_path(ROOT / "src" / "agentdb" / "nowhere.py") is None


def test_a_module_over_500_lines_says_why() -> None:
    """Split a module once it passes ~500 lines, or say in its docstring why not ("Size:")."""
    long = []
    for p in sorted(SRC.rglob("*.py")):
        text = p.read_text()
        if text.count("\n") > 500:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Size:" not in doc:
                long.append(str(p.relative_to(ROOT)))
    assert not long, "modules over 500 lines with no reason in their docstring:\n" + "\n".join(long)
