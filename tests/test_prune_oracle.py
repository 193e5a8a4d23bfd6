"""``prune.plan`` (its data in a scratch database) decides exactly as the planner before it did
(``tests/prune_oracle.py``, whole-directory, one object per session), on generated trees:
parent links, old and new sessions, running ones, pinned ones, damaged ones, a live one,
interrupted prunes, and every selector (explicit ids, age, status, --keep-last,
--with-descendants, --include-damaged, --include-pinned), with and without the index."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import apsw
import pytest
import ulid
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentdb import fsutil, prune
from agentdb.jobs import demo
from agentdb.prune.scan import intent_bytes, stamp_of
from tests import prune_oracle
from tests.support import held_open, make_session

pytestmark = pytest.mark.slow

NOW = dt.datetime.now(dt.timezone.utc)
DAYS = (1.0, 30.0, 120.0, 200.0, 400.0)


def iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


session_st = st.fixed_dictionaries(
    {
        "parent": st.integers(min_value=-1, max_value=8),  # an earlier session, or none
        "days": st.sampled_from(DAYS),
        "status": st.sampled_from(("completed", "completed", "running", "failed")),
        "pinned": st.booleans(),
        "damage": st.sampled_from((None, None, None, None, "hash", "page", "corrupt_copy")),
        "intent": st.sampled_from((False, False, False, False, True)),
    }
)
selectors_st = st.fixed_dictionaries(
    {
        "ids": st.lists(st.integers(min_value=0, max_value=8), max_size=3),
        "older_than": st.sampled_from((None, 90, 0)),
        "keep_last": st.sampled_from((None, None, 0, 1, 3)),
        "statuses": st.sampled_from(((), (), ("completed",), ("running", "failed"))),
        "with_descendants": st.booleans(),
        "include_damaged": st.booleans(),
        "include_pinned": st.booleans(),
    }
)


def _build(root: Path, specs: list[dict[str, Any]]) -> tuple[Path, Path, list[str]]:
    sessions_dir = root / "state" / "agent" / "sessions"
    fsutil.ensure_dir(sessions_dir)
    cache = root / "cache" / "agent" / "plugins"
    cache.mkdir(parents=True)
    m = demo.MODEL_OLD
    ids: list[str] = []
    depths: list[int] = []
    for i, spec in enumerate(specs):
        t = NOW - dt.timedelta(days=spec["days"], minutes=len(specs) - i)
        parent = ids[spec["parent"]] if 0 <= spec["parent"] < i else None
        model = demo.MODEL_CACHED if spec["pinned"] else m
        sid, path = make_session(
            sessions_dir,
            session_id=str(ulid.ULID.from_datetime(t)),
            started_at=iso(t),
            ended_at=None if spec["status"] == "running" else iso(t + dt.timedelta(hours=1)),
            status=spec["status"],
            parent=parent,
            depth=0 if parent is None else depths[spec["parent"]] + 1,
            model=model,
            turns=1 if spec["damage"] != "page" else 20,
        )
        ids.append(sid)
        depths.append(0 if parent is None else depths[spec["parent"]] + 1)
        if spec["damage"] == "hash":
            conn = apsw.Connection(str(path))
            conn.execute("UPDATE events SET payload = X'00ff' WHERE sequence = 2")
            conn.close()
        elif spec["damage"] == "page":
            demo.damage_page(path, table="events", nth_leaf=1)
        elif spec["damage"] == "corrupt_copy":
            (sessions_dir / f"{sid}.sqlite.corrupt").write_bytes(path.read_bytes())
        if spec["intent"]:
            (sessions_dir / f"{sid}.sqlite.agentdb-prune-intent").write_bytes(
                intent_bytes(sid, stamp_of(path), False)
            )
    cm = demo.MODEL_CACHED
    (cache / cm.category / cm.name / cm.version).mkdir(parents=True)
    return sessions_dir, cache, ids


def _decisions(plan: Any) -> list[tuple[Any, ...]]:
    return [
        (
            d.session_id,
            d.remove,
            [(r.code, r.message) for r in d.reasons],
            d.bytes,
            d.files,
            d.damaged,
            d.resume,
            d.stamp,
            tuple(d.pins),
        )
        for d in plan.candidates
    ]


def _summary(plan: Any) -> dict[str, Any]:
    return {
        "decisions": _decisions(plan),
        "notes": plan.notes,
        "parents": dict(plan.parents),
        "references": {k: tuple(v) for k, v in plan.references.items()},
        "unknown": list(plan.unknown_references),
        "statuses": dict(plan.statuses),
        "seen": dict(plan.seen),
        "versions": [v.to_json() for v in plan.version_uses()],
        "versions_none_removed": [v.to_json() for v in plan.version_uses([])],
    }


@contextmanager
def _live(sessions_dir: Path, ids: list[str], which: int | None) -> Iterator[None]:
    with ExitStack() as stack:
        if which is not None and which < len(ids):
            stack.enter_context(held_open(sessions_dir / f"{ids[which]}.sqlite"))
        yield


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    specs=st.lists(session_st, min_size=1, max_size=6),
    sel=selectors_st,
    live=st.sampled_from((None, None, None, 0, 2)),
    use_index=st.booleans(),
)
def test_plan_decides_as_the_old_planner(
    specs: list[dict[str, Any]], sel: dict[str, Any], live: int | None, use_index: bool
) -> None:
    with tempfile.TemporaryDirectory(prefix="prune-oracle-") as tmp:
        sessions_dir, cache, ids = _build(Path(tmp), specs)
        kw = dict(sel)
        kw["ids"] = tuple(dict.fromkeys(ids[i] for i in sel["ids"] if i < len(ids)))
        if sel["older_than"] is not None:
            kw["older_than"] = dt.timedelta(days=sel["older_than"])
        if not kw["ids"] and all(
            kw[k] in (None, ()) for k in ("older_than", "keep_last", "statuses")
        ):
            kw["older_than"] = dt.timedelta(0)
        with _live(sessions_dir, ids, live):
            for _ in range(2):  # a cold index, then a warm one
                old = prune_oracle.plan(
                    sessions_dir, cache, prune_oracle.Selectors(**kw), now=NOW, use_index=use_index
                )
                with prune.plan(
                    sessions_dir, cache, prune.Selectors(**kw), now=NOW, use_index=use_index
                ) as new:
                    assert _summary(new) == _summary(old)
                    for d in new.candidates:
                        for r in d.reasons:
                            event(f"reason {r.code}")
                        event("removed" if d.remove else "refused")
