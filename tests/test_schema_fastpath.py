"""The schema fast path (exact sqlite_schema rows of a known-good schema) must give exactly the
answer of the structural fingerprint comparison, on real files."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from agentdb import db
from agentdb.checks import check_path
from agentdb.schema import identity, revisions
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.store import SessionWriter
from tests.support import make_session


def _both(path: Path, revision: int) -> tuple[list[str], list[str], bool]:
    """(schema_differences, the fingerprint's own answer, whether the fast path matched)."""
    conn = db.open_readonly(path, check_schema=False)
    try:
        rows = identity.schema_rows(conn)
        fast = identity.schema_differences(conn, revision, rows=rows)
        assert identity.schema_differences(conn, revision) == fast  # rows read by itself
        slow = identity._fingerprint_differences(conn, revision)
        return fast, slow, rows == identity.fresh_schema(revision)
    finally:
        conn.close()


def _other_writer(tmp_path: Path, revision: int, edit: Callable[[str], str] = str) -> Path:
    """A file written by another conforming writer: application_id 0, other white space."""
    path = tmp_path / f"other{revision}.sqlite"
    ddl = re.sub(r"--[^\n]*", "", revisions.DDL[revision])
    ddl = re.sub(r"[ \t]+", " ", ddl).replace("(\n", "( \n")
    c = apsw.Connection(str(path))
    db.exec_script(c, edit(ddl) + f";PRAGMA user_version = {revision};")
    c.close()
    path.chmod(0o600)
    return path


def _alter(path: Path, sql: str) -> None:
    c = apsw.Connection(str(path))
    db.exec_script(c, sql)
    c.close()


@pytest.mark.parametrize("revision", [1, 2, 3])
def test_fresh_file_takes_the_fast_path(sessions_dir: Path, revision: int) -> None:
    _, path = make_session(sessions_dir, revision=revision)
    assert _both(path, revision) == ([], [], True)


def test_migrated_file_is_decided_by_its_fingerprint_once(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, revision=1)
    SessionWriter.open(sessions_dir, sid).close()  # migrates to the current revision
    conn = db.open_readonly(path)
    assert db.pragma(conn, "user_version") == CURRENT_REVISION
    assert any(str(r[3]).startswith('CREATE TABLE "events"') for r in identity.schema_rows(conn))
    conn.close()
    identity._DECIDED.clear()
    # not the text agentdb creates at the current revision (the rebuilt tables were renamed)
    assert _both(path, CURRENT_REVISION) == ([], [], False)
    assert len(identity._DECIDED) == 1  # decided once; every file sharing the text reuses it


@pytest.mark.slow
@pytest.mark.parametrize("revision", [1, 2])
def test_other_writer_whitespace_takes_the_slow_path(tmp_path: Path, revision: int) -> None:
    path = _other_writer(tmp_path, revision)
    fast, slow, hit = _both(path, revision)
    assert not hit and fast == slow == []


@pytest.mark.parametrize(
    "change",
    [
        "CREATE TABLE extra(x)",
        "DROP INDEX idx_events_kind",
        "CREATE INDEX idx_extra ON events(timestamp)",
        "ANALYZE",  # sqlite_stat1: SQLite's own table, not a difference, but not known-good text
    ],
)
@pytest.mark.parametrize("revision", [1, 2, 3])
def test_changed_files_agree(sessions_dir: Path, change: str, revision: int) -> None:
    _, path = make_session(sessions_dir, revision=revision)
    _alter(path, change)
    fast, slow, hit = _both(path, revision)
    assert not hit and fast == slow
    assert (fast == []) == (change == "ANALYZE")


def test_other_writer_with_an_extra_table_agrees(tmp_path: Path) -> None:
    path = _other_writer(tmp_path, 1, lambda ddl: ddl + ";CREATE TABLE extra(x)")
    fast, slow, hit = _both(path, 1)
    assert not hit and fast == slow == ["unexpected table extra"]
    conn = db.open_readonly(path)
    assert identity.identify(conn).kind == "foreign"
    conn.close()


def test_check_verdicts_unchanged_by_the_fast_path(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    assert check_path(path, sid, quick=True).verdict == "ok"
    _alter(path, "DROP INDEX idx_plan_items_event")
    got = check_path(path, sid, quick=True)
    assert [f.code for f in got.findings] == ["schema_mismatch"]
    assert "missing index idx_plan_items_event" in got.findings[0].message
