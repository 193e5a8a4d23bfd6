"""migrate: real files at every revision, every row compared before and after."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import apsw
import pytest

from agentdb import fsutil, paths
from agentdb.jobs import demo, migrate
from agentdb.schema.revisions import APPLICATION_ID, CURRENT_REVISION
from tests.migrate_support import (
    REVISIONS,
    all_shapes,
    assert_same_rows,
    foreign_file,
    job_files,
    rows,
    set_pragma,
    snapshot,
    user_version,
)
from tests.support import held_open, make_session


@pytest.mark.slow
def test_every_row_survives_every_revision_and_shape(sessions_dir: Path, tmp_path: Path) -> None:
    shapes = all_shapes(sessions_dir, tmp_path)
    before = {name: rows(p) for name, (_, p, _) in shapes.items()}
    # the WAL-only fixtures really keep their rows in the WAL: the main file alone has none
    for name, (_, p, _) in shapes.items():
        if name.startswith("wal"):
            assert paths.sidecar(p, "-wal").stat().st_size > 0
            main_only = apsw.Connection(
                f"file:{p}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
            )
            with pytest.raises(apsw.SQLError):  # not even the tables are in the main file
                main_only.execute("SELECT * FROM events").fetchall()
            main_only.close()
        if name.startswith("large"):
            assert max(len(r[8]) for r in before[name]["events"]) >= 100 * 1024
    report = migrate.migrate_sessions(sessions_dir)
    by_id = {s.session_id: s for s in report.sessions}
    for name, (sid, p, rev) in shapes.items():
        out = by_id[sid]
        assert out.outcome == ("migrated" if rev < CURRENT_REVISION else "current"), name
        assert (out.from_, out.to) == (rev, CURRENT_REVISION)
        assert user_version(p) == CURRENT_REVISION
        assert_same_rows(before[name], rows(p))
    assert report.ok
    assert job_files(sessions_dir) == []


def test_migrated_file_is_a_current_session_with_agentdb_id(sessions_dir: Path) -> None:
    sid, p = make_session(sessions_dir, revision=1)
    set_pragma(p, "application_id", 0)  # another conforming writer made it
    assert migrate.migrate_sessions(sessions_dir, [sid]).sessions[0].outcome == "migrated"
    conn = apsw.Connection(str(p))
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert os.stat(p).st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_idempotent(sessions_dir: Path) -> None:
    make_session(sessions_dir, revision=1)
    assert migrate.migrate_sessions(sessions_dir).summary()["migrated"] == 1
    second = migrate.migrate_sessions(sessions_dir)
    assert second.summary()["current"] == 1 and second.ok


@pytest.mark.slow
def test_dry_run_changes_nothing(sessions_dir: Path) -> None:
    expected = {}
    for rev in REVISIONS:  # every older revision would migrate; the current one is current
        sid, _ = make_session(sessions_dir, revision=rev)
        expected[sid] = "current" if rev == CURRENT_REVISION else "migrated"
    before = snapshot(sessions_dir)
    report = migrate.migrate_sessions(sessions_dir, dry_run=True)
    assert report.dry_run
    assert {s.session_id: s.outcome for s in report.sessions} == expected
    assert sorted(expected.values()).count("migrated") == CURRENT_REVISION - 1
    assert snapshot(sessions_dir) == before


@pytest.mark.slow
def test_plan_is_read_only(sessions_dir: Path) -> None:
    sid, _ = make_session(sessions_dir, revision=1)
    before = snapshot(sessions_dir)
    items = migrate.plan(sessions_dir)
    assert [(i.session_id, i.action, i.revision) for i in items] == [(sid, "migrate", 1)]
    assert snapshot(sessions_dir) == before
    report = migrate.execute(items)
    assert report.sessions[0].outcome == "migrated"


def test_too_new_is_refused_and_byte_identical(sessions_dir: Path) -> None:
    sid, p = make_session(sessions_dir, revision=CURRENT_REVISION)
    set_pragma(p, "user_version", CURRENT_REVISION + 5)
    before = snapshot(sessions_dir)
    out = migrate.migrate_sessions(sessions_dir, [sid]).sessions[0]
    assert out.outcome == "too_new"
    assert str(CURRENT_REVISION + 5) in out.message and str(CURRENT_REVISION) in out.message
    assert snapshot(sessions_dir) == before


def test_foreign_file_untouched(sessions_dir: Path) -> None:
    sid = "01HZZZZZZZZZZZZZZZZZZZZZZZ"
    foreign_file(sessions_dir, sid)
    before = snapshot(sessions_dir)
    report = migrate.migrate_sessions(sessions_dir)
    assert [(s.session_id, s.outcome) for s in report.sessions] == [(sid, "foreign")]
    assert not report.ok
    assert snapshot(sessions_dir) == before


@pytest.mark.slow
def test_corrupt_file_reported_with_recover_hint(sessions_dir: Path) -> None:
    sid, p = make_session(sessions_dir, turns=40, revision=1)
    demo.damage_page(p, table="events", nth_leaf=1)
    before = snapshot(sessions_dir)
    out = migrate.migrate_sessions(sessions_dir).sessions[0]
    assert out.outcome == "corrupt"
    assert f"agentdb recover {sid}" in out.message
    assert snapshot(sessions_dir) == before


@pytest.mark.slow
def test_failed_precheck_rolls_back(sessions_dir: Path) -> None:
    _sid, p = make_session(sessions_dir, revision=1)
    conn = apsw.Connection(str(p))
    conn.execute("UPDATE session_meta SET status = 'paused'")  # not one of the spec's seven
    conn.close()
    before = rows(p)
    out = migrate.migrate_sessions(sessions_dir).sessions[0]
    assert out.outcome == "failed" and "paused" in out.message
    assert user_version(p) == 1
    assert rows(p) == before
    assert job_files(sessions_dir) == []


@pytest.mark.slow
def test_live_session_skipped_unless_wait(sessions_dir: Path) -> None:
    _sid, p = make_session(sessions_dir, revision=1)
    before = rows(p)
    with held_open(p) as pid:
        out = migrate.migrate_sessions(sessions_dir).sessions[0]
        assert out.outcome == "skipped_live" and str(pid) in out.message
        assert user_version(p) == 1
        dry = migrate.migrate_sessions(sessions_dir, dry_run=True).sessions[0]
        assert dry.outcome == "skipped_live"
        out = migrate.migrate_sessions(sessions_dir, wait=10).sessions[0]
        assert out.outcome == "migrated"
    assert_same_rows(before, rows(p))


@pytest.mark.slow
def test_keep_backups(sessions_dir: Path) -> None:
    sid, p = make_session(sessions_dir, revision=1)
    before = rows(p)
    out = migrate.migrate_sessions(sessions_dir, keep_backups=True).sessions[0]
    assert out.outcome == "migrated"
    assert out.backup_path == p.with_name(f"{sid}.sqlite.rev1.bak")
    assert os.stat(out.backup_path).st_mode & 0o777 == 0o600
    assert not paths.JOB_FILE_RE.fullmatch(out.backup_path.name)
    assert not paths.CORRUPT_RE.fullmatch(out.backup_path.name)
    # a single self-contained file at the old revision, with every row
    assert out.backup_path.read_bytes()[18:20] == b"\x01\x01"
    assert rows(out.backup_path) == before
    assert job_files(sessions_dir) == []
    # a second kept backup never replaces the first
    p.unlink()
    shutil.copyfile(out.backup_path, p)  # a copy: a hard link would be refused (one inode)
    os.chmod(p, 0o600)
    out2 = migrate.migrate_sessions(sessions_dir, keep_backups=True).sessions[0]
    assert out2.backup_path == p.with_name(f"{sid}.sqlite.rev1.bak.1")


def test_leftover_backup_removed_only_when_file_is_healthy(sessions_dir: Path) -> None:
    _sid, p = make_session(sessions_dir, revision=CURRENT_REVISION)
    leftover = migrate.backup_file(p)
    leftover.write_bytes(b"left by a killed migration")
    out = migrate.migrate_sessions(sessions_dir, dry_run=True).sessions[0]
    assert leftover.exists() and out.outcome == "current"
    out = migrate.migrate_sessions(sessions_dir).sessions[0]
    assert out.outcome == "current" and "interrupted" in out.message
    assert not leftover.exists()


@pytest.mark.parametrize("ids", [["01HZZZZZZZZZZZZZZZZZZZZZZZ"]])
def test_missing_session_fails(sessions_dir: Path, ids: list[str]) -> None:
    out = migrate.migrate_sessions(sessions_dir, ids).sessions[0]
    assert out.outcome == "failed" and "no such session" in out.message


_LOCKER = """
import sys, time, apsw
c = apsw.Connection(sys.argv[1])
c.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_wait_is_bounded_by_a_writer_holding_the_lock(sessions_dir: Path) -> None:
    import subprocess
    import sys

    _sid, p = make_session(sessions_dir, revision=1)
    before = rows(p)
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCKER, str(p)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        out = migrate.migrate_sessions(sessions_dir, wait=0.2).sessions[0]
    finally:
        proc.kill()
        proc.wait()
    assert out.outcome == "skipped_live" and "still locked" in out.message
    assert user_version(p) == 1 and rows(p) == before
    assert job_files(sessions_dir) == []


def test_a_migrated_file_is_the_size_of_the_same_rows_written_natively(tmp_path: Path) -> None:
    """The migration's freed pages are given back (VACUUM) and its WAL folded into the file:
    within 5 % of a native file with the same rows, and nothing beside it."""
    d = tmp_path / "sessions"
    fsutil.ensure_dir(d)
    old, old_path = make_session(d, turns=40, revision=1)
    _, native_path = make_session(d, turns=40)
    [outcome] = [o for o in migrate.migrate_sessions(d).sessions if o.session_id == old]
    assert outcome.outcome == "migrated", outcome
    assert abs(old_path.stat().st_size - native_path.stat().st_size) <= (
        0.05 * native_path.stat().st_size
    )
    assert sorted(p.name for p in d.iterdir()) == sorted([old_path.name, native_path.name])
