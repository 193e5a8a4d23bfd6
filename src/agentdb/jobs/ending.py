"""``agentdb sessions end``: end sessions whose kernel died, so they stop being ``running``.

``plan`` judges each session read-only, with ``check``'s own rules: it must be an ordinary,
healthy session file at the current revision with one name, status ``running``, that nobody has
open. ``execute`` then, per session, under :func:`agentdb.locks.hold` (no SQLite connection, and
no kernel holding the writer's lease, can open the file until it is done):

1. re-checks that the file is the very one judged (inode, size, mtime, its WAL's) with one name;
2. writes an ``intent`` line to the recovery log (fault point ``sessions_end_after_intent``);
3. moves the status with the writer's own code (:meth:`SessionWriter.set_status`: the spec's
   transition rules, ``ended_at`` set, one ``BEGIN IMMEDIATE`` transaction) through a connection
   that takes no lock of its own (:func:`agentdb.db.open_held`); ``sessions_end_in_update``
   fires inside the transaction, ``sessions_end_after_commit`` after it;
4. closes the connection (SQLite checkpoints the WAL into the file and removes it), removes the
   stale ``-shm`` the dead kernel left, and writes the ``outcome`` line
   (``sessions_end_after_write`` comes just before it).

A kill at any instant leaves the status as it was or ended: SQLite's transaction is atomic. A
re-run ends it, or, finding it already ended as asked after a logged intent, writes the outcome
line. Nothing here migrates or recovers a file: those are refused with the command to run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard, get_args

import apsw

from agentdb import checks, db, errors, faults, fsutil, locks, paths, recoverylog
from agentdb.checks import policy
from agentdb.checks.run import read_recovery_index, was_recovered
from agentdb.results import EndOutcomeName
from agentdb.store import SessionReader, SessionWriter, validate_transition

EndStatus = Literal["cancelled", "failed"]  # what an operator may end a dead session as
END_STATUSES: tuple[EndStatus, ...] = get_args(EndStatus)
OUTCOMES: tuple[EndOutcomeName, ...] = get_args(EndOutcomeName)
VERSION = 1  # the JSON document's version
JOB = "sessions-end"


@dataclass
class EndDecision:
    """One session: end it, leave it (already ended as asked), or refuse (reason)."""

    session_id: str
    path: Path  # the session file
    action: str = "refuse"  # end | unchanged | refuse
    reason: str | None = None  # live | missing | unsafe | foreign | too_new | damaged |
    #                             needs_migration | hard_linked | not_running | changed
    message: str = ""  # one line: why, and the fix
    status: str | None = None  # its status as judged
    revision: int | None = None  # its schema revision
    stamp: fsutil.Stamp = (None, None, None)  # the file as judged; execute re-checks it
    finish: bool = False  # an interrupted run ended it: only the outcome line is missing
    ended_at: str | None = None  # when it ended, for a session already ended as asked


@dataclass
class EndPlan:
    sessions_dir: Path
    status: EndStatus  # the status asked for
    recovery_log: Path
    decisions: list[EndDecision] = field(default_factory=list)  # in the order asked


@dataclass
class EndOutcome:
    session_id: str
    outcome: EndOutcomeName
    path: str
    status_before: str | None  # the status found
    status: str | None  # the status now (or, dry run, that it would have)
    ended_at: str | None = None  # set when ended
    reason: str | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "outcome": self.outcome,
            "path": self.path,
            "from": self.status_before,
            "status": self.status,
            "ended_at": self.ended_at,
            "reason": self.reason,
            "message": self.message,
        }


@dataclass
class EndResult:
    dry_run: bool
    status: str
    sessions: list[EndOutcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.outcome in ("ended", "unchanged") for s in self.sessions)

    def summary(self) -> dict[str, Any]:
        counts: dict[str, Any] = dict.fromkeys(OUTCOMES, 0)
        for s in self.sessions:
            counts[s.outcome] += 1
        return {"total": len(self.sessions), **counts}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "dry_run": self.dry_run,
            "status": self.status,
            "sessions": [s.to_json() for s in self.sessions],
            "summary": self.summary(),
        }


def _pending(entries: list[dict[str, Any]]) -> bool:
    mine = [e for e in entries if e.get("job") == JOB]
    return bool(mine) and mine[-1].get("event") == "intent"


def _is_end_status(status: str) -> TypeGuard[EndStatus]:
    return status in END_STATUSES


def plan(
    sessions_dir: Path,
    ids: Sequence[str],
    status: str = "cancelled",
    *,
    recovery_log: Path | None = None,
) -> EndPlan:
    """Judge each session, changing nothing."""
    if not _is_end_status(status):
        raise errors.UsageError(f"--status {status!r}: one of {', '.join(END_STATUSES)}")
    if not ids:
        raise errors.UsageError("give one or more session ids")
    paths.require_sessions_dir(sessions_dir)
    log = recovery_log or paths.recovery_log_path(sessions_dir)
    recovery = read_recovery_index(log)
    result = EndPlan(sessions_dir, status, log)
    for sid in dict.fromkeys(paths.validate_id(i) for i in ids):
        entries = recovery.get(sid, [])
        result.decisions.append(_decide(sessions_dir, sid, status, entries))
    return result


def _decide(
    sessions_dir: Path, sid: str, status: str, entries: list[dict[str, Any]]
) -> EndDecision:
    path = paths.session_path(sessions_dir, sid)
    d = EndDecision(sid, path, stamp=fsutil.stamp_of(path))

    def refuse(code: str, message: str) -> EndDecision:
        d.action, d.reason, d.message = "refuse", code, message
        return d

    holder = locks.probe(path)
    if holder is not None:
        who = f"pid {holder.pid}" if holder.pid else "another process"
        return refuse("live", f"open by {who}: its kernel is running; let it end the session")
    if d.stamp[0] is None and not os.path.lexists(path):
        return refuse("missing", "no such session file; see `agentdb sessions list`")
    judged = checks.check_path(path, sid, recovered=was_recovered(entries))
    d.status, d.revision = judged.status, judged.revision
    if judged.live is not None:
        return refuse("live", "opened by another process while it was judged; retry later")
    decision = policy.decide("end", judged)
    if isinstance(decision, policy.Refuse):
        return refuse(decision.code, decision.message)
    st = os.lstat(path)
    if st.st_nlink > 1:
        return refuse(
            "hard_linked",
            f"has {st.st_nlink} names (hard links), so writing it would change the others too; "
            f"break the link first: `{fsutil.break_link_command(path)}`",
        )
    if d.status == status:
        d.action = "unchanged"
        try:
            with SessionReader(path, session_id=sid) as reader:
                d.ended_at = reader.info().ended_at
        except errors.AgentdbError:
            pass
        d.finish = _pending(entries)
        d.message = "finished an interrupted run" if d.finish else f"already {status}"
        return d
    try:
        validate_transition(str(d.status), status)
    except errors.InvalidInput:
        return refuse(
            "not_running",
            f"status is {d.status}, not running: only a running session is ended",
        )
    if fsutil.stamp_of(path) != d.stamp:
        return refuse("changed", "changed while it was judged; retry")
    d.action = "end"
    return d


def _outcome(d: EndDecision, status: str) -> EndOutcome:
    out = EndOutcome(d.session_id, "refused", str(d.path), d.status, d.status)
    out.reason, out.message = d.reason, d.message
    if d.action == "unchanged":
        out.outcome = "ended" if d.finish else "unchanged"
        out.ended_at = d.ended_at
    elif d.action == "end":
        out.outcome, out.status = "ended", status
    return out


def dry_run(p: EndPlan) -> EndResult:
    return EndResult(True, p.status, [_outcome(d, p.status) for d in p.decisions])


def execute(p: EndPlan) -> EndResult:
    """End every session the plan decided to end; re-check each under its lock."""
    result = EndResult(False, p.status)
    for d in p.decisions:
        out = _outcome(d, p.status)
        result.sessions.append(out)
        if d.action == "unchanged" and d.finish:
            recoverylog.append(p.recovery_log, _entry(d, out, "outcome"))
            continue
        if d.action != "end":
            continue
        try:
            _end(p, d, out)
        except errors.SessionLive as e:
            out.outcome, out.reason, out.message = "refused", "live", str(e)
            out.status = d.status
        except _Changed as e:
            out.outcome, out.reason, out.message = "refused", "changed", f"{e}; retry"
            out.status = d.status
        except (OSError, apsw.Error, errors.AgentdbError) as e:
            out.outcome, out.reason = "failed", "failed"
            out.message = getattr(e, "strerror", None) or str(e).splitlines()[0]
            out.status = d.status
    return result


class _Changed(Exception):
    pass


def _entry(d: EndDecision, out: EndOutcome, event: str) -> dict[str, Any]:
    return {
        "session_id": d.session_id,
        "event": event,
        "job": JOB,
        "outcome": "ended",
        "path": str(d.path),
        "from": d.status,
        "status": out.status,
        "ended_at": out.ended_at,
    }


def _end(p: EndPlan, d: EndDecision, out: EndOutcome) -> None:
    path = d.path
    with locks.hold(path) as fd:
        st, now = os.fstat(fd), os.lstat(path)
        if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino) or fsutil.stamp_of(path) != d.stamp:
            raise _Changed(f"{path}: changed since it was judged; it was left alone")
        if now.st_nlink > 1:
            raise _Changed(f"{path}: got another name (hard link) meanwhile; it was left alone")
        recoverylog.append(p.recovery_log, _entry(d, out, "intent"))
        faults.point("sessions_end_after_intent")
        conn = db.open_held(path)
        try:
            conn.set_update_hook(lambda *_: faults.point("sessions_end_in_update"))
            writer = SessionWriter(conn, path, d.session_id, int(d.revision or 0))
            writer.set_status(p.status)
            conn.set_update_hook(None)
            faults.point("sessions_end_after_commit")
            out.ended_at = writer.info().ended_at
        finally:
            conn.close()  # checkpoints the WAL into the file and removes it
        if not paths.sidecar(path, "-wal").exists():
            # The dead kernel's WAL index describes a WAL that is gone; nobody has it mapped
            # (the hold checked its lock byte). Without it readers open the file immutable.
            paths.sidecar(path, "-shm").unlink(missing_ok=True)
            fsutil.fsync_dir(path.parent)
        faults.point("sessions_end_after_write")
    recoverylog.append(p.recovery_log, _entry(d, out, "outcome"))
