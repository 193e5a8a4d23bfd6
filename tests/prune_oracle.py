"""The prune planner as it was before its plan data moved to a scratch database (kept
verbatim as a test oracle: ``tests/test_prune_oracle.py`` checks that ``prune.plan`` decides
exactly as this did). Whole-directory, one Python object per session; not used by agentdb.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentdb import errors, index, locks, paths
from agentdb.durations import parse_timestamp
from agentdb.index import plugins
from agentdb.prune.scan import (
    INTENT,
    NONE,
    Facts,
    Files,
    Judged,
    Pins,
    Stamp,
    confirm,
    facts_from_index,
    group_names,
    judge_all,
    read_all_facts,
    read_facts,
    read_intent,
)
from agentdb.results import PruneReasonCode
from agentdb.schema.enums import RUNNING, STATUSES


@dataclass(frozen=True)
class Selectors:
    """What the operator asked to prune. Selected = ``ids`` ∪ (sessions matching every filter)."""

    ids: tuple[str, ...] = ()  # explicit session ids
    older_than: dt.timedelta | None = None  # filter: ended (or, never ended, started) this long ago
    newer_than: dt.timedelta | None = None  # filter: ended (or started) less than this long ago
    keep_last: int | None = None  # filter: keep the N newest matching sessions out of the selection
    statuses: tuple[str, ...] = ()  # filter: status is one of these
    profile: str | None = None  # filter: profile is exactly this
    with_descendants: bool = False  # the subtree of each selected session joins, judged as a whole
    include_damaged: bool = False  # explicit ids may be unreadable; their .corrupt copies go too
    include_pinned: bool = False  # sessions referencing cached plugin versions may go too

    @property
    def has_filter(self) -> bool:
        return (
            self.older_than is not None
            or self.newer_than is not None
            or self.keep_last is not None
            or bool(self.statuses)
            or self.profile is not None
        )

    def validate(self) -> None:
        if not self.ids and not self.has_filter:
            raise errors.UsageError(
                "prune needs a selector: session ids, --until (--older-than), --since, "
                "--keep-last, --status or --profile (nothing is pruned by default)"
            )
        for sid in self.ids:
            paths.validate_id(sid)
        for s in self.statuses:
            if s not in STATUSES:
                raise errors.UsageError(f"unknown status {s!r}; one of {', '.join(STATUSES)}")
        if self.keep_last is not None and self.keep_last < 0:
            raise errors.UsageError("--keep-last must be 0 or more")
        if self.older_than is not None and self.older_than < dt.timedelta(0):
            raise errors.UsageError("--until/--older-than must not be negative")
        if self.newer_than is not None and self.newer_than < dt.timedelta(0):
            raise errors.UsageError("--since must not be negative")


@dataclass(frozen=True)
class Reason:
    """Why a selected session stays."""

    code: PruneReasonCode
    message: str  # one line


FRESH_CHUNK = 4096  # files read afresh per batch: their facts replace the index's as they come


@dataclass(slots=True)
class PruneDecision:
    """One selected session (or an interrupted prune to finish) and what happens to it."""

    session_id: str
    remove: bool  # True: this run removes it; False: refused (see reasons)
    reasons: list[Reason] = field(default_factory=list)  # every reason it stays; empty if removed
    bytes: int = 0  # bytes its files take (what removing it frees)
    files: list[str] = field(default_factory=list)  # names in the sessions dir it would remove
    damaged: bool = False  # its .corrupt copies are removed too (--include-damaged, explicit id)
    resume: bool = False  # an interrupted prune left an intent for it: this finishes that prune
    stamp: Stamp | None = None  # the main file and WAL as planned; execute re-checks under lock
    pins: Sequence[plugins.PluginVersion] = ()  # cached versions it uses


@dataclass(frozen=True)
class VersionUse:
    """One cached plugin version that selected sessions reference, and who else does."""

    version: plugins.PluginVersion  # (category, name, version)
    selected: int  # selected sessions that reference it (the sessions it pins)
    removed: int  # of those, how many the run removes (or would remove)
    outside: int  # sessions outside the selection that reference it: they keep it cached
    staying: int  # every session that stays and references it (outside + selected but refused)

    @property
    def unreferenced_after(self) -> bool:
        """Removed sessions referenced it and no session that stays does: a cache manager may
        evict it (what ``agentdb plugins refs`` then lists as unreferenced)."""
        return self.removed > 0 and self.staying == 0

    def to_json(self) -> dict[str, object]:
        category, name, version = self.version
        return {
            "category": category,
            "name": name,
            "version": version,
            "selected": self.selected,
            "removed": self.removed,
            "outside": self.outside,
            "staying": self.staying,
            "unreferenced_after": self.unreferenced_after,
        }


@dataclass
class PrunePlan:
    """What a prune run would do. Nothing has been changed when this exists."""

    sessions_dir: Path
    candidates: list[PruneDecision] = field(default_factory=list)  # in session id order
    notes: list[str] = field(default_factory=list)  # things the operator should know (stderr)
    include_pinned: bool = False  # --include-pinned: pinned sessions are removable
    # cached versions each session with a file references (every session, selected or not;
    # a session that references none is not listed)
    references: dict[str, Sequence[plugins.PluginVersion]] = field(default_factory=dict)
    unknown_references: list[str] = field(default_factory=list)  # unreadable: refs not known

    def version_uses(self, removed: Iterable[str] | None = None) -> list[VersionUse]:
        """Each cached version a selected session references, counted; ``removed`` are the
        sessions actually removed (default: the plan's removals)."""
        gone = set(removed) if removed is not None else {d.session_id for d in self.removals}
        selected = {d.session_id for d in self.candidates}
        counts: dict[plugins.PluginVersion, list[int]] = {}
        for d in self.candidates:
            for v in d.pins:
                c = counts.setdefault(v, [0, 0, 0, 0])
                c[0] += 1
                c[1] += d.session_id in gone
        for sid, refs in self.references.items():
            if sid in gone:
                continue
            for v in refs:
                if v in counts:
                    counts[v][2] += sid not in selected
                    counts[v][3] += 1
        return [VersionUse(v, *counts[v]) for v in sorted(counts)]

    wait: float = 0.0  # --wait: seconds execute may wait for a session someone opened meanwhile
    # every entry's identity when the plan began, and each session's parent link as planned:
    # execute re-reads the parent links of entries new or changed since (agentdb.index.stat)
    seen: dict[str, str | None] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)
    # entries whose identity was not settled when the plan began (changed within the file
    # system's timestamp granularity): execute reads their status again under the lock
    racy: set[str] = field(default_factory=set)
    statuses: dict[str, str | None] = field(default_factory=dict)  # status as planned
    notes_index: list[str] = field(default_factory=list)  # why the index was not used (stderr)

    @property
    def removals(self) -> list[PruneDecision]:
        return [d for d in self.candidates if d.remove]

    @property
    def refusals(self) -> list[PruneDecision]:
        return [d for d in self.candidates if not d.remove]

    @property
    def bytes(self) -> int:
        return sum(d.bytes for d in self.removals)


