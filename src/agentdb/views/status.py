"""``agentdb status``: the whole sessions directory on one screen, and what to run next.

Status, revision and liveness are read fresh from the files (the same scan as ``sessions
list``); verdicts come from the verdict cache (:mod:`agentdb.index.verdicts`) — the last recorded
``check`` of each file, believed only while the file's identity is the one it was checked with.
Read-only: nothing here writes a session file or the cache.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agentdb import errors, fsutil, index, leftovers, locks, paths, recoverylog, times
from agentdb.checks import policy
from agentdb.index import plugins, verdicts
from agentdb.index.stat import Seen
from agentdb.results import OK, Verdict
from agentdb.schema.enums import RUNNING
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.views.overview import Scanned, scan
from agentdb.views.sessions import UNREADABLE, SessionRow

VERSION = 1  # of the JSON document
LISTED = 20  # ids listed per category (the counts are always whole)
DAMAGED = policy.DAMAGED | policy.INCONSISTENT  # damaged: recover, end or a final decision
REFUSED = policy.REFUSED  # fixed by hand
HEALTHY = policy.SOUND  # verdicts under which the file opens


@dataclass(frozen=True)
class NextCommand:
    """A command the operator should run next, and why."""

    command: str  # exactly what to type (destructive jobs only in their --dry-run form)
    why: str  # one line


@dataclass
class Recoveries:
    """What the recovery log says."""

    outcomes: dict[str, int] = field(default_factory=dict)  # recover's outcome -> count
    other_jobs: dict[str, int] = field(default_factory=dict)  # restore, prune, end -> outcomes
    events_lost: int = 0  # events known lost, summed over recovered outcomes
    last: str | None = None  # time of the newest outcome line
    problem: str | None = None  # why the log could not be read (a FIFO or link in its place)


@dataclass(frozen=True)
class StatusSummary:
    """The counts ``status`` shows (the ``summary`` of its JSON document)."""

    sessions: int  # <ULID>.sqlite entries
    size_bytes: int  # their bytes on disk, sidecars included
    live: int  # open by a process right now
    interrupted: int  # running, but no process holds the file
    needs_migration: int  # at an older revision
    damaged: int  # recorded verdict corrupt/inconsistent/unreadable, or unreadable now
    refused: int  # recorded verdict insecure/foreign/too_new/unsafe_schema
    checked: int  # with a verdict recorded for the file as it is
    checked_quick: int  # of those, by check --quick
    ok: int  # of those, ok
    changed_since_check: int
    never_checked: int
    oldest_check_age_seconds: int | None
    newest_check_age_seconds: int | None
    recoveries_logged: int  # recover's outcomes in the recovery log (not restore, prune, end)
    recovered: int  # of those, recovered
    events_lost_in_recoveries: int
    cached_plugin_versions: int
    pinned_plugin_versions: int  # cached versions some session references
    needs_attention: bool  # there is a next command to run
    leftover_copies: int  # .corrupt/.pre-restore copies recover and restore kept
    leftover_bytes: int  # their bytes, sidecars included
    disk_bytes: int  # size_bytes + leftover_bytes: what the directory's files take


@dataclass(frozen=True)
class PinnedVersion:
    """A cached plugin version that sessions reference."""

    category: str
    name: str
    version: str
    sessions: int  # sessions that reference it


@dataclass
class StatusReport:
    """Everything ``agentdb status`` shows."""

    sessions_dir: Path
    generated_at: str  # UTC ISO time
    summary: StatusSummary
    by_status: dict[str, int]  # session_meta.status (or "unreadable") -> sessions
    by_verdict: dict[str, int]  # last recorded verdict -> sessions whose file is unchanged since
    interrupted: list[str]  # running, but no process holds the file (first LISTED)
    needs_migration: list[str]  # revision older than this build's (first LISTED)
    damaged: list[str]  # recorded verdict corrupt/inconsistent/unreadable, or unreadable now
    refused: list[str]  # recorded verdict insecure/foreign/too_new/unsafe_schema
    unchecked: list[str]  # changed since their last check, or never checked (not live)
    pinned: list[PinnedVersion]  # cached plugin versions that sessions reference
    recoveries: Recoveries
    next: list[NextCommand]
    # every id in a category and every row read (for ``report``; not in the JSON document)
    interrupted_all: list[str] = field(default_factory=list)
    needs_migration_all: list[str] = field(default_factory=list)
    rows: list[SessionRow] = field(default_factory=list)
    scanned: list[Scanned] = field(default_factory=list)  # with costs, when asked for
    notes: list[str] = field(default_factory=list)  # for stderr: why the index was not used

    @property
    def needs_attention(self) -> bool:
        return bool(self.next)


def read_recoveries(log: Path, last_outcome: dict[str, str] | None = None) -> Recoveries:
    """The log's counts; ``last_outcome`` (when given) is filled with each session's last
    outcome line."""
    out = Recoveries()
    counts: Counter[str] = Counter()
    jobs: Counter[str] = Counter()
    try:
        entries = list(recoverylog.read(log))
    except (errors.AgentdbError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        out.problem = why if str(log) in why else f"{log}: {why}"
        return out
    for e in entries:
        if e.get("event") != "outcome":
            continue
        outcome = e.get("outcome")
        if not isinstance(outcome, str):
            continue
        job = e.get("job")  # recover's lines name no job; restore, prune and end name theirs
        if job is not None and job != "recover":
            jobs[str(job)] += 1
            continue
        counts[outcome] += 1
        sid = e.get("session_id")
        if last_outcome is not None and isinstance(sid, str):
            last_outcome[sid] = outcome
        t = e.get("time")
        if isinstance(t, str):
            out.last = t
        lost = e.get("lost")
        if outcome == "recovered" and isinstance(lost, dict):
            n = lost.get("events_missing")
            if isinstance(n, int) and n > 0:
                out.events_lost += n
    out.outcomes = dict(sorted(counts.items()))
    out.other_jobs = dict(sorted(jobs.items()))
    return out


def _iso(t: dt.datetime) -> str:
    return times.rfc3339(t)


def _ids_hint(ids: list[str], total: int) -> str:
    return " ".join(ids) if total <= 5 else ""


def status(
    sessions_dir: Path,
    plugin_cache: Path,
    *,
    recovery_log: Path | None = None,
    cache_dir: Path | None = None,
    jobs: int = 1,
    now: dt.datetime | None = None,
    costs: bool = False,
    use_index: bool = True,
    keep_rows: bool = False,
) -> StatusReport:
    """Count, judge from the last recorded checks, and say what to run next.

    Rows come from the index (:mod:`agentdb.index`: only new or changed files are opened) or,
    with ``use_index=False``, by opening each file once (:func:`agentdb.views.overview.scan`); with
    ``costs`` each session's cost per day and model is kept in ``scanned`` for ``report``.
    Every row, and every id of each category, is kept only with ``keep_rows`` (``report``) or
    ``costs``: ``status`` itself holds counts and the first :data:`LISTED` ids of each, so its
    memory does not grow with the sessions (the recorded verdicts are read a page at a time,
    in the order the rows come, and matched against the index walk's own ``lstat``).
    """
    paths.require_sessions_dir(sessions_dir)
    now = now or dt.datetime.now(dt.timezone.utc)
    keep_rows = keep_rows or costs
    with verdicts.Lookup(sessions_dir, cache_dir=cache_dir) as recorded:
        return _status(
            sessions_dir,
            plugin_cache,
            recorded,
            recovery_log,
            cache_dir,
            jobs,
            now,
            costs,
            use_index,
            keep_rows,
        )


def _status(
    sessions_dir: Path,
    plugin_cache: Path,
    recorded: verdicts.Lookup,
    recovery_log: Path | None,
    cache_dir: Path | None,
    jobs: int,
    now: dt.datetime,
    costs: bool,
    use_index: bool,
    keep_rows: bool,
) -> StatusReport:
    by_status: Counter[str] = Counter()
    by_verdict: Counter[str] = Counter()
    interrupted: list[str] = []
    migration: list[str] = []
    # ...of those, the ones no recorded verdict keeps from the job the next step names (a
    # damaged, inconsistent or refused file has its own step: migrate and end refuse it)
    to_end: list[str] = []
    to_migrate: list[str] = []
    linked: list[str] = []  # ...of those, hard-linked (a step before migrate)
    damaged: list[str] = []
    refused: list[str] = []
    unchecked: list[str] = []
    counts: Counter[str] = Counter()
    size = 0
    rows: list[SessionRow] = []
    scanned: list[Scanned] = []
    cached = plugins.cached_versions(plugin_cache)
    pins: Counter[plugins.PluginVersion] = Counter()
    oldest: float | None = None
    newest: float | None = None
    notes: list[str] = []
    keep = LISTED if not keep_rows else None  # ids kept per category (None: all)

    log = recovery_log if recovery_log is not None else paths.recovery_log_path(sessions_dir)
    last_outcome: dict[str, str] = {}  # each session's last outcome line in the recovery log
    rec = read_recoveries(log, last_outcome)

    def note(ids: list[str], sid: str) -> None:
        if keep is None or len(ids) < keep:
            ids.append(sid)

    for one, seen in _rows(sessions_dir, costs, jobs, use_index, cache_dir, notes):
        row = one.row
        sid = row.session_id
        if keep_rows:
            rows.append(row)
        if costs:
            scanned.append(one)
        if cached and one.producers:
            pins.update(set(one.producers) & cached)
        counts["sessions"] += 1
        by_status[row.status] += 1
        entry = recorded.get(row.session_id + paths.SESSION_SUFFIX)
        # the index's walk knows the size and the identity; a scan's row is lstat-ed here
        ident = None
        if seen is None and (entry is not None or one.size is None):
            ident = verdicts.identity_of(row.path)
        if one.size is not None:
            size += one.size
        elif ident is not None and ident.regular:
            size += ident.size
        live = row.status == RUNNING and locks.probe(row.path) is not None
        if live:
            counts["live"] += 1
        elif row.status == RUNNING:
            counts["interrupted"] += 1
            note(interrupted, sid)
        if row.revision is not None and row.revision < CURRENT_REVISION:
            counts["needs_migration"] += 1
            note(migration, sid)
        verdict: Verdict | None = None
        # A recorded verdict the file's own read contradicts (it cannot be read now, though
        # the verdict says it could) is a row that lies, or damage its identity does not
        # show: not believed — the file counts as it reads now, and wants a check.
        contradicted = (
            entry is not None
            and row.status == UNREADABLE
            and row.error_code in index.record.STABLE_CODES  # the bytes', not a busy lock's
            and entry.verdict in HEALTHY
        )
        if (
            entry is not None
            and (seen.verdict_matches(entry) if seen is not None else entry.matches(ident))
            and not contradicted
        ):
            verdict = entry.verdict
            by_verdict[verdict] += 1
            counts["checked"] += 1
            counts["checked_quick"] += entry.quick
            age = entry.age_seconds(now)
            if age is not None:
                oldest = age if oldest is None else max(oldest, age)
                newest = age if newest is None else min(newest, age)
        elif entry is not None:
            counts["changed_since_check"] += 1
        else:
            counts["never_checked"] += 1
        old = row.revision is not None and row.revision < CURRENT_REVISION
        if verdict is None or policy.is_sound(verdict):
            if old:
                if fsutil.hard_link_problem(row.path) is None:
                    counts["to_migrate"] += 1
                    note(to_migrate, sid)
                else:  # migrate refuses a file with other names: check names the step
                    counts["linked"] += 1
                    note(linked, sid)
            elif not live and row.status == RUNNING:
                counts["to_end"] += 1  # an older revision is migrated first (end never migrates)
                note(to_end, sid)
        if verdict is None and not live:
            counts["unchecked"] += 1
            note(unchecked, sid)
        now_bad = row.error_code if verdict is None and row.status == UNREADABLE else None
        if verdict in DAMAGED or policy.is_damaged(now_bad):
            counts["damaged"] += 1
            note(damaged, sid)
            if policy.is_inconsistent(verdict):
                counts["inconsistent"] += 1
            elif last_outcome.get(sid) == "unreadable":
                counts["tried"] += 1  # recovery salvaged nothing: not tried again
        elif verdict in REFUSED or now_bad is not None:
            counts["refused"] += 1
            note(refused, sid)
    pinned = [PinnedVersion(c, n, v, pins[(c, n, v)]) for c, n, v in sorted(pins)]
    kept, kept_bytes = leftovers.total(sessions_dir)
    nxt: list[NextCommand] = []
    # a recovery that salvaged nothing is not tried again: check names the final decision
    salvageable = counts["damaged"] - counts["inconsistent"] - counts["tried"]
    if salvageable:
        nxt.append(
            NextCommand(
                "agentdb recover --all --dry-run",
                f"{salvageable} damaged: see what recovery would salvage (then run it "
                "without --dry-run)",
            )
        )
    if counts["inconsistent"]:
        nxt.append(
            NextCommand(
                "agentdb check --problems",
                f"{counts['inconsistent']} inconsistent (every row reads, some disagree): each "
                "names its next step",
            )
        )
    if counts["tried"]:
        nxt.append(
            NextCommand(
                "agentdb check --problems",
                f"{counts['tried']} damaged that recovery could not salvage: each names its "
                "final step",
            )
        )
    if refused:
        nxt.append(
            NextCommand(
                "agentdb check --problems",
                f"{counts['refused']} refused (insecure, foreign, too new or unsafe schema): each "
                "finding names its fix",
            )
        )
    if linked:
        nxt.append(
            NextCommand(
                "agentdb check --problems",
                f"{counts['linked']} at an older schema revision with other names (hard links), "
                "which migrate refuses: each names its step",
            )
        )
    if to_migrate:
        nxt.append(
            NextCommand(
                "agentdb migrate --all",
                f"{counts['to_migrate']} at an older schema revision (each migration is "
                "verified before it replaces the file)",
            )
        )
    if to_end:
        hint = _ids_hint(to_end, counts["to_end"])
        nxt.append(
            NextCommand(
                f"agentdb sessions end {hint} --dry-run"
                if hint
                else "agentdb sessions list --status running",
                f"{counts['to_end']} interrupted: status running, but no process has the file open",
            )
        )
    if rec.problem:
        nxt.append(
            NextCommand(
                "agentdb check --problems",
                f"the recovery log cannot be read: {rec.problem}",
            )
        )
    if unchecked:
        nxt.append(
            NextCommand(
                "agentdb check --problems",
                f"{counts['unchecked']} changed since their last check or never checked",
            )
        )
    # one line per command, reasons joined
    merged: dict[str, list[str]] = {}
    for n in nxt:
        merged.setdefault(n.command, []).append(n.why)
    nxt = [NextCommand(c, "; ".join(w)) for c, w in merged.items()]
    summary = StatusSummary(
        sessions=counts["sessions"],
        size_bytes=size,
        live=counts["live"],
        interrupted=counts["interrupted"],
        needs_migration=counts["needs_migration"],
        damaged=counts["damaged"],
        refused=counts["refused"],
        checked=counts["checked"],
        checked_quick=counts["checked_quick"],
        ok=by_verdict.get(OK, 0),
        changed_since_check=counts["changed_since_check"],
        never_checked=counts["never_checked"],
        oldest_check_age_seconds=None if oldest is None else round(oldest),
        newest_check_age_seconds=None if newest is None else round(newest),
        recoveries_logged=sum(rec.outcomes.values()),
        recovered=rec.outcomes.get("recovered", 0),
        events_lost_in_recoveries=rec.events_lost,
        cached_plugin_versions=len(cached),
        pinned_plugin_versions=len(pinned),
        needs_attention=bool(nxt),
        leftover_copies=kept,
        leftover_bytes=kept_bytes,
        disk_bytes=size + kept_bytes,
    )
    return StatusReport(
        sessions_dir,
        _iso(now),
        summary,
        dict(sorted(by_status.items())),
        dict(sorted(by_verdict.items())),
        interrupted[:LISTED],
        migration[:LISTED],
        damaged[:LISTED],
        refused[:LISTED],
        unchecked[:LISTED],
        pinned,
        rec,
        nxt,
        interrupted,
        migration,
        rows,
        scanned,
        notes,
    )


def _rows(
    sessions_dir: Path,
    costs: bool,
    jobs: int,
    use_index: bool,
    cache_dir: Path | None,
    notes: list[str],
) -> Iterator[tuple[Scanned, Seen | None]]:
    """Each session as read, with the index walk's lstat of it (None: a scan's row)."""
    if not use_index:
        for one in scan(sessions_dir, costs=costs, jobs=jobs):
            yield one, None
        return
    for r in index.records(sessions_dir, notes, jobs=jobs, cache_dir=cache_dir):
        one = Scanned(r.meta_row(), r.meta_producers(), r.costs if costs else None, r.size)
        yield one, r.seen
