"""prune checks again just before removing: a child created since the plan keeps its parent
(``has_children``), and a file damaged since the plan with its stamp unchanged stays
(``unreadable``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentdb import prune
from tests.salvage.corpus import d_flipped_bytes
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


def test_a_file_damaged_after_the_plan_with_the_same_stamp_stays(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=12)
    _settle()
    plan = prune.plan(sessions_dir, plugin_cache, prune.Selectors(ids=(sid,)))
    assert plan.removals
    st = os.stat(path)
    d_flipped_bytes(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # inode, size, mtime as planned
    result = prune.execute(plan)
    assert result.removed == []
    assert [r.code for r in result.refused[0].reasons] == ["unreadable"]
    assert path.exists()
    # named with --include-damaged, it goes
    plan = prune.plan(sessions_dir, plugin_cache, prune.Selectors(ids=(sid,), include_damaged=True))
    assert prune.execute(plan).removed == [sid]
