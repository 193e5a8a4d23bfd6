"""How the writer opens a session: the spec's open sequence, then the lease, then the modes;
and the checks ``create`` makes of a child's lineage."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import apsw

from agentdb import db, errors, fsutil, locks
from agentdb.hashing import mismatch_sql
from agentdb.paths import is_valid_id, sidecar
from agentdb.schema import chainio
from agentdb.schema.identity import identify, schema_differences
from agentdb.schema.migrations import apply_steps
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.store.model import JudgeHook, RecoverHook, require_session
from agentdb.store.reader import SessionReader

log = logging.getLogger("agentdb.store")


# Files swapped under the open by a job (recover, restore) before the connection could keep
# its lock: each swap costs one more pass; a recovery is attempted at most once.
_PASSES = 6


class _Damaged(Exception):
    """The file is damaged: ``problem`` says how, in one line (the recovery hook's cue)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class _Swapped(Exception):
    """The path names another file than the one judged or opened: start the open again."""


def open_checked(
    path: Path,
    session_id: str,
    recover: RecoverHook | None,
    judge: JudgeHook | None,
    migrate: bool,
    lease: locks.Lease,
) -> tuple[apsw.Connection, int]:
    """:meth:`SessionWriter.open`'s sequence; returns the connection and the revision it writes,
    holding ``lease``. Per pass: judge the file (:func:`_judge`), open it (:func:`_open_sound`);
    damage runs ``recover`` once and starts again; a file swapped meanwhile starts again."""
    recovered = False
    for _ in range(_PASSES):
        seen = _identity(path)
        try:
            inode = _judge(path, session_id, judge)
            return _open_sound(path, session_id, judge is None, inode, migrate, lease)
        except _Swapped:
            continue
        except _Damaged as d:
            now = _identity(path)
            if now is None and fsutil.gone(path):  # removed meanwhile (``prune``): nothing to open
                raise errors.SessionNotFound(
                    f"{path}: removed while it was being opened; nothing was written",
                    path=path,
                ) from None
            if now != seen:  # another job replaced the judged file: judge the new one
                continue
            if recover is None or recovered:
                fix = f"agentdb recover {session_id}"
                hint = "" if fix in d.problem else f"; run `{fix}`"
                raise errors.Corrupt(f"{path}: {d.problem}{hint}", path=path) from None
            recovered = True
            try:
                recover(path, session_id)
            except errors.Corrupt:
                # The hook found nothing to salvage. When another job (``recover --all``)
                # replaced the damaged file between the judge and the hook, that is its
                # replacement: judge the new file. Otherwise the refusal stands.
                if _identity(path) == seen:
                    raise
    raise errors.Busy(f"{path}: replaced again and again while opening; retry later", path=path)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _judge(path: Path, session_id: str, judge: JudgeHook | None) -> tuple[int, int]:
    """Ask ``judge`` about the file, before this process opens any connection to it (a judge
    opens and closes the file, which would drop this process's POSIX locks on it). Returns the
    judged file's (device, inode); raises :class:`_Damaged`."""
    st = db.require_regular(path)  # no such file, a link, a FIFO: the error, never a recovery
    if judge is not None:
        problem = judge(path, session_id)
        if problem is not None:
            raise _Damaged(problem)
        st = db.require_regular(path)
    return st.st_dev, st.st_ino


def _open_sound(
    path: Path,
    session_id: str,
    check_integrity: bool,
    inode: tuple[int, int],
    migrate: bool,
    lease: locks.Lease,
) -> tuple[apsw.Connection, int]:
    """Open the judged file for writing: identity, the writer's own integrity check when no
    judge ran, WAL mode (after which no job can swap the file), migration, shape, then the
    lease. Raises :class:`_Damaged` or :class:`_Swapped`, with the connection closed."""
    try:
        conn = db.open_writer(path)
    except (errors.Corrupt, errors.Unreadable) as e:
        # A smashed header or schema page fails before integrity_check can run.
        raise _Damaged(_one_line(e, path)) from None
    try:
        with _damage_as_raised(path):
            ident = identify(conn)
            require_session(ident, path)
            # Before migrating: a migration of another session's file is never wanted, and
            # its integrity check would fail on the index that still names this session.
            _require_own_session(conn, path, session_id)
            if check_integrity:
                _require_intact(conn, ident.revision)
            _settle(conn, path, inode)
            revision = ident.revision
            if migrate and revision < CURRENT_REVISION:
                _, revision = apply_steps(conn, path)
            _require_shape(conn, path, revision, session_id)
            if revision >= 3:
                _require_tail(conn, session_id)
        # Last: after recovery (whose job must not meet this lease) and while the connection
        # holds SQLite's shared lock, so no job holds the file now.
        lease.acquire()
        tighten_modes(path, lease.fd)
    except BaseException:
        conn.close()
        raise
    return conn, revision


@contextlib.contextmanager
def _damage_as_raised(path: Path) -> Iterator[None]:
    """SQLite's corruption errors, and ours, as :class:`_Damaged`; any other error as ours."""
    try:
        yield
    except db.READ_ERRORS as e:  # invalid UTF-8 too (a migration hashes TEXT): Corrupt
        err = db.translate(e, path)
        if isinstance(err, errors.Corrupt):
            raise _Damaged(
                _one_line(err if isinstance(e, UnicodeDecodeError) else e, path)
            ) from None
        raise err from e
    except errors.Corrupt as e:  # from db.translated, or session_meta not the file's
        raise _Damaged(_one_line(e, path)) from None


def _require_intact(conn: apsw.Connection, revision: int) -> None:
    """The writer's own judge, when the caller passed none: ``integrity_check`` (the spec's
    MUST) and, from revision 2, every event's content hash (so a file is never migrated over
    a hash that fails: the new chain would certify the damage)."""
    problems = db.integrity_problems(conn)
    if problems:
        raise _Damaged(f"integrity_check failed ({problems[0]})")
    if revision >= 2:
        bad = int(db.scalar(conn, mismatch_sql("count(*)")))
        if bad:
            raise _Damaged(f"{bad} events do not match their content hash")


def _require_tail(conn: apsw.Connection, session_id: str) -> None:
    """From revision 3, on every open (a judge or not): the chain's tail the writer is about to
    extend, read under the connection that will write (design §9: the head, the last event and
    its rows, the counts, session_meta's hash — O(1) chain work; ``check`` proves every row)."""
    report = chainio.verify_quick(conn, session_id=session_id)
    if not report.ok:
        raise _Damaged(f"the chain does not prove its tail ({', '.join(report.problems)})")


def _settle(conn: apsw.Connection, path: Path, inode: tuple[int, int]) -> None:
    """Switch to WAL mode, after which the connection keeps its read lock and no job can act on
    the file. A rollback-journal file is not locked between statements: a job may have swapped
    another file in, before or after the judge looked — then :class:`_Swapped`."""
    moved = db.has_moved(conn)
    if not moved:
        db.configure_writer(conn, path)
        moved = db.has_moved(conn)
    if not moved:
        st = os.stat(path)
        moved = (st.st_dev, st.st_ino) != inode
    if moved:
        raise _Swapped


def _one_line(e: BaseException, path: Path) -> str:
    if isinstance(e, errors.AgentdbError) and e.problem:
        return e.problem
    text = str(e).split("\n")[0]
    prefix = f"{path}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def tighten_modes(path: Path, fd: int | None) -> None:
    """Make the session file this writer owns, its WAL and WAL index owner-only (0600).

    A file others may write is refused before this (``db.require_secure``); this removes read
    access a copy or an old umask left. The database is changed through the lease's
    descriptor, the sidecars by path: opening and closing a descriptor of the ``-shm`` would
    drop SQLite's own POSIX locks on it.
    """
    me = os.geteuid()
    try:
        if fd is not None:
            st = os.fstat(fd)
            if st.st_uid == me and stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, 0o600)
        for suffix in ("-wal", "-shm"):
            p = sidecar(path, suffix)
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_uid == me and stat.S_IMODE(st.st_mode) & 0o077:
                os.chmod(p, 0o600)
    except OSError as e:  # the file still works; say so rather than fail the kernel's open
        log.warning("%s: could not make it owner-only (%s); run `chmod 600 %s*`", path, e, path)


