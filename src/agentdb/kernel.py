"""How the kernel opens a session: the spec's open sequence with the automatic recovery attempt.

:func:`open_session` opens through :meth:`SessionWriter.open` with two hooks. :func:`judge_hook`
is ``agentdb check``'s judge (:func:`agentdb.checks.judge`, full level: integrity, content
hashes, invalid text, the WAL and a hot journal), asked before the writer opens the file, so the
kernel calls a file damaged exactly when ``check`` calls it ``corrupt`` or ``unreadable``. On
damage the writer calls :func:`recover_hook`, which runs the same
routine as ``agentdb recover`` (:func:`agentdb.salvage.recover_session`): the original is kept as
``<id>.sqlite.corrupt``, the replacement takes its name, the recovery log gets its lines, and a
warning is logged (never silent). If nothing could be salvaged the file is flagged ``unreadable``
(logged) and :class:`~agentdb.errors.Unreadable` is raised so the kernel moves on.

The writer's lease is taken only after that, so the recovery job never meets its own kernel's
lease. Another writer holding the session (another kernel, or another ``SessionWriter`` in
this process) is :class:`~agentdb.errors.SessionBusy`, raised before any integrity check.
What to do with an error is in its class: :class:`~agentdb.errors.SessionUnusable` — skip the
session —, :class:`~agentdb.errors.Retryable` — try again later.
"""

from __future__ import annotations

import logging
from pathlib import Path

from agentdb import checks, errors, fsutil, locks, paths
from agentdb.checks import policy
from agentdb.salvage import recover_session
from agentdb.store import SessionWriter

log = logging.getLogger("agentdb.kernel")


def open_session(sessions_dir: Path, session_id: str) -> SessionWriter:
    """Open a session for writing, recovering it automatically if it is damaged."""

    def hook(path: Path, sid: str) -> None:
        recover_hook(sessions_dir, sid)

    return SessionWriter.open(sessions_dir, session_id, recover=hook, judge=judge_hook)


def judge_hook(path: Path, session_id: str) -> str | None:
    """None unless ``check`` calls the file ``corrupt`` or ``unreadable``; then one line why.
    A file ``check`` calls ``foreign`` is refused here (:class:`~agentdb.errors.ForeignFile`),
    before the writer opens it: it is never recovered nor migrated, whatever else is wrong with
    it (at revision 3 another session's ``session_meta`` also breaks the chain, which the
    writer's open would take for damage). Other verdicts are the writer's to refuse (too new,
    insecure) or to open (inconsistent, needs_migration)."""
    j = checks.judgement_of(checks.judge(path, session_id), "full")
    if policy.is_foreign(j.verdict):
        raise errors.ForeignFile(
            f"{path}: {j.describe()} (nothing recovered or changed)", path=path
        )
    return j.describe() if j.damaged else None


# How long the kernel's automatic recovery waits for another agentdb job that has the damaged
# file in hand (seconds); a writer holding the lease is refused at once.
JOB_WAIT = 15.0


def recover_hook(sessions_dir: Path, session_id: str) -> None:
    """The kernel's automatic attempt; raises when the session could not be recovered."""
    out = recover_session(sessions_dir, session_id)
    path = paths.session_path(sessions_dir, session_id)
    if out.outcome == "skipped_live":
        holder = locks.probe(path)
        if holder is not None and not holder.lease:
            # A job (``recover --all``, migrate, backup) has the file in hand, not a writer:
            # wait for it, then try once more. When that job recovered the file meanwhile,
            # nothing is left to salvage: the open judges the new file again.
            locks.wait_free(path, JOB_WAIT)
            out = recover_session(sessions_dir, session_id)
            if out.outcome == "healthy":
                return
    if out.outcome == "recovered":
        log.warning(
            "%s: was damaged and has been recovered; the original is kept as %s; "
            "the session's data may be incomplete (see %s)",
            path,
            out.corrupt_path,
            paths.recovery_log_path(sessions_dir),
        )
        return
    if out.outcome == "skipped_live":
        reason = out.notes[-1] if out.notes else f"{path}: open by another process"
        raise errors.SessionBusy(
            f"{reason.rstrip('.')}; not recovered — open it again when it is closed", path=path
        )
    if out.outcome == "healthy":
        # The writer's open refused the file but recover finds no damage to salvage: what is
        # wrong is not damage (check names it), and nothing was changed.
        raise errors.Corrupt(
            f"{path}: the open refused it, but recover finds no damage to salvage; kept as it "
            f"is, see `agentdb check {session_id}`",
            path=path,
        )
    if fsutil.gone(path):  # removed meanwhile (``prune``): nothing left to recover
        raise errors.SessionNotFound(
            f"{path}: removed while it was being opened; nothing was written", path=path
        )
    reason = out.notes[-1] if out.notes else out.outcome
    if out.outcome == "failed":  # the system refused a write (no space, ...)
        log.warning("%s: damaged; recovering it failed (%s)", path, reason)
        # Of the same kind as the cause: a full disk is Retryable, not an unusable session.
        cls = type(out.error) if out.error is not None else errors.FileSystemError
        raise cls(reason, path=path)
    log.warning("%s: damaged and could not be recovered (%s); flagged unreadable", path, reason)
    raise errors.Unreadable(
        f"{path}: damaged and unsalvageable ({out.outcome}); kept as it is, see "
        f"`agentdb check {session_id}`",
        path=path,
    )
