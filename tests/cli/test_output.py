"""One way to JSON: ``cli/output.py`` is the only CLI module that serialises JSON or writes a
report to stdout; every command hands it a document (``output.emit_json``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import agentdb.cli

CLI = Path(agentdb.cli.__file__).parent


def _modules() -> list[Path]:
    return sorted(p for p in CLI.glob("*.py") if p.name != "output.py")


def test_no_json_serialisation_outside_output() -> None:
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name == "json" for a in node.names):
                offenders.append(f"{path.name}:{node.lineno}: import json")
            elif isinstance(node, ast.ImportFrom) and node.module == "json":
                offenders.append(f"{path.name}:{node.lineno}: from json import ...")
            elif isinstance(node, ast.Attribute) and node.attr in ("dumps", "dump", "JSONEncoder"):
                offenders.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert offenders == [], "render JSON through cli/output.py:\n" + "\n".join(offenders)
    assert "json.dumps" not in "".join(p.read_text() for p in _modules())


def test_every_json_command_renders_through_output() -> None:
    """Each command module that offers --json hands its document to output.emit_json (or, for
    the JSON Lines of ``events``, output.emit_json_line)."""
    commands = [p for p in _modules() if "@json_option" in p.read_text()]
    assert len(commands) >= 10, commands
    for path in commands:
        assert "output.emit_json" in path.read_text(), path.name


@pytest.mark.slow
def test_results_name_their_document_one_way() -> None:
    """A result that has a JSON document builds it in ``to_json()`` (one name, not two)."""
    src = CLI.parent
    twins = [
        f"{p.relative_to(src)}:{n.lineno}"
        for p in sorted(src.rglob("*.py"))
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.FunctionDef) and n.name in ("as_json", "as_dict", "json", "to_dict")
    ]
    assert twins == []
