"""Every JSON document is strict JSON: another writer's cost of ``9e999`` (REAL infinity, which
SQLite stores) summed to ``Infinity`` in sessions list/show and report --json, which no strict
JSON parser reads. A number that is not finite is null (unknown)."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from tests.runner import run_cli
from tests.support import make_session

pytestmark = pytest.mark.slow


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "args",
    [("sessions", "list", "--json"), ("sessions", "show", "{sid}", "--json"), ("report", "--json")],
)
def test_an_infinite_cost_is_null_in_strict_json(
    sessions_dir: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    sid, path = make_session(sessions_dir)
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE cost_ledger SET cost_usd = 9e999")
    conn.close()
    r = run_cli(
        "--sessions-dir",
        str(sessions_dir),
        "--plugin-cache",
        str(tmp_path / "cache"),
        *(a.format(sid=sid) for a in args),
    )
    assert "Traceback" not in r.stderr
    doc = _strict(r.stdout)
    assert "Infinity" not in r.stdout
    if args[0] == "sessions" and args[1] == "list":
        assert doc["sessions"][0]["cost_usd"] is None  # type: ignore[index]
