"""Cross-session queries by scanning the files (the spec's "no separate index"), and one-session
views: list, show, tree, preflight (``events``: :mod:`agentdb.views.eventlog`). Read-only; an
unreadable file is listed as such.

How deep each view judges a file (:mod:`agentdb.checks.judge`): ``list`` reads each file's
``session_meta`` row and no more (level "open"), and shows the verdict ``check`` recorded for the
file as it is now, if any; ``show`` judges its one file at the quick level; ``events`` prints
what it can read, then judges the file fully. A recorded verdict of the same or a deeper level
stands in for checking again.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentdb import errors, paths, workers
from agentdb.checks import Judgement
from agentdb.cores import CHUNK, POOL_THRESHOLD
from agentdb.durations import older_than
from agentdb.index import checked, verdicts
from agentdb.index.row import (  # noqa: F401 (re-exported: sessions.SessionRow)
    UNREADABLE,
    SessionRow,
    id_time,
    read_row,
    row_of,
)
from agentdb.interrupts import Guarded
from agentdb.schema import enums
from agentdb.store import ProducerRow, SessionReader


def _read_chunk(work: tuple[list[paths.Entry], bool]) -> list[SessionRow]:
    entries, count_events = work
    return [read_row(e, count_events=count_events) for e in entries]


def scan(sessions_dir: Path, *, count_events: bool = True, jobs: int = 1) -> Iterator[SessionRow]:
    """Every ``<ULID>.sqlite`` entry's row, in id (= chronological) order.

    With ``jobs`` > 1 and many entries the files are read by that many forked processes, each
    taking chunks of entries; rows still come back in id order. Workers only read.
    """
    # Entries are made as they are needed (a list of 100,000 of them, each with its Path, held
    # ~50 MB): only the sorted ids are kept.
    entries = paths.iter_session_entries(sessions_dir)
    head = list(itertools.islice(entries, POOL_THRESHOLD))
    if jobs <= 1 or len(head) < POOL_THRESHOLD:
        for entry in itertools.chain(head, entries):
            yield read_row(entry, count_events=count_events)
        return
    rest = itertools.chain(head, entries)
    chunks = iter(lambda: (list(itertools.islice(rest, CHUNK)), count_events), ([], count_events))
    with workers.forked_pool(jobs) as pool:
        for part in pool.imap(_read_chunk, chunks):
            yield from part


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a scan; ``rows`` are the matching sessions read before it."""

    def __init__(self, rows: list[SessionRow]) -> None:
        super().__init__()
        self.rows = rows


def list_sessions(
    sessions_dir: Path,
    *,
    statuses: Iterable[str] | None = None,
    older: dt.timedelta | None = None,
    newer: dt.timedelta | None = None,
    now: dt.datetime | None = None,
    jobs: int = 1,
) -> list[SessionRow]:
    """Sessions in chronological order, filtered by status and by age.

    Age is measured from when a session ended, or started if it has not ended: ``older``
    keeps sessions at least that old (``0s``: every session up to now), ``newer`` those
    younger than that. ``jobs``: see :func:`scan`.
    """
    out: list[SessionRow] = []
    try:
        out.extend(
            iter_sessions(
                sessions_dir, statuses=statuses, older=older, newer=newer, now=now, jobs=jobs
            )
        )
    except KeyboardInterrupt:
        raise Interrupted(out) from None
    return out


def _with_verdict(sessions_dir: Path, row: SessionRow, recorded: verdicts.Lookup) -> SessionRow:
    """The row with the verdict ``check`` recorded for its file as it is now, if any."""
    if not recorded:
        return row
    found = checked.cached_judgement(sessions_dir, row.session_id, "open", recorded=recorded)
    if found is not None:
        _judged(row, found)
    return row


def with_verdicts(sessions_dir: Path, rows: Iterable[SessionRow]) -> Iterator[SessionRow]:
    """``rows`` (from the index or a scan), each with the verdict ``check`` recorded for its
    file as it is now, if any (``sessions list`` checks nothing itself)."""
    with verdicts.Lookup(sessions_dir) as recorded:  # a page at a time, in name order
        for row in rows:
            yield _with_verdict(sessions_dir, row, recorded)


def with_recorded(row: SessionRow, entry: verdicts.Recorded) -> SessionRow:
    """The row with ``entry``, a verdict the caller matched to the file as it is now."""
    _judged(row, checked.recorded_judgement(row.session_id, entry))
    return row


