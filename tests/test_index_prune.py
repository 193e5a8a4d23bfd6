"""prune plans from the index, and checks again just before removing, under the lock: a child
created since the plan keeps its parent (``has_children``), a file damaged since the plan with
its stamp unchanged stays (``unreadable``), a file changed in place with its stamp set back is
read again (``changed``), and a plan from the index equals one from the files."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import apsw
import pytest

from agentdb import index, prune
from agentdb.index import checked, verdicts
from agentdb.jobs import demo
from agentdb.store import SessionWriter
from tests.support import make_session


def _settle() -> None:
    time.sleep(0.12)


def test_a_child_created_after_the_plan_keeps_its_parent(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    parent, _ = make_session(sessions_dir, turns=1)
    _settle()
    plan = prune.plan(sessions_dir, plugin_cache, prune.Selectors(ids=(parent,)))
    assert [d.session_id for d in plan.removals] == [parent]
    child, _ = make_session(sessions_dir, turns=1, parent=parent, depth=1)
    result = prune.execute(plan)
    assert result.removed == []
    [refused] = result.refused
    assert [r.code for r in refused.reasons] == ["has_children"] and child in refused.reasons[
        0
    ].message
    assert (sessions_dir / f"{parent}.sqlite").exists()


@pytest.mark.slow
def test_a_file_damaged_after_the_plan_with_the_same_stamp_stays(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=12)
    _settle()
    plan = prune.plan(sessions_dir, plugin_cache, prune.Selectors(ids=(sid,)))
    assert plan.removals
    st = os.stat(path)
    # a leaf overwritten in place: damage the quick_check under the lock sees at any revision
    # (a flip inside one row's payload is the full check's, which the plan already ran)
    demo.damage_page(path, table="events", nth_leaf=1)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # inode, size, mtime as planned
    result = prune.execute(plan)
    assert result.removed == []
    assert [r.code for r in result.refused[0].reasons] == ["unreadable"]
    assert path.exists()
    # named with --include-damaged, it goes
    plan = prune.plan(sessions_dir, plugin_cache, prune.Selectors(ids=(sid,), include_damaged=True))
    assert prune.execute(plan).removed == [sid]


@pytest.mark.slow
def test_an_in_place_change_with_the_stamp_set_back_is_read_again_under_the_lock(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    """A session resumed after the plan (status back to running) whose inode, size and mtime
    are as planned (the mtime set back): its ctime moved, so execute reads its status again
    under the lock and keeps it."""
    sid, path = make_session(sessions_dir, turns=1, status="completed")
    _settle()
    plan = prune.plan(sessions_dir, plugin_cache, prune.Selectors(ids=(sid,)))
    assert [d.session_id for d in plan.removals] == [sid]
    st = os.stat(path)
    w = SessionWriter.open(sessions_dir, sid)
    w.set_status("running")
    w.close()
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_ino == st.st_ino
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    result = prune.execute(plan)
    assert result.removed == []
    [refused] = result.refused
    assert [r.code for r in refused.reasons] == ["changed"] and "running" in refused.reasons[
        0
    ].message
    assert path.exists()


@pytest.mark.slow
def test_the_plan_from_the_index_selects_from_fresh_reads(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    """A session whose status changed since the index stored it is selected (or not) by its
    file, not by the stored row; the plan equals one made by reading every file."""
    sid, _ = make_session(sessions_dir, turns=1, status="running")
    other, _ = make_session(sessions_dir, turns=1, status="completed")
    _settle()
    sel = prune.Selectors(statuses=("completed",))
    first = prune.plan(sessions_dir, plugin_cache, sel)
    assert [d.session_id for d in first.candidates] == [other]
    assert index.snapshot(sessions_dir).reread == 0  # the index holds both now
    w = SessionWriter.open(sessions_dir, sid)
    w.set_status("completed")
    w.close()
    again = prune.plan(sessions_dir, plugin_cache, sel)
    scanned = prune.plan(sessions_dir, plugin_cache, sel, use_index=False)
    assert [d.session_id for d in again.candidates] == sorted([sid, other])
    assert prune.dry_run(again).to_json() == prune.dry_run(scanned).to_json()


def _rewrite_index_status(sid: str, status: str) -> None:
    """Change one session's status in the session index, checksum and all (a row that is
    wrong though the file's identity is the one it was read at: what only damage or a bug
    could leave)."""
    from agentdb.index import verdicts

    conn = apsw.Connection(str(verdicts.cache_path()))
    try:
        cols = ", ".join(verdicts.SESSION_COLUMNS)
        rows = list(conn.execute(f"SELECT {cols} FROM sessions WHERE name = ?", (f"{sid}.sqlite",)))
        assert len(rows) == 1, rows
        values = list(rows[0])
        values[verdicts.SESSION_COLUMNS.index("status")] = status
        conn.execute(
            "UPDATE sessions SET status = ?, checksum = ? WHERE name = ?",
            (status, verdicts.row_sum(tuple(values)), f"{sid}.sqlite"),
        )
    finally:
        conn.close()


@pytest.mark.slow
def test_a_selected_session_is_judged_from_its_file_not_from_a_wrong_index_row(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    """A selected session the index knows is opened once, by check's judge; the status the
    judge reads must be the index's, or the file is read afresh and the filters apply to what
    it holds: a completed session the index calls failed is not pruned by --status failed."""
    sid, path = make_session(sessions_dir, turns=2, status="completed")
    other, _ = make_session(sessions_dir, turns=2, status="failed")
    _settle()
    sel = prune.Selectors(statuses=("failed",))
    assert [d.session_id for d in prune.plan(sessions_dir, plugin_cache, sel).removals] == [other]
    _rewrite_index_status(sid, "failed")
    plan = prune.plan(sessions_dir, plugin_cache, sel)
    assert [d.session_id for d in plan.candidates] == [other]
    assert [d.session_id for d in plan.removals] == [other]
    assert plan.statuses.get(sid) is None and plan.statuses[other] == "failed"
    assert path.exists()


@pytest.mark.slow
def test_a_selected_session_the_index_knows_is_still_judged_whole(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    """Facts from the index, the one open by check's full judge: a content hash that fails
    (every page still sound, so quick_check passes) keeps a session a selector picked, from
    a warm index as from the files."""
    sid, path = make_session(sessions_dir, turns=3)
    _settle()
    sel = prune.Selectors(older_than=dt.timedelta(0))
    assert [d.session_id for d in prune.plan(sessions_dir, plugin_cache, sel).removals] == [sid]
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE events SET payload = CAST(x'7b7d' AS BLOB) WHERE sequence = 2")
    conn.close()
    _settle()
    prune.plan(sessions_dir, plugin_cache, prune.Selectors(older_than=dt.timedelta(days=999)))
    for use_index in (True, False):
        plan = prune.plan(sessions_dir, plugin_cache, sel, use_index=use_index)
        [d] = plan.candidates
        assert not d.remove and [r.code for r in d.reasons] == ["unreadable"], d.reasons
        assert "content_hash" in d.reasons[0].message or "hash" in d.reasons[0].message


class _Judged:
    """Counts the files check's judge reads (wraps ``prune.scan.judge_verdict``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from agentdb.prune import scan

        self.ids: list[str] = []
        real = scan.judge_verdict

        def counted(sessions_dir: Path, session_id: str, **kw: bool) -> object:
            self.ids.append(session_id)
            return real(sessions_dir, session_id, **kw)

        monkeypatch.setattr(scan, "judge_verdict", counted)


