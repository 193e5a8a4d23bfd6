"""report's cost per model names the provider and model as text: read as bytes (so invalid
UTF-8 cannot raise), they were shown as Python reprs ("b'anthropic'") on every healthy file."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from tests.runner import run_cli
from tests.support import make_session

pytestmark = pytest.mark.slow


def _cost_by_model(sessions_dir: Path, tmp_path: Path) -> list[dict[str, object]]:
    r = run_cli(
        "--sessions-dir",
        str(sessions_dir),
        "--plugin-cache",
        str(tmp_path / "cache"),
        "report",
        "--json",
    )
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr
    return list(json.loads(r.stdout)["cost_by_model"])


def test_provider_and_model_are_text(sessions_dir: Path, tmp_path: Path) -> None:
    make_session(sessions_dir)
    rows = _cost_by_model(sessions_dir, tmp_path)
    assert [(r["provider"], r["model"]) for r in rows] == [("anthropic", "claude-sonnet")]


def test_invalid_utf8_model_is_escaped_text(sessions_dir: Path, tmp_path: Path) -> None:
    _, path = make_session(sessions_dir)
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE cost_ledger SET model_id = CAST(x'636cc328' AS TEXT)")
    conn.close()
    models = {r["model"] for r in _cost_by_model(sessions_dir, tmp_path)}
    assert models == {"cl\\xc3("}
