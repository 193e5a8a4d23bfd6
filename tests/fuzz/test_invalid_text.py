"""Invalid UTF-8 in TEXT columns: a finding, a salvage, an escaped display; never a traceback.

At dd60f0c, ``UPDATE events SET timestamp=CAST(x'32303236c328' AS TEXT) WHERE sequence=5`` made
full ``check``, ``recover`` (also ``--dry-run``) and ``events`` die with ``UnicodeDecodeError``
on revision 2, ``events`` and ``migrate`` on revision 1 (``migrate`` leaving its backup file
behind), while ``backup`` reported the damaged copy as ``copied``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentdb import checks, salvage
from agentdb.schema.revisions import COLUMNS
from tests.fuzz import damage
from tests.support import SRC, make_session

pytestmark = pytest.mark.slow

TEXT_COLUMNS = {
    "events": ("id", "timestamp", "kind", "producer_name", "schema_version"),
    "session_meta": ("profile", "status", "started_at"),
    "cost_ledger": ("provider_name", "model_id"),
    "plan_items": ("turn_id", "tool_name", "decided_by"),
    "producers": ("name", "version"),
}
BAD = b"\xc3("  # a two-byte lead followed by ASCII: not UTF-8


def cli(sessions_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions_dir), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )


def no_traceback(p: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in p.stderr and "UnicodeDecodeError" not in p.stderr, p.stderr
    assert p.returncode in (0, 1), p.stderr


def damaged(sessions_dir: Path, revision: int) -> tuple[str, Path]:
    sid, path = make_session(sessions_dir, turns=3, revision=revision)
    damage.set_text(path, "events", "timestamp", "sequence = 5", damage.INVALID_UTF8_TIMESTAMP)
    return sid, path


@pytest.mark.parametrize("revision", [1, 2])
def test_commands_on_invalid_timestamp(sessions_dir: Path, revision: int) -> None:
    sid, path = damaged(sessions_dir, revision)
    before = path.read_bytes()

    p = cli(sessions_dir, "check", sid, "--json")
    no_traceback(p)
    assert p.returncode == 1
    s = json.loads(p.stdout)["sessions"][0]
    assert s["verdict"] == "corrupt"
    codes = {f["code"] for f in s["findings"]}
    assert codes & {"invalid_text", "content_hash_mismatch"}, codes

    p = cli(sessions_dir, "events", sid, "--json")
    no_traceback(p)
    shown = [json.loads(line) for line in p.stdout.splitlines()]
    assert "2026\\xc3(" in [e["timestamp"] for e in shown]  # escaped, not dropped or raised
    p = cli(sessions_dir, "events", sid)
    no_traceback(p)

    p = cli(sessions_dir, "backup", sid, "--to", str(sessions_dir.parent / "bk"), "--json")
    no_traceback(p)
    assert p.returncode == 1
    assert json.loads(p.stdout)["sessions"][0]["outcome"] == "corrupt"

    p = cli(sessions_dir, "migrate", sid, "--json")
    no_traceback(p)
    if revision == 1:
        assert p.returncode == 1
        assert json.loads(p.stdout)["sessions"][0]["outcome"] == "corrupt"
    assert sorted(x.name for x in sessions_dir.iterdir()) == [path.name]  # no backup left
    assert path.read_bytes() == before

    p = cli(sessions_dir, "recover", sid, "--dry-run", "--json")
    no_traceback(p)
    assert p.returncode == 0
    assert json.loads(p.stdout)["sessions"][0]["outcome"] == "recovered"
    assert path.read_bytes() == before

    p = cli(sessions_dir, "recover", sid, "--json")
    no_traceback(p)
    got = json.loads(p.stdout)["sessions"][0]
    assert got["outcome"] == "recovered"
    assert got["lost"]["event_sequences"] == [[5, 5]]
    p = cli(sessions_dir, "check", sid, "--json")
    assert json.loads(p.stdout)["sessions"][0]["verdict"] == "ok", p.stdout


@pytest.mark.parametrize("revision", [1, 2])
def test_every_text_column(sessions_dir: Path, tmp_path: Path, revision: int) -> None:
    """Each TEXT column in turn: check finds it (full check), recover salvages the rest and
    drops (or, for session_meta, rebuilds) only the damaged row; nothing raises."""
    sid, src = make_session(sessions_dir, turns=3, revision=revision)
    for table, columns in TEXT_COLUMNS.items():
        for column in columns:
            assert column in COLUMNS[1][table]
            d = tmp_path / f"{table}.{column}"
            path = damage.copy_session(src, d)
            damage.set_text(
                path, table, column, f"rowid = (SELECT min(rowid) FROM {table})", b"x" + BAD
            )
            result = checks.check_path(path, sid)
            assert result.verdict == "corrupt", (table, column, result.findings)
            quick = checks.check_path(path, sid, quick=True)
            assert quick.verdict in ("corrupt", "ok", "needs_migration"), (table, column)
            if table != "events":
                assert quick.verdict == "corrupt", (table, column)
            out = salvage.recover_session(d, sid, recovery_log=tmp_path / "log")
            assert out.outcome == "recovered", (table, column, out.notes)
            after = checks.check_path(path, sid, recovered=True)
            assert after.verdict == "ok", (table, column, after.findings)
