"""Execute a recovery plan: put the checked replacement in the session's place, crash-safe.

Runs while the caller still holds :func:`agentdb.locks.hold` on the session, after
:func:`agentdb.salvage.planning.plan`. Steps:

1. re-check: the session file and its ``-wal``/``-journal`` are still what the plan read
   (device, inode, size, mtime); otherwise nothing is done (``skipped_live``: run it again);
2. move (or, across file systems, copy) the replacement from the private work directory to
   ``<id>.sqlite.agentdb-recover-tmp`` (0600, exclusive, fsynced; fault point ``after_salvage``);
3. log the intent (the outcome and the ``.corrupt`` name; fault point ``after_intent``): from
   here an interrupted run is finished by the next one;
4. swap (:func:`agentdb.swap.swap`: the original and its sidecars keep their bytes under the
   ``.corrupt`` name, the replacement is renamed into place), then log the outcome. Steps 3
   and 4 hold the replacement's lock as well as the original's: between the rename and the
   outcome line no other process opens the new file, or judges it without that line.

An ``unreadable`` plan only logs its outcome line; a healthy file whose earlier recovery was
interrupted after its swap only gets the missing outcome line.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from agentdb import errors, faults, fsutil, locks, paths, recoverylog, swap
from agentdb.paths import sidecar
from agentdb.salvage.outcome import RecoveryOutcome
from agentdb.salvage.planning import RecoveryPlan


def execute(plan: RecoveryPlan, log: Path) -> RecoveryOutcome:
    """Carry ``plan`` out; see the module docstring."""
    out = plan.outcome
    if plan.finish_log:
        log_outcome(log, out)
        return out
    if out.outcome == "unreadable":
        recoverylog.append(log, out.to_log("outcome"))
        return out
    if out.outcome != "recovered" or plan.scratch is None or plan.snapshot is None:
        return out
    snap = plan.snapshot
    path = snap.path
    if snap.current_stamps() != snap.stamps:
        out.outcome = "skipped_live"
        out.notes.append(f"{path}: changed since it was read; run `agentdb recover` again")
        return out
    target = paths.job_file(path, "recover", "tmp")
    try:
        with out.timed("copy"):
            _place(plan.scratch, target)
    except BaseException:
        swap.remove_job_files(path)
        raise
    faults.point("after_salvage")
    corrupt = snap.interrupted or swap.next_corrupt_name(path)
    out.corrupt_path = str(corrupt)
    # Whatever sidecar is beside the file goes with the original (swap.swap moves it), hot or not,
    # empty or not: the report names each one kept, so nothing leaves without being named.
    if snap.had_wal or _goes_with(path, corrupt, "-wal"):
        out.corrupt_wal = str(sidecar(corrupt, "-wal"))
    if snap.had_journal or _goes_with(path, corrupt, "-journal"):
        out.corrupt_journal = str(sidecar(corrupt, "-journal"))
    # The replacement is held as the original is: once renamed into place, no one opens or
    # judges it before its outcome line (which tells check it is a recovered file) is written.
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(locks.hold(target))
        except BaseException:  # someone has the new file open: nothing was swapped
            swap.remove_job_files(path)
            raise
        recoverylog.append(log, out.to_log("intent"))
        out.swap_started = True
        faults.point("after_intent")
        with out.timed("swap"):
            swap.swap(path, target, corrupt)
        out.swap_started = False
        log_outcome(log, out)
    return out


def _goes_with(path: Path, corrupt: Path, suffix: str) -> bool:
    """The swap keeps ``path``'s sidecar as ``corrupt``'s (or an interrupted swap already did)."""
    return sidecar(path, suffix).exists() or sidecar(corrupt, suffix).exists()


def _place(replacement: Path, target: Path) -> None:
    """Give the checked replacement the name ``target`` beside the session, durably: moved
    (renamed: no second write of the file, one name only) when the work directory is on the
    same file system, else copied (0600, exclusive); fsynced either way."""
    try:
        if os.lstat(target).st_mode:
            raise FileExistsError(errno.EEXIST, "exists", str(target))
    except FileNotFoundError:
        pass
    try:
        os.rename(replacement, target)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        fsutil.copy_regular(replacement, target)
    else:
        fsutil.fsync_file(target)
    fsutil.fsync_dir(target.parent)


def log_outcome(log: Path, out: RecoveryOutcome) -> None:
    """The outcome line of a finished swap; the swap stands even if the line cannot be written."""
    try:
        recoverylog.append(log, out.to_log("outcome"))
    except (OSError, errors.AgentdbError) as e:
        failure = fsutil.os_error(e) if isinstance(e, OSError) else e
        out.notes.append(f"recovered, but its outcome line is not in the recovery log: {failure}")