def test_a_healthy_full_verdict_for_the_file_as_it_is_stands_for_the_judge(
    sessions_dir: Path, plugin_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A selected session whose full check verdict (``check``'s, or a previous plan's judge)
    is healthy and recorded for its identity now is judged by that verdict, not read again;
    one changed since (its identity moved) is judged from its file, whatever it was."""
    a, _ = make_session(sessions_dir, turns=2)
    b, _ = make_session(sessions_dir, turns=2)
    _settle()
    checked.check_and_record(sessions_dir)  # full verdicts: ok, ok
    _settle()
    judged = _Judged(monkeypatch)
    sel = prune.Selectors(older_than=dt.timedelta(0))
    plan = prune.plan(sessions_dir, plugin_cache, sel)
    assert [d.session_id for d in plan.removals] == [a, b]
    assert judged.ids == []
    w = SessionWriter.open(sessions_dir, b)
    w.set_status("running")
    w.set_status("completed")
    w.close()
    _settle()
    plan = prune.plan(sessions_dir, plugin_cache, sel)
    assert [d.session_id for d in plan.removals] == [a, b]
    assert judged.ids == [b]


def test_the_judges_verdicts_are_recorded_and_taken_by_the_next_plan(
    sessions_dir: Path, plugin_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, _ = make_session(sessions_dir, turns=2)
    _settle()
    judged = _Judged(monkeypatch)
    sel = prune.Selectors(older_than=dt.timedelta(0))
    assert [d.session_id for d in prune.plan(sessions_dir, plugin_cache, sel).removals] == [sid]
    assert judged.ids == [sid]
    found = verdicts.lookup(sessions_dir)[f"{sid}.sqlite"]
    assert (found.verdict, found.quick, found.status) == ("ok", False, "completed")
    _settle()
    assert [d.session_id for d in prune.plan(sessions_dir, plugin_cache, sel).removals] == [sid]
    assert judged.ids == [sid]  # not read again


def test_a_quick_or_damaged_verdict_never_stands_for_the_judge(
    sessions_dir: Path, plugin_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --quick verdict is not the full judge's; a damaged one is judged again (its problem
    worded by the judge): both files are read, and the damaged one stays."""
    quick, _ = make_session(sessions_dir, turns=2)
    bad, path = make_session(sessions_dir, turns=3)
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE events SET payload = CAST(x'7b7d' AS BLOB) WHERE sequence = 2")
    conn.close()
    _settle()
    checked.check_and_record(sessions_dir, quick=True)
    checked.check_and_record(sessions_dir, [bad])
    assert verdicts.lookup(sessions_dir)[f"{bad}.sqlite"].verdict != "ok"
    _settle()
    judged = _Judged(monkeypatch)
    plan = prune.plan(sessions_dir, plugin_cache, prune.Selectors(older_than=dt.timedelta(0)))
    assert sorted(judged.ids) == sorted([quick, bad])
    assert [d.session_id for d in plan.removals] == [quick]
    [kept] = plan.refusals
    assert kept.session_id == bad and [r.code for r in kept.reasons] == ["unreadable"]


def test_a_recorded_verdict_whose_status_is_not_the_index_rows_is_not_taken(
    sessions_dir: Path, plugin_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index row says failed, the file (and its recorded verdict) says completed: the
    file is read afresh and the filters apply to what it holds."""
    sid, path = make_session(sessions_dir, turns=2, status="completed")
    _settle()
    checked.check_and_record(sessions_dir)
    _settle()
    sel = prune.Selectors(statuses=("failed",))
    assert prune.plan(sessions_dir, plugin_cache, sel).candidates == []
    _rewrite_index_status(sid, "failed")
    plan = prune.plan(sessions_dir, plugin_cache, sel)
    assert plan.candidates == [] and path.exists()
