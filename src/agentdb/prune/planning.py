"""``prune.plan``: which sessions the operator's selectors pick, and which of those must stay.

Pure and read-only: one ``scandir``, a lock probe per session, read-only opens. See
``docs/prune.md`` for the rules this module implements. What the plan learns of each session of
the directory goes into its scratch database (:mod:`agentdb.prune.scratch`) as it comes, and
the selection (the filters, ``--keep-last``, which sessions were read from the index or judged)
is marked there. The candidates (the selected sessions, the subtrees that join them and
interrupted prunes to finish) are grouped there (``grp``) and their decisions written there
(``decision``), a page at a time; only the decisions the subtree and ``has_children`` rules can
touch (candidates with children, those children, members of a subtree of more than one) are
objects together, for the fixed point.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from agentdb import index, locks, paths
from agentdb.index import plugins, verdicts
from agentdb.prune.decisions import (
    DECISION_COLUMNS,
    PruneDecision,
    PrunePlan,
    Reason,
    decode_decision,
    encode_decision,
    encode_reasons,
)
from agentdb.prune.reasons import (
    corrupt_bytes,
    files_of,
    is_inherited,
    members,
    needs_judge,
    own_reasons,
    refuse_whole_groups,
    resume_reasons,
)
from agentdb.prune.scan import (
    Facts,
    Files,
    Pins,
    confirm,
    facts_from_index,
    judge_all,
    read_all_facts,
    read_facts,
    read_intent,
    recorded_healthy,
)
from agentdb.prune.scratch import FAILURES, PAGE, PlanStore
from agentdb.prune.selection import Selectors, matches

FRESH_CHUNK = PAGE  # files read afresh per batch: their facts replace the index's as they come


def plan(
    sessions_dir: Path,
    plugin_cache: Path,
    selectors: Selectors,
    *,
    now: dt.datetime | None = None,
    wait: float | None = None,
    use_index: bool = True,
    jobs: int = 1,
    progress: Callable[[int, int, str], None] | None = None,
) -> PrunePlan:
    """Decide, changing nothing, what ``execute`` would remove and what stays and why.

    With ``wait`` (seconds, ``--wait``), a selected session someone has open is waited for (all
    of them together at most that long) and judged again once it is closed, instead of being
    refused as ``live`` at once. ``jobs``: worker processes reading and judging the files
    (the plan is the same whatever their number); Ctrl-C raises ``KeyboardInterrupt``.
    ``progress(done, total, session_id)`` as files are read (total: the files the plan may
    read) and judged (total: the batch being judged).

    With ``use_index``, what the sessions that are not selected contribute (session_meta,
    producers, parent links) comes from the session index (:mod:`agentdb.index`, validated by
    stat); every selected session, and every one that joins a selected subtree, is judged
    from its file with check's full rules, as without it. A selected one the index knows,
    unchanged since the plan began (its identity) and held by nobody, is opened once, by the
    judge, whose reading of its status must be the index's (else it is read afresh); every
    other is read afresh from its file first.

    The plan holds a scratch database until it is closed (``with plan:`` or
    :meth:`PrunePlan.close`); on an error it is dropped before the error propagates.
    """
    selectors.validate()
    paths.require_sessions_dir(sessions_dir)
    now = now or dt.datetime.now(dt.timezone.utc)
    pins = Pins(plugins.cached_versions(plugin_cache))
    why = None
    while True:
        result = PrunePlan(sessions_dir, include_pinned=selectors.include_pinned, wait=wait or 0.0)
        store = result.open_store(pins, memory=why is not None)
        why = why or store.why_memory
        if why is not None:
            result.notes_index.append(
                f"agentdb: the plan's scratch database could not be written ({why}); "
                "planned in memory"
            )
        try:
            _plan(result, store, pins, selectors, now, wait, use_index, jobs, progress)
        except FAILURES as e:
            result.close()
            if not store.on_disk:
                raise
            why = str(e).split("\n")[0][:200]  # a full disk midway: again, in memory
            continue
        except BaseException:
            result.close()
            raise
        return result


def _plan(
    result: PrunePlan,
    store: PlanStore,
    pins: Pins,
    selectors: Selectors,
    now: dt.datetime,
    wait: float | None,
    use_index: bool,
    jobs: int,
    progress: Callable[[int, int, str], None] | None = None,
) -> None:
    sessions_dir = result.sessions_dir
    began = time.time_ns()  # before any lstat: every identity is at least this recent
    store.add_names(sessions_dir, selectors.ids, began)

    @functools.cache
    def recovered_ids() -> frozenset[str]:
        """Sessions the recovery log records a salvage of (read once, when first needed)."""
        from agentdb.checks.run import read_recovery_index_or_finding, was_recovered

        index, _ = read_recovery_index_or_finding(paths.recovery_log_path(sessions_dir))
        return frozenset(sid for sid, entries in index.items() if was_recovered(entries))

    read = [0, 0]  # files read fresh so far, and the most the plan may read (once known)

    def read_fresh(todo: Sequence[tuple[str, Files]], first: bool = False) -> None:
        # a batch at a time: a fresh read replaces what the index said of it as it comes
        if progress is not None and not read[1]:
            (count,) = list(store.rows("SELECT COUNT(*) FROM entry WHERE wanted"))
            read[1] = int(count[0])
        for i in range(0, len(todo), FRESH_CHUNK):
            for f in read_all_facts(sessions_dir, todo[i : i + FRESH_CHUNK], jobs, pins):
                store.put(f, fresh=True, first=first)
                if progress is not None:
                    read[0] += 1
                    progress(read[0], max(read), f.session_id)

    def read_fresh_where(where: str) -> None:
        for page in store.ids(where):
            read_fresh([(s, store.files(s)) for s in page])

    @functools.cache
    def may_record() -> bool:
        """Check's rule: a run whose recovery log cannot be read records no verdict (an
        orphan row of a recovery then reads as damage that must not outlive the run)."""
        from agentdb.checks.run import read_recovery_index_or_finding

        return read_recovery_index_or_finding(paths.recovery_log_path(sessions_dir))[1] is None

    def judge_each(
        ids: Sequence[str], record: bool = False
    ) -> dict[str, tuple[str | None, str | None]]:
        """Check's judge of each of ``ids``; with ``record``, its verdicts are recorded in
        the verdict cache, as ``check`` records its own."""
        entries: list[verdicts.Entry] = []
        wanted = [(s, s in recovered_ids()) for s in ids]
        said = judge_all(sessions_dir, wanted, jobs, entries if record else None)
        if entries and may_record():
            verdicts.record(sessions_dir, entries, checkpoint=True)
        if progress is not None and ids:
            progress(len(ids), len(ids), ids[-1])
        return said

    explicit = set(selectors.ids)
    if use_index:
        # The index's records stream past (id order, a window at a time): each session's facts
        # go to the scratch database, never every record (with its costs) nor every stored row.
        known_facts: list[Facts] = []
        for rec in index.records(sessions_dir, result.notes_index, jobs=jobs, extras=True):
            sid = rec.entry.session_id
            listed = store.entry(sid)
            if listed is None:
                continue
            files, key, wanted = listed
            # a regular file (else judged unopened), not named, no interrupted prune
            if wanted and key is not None and sid not in explicit and not files.intent:
                got = facts_from_index(sessions_dir, sid, files, rec, pins)
                if got is not None:
                    known_facts.append(got)
                    if len(known_facts) >= FRESH_CHUNK:
                        store.put_all(known_facts, fresh=False, first=True)
                        known_facts = []
        store.put_all(known_facts, fresh=False, first=True)
    for batch in store.unread():
        read_fresh(batch, first=True)

    # 1. The selection: explicit ids ∪ sessions matching every filter, minus --keep-last.
    if selectors.has_filter:
        for rows in store.pages("NOT f.absent"):
            store.set_flag(
                "matched",
                [sid for sid, info, _ in rows if matches(sid, info, selectors, now, result.notes)],
            )
        if selectors.keep_last is not None:
            store.keep_newest(selectors.keep_last)
    if use_index:
        # Every selected session is judged from its file, never from the index alone: what the
        # index says stands only for a file nobody has open whose identity is still the one
        # the plan began with, and whose status check's judge (which reads the file whole: its
        # one open) reads as the index does; any other is read afresh, and dropped again if it
        # no longer matches the filters that selected it.
        # A file whose healthy full verdict the verdict cache holds for its identity now is
        # judged by that verdict (the judge would read the same bytes: the racily-clean rule
        # holds for both); the judge's verdict of every other is recorded there (the next
        # plan takes it), as check records its own.
        with verdicts.Lookup(sessions_dir) as found:  # asked in id order: a page at a time
            for page in store.ids("f.matched AND NOT f.fresh AND NOT e.racy AND NOT e.explicit"):
                ok = []
                known: dict[str, tuple[str | None, str | None]] = {}
                stamped: list[Facts] = []
                for sid in page:
                    f = store.get(sid)
                    ident = confirm(sessions_dir, f, store.identity(sid))
                    if ident is None:
                        continue
                    stamped.append(f)
                    ok.append(sid)
                    cached = recorded_healthy(found.get(sid + paths.SESSION_SUFFIX), ident)
                    if cached is not None and f.info is not None and cached[1] == f.info.status:
                        known[sid] = cached
                store.put_all(stamped, fresh=False, first=True)  # stamps, sizes; refs kept
                store.set_flag("confirmed", ok)
                store.judged_as(known)
        for rows in store.pages("f.confirmed AND NOT f.judged"):
            infos = {sid: info for sid, info, _ in rows}
            said = judge_each(list(infos), record=True)
            for sid, (_, status) in list(said.items()):
                info = infos[sid]
                if info is None or status != info.status:
                    store.set_flag("confirmed", [sid], 0)  # the index's row is not the file's
                    del said[sid]
            store.judged_as(said)
        read_fresh_where("f.matched AND NOT f.fresh AND NOT f.confirmed")
        for rows in store.pages("f.matched"):
            store.set_flag(
                "matched",
                [
                    s
                    for s, info, absent in rows
                    if absent or not matches(s, info, selectors, now, [])
                ],
                0,
            )
    # The selection, in id order: each selected session a group of its own (``grp``).
    store.select_groups()
    if wait:
        deadline = time.monotonic() + wait
        for page in store.ids("(f.matched OR e.explicit) AND f.holder AND NOT f.absent"):
            for sid in page:
                main = paths.session_path(sessions_dir, sid)
                if locks.wait_free(main, max(0.0, deadline - time.monotonic())) is None:
                    store.put(read_facts(sessions_dir, sid, store.files(sid), pins), fresh=False)
                    store.set_flag("confirmed", [sid], 0)

    # 2. --with-descendants: each selected session's subtree joins, grouped under its top.
    if selectors.with_descendants:
        for roots in store.selected_ids():
            for root in roots:
                stack = store.children(root)
                while stack:
                    c = stack.pop()
                    if store.in_group(c):
                        continue
                    store.join_group(c, root)
                    stack.extend(store.children(c))
        if store.nested_roots():  # a selected session inside another's subtree joins that group
            for members in store.keyed_pages(
                "SELECT seq, id FROM grp WHERE seq > ? ORDER BY seq LIMIT ?", first=0
            ):
                for _, sid in members:
                    r = store.root_of(sid)
                    while store.root_of(r) != r:
                        r = store.root_of(r)
                    store.set_root(sid, r)
        if use_index:  # the descendants that joined are read from their files too
            for joined in store.keyed_pages(
                "SELECT g.seq, g.id FROM grp g JOIN facts f ON f.id = g.id "
                "JOIN entry e ON e.id = g.id WHERE g.seq > ? AND NOT e.explicit "
                "AND NOT (f.fresh OR f.confirmed) ORDER BY g.seq LIMIT ?",
                first=0,
            ):
                read_fresh([(s, store.files(s)) for _, s in joined])
    # Interrupted prunes are finished whatever this run selects.
    store.mark_candidates()

    # 3. Each session judged alone (by check's judge, when nothing simpler refuses it).
    for page in store.ids("f.cand"):
        todo = [s for s in page if store.judgement(s) is None and needs_judge(store.get(s))]
        store.judged_as(judge_each(todo))
    # Its decision, as a row (``decision``): only a page of them is ever in memory.
    for rows in store.keyed_pages(
        "SELECT f.id, e.intent FROM facts f JOIN entry e ON e.id = f.id "
        "WHERE f.id > ? AND f.cand ORDER BY f.id LIMIT ?"
    ):
        out = []
        for sid, intent in rows:
            d, status = _decide(result, store, selectors, sid, sid in explicit, bool(intent))
            odd = selectors.with_descendants and _odd(d.reasons)
            out.append(encode_decision(d, status, odd))
        store.put_decisions(out)

    # 4. Whole subtrees, then has_children, to a fixed point (refusing a child keeps its parent).
    # The rules join a session only to its parent, its children and its subtree's members, so
    # they run over each set of sessions so joined alone, read back from the scratch database
    # (a session no rule joins to another keeps its own reasons, as the rules leave them):
    # what is in memory is the largest such set, never every candidate.
    wd = selectors.with_descendants
    for component in _components(store, wd):
        decisions = _load(store, component)
        children = {sid: kids for sid in decisions if (kids := store.children(sid))}
        top = store.groups_of(list(decisions))
        before = {sid: list(d.reasons) for sid, d in decisions.items()}
        settle(decisions, top, children, wd)
        store.set_reasons(
            (encode_reasons(d.reasons), not d.reasons, wd and _odd(d.reasons), sid)
            for sid, d in decisions.items()
            if d.reasons != before[sid]
        )


def _odd(reasons: Sequence[Reason]) -> bool:
    return any(is_inherited(r) for r in reasons)


def _components(store: PlanStore, with_descendants: bool) -> Iterator[list[str]]:
    """The candidates the fixed point's rules join, one connected set at a time (in id order):
    a candidate and its parent and children that are candidates, and with --with-descendants
    its group's members. Only sets the rules can change are given: those with a candidate
    that has children (candidates or not), and with --with-descendants those of a group of
    more than one or with a reason that reads as passed on by a subtree (the rules drop it)."""
    seeds = "EXISTS (SELECT 1 FROM facts c WHERE c.parent = d.id)"
    neighbours = (
        "SELECT c.id FROM facts c JOIN decision k ON k.id = c.id WHERE c.parent = ?1 "
        "UNION SELECT p.id FROM facts me JOIN decision p ON p.id = me.parent WHERE me.id = ?1"
    )
    if with_descendants:
        seeds += " OR d.odd OR EXISTS (SELECT 1 FROM grp g WHERE g.root = d.id AND g.id != d.id)"
        seeds += " OR EXISTS (SELECT 1 FROM grp g WHERE g.id = d.id AND g.root != d.id)"
        neighbours += (
            " UNION SELECT root FROM grp WHERE id = ?1 UNION SELECT id FROM grp WHERE root = ?1"
        )
    for page in store.keyed_pages(
        f"SELECT d.id FROM decision d WHERE d.id > ? AND NOT d.comp AND ({seeds}) "
        "ORDER BY d.id LIMIT ?"
    ):
        for (seed,) in page:
            if store.in_component(seed):
                continue
            found = {seed}
            stack = [seed]
            while stack:
                for (y,) in store.rows(neighbours, (stack.pop(),)):
                    if y not in found:
                        found.add(y)
                        stack.append(y)
            store.set_component(found)
            yield sorted(found)


def _load(store: PlanStore, ids: Sequence[str]) -> dict[str, PruneDecision]:
    """The decisions of ``ids``, in id order."""
    store.conn.execute("DELETE FROM temp.load")
    store.conn.executemany("INSERT OR IGNORE INTO temp.load VALUES (?)", ((s,) for s in ids))
    return {
        sid: decode_decision(store, sid, row)
        for sid, *row in store.rows(
            f"SELECT id, {DECISION_COLUMNS} FROM decision "
            "WHERE id IN (SELECT id FROM temp.load) ORDER BY id"
        )
    }


def _decide(
    result: PrunePlan,
    store: PlanStore,
    selectors: Selectors,
    sid: str,
    explicit: bool,
    resume: bool,
) -> tuple[PruneDecision, str | None]:
    """One candidate judged alone (its own reasons, files, bytes) and its status as planned."""
    sessions_dir = result.sessions_dir
    f = store.get(sid)
    is_explicit = explicit or resume
    damaged = explicit and selectors.include_damaged
    pins_of = f.producers if f.entry_kind != "absent" and f.readable else ()
    d = PruneDecision(sid, False, stamp=f.stamp, pins=pins_of)
    if resume:
        intent = read_intent(sessions_dir, sid)
        d.resume = True
        damaged = damaged or intent.damaged
        d.reasons += resume_reasons(f, intent.stamp)
    if resume and f.entry_kind == "absent":
        if f.holder is not None:  # the orphan -shm is in use
            d.reasons.append(Reason("live", f"{f.holder.file} is open; retry later"))
    else:
        judged = store.judgement(sid)
        d.reasons += own_reasons(
            f,
            is_explicit,
            damaged,
            d.pins,
            selectors.include_pinned,
            judged[0] if judged is not None else None,
        )
    d.damaged = damaged
    d.files = files_of(f, damaged)
    d.bytes = f.bytes + (corrupt_bytes(sessions_dir, f) if damaged else 0)
    d.remove = not d.reasons
    return d, f.info.status if f.info is not None else None


def settle(
    decisions: dict[str, PruneDecision],
    top: dict[str, str],
    children: dict[str, list[str]],
    with_descendants: bool,
) -> None:
    """Whole subtrees, then has_children, to a fixed point, over ``decisions`` (in id order);
    ``top``: each one's group (its selected session), in the order it joined; ``children``:
    the sessions naming each as parent, in id order."""
    changed = True
    while changed:
        changed = False
        if with_descendants:
            changed |= refuse_whole_groups(decisions, top)
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
                "has_children", members("named as parent by sessions that stay:", staying)
            )
            old = [r for r in d.reasons if r.code == "has_children" and not is_inherited(r)]
            if old == [reason]:
                continue
            d.reasons = [r for r in d.reasons if r not in old] + [reason]
            changed = True
    for d in decisions.values():
        d.remove = not d.reasons
