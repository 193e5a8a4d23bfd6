"""``agentdb migrate``: bring session files to the current schema revision ahead of time.

The kernel migrates a file when it opens it; this job does the same for the whole history at
once. Plan, then execute:

* :func:`plan` is read-only. Per file it checks liveness (:func:`agentdb.locks.probe`, takes
  nothing), then opens the file read-only: identity, revision; then ``agentdb check``'s judge
  (:func:`agentdb.checks.judge`). A file check calls corrupt or unreadable is not migrated
  (``agentdb recover`` is the way for it), a newer or foreign one is left untouched.
* :func:`execute` migrates what the plan says needs it. Per file: an online backup through the
  SQLite backup API beside the file (``<id>.sqlite.agentdb-migrate-backup``, 0600, fsynced),
  then every step in one ``BEGIN IMMEDIATE`` transaction (:func:`~agentdb.schema.migrations.
  apply_steps`: ``user_version`` and ``application_id`` set in it, ``foreign_key_check`` and
  ``integrity_check`` before ``COMMIT``, ``ROLLBACK`` otherwise), then a verification of the
  committed file (integrity, identity, schema, no table lost a row). The backup is removed once
  the file is verified, or kept as ``<id>.sqlite.rev<N>.bak`` with ``keep_backups`` or when the
  verification fails. The backup is the operator's safety net, never the undo: a failed
  migration is rolled back by SQLite, and nothing is ever copied over a WAL-mode file.

Killed at any instant, a file is at the old revision or the new one (one transaction), and a
re-run finishes: it redoes the migration, or finds the file current and removes the backup an
interrupted run left (only once the file has passed ``integrity_check``).

Size: over 500 lines because it is one job, plan then execute, with its crash-safe swap and the
checks before and after it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import apsw

from agentdb import db, errors, faults, fsutil, locks, paths, workers
from agentdb.checks import policy
from agentdb.errors import one_line
from agentdb.results import MigrateOutcomeName
from agentdb.schema import chainio
from agentdb.schema.identity import columns_missing, identify, schema_differences
from agentdb.schema.migrations import apply_steps
from agentdb.schema.revisions import CURRENT_REVISION, TABLES

OUTCOMES: tuple[MigrateOutcomeName, ...] = get_args(MigrateOutcomeName)
# Outcomes that mean nothing is wrong; any other makes the command exit 1.
OK_OUTCOMES: tuple[MigrateOutcomeName, ...] = ("migrated", "current")
MIGRATE = "migrate"  # plan action: this file needs the migration
NONE = "none"  # plan action: nothing to do (the item's outcome says why)


@dataclass
class MigrationPlanItem:
    """What :func:`plan` found for one session file, before anything is changed."""

    session_id: str  # the ULID in the file name
    path: Path  # <sessions_dir>/<id>.sqlite
    revision: int | None  # the file's user_version; None when it could not be read
    action: str  # "migrate" or "none"
    outcome: MigrateOutcomeName | None  # for action "none": why nothing is to be done
    live_pid: int | None = None  # who had the file open at plan time (None: nobody, or unknown)
    live: bool = False  # another process had the file open at plan time
    leftover: Path | None = None  # a backup an interrupted migration left beside the file
    message: str = ""  # why, in one line (empty when there is nothing to say)


@dataclass
class MigrationOutcome:
    """What happened to one session file."""

    session_id: str  # the ULID in the file name
    from_: int | None  # revision before (None when unreadable); JSON key "from"
    to: int | None  # revision after (equal to from_ when nothing changed)
    outcome: MigrateOutcomeName
    backup_path: Path | None = None  # a backup kept for the operator (--keep-backups, failures)
    message: str = ""  # one line: what was done or why not, and what to do
    seconds: float = 0.0  # wall time spent on this file

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "from": self.from_,
            "to": self.to,
            "outcome": self.outcome,
            "backup_path": str(self.backup_path) if self.backup_path else None,
            "message": self.message,
            "seconds": round(self.seconds, 6),
        }


@dataclass
class MigrationReport:
    """Every file's outcome, in id order."""

    target: int  # the revision files were brought to
    dry_run: bool  # True: nothing was changed; "migrated" means "would be migrated"
    sessions: list[MigrationOutcome] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C stopped the run: only the sessions before it are here

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        for s in self.sessions:
            counts[s.outcome] += 1
        return counts

    @property
    def ok(self) -> bool:
        return all(s.outcome in OK_OUTCOMES for s in self.sessions)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "dry_run": self.dry_run,
            "target": self.target,
            "sessions": [s.to_json() for s in self.sessions],
            "summary": self.summary(),
        }


