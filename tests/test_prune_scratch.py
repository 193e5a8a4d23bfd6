"""The prune plan's scratch database: private, outside the sessions directory, gone when the
plan is closed or fails, and in memory when it cannot be written."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import apsw
import pytest

from agentdb import paths, prune
from agentdb.prune import scratch
from tests.support import make_session

EVERY = prune.Selectors(older_than=dt.timedelta(0))


def _workdirs() -> set[str]:
    base = paths.agentdb_cache_dir() / "tmp"
    return (
        {n for n in os.listdir(base) if n.startswith("agentdb-prune-")} if base.is_dir() else set()
    )


def test_scratch_is_private_and_goes_with_the_plan(sessions_dir: Path, plugin_cache: Path) -> None:
    make_session(sessions_dir)
    names = sorted(os.listdir(sessions_dir))
    before = _workdirs()
    with prune.plan(sessions_dir, plugin_cache, EVERY) as plan:
        assert len(plan.removals) == 1
        (new,) = _workdirs() - before
        d = paths.agentdb_cache_dir() / "tmp" / new
        assert os.stat(d).st_mode & 0o777 == 0o700
        assert sessions_dir not in d.parents
        assert sorted(os.listdir(sessions_dir)) == names  # nothing added there
    assert _workdirs() == before


def test_scratch_goes_on_error(
    sessions_dir: Path, plugin_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_session(sessions_dir)
    before = _workdirs()

    def boom(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(prune.planning, "judge_all", boom)
    with pytest.raises(KeyboardInterrupt):
        prune.plan(sessions_dir, plugin_cache, EVERY, use_index=False)
    assert _workdirs() == before


@pytest.mark.slow
def test_a_full_disk_midway_plans_again_in_memory(
    sessions_dir: Path, plugin_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = sorted(make_session(sessions_dir)[0] for _ in range(3))
    put = scratch.PlanStore.put
    calls = []

    def full_once(self: scratch.PlanStore, *a: object, **kw: object) -> None:
        calls.append(self.on_disk)
        if self.on_disk and len(calls) == 2:
            raise apsw.FullError("database or disk is full")
        put(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(scratch.PlanStore, "put", full_once)
    with prune.plan(sessions_dir, plugin_cache, EVERY) as plan:
        assert [d.session_id for d in plan.removals] == ids
        assert plan.store is not None and not plan.store.on_disk
        assert any("planned in memory" in n for n in plan.notes_index)
