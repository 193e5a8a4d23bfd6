"""The questions operators ask across sessions, answered from the index (or, with
``use_index=False``, by the plain scans): which sessions, filtered and sorted; what they cost
per day and model; which used a plugin version. Pure over the rows; read-only on the files.
"""

from __future__ import annotations

import datetime as dt
import itertools
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentdb import errors, paths
from agentdb.durations import older_than
from agentdb.index import Stream, plugins, records, stream, verdicts
from agentdb.views import overview, sessions
from agentdb.views.sessions import SessionRow

SORTS = ("id", "started", "cost", "events")


@dataclass(frozen=True)
class ListQuery:
    """``sessions list``'s filters, sort and limit."""

    statuses: tuple[str, ...] = ()  # status is one of these (none: any)
    older: dt.timedelta | None = None  # --until: ended (or started) at least this long ago
    newer: dt.timedelta | None = None  # --since: ended (or started) less than this long ago
    profile: str | None = None  # profile is exactly this
    parent: str | None = None  # parent_session_id is exactly this
    sort: str = "id"  # id (= chronological) | started | cost (highest first) | events (most)
    limit: int | None = None  # at most this many rows, after sorting


@dataclass
class Listed:
    """The rows of one ``sessions list`` and how they were found."""

    rows: list[SessionRow]
    notes: list[str] = field(default_factory=list)  # for stderr
    interrupted: bool = False  # Ctrl-C: the rows read before it
    used_index: bool = False


def select(
    rows: Iterable[SessionRow], q: ListQuery, now: dt.datetime | None = None
) -> list[SessionRow]:
    """Filter, sort, limit (the same for the index and the scan)."""
    out = list(_filtered(rows, q, now))
    if q.sort == "started":
        out.sort(key=lambda r: (r.started_at is None, str(r.started_at or ""), r.session_id))
    elif q.sort == "cost":
        out.sort(key=lambda r: (-(r.cost_usd or 0.0), r.session_id))
    elif q.sort == "events":
        out.sort(key=lambda r: (-(r.events or 0), r.session_id))
    elif q.sort != "id":
        raise errors.UsageError(f"unknown sort {q.sort!r}; one of {', '.join(SORTS)}")
    return out if q.limit is None else out[: q.limit]


def select_iter(
    rows: Iterable[SessionRow], q: ListQuery, now: dt.datetime | None = None
) -> Iterator[SessionRow]:
    """:func:`select` as rows come: filtered in their order (id), at most ``limit``, nothing
    held; any other sort holds the filtered rows to sort them."""
    if q.sort != "id" or (q.limit is not None and q.limit < 0):
        yield from select(rows, q, now)
        return
    it = _filtered(rows, q, now)
    # a limit past sys.maxsize (islice's most) is past any number of rows: it cuts nothing
    yield from (it if q.limit is None or q.limit > sys.maxsize else itertools.islice(it, q.limit))


def _filtered(
    rows: Iterable[SessionRow], q: ListQuery, now: dt.datetime | None
) -> Iterator[SessionRow]:
    now = now or dt.datetime.now(dt.timezone.utc)
    wanted = set(q.statuses)
    for r in rows:
        if wanted and r.status not in wanted:
            continue
        if q.profile is not None and r.profile != q.profile:
            continue
        if q.parent is not None and r.parent_session_id != q.parent:
            continue
        if q.older is not None or q.newer is not None:
            t = r.reference_time
            if q.older is not None and not older_than(t, q.older, now):
                continue
            if q.newer is not None and older_than(t, q.newer, now):
                continue
        yield r


def list_sessions(
    sessions_dir: Path,
    q: ListQuery,
    *,
    use_index: bool = True,
    jobs: int = 1,
    cache_dir: Path | None = None,
    now: dt.datetime | None = None,
) -> Listed:
    """``sessions list``: from the index, or (``use_index=False``) by reading every file."""
    if not use_index:
        try:
            rows = sessions.list_sessions(sessions_dir, jobs=jobs)
        except sessions.Interrupted as e:
            return Listed(select(e.rows, q, now), interrupted=True)
        return Listed(select(rows, q, now))
    st = stream(sessions_dir, jobs=jobs, cache_dir=cache_dir)
    rows = select(list_rows(st, cache_dir), q, now)  # with verdicts, as the scan's rows
    return Listed(rows, st.notes, st.interrupted, st.used_index)