# Called after each file with its outcome, how many files are done, and how many there are.
Progress = Callable[[MigrationOutcome, int, int], None]


# ------------------------------------------------------------------------------------ plan


def backup_file(path: Path) -> Path:
    """Where a migration keeps its backup while it works (a job file: check reports leftovers)."""
    return paths.job_file(path, "migrate", "backup")


def kept_backup_name(path: Path, revision: int) -> Path:
    """The first free ``<id>.sqlite.rev<N>.bak[.k]`` beside ``path``: a backup kept for good."""
    base = path.with_name(f"{path.name}.rev{revision}.bak")
    candidate, k = base, 0
    while os.path.lexists(candidate):
        k += 1
        candidate = base.with_name(f"{base.name}.{k}")
    return candidate


def _targets(sessions_dir: Path, ids: Sequence[str] | None) -> list[tuple[str, Path]]:
    if ids is None:
        return [(e.session_id, e.path) for e in paths.iter_session_entries(sessions_dir)]
    return [(sid, paths.session_path(sessions_dir, sid)) for sid in dict.fromkeys(ids)]


def probe(session_id: str, path: Path) -> MigrationPlanItem:
    """Look at one file read-only and say what migrating it means. Changes nothing.

    A session file is judged by ``agentdb check``'s own judge (full level): one that check calls
    corrupt or unreadable (integrity, a content hash or a TEXT value that fails, a row SQLite
    cannot read, its WAL) is ``corrupt``, whatever its revision, and never migrated: a migration
    would bless damaged rows with fresh hashes.
    """
    item = _probe(session_id, path)
    if item.action == MIGRATE or item.outcome == "current":
        _judge(item)  # once the probe's connection is closed
    return item


def _judge(item: MigrationPlanItem) -> None:
    from agentdb import checks  # the one judge of damage (a job beside this one)

    recovered = _was_recovered(item.path.parent, item.session_id)
    j = checks.judgement_of(checks.judge(item.path, item.session_id, recovered=recovered), "full")
    if policy.is_foreign(j.verdict):  # e.g. another session's file under this name
        item.action, item.outcome = NONE, "foreign"
        item.message = f"{item.path}: {j.describe()}; left untouched"
    elif j.damaged:
        item.action = NONE
        item.outcome = "corrupt"
        item.message = f"{item.path}: {j.describe()}; not migrated"
    elif policy.is_inconsistent(j.verdict) and item.action == MIGRATE:
        # the tables disagree: a migration would carry that forward under fresh hashes
        item.action = NONE
        item.outcome = "failed"
        item.message = (
            f"{item.path}: {j.describe()}; not migrated — inspect it with "
            f"`agentdb check {item.session_id}`"
        )


_RECOVERY: tuple[tuple[str, int, int], dict[str, list[dict[str, Any]]]] | None = None


def _was_recovered(sessions_dir: Path, session_id: str) -> bool:
    """Whether the recovery log records a salvage of the session (its orphan rows are then
    expected, as ``check`` judges them); the log is read once per run, again if it changes."""
    global _RECOVERY
    from agentdb.checks.run import read_recovery_index, was_recovered

    log = paths.recovery_log_path(sessions_dir)
    try:
        st = os.stat(log)
        key = (str(log), st.st_mtime_ns, st.st_size)
        if _RECOVERY is None or _RECOVERY[0] != key:
            _RECOVERY = (key, read_recovery_index(log))
    except (OSError, errors.AgentdbError):
        return False
    return was_recovered(_RECOVERY[1].get(session_id, []))


