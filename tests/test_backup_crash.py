"""kill -9 ``agentdb backup`` at each step: never a half-written file under the final name;
at most the job's temp file, which the next run removes; the re-run completes."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest

from agentdb import backup
from tests.support import all_rows, make_session, run_cli


@pytest.mark.parametrize("point", ["backup_after_copy", "backup_after_link"])
def test_backup_killed_at_each_step(sessions_dir: Path, tmp_path: Path, point: str) -> None:
    sid, path = make_session(sessions_dir, turns=5)
    dest = tmp_path / "b"
    args = ["--sessions-dir", str(sessions_dir), "backup", sid, "--to", str(dest)]
    r = run_cli(*args, env={"AGENTDB_FAULT": point})
    assert r.returncode == -9, r.stderr
    final = dest / path.name
    tmp = dest / (path.name + backup.TMP_SUFFIX)
    names = sorted(os.listdir(dest))
    assert names == sorted({tmp.name} | ({final.name} if point == "backup_after_link" else set()))
    if final.exists():  # a final name is only ever a complete, checked copy
        c = apsw.Connection(str(final), flags=apsw.SQLITE_OPEN_READONLY)
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        c.close()
        assert all_rows(final) == all_rows(path)
    again = run_cli(*args, "--json")
    # never overwritten: a final name left by the killed run is reported as already there
    assert again.returncode == (1 if point == "backup_after_link" else 0), again.stderr
    assert not tmp.exists()  # the next run cleans the temp name
    assert os.listdir(dest) == [final.name]
    assert all_rows(final) == all_rows(path)
    assert backup.verify_dir(dest).ok