def list_rows(st: Stream, cache_dir: Path | None = None) -> Iterator[SessionRow]:
    """``sessions list``'s row of each record, in id order, with the verdict ``check``
    recorded for the file as the walk saw it, if any (matched against the walk's own
    ``lstat`` of the file and its sidecars: none is taken again)."""
    with verdicts.Lookup(st.sessions_dir, cache_dir=cache_dir) as recorded:  # in name order
        for r in st.records:
            row = r.list_row()
            s = r.seen
            if recorded and s is not None:
                entry = recorded.get(s.name)
                if entry is not None and s.verdict_matches(entry):
                    sessions.with_recorded(row, entry)
            yield row


@dataclass
class Streamed:
    """``sessions list``'s rows for the CLI, as they come (flat memory in id order; another
    sort holds the filtered rows). ``notes`` and ``interrupted`` are complete once ``rows``
    is exhausted."""

    rows: Iterable[SessionRow]
    notes: list[str] = field(default_factory=list)
    source: Stream | None = None  # the index's stream (its notes and interrupt come late)
    verdicts: bool = False  # the rows carry check's recorded verdicts already

    @property
    def interrupted(self) -> bool:
        """Ctrl-C while the index read files (the scan's own is the listing's:
        sessions.Listing)."""
        return self.source is not None and self.source.interrupted


def stream_sessions(
    sessions_dir: Path,
    q: ListQuery,
    *,
    use_index: bool = True,
    jobs: int = 1,
    cache_dir: Path | None = None,
    now: dt.datetime | None = None,
) -> Streamed:
    """:func:`list_sessions` for the CLI (see :class:`Streamed`)."""
    if not use_index and q.sort == "id" and q.limit is None:
        rows = sessions.iter_sessions(
            sessions_dir,
            statuses=q.statuses or None,
            older=q.older,
            newer=q.newer,
            now=now,
            jobs=jobs,
        )
        more = ListQuery(profile=q.profile, parent=q.parent)
        return Streamed(r for r in rows if select([r], more, now))
    if not use_index:
        listed = list_sessions(sessions_dir, q, use_index=False, jobs=jobs, now=now)
        return Streamed(listed.rows)
    st = stream(sessions_dir, jobs=jobs, cache_dir=cache_dir)
    rows = select_iter(list_rows(st, cache_dir), q, now)
    return Streamed(rows, st.notes, st, verdicts=True)


def meta_rows(
    sessions_dir: Path, *, use_index: bool = True, jobs: int = 1, cache_dir: Path | None = None
) -> tuple[list[SessionRow], list[str]]:
    """Every session's row without the event count (``sessions tree``'s read), and notes."""
    if not use_index:
        return list(sessions.scan(sessions_dir, count_events=False, jobs=jobs)), []
    notes: list[str] = []
    got = records(sessions_dir, notes, jobs=jobs, cache_dir=cache_dir, extras=False)
    return [r.meta_row() for r in got], notes


def session_tree(
    sessions_dir: Path,
    session_id: str | None = None,
    *,
    use_index: bool = True,
    jobs: int = 1,
    cache_dir: Path | None = None,
) -> tuple[list[sessions.TreeNode], list[str]]:
    """:func:`agentdb.views.sessions.session_tree` from the index."""
    if not use_index:
        return sessions.session_tree(sessions_dir, session_id), []
    rows, notes = meta_rows(sessions_dir, jobs=jobs, cache_dir=cache_dir)
    forest = sessions.build_forest(rows)
    if session_id is None:
        return forest, notes
    stack = list(forest)
    while stack:
        n = stack.pop()
        if n.row.session_id == session_id:
            return [n], notes
        stack.extend(n.children)
    raise errors.SessionNotFound(
        f"{paths.session_path(sessions_dir, session_id)}: no such session; "
        "see `agentdb sessions list`"
    )


# ------------------------------------------------------------------------------ costs


@dataclass
class CostTotals:
    """Cost across sessions per UTC day and per model (``sessions costs``)."""

    by_day: list[dict[str, object]]  # {day, cost_usd, turns, sessions}, oldest first
    by_model: list[dict[str, object]]  # {provider, model, cost_usd, turns, sessions}, by cost
    by_day_model: list[dict[str, object]]  # {day, provider, model, cost_usd, turns}
    total_usd: float
    unknown: list[str]  # sessions whose costs could not be read
    notes: list[str] = field(default_factory=list)


