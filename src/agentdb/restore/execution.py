"""``restore.execute``: put the planned copies back, crash-safely, one session at a time.

Per session:

1. remove what a killed restore left (``<id>.sqlite.agentdb-restore-tmp`` and its sidecars);
2. copy the chosen copy with SQLite's backup API into that temporary name beside the session,
   switch it to WAL mode, ``0600``, fsync; judge it with ``check`` again (and check that the
   copy did not change since the plan) — fault point ``restore_after_tmp``;
3. under :func:`agentdb.locks.hold` on the current file (no SQLite connection can open it
   meanwhile): re-check that it is the very file the plan judged; write the intent line to the
   recovery log (``restore_after_intent``); swap with recover's protocol
   (:func:`agentdb.salvage.swap.swap`): the current file keeps the name
   ``<id>.sqlite.pre-restore[.N]`` with its ``-wal``/``-journal`` beside it, the old sidecars go,
   the temporary file is renamed into place (``restore_after_link``, ``restore_after_wal_link``,
   ``restore_after_sidecars_removed``, ``restore_after_rename``); a missing session gets the
   copy with ``link(2)``, which never replaces a file a kernel created meanwhile;
4. the outcome line.

A run killed anywhere is finished (or repeated) by the next run: the plan finds the intent
without an outcome and the session either still as judged, half swapped, or already swapped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import apsw

from agentdb import checks, db, errors, faults, fsutil, locks, paths, recoverylog, swap
from agentdb.fsutil import stat_key
from agentdb.paths import sidecar
from agentdb.restore.copies import ACCEPTED
from agentdb.restore.planning import RestoreDecision, RestorePlan, stamp_json, stamp_of
from agentdb.results import RestoreOutcomeName

OUTCOMES: tuple[RestoreOutcomeName, ...] = get_args(RestoreOutcomeName)
VERSION = 1  # the JSON document's version (bumped when a field changes meaning or goes away)


@dataclass
class RestoreOutcome:
    """What restoring one session did (or, in a dry run, would do)."""

    session_id: str
    outcome: RestoreOutcomeName
    path: str  # the session file
    reason: str | None = None  # the first refusal's code (refused/failed), else None
    reasons: list[dict[str, str]] = field(default_factory=list)  # every {code, message}
    copy: str | None = None  # the copy restored (or that would be)
    pre_restore_path: str | None = None  # where the previous file went (None: there was none)
    pre_restore_sidecars: list[str] = field(default_factory=list)  # its -wal/-journal, kept
    lost_events: list[list[int]] | None = field(default_factory=list)  # [first, last] ranges
    lost_rows: dict[str, int] = field(default_factory=dict)  # table -> rows only the old file had
    forced: bool = False  # --force overrode would_lose_events or damaged
    rejected_copies: list[dict[str, str]] = field(default_factory=list)  # {path, why}
    notes: list[str] = field(default_factory=list)
    # how the current file was compared with the copy: proof (chain heads, design §11) or rows
    # (None: not compared, e.g. a missing file)
    decided_by: str | None = None

    def log_entry(self, event: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "event": event,
            "job": "restore",
            "outcome": self.outcome,
            "path": self.path,
            "copy": self.copy,
            "pre_restore_path": self.pre_restore_path,
            "lost_events": self.lost_events,
            "lost_rows": self.lost_rows,
            "forced": self.forced,
            **(extra or {}),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "outcome": self.outcome,
            "reason": self.reason,
            "reasons": self.reasons,
            "path": self.path,
            "copy": self.copy,
            "pre_restore_path": self.pre_restore_path,
            "pre_restore_sidecars": self.pre_restore_sidecars,
            "lost_events": self.lost_events,
            "lost_rows": self.lost_rows,
            "forced": self.forced,
            "rejected_copies": self.rejected_copies,
            "notes": self.notes,
            "decided_by": self.decided_by,
        }


@dataclass
class RestoreResult:
    """Every session's outcome, in the order asked."""

    dry_run: bool  # True: nothing was changed
    from_dir: Path | None  # the backup folder
    sessions: list[RestoreOutcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.outcome in ("restored", "unchanged") for s in self.sessions)

    def summary(self) -> dict[str, Any]:
        counts: dict[str, Any] = dict.fromkeys(OUTCOMES, 0)
        reasons: dict[str, int] = {}
        for s in self.sessions:
            counts[s.outcome] += 1
            if s.reason:
                reasons[s.reason] = reasons.get(s.reason, 0) + 1
        return {"total": len(self.sessions), **counts, "reasons": dict(sorted(reasons.items()))}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "dry_run": self.dry_run,
            "from": None if self.from_dir is None else str(self.from_dir),
            "sessions": [s.to_json() for s in self.sessions],
            "summary": self.summary(),
        }