def _judged(row: SessionRow, j: Judgement) -> None:
    row.verdict, row.checked_at = j.verdict, j.checked_at
    if j.read_error and row.error is None:
        row.error = f"{row.path}: {j.describe()}"
        row.error_code = j.verdict


def iter_sessions(
    sessions_dir: Path,
    *,
    statuses: Iterable[str] | None = None,
    older: dt.timedelta | None = None,
    newer: dt.timedelta | None = None,
    now: dt.datetime | None = None,
    jobs: int = 1,
) -> Iterator[SessionRow]:
    """:func:`list_sessions`' rows as they are read, in chronological order (flat memory), each
    with the verdict ``check`` recorded for its file as it is now, if any."""
    now = now or dt.datetime.now(dt.timezone.utc)
    wanted = set(statuses) if statuses else None
    with verdicts.Lookup(sessions_dir) as recorded:  # a page at a time, in name order
        for row in scan(sessions_dir, jobs=jobs):
            row = _with_verdict(sessions_dir, row, recorded)
            if wanted is not None and row.status not in wanted:
                continue
            t = row.reference_time
            if older is not None and not older_than(t, older, now):
                continue
            if newer is not None and older_than(t, newer, now):
                continue
            yield row


class Listing:
    """Rows of a listing as they pass (Ctrl-C ends the iteration cleanly and sets
    ``interrupted``), with :func:`list_summary` counted on the way: memory stays flat."""

    def __init__(self, rows: Iterator[SessionRow]) -> None:
        self._guarded = Guarded(rows)
        self.count = 0
        self._by: dict[str, int] = {}
        self._cost: float = 0  # summed as sum() does: an int 0 until a cost is added
        self._events = 0

    def __iter__(self) -> Iterator[SessionRow]:
        for r in self._guarded:
            self.add(r)
            yield r

    def add(self, r: SessionRow) -> None:
        self.count += 1
        self._by[r.status] = self._by.get(r.status, 0) + 1
        self._cost += r.cost_usd or 0.0
        self._events += r.events or 0

    @property
    def interrupted(self) -> bool:
        return self._guarded.interrupted

    @property
    def summary(self) -> dict[str, object]:
        """What :func:`list_summary` says of the rows that passed."""
        return {
            "sessions": self.count,
            "by_status": dict(sorted(self._by.items())),
            "cost_usd": self._cost,
            "events": self._events,
        }


def list_summary(rows: Sequence[SessionRow]) -> dict[str, object]:
    """``sessions list``'s summary: how many, by status, total cost and events."""
    listing = Listing(iter(()))
    for r in rows:
        listing.add(r)
    return listing.summary


# ------------------------------------------------------------------------------ show


@dataclass
class SessionDetail:
    """``sessions show``: the row, spend by model, plan decisions by rule, producers."""

    session: SessionRow
    cost_by_model: list[dict[str, object]]
    plan_decisions: list[dict[str, object]]
    producers: list[ProducerRow]


def show_session(sessions_dir: Path, session_id: str) -> SessionDetail:
    """What one session holds, and the judge's verdict on its file at the quick level (or a
    deeper one ``check`` recorded for the file as it is now): ``session.error`` is set when
    that verdict is unreadable, corrupt or foreign. A file that cannot be read raises."""
    detail = _read_detail(sessions_dir, session_id)
    _judged(detail.session, checked.judge_session(sessions_dir, session_id, "quick"))
    return detail


def _read_detail(sessions_dir: Path, session_id: str) -> SessionDetail:
    path = paths.session_path(sessions_dir, session_id)
    entry = paths.Entry(session_id, path)
    with SessionReader(path, session_id=session_id) as r:
        row = row_of(entry, r.info(), r.event_count(), r.revision)
        costs = [
            {
                "provider": p,
                "model": m,
                "turns": int(n),
                "input_tokens": int(i),
                "output_tokens": int(o),
                "cache_tokens": int(c),
                "cost_usd": float(u),
            }
            for p, m, n, i, o, c, u in r.cost_by_model()
        ]
        decisions = [
            {"decided_by": rule, "decision": d, "count": n} for rule, d, n in r.plan_decisions()
        ]
        producers = r.producers(limit=100_000).rows
    return SessionDetail(row, costs, decisions, producers)


