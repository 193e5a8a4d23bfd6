"""``agentdb report``: health, costs, the session tree, pinned plugins and recovery history,
gathered once (:func:`collect`) and rendered as one self-contained HTML file
(:mod:`agentdb.views.report.html`) or as the JSON document the page's numbers come from.

Bounded at any number of sessions: the tree and the per-session table are drawn in full only up
to ``TREE_LIMIT`` sessions; beyond that the page keeps the summaries and the ``PROBLEM_LIMIT``
sessions most in need of attention. Read-only.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdb import errors, leftovers, paths, recoverylog
from agentdb.checks import policy
from agentdb.index import verdicts
from agentdb.results import Verdict
from agentdb.views import status as status_job
from agentdb.views.report.files import write_report
from agentdb.views.sessions import UNREADABLE

VERSION = 1
TREE_LIMIT = 500  # sessions drawn one by one (tree and table) when there are at most this many
PROBLEM_LIMIT = 100  # problem sessions listed when there are more
DAY_LIMIT = 366  # most recent days in the cost chart
MODEL_LIMIT = 25  # models listed by cost (the rest summed as "other")
RECOVERY_LIMIT = 200  # newest recovery outcomes listed
LEFTOVER_LIMIT = 50  # kept copies listed (the counts cover them all)
HISTORY_JOBS = ("recover", "restore")  # the jobs that replace a session file, in the history

__all__ = ["DayCost", "ModelCost", "RecoveryLine", "Report", "collect", "write_report"]


@dataclass
class SessionLine:
    """One session as the report shows it."""

    session_id: str
    status: str  # session_meta.status, or "unreadable"
    profile: str | None
    parent_session_id: str | None
    depth: int | None
    started_at: str | None
    cost_usd: float
    verdict: Verdict | None  # last recorded verdict, None when changed since or never checked
    problems: list[str] = field(default_factory=list)  # why it is listed among the problems


@dataclass(frozen=True)
class DayCost:
    """Spend on one UTC day (``unknown`` for turns whose time does not parse)."""

    day: str  # YYYY-MM-DD
    cost_usd: float
    turns: int  # model turns that day


@dataclass(frozen=True)
class ModelCost:
    """Spend on one model (the last row may gather the models past the limit)."""

    provider: str  # "" on the row that gathers the rest
    model: str
    cost_usd: float
    turns: int
    sessions: int  # sessions that used it


@dataclass(frozen=True)
class RecoveryLine:
    """One recovery the log records, as the history table shows it."""

    time: str  # as logged
    session_id: str | None  # None when the log's id is not a valid session id
    outcome: str  # the recovery's outcome, as logged (another build may have written it)
    events_lost: int
    lost_ranges: list[list[int]]  # [first, last] sequences known lost
    job: str = "recover"  # the job that logged it: recover or restore


@dataclass(frozen=True)
class ReportSummary(status_job.StatusSummary):
    """``status``'s counts, plus the cost totals and what the page leaves out."""

    cost_usd: float  # every session's cost
    cost_days: int  # days with spend
    days_shown: int  # of those, in the table and chart
    models: int  # models with spend
    sessions_shown: int  # sessions listed on the page
    costs_unknown: int  # sessions whose file cannot be read: their cost is in no total


@dataclass
class Report:
    """Everything the page shows (its JSON form is the ``report --json`` document)."""

    generated_at: str
    sessions_dir: Path
    summary: ReportSummary
    by_status: dict[str, int]
    by_verdict: dict[str, int]
    cost_by_day: list[DayCost]  # oldest first
    cost_by_model: list[ModelCost]  # most spent first
    sessions: list[SessionLine]  # every session (<= TREE_LIMIT) or the top problem ones
    sessions_complete: bool  # True when ``sessions`` holds every session
    pinned: list[status_job.PinnedVersion]  # cached plugin versions sessions reference
    recoveries: list[RecoveryLine]  # newest first
    next: list[status_job.NextCommand]
    notes: list[str] = field(default_factory=list)  # for stderr: why the index was not used
    leftovers: list[leftovers.Leftover] = field(default_factory=list)  # first LEFTOVER_LIMIT


# ------------------------------------------------------------------------------ reading


def _recoveries(log: Path) -> list[RecoveryLine]:
    out = []
    try:
        entries = list(recoverylog.read(log))
    except (errors.AgentdbError, OSError):
        return []  # status's next commands say why (the log is not a regular file)
    for e in entries:
        if e.get("event") != "outcome" or not isinstance(e.get("outcome"), str):
            continue
        job = e.get("job", "recover")  # recover's lines name no job
        if job not in HISTORY_JOBS:
            continue  # prune and end log there too; they replace nothing
        sid = e.get("session_id")
        raw = e.get("lost")
        lost: dict[str, Any] = raw if isinstance(raw, dict) else {}
        ranges = [
            [int(a), int(b)]
            for r in (lost.get("event_sequences") or [])
            if isinstance(r, list | tuple) and len(r) == 2
            for a, b in [r]
            if isinstance(a, int) and isinstance(b, int)
        ]
        n = lost.get("events_missing")
        out.append(
            RecoveryLine(
                str(e.get("time", "")),
                sid if isinstance(sid, str) and paths.is_valid_id(sid) else None,
                str(e["outcome"]),
                n if isinstance(n, int) else sum(b - a + 1 for a, b in ranges),
                ranges,
                str(job),
            )
        )
    out.reverse()
    return out[:RECOVERY_LIMIT]


