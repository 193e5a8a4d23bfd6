"""Recovery: salvage damaged sessions into replacements, keep the originals, lose nothing
salvageable.

:func:`recover_session` is the one routine behind ``agentdb recover`` and the kernel's automatic
attempt (:mod:`agentdb.kernel`). Like :mod:`agentdb.prune`, it plans, then executes:

1. refuse what must not be touched (a symlink or non-regular file, insecure modes, a session
   another process has open, an unwritable recovery log);
2. under :func:`agentdb.locks.hold` (no SQLite connection can open the session until it is done)
   and in a private work directory outside the sessions directory (0700, removed when the job
   ends, by error or Ctrl-C too): :func:`planning.plan` snapshots the session, diagnoses the
   copy (foreign and too-new files are refused, healthy ones left alone), runs the engines —
   rows through SQLite stepping around damage (:mod:`.rows`), every page and committed WAL
   frame by the file format (:mod:`.pages`), free space (:mod:`.freespace`), SQLite's own
   recovery extension when gaps remain (:mod:`.shell`) — merges them by primary key
   (:mod:`.merge`) and builds the replacement there, checked once by ``agentdb check``'s judge.
   The replacement's revision is never below the original's; at revision 3 salvaged rows keep
   their stored hashes, breaks are recorded as gap rows and the head is computed from the walk
   (:mod:`.replacement`, :mod:`.chainrows`; design §6), and the full chain walk must prove it.
   The :class:`RecoveryPlan` holds the outcome (counts with verification levels, losses,
   notes), the stamps of what was read and the replacement's path. ``--dry-run`` stops here;
3. :func:`execution.execute` re-checks the files under the lock, copies the replacement beside
   the original, logs the intent, swaps (:mod:`agentdb.swap`) and logs the outcome.

Nothing salvageable at all: the original is untouched and the outcome is ``unreadable``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentdb import db, errors, fsutil, locks, paths, recoverylog
from agentdb.salvage.outcome import OUTCOMES, Outcome, RecoveryOutcome, RecoveryReport
from agentdb.salvage.planning import RecoveryPlan, plan

if TYPE_CHECKING:  # imported when a job executes: `recover --dry-run` never needs it
    from agentdb.salvage.execution import execute

__all__ = [
    "OUTCOMES",
    "Outcome",
    "RecoveryOutcome",
    "RecoveryPlan",
    "RecoveryReport",
    "execute",
    "plan",
    "recover_session",
    "recover_sessions",
]


def __getattr__(name: str) -> Any:
    """``salvage.execute``, imported on first use (with the swap protocol it runs)."""
    if name == "execute":
        from agentdb.salvage.execution import execute

        return execute
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def recover_sessions(
    sessions_dir: Path,
    session_ids: Iterable[str] | None = None,
    *,
    dry_run: bool = False,
    recovery_log: Path | None = None,
    wait: float | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> RecoveryReport:
    """Recover the given sessions (None: every ``<ULID>.sqlite`` entry in the directory);
    ``progress(done, total, session_id)`` is called after each."""
    if session_ids is None:
        ids = [e.session_id for e in paths.iter_session_entries(sessions_dir)]
    else:
        ids = [paths.validate_id(s) for s in session_ids]
    report = RecoveryReport(dry_run=dry_run)
    try:
        for sid in ids:
            report.sessions.append(
                recover_session(
                    sessions_dir,
                    sid,
                    dry_run=dry_run,
                    recovery_log=recovery_log,
                    wait=wait,
                )
            )
            if progress is not None:
                progress(len(report.sessions), len(ids), sid)
    except KeyboardInterrupt:  # the session in hand is as a killed recover leaves it
        report.interrupted = True
    return report


def recover_session(
    sessions_dir: Path,
    session_id: str,
    *,
    dry_run: bool = False,
    recovery_log: Path | None = None,
    wait: float | None = None,
    target_revision: int | None = None,
) -> RecoveryOutcome:
    """Recover one session if it is damaged; see the module docstring. With ``wait``
    (seconds), a session someone has open is waited for that long before it is skipped.
    ``target_revision``: the replacement's schema revision (default: the current one, or the
    original's when that is newer; never below the original's)."""
    path = paths.session_path(sessions_dir, session_id)
    log = recovery_log or paths.recovery_log_path(sessions_dir)
    out = RecoveryOutcome(session_id, "refused", str(path), dry_run=dry_run)
    refusal = _refusal(path, log, dry_run)
    if refusal is not None:
        out.notes.append(refusal)
        return out
    holder = locks.probe(path) if wait is None else locks.wait_free(path, wait)
    if holder is not None:
        out.outcome = "skipped_live"
        who = f"pid {holder.pid}" if holder.pid else "another agentdb job"
        out.notes.append(f"{path}: open by {who}; recover it when the session is closed")
        return out
    try:
        with locks.hold_waiting(path, wait or 0.0) as fd:
            if not dry_run:
                from agentdb import swap

                swap.remove_job_files(path)
            with fsutil.private_workdir("agentdb-recover-") as work:
                p = plan(path, session_id, fd, work, log, target=target_revision)
                p.outcome.dry_run = dry_run
                if dry_run:
                    if p.outcome.outcome == "recovered" and not p.finish_log:
                        p.outcome.notes.append("dry run: nothing was changed")
                    return p.outcome
                out = p.outcome
                from agentdb.salvage.execution import execute

                return execute(p, log)
    except errors.SessionLive as e:
        out.outcome = "skipped_live"
        out.notes.append(str(e))
        return out
    except (OSError, errors.AgentdbError) as e:
        return _failed(out, path, e, dry_run)


def _refusal(path: Path, log: Path, dry_run: bool) -> str | None:
    """Why the session must not be touched at all, checked before anything is locked."""
    try:
        db.require_regular(path)
        db.require_secure(path)
    except errors.AgentdbError as e:
        return str(e)
    if not dry_run:
        try:
            recoverylog.require_writable(log)  # before anything is written or locked
        except errors.AgentdbError as e:
            return f"{e}; not recovered"
    return None


def _failed(
    out: RecoveryOutcome, path: Path, e: OSError | errors.AgentdbError, dry_run: bool
) -> RecoveryOutcome:
    """The system refused a read or write (no space, file too large, permission, read-only, I/O
    error), or something not a regular file sits where agentdb writes: nothing of this run stays
    behind. A swap the intent line already announced is finished by the next run (its steps are
    idempotent); before that line the session is as it was."""
    failure = fsutil.os_error(e) if isinstance(e, OSError) else e
    out.error = failure
    if not dry_run:
        from agentdb import swap

        with contextlib.suppress(OSError):  # the system may refuse this too (EROFS, EIO)
            swap.remove_job_files(path)
    out.outcome = "failed"
    if out.swap_started:
        out.notes.append(
            f"{failure}; the swap was interrupted — run `agentdb recover {out.session_id}` "
            "again to finish it"
        )
    else:
        out.corrupt_path = out.corrupt_wal = None
        out.notes.append(f"{failure}; the session is unchanged")
    return out
