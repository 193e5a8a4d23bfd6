"""A kernel-like writer appends continuously while `migrate --all` and `backup --all` run:
zero writer errors, zero lost events, every backup passes integrity_check."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from agentdb.jobs import backup
from agentdb.schema.revisions import CURRENT_REVISION
from tests.migrate_support import assert_same_rows, large_session, rows, user_version
from tests.runner import run_cli
from tests.support import WriterProcess, make_session, wait_for

pytestmark = pytest.mark.slow


def test_migrate_and_backup_beside_a_busy_writer(sessions_dir: Path, tmp_path: Path) -> None:
    old = [make_session(sessions_dir, turns=3, revision=1) for _ in range(4)]
    old.append(large_session(sessions_dir, revision=1))
    before = {sid: rows(p) for sid, p in old}
    live_id, live_path = make_session(sessions_dir, turns=2, status="running")
    writer = WriterProcess(sessions_dir, live_id)
    dest = tmp_path / "backups"
    try:
        # let it get going: its WAL grows while both jobs run
        assert wait_for(lambda: (live_path.with_name(live_path.name + "-wal")).exists())
        migrated = run_cli("--sessions-dir", str(sessions_dir), "migrate", "--all", "--json")
        copied = run_cli(
            "--sessions-dir", str(sessions_dir), "backup", "--all", "--to", str(dest), "--json"
        )
        copied_again = run_cli(
            "--sessions-dir", str(sessions_dir), "backup", live_id, "--to", str(tmp_path / "b2")
        )
    finally:
        seqs, err = writer.stop()
    assert err == ""  # zero writer errors
    assert seqs  # it did write meanwhile
    stored = {r[0] for r in rows(live_path)["events"]}
    assert set(seqs) <= stored  # zero lost events

    assert migrated.returncode == 0, migrated.stderr
    outcomes = {s["session_id"]: s["outcome"] for s in json.loads(migrated.stdout)["sessions"]}
    assert outcomes[live_id] == "current"
    for sid, p in old:
        assert outcomes[sid] == "migrated"
        assert user_version(p) == CURRENT_REVISION
        assert_same_rows(before[sid], rows(p))

    assert copied.returncode == 0, copied.stderr
    assert copied_again.returncode == 0, copied_again.stderr
    doc = json.loads(copied.stdout)
    assert {s["outcome"] for s in doc["sessions"]} == {"copied"}
    assert len(doc["sessions"]) == len(old) + 1
    for s in doc["sessions"]:
        conn = apsw.Connection(s["path"], flags=apsw.SQLITE_OPEN_READONLY)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
    # the live session's copies are snapshots: a gap-free prefix of what the writer committed
    for copy in (dest / live_path.name, tmp_path / "b2" / live_path.name):
        got = [r[0] for r in rows(copy)["events"]]
        assert got == list(range(1, len(got) + 1))
        assert set(got) <= stored
    assert backup.verify_dir(dest).ok
