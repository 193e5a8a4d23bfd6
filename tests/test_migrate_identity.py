"""migrate rewrites a session in place, so it must write into the session and nothing else:
not into another name of the same inode (a hard link), not into a file a recover renamed away
while migrate had it open. Real processes, paused at a named point (``AGENTDB_PAUSE``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw
import pytest

from agentdb import fsutil, salvage
from agentdb.jobs import migrate
from agentdb.schema.revisions import CURRENT_REVISION
from tests.migrate_support import job_files, rows, user_version
from tests.runner import Agentdb
from tests.salvage import corpus
from tests.support import SRC, make_session, wait_for


def rollback_journal_session(sessions_dir: Path, turns: int = 20) -> tuple[str, Path]:
    """A revision-1 session another writer left in rollback-journal mode (no WAL)."""
    sid, path = make_session(sessions_dir, turns=turns, revision=1)
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    finally:
        conn.close()
    assert not path.with_name(path.name + "-wal").exists()
    return sid, path


@contextmanager
def paused_migrate(sessions_dir: Path, sid: str, point: str, gate: Path) -> Iterator[Paused]:
    gate.mkdir()
    args = ["migrate", "--json", sid]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC), "AGENTDB_PAUSE": f"{point}:{gate}"},
    )
    paused = Paused(proc, gate)
    try:
        assert wait_for(lambda: (gate / "reached").exists() or proc.poll() is not None, 60)
        assert proc.poll() is None, proc.communicate()
        yield paused
    finally:
        (gate / "go").touch()
        paused.finish()


class Paused:
    def __init__(self, proc: subprocess.Popen[str], gate: Path) -> None:
        self.proc, self.gate = proc, gate
        self.result: tuple[int, str, str] | None = None

    def finish(self) -> tuple[int, str, str]:
        if self.result is None:
            (self.gate / "go").touch()
            out, err = self.proc.communicate(timeout=120)
            self.result = (self.proc.returncode, out, err)
        return self.result


# ------------------------------------------------------------------------ hard links


@pytest.mark.slow
def test_migrate_refuses_a_hard_linked_session(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir, revision=1)
    other = tmp_path / "rsync-link-dest-copy.sqlite"
    os.link(path, other)  # what `cp -al` or `rsync --link-dest` leaves
    before = other.read_bytes()
    plan = migrate.plan(sessions_dir, [sid])
    assert plan[0].outcome == "failed" and "hard links" in plan[0].message
    out = migrate.migrate_sessions(sessions_dir, [sid]).sessions[0]
    assert out.outcome == "failed"
    assert "hard links" in out.message and "cp -p" in out.message
    assert other.read_bytes() == before  # old code: migrated the shared inode
    assert user_version(path) == 1
    assert job_files(sessions_dir) == []


def test_migrate_cli_names_the_fix_for_a_hard_link(
    sessions_dir: Path, tmp_path: Path, agentdb: Agentdb
) -> None:
    sid, path = make_session(sessions_dir, revision=1)
    os.link(path, tmp_path / "other.sqlite")
    got = agentdb("--sessions-dir", str(sessions_dir), "migrate", sid)
    assert got.code == 1
    assert "Traceback" not in got.err
    assert str(path) in got.out and "hard links" in got.out
    assert user_version(path) == 1


@pytest.mark.slow
def test_hard_link_made_after_the_plan_is_refused_under_the_lock(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """Linked while migrate is between its plan and BEGIN IMMEDIATE: the re-check under the
    write lock refuses and rolls back."""
    sid, path = make_session(sessions_dir, revision=1)
    other = tmp_path / "other.sqlite"
    with paused_migrate(sessions_dir, sid, "before_begin", tmp_path / "gate") as paused:
        os.link(path, other)
        before = other.read_bytes()
    rc, out, err = paused.finish()
    assert rc == 1, err
    doc = json.loads(out)
    assert doc["sessions"][0]["outcome"] == "failed"
    assert "hard links" in doc["sessions"][0]["message"]
    assert other.read_bytes() == before
    assert user_version(path) == 1
    assert job_files(sessions_dir) == []


@pytest.mark.slow
def test_recover_goes_ahead_with_a_hard_linked_session(sessions_dir: Path, tmp_path: Path) -> None:
    """recover replaces by rename: the other name keeps the original bytes, untouched."""
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    other = tmp_path / "other.sqlite"
    os.link(path, other)
    before = other.read_bytes()
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered"
    assert other.read_bytes() == before
    assert os.stat(path).st_nlink == 1


def test_shared_refusal_for_other_in_place_jobs(tmp_path: Path) -> None:
    p = tmp_path / "a.sqlite"
    p.write_bytes(b"x")
    assert fsutil.hard_link_problem(p) is None
    fsutil.refuse_hard_linked(p)
    os.link(p, tmp_path / "b")
    assert "2 hard links" in (fsutil.hard_link_problem(p) or "")
    with pytest.raises(fsutil.errors.HardLinked):
        fsutil.refuse_hard_linked(p)


# ------------------------------------------------------------------------ a swap mid-migrate


@pytest.mark.slow
def test_recover_swap_before_begin_immediate_is_not_written_into(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """A rollback-journal file holds no lock between migrate's open and its BEGIN IMMEDIATE.
    A real recover swaps the session in that window; migrate must not then write into the
    original it still has open (now ``.corrupt``), but judge what the name now holds.

    The damage recover needs is undone in the kept original after the swap, so that nothing
    but the file's identity can stop a migration of it. (Measured on the old code: SQLite
    itself refused the write — SQLITE_READONLY_DBMOVED — and migrate reported the session
    ``failed`` with "attempt to write a readonly database"; now it notices the swap under its
    write lock, lets go, and reports the replacement ``current``.)
    """
    sid, path = rollback_journal_session(sessions_dir)
    original = path.read_bytes()
    with paused_migrate(sessions_dir, sid, "before_begin", tmp_path / "gate") as paused:
        corpus.d_zeroed_page(path)
        out = salvage.recover_session(sessions_dir, sid)
        assert out.outcome == "recovered", out.notes
        corrupt = Path(out.corrupt_path or "")
        with open(corrupt, "r+b") as f:  # the same inode migrate has open
            f.write(original)
        replacement_rows = rows(path)
    rc, stdout, err = paused.finish()
    doc = json.loads(stdout)
    assert doc["sessions"][0]["outcome"] == "current", (doc["sessions"][0]["message"], err)
    assert rc == 0, err
    assert corrupt.read_bytes() == original  # old code: migrated the .corrupt inode
    assert user_version(corrupt) == 1
    assert user_version(path) == CURRENT_REVISION
    assert rows(path) == replacement_rows
    assert job_files(sessions_dir) == []


@pytest.mark.slow
def test_migrate_still_migrates_a_rollback_journal_file(sessions_dir: Path) -> None:
    sid, path = rollback_journal_session(sessions_dir, turns=3)
    out = migrate.migrate_sessions(sessions_dir, [sid]).sessions[0]
    assert out.outcome == "migrated", out.message
    assert user_version(path) == CURRENT_REVISION