# ------------------------------------------------------------------------------ tree


@dataclass
class TreeNode:
    """A session and its children, as found by scanning parent_session_id."""

    row: SessionRow
    children: list[TreeNode] = field(default_factory=list)
    note: str | None = None  # e.g. "parent 01H... not found"


def build_forest(rows: Sequence[SessionRow]) -> list[TreeNode]:
    """Roots (sessions without a parent, or whose parent is missing), children by id order.

    Parent links that form a cycle (a hostile or damaged file) are cut where the cycle is found.
    """
    nodes = {r.session_id: TreeNode(r) for r in rows}
    roots: list[TreeNode] = []
    for r in rows:
        node = nodes[r.session_id]
        parent = r.parent_session_id
        if parent is None or r.status == UNREADABLE:
            roots.append(node)
        elif parent not in nodes:
            node.note = f"parent {parent} not found"
            roots.append(node)
        else:
            nodes[parent].children.append(node)
    seen: set[str] = set()

    def mark(n: TreeNode) -> None:
        stack = [n]
        while stack:
            cur = stack.pop()
            seen.add(cur.row.session_id)
            stack.extend(c for c in cur.children if c.row.session_id not in seen)

    for root in roots:
        mark(root)
    for r in rows:  # members of parent cycles: never reached from a root
        if r.session_id not in seen:
            node = nodes[r.session_id]
            node.note = f"parent cycle through {r.parent_session_id}"
            if node.row.parent_session_id in nodes:
                siblings = nodes[str(node.row.parent_session_id)].children
                siblings[:] = [c for c in siblings if c is not node]
            roots.append(node)
            mark(node)
    roots.sort(key=lambda n: n.row.session_id)
    return roots


def session_tree(sessions_dir: Path, session_id: str | None = None) -> list[TreeNode]:
    """The whole forest, or the subtree rooted at ``session_id``."""
    rows = list(scan(sessions_dir, count_events=False))
    forest = build_forest(rows)
    if session_id is None:
        return forest
    stack = list(forest)
    while stack:
        n = stack.pop()
        if n.row.session_id == session_id:
            return [n]
        stack.extend(n.children)
    raise errors.SessionNotFound(
        f"{paths.session_path(sessions_dir, session_id)}: no such session; "
        "see `agentdb sessions list`"
    )


# ------------------------------------------------------------------------------ preflight


# "kernel": the reserved producer, never looked up; "invalid": an unsafe category/name/version.
PreflightState = Literal["cached", "missing", "kernel", "invalid"]


@dataclass(frozen=True)
class PreflightItem:
    """One producer the session used, and whether the plugin cache has it."""

    category: str
    name: str
    version: str
    first_seen_sequence: int
    state: PreflightState


@dataclass
class PreflightReport:
    session_id: str
    plugin_cache: Path
    items: list[PreflightItem]

    @property
    def missing(self) -> list[PreflightItem]:
        """What you would need to install to replay the session."""
        return [i for i in self.items if i.state in ("missing", "invalid")]


def _safe_component(text: str) -> bool:
    return (
        isinstance(text, str)
        and 0 < len(text) <= 255
        and text not in (".", "..")
        and "/" not in text
        and "\0" not in text
    )


def preflight(sessions_dir: Path, session_id: str, plugin_cache: Path) -> PreflightReport:
    """Producers the session used that ``plugin_cache`` lacks (the kernel is never looked up).

    A version is cached iff ``<plugin_cache>/<category>/<name>/<version>/`` is a directory.
    A name that could not be a directory name (``..``, a slash) is reported as ``invalid``.
    """
    with SessionReader.open(sessions_dir, session_id) as r:
        producers = r.producers(limit=100_000).rows
    items = []
    for p in producers:
        state: PreflightState
        if p.category == enums.KERNEL:
            state = "kernel"
        elif p.category not in enums.PLUGIN_CATEGORIES or not all(
            _safe_component(x) for x in (p.name, p.version)
        ):
            state = "invalid"
        else:
            state = (
                "cached"
                if os.path.isdir(plugin_cache / p.category / p.name / p.version)
                else "missing"
            )
        items.append(PreflightItem(p.category, p.name, p.version, p.first_seen_sequence, state))
    return PreflightReport(session_id, plugin_cache, items)