# ------------------------------------------------------------------------------ collect


def collect(
    sessions_dir: Path,
    plugin_cache: Path,
    *,
    recovery_log: Path | None = None,
    cache_dir: Path | None = None,
    jobs: int = 1,
    now: dt.datetime | None = None,
    use_index: bool = True,
) -> Report:
    """``status``'s view, with each session's cost per day and model read in the same pass."""
    log = recovery_log if recovery_log is not None else paths.recovery_log_path(sessions_dir)
    st = status_job.status(
        sessions_dir,
        plugin_cache,
        recovery_log=log,
        cache_dir=cache_dir,
        jobs=jobs,
        now=now,
        costs=True,
        use_index=use_index,
    )
    recorded = verdicts.lookup(sessions_dir, cache_dir=cache_dir)
    costs = {one.row.session_id: one.costs for one in st.scanned}
    by_day: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    by_model: dict[tuple[str, str], list[Any]] = {}
    lines: list[SessionLine] = []
    total_cost = 0.0
    for row in st.rows:  # the same rows as ``sessions list``
        per = costs.get(row.session_id) or []
        for day, provider, model, turns, cost in per:
            d = by_day[day]
            d[0] += cost
            d[1] += turns
            m = by_model.setdefault((provider, model), [0.0, 0, set()])
            m[0] += cost
            m[1] += turns
            m[2].add(row.session_id)
        cost = row.cost_usd or 0.0
        total_cost += cost
        entry = recorded.get(row.path.name)
        verdict = (
            entry.verdict
            if entry is not None and entry.matches(verdicts.identity_of(row.path))
            else None
        )
        lines.append(
            SessionLine(
                row.session_id,
                row.status,
                row.profile,
                row.parent_session_id,
                row.depth,
                row.started_at,
                cost,
                verdict,
            )
        )
    problem_sets = _problem_sets(st, lines)
    for line in lines:
        for name, members in problem_sets.items():
            if line.session_id in members:
                line.problems.append(name)
    complete = len(lines) <= TREE_LIMIT
    if not complete:
        order = {n: i for i, n in enumerate(problem_sets)}
        flagged = [ln for ln in lines if ln.problems]
        flagged.sort(key=lambda ln: (min(order[p] for p in ln.problems), -ln.cost_usd))
        lines = flagged[:PROBLEM_LIMIT]
    days = sorted(by_day.items())
    models = sorted(by_model.items(), key=lambda kv: (-kv[1][0], kv[0]))
    cost_by_model = [ModelCost(p, m, v[0], v[1], len(v[2])) for (p, m), v in models[:MODEL_LIMIT]]
    if len(models) > MODEL_LIMIT:
        rest = models[MODEL_LIMIT:]
        cost_by_model.append(
            ModelCost(
                "",
                f"{len(rest)} other models",
                sum(v[0] for _, v in rest),
                sum(v[1] for _, v in rest),
                len(set().union(*(v[2] for _, v in rest))),
            )
        )
    summary = ReportSummary(
        **dataclasses.asdict(st.summary),
        cost_usd=total_cost,
        cost_days=len(days),
        days_shown=min(len(days), DAY_LIMIT),
        models=len(models),
        sessions_shown=len(lines),
        costs_unknown=sum(1 for row in st.rows if row.status == UNREADABLE),
    )
    try:
        kept = leftovers.find(sessions_dir)[:LEFTOVER_LIMIT]
    except OSError:
        kept = []
    return Report(
        st.generated_at,
        sessions_dir,
        summary,
        st.by_status,
        st.by_verdict,
        [DayCost(d, v[0], int(v[1])) for d, v in days[-DAY_LIMIT:]],
        cost_by_model,
        lines,
        complete,
        st.pinned,
        _recoveries(log),
        st.next,
        st.notes,
        kept,
    )


def _problem_sets(st: status_job.StatusReport, lines: list[SessionLine]) -> dict[str, set[str]]:
    """Problem name -> sessions, most serious first (status lists only the first ids, so the
    sets are rebuilt from the lines where they can be)."""
    return {
        "damaged": {
            ln.session_id
            for ln in lines
            if ln.verdict in status_job.DAMAGED or ln.status == UNREADABLE
        },
        "refused": {ln.session_id for ln in lines if ln.verdict in status_job.REFUSED},
        "interrupted": set(st.interrupted_all),
        "needs_migration": set(st.needs_migration_all),
        "not_ok": {
            ln.session_id for ln in lines if ln.verdict is not None and not policy.is_ok(ln.verdict)
        },
    }