def _age_time(f: Facts, notes: list[str]) -> dt.datetime:
    """When a session ended, or started if it never ended: from its own data, never mtimes."""
    if f.info is None or f.info.ended_at is None:
        return f.started
    t = parse_timestamp(f.info.ended_at)
    if t is None:
        notes.append(
            f"{f.session_id}: ended_at {f.info.ended_at[:40]!r} is not an ISO 8601 time; "
            "its age is taken from its id (start time)"
        )
        return f.started
    return t


def _matches(f: Facts, sel: Selectors, now: dt.datetime, notes: list[str]) -> bool:
    """All given filters hold. A filter that cannot be judged (unreadable file) counts as a
    match, so the file is reported as refused rather than silently skipped."""
    if sel.older_than is not None and _age_time(f, notes) > now - sel.older_than:
        return False
    if sel.newer_than is not None and _age_time(f, notes) <= now - sel.newer_than:
        return False
    if f.info is None:
        return True
    if sel.statuses and f.info.status not in sel.statuses:
        return False
    return not (sel.profile is not None and f.info.profile != sel.profile)


def _needs_judge(f: Facts) -> bool:
    """A readable file nobody has open, present: check's judge decides if it is damaged (a
    file someone has open is refused as live, and its WAL is not judged)."""
    return (
        f.entry_kind != "absent" and f.problem is None and f.info is not None and f.holder is None
    )


