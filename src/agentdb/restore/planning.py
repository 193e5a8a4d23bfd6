"""``restore.plan``: for each session, which copy would be restored, or why not. Read-only.

Per session, in this order (every reason that applies is listed; see ``docs/restore.md``):

1. an interrupted restore (an intent in the recovery log with no outcome) whose session file is
   still the one it judged, or already half swapped, is finished with the copy it chose;
2. liveness: a session someone has open is refused (``live``), whatever ``--force`` says;
3. the current file, judged by ``check``: missing (restored, unless ``prune`` removed it:
   ``pruned`` without ``--include-pruned``); damaged (``damaged``: the step check names
   first, such as ``recover``, or ``--force`` with explicit ids; ``--all`` restores it only
   when every row it holds is in the copy, keeping it as ``.pre-restore``); a symlink, FIFO,
   insecure, foreign, too new or with triggers/views (``unsafe``/``foreign``/``too_new``:
   never forced); with ``--all`` a healthy session is left alone (``unchanged``);
4. the copy: the newest in DIR that ``check`` passes as this session (``no_copy``, ``bad_copy``);
5. the current file must be a prefix of the copy (:mod:`agentdb.checks.prefix`): otherwise restoring
   would lose its newer events (``would_lose_events``, listing their sequence ranges), which
   only ``--force`` overrides; a file that already holds the copy's rows is ``unchanged``.
   When both are revision 3 the head proof decides when it applies (design §11; a copy whose
   chain fails is ``bad_copy``, a current file whose chain fails cannot be compared:
   ``damaged``), and a current file that is a proven *proper* prefix of the copy lost the
   copy's last events consistently (a rollback): restored, with a note saying so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdb import checks, errors, fsutil, locks, paths
from agentdb.checks import prefix
from agentdb.checks.refusal import refusal
from agentdb.checks.run import read_recovery_index, was_recovered
from agentdb.fsutil import stat_key
from agentdb.paths import sidecar
from agentdb.restore.copies import Copy, copies_of, copy_of, list_copies, verify

FORCEABLE = frozenset({"would_lose_events", "damaged"})
PRUNE_INTENT = ".agentdb-prune-intent"
Key = fsutil.StatKey | None
Stamp = fsutil.Stamp
stamp_of = fsutil.stamp_of


def stamp_json(s: Stamp) -> list[list[int] | None]:
    return [None if k is None else list(k) for k in s]


def stamp_from(doc: Any) -> Stamp | None:
    if not isinstance(doc, list) or len(doc) != 3:
        return None
    out: list[Key] = []
    for k in doc:
        if k is None:
            out.append(None)
        elif isinstance(k, list) and len(k) == 3 and all(type(x) is int for x in k):
            out.append((k[0], k[1], k[2]))
        else:
            return None
    return (out[0], out[1], out[2])


@dataclass(frozen=True)
class Reason:
    """Why a session is not restored."""

    code: str  # live | no_copy | bad_copy | pruned | would_lose_events | damaged | unsafe |
    #            foreign | too_new | orphan_sidecars | changed
    message: str  # one line, with what to do


@dataclass
class RestoreDecision:
    """One session: restore it from ``copy``, leave it (``unchanged``), or refuse (reasons)."""

    session_id: str
    action: str = "refuse"  # restore | unchanged | refuse
    reasons: list[Reason] = field(default_factory=list)  # every reason it is refused
    current: str = "missing"  # the current file: missing | ok | damaged | unsafe | ... | live
    copy: Copy | None = None  # the copy to restore (the newest that passes verification)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (copy, why) failing copies
    stamp: Stamp = (None, None, None)  # the current file as judged; execute re-checks it
    lost_events: list[tuple[int, int]] | None = field(default_factory=list)  # None: unknown
    lost_rows: dict[str, int] = field(default_factory=dict)  # table -> rows only the current has
    forced: bool = False  # --force overrode would_lose_events or damaged
    resume: dict[str, Any] | None = None  # the interrupted restore's intent this finishes
    finish: bool = False  # the interrupted restore had swapped: only its outcome line is missing
    recovered: bool = False  # the recovery log records a salvage of this session
    damage: str | None = None  # --all: what check found wrong with the current file
    damage_retry: bool = False  # ...and it names a step to take before restoring again
    notes: list[str] = field(default_factory=list)  # things the operator should know
    decided_by: str | None = None  # how the current file was compared: proof or rows


@dataclass
class RestorePlan:
    """What a restore run would do. Nothing has been changed when this exists."""

    sessions_dir: Path
    from_dir: Path | None  # the backup folder (None when only --copy was given)
    recovery_log: Path
    decisions: list[RestoreDecision] = field(default_factory=list)  # in the order asked


def _usage(msg: str) -> errors.UsageError:
    return errors.UsageError(msg)


def _validate(
    sessions_dir: Path,
    from_dir: Path | None,
    ids: Sequence[str] | None,
    copy_path: Path | None,
    force: bool,
) -> None:
    if ids is None and force:
        raise _usage("--force is accepted only with explicit session ids, never with --all")
    if ids is not None:
        for sid in ids:
            paths.validate_id(sid)
    if copy_path is not None and (ids is None or len(ids) != 1):
        raise _usage("--copy names the copy of one session: give exactly one session id")
    if from_dir is None and copy_path is None:
        raise _usage("give --from DIR (the backup folder), or --copy PATH with one session id")
    if from_dir is not None:
        if not from_dir.is_dir():
            raise _usage(f"{from_dir}: no such backup directory; pass the folder given to backup")
        if from_dir.resolve() == sessions_dir.resolve():
            raise _usage(f"{from_dir}: is the sessions directory; pass the backup folder")
    if copy_path is not None and not os.path.lexists(copy_path):
        raise _usage(f"{copy_path}: no such copy; pass a file written by `agentdb backup`")


def pending_restore(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last restore intent of a session, if no outcome followed it (a killed run)."""
    mine = [e for e in entries if e.get("job") == "restore"]
    if mine and mine[-1].get("event") == "intent":
        return mine[-1]
    return None


