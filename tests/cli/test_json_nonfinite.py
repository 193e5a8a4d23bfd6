"""A cost JSON cannot hold (another writer's ``inf``, or finite costs summed past the largest
double) is null in every --json document and --nl line, never ``Infinity``/``NaN``, which no
strict JSON parser (jq, JavaScript, Go) reads; the documents still validate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb import schemas
from agentdb.jobs import demo
from agentdb.store import Event, SessionWriter, Usage
from tests.runner import run_cli

pytestmark = pytest.mark.slow

jsonschema = pytest.importorskip("jsonschema")


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_costs_are_null(tmp_path: Path, sessions_dir: Path) -> None:
    ids = []
    for cost in (float("inf"), 1e308):
        w = SessionWriter.create(sessions_dir, profile="coder")
        for _ in range(2):  # 2 x 1e308 overflows the sum
            w.emit(Event("message", demo.MODEL_OLD, b"{}", usage=Usage("p", "m", 1, 1, 1.0)))
        w.set_status("completed")
        w.close()
        # agentdb's writer refuses a non-finite cost; another writer's file may hold one.
        conn = apsw.Connection(str(w.path))
        conn.execute("UPDATE cost_ledger SET cost_usd = ?", (cost,))
        conn.close()
        ids.append(w.session_id)
    g = ("--sessions-dir", str(sessions_dir), "--plugin-cache", str(tmp_path / "none"))
    for name, args in (
        ("sessions-list", ("sessions", "list")),
        ("sessions-show", ("sessions", "show", ids[0])),
        ("sessions-tree", ("sessions", "tree")),
        ("report", ("report",)),
    ):
        p = run_cli(*g, *args, "--json")
        assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr
        assert "Infinity" not in p.stdout and "NaN" not in p.stdout, name
        jsonschema.validate(
            _strict(p.stdout), schemas.load(name), cls=jsonschema.Draft202012Validator
        )
    p = run_cli(*g, "sessions", "list", "--nl")
    assert p.returncode == 0, p.stderr
    lines = [_strict(x) for x in p.stdout.splitlines()]
    assert len(lines) == 2
    out = tmp_path / "r.html"
    p = run_cli(*g, "report", "--html", str(out))
    assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr
    assert ">inf<" not in out.read_text()
