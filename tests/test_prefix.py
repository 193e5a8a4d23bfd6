"""checks.prefix: is one copy of a session a prefix of another? Real files, real writers."""

from __future__ import annotations

import shutil
from pathlib import Path

import apsw
import pytest

from agentdb.checks import prefix
from agentdb.jobs import migrate
from agentdb.schema.revisions import CURRENT_REVISION, DDL
from agentdb.store import Event, Producer, SessionWriter
from tests.support import make_session

TOOL = Producer("tool", "shell", "2.0.0")


def _copy(path: Path, to: Path) -> Path:
    shutil.copyfile(path, to)
    to.chmod(0o600)
    return to


def _sql(path: Path, sql: str) -> None:
    c = apsw.Connection(str(path))
    try:
        for _ in c.execute(sql):
            pass
    finally:
        c.close()


def _grow(sessions_dir: Path, sid: str, n: int = 3) -> None:
    with SessionWriter.open(sessions_dir, sid) as w:
        for i in range(n):
            w.emit(Event("tool_result", TOOL, b"more %d" % i))


def test_identical_copy(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir)
    old = _copy(path, tmp_path / "old.sqlite")
    c = prefix.compare_paths(old, path)
    assert c.is_prefix and c.identical and c.meta_equal
    assert c.lost_rows == 0 and c.lost_event_ranges == []
    assert c.tables["events"].old_rows == c.tables["events"].new_rows == 18


def test_grown_session_is_a_superset(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir, status=None)
    old = _copy(path, tmp_path / "old.sqlite")
    _grow(sessions_dir, sid, 3)
    c = prefix.compare_paths(old, path)
    assert c.is_prefix and not c.identical
    assert c.tables["events"].added == 3 and c.tables["events"].missing == 0
    assert c.meta_equal
    # and the other way round: the grown file is not a prefix of the old copy
    back = prefix.compare_paths(path, old)
    assert not back.is_prefix
    assert back.tables["events"].missing == 3
    last = back.tables["events"].new_rows
    assert back.lost_event_ranges == [(last + 1, last + 3)]
    assert "events" in back.describe_loss()


@pytest.mark.slow
def test_status_change_alone_is_a_superset_not_identical(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir, status=None)
    old = _copy(path, tmp_path / "old.sqlite")
    with SessionWriter.open(sessions_dir, sid) as w:
        w.set_status("completed")
    c = prefix.compare_paths(old, path)
    assert c.is_prefix and not c.meta_equal and not c.identical


@pytest.mark.slow
def test_lost_and_changed_rows_in_every_table(sessions_dir: Path, tmp_path: Path) -> None:
    _sid, path = make_session(sessions_dir, turns=4)
    new = _copy(path, tmp_path / "new.sqlite")
    _sql(
        new,
        "PRAGMA foreign_keys=OFF; DELETE FROM events WHERE sequence IN (4, 5, 6, 9);"
        "UPDATE events SET payload = x'00' WHERE sequence = 12;"
        "DELETE FROM cost_ledger WHERE sequence = 1;"
        "UPDATE plan_items SET decision = 'deny' WHERE sequence = 1;"
        "DELETE FROM producers WHERE category = 'kernel';",
    )
    c = prefix.compare_paths(path, new)
    assert not c.is_prefix
    assert c.lost_event_ranges == [(4, 6), (9, 9), (12, 12)]
    assert c.tables["events"].missing == 4 and c.tables["events"].changed == 1
    assert c.tables["cost_ledger"].missing == 1
    assert c.tables["plan_items"].changed == 1
    assert c.tables["producers"].missing == 1
    assert c.lost_rows == 8
    assert c.describe_loss().startswith("events 4-6, 9, 12")


def test_type_matters(sessions_dir: Path, tmp_path: Path) -> None:
    """1 and 1.0 compare equal in Python, not in SQLite: a row that changed type changed."""
    _sid, path = make_session(sessions_dir, revision=1)
    old = _copy(path, tmp_path / "old.sqlite")
    new = _copy(path, tmp_path / "new.sqlite")
    _sql(old, "UPDATE events SET payload = 1 WHERE sequence = 2")  # BLOB affinity: kept as is
    _sql(new, "UPDATE events SET payload = 1.0 WHERE sequence = 2")
    c = prefix.compare_paths(old, new)
    assert c.tables["events"].changed == 1 and not c.is_prefix
    assert c.lost_event_ranges == [(2, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("start", [r for r in DDL if r < CURRENT_REVISION])
def test_copy_of_an_older_revision_is_a_prefix_of_the_migrated_session(
    sessions_dir: Path, tmp_path: Path, start: int
) -> None:
    sid, path = make_session(sessions_dir, revision=start, status=None)
    old = _copy(path, tmp_path / "old.sqlite")
    migrate.migrate_sessions(sessions_dir, [sid])
    c = prefix.compare_paths(old, path)
    assert (c.old_revision, c.new_revision) == (start, CURRENT_REVISION)
    assert c.is_prefix and not c.identical and c.lost_rows == 0
    assert c.decided_by == "rows"  # a file below revision 3 has no head to prove it by
    # and a session that grew after its migration still has the old copy as a prefix
    _grow(sessions_dir, sid, 2)
    grown = prefix.compare_paths(old, path)
    assert grown.is_prefix and grown.tables["events"].added == 2
    assert not prefix.compare_paths(path, old).is_prefix


@pytest.mark.slow
def test_reads_committed_wal_frames_of_a_live_file(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir, status=None)
    old = _copy(path, tmp_path / "old.sqlite")
    w = SessionWriter.open(sessions_dir, sid)
    try:
        w.emit(Event("tool_result", TOOL, b"in the wal"))
        c = prefix.compare_paths(old, path)
        assert c.is_prefix and c.tables["events"].added == 1
    finally:
        w.close()