def _probe(session_id: str, path: Path) -> MigrationPlanItem:
    leftover = backup_file(path)
    item = MigrationPlanItem(
        session_id, path, None, NONE, None, leftover=leftover if leftover.exists() else None
    )
    # Liveness first, with no SQLite connection to the file open in this process: POSIX locks
    # are per process, and closing any descriptor of a file drops all of them.
    holder = locks.probe(path) if path.exists() else None
    item.live = holder is not None
    item.live_pid = holder.pid if holder else None
    linked = fsutil.hard_link_problem(path)
    if linked is not None:
        item.outcome = "failed"
        item.message = f"{linked}; not migrated"
        _judge(item)  # a damaged file's step comes first (recover replaces it, links and all)
        return item
    try:
        conn = db.open_readonly(path)
    except errors.AgentdbError as e:
        return _refused(item, e)
    try:
        with db.translated(path):
            ident = identify(conn)
            item.revision = ident.user_version
            if ident.kind in ("foreign", "empty"):
                item.outcome = "foreign"
                why = ident.problem or "an empty file"
                item.message = f"{path}: {why}; not a session file, left untouched"
                return item
            if ident.kind == "too_new":
                item.outcome = "too_new"
                item.message = f"{path}: {ident.problem}; left untouched — upgrade agentdb"
                return item
            if ident.user_version >= CURRENT_REVISION:
                item.outcome = "current"
                return item
            diffs = schema_differences(conn, ident.user_version)
            if diffs:
                gaps = columns_missing(conn, ident.user_version)
                if gaps:  # damaged CREATE text, as check judges it (schema_columns_missing)
                    item.outcome = "corrupt"
                    item.message = (
                        f"{path}: the schema lacks what revision {ident.user_version} names "
                        f"({gaps[0]}); not migrated"
                    )
                    conn.close()
                    _judge(item)  # ...and the policy's step
                    return item
                item.outcome = "failed"
                item.message = (
                    f"{path}: tables do not match revision {ident.user_version} ({diffs[0]}); "
                    "not migrated — inspect it with `agentdb check`"
                )
                return item
            item.action = MIGRATE
            if item.live:
                who = f" by pid {item.live_pid}" if item.live_pid else ""
                item.message = f"{path}: open{who}"
            return item
    except errors.AgentdbError as e:
        return _refused(item, e)
    finally:
        conn.close()


def _refused(item: MigrationPlanItem, e: errors.AgentdbError) -> MigrationPlanItem:
    item.action = NONE
    if isinstance(e, errors.Corrupt | errors.Unreadable):
        item.outcome = "corrupt"
        item.message = f"{e}; not migrated"
        _judge(item)  # check's verdict, and the policy's step (recover, or a final decision)
    elif isinstance(e, errors.ForeignFile):
        item.outcome = "foreign"
        item.message = str(e)
    else:
        item.outcome = "failed"
        item.message = str(e)
    return item


def plan(sessions_dir: Path, ids: Sequence[str] | None = None) -> list[MigrationPlanItem]:
    """What migrating ``ids`` (None: every session) would do. Read-only."""
    return [probe(sid, path) for sid, path in _targets(sessions_dir, ids)]


# ------------------------------------------------------------------------------------ execute


def _counts(conn: apsw.Connection) -> dict[str, int]:
    out = {}
    for t in TABLES:
        row = conn.execute(f"SELECT count(*) FROM {t}").fetchone()
        out[t] = int(row[0]) if row else 0
    return out


def _verify(conn: apsw.Connection, path: Path, before: dict[str, int]) -> None:
    """The committed file is a healthy current-revision session with every row it had."""
    problems = db.integrity_problems(conn, limit=3)
    if problems:
        raise errors.MigrationFailed(
            f"{path}: integrity_check after migration: {one_line(problems[0])}"
        )
    ident = identify(conn)
    if ident.kind != "session" or ident.user_version != CURRENT_REVISION:
        raise errors.MigrationFailed(f"{path}: after migration identifies as {ident}")
    diffs = schema_differences(conn, CURRENT_REVISION)
    if diffs:
        raise errors.MigrationFailed(f"{path}: after migration: {diffs[0]}")
    if CURRENT_REVISION >= 3:  # every row's hash, every link, the head (design §10)
        report = chainio.verify_full(conn)
        if not report.ok:
            raise errors.MigrationFailed(
                f"{path}: after migration the chain does not prove ({', '.join(report.problems)})"
            )
    after = _counts(conn)
    for t in TABLES:
        if after[t] < before[t]:  # a live writer may add rows; nothing may lose one
            raise errors.MigrationFailed(
                f"{path}: {t} has {after[t]} rows after migration, {before[t]} before"
            )


