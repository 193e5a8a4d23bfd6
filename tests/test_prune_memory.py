"""Issue 12: a prune plan's memory is flat in the number of sessions it selects.

A dry run selecting every session of the directory (``--until 0s``), its JSON document and its
table written to /dev/null as the CLI writes them: the peak of what Python holds meanwhile
(tracemalloc) over 3,000 sessions is compared with the same over 500. The scratch database's
pages and the index stream's window are made small (100 rows), so what a plan holds per page
is small too and what it holds per selected session is what grows; the collector runs often
(cyclic garbage check's judge leaves awaits it for longer the more ran before). The decisions
live in the scratch database and are read back a page at a time: what grows is the index
stream's share (its sorted list of every id, ~75 bytes each): measured 115 bytes per session
alone, 205 after the other prune tests. Holding a decision per selected session in Python, as
the plan before did (its ``PruneDecision``, the ``top`` dict, ``statuses``, the lists of
``PruneResult``), measured 807. The bound is 600: after the full suite this code measured up to 451.

(Peak RSS of the CLI cannot tell the two apart at sizes a test can build: below ~10,000
sessions the decisions fit in what the index stream and check's judge freed before them. At
30,000 the old plan took 59.0 MB, this one 42.2, as much as a plan selecting nothing.)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import os
import time
import tracemalloc
from pathlib import Path

import pytest
import ulid

import agentdb.index.streaming
from agentdb import prune
from agentdb.cli import output
from agentdb.cli import prune as prune_cli
from agentdb.prune import planning, scratch
from tests.support import make_session

pytestmark = pytest.mark.slow

SMALL, LARGE = 500, 3000
BOUND = 600  # bytes per selected session the peak may grow by (old code: 807-842)


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _tree(root: Path, n: int) -> tuple[Path, Path]:
    """``n`` copies of one small ended session, each under its own id (the 26 bytes of the id
    replaced in place: every copy is a valid session file), and an empty plugin cache."""
    sessions_dir = root / "state" / "agent" / "sessions"
    sessions_dir.mkdir(parents=True, mode=0o700)
    plugin_cache = root / "cache" / "agent" / "plugins"
    plugin_cache.mkdir(parents=True)
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=300)
    t = start - dt.timedelta(days=1)
    sid, path = make_session(
        sessions_dir,
        session_id=str(ulid.ULID.from_datetime(t)),
        started_at=_iso(t),
        ended_at=_iso(t + dt.timedelta(hours=1)),
        turns=1,
        revision=2,  # the id replaced in place below: no hash binds it at revision 2
    )
    template = path.read_bytes()
    path.unlink()
    for i in range(n):
        new = str(ulid.ULID.from_datetime(start + dt.timedelta(minutes=i)))
        (sessions_dir / f"{new}.sqlite").write_bytes(template.replace(sid.encode(), new.encode()))
    return sessions_dir, plugin_cache


def test_a_plan_selecting_every_session_is_flat_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "PAGE", 100)
    monkeypatch.setattr(planning, "FRESH_CHUNK", 100)
    monkeypatch.setattr(agentdb.index.streaming, "WINDOW", 100)
    sel = prune.Selectors(older_than=dt.timedelta(0))
    peaks = {}
    for n in (SMALL, LARGE):
        sessions_dir, plugin_cache = _tree(tmp_path / f"n{n}", n)
        time.sleep(0.12)  # settled: the index keeps their rows (racily clean rule)
        with prune.plan(sessions_dir, plugin_cache, sel):  # the index written, imports done
            pass
        # Frequent collections: check's judge leaves cyclic garbage per file it judges, and how
        # much of it awaits the collector at the peak depends on what ran before in this
        # process (other tests), not on the plan.
        threshold = gc.get_threshold()
        gc.set_threshold(100, 1, 1)
        tracemalloc.start()
        try:
            with (
                prune.plan(sessions_dir, plugin_cache, sel) as plan,
                open(os.devnull, "w") as null,
                contextlib.redirect_stdout(null),
                contextlib.redirect_stderr(null),
            ):
                result = prune.dry_run(plan)
                output.emit_json_stream(result.json_parts())
                prune_cli._show(result, "simple")
                assert (len(result.would_remove), len(result.refused)) == (n, 0)
                assert result.summary()["would_remove"] == n
            peaks[n] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            gc.set_threshold(*threshold)
        del plan, result
    per_session = (peaks[LARGE] - peaks[SMALL]) / (LARGE - SMALL)
    assert per_session < BOUND, (
        f"peak {peaks[SMALL] / 1e6:.2f} MB at {SMALL:,} sessions, {peaks[LARGE] / 1e6:.2f} MB "
        f"at {LARGE:,}: {per_session:.0f} bytes per session"
    )
