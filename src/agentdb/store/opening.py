"""How the writer opens a session: the spec's open sequence, then the lease, then the modes;
and the checks ``create`` makes of a child's lineage."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import apsw

from agentdb import db, errors, locks
from agentdb.paths import sidecar
from agentdb.schema.identity import identify, schema_differences
from agentdb.schema.migrations import apply_steps
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.store.model import RecoverHook, require_session
from agentdb.store.reader import SessionReader

log = logging.getLogger("agentdb.store")


def open_checked(
    path: Path,
    session_id: str,
    recover: RecoverHook | None,
    migrate: bool,
    lease: locks.Lease,
    moves: int = 0,
) -> tuple[apsw.Connection, int]:
    """:meth:`SessionWriter.open`'s sequence; returns the connection and the revision it writes,
    holding ``lease``. The lease is taken only after the integrity check and any recovery."""
    for attempt in (1, 2):
        try:
            conn = db.open_writer(path)
        except (errors.Corrupt, errors.Unreadable):
            # A smashed header or schema page fails before integrity_check can run.
            if recover is None or attempt == 2:
                raise
            recover(path, session_id)
            continue
        try:
            try:
                ident = identify(conn)
                require_session(ident, path)
                problems = db.integrity_problems(conn)
                if not problems:
                    # A rollback-journal file is not locked between statements: a job
                    # may have swapped another file in. Once in WAL mode the connection
                    # keeps its read lock, so no job can act on the file any more.
                    moved = db.has_moved(conn)
                    if not moved:
                        db.configure_writer(conn, path)
                        moved = db.has_moved(conn)
                    if moved and moves < 5:
                        conn.close()
                        return open_checked(path, session_id, recover, migrate, lease, moves + 1)
                    revision = ident.revision
                    if migrate and revision < CURRENT_REVISION:
                        _, revision = apply_steps(conn, path)
                    _require_shape(conn, path, revision, session_id)
                    # Last: after recovery (whose job must not meet this lease) and while the
                    # connection holds SQLite's shared lock, so no job holds the file now.
                    lease.acquire()
                    tighten_modes(path, lease.fd)
                    return conn, revision
            except db.READ_ERRORS as e:  # invalid UTF-8 (the migration hashes TEXT): Corrupt
                err = db.translate(e, path)
                if not isinstance(err, errors.Corrupt):
                    raise err from e
                problems = [str(err if isinstance(e, UnicodeDecodeError) else e).split("\n")[0]]
            except errors.Corrupt as e:  # from db.translated, or session_meta not the file's
                problems = [str(e)]
        except BaseException:
            conn.close()
            raise
        conn.close()
        if recover is None or attempt == 2:
            raise errors.Corrupt(
                f"{path}: integrity_check failed ({problems[0]}); run `agentdb recover "
                f"{session_id}`",
                path=path,
            )
        recover(path, session_id)
    raise AssertionError("unreachable")


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


def _require_shape(conn: apsw.Connection, path: Path, revision: int, session_id: str) -> None:
    diffs = schema_differences(conn, revision)
    if diffs:
        raise errors.ForeignFile(
            f"{path}: schema does not match revision {revision} ({diffs[0]}); "
            "run `agentdb check` on it",
            path=path,
        )
    ids = [r[0] for r in conn.execute("SELECT session_id FROM session_meta LIMIT 2")]
    if len(ids) == 1 and ids[0] != session_id:
        # Another session's file under this name (copied or renamed): nothing is damaged, so
        # no recovery is attempted (recover calls it healthy); the kernel skips it.
        raise errors.ForeignFile(
            f"{path}: session_meta names session {ids[0]!r}, not {session_id!r}: this is "
            "another session's file under this name; move it back to its own name (see "
            "`agentdb check` on it)",
            path=path,
        )
    if ids != [session_id]:
        raise errors.Corrupt(
            f"{path}: session_meta holds {ids!r}, expected exactly [{session_id!r}]; "
            "run `agentdb check` on it",
            path=path,
        )