def cost_totals(
    sessions_dir: Path,
    *,
    since: str | None = None,
    until: str | None = None,
    use_index: bool = True,
    jobs: int = 1,
    cache_dir: Path | None = None,
) -> CostTotals:
    """Sum every session's cost per day and model; ``since``/``until`` (``YYYY-MM-DD``,
    inclusive) keep those days (``unknown`` days only without a bound)."""
    per: list[tuple[str, list[tuple[str, str, str, int, float]] | None]] = []
    notes: list[str] = []
    if use_index:
        got = records(sessions_dir, notes, jobs=jobs, cache_dir=cache_dir)
        per = [(r.entry.session_id, None if r.meta_error else r.costs) for r in got]
    else:
        per = [
            (s.row.session_id, s.costs) for s in overview.scan(sessions_dir, costs=True, jobs=jobs)
        ]
    day: dict[str, list[object]] = {}
    model: dict[tuple[str, str], list[object]] = {}
    dm: dict[tuple[str, str, str], list[float]] = {}
    unknown: list[str] = []
    total = 0.0
    for sid, costs in per:
        if costs is None:
            unknown.append(sid)
            continue
        for d, p, m, turns, cost in costs:
            if (since is not None or until is not None) and (
                d == "unknown" or (since and d < since) or (until and d > until)
            ):
                continue
            total += cost
            a = day.setdefault(d, [0.0, 0, set()])
            a[0] += cost  # type: ignore[operator]
            a[1] += turns  # type: ignore[operator]
            a[2].add(sid)  # type: ignore[attr-defined]
            b = model.setdefault((p, m), [0.0, 0, set()])
            b[0] += cost  # type: ignore[operator]
            b[1] += turns  # type: ignore[operator]
            b[2].add(sid)  # type: ignore[attr-defined]
            c = dm.setdefault((d, p, m), [0.0, 0])
            c[0] += cost
            c[1] += turns
    return CostTotals(
        [
            {"day": d, "cost_usd": v[0], "turns": v[1], "sessions": len(v[2])}  # type: ignore[arg-type]
            for d, v in sorted(day.items())
        ],
        [
            {"provider": p, "model": m, "cost_usd": v[0], "turns": v[1], "sessions": len(v[2])}  # type: ignore[arg-type]
            for (p, m), v in sorted(model.items(), key=lambda kv: (-kv[1][0], kv[0]))  # type: ignore[operator]
        ],
        [
            {"day": d, "provider": p, "model": m, "cost_usd": v[0], "turns": int(v[1])}
            for (d, p, m), v in sorted(dm.items())
        ],
        total,
        unknown,
        notes,
    )


# ------------------------------------------------------------------------------ plugins


def refs(
    sessions_dir: Path,
    plugin_cache: Path,
    *,
    use_index: bool = True,
    jobs: int = 1,
    cache_dir: Path | None = None,
) -> tuple[plugins.PluginRefs, list[str]]:
    """``plugins refs`` (:func:`agentdb.index.plugins.refs`) from the index, and notes."""
    paths.require_sessions_dir(sessions_dir)
    if not use_index:
        return plugins.refs(sessions_dir, plugin_cache, jobs=jobs), []
    notes: list[str] = []
    got = records(sessions_dir, notes, jobs=jobs, cache_dir=cache_dir)
    per = [(r.entry.session_id, r.producers) for r in got]
    return plugins.count_refs(per, plugins.cached_versions(plugin_cache)), notes


# ------------------------------------------------------------------------------ plugin users


@dataclass
class PluginUsers:
    """Sessions whose producers name a plugin (and version)."""

    sessions: list[str]  # ids, in id order
    versions: dict[str, list[str]]  # "category/name/version" -> ids
    unknown: list[str]  # sessions whose producers could not be read
    notes: list[str] = field(default_factory=list)


def plugin_users(
    sessions_dir: Path,
    name: str,
    version: str | None = None,
    *,
    use_index: bool = True,
    cache_dir: Path | None = None,
) -> PluginUsers:
    """Which sessions used plugin ``name`` (``category/name`` or ``name``), optionally at
    ``version``. The kernel producer is no plugin."""
    category, _, bare = name.rpartition("/")
    notes: list[str] = []
    per: Sequence[tuple[str, list[plugins.PluginVersion] | None]]
    if use_index:
        per = [
            (r.entry.session_id, r.producers)
            for r in records(sessions_dir, notes, cache_dir=cache_dir)
        ]
    else:
        per = plugins.scan_producers(sessions_dir)
    out = PluginUsers([], {}, [], notes)
    for sid, used in per:
        if used is None:
            out.unknown.append(sid)
            continue
        hit = False
        for c, n, v in used:
            if n != bare or (category and c != category) or (version is not None and v != version):
                continue
            out.versions.setdefault(plugins.label((c, n, v)), []).append(sid)
            hit = True
        if hit:
            out.sessions.append(sid)
    out.versions = dict(sorted(out.versions.items()))
    return out
