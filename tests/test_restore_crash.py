"""kill -9 ``agentdb restore`` at every named point, then run it again: at the moment of death the
session file exists (or, for a missing session, is absent or the complete copy), the old bytes
and their WAL exist under some name, the old WAL never sits beside the restored file; the re-run
finishes the restore with one ``.pre-restore`` and an outcome line, and nothing else left."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentdb import recoverylog, swap
from tests.rows import all_rows
from tests.runner import run_cli
from tests.support import WriterProcess, make_session

pytestmark = pytest.mark.slow

SWAP_POINTS = [
    "restore_after_tmp",
    "restore_after_intent",
    "restore_after_link",
    "restore_after_wal_link",
    "restore_after_sidecars_removed",
    "restore_after_rename",
]
MISSING_POINTS = ["restore_after_tmp", "restore_after_intent", "restore_after_rename"]


def _restore(sessions_dir: Path, sid: str, dest: Path, *extra: str, fault: str | None = None):  # type: ignore[no-untyped-def]
    env = {"AGENTDB_FAULT": fault} if fault else None
    return run_cli(
        "--sessions-dir",
        str(sessions_dir),
        "restore",
        sid,
        "--from",
        str(dest),
        *extra,
        "--json",
        env=env,
    )


def _leftovers(sessions_dir: Path) -> list[str]:
    return [n for n in os.listdir(sessions_dir) if ".agentdb-" in n]


@pytest.mark.parametrize("point", SWAP_POINTS)
def test_kill_9_over_a_live_file_then_rerun(sessions_dir: Path, tmp_path: Path, point: str) -> None:
    sid, path = make_session(sessions_dir, turns=2)
    dest = tmp_path / "b"
    r = run_cli("--sessions-dir", str(sessions_dir), "backup", sid, "--to", str(dest))
    assert r.returncode == 0, r.stderr
    copy_rows = all_rows(dest / path.name)
    w = WriterProcess(sessions_dir, sid)  # grows past the copy, then dies: WAL left beside
    w.wait_for_commits(4)
    w.stop()
    wal = path.with_name(path.name + "-wal")
    old_db, old_wal = path.read_bytes(), wal.read_bytes()
    old_rows = all_rows(path)

    r = _restore(sessions_dir, sid, dest, "--force", fault=point)
    assert r.returncode == -9, r.stderr
    # At the instant of death.
    assert path.exists()
    names = [path, *swap.kept_names(path, "pre-restore")]
    assert any(p.read_bytes() == old_db for p in names), "the old file's bytes are gone"
    wals = [p.with_name(p.name + "-wal") for p in names]
    assert any(p.exists() and p.read_bytes() == old_wal for p in wals), "the old WAL is gone"
    if path.read_bytes() != old_db:
        assert not wal.exists(), "the old WAL sits beside the restored file"

    r = _restore(sessions_dir, sid, dest, "--force")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["sessions"][0]
    assert s["outcome"] == "restored", s
    pre = path.with_name(path.name + ".pre-restore")
    assert s["pre_restore_path"] == str(pre)
    assert swap.kept_names(path, "pre-restore") == [pre]  # one kept name, not .1
    assert pre.read_bytes() == old_db and Path(f"{pre}-wal").read_bytes() == old_wal
    assert all_rows(path) == copy_rows
    assert all_rows(pre) == old_rows
    assert s["lost_events"] and s["lost_events"][0][0] == len(copy_rows["events"]) + 1
    for side in ("-wal", "-shm", "-journal"):
        assert not path.with_name(path.name + side).exists()
    assert not _leftovers(sessions_dir)
    log = [e for e in recoverylog.read(sessions_dir.parent / "recovery.log")]
    assert log[-1]["event"] == "outcome" and log[-1]["outcome"] == "restored"
    check = run_cli("--sessions-dir", str(sessions_dir), "check", sid, "--json")
    assert json.loads(check.stdout)["sessions"][0]["verdict"] == "ok", check.stdout
    again = _restore(sessions_dir, sid, dest)
    assert json.loads(again.stdout)["sessions"][0]["outcome"] == "unchanged"


@pytest.mark.parametrize("point", MISSING_POINTS)
def test_kill_9_restoring_a_missing_session(sessions_dir: Path, tmp_path: Path, point: str) -> None:
    sid, path = make_session(sessions_dir, turns=2)
    dest = tmp_path / "b"
    assert (
        run_cli("--sessions-dir", str(sessions_dir), "backup", sid, "--to", str(dest)).returncode
        == 0
    )
    copy_rows = all_rows(dest / path.name)
    path.unlink()
    r = _restore(sessions_dir, sid, dest, fault=point)
    assert r.returncode == -9, r.stderr
    if path.exists():  # only ever the complete copy
        assert all_rows(path) == copy_rows
    r = _restore(sessions_dir, sid, dest)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sessions"][0]["outcome"] == "restored"
    assert all_rows(path) == copy_rows
    assert sorted(os.listdir(sessions_dir)) == [path.name]
    log = [e for e in recoverylog.read(sessions_dir.parent / "recovery.log")]
    assert log[-1]["event"] == "outcome"