_AS_OUTCOME: dict[str, RestoreOutcomeName] = {"restore": "restored", "unchanged": "unchanged"}


def _outcome(plan: RestorePlan, d: RestoreDecision) -> RestoreOutcome:
    """The decision as an outcome, before anything is done."""
    out = RestoreOutcome(
        d.session_id,
        _AS_OUTCOME.get(d.action, "refused"),
        str(paths.session_path(plan.sessions_dir, d.session_id)),
        copy=None if d.copy is None else str(d.copy.path),
        lost_events=None if d.lost_events is None else [list(r) for r in d.lost_events],
        lost_rows=dict(d.lost_rows),
        forced=d.forced,
        rejected_copies=[{"path": p, "why": w} for p, w in d.rejected],
        notes=list(d.notes),
        decided_by=d.decided_by,
    )
    out.reasons = [{"code": r.code, "message": r.message} for r in d.reasons]
    out.reason = d.reasons[0].code if d.reasons else None
    if d.resume is not None:
        pre = d.resume.get("pre_restore_path")
        out.pre_restore_path = pre if isinstance(pre, str) else None
    return out


def dry_run(plan: RestorePlan) -> RestoreResult:
    """The plan as a result that changed nothing (``pre_restore_path``: the name it would get)."""
    result = RestoreResult(True, plan.from_dir)
    for d in plan.decisions:
        out = _outcome(plan, d)
        if d.action == "restore" and out.pre_restore_path is None and d.stamp[0] is not None:
            main = paths.session_path(plan.sessions_dir, d.session_id)
            out.pre_restore_path = str(swap.next_kept_name(main, "pre-restore"))
        result.sessions.append(out)
    return result


class _Changed(Exception):
    pass


def execute(
    plan: RestorePlan, progress: Callable[[int, int, str], None] | None = None
) -> RestoreResult:
    """Restore every session the plan decided to restore; re-check each under its lock;
    ``progress(done, total, session_id)`` after each."""
    result = RestoreResult(False, plan.from_dir)
    for d in plan.decisions:
        out = _outcome(plan, d)
        result.sessions.append(out)
        if progress is not None:
            progress(len(result.sessions) - 1, len(plan.decisions), d.session_id)
        if d.action != "restore":
            continue
        main = paths.session_path(plan.sessions_dir, d.session_id)
        try:
            _restore(plan, d, out, main)
        except errors.SessionLive as e:
            _refuse(out, "live", str(e))
        except _Changed as e:
            _refuse(out, "changed", f"{e}; run restore again")
        except (OSError, apsw.Error, errors.AgentdbError) as e:
            out.outcome, out.reason = "failed", "failed"
            msg = getattr(e, "strerror", None) or str(e).splitlines()[0]
            out.reasons = [{"code": "failed", "message": f"{msg}; nothing was replaced"}]
            swap.remove_job_files(main, "restore")
    return result


def _refuse(out: RestoreOutcome, code: str, message: str) -> None:
    out.outcome, out.reason = "refused", code
    out.reasons = [{"code": code, "message": message}]
    out.pre_restore_path = None


