"""A leaf page of another session (same schema) copied over one of this file's leaves, at
revision 3.

At bcf0498 recover kept the other session's events, labelled them ``verified`` and reported
``lost {}`` (its own gap rows recorded link breaks whose expected hash was the other
session's), and kept another session's ledger rows naming events this session never had. Now
the chain tells them apart (``merge._Merger.drop_foreign``): this session's events link from
its genesis or back from its head; a run that neither reaches and that its anchored
neighbours refute is another session's. Such rows are never kept, never verified, and counted
in ``foreign_ignored`` (report and recovery log); this session's events there are lost.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentdb import checks, paths, salvage
from tests.fuzz import damage
from tests.rows import page_size, row_sets, write_at
from tests.support import make_session


def copy_their_leaf(tmp_path: Path, sessions_dir: Path, table: str, k: int) -> tuple:  # type: ignore[type-arg]
    sid, path = make_session(sessions_dir, turns=30, profile="mine")
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    _, other = make_session(other_dir, turns=35, profile="theirs")
    mine, theirs = row_sets(path), row_sets(other)
    ps = page_size(path)
    ours, their_pages = damage.pages_of(path, table, "leaf"), damage.pages_of(other, table, "leaf")
    src = their_pages[k]
    with open(other, "rb") as f:
        f.seek((src - 1) * ps)
        data = f.read(ps)
    write_at(path, (ours[k] - 1) * ps, data)
    return sid, path, mine, theirs


@pytest.mark.parametrize("k", [2, 3, -1])
def test_another_sessions_events_leaf_is_never_kept(
    sessions_dir: Path, tmp_path: Path, k: int
) -> None:
    sid, path, mine, theirs = copy_their_leaf(tmp_path, sessions_dir, "events", k)
    log = tmp_path / "log"
    out = salvage.recover_session(sessions_dir, sid, recovery_log=log)
    assert out.outcome == "recovered", out.notes
    got = row_sets(path)
    their_ids = {r[1] for r in theirs["events"]}
    assert not {r[1] for r in got["events"]} & their_ids
    assert {r[:9] for r in got["events"]} <= {r[:9] for r in mine["events"]}
    assert out.foreign_ignored.get("events", 0) > 0
    assert out.tables["events"]["verified"] == len(got["events"])
    assert out.lost.get("events_missing", 0) == len(mine["events"]) - len(got["events"])
    line = json.loads(log.read_text().splitlines()[-1])
    assert line["foreign_ignored"] == out.foreign_ignored
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"


def test_another_sessions_ledger_rows_past_the_head_are_never_kept(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path, mine, theirs = copy_their_leaf(tmp_path, sessions_dir, "cost_ledger", 0)
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", out.notes
    got = row_sets(path)
    top = max(r[0] for r in mine["events"])
    assert all(r[1] <= top for r in got["cost_ledger"])
    assert out.foreign_ignored.get("cost_ledger", 0) == sum(
        1 for r in theirs["cost_ledger"] if r[1] > top
    )
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"


def test_another_sessions_meta_page_is_damage_when_the_chain_names_this_session(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """At bcf0498 the whole file was refused as ``foreign`` (recover ``refused``, the kernel's
    open ``Unreadable`` after running the recovery hook). The chain's genesis is the file
    name's id, so the row is damage: check calls it corrupt, recover keeps every row of this
    session and rebuilds session_meta from the file name, the kernel's open recovers it."""
    from agentdb.kernel import open_session

    sid, path, mine, _ = copy_their_leaf(tmp_path, sessions_dir, "session_meta", 0)
    result = checks.check_path(path, sid)
    assert result.verdict == "corrupt", result.findings
    assert "meta_id_mismatch" not in {f.code for f in result.findings}
    open_session(sessions_dir, sid).close()
    got = row_sets(path)
    for table in ("events", "cost_ledger", "plan_items", "producers"):
        assert got[table] == mine[table], table
    assert [r[0] for r in got["session_meta"]] == [sid]
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"
    line = json.loads(paths.recovery_log_path(sessions_dir).read_text().splitlines()[-1])
    assert line["foreign_ignored"] == {"session_meta": 1}


def test_a_file_whose_chain_names_the_other_session_stays_foreign(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """Another session's whole file under this name: its chain starts at its own genesis."""
    sid, path = make_session(sessions_dir, turns=3)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    _, other = make_session(other_dir, turns=3)
    path.write_bytes(other.read_bytes())
    assert checks.check_path(path, sid).verdict == "foreign"
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "refused", out.notes
