"""kill -9 at every step of a migration: the file is at one revision or the other, with every
row, and running migrate again finishes and leaves no job file behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentdb.schema.revisions import CURRENT_REVISION
from tests.migrate_support import (
    REVISIONS,
    assert_same_rows,
    job_files,
    large_session,
    rows,
    user_version,
)
from tests.runner import run_cli

pytestmark = pytest.mark.slow

OLDER = [r for r in REVISIONS if r < CURRENT_REVISION]  # every revision migrate starts from
POINTS = [
    "after_probe",
    "after_backup",
    "before_commit",
    "after_commit",
    "after_verify",
    "after_vacuum",
]


@pytest.mark.parametrize("start", OLDER)
@pytest.mark.parametrize("point", POINTS)
def test_kill_at_every_step(sessions_dir: Path, point: str, start: int) -> None:
    sid, p = large_session(sessions_dir, revision=start)
    before = rows(p)
    killed = run_cli(
        "--sessions-dir", str(sessions_dir), "migrate", sid, env={"AGENTDB_FAULT": point}
    )
    assert killed.returncode == -9, killed.stderr
    rev = user_version(p)
    committed = point not in ("after_probe", "after_backup", "before_commit")
    expected = CURRENT_REVISION if committed else start
    assert rev == expected
    assert_same_rows(before, rows(p))
    if point != "after_probe":
        assert job_files(sessions_dir) == [f"{sid}.sqlite.agentdb-migrate-backup"]
        assert rows(sessions_dir / f"{sid}.sqlite.agentdb-migrate-backup") == before

    again = run_cli("--sessions-dir", str(sessions_dir), "migrate", "--json", sid)
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)["sessions"][0]
    assert out["outcome"] == ("current" if committed else "migrated")
    assert out["to"] == CURRENT_REVISION
    assert user_version(p) == CURRENT_REVISION
    assert_same_rows(before, rows(p))
    assert job_files(sessions_dir) == []
    assert sorted(
        x.name for x in sessions_dir.iterdir() if not x.name.endswith(("-wal", "-shm"))
    ) == [p.name]