def _members(label: str, ids: Iterable[str], limit: int = 3) -> str:
    ids = list(ids)
    shown = ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
    return f"{label} {shown}"


def _own_reasons(
    f: Facts,
    explicit: bool,
    allow_damaged: bool,
    pins: Sequence[plugins.PluginVersion],
    include_pinned: bool,
    judged: str | None,
) -> list[Reason]:
    """Every reason that keeps this one session, judged alone (has_children comes later).
    ``judged``: what check's judge said of it (:func:`_needs_judge`; None: nothing wrong)."""
    out: list[Reason] = []
    if f.entry_kind == "absent":
        if f.files.corrupt and not allow_damaged:
            out.append(
                Reason(
                    "not_found",
                    f"only its .corrupt copies remain ({', '.join(f.files.corrupt[:2])}); "
                    "name it with --include-damaged to remove them",
                )
            )
        elif not f.files.corrupt and not f.files.sidecars:
            out.append(Reason("not_found", "no such session file"))
        if f.holder is not None:
            out.append(Reason("live", f"{f.holder.file} is open; retry later"))
        return out
    if f.holder is not None:
        who = f" by pid {f.holder.pid}" if f.holder.pid else ""
        out.append(Reason("live", f"open{who} ({f.holder.file}); stop it or retry later"))
    problem = f.problem if f.problem is not None else judged
    if f.entry_kind == "directory":
        out.append(Reason("unreadable", f"{problem}; never removed, move it away by hand"))
    elif f.foreign:
        out.append(
            Reason(
                "foreign",
                f"{problem}: another application's file, never removed (not even with "
                "--include-damaged); move it out of the sessions directory by hand",
            )
        )
    elif problem is not None and not allow_damaged:
        hint = (
            "add --include-damaged to remove it"
            if explicit
            else "a selector never removes it; name it with --include-damaged"
        )
        out.append(Reason("unreadable", f"{problem}; {hint}"))
    if f.info is not None and f.info.status == RUNNING:
        out.append(Reason("running", "status is running (a kernel may resume it)"))
    if pins and not include_pinned:
        listed = _members("references plugin versions in the cache:", map(plugins.label, pins))
        out.append(Reason("pinned", f"{listed}; --include-pinned removes it anyway"))
    if f.files.corrupt and not allow_damaged:
        out.append(
            Reason(
                "has_corrupt_copies",
                f"keeps damaged originals {', '.join(f.files.corrupt[:2])}; name it with "
                "--include-damaged to remove them with it",
            )
        )
    return out


