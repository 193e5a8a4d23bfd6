"""No false all-clear: check is never ok/needs_migration where SQLite's full read fails.

At dd60f0c, a revision-1 session whose last page (the tail of a spilled payload) was lost while
its ``-wal`` held later commits passed ``check`` as ``needs_migration`` with no damage finding
and ``recover`` called it ``healthy``, yet reading that event failed with "disk I/O error":
``integrity_check`` passed and a revision-1 full check read no payload.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import apsw
import pytest

from agentdb import checks, salvage
from agentdb.jobs import demo
from agentdb.paths import sidecar
from agentdb.store import Event, SessionWriter
from tests.fuzz import damage
from tests.salvage import corpus

pytestmark = pytest.mark.slow


def build_wal_session(root: Path, revision: int) -> tuple[str, Path]:
    """A closed-by-kill copy: a spilled payload at the end of the main file, later commits only
    in the WAL."""
    w = SessionWriter.create(root / "writer", profile="coder", revision=revision)
    demo._turns(w, demo.MODEL_OLD, 100, seed=3)
    w.emit(Event("tool_result", corpus.BIG, corpus.big_payload(1)))
    w.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    w.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    demo._turns(w, demo.MODEL_CACHED, 150, seed=4)
    dst_dir = root / "sessions"
    dst_dir.mkdir(parents=True)
    dst = dst_dir / w.path.name
    for suffix in ("", "-wal"):
        shutil.copyfile(str(w.path) + suffix, str(dst) + suffix)
        os.chmod(str(dst) + suffix, 0o600)
    w.close()
    return w.session_id, dst


def unreadable_rows(path: Path) -> int:
    """Rows of ``events`` a plain SQLite read of a private copy cannot return."""
    copy = path.parent.parent / "probe" / path.name
    damage.copy_session(path, copy.parent)
    conn = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
    bad = 0
    try:
        for (seq,) in conn.execute("SELECT sequence FROM events ORDER BY sequence").fetchall():
            try:
                conn.execute("SELECT * FROM events WHERE sequence = ?", (seq,)).fetchall()
            except apsw.Error:
                bad += 1
    finally:
        conn.close()
        shutil.rmtree(copy.parent)
    return bad


@pytest.mark.parametrize("revision", [1, 2])
def test_lost_last_page_with_wal_is_damage(tmp_path: Path, revision: int) -> None:
    sid, path = build_wal_session(tmp_path, revision)
    ps = damage.page_size(path)
    os.truncate(path, path.stat().st_size - ps)
    assert sidecar(path, "-wal").exists()
    bad = unreadable_rows(path)
    result = checks.check_path(path, sid)
    if bad:
        assert result.verdict == "corrupt", result.findings
        out = salvage.recover_session(path.parent, sid, recovery_log=tmp_path / "log")
        assert out.outcome == "recovered", out.notes
        assert checks.check_path(path, sid, recovered=True).verdict == "ok"
    else:
        assert result.verdict in ("ok", "needs_migration")
    if revision == 1:
        assert bad, "the fixture must reproduce the lost page"
