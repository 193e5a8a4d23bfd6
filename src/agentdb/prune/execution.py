"""``prune.execute``: remove what a plan decided, crash-safely, one session at a time.

Per session, under ``locks.hold`` (no SQLite connection can open the file meanwhile):

0. before any removal, walk the directory again and read every staying file's parent link from
   the file (never from the session index: a row may lie though the file's identity is the
   one it was read at): a session that names a removal as its parent keeps it
   (``has_children``);
1. re-take the stamp from a fresh ``fstat``/``lstat``: the main file and its WAL must be the
   very files the plan judged (inode, size, mtime), and nobody may have it open; otherwise it
   stays (``changed`` / ``live``). Still under the lock, ``quick_check`` it as it is now (the
   check the plan would have run): a file damaged since the plan stays (``unreadable``) unless
   its id was named with ``--include-damaged``. A file whose identity changed though its
   stamp did not (an in-place write with its mtime set back: the ctime moved), or was not
   settled when the plan began (written within the file system's timestamp granularity, so a
   later same-size write could leave every field equal), has its status read again and stays
   (``changed``) unless it is still the planned one;
2. write ``<id>.sqlite.agentdb-prune-intent`` (fsync, fsync the directory);
3. unlink ``<id>.sqlite`` and fsync the directory: the session vanishes at one instant; if the
   inode has no other name, truncate it through the locked descriptor, so a process that opened
   the name just before cannot write into a ghost;
4. unlink ``-wal``, ``-shm``, ``-journal`` (and, with ``--include-damaged``, the ``.corrupt``
   copies), fsync the directory; log a ``pruned`` outcome line to the recovery log; then remove
   the intent file.

A run killed anywhere leaves the intent file; the next prune run finishes that removal (after
checking the session is still as planned) and ``agentdb check`` reports it as a job leftover.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentdb import errors, faults, fsutil, index, locks, paths, recoverylog
from agentdb.paths import FILE_MODE
from agentdb.prune.decisions import PruneDecision, PrunePlan, Reason, Rows, VersionUse
from agentdb.prune.scan import (
    INTENT,
    Stamp,
    intent_bytes,
    parent_in_file,
    quick_problem,
    read_intent,
    stat_key,
    status_held,
)
from agentdb.results import PruneReasonCode
from agentdb.schema.enums import RUNNING


@dataclass
class PruneResult:
    """What a prune run did, and for a dry run (or an unconfirmed run) what it would do.

    ``removed``, ``freed_bytes`` and ``files`` are only ever what was actually removed: a dry
    run reports its plan in the ``would_*`` fields, so a script reading ``removed`` is never
    misled.

    A dry run's per-session fields are :class:`~agentdb.prune.decisions.Rows`, read from the
    plan's scratch database as they are iterated (in session id order, never all at once), so
    the plan must be open while it is read; an execute's are lists.
    """

    dry_run: bool  # True: nothing was changed (--dry-run, or no confirmation)
    removed: Sequence[str] = field(default_factory=list)  # session ids removed (none: dry run)
    refused: Sequence[PruneDecision] = field(default_factory=list)  # kept, with reasons
    freed_bytes: int = 0  # bytes removed
    files: Sequence[str] = field(default_factory=list)  # names removed from the sessions dir
    would_remove: Sequence[str] = field(default_factory=list)  # dry run: ids it would remove
    would_free_bytes: int = 0  # dry run: bytes the plan would free
    would_remove_files: Sequence[str] = field(default_factory=list)  # dry run: names it would
    # cached plugin versions the selected sessions reference, counted after this run
    versions: list[VersionUse] = field(default_factory=list)
    include_pinned: bool = False  # --include-pinned was given
    unknown_references: int = 0  # sessions that stay whose references could not be read
    interrupted: bool = False  # Ctrl-C stopped the run: only the sessions before it are here

    @property
    def by_reason(self) -> dict[str, int]:
        """Refused sessions per reason code (a session with two reasons counts under both)."""
        if isinstance(self.refused, Rows):  # a plan's decisions do not change: counted once
            cached = self.__dict__.get("_by_reason")
            if cached is not None and cached[0] is self.refused:
                return dict(cached[1])
        counts: dict[str, int] = {}
        for d in self.refused:
            for code in dict.fromkeys(r.code for r in d.reasons):
                counts[code] = counts.get(code, 0) + 1
        out = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        if isinstance(self.refused, Rows):
            self.__dict__["_by_reason"] = (self.refused, out)
        return dict(out)

    @property
    def unreferenced(self) -> list[VersionUse]:
        """Versions this run left (or would leave) without any referencing session."""
        return [v for v in self.versions if v.unreferenced_after]

    def summary(self) -> dict[str, object]:
        ids = self.would_remove if self.dry_run else self.removed
        return {
            "selected": len(ids) + len(self.refused),
            "removed": len(self.removed),
            "would_remove": len(self.would_remove),
            "refused": len(self.refused),
            "reasons": self.by_reason,  # refused sessions per reason code
            "freed_bytes": self.freed_bytes,
            "would_free_bytes": self.would_free_bytes,
            "pinned_versions": len(self.versions),
            "unreferenced_versions": len(self.unreferenced),
        }

    def to_json(self) -> dict[str, object]:
        return {k: list(v) if isinstance(v, Iterator) else v for k, v in self.json_parts().items()}

    def json_parts(self) -> dict[str, object]:
        """:meth:`to_json` with each per-session list as an iterator, for a renderer that
        writes a document as it goes (one refusal's dict at a time, never all of them)."""
        return {
            "version": 1,
            "dry_run": self.dry_run,
            "confirmed": not self.dry_run,
            "removed": iter(self.removed),
            "would_remove": iter(self.would_remove),
            "refused": (
                {
                    "session_id": d.session_id,
                    "reasons": [{"code": r.code, "message": r.message} for r in d.reasons],
                }
                for d in self.refused
            ),
            "freed_bytes": self.freed_bytes,
            "would_free_bytes": self.would_free_bytes,
            "files": iter(self.files),
            "would_remove_files": iter(self.would_remove_files),
            "include_pinned": self.include_pinned,
            "pinned_versions": [v.to_json() for v in self.versions],
            "unreferenced_versions": [v.to_json() for v in self.unreferenced],
            "unknown_references": self.unknown_references,
            "summary": self.summary(),
            "interrupted": self.interrupted,
        }


def dry_run(plan: PrunePlan) -> PruneResult:
    """The plan as a result that changed nothing (its lists read from the plan as iterated)."""
    return PruneResult(
        True,
        refused=plan.refusals,
        would_remove=plan.removal_ids,
        would_free_bytes=plan.bytes,
        would_remove_files=plan.removal_files,
        versions=plan.version_uses(),
        include_pinned=plan.include_pinned,
        unknown_references=plan.unknown_count(),
    )


class _Changed(Exception):
    pass


class _Damaged(Exception):
    pass


def execute(
    plan: PrunePlan, progress: Callable[[int, int, str], None] | None = None
) -> PruneResult:
    """Remove every session the plan decided to remove; re-judge each under its lock;
    ``progress(done, total, session_id)`` as each candidate is taken up."""
    faults.point("after_plan")
    result = _Executed(False)
    try:
        _execute(plan, result, progress)
    except KeyboardInterrupt:  # the session in hand has its intent: the next run finishes it
        result.interrupted = True
    result.versions = plan.version_uses(result.removed)
    result.include_pinned = plan.include_pinned
    result.unknown_references = plan.unknown_count(result.removed)
    return result


def _named_as_parent(plan: PrunePlan) -> dict[str, list[str]]:
    """Removals that a session staying now names as its parent: the parent link read again
    from every file there now, never taken from the plan's index rows (a row may lie though
    the file's identity is the one it was read at: nothing is removed on an index row's
    word), and the plan's own answer too (a file that cannot be read now)."""
    removing = set(plan.removal_ids)
    if not removing:
        return {}
    named: dict[str, list[str]] = {}
    for s in index.stat.seen_all(plan.sessions_dir):
        sid = s.entry.session_id
        if sid in removing:
            continue
        parent = parent_in_file(s.entry.path)
        if parent is None:
            _, parent = plan.planned_parent(sid)
        if parent in removing:
            named.setdefault(str(parent), []).append(sid)
    return named


@dataclass
class _Executed(PruneResult):
    """What an execute did: lists, as it goes (an interrupted run reports what it did)."""

    removed: list[str] = field(default_factory=list)
    refused: list[PruneDecision] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def _execute(
    plan: PrunePlan, result: _Executed, progress: Callable[[int, int, str], None] | None
) -> None:
    sessions_dir = plan.sessions_dir
    named = _named_as_parent(plan)
    total = len(plan.candidates) if progress is not None else 0
    for done, d in enumerate(plan.candidates):
        if progress is not None:
            progress(done, total, d.session_id)
        if d.remove and d.session_id in named:
            kids = named[d.session_id]
            shown = ", ".join(kids[:3]) + (f" and {len(kids) - 3} more" if len(kids) > 3 else "")
            result.refused.append(
                _refused(d, "has_children", f"named as parent by sessions that stay: {shown}")
            )
            continue
        if not d.remove:
            result.refused.append(d)
            main = paths.session_path(sessions_dir, d.session_id)
            # The session stays, or the old decision was cut short: forget it.
            if d.resume and (os.path.lexists(main) or read_intent(sessions_dir, d.session_id).cut):
                _unlink(sessions_dir / (paths.session_filename(d.session_id) + INTENT))
                fsutil.fsync_dir(sessions_dir)
            continue
        try:
            freed, names = _remove(sessions_dir, d, plan.wait, plan)
        except _Damaged as e:
            result.refused.append(
                _refused(
                    d,
                    "unreadable",
                    f"damaged since the plan ({e}); name it with --include-damaged to remove it",
                )
            )
            continue
        except errors.SessionLive as e:
            result.refused.append(_refused(d, "live", e.detail))
            continue
        except _Changed as e:
            result.refused.append(_refused(d, "changed", str(e)))
            continue
        except errors.FileSystemError as e:  # the system refused opening it to lock
            result.refused.append(_refused(d, "failed", f"{e}; run prune again"))
            continue
        except OSError as e:
            failure = fsutil.os_error(e)  # names the file: the intent, the session or a sidecar
            result.refused.append(_refused(d, "failed", f"{failure}; run prune again"))
            continue
        result.removed.append(d.session_id)
        result.freed_bytes += freed
        result.files += names


def _judge_held(plan: PrunePlan, d: PruneDecision, main: Path) -> None:
    """The last checks, under the session's lock: ``quick_check`` (unless --include-damaged),
    and, for a file whose identity changed since the plan's walk (ctime, sidecars) or was not
    settled then, its status read again: it must still be the planned one."""
    sid = d.session_id
    if not d.damaged:
        problem = quick_problem(main, held=True)
        if problem is not None:
            raise _Damaged(problem)
    listed, key = plan.planned_identity(sid)
    changed = listed and index.stat.seen(paths.Entry(sid, main)).key != key
    candidate, planned = plan.planned_status(sid)
    if (changed or plan.is_racy(sid)) and candidate:
        status = status_held(main)
        if status != planned or status == RUNNING:
            raise _Changed(
                f"changed since the plan was made (status now {status or 'unreadable'}); it "
                "stays, run prune again"
            )


def _refused(d: PruneDecision, code: PruneReasonCode, message: str) -> PruneDecision:
    return PruneDecision(d.session_id, False, [Reason(code, message)], d.bytes, d.files)


def _remove(
    sessions_dir: Path, d: PruneDecision, plan_wait: float = 0.0, plan: PrunePlan | None = None
) -> tuple[int, list[str]]:
    main = paths.session_path(sessions_dir, d.session_id)
    intent = sessions_dir / (paths.session_filename(d.session_id) + INTENT)
    planned = d.stamp or Stamp(None, None)
    try:
        st = os.lstat(main)
    except FileNotFoundError:
        st = None
    freed = 0
    names: list[str] = []
    if st is not None and stat.S_ISREG(st.st_mode):
        with locks.hold_waiting(main, plan_wait) as fd:
            now = Stamp(stat_key(os.fstat(fd)), _key(sessions_dir / f"{main.name}-wal"))
            if now != planned:
                raise _Changed("changed since the plan was made; it stays, run prune again")
            if plan is not None and not d.resume:
                _judge_held(plan, d, main)
            _write_intent(intent, d, planned, held=True)
            faults.point("after_intent")
            if stat_key(os.lstat(main)) != now.main:  # the name still names the locked file
                raise _Changed(f"{main.name} was replaced meanwhile; it stays")
            os.unlink(main)
            fsutil.fsync_dir(sessions_dir)
            freed += st.st_size
            names.append(main.name)
            if os.fstat(fd).st_nlink == 0:
                os.ftruncate(fd, 0)  # a racing opener finds an empty file, not the session
            faults.point("after_db_unlink")
            f2, n2 = _unlink_rest(sessions_dir, d)
    else:
        if st is None and planned.main is not None and not d.resume:
            raise _Changed(f"{main.name} disappeared since the plan was made")
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise _Changed(f"{main.name} is a directory; it is never removed")
        holder = locks.probe(main)
        if holder is not None:
            raise errors.SessionLive(problem=f"{holder.file} is open", fix="retry later", path=main)
        _write_intent(intent, d, planned)
        faults.point("after_intent")
        if st is not None:  # a symlink or FIFO named like a session (--include-damaged)
            os.unlink(main)
            fsutil.fsync_dir(sessions_dir)
            names.append(main.name)
        faults.point("after_db_unlink")
        f2, n2 = _unlink_rest(sessions_dir, d)
    freed += f2
    names += n2
    faults.point("after_sidecars")
    # Before the intent goes: a run killed here logs it on resume. `restore --all` reads this
    # line to leave pruned sessions alone unless told --include-pruned.
    recoverylog.append(
        paths.recovery_log_path(sessions_dir),
        {
            "session_id": d.session_id,
            "event": "outcome",
            "job": "prune",
            "outcome": "pruned",
            "files": names,
        },
    )
    _unlink(intent)
    fsutil.fsync_dir(sessions_dir)
    return freed, names


def _key(path: Path) -> tuple[int, int, int] | None:
    try:
        return stat_key(os.lstat(path))
    except FileNotFoundError:
        return None


def _write_intent(intent: Path, d: PruneDecision, planned: Stamp, *, held: bool = False) -> None:
    """Record the decision beside the session before the first unlink (kept on resume).
    ``held``: the caller holds the session's lock, so an intent found cut short (its writer
    was killed before it was whole: nothing was removed) is no other prune's, and is replaced.
    Ctrl-C waits until the intent is whole or gone: it never leaves one cut short."""
    with _sigint_deferred():
        try:
            fd = _create(intent)
            faults.point("intent_created")  # a kill here leaves it empty: cut short
        except FileExistsError:
            if d.resume:
                return
            sid = d.session_id
            if not (held and read_intent(intent.parent, sid).cut):
                raise errors.SessionLive(
                    problem="another prune is removing this session", path=intent
                ) from None
            os.unlink(intent)
            fd = _create(intent)
        try:
            with fsutil.naming(intent):
                os.fchmod(fd, FILE_MODE)
                fsutil.write_all(fd, intent_bytes(d.session_id, planned, d.damaged))
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(intent)  # not written whole: nothing was removed, leave nothing behind
            raise
        os.close(fd)
    fsutil.fsync_dir(intent.parent)


def _create(intent: Path) -> int:
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(intent, flags, FILE_MODE)


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """SIGINT held back (it is delivered when the block ends): Python raises
    ``KeyboardInterrupt`` between any two bytecodes, so without this one arriving just after
    ``os.open`` returns would leave the new file empty and its descriptor lost."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread runs Python's signal handlers
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _unlink_rest(sessions_dir: Path, d: PruneDecision) -> tuple[int, list[str]]:
    """SQLite's sidecars (as they are now) and, if planned, the .corrupt copies."""
    base = paths.session_filename(d.session_id)
    wanted = [base + "-wal", base + "-shm", base + "-journal"]
    if d.damaged:
        wanted += [n for n in d.files if n.startswith(base + ".corrupt")]
    freed = 0
    names = []
    for name in wanted:
        size = _unlink(sessions_dir / name)
        if size is not None:
            freed += size
            names.append(name)
    fsutil.fsync_dir(sessions_dir)
    return freed, names


def _unlink(path: Path) -> int | None:
    """Unlink ``path`` if it is there; its size (0 unless a regular file), or None if absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return None
    try:
        os.unlink(path)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise
    return st.st_size if stat.S_ISREG(st.st_mode) else 0