def plan(
    sessions_dir: Path,
    plugin_cache: Path,
    selectors: Selectors,
    *,
    now: dt.datetime | None = None,
    wait: float | None = None,
    use_index: bool = True,
    jobs: int = 1,
) -> PrunePlan:
    """Decide, changing nothing, what ``execute`` would remove and what stays and why.

    With ``wait`` (seconds, ``--wait``), a selected session someone has open is waited for (all
    of them together at most that long) and judged again once it is closed, instead of being
    refused as ``live`` at once. ``jobs``: worker processes reading and judging the files
    (the plan is the same whatever their number); Ctrl-C raises ``KeyboardInterrupt``.

    With ``use_index``, what the sessions that are not selected contribute (session_meta,
    producers, parent links) comes from the session index (:mod:`agentdb.index`, validated by
    stat); every selected session, and every one that joins a selected subtree, is judged
    from its file with check's full rules, as without it. A selected one the index knows,
    unchanged since the plan began (its identity) and held by nobody, is opened once, by the
    judge, whose reading of its status must be the index's (else it is read afresh); every
    other is read afresh from its file first.
    """
    selectors.validate()
    paths.require_sessions_dir(sessions_dir)
    now = now or dt.datetime.now(dt.timezone.utc)
    result = PrunePlan(sessions_dir, include_pinned=selectors.include_pinned, wait=wait or 0.0)
    began = time.time_ns()  # before any lstat: every identity is at least this recent
    for s in index.stat.seen_all(sessions_dir):
        result.seen[sys.intern(s.entry.session_id)] = s.key
        if not s.settled(began):
            result.racy.add(s.entry.session_id)
    groups = group_names(sessions_dir)

    @functools.cache
    def recovered_ids() -> frozenset[str]:
        """Sessions the recovery log records a salvage of (read once, when first needed)."""
        from agentdb.checks.run import read_recovery_index_or_finding, was_recovered

        index, _ = read_recovery_index_or_finding(paths.recovery_log_path(sessions_dir))
        return frozenset(sid for sid, entries in index.items() if was_recovered(entries))

    pins = Pins(plugins.cached_versions(plugin_cache))
    wanted = [
        (sid, files)
        for sid, files in groups.items()
        if files.main or sid in selectors.ids or files.intent
    ]
    wanted += [(sys.intern(sid), NONE) for sid in selectors.ids if sid not in groups]
    facts: dict[str, Facts] = {}
    fresh: set[str] = set()  # read from its file by this plan (not taken from the index)

    def read_fresh(todo: list[tuple[str, Files]]) -> None:
        # a batch at a time: a fresh read replaces what the index said of it as it comes
        for i in range(0, len(todo), FRESH_CHUNK):
            for f in read_all_facts(sessions_dir, todo[i : i + FRESH_CHUNK], jobs, pins):
                facts[f.session_id] = f
                fresh.add(f.session_id)

    if use_index:
        # The index's records stream past (id order, a window at a time): only the facts of
        # each session are kept, never every record (with its costs) nor every stored row.
        ids = set(selectors.ids)
        for rec in index.records(sessions_dir, result.notes_index, jobs=jobs, extras=True):
            sid = sys.intern(rec.entry.session_id)  # the one copy the plan keeps of it
            files = groups.get(sid)
            if (
                files is not None
                and result.seen.get(sid) is not None  # a regular file (else judged unopened)
                and sid not in ids
                and not files.intent
            ):
                got = facts_from_index(sessions_dir, sid, files, rec, pins)
                if got is not None:
                    facts[sid] = got
    read_fresh([(sid, files) for sid, files in wanted if sid not in facts])
    facts = {sid: facts[sid] for sid, _ in wanted}  # in id order

    # 1. The selection: explicit ids ∪ sessions matching every filter, minus --keep-last.
    matched: list[str] = []
    if selectors.has_filter:
        matched = [
            sid
            for sid, f in facts.items()
            if f.entry_kind != "absent" and _matches(f, selectors, now, result.notes)
        ]
        if selectors.keep_last is not None:
            readable = sorted((s for s in matched if facts[s].readable), reverse=True)
            kept = set(readable[: selectors.keep_last])
            matched = [s for s in matched if s not in kept]
    confirmed: set[str] = set()  # facts from the index, its entry unchanged: the judge confirms
    judged: dict[str, Judged] = {}  # check's judge, of each selected session nothing else refuses
    if use_index:
        # Every selected session is judged from its file, never from the index alone: what the
        # index says stands only for a file nobody has open whose identity is still the one
        # the plan began with, and whose status check's judge (which reads the file whole: its
        # one open) reads as the index does; any other is read afresh, and dropped again if it
        # no longer matches the filters that selected it.
        confirmed.update(
            s
            for s in matched
            if s not in fresh
            and s not in result.racy
            and s not in selectors.ids
            and confirm(sessions_dir, facts[s], result.seen.get(s))
        )
        judged = judge_all(
            sessions_dir, [(s, s in recovered_ids()) for s in sorted(confirmed)], jobs
        )
        for sid, (_, status) in list(judged.items()):
            info = facts[sid].info
            if info is None or status != info.status:
                del judged[sid]  # the index's row is not the file's: read it afresh
                confirmed.discard(sid)
        read_fresh(
            [(s, groups.get(s, NONE)) for s in matched if s not in fresh and s not in confirmed]
        )
        matched = [
            s
            for s in matched
            if facts[s].entry_kind != "absent" and _matches(facts[s], selectors, now, [])
        ]
    selected = sorted(set(selectors.ids) | set(matched))
    children = _links(facts, result)
    if wait:
        deadline = time.monotonic() + wait
        for sid in selected:
            if sid not in facts or facts[sid].holder is None or facts[sid].entry_kind == "absent":
                continue
            main = paths.session_path(sessions_dir, sid)
            if locks.wait_free(main, max(0.0, deadline - time.monotonic())) is None:
                facts[sid] = read_facts(sessions_dir, sid, groups.get(sid, NONE), pins)
                confirmed.discard(sid)

    # 2. --with-descendants: each selected session's subtree joins, grouped under its top.
    top: dict[str, str] = {sid: sid for sid in selected}
    if selectors.with_descendants:
        for root in selected:
            stack = list(children.get(root, []))
            while stack:
                c = stack.pop()
                if c in top:
                    continue
                top[c] = root
                stack.extend(children.get(c, []))
        for sid in list(top):  # a selected session inside another's subtree joins that group
            r = top[sid]
            while top[r] != r:
                r = top[r]
            top[sid] = r
        if use_index:  # the descendants that joined are read from their files too
            known = fresh | confirmed
            read_fresh([(s, groups.get(s, NONE)) for s in top if s not in known])
            children = _links(facts, result)
    # Interrupted prunes are finished whatever this run selects.
    resumes = {sid for sid, f in facts.items() if f.files.intent}

    # 3. Each session judged alone (by check's judge, when nothing simpler refuses it).
    judged |= judge_all(
        sessions_dir,
        [
            (sid, sid in recovered_ids())
            for sid in sorted(set(top) | resumes)
            if _needs_judge(facts[sid]) and sid not in judged
        ],
        jobs,
    )
    decisions: dict[str, PruneDecision] = {}
    for sid in sorted(set(top) | resumes):
        f = facts[sid]
        explicit = sid in selectors.ids or sid in resumes
        damaged = sid in selectors.ids and selectors.include_damaged
        d = PruneDecision(sid, False, stamp=f.stamp, pins=result.references.get(sid, ()))
        if sid in resumes:
            intent = read_intent(sessions_dir, sid)
            d.resume = True
            damaged = damaged or intent.damaged
            d.reasons += _resume_reasons(f, intent.stamp)
        if sid in resumes and f.entry_kind == "absent":
            if f.holder is not None:  # the orphan -shm is in use
                d.reasons.append(Reason("live", f"{f.holder.file} is open; retry later"))
        else:
            d.reasons += _own_reasons(
                f,
                explicit,
                damaged,
                d.pins,
                selectors.include_pinned,
                judged[sid][0] if sid in judged else None,
            )
        d.damaged = damaged
        d.files = _files(f, damaged)
        d.bytes = f.bytes + (_corrupt_bytes(sessions_dir, f) if damaged else 0)
        decisions[sid] = d
        result.statuses[sid] = f.info.status if f.info is not None else None

    # 4. Whole subtrees, then has_children, to a fixed point (refusing a child keeps its parent).
    changed = True
    while changed:
        changed = False
        if selectors.with_descendants:
            changed |= _refuse_whole_groups(decisions, top)
        for sid, d in decisions.items():
            # Every reason is listed: a session refused for its own reasons gets has_children
            # too, and the message follows the children that stay as the fixed point grows.
            staying = [
                c
                for c in children.get(sid, [])
                if (decisions.get(c) is None or decisions[c].reasons)
                and not (c in top and top[c] == top.get(sid))  # a subtree goes or stays whole
            ]
            if not staying:
                continue
            reason = Reason(
                "has_children", _members("named as parent by sessions that stay:", staying)
            )
            old = [r for r in d.reasons if r.code == "has_children" and not _inherited(r)]
            if old == [reason]:
                continue
            d.reasons = [r for r in d.reasons if r not in old] + [reason]
            changed = True
    for d in decisions.values():
        d.remove = not d.reasons
    result.candidates = [decisions[s] for s in sorted(decisions)]
    return result