def _pruned(sessions_dir: Path, sid: str, entries: list[dict[str, Any]]) -> str | None:
    """When prune removed the session, if that is the last thing the log says happened to it,
    or that an interrupted prune's intent file is there; None if prune did not remove it."""
    last = None
    for e in entries:
        if e.get("outcome") in ("pruned", "restored"):
            last = e
    if last is not None and last.get("outcome") == "pruned":
        return f"on {last.get('time') or 'an unknown date'}, says the recovery log"
    if os.path.lexists(sessions_dir / f"{sid}.sqlite{PRUNE_INTENT}"):
        return "an interrupted prune left its intent file"
    return None


def plan(
    sessions_dir: Path,
    from_dir: Path | None,
    ids: Sequence[str] | None,
    *,
    copy_path: Path | None = None,
    include_pruned: bool = False,
    force: bool = False,
    recovery_log: Path | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> RestorePlan:
    """Decide, changing nothing, what ``execute`` would restore (``ids`` None: ``--all``);
    ``progress(done, total, session_id)`` after each session is decided (its copies judged)."""
    paths.require_sessions_dir(sessions_dir)
    _validate(sessions_dir, from_dir, ids, copy_path, force)
    log = recovery_log or paths.recovery_log_path(sessions_dir)
    result = RestorePlan(sessions_dir, from_dir, log)
    recovery = read_recovery_index(log)
    if copy_path is not None:
        assert ids is not None
        copies = {ids[0]: [copy_of(copy_path)]}
    elif ids is None:
        assert from_dir is not None
        copies = list_copies(from_dir)
    else:
        assert from_dir is not None
        copies = {sid: copies_of(from_dir, sid) for sid in dict.fromkeys(ids)}
    selected = list(dict.fromkeys(ids)) if ids is not None else sorted(copies)
    for sid in selected:
        d = _decide(
            sessions_dir,
            sid,
            copies.get(sid, []),
            recovery.get(sid, []),
            all_mode=ids is None,
            force=force,
            include_pruned=include_pruned,
        )
        result.decisions.append(d)
        if progress is not None:
            progress(len(result.decisions), len(selected), sid)
    return result


def _decide(
    sessions_dir: Path,
    sid: str,
    candidates: list[Copy],
    entries: list[dict[str, Any]],
    *,
    all_mode: bool,
    force: bool,
    include_pruned: bool,
) -> RestoreDecision:
    main = paths.session_path(sessions_dir, sid)
    d = RestoreDecision(sid, recovered=was_recovered(entries))
    d.stamp = stamp_of(main)
    holder = locks.probe(main)
    if holder is not None:
        who = f"pid {holder.pid}" if holder.pid else "another process"
        d.current = "live"
        d.reasons.append(Reason("live", f"open by {who} ({holder.file}); stop it, then retry"))
        return d
    pending = pending_restore(entries)
    if pending is not None and _resume(d, main, pending):
        return d
    exists = d.stamp[0] is not None or os.path.lexists(main)
    if not exists:
        when = None if include_pruned else _pruned(sessions_dir, sid, entries)
        if when is not None:
            d.reasons.append(
                Reason("pruned", f"removed by prune ({when}); add --include-pruned to restore it")
            )
        orphans = [s for s in ("-wal", "-journal") if os.path.lexists(sidecar(main, s))]
        if orphans:
            names = ", ".join(main.name + s for s in orphans)
            d.reasons.append(
                Reason(
                    "orphan_sidecars",
                    f"{names} exists without {main.name}: it may hold the session's last "
                    "commits; move it out of the directory, then restore again",
                )
            )
    else:
        judged = checks.check_path(main, sid, recovered=d.recovered)
        if judged.live is not None:
            d.current = "live"
            d.reasons.append(Reason("live", "opened by another process while it was judged"))
            return d
        r = refusal(judged)
        d.current = "ok" if r is None or r.code == "needs_migration" else r.code
        if d.current == "ok" and all_mode:
            d.action = "unchanged"
            d.notes.append("current file is healthy; --all restores only missing or damaged ones")
            return d
        if d.current != "ok" and r is not None:
            if r.forceable and force:
                d.forced = True
                d.notes.append(f"--force: restoring over a damaged file ({r.message})")
            elif r.forceable and all_mode:
                d.damage = r.message  # restored only if every row it holds is in the copy
                d.damage_retry = r.retry
            elif r.forceable:
                again = ", then restore again; or" if r.retry else ";"
                d.reasons.append(
                    Reason(
                        r.code,
                        f"{r.message}{again} add --force to restore over it (it is kept as "
                        ".pre-restore)",
                    )
                )
            else:
                d.reasons.append(Reason(r.code, r.message))
    _choose_copy(d, candidates)
    if d.copy is not None and exists and not any(r.code not in FORCEABLE for r in d.reasons):
        _compare(d, main, force, pending)
    elif d.damage is not None:
        again = ", then restore again" if d.damage_retry else "; name it with --force"
        d.reasons.append(Reason("damaged", f"{d.damage}{again}"))
    if d.action != "unchanged":
        d.action = "refuse" if d.reasons else "restore"
    if d.action == "restore" and stamp_of(main) != d.stamp:
        d.reasons.append(Reason("changed", "changed while it was judged; retry"))
        d.action = "refuse"
    return d


def _resume(d: RestoreDecision, main: Path, pending: dict[str, Any]) -> bool:
    """Finish an interrupted restore if the session is still as it judged, or half swapped."""
    planned = stamp_from(pending.get("stamp"))
    pre = pending.get("pre_restore_path")
    same = planned is not None and planned[0] == d.stamp[0]
    if not same and isinstance(pre, str) and d.stamp[0] is not None:
        try:
            kept = os.lstat(pre)
            same = stat_key(kept)[0] == d.stamp[0][0] and kept.st_dev == os.lstat(main).st_dev
        except FileNotFoundError:
            same = False
    copy = pending.get("copy")
    if not same or not isinstance(copy, str) or not os.path.lexists(copy):
        return False
    c = copy_of(Path(copy))
    if list(c.stamp) != pending.get("copy_stamp"):
        return False  # the copy changed since: judge the session afresh
    why = verify(c, d.session_id, recovered=d.recovered)
    if why is not None:
        return False
    d.copy, d.resume, d.action = c, pending, "restore"
    d.current = "missing" if d.stamp[0] is None else "ok"
    _take_intent(d, pending)
    d.notes.append("finishing an interrupted restore")
    return True


def _take_intent(d: RestoreDecision, pending: dict[str, Any]) -> None:
    """What the interrupted run decided: forced or not, and what the old file alone held."""
    d.resume = pending
    d.forced = bool(pending.get("forced"))
    lost = pending.get("lost_events")
    d.lost_events = None
    if isinstance(lost, list):
        d.lost_events = [
            (int(r[0]), int(r[1]))
            for r in lost
            if isinstance(r, list) and len(r) == 2 and all(type(x) is int for x in r)
        ]
    rows = pending.get("lost_rows")
    d.lost_rows = (
        {str(k): int(v) for k, v in rows.items() if type(v) is int}
        if isinstance(rows, dict)
        else {}
    )


def _choose_copy(d: RestoreDecision, candidates: list[Copy]) -> None:
    if not candidates:
        d.reasons.append(
            Reason(
                "no_copy",
                f"no copy of it in the backup folder ({d.session_id}.sqlite or "
                f"{d.session_id}.sqlite.<UTC timestamp>)",
            )
        )
        return
    for c in candidates:
        why = verify(c, d.session_id, recovered=d.recovered)
        if why is None:
            d.copy = c
            return
        d.rejected.append((str(c.path), why))
    first = d.rejected[0][1]
    d.reasons.append(
        Reason(
            "bad_copy",
            f"no copy passes verification ({len(d.rejected)} tried; newest: {first})",
        )
    )


def _uncomparable(d: RestoreDecision, why: str, force: bool = False) -> None:
    """The current file cannot be compared with the copy (unreadable, or its chain fails:
    ``force`` then overrides it like any damage)."""
    if d.forced or force:
        d.forced = True
        d.lost_events = None
        d.notes.append(f"events only in the current file: unknown, it cannot be read ({why})")
    elif any(r.code == "damaged" for r in d.reasons):
        pass  # check's judge already named the damage, and its fix
    else:
        d.reasons.append(
            Reason(
                "damaged",
                f"{d.damage or 'it'}; it cannot be compared with the copy ({why}): run "
                f"`agentdb recover {d.session_id}` first, then restore again",
            )
        )


def _compare(d: RestoreDecision, main: Path, force: bool, pending: dict[str, Any] | None) -> None:
    """Is the current file a prefix of the copy (``checks.prefix``, issue 15's definition)?"""
    assert d.copy is not None
    try:
        cmp = prefix.compare_paths(main, d.copy.path)
    except errors.AgentdbError as e:
        _uncomparable(d, str(e).splitlines()[0])
        return
    d.decided_by = cmp.decided_by
    if cmp.new_chain_ok is False:
        assert cmp.new_chain is not None
        d.reasons.append(
            Reason(
                "bad_copy",
                f"{d.copy.path}: fails full chain verification "
                f"({', '.join(cmp.new_chain.problems)}); restore another copy with --copy PATH",
            )
        )
        return
    if cmp.old_chain_ok is False:
        assert cmp.old_chain is not None
        problems = ", ".join(cmp.old_chain.problems)
        _uncomparable(d, f"it fails full chain verification: {problems}", force)
        return
    nothing_new = all(t.added == 0 for t in cmp.tables.values())
    if cmp.is_prefix and nothing_new and cmp.meta_equal and d.current == "ok":
        # the same rows (whatever the revisions) in a healthy file: nothing to restore
        if pending is not None:  # the killed run had swapped: only its outcome line is missing
            d.finish = True
            _take_intent(d, pending)
            d.notes.append("finishing an interrupted restore (the file was already swapped)")
        else:
            d.action = "unchanged"
            d.notes.append("the current file already holds exactly the copy's rows")
        return
    if cmp.is_prefix:
        if (
            cmp.decided_by == "proof"
            and cmp.old_head is not None
            and cmp.new_head is not None
            and cmp.new_head > cmp.old_head
        ):
            d.notes.append(
                f"the current file is a proper prefix of the copy, proven by the chain heads: "
                f"its last event ({cmp.old_head}) is a link in the copy's chain, which goes on "
                f"to {cmp.new_head}; the events after it were lost consistently (a rollback), "
                "and restoring puts them back"
            )
        if d.damage is not None:
            d.notes.append(
                f"damaged ({d.damage}); every row it holds is in the copy, so --all restores "
                "it and keeps it as .pre-restore"
            )
        return
    d.lost_events = list(cmp.lost_event_ranges)
    d.lost_rows = {n: t.missing + t.changed for n, t in cmp.tables.items() if t.missing + t.changed}
    loss = cmp.describe_loss()
    if force:
        d.forced = True
        d.notes.append(f"--force: what only the current file holds is not restored: {loss}")
    elif d.damage is not None:
        d.reasons.append(
            Reason(
                "damaged",
                f"{d.damage}, and it holds {loss} that the copy lacks; "
                + ("take that step first, or " if d.damage_retry else "")
                + "name it with --force",
            )
        )
    else:
        d.reasons.append(
            Reason(
                "would_lose_events",
                f"the current file is not a prefix of the copy: it holds {loss} that the copy "
                "lacks; back it up first, or add --force (it is kept as .pre-restore)",
            )
        )