def _backup_counts(bak: Path) -> dict[str, int]:
    conn = db.open_readonly(bak)
    try:
        with db.translated(bak):
            return _counts(conn)
    finally:
        conn.close()


def _dispose(bak: Path, path: Path, revision: int, keep: bool) -> Path | None:
    """Remove the working backup, or keep it under its documented name; returns that name."""
    if not bak.exists():
        return None
    kept = None
    if keep:
        kept = kept_backup_name(path, revision)
        os.link(bak, kept)  # never overwrites: kept_backup_name found a free name
    bak.unlink()
    fsutil.fsync_dir(path.parent)
    return kept


def _remove_leftover(item: MigrationPlanItem) -> str:
    if item.leftover is None or not item.leftover.exists():
        return ""
    item.leftover.unlink()
    fsutil.fsync_dir(item.path.parent)
    return f"removed {item.leftover.name} left by an interrupted migration"


class _Moved(Exception):
    """The file migrate has open is no longer the session (a recover or restore renamed another
    file into its place): roll back and judge the new file."""


_MOVED_RETRIES = 5


def migrate_one(
    item: MigrationPlanItem, *, wait: float | None = None, keep_backups: bool = False
) -> MigrationOutcome:
    """Execute one plan item. With ``wait`` (seconds), a file another process has open is
    migrated too, waiting at most that long for the write lock; without it, it is skipped.

    If the session file is replaced (renamed over) between the open and ``BEGIN IMMEDIATE`` —
    a rollback-journal file holds no lock in between, so a recover can swap it — the write
    lock is let go, nothing is written, and the new file is probed and migrated afresh.
    """
    started = time.monotonic()
    for _ in range(_MOVED_RETRIES):
        try:
            out = _migrate_once(item, wait, keep_backups)
        except _Moved:
            item = probe(item.session_id, item.path)
            continue
        out.seconds = time.monotonic() - started
        return out
    return MigrationOutcome(
        item.session_id,
        item.revision,
        item.revision,
        "skipped_live",
        None,
        f"{item.path}: replaced again and again while being migrated; retry later",
        time.monotonic() - started,
    )