def _links(facts: dict[str, Facts], result: PrunePlan) -> dict[str, list[str]]:
    """Fill the plan's references and parent links from ``facts``; the children of each id."""
    result.references.clear()
    result.unknown_references.clear()
    for sid, f in facts.items():
        if f.entry_kind == "absent":
            continue
        if f.readable:
            if f.producers:  # the cached versions it references (Facts keeps no others)
                result.references[sid] = f.producers
        else:
            result.unknown_references.append(sid)
    children: dict[str, list[str]] = {}
    for f in facts.values():
        parent = f.info.parent_session_id if f.info is not None else None
        result.parents[f.session_id] = parent
        if parent:
            children.setdefault(parent, []).append(f.session_id)
    return children


_SUBTREE = "subtree of "


def _inherited(r: Reason) -> bool:
    """A reason copied from another member of a --with-descendants subtree."""
    return r.message.startswith(_SUBTREE)


def _resume_reasons(f: Facts, planned: Stamp | None) -> list[Reason]:
    """An interrupted prune is finished only if the session is exactly as it was planned."""
    if planned is None:
        return [Reason("changed", "an interrupted prune left an unreadable intent; it stays")]
    if f.entry_kind != "absent" and (f.stamp.main != planned.main or f.stamp.wal != planned.wal):
        return [
            Reason(
                "changed",
                "changed since an interrupted prune planned to remove it; it stays",
            )
        ]
    return []


