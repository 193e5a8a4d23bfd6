"""Nothing removes a session, counts it ok or leaves it unchecked on a row of the derived
index (the one cache file under ``$XDG_CACHE_HOME/agentdb/``) that lies though the file's
identity is the one it was read at — what damage, a bug or a hand could leave: ``prune PARENT
--yes`` reads the parent links from the files before it removes; ``status`` and
``check --changed`` do not take a recorded ``ok`` that the file's own read contradicts.
Issue 29, item 5."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import apsw

from agentdb import prune
from agentdb.index import checked, verdicts
from agentdb.views import status
from tests.runner import Agentdb
from tests.support import make_session


def _settle() -> None:
    time.sleep(0.12)  # past the racily-clean window: the index believes its rows


def _rewrite(table: str, name: str, **values: Any) -> None:
    """Change one row of the cache, checksum and all."""
    cols = verdicts.SESSION_COLUMNS if table == "sessions" else verdicts.VERDICT_COLUMNS
    conn = apsw.Connection(str(verdicts.cache_path()))
    try:
        rows = list(conn.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE name = ?", (name,)))
        assert len(rows) == 1, rows
        row = list(rows[0])
        for k, v in values.items():
            row[cols.index(k)] = v
        sets = ", ".join(f"{k} = ?" for k in values)
        conn.execute(
            f"UPDATE {table} SET {sets}, checksum = ? WHERE name = ?",
            (*values.values(), verdicts.row_sum(tuple(row)), name),
        )
    finally:
        conn.close()


def test_prune_reads_the_childs_parent_from_its_file(
    agentdb: Agentdb, sessions_dir: Path, plugin_cache: Path
) -> None:
    parent, ppath = make_session(sessions_dir, turns=1)
    child, _ = make_session(sessions_dir, turns=1, parent=parent, depth=1)
    _settle()
    assert agentdb("--sessions-dir", str(sessions_dir), "sessions", "list").code == 0  # indexed
    _rewrite("sessions", f"{child}.sqlite", parent=None, depth=0)
    plan = prune.plan(sessions_dir, plugin_cache, prune.Selectors(ids=(parent,)))
    result = prune.execute(plan)
    assert result.removed == []
    [refused] = result.refused
    assert [r.code for r in refused.reasons] == ["has_children"], refused.reasons
    assert child in refused.reasons[0].message
    assert ppath.exists()
    code, out, err = agentdb(
        "--sessions-dir",
        str(sessions_dir),
        "--plugin-cache",
        str(plugin_cache),
        "prune",
        parent,
        "--yes",
    )
    assert ppath.exists(), (code, out, err)


def _damage(path: Path) -> None:
    """Zero session_meta's root page: the file's open fails (``check``: unreadable)."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    page = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name='session_meta'")
    root = int(page.fetchall()[0][0])
    size = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xff" * size)


def test_a_recorded_ok_the_file_contradicts_is_neither_counted_nor_skipped(
    agentdb: Agentdb, sessions_dir: Path, plugin_cache: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=1)
    good, _ = make_session(sessions_dir, turns=1)
    _damage(path)
    _settle()
    code, _, _ = agentdb("--sessions-dir", str(sessions_dir), "check", "--all")
    assert code == 1  # recorded: corrupt or unreadable
    # the verdict row lies: ok, for the file as it is
    _rewrite("verdicts", f"{sid}.sqlite", verdict="ok")
    ids, total = checked.changed_ids(sessions_dir)
    assert sid in ids and good not in ids and total == 2
    s = status.status(sessions_dir, plugin_cache)
    assert sid in s.damaged and s.summary.ok == 1, (s.damaged, s.summary)
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "check", "--changed", "--json")
    assert code == 1 and sid in out and good not in out