def _migrate_once(
    item: MigrationPlanItem, wait: float | None, keep_backups: bool
) -> MigrationOutcome:
    path, sid, rev = item.path, item.session_id, item.revision

    def done(
        outcome: MigrateOutcomeName, to: int | None, message: str = "", kept: Path | None = None
    ) -> MigrationOutcome:
        return MigrationOutcome(sid, rev, to, outcome, kept, message)

    if item.action != MIGRATE:
        message = item.message
        if item.outcome == "current":
            try:
                message = _remove_leftover(item)
            except OSError as e:
                message = str(fsutil.os_error(e, item.leftover, "remove"))
        return done(item.outcome or "failed", rev, message)
    holder = locks.probe(path)  # again: the plan may be old
    if holder is not None and holder.lease and wait is not None:
        # A kernel's writer holds the session: never change the schema under it (its next
        # emit would write the old revision's rows). --wait waits for it to close instead.
        holder = locks.wait_free(path, wait) or None
        if holder is not None and not holder.lease:
            holder = None  # only readers left: BEGIN IMMEDIATE below waits for them as before
    if holder is not None and (wait is None or holder.lease):
        who = f" by pid {holder.pid}" if holder.pid else ""
        what = "held by its writer" if holder.lease else "open"
        return done(
            "skipped_live",
            rev,
            f"{path}: {what}{who}; not migrated — retry when it is closed"
            + ("" if holder.lease else ", or pass --wait"),
        )
    faults.point("after_probe")
    bak = backup_file(path)
    had_sidecars = db.wal_in_use(path)
    try:
        fsutil.refuse_hard_linked(path)
        fsutil.refuse_unwritable(path)
        conn = db.open_writer(path)
    except (errors.HardLinked, errors.FileSystemError) as e:
        if not had_sidecars:
            _drop_empty_sidecars(path)
        return done("failed", rev, f"{e}; not migrated, the session is unchanged")
    except errors.AgentdbError as e:
        if not had_sidecars:
            _drop_empty_sidecars(path)
        return done(_refused(item, e).outcome or "failed", rev, item.message)

    def after_begin() -> None:
        """Under the write lock: the path still names the file we have open, with one name."""
        if db.has_moved(conn):
            raise _Moved
        fsutil.refuse_hard_linked(path)

    committed = False
    try:
        if wait is not None:
            _wait_for_locks(conn, wait)
        with db.translated(path, conn):
            ident = identify(conn)
            if ident.kind == "too_new":
                return done("too_new", rev, f"{path}: {ident.problem}; left untouched")
            if ident.kind != "session":
                return done("foreign", rev, f"{path}: {ident.problem}; left untouched")
            if ident.user_version >= CURRENT_REVISION:  # a kernel migrated it meanwhile
                return done("current", ident.user_version, _remove_leftover(item))
            db.exec_script(conn, "PRAGMA synchronous=FULL")
            if bak.exists():
                bak.unlink()  # an interrupted run's copy of this same, still unmigrated file
            db.backup_to(conn, bak)
        fsutil.fsync_dir(path.parent)
        before = _backup_counts(bak)
        faults.point("after_backup")
        faults.point("before_begin")  # no lock held: a rollback-journal file can be swapped here
        with db.translated(path, conn):  # BEGIN IMMEDIATE's BusyError comes out untranslated
            start, to = apply_steps(conn, path, after_begin=after_begin)  # point before_commit
        committed = start != to
        faults.point("after_commit")
        with db.translated(path, conn):
            _verify(conn, path, before)
        faults.point("after_verify")
        _compact(conn, path)
    except _Moved:
        conn.close()
        with contextlib.suppress(OSError):
            _dispose(bak, path, rev or 0, keep=False)  # a copy of the file that was replaced
        raise
    except (errors.AgentdbError, OSError) as e:
        conn.close()
        failure = fsutil.os_error(e) if isinstance(e, OSError) else e
        if committed:  # committed but not verified: keep the backup for the operator
            try:
                kept = _dispose(bak, path, rev or 0, keep=True)
            except OSError as e2:
                kept = None
                failure = fsutil.os_error(e2, bak, "keep the backup")
            return done("failed", CURRENT_REVISION, f"{failure}; backup kept at {kept}", kept)
        with contextlib.suppress(OSError):  # the system may refuse this too (EROFS, EIO)
            _dispose(bak, path, rev or 0, keep=False)  # rolled back: the file is its own backup
        if not had_sidecars:
            _drop_empty_sidecars(path)
        if isinstance(failure, errors.Busy) or isinstance(failure.__cause__, apsw.BusyError):
            waited = wait if wait is not None else db.BUSY_TIMEOUT_MS / 1000
            return done(
                "skipped_live",
                rev,
                f"{path}: still locked by its writer after {waited:g}s; not migrated — "
                "retry when it is idle",
            )
        outcome: MigrateOutcomeName = (
            "too_new"
            if isinstance(failure, errors.TooNew)
            else "corrupt"
            if isinstance(failure, errors.Corrupt)
            else "failed"
        )
        if isinstance(failure, errors.FileSystemError | errors.HardLinked):
            return done(outcome, rev, f"{failure}; not migrated, the session is unchanged")
        return done(outcome, rev, str(failure))
    finally:
        conn.close()
    try:
        if not committed:  # a kernel migrated it between our probe and our transaction
            _dispose(bak, path, rev or 0, keep=False)
            return done("current", to, "already migrated by another process")
        kept = _dispose(bak, path, rev or 0, keep=keep_backups)
    except OSError as e:
        failure = fsutil.os_error(e, bak, "remove the backup")
        return done("migrated" if committed else "current", to, f"{failure}")
    return done("migrated", to, f"backup kept at {kept}" if kept else "", kept)


def _compact(conn: apsw.Connection, path: Path) -> None:
    """After the verified commit: rewrite the file without the pages the migration freed (the
    old copies of the tables it rebuilt: a migrated tree kept 37 % of its pages free, and
    ``recover``'s page stage reads them all), then fold the WAL into the file and truncate it,
    so a copy of the ``.sqlite`` alone holds the migrated revision. ``VACUUM`` is one
    transaction: killed at any instant the file is the migrated one, compacted or not. Best
    effort: a refusal (a reader that came meanwhile, a full disk) leaves it migrated and
    verified, only larger."""
    try:
        with db.translated(path, conn):
            if db.pragma(conn, "freelist_count"):
                db.exec_script(conn, "VACUUM")
            faults.point("after_vacuum")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except (errors.AgentdbError, apsw.Error):
        pass