def _restore(plan: RestorePlan, d: RestoreDecision, out: RestoreOutcome, main: Path) -> None:
    assert d.copy is not None
    directory = main.parent
    log = plan.recovery_log
    swap.remove_job_files(main, "restore")
    if d.finish:
        out.notes.append("finished an interrupted restore")
        recoverylog.append(log, out.log_entry("outcome"))
        return
    tmp = paths.job_file(main, "restore", "tmp")
    _build(d, tmp)
    faults.point("restore_after_tmp")
    intent = {
        "stamp": stamp_json(d.stamp),
        "copy_stamp": list(d.copy.stamp),
        "tmp": str(tmp),
    }
    if d.stamp[0] is None:
        if any(os.path.lexists(sidecar(main, s)) for s in ("-wal", "-journal")):
            raise _Changed(f"{main.name}-wal or -journal appeared; move it away")
        if locks.probe(main) is not None:
            raise errors.SessionLive(f"{main}: its -shm is in use; retry later", path=main)
        sidecar(main, "-shm").unlink(missing_ok=True)  # an orphan WAL index: rebuildable
        # The copy is held from before it takes the session's name until its outcome line.
        with locks.hold(tmp):
            recoverylog.append(log, out.log_entry("intent", intent))
            faults.point("restore_after_intent")
            try:
                os.link(tmp, main)  # never replaces a session a kernel created meanwhile
            except FileExistsError:
                raise _Changed(f"{main.name} appeared meanwhile; it was left alone") from None
            fsutil.fsync_dir(directory)
            faults.point("restore_after_rename")
            swap.remove_job_files(main, "restore")
            fsutil.fsync_dir(directory)
            recoverylog.append(log, out.log_entry("outcome"))
        return
    # The current file is held while it is swapped; the copy from before it takes the
    # session's name until its outcome line, so nobody opens it halfway.
    with locks.hold(main) as fd, locks.hold(tmp):
        st = os.fstat(fd)
        now = os.lstat(main)
        if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino) or stamp_of(main) != d.stamp:
            raise _Changed(f"{main.name} changed since it was judged; it was left alone")
        pre = _pre_restore_name(main, st, d)
        out.pre_restore_path = str(pre)
        recoverylog.append(log, out.log_entry("intent", intent))
        faults.point("restore_after_intent")
        swap.swap(main, tmp, pre, "restore_")
        out.pre_restore_sidecars = [
            str(sidecar(pre, s)) for s in ("-wal", "-journal") if os.path.lexists(sidecar(pre, s))
        ]
        swap.remove_job_files(main, "restore")
        recoverylog.append(log, out.log_entry("outcome"))


def _pre_restore_name(main: Path, st: os.stat_result, d: RestoreDecision) -> Path:
    """The name the interrupted run chose (if free or already the file), an earlier
    ``.pre-restore`` that already is this file, or the next free one."""
    chosen = d.resume.get("pre_restore_path") if d.resume else None
    if isinstance(chosen, str) and Path(chosen).parent == main.parent:
        p = Path(chosen)
        if paths.KEPT_RE.fullmatch(p.name) and (
            not os.path.lexists(p) or swap.same_bytes(main, p, a_stat=st)
        ):
            return p
    return swap.existing_kept_of(main, st, "pre-restore") or swap.next_kept_name(
        main, "pre-restore"
    )


def _build(d: RestoreDecision, tmp: Path) -> None:
    """The copy, as a WAL-mode 0600 session file at ``tmp``, fsynced and judged by check."""
    assert d.copy is not None
    src_path = d.copy.path
    if stat_key(os.lstat(src_path)) != d.copy.stamp:
        raise _Changed(f"{src_path}: the copy changed since it was verified")
    src = db.open_readonly(src_path)
    try:
        db.backup_to(src, tmp)
    finally:
        src.close()
    try:
        if stat_key(os.lstat(src_path)) != d.copy.stamp:
            raise _Changed(f"{src_path}: the copy changed while it was read")
        conn = db.open_private(tmp)  # our own temporary file: nobody else has it
        try:
            db.configure_writer(conn, tmp)  # WAL, as every session file is
        finally:
            conn.close()  # the last connection: checkpoints and removes the -wal and -shm
        os.chmod(tmp, paths.FILE_MODE)
        fsutil.fsync_file(tmp)
        fsutil.fsync_dir(tmp.parent)
        with open(tmp, "rb") as f:
            header = f.read(20)
        if header[18:20] != b"\x02\x02":
            raise errors.Unreadable(f"{tmp}: could not be switched to WAL mode", path=tmp)
        judged = checks.check_path(tmp, d.session_id, recovered=d.recovered)
        if judged.verdict not in ACCEPTED:
            bad = [f.message for f in judged.findings if f.severity == "error"][:1]
            raise errors.Corrupt(
                f"{src_path}: the restored file fails check ({judged.verdict}: "
                f"{bad[0] if bad else ''}); nothing was replaced",
                path=src_path,
            )
    except BaseException:
        swap.remove_job_files(paths.session_path(tmp.parent, d.session_id), "restore")
        raise