def _files(f: Facts, damaged: bool) -> list[str]:
    """What removing it deletes, in order: the main file first, the intent file last."""
    base = paths.session_filename(f.session_id)
    out = [base] if f.entry_kind != "absent" else []
    out += f.files.sidecars
    if damaged:
        out += f.files.corrupt
    if f.files.intent:
        out.append(base + INTENT)
    return out


def _corrupt_bytes(sessions_dir: Path, f: Facts) -> int:
    total = 0
    for n in f.files.corrupt:
        try:
            total += os.lstat(sessions_dir / n).st_size
        except FileNotFoundError:
            pass
    return total


def _refuse_whole_groups(decisions: dict[str, PruneDecision], top: dict[str, str]) -> bool:
    """If any member of a subtree stays, every member stays, naming the member that caused it
    (inherited reasons are rebuilt from the members' own reasons each round)."""
    changed = False
    by_group: dict[str, list[str]] = {}
    for sid, root in top.items():
        by_group.setdefault(root, []).append(sid)
    for root, members in by_group.items():
        own = {m: [r for r in decisions[m].reasons if not _inherited(r)] for m in members}
        for m in members:
            d = decisions[m]
            inherited = [
                Reason(r.code, f"{_SUBTREE}{root}: member {c}: {r.message}")
                for c in members
                if c != m
                for r in own[c]
            ]
            new = own[m] + [r for r in inherited if r not in own[m]]
            if new != d.reasons:
                d.reasons = new
                changed = True
    return changed
