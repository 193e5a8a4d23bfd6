"""backup: consistent copies of real files at every revision; never overwrites."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import apsw
import pytest

from agentdb.jobs import backup, demo
from tests.migrate_support import (
    all_shapes,
    assert_same_rows,
    foreign_file,
    rows,
    snapshot,
)
from tests.support import make_session


@pytest.mark.slow
def test_copies_every_shape_with_every_row(sessions_dir: Path, tmp_path: Path) -> None:
    shapes = all_shapes(sessions_dir, tmp_path)
    before = {name: rows(p) for name, (_, p, _) in shapes.items()}
    listing = snapshot(sessions_dir)
    dest = tmp_path / "new" / "backups"
    report = backup.backup_sessions(sessions_dir, None, dest)
    assert report.ok and len(report.sessions) == len(shapes)
    assert os.stat(dest).st_mode & 0o777 == 0o700
    by_id = {s.session_id: s for s in report.sessions}
    for name, (sid, _p, rev) in shapes.items():
        out = by_id[sid]
        assert out.outcome == "copied" and out.revision == rev
        assert out.path == dest / f"{sid}.sqlite"
        assert out.bytes == out.path.stat().st_size > 0
        assert os.stat(out.path).st_mode & 0o777 == 0o600
        assert out.path.read_bytes()[18:20] == b"\x01\x01"  # rollback journal: one file
        assert_same_rows(before[name], rows(out.path))
    assert sorted(x.name for x in dest.iterdir()) == sorted(
        f"{s}.sqlite" for s, *_ in shapes.values()
    )
    # the sources are exactly as they were (WAL-only ones included: their WAL is still there);
    # the one thing a read-only open adds is SQLite's own -shm index beside a -wal that had none
    now = snapshot(sessions_dir)
    assert {k: v for k, v in now.items() if k in listing} == listing
    assert all(k.endswith("-shm") and k[:-4] + "-wal" in listing for k in now.keys() - listing)


@pytest.mark.slow
def test_garbage_old_copy_is_renamed_corrupt_and_a_fresh_copy_written(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir)
    dest = tmp_path / "b"
    dest.mkdir(mode=0o700)
    (dest / f"{sid}.sqlite").write_bytes(b"an older backup")
    os.chmod(dest / f"{sid}.sqlite", 0o600)
    out = backup.backup_sessions(sessions_dir, [sid], dest).sessions[0]
    assert out.outcome == "copied", out.message
    assert out.corrupt_path == dest / f"{sid}.sqlite.corrupt"
    assert out.corrupt_path.read_bytes() == b"an older backup"  # never deleted
    assert rows(dest / f"{sid}.sqlite") == rows(path)
    assert sorted(x.name for x in dest.iterdir()) == [f"{sid}.sqlite", f"{sid}.sqlite.corrupt"]
    # a copy damaged later goes to the next free .corrupt name; the first stays as it was
    demo.damage_page(dest / f"{sid}.sqlite", table="events", nth_leaf=0)
    damaged = (dest / f"{sid}.sqlite").read_bytes()
    out = backup.backup_sessions(sessions_dir, [sid], dest).sessions[0]
    assert out.outcome == "copied" and out.corrupt_path == dest / f"{sid}.sqlite.corrupt.1"
    assert (dest / f"{sid}.sqlite.corrupt.1").read_bytes() == damaged
    assert (dest / f"{sid}.sqlite.corrupt").read_bytes() == b"an older backup"
    assert backup.verify_dir(dest).ok  # .corrupt names are not copies


@pytest.mark.slow
def test_corrupt_and_foreign_not_copied(sessions_dir: Path, tmp_path: Path) -> None:
    bad, p = make_session(sessions_dir, turns=40)
    demo.damage_page(p, table="events", nth_leaf=1)
    alien = "01HZZZZZZZZZZZZZZZZZZZZZZZ"
    foreign_file(sessions_dir, alien)
    dest = tmp_path / "b"
    report = backup.backup_sessions(sessions_dir, None, dest)
    outcomes = {s.session_id: s.outcome for s in report.sessions}
    assert outcomes == {bad: "corrupt", alien: "foreign"}
    assert not report.ok
    assert list(dest.iterdir()) == []


@pytest.mark.slow
def test_leftover_temps_of_dead_runs_are_removed(sessions_dir: Path, tmp_path: Path) -> None:
    sid, _ = make_session(sessions_dir)
    dest = tmp_path / "b"
    dest.mkdir(mode=0o700)
    gone = _exited_pid()
    names = [
        f"{sid}.sqlite.agentdb-backup-tmp",  # an older agentdb's name
        f"{sid}.sqlite.agentdb-backup-tmp-{gone}",
        f"{sid}.sqlite.agentdb-backup-tmp-{gone}-journal",
    ]
    for n in names:
        (dest / n).write_bytes(b"half a copy")
    # a temp of a run that is still going (this process' parent, say) is left alone
    alive = dest / f"{sid}.sqlite.agentdb-backup-tmp-{os.getppid()}"
    alive.write_bytes(b"being written")
    assert backup.backup_sessions(sessions_dir, [sid], dest).sessions[0].outcome == "copied"
    assert sorted(x.name for x in dest.iterdir()) == sorted([f"{sid}.sqlite", alive.name])


def _exited_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_refuses_sessions_dir_as_destination(sessions_dir: Path) -> None:
    import pytest

    from agentdb import errors

    with pytest.raises(errors.UsageError):
        backup.backup_sessions(sessions_dir, None, sessions_dir)


@pytest.mark.slow
def test_verify(sessions_dir: Path, tmp_path: Path) -> None:
    ids = [make_session(sessions_dir, turns=40)[0] for _ in range(2)]
    old, _ = make_session(sessions_dir, revision=1)
    dest = tmp_path / "b"
    backup.backup_sessions(sessions_dir, None, dest)
    listing = snapshot(dest)
    report = backup.verify_dir(dest)
    verdicts = {s.session_id: s.verdict for s in report.sessions}
    assert verdicts == {ids[0]: "ok", ids[1]: "ok", old: "needs_migration"}
    assert snapshot(dest) == listing  # read-only: nothing created, nothing changed
    demo.damage_page(dest / f"{ids[1]}.sqlite", table="events", nth_leaf=1)
    # a copy filed under another session's name is inconsistent
    os.rename(dest / f"{ids[0]}.sqlite", dest / "01HZZZZZZZZZZZZZZZZZZZZZZZ.sqlite")
    verdicts = {s.session_id: s.verdict for s in backup.verify_dir(dest).sessions}
    assert verdicts[ids[1]] == "corrupt"
    assert verdicts["01HZZZZZZZZZZZZZZZZZZZZZZZ"] != "ok"


@pytest.mark.slow
def test_copy_is_a_snapshot_of_committed_data_only(sessions_dir: Path, tmp_path: Path) -> None:
    sid, p = make_session(sessions_dir, status="running")
    conn = apsw.Connection(str(p))
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE session_meta SET profile = 'uncommitted'")
    try:
        out = backup.backup_sessions(sessions_dir, [sid], tmp_path / "b").sessions[0]
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert out.outcome == "copied"
    assert rows(out.path)["session_meta"][0][2] == "coder"
