"""The free-space tier: stale records inside pages fill gaps and never override a live row."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from agentdb import salvage
from agentdb.salvage import freespace, pages
from agentdb.schema.revisions import COLUMNS
from tests.rows import all_rows, zero_page
from tests.salvage import corpus
from tests.salvage.test_corpus import assert_passes_check
from tests.support import make_session

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _native_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # SQLite's .recover must not fill the gap first: this is about the free-space tier.
    monkeypatch.setenv("AGENTDB_SQLITE3", "none")


def plain(path: Path, sql: str) -> None:
    """Change the file the way another SQLite writer would (no VACUUM, no secure_delete)."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA secure_delete=0").fetchall()
        for stmt in sql.split(";"):
            if stmt.strip():
                conn.execute(stmt).fetchall()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def free_rows(path: Path, sid: str, missing: set[int]) -> list[tuple[str, tuple]]:
    ps = pages.salvage_pages(path.read_bytes(), None, sid)
    return [(t, r) for t, r, _ in freespace.iter_rows(ps.free, sid, lambda: missing)]


def small_event_leaves(path: Path) -> list[int]:
    return corpus.pages_of(path, "events", "leaf")


@pytest.mark.parametrize("revision", [2, 3])
def test_deleted_event_in_a_freeblock_fills_the_gap(sessions_dir: Path, revision: int) -> None:
    sid, path = make_session(sessions_dir, turns=20, revision=revision)
    original = all_rows(path)
    events = {r[0]: r for r in original["events"]}
    # Delete one event in the middle of a leaf (its bytes stay in a freeblock), then zero
    # another leaf so that the file needs recovery.
    leaves = small_event_leaves(path)
    conn = apsw.Connection(str(path))
    victim = conn.execute(
        "SELECT sequence FROM events WHERE length(payload) < 500 AND sequence > 3 "
        "ORDER BY sequence LIMIT 1 OFFSET 2"
    ).fetchone()[0]
    conn.close()
    plain(path, f"DELETE FROM events WHERE sequence = {victim}")
    assert (victim, "events") not in {(r[0], "events") for r in all_rows(path)["events"]}
    # the tier sees it (its key found through its content_hash when the rowid was overwritten)
    found = free_rows(path, sid, {victim})
    assert ("events", events[victim][:9]) in [(t, r[:9]) for t, r in found]
    zero_page(path, leaves[-1])

    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    assert "free-space" in out.engines and out.found_by["free-space"]["used"]["events"] >= 1
    assert out.tables["events"]["sources"].get("free-space", 0) >= 1
    # its stored content_hash matched (its key was found by it): verified, as from any tier
    assert out.tables["events"]["unverified"] == 0, out.notes
    assert_passes_check(path, sid)
    got = all_rows(path)
    got_events = {r[0]: r for r in got["events"]}
    assert got_events[victim][:9] == events[victim][:9]  # back, exactly as it was
    for table in corpus.TABLES:  # nothing invented (a revision-2 file is recovered into a
        n = len(COLUMNS[1][table])  # revision-3 one: its revision-1 columns are the same)
        assert {tuple(r[:n]) for r in got[table]} <= {tuple(r[:n]) for r in original[table]}


def test_older_session_meta_in_a_freeblock_never_wins(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=6, status=None)  # still running
    before = [tuple(r) for r in all_rows(path)["session_meta"]]
    # Another row beside it, then an UPDATE that grows the real row: the old cell is freed
    # into a freeblock (not at the content start), the new one written elsewhere.
    plain(
        path,
        "INSERT INTO session_meta VALUES ('ZZZZZZZZZZZZZZZZZZZZZZZZZZ', NULL, 'x', 'running', "
        "0, '2020-01-01T00:00:00.000Z', NULL);"
        "UPDATE session_meta SET status = 'completed', ended_at = '2030-01-01T00:00:00.000Z' "
        f"WHERE session_id = '{sid}';"
        "DELETE FROM session_meta WHERE session_id = 'ZZZZZZZZZZZZZZZZZZZZZZZZZZ'",
    )
    live = [tuple(r) for r in all_rows(path)["session_meta"]]
    [old] = before
    [new] = live
    assert old != new
    # The free-space tier does find the older copy (else this test would prove nothing) ...
    metas = [r for t, r in free_rows(path, sid, set()) if t == "session_meta"]
    assert old in metas, metas
    zero_page(path, small_event_leaves(path)[1])
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    # ... and the live, updated row wins.
    assert [tuple(r) for r in all_rows(path)["session_meta"]] == [new]
    assert out.tables["session_meta"]["sources"] == {"live": 1}