def require_child_depth(sessions_dir: Path, parent_id: str, depth: int) -> None:
    """A child sits one level below its parent, when the parent's file can be read (it may
    have been pruned, or be damaged: then the kernel's own count is taken as it is)."""
    try:
        with SessionReader.open(sessions_dir, parent_id) as parent:
            parent_depth = parent.info().depth
    except errors.AgentdbError:
        return
    if not isinstance(parent_depth, int) or isinstance(parent_depth, bool):
        return  # another writer's odd value: nothing to compare with
    if depth != parent_depth + 1:
        raise errors.InvalidLineage(
            f"depth {depth} for a child of {parent_id}, whose depth is {parent_depth}; a child's "
            f"depth is its parent's + 1 ({parent_depth + 1})"
        )


def read_status(conn: apsw.Connection, path: Path, session_id: str) -> str:
    with db.translated(path):
        status = db.scalar(
            conn, "SELECT status FROM session_meta WHERE session_id = ?", (session_id,)
        )
    if status is None:
        raise errors.Corrupt(f"{path}: no session_meta row for {session_id}", path=path)
    return str(status)


def _meta_ids(conn: apsw.Connection) -> list[object]:
    """session_meta's ids as its table holds them (``NOT INDEXED``: never the index alone,
    which may still name this session over another session's rows, as ``check`` reads them)."""
    return [r[0] for r in conn.execute("SELECT session_id FROM session_meta NOT INDEXED LIMIT 2")]


def _require_own_session(conn: apsw.Connection, path: Path, session_id: str) -> None:
    """Refuse another session's file under this name (copied or renamed, or its session_meta
    page): nothing of this session to repair, so no recovery and no migration is attempted;
    the kernel skips it (:class:`~agentdb.errors.ForeignFile`)."""
    ids = _meta_ids(conn)
    other = ids[0] if len(ids) == 1 else None
    # another valid session id, as check and recover read it (anything else is damage, for
    # the integrity check and _require_shape to find)
    if isinstance(other, str) and other != session_id and is_valid_id(other):
        raise errors.ForeignFile(
            f"{path}: session_meta names session {ids[0]!r}, not {session_id!r}: this is "
            "another session's file under this name; move it back to its own name (see "
            "`agentdb check` on it)",
            path=path,
        )


def _require_shape(conn: apsw.Connection, path: Path, revision: int, session_id: str) -> None:
    diffs = schema_differences(conn, revision)
    if diffs:
        raise errors.ForeignFile(
            f"{path}: schema does not match revision {revision} ({diffs[0]}); "
            "run `agentdb check` on it",
            path=path,
        )
    ids = _meta_ids(conn)
    if ids != [session_id]:
        raise errors.Corrupt(
            f"{path}: session_meta holds {ids!r}, expected exactly [{session_id!r}]; "
            "run `agentdb check` on it",
            path=path,
        )