def _drop_empty_sidecars(path: Path) -> None:
    """Remove an empty ``-wal`` and its ``-shm`` that SQLite left beside a file that had none
    (its close cannot checkpoint and delete them on a full or failing disk), under the
    session's lock, so that a failed migration leaves the directory as it found it. A kernel
    that opened the session meanwhile holds them: then they stay."""
    wal, shm = paths.sidecar(path, "-wal"), paths.sidecar(path, "-shm")
    try:
        if os.path.lexists(wal) and os.lstat(wal).st_size != 0:
            return
        if not (os.path.lexists(wal) or os.path.lexists(shm)):
            return
        with locks.hold(path):
            for p in (wal, shm):
                p.unlink(missing_ok=True)
            fsutil.fsync_dir(path.parent)
    except (errors.AgentdbError, OSError):
        pass


def _wait_for_locks(conn: apsw.Connection, seconds: float) -> None:
    """Wait up to ``seconds`` for a lock in short Python sleeps: Ctrl-C ends the wait at once
    (SQLite's own busy timeout sleeps in C, where a signal waits until it gives up)."""
    deadline = time.monotonic() + seconds

    def again(tries: int) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(0.02, left))
        return True

    conn.set_busy_handler(again)


def execute(
    items: Iterable[MigrationPlanItem],
    *,
    wait: float | None = None,
    keep_backups: bool = False,
    progress: Progress | None = None,
) -> MigrationReport:
    """Migrate every item the plan marks; one file at a time (never two write locks held)."""
    report = MigrationReport(CURRENT_REVISION, dry_run=False)
    items = list(items)
    for i, item in enumerate(items, 1):
        out = migrate_one(item, wait=wait, keep_backups=keep_backups)
        report.sessions.append(out)
        if progress:
            progress(out, i, len(items))
    return report


def dry_run_outcome(item: MigrationPlanItem, *, wait: float | None = None) -> MigrationOutcome:
    """The outcome a plan item would have; "migrated" reads "would be migrated"."""
    if item.action == MIGRATE:
        if item.live and wait is None:
            return MigrationOutcome(
                item.session_id, item.revision, item.revision, "skipped_live", None, item.message
            )
        return MigrationOutcome(
            item.session_id, item.revision, CURRENT_REVISION, "migrated", None, "would migrate"
        )
    return MigrationOutcome(
        item.session_id, item.revision, item.revision, item.outcome or "failed", None, item.message
    )


def migrate_sessions(
    sessions_dir: Path,
    ids: Sequence[str] | None = None,
    *,
    dry_run: bool = False,
    wait: float | None = None,
    keep_backups: bool = False,
    progress: Progress | None = None,
    jobs: int = 1,
) -> MigrationReport:
    """Probe and (unless ``dry_run``) migrate each file: ``ids``, or every session.

    With ``jobs`` > 1, that many worker processes take one file each at a time (each holds at
    most one write lock, on its own file); the report is in id order all the same. Ctrl-C
    lets the files in hand finish and reports every file done.
    """
    report = MigrationReport(CURRENT_REVISION, dry_run=dry_run)
    targets = _targets(sessions_dir, ids)

    def one(target: tuple[str, Path]) -> MigrationOutcome:
        item = probe(*target)
        if dry_run:
            return dry_run_outcome(item, wait=wait)
        return migrate_one(item, wait=wait, keep_backups=keep_backups)

    ran = workers.run_each(one, targets, jobs, died=_died, done=progress)
    report.sessions = ran.results
    report.interrupted = ran.interrupted  # a file in hand is at the old revision or the new one
    return report


def _died(target: tuple[str, Path], why: str) -> MigrationOutcome:
    sid, path = target
    return MigrationOutcome(
        sid,
        None,
        None,
        "failed",
        None,
        f"{path}: {why} while migrating it; the file is at its old revision or the new "
        f"one — run `agentdb migrate {sid}` again to finish",
    )
