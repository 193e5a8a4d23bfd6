"""The only place that opens SQLite.

Two openers (CONTRACT.md, state-backend issue):

* :func:`open_writer` for the kernel: creates the directory 0700 and the file 0600, WAL,
  ``synchronous=FULL``, foreign keys on, a busy timeout.
* :func:`open_readonly` for tools: never creates, never migrates, never changes a byte or a mode;
  opens exactly the file named (no symlinks, nothing but a regular file).

Both refuse a database, WAL or ``-shm`` that group or others can write or that another user owns,
refuse triggers and views, and run with ``trusted_schema`` off, defensive mode on, triggers and
views disabled, ``cell_size_check`` on, ``mmap_size=0`` and limits on what a row may bring in.
APSW exceptions are translated here into :mod:`agentdb.errors`.

Size: over 500 lines because it is the only place that opens SQLite (the architecture's rule).
It holds about seven concerns; a split needs a connection layer first, or it makes a circle of
four files (see docs/architecture.json), and is left for when the evidence build reshapes the
openers.
"""

from __future__ import annotations

import array
import errno
import os
import pwd
import re
import stat
import struct
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import apsw

from agentdb import errors, fsutil, hashing, paths
from agentdb.hashing import RAW_SQL_FUNCTION, SQL_FUNCTION, event_hash, event_hash_raw
from agentdb.paths import sidecar

BUSY_TIMEOUT_MS = 5000
# The one size cap: the largest string or blob the writer stores and a read-only connection
# materialises (SQLITE_LIMIT_LENGTH). The writer refuses a larger value, so a file it wrote is
# never refused by a reader; a larger value in another writer's file is refused on read.
MAX_VALUE = 256 * 1024 * 1024
# Bounds for parsing a possibly hostile schema.
_LIMITS = {
    apsw.SQLITE_LIMIT_SQL_LENGTH: 1_000_000,
    apsw.SQLITE_LIMIT_COLUMN: 200,
    apsw.SQLITE_LIMIT_EXPR_DEPTH: 200,
    apsw.SQLITE_LIMIT_ATTACHED: 2,
}


# What reading a session file can raise: SQLite's errors, and APSW's decoding of a TEXT value
# that is not valid UTF-8 (no apsw.Error: it must be caught beside them).
READ_ERRORS: tuple[type[BaseException], ...] = (apsw.Error, UnicodeDecodeError)


# ---------------------------------------------------------------------------- file checks


@dataclass(frozen=True)
class FileStats:
    """``lstat`` of a database and its sidecars, taken together (None: absent)."""

    db: os.stat_result | None
    wal: os.stat_result | None
    shm: os.stat_result | None
    # A rollback journal: SQLite opens and reads it (following a link, blocking on a FIFO)
    # whenever a writer opens a file without a WAL, so it is judged like the other two.
    journal: os.stat_result | None = None

    @property
    def wal_in_use(self) -> bool:
        """A ``-wal`` or ``-shm`` entry exists (whatever it is)."""
        return self.wal is not None or self.shm is not None


def _lstat(p: str) -> os.stat_result | None:
    try:
        return os.lstat(p)
    except FileNotFoundError:
        return None


def file_stats(path: Path | str, *, journal: bool = True) -> FileStats:
    """One ``lstat`` each of ``path`` and its ``-wal``, ``-shm`` and ``-journal`` (never follows
    links); ``journal=False`` leaves the journal out (None), for a comparison that ignores it."""
    p = os.fspath(path)
    return FileStats(
        _lstat(p),
        _lstat(p + "-wal"),
        _lstat(p + "-shm"),
        _lstat(p + "-journal") if journal else None,
    )


def require_regular(path: Path, st: os.stat_result | None = None) -> os.stat_result:
    """lstat ``path`` (or use ``st``, its fresh lstat); refuse a symlink or anything but a
    regular file (without following)."""
    if st is None:
        st = _lstat(os.fspath(path))
    if st is None:
        raise errors.SessionNotFound(
            f"{path}: no such session file; list sessions with `agentdb sessions list`", path=path
        )
    if stat.S_ISLNK(st.st_mode):
        raise errors.NotRegularFile(
            f"{path}: is a symbolic link, refused; replace it with the session file itself",
            path=path,
        )
    if not stat.S_ISREG(st.st_mode):
        what = (
            "directory"
            if stat.S_ISDIR(st.st_mode)
            else "FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "special file"
        )
        raise errors.NotRegularFile(
            f"{path}: is a {what}, not a session file; move it out of the sessions directory",
            path=path,
        )
    return st


def security_problems(
    path: Path, stats: FileStats | None = None
) -> list[tuple[str, errors.InsecureFile]]:
    """(code, error) for each way the database or its sidecars are not owner-only; each error
    names the file it is about (the database or a sidecar) and carries its problem and fix.

    ``stats`` is a fresh :func:`file_stats` of ``path`` when the caller already has one.
    """
    problems: list[tuple[str, errors.InsecureFile]] = []
    me = os.geteuid()
    if stats is None:
        stats = file_stats(path)
    db_st = stats.db
    if db_st is None:
        return problems
    journal = stats.journal
    if journal is not None and not stat.S_ISREG(journal.st_mode):
        # A writer's open would read it through SQLite: hang on a FIFO, replay a link's target.
        problems.append(
            (
                "insecure_sidecar",
                errors.InsecureFile(
                    problem="its -journal sidecar is not a regular file",
                    fix="remove it by hand",
                    path=sidecar(path, "-journal"),
                ),
            )
        )
    for suffix, st in (("", db_st), ("-wal", stats.wal), ("-shm", stats.shm)):
        if st is None:
            continue
        p = sidecar(path, suffix) if suffix else path
        if suffix and not stat.S_ISREG(st.st_mode):
            problems.append(
                (
                    "insecure_sidecar",
                    errors.InsecureFile(
                        problem=f"its {suffix} sidecar is not a regular file",
                        fix="remove it by hand",
                        path=p,
                    ),
                )
            )
            continue
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o022:
            problems.append(
                (
                    "insecure_mode",
                    errors.InsecureFile(
                        problem=f"mode {mode:04o} lets group or others write it",
                        fix=f"run `chmod 600 {p}`",
                        path=p,
                    ),
                )
            )
        owner = db_st.st_uid if suffix else me
        if st.st_uid != owner:
            problems.append(("insecure_owner", _owner_problem(p, st.st_uid, owner, me)))
    return problems


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


def _owner_problem(p: Path, found: int, expected: int, me: int) -> errors.InsecureFile:
    """Another user owns ``p``: the fix is to act as that user, never to give the harness's
    files to whoever ran agentdb (as root, ``chown 0`` would take them from the harness)."""
    if expected == me:  # the database itself is someone else's
        who = _user(found)
        return errors.InsecureFile(
            problem=f"owned by uid {found} ({who}), not by the user running agentdb (uid {me})",
            fix=f"run agentdb as that user (`sudo -u {who} agentdb ...`); do not chown the "
            "harness's files",
            path=p,
        )
    if expected == 0:  # a root-owned database with someone else's sidecar
        return errors.InsecureFile(
            problem=f"owned by uid {found} ({_user(found)}) but its database by root",
            fix="session files belong to the user that runs the harness: run agentdb as that user",
            path=p,
        )
    return errors.InsecureFile(
        problem=f"owned by uid {found}, but its database by uid {expected} ({_user(expected)})",
        fix=f"run `chown {expected} {p}` as root, or remove it when no process has the session "
        "open",
        path=p,
    )


def require_secure(path: Path, stats: FileStats | None = None) -> None:
    problems = security_problems(path, stats)
    if problems:
        first = problems[0][1]  # names the file it is about; the error is about the session
        raise errors.InsecureFile(str(first), path=path)


# ---------------------------------------------------------------------------- connections


def exec_script(conn: apsw.Connection, sql: str, bindings: Any = None) -> None:
    """Run every statement in ``sql`` (APSW pauses a multi-statement execute at the first row)."""
    for _ in conn.execute(sql, bindings):
        pass


def rows(conn: apsw.Connection, sql: str, bindings: Any = None) -> list[tuple[Any, ...]]:
    """All rows of a query (typed loosely: the query, not the checker, knows their shape)."""
    return [tuple(r) for r in conn.execute(sql, bindings)]


def row(conn: apsw.Connection, sql: str, bindings: Any = None) -> tuple[Any, ...] | None:
    """The first row of a query, or None."""
    r = conn.execute(sql, bindings).fetchone()
    return None if r is None else tuple(r)


def scalar(conn: apsw.Connection, sql: str, bindings: Any = None) -> Any:
    """The first column of the first row, or None."""
    r = conn.execute(sql, bindings).fetchone()
    return None if r is None else r[0]


def pragma(conn: apsw.Connection, name: str) -> Any:
    """The first value of ``PRAGMA name`` (``name`` is always our own constant)."""
    return scalar(conn, f"PRAGMA {name}")


# SQLite reports these misuses as a plain SQLITE_ERROR: the caller's bug, not the file's.
_MISUSE_MESSAGES = (
    "cannot start a transaction within a transaction",
    "cannot commit - no transaction is active",
    "cannot rollback - no transaction is active",
)


# OS errors a failing read or write reports (sqlite3_system_errno) that get their own message.
_OS_ERRNOS = (
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EFBIG,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.EIO,
)
_READ_ERRORS = (apsw.SQLITE_IOERR_READ, apsw.SQLITE_IOERR_SHORT_READ)


def translate(
    e: BaseException, path: Path | str, conn: apsw.Connection | None = None
) -> errors.AgentdbError:
    """An APSW exception as one of ours, naming the file and what to do.

    The kind decides what a harness does: :class:`~agentdb.errors.SessionUnusable` (corrupt,
    unreadable) means skip the session, :class:`~agentdb.errors.Retryable` (busy, full) means
    try again later, and the rest (I/O error, read-only, constraint, misuse) are neither.

    With ``conn`` (the connection that failed), an I/O failure the operating system reported
    (no space, file too large, permission, read-only file system, I/O error) names its errno
    (``sqlite3_system_errno``) and the fix: :func:`agentdb.fsutil.errno_error`.
    """
    msg = str(e).split("\n")[0]
    if isinstance(e, UnicodeDecodeError):
        return errors.Corrupt(
            problem="a TEXT value is not valid UTF-8 (damaged text)",
            fix="run `agentdb recover` on it",
            path=path,
        )
    if conn is not None and isinstance(
        e, apsw.IOError | apsw.FullError | apsw.ReadOnlyError | apsw.CantOpenError
    ):
        try:
            code = conn.system_errno
        except apsw.Error:
            code = 0
        if code == 0 and isinstance(e, apsw.FullError):
            # The unix VFS returns SQLITE_FULL for ENOSPC (and a short write); the backup API
            # does not keep the errno on the destination connection.
            code = errno.ENOSPC
        if code in _OS_ERRNOS:
            extended = getattr(e, "extendedresult", 0)
            doing = (
                "read"
                if extended in _READ_ERRORS
                else "open"
                if isinstance(e, apsw.CantOpenError)
                else "write"
            )
            return fsutil.errno_error(code, path, doing)
    if isinstance(e, apsw.NotADBError):
        return errors.Unreadable(
            problem=f"not a SQLite database ({msg})",
            fix="run `agentdb check` to see what it is",
            path=path,
        )
    if isinstance(e, apsw.CorruptError):
        return errors.Corrupt(
            problem=f"database is corrupt ({msg})", fix="run `agentdb recover` on it", path=path
        )
    if isinstance(e, apsw.BusyError | apsw.LockedError) or wal_index_in_flux(e):
        return errors.Busy(
            problem=f"database stayed locked ({msg})",
            fix="retry when the writer is idle",
            path=path,
        )
    if isinstance(e, apsw.TooBigError):
        return errors.Unreadable(
            problem=f"a value exceeds the {MAX_VALUE}-byte limit ({msg})",
            fix="the file may be hostile",
            path=path,
        )
    if isinstance(e, apsw.CantOpenError):
        return errors.Unreadable(problem=f"cannot open the database ({msg})", path=path)
    if isinstance(e, apsw.FullError):
        return errors.Full(
            problem=f"the disk is full ({msg})",
            fix="nothing was written — free space and retry",
            path=path,
        )
    if isinstance(e, apsw.IOError):
        return errors.DiskIOError(
            problem=f"input/output error ({msg})",
            fix="check the disk and the system log",
            path=path,
        )
    if isinstance(e, apsw.ReadOnlyError):
        return errors.ReadOnly(
            problem=f"cannot be written ({msg})",
            fix="check its permissions and the filesystem's mount options",
            path=path,
        )
    if isinstance(e, apsw.ConstraintError):
        return errors.ConstraintViolation(
            problem=f"a write broke a constraint ({msg})", fix="nothing was written", path=path
        )
    if isinstance(e, apsw.ThreadingViolationError):
        return errors.ThreadingViolation(
            problem=f"one connection used from two threads at once ({msg})", path=path
        )
    if isinstance(
        e, apsw.MisuseError | apsw.ConnectionClosedError | apsw.CursorClosedError
    ) or msg.startswith(_MISUSE_MESSAGES):
        return errors.Misuse(problem=f"SQLite API misuse ({type(e).__name__}: {msg})", path=path)
    return errors.Unreadable(problem=f"SQLite error ({type(e).__name__}: {msg})", path=path)


@contextmanager
def translated(path: Path | str, conn: apsw.Connection | None = None) -> Iterator[None]:
    """Translate APSW errors raised inside the block (``conn``: see :func:`translate`)."""
    try:
        yield
    except READ_ERRORS as e:
        raise translate(e, path, conn) from e


# What ``quote(..., safe="/")`` leaves as it is: a path made only of these needs no quoting.
_URI_PLAIN = re.compile(r"[A-Za-z0-9_.~/-]*")


def _uri(path: Path | str, **params: str) -> str:
    q = "&".join(f"{k}={v}" for k, v in params.items())
    return _uri_path(path) + ("?" + q if q else "")


def _uri_path(path: Path | str) -> str:
    """``file:`` and the absolute path, quoted where it must be (no query)."""
    s = os.fspath(path)
    if not s.startswith("/"):
        s = str(Path(s).absolute())
    if not _URI_PLAIN.fullmatch(s):  # measured: quote() was 5 % of a quick check of a file
        s = quote(s, safe="/")
    return "file:" + s


def harden(conn: apsw.Connection) -> None:
    """Defensive settings for every connection agentdb makes."""
    conn.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, 1)
    conn.config(apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0)
    conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
    conn.config(apsw.SQLITE_DBCONFIG_ENABLE_VIEW, 0)
    conn.config(apsw.SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0)
    conn.config(apsw.SQLITE_DBCONFIG_DQS_DDL, 0)
    conn.config(apsw.SQLITE_DBCONFIG_DQS_DML, 0)
    for limit, value in _LIMITS.items():
        conn.limit(limit, value)
    exec_script(conn, "PRAGMA trusted_schema=OFF; PRAGMA cell_size_check=ON; PRAGMA mmap_size=0")
    conn.create_scalar_function(SQL_FUNCTION, _sql_event_hash, 9, deterministic=True)
    conn.create_scalar_function(RAW_SQL_FUNCTION, _sql_event_hash_raw, 10, deterministic=True)
    conn.create_scalar_function(UTF8_SQL_FUNCTION, _utf8_ok, -1, deterministic=True)
    conn.create_scalar_function(READ_ALL_SQL_FUNCTION, _read_all, -1, deterministic=True)
    # revision 3's hashes (design §3-§6): unused by revisions 1 and 2
    for name, func, nargs in _REV3_FUNCTIONS:
        conn.create_scalar_function(name, func, nargs, deterministic=True)


_REV3_FUNCTIONS = (
    (hashing.ROW_HASH_SQL_FUNCTION, hashing.sql_row_hash, -1),
    (hashing.CHAIN_HASH_SQL_FUNCTION, hashing.sql_chain_hash, 5),
    (hashing.GENESIS_SQL_FUNCTION, hashing.sql_genesis, 1),
    (hashing.GAPS_HASH_SQL_FUNCTION, hashing.sql_gaps_hash, 1),
)


def _sql_event_hash(*values: Any) -> bytes:
    return event_hash(*values)


# agentdb_read_all(a, b, ...): 1, once APSW has read every argument (decoding TEXT: a value that
# is not UTF-8 raises UnicodeDecodeError from the statement). See schema.text.invalid_text.
READ_ALL_SQL_FUNCTION = "agentdb_read_all"


def _read_all(*_values: Any) -> int:
    return 1


# agentdb_utf8_ok(CAST(x AS BLOB)): 1 when the bytes are valid UTF-8 (or not a blob), else 0.
UTF8_SQL_FUNCTION = "agentdb_utf8_ok"


def _sql_event_hash_raw(*values: Any) -> bytes | None:
    return event_hash_raw(*values)


def _utf8_ok(*args: Any) -> int:
    value = args[0] if args else None
    if type(value) is bytes:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return 0
    return 1


def unsafe_schema_objects(conn: apsw.Connection) -> list[tuple[str, str]]:
    """(type, name) of every trigger and view in the file."""
    rows = conn.execute(
        "SELECT type, name FROM sqlite_schema WHERE type IN ('trigger','view') ORDER BY name"
    ).fetchall()
    return [(str(t), str(n)) for t, n in rows]


def refuse_unsafe_schema(conn: apsw.Connection, path: Path) -> None:
    found = unsafe_schema_objects(conn)
    if found:
        listed = ", ".join(f"{t} {n!r}" for t, n in found[:3])
        raise errors.UnsafeSchema(
            f"{path}: has {listed}; agentdb never runs a file's own SQL — "
            "inspect it with `agentdb check`, the kernel never creates these",
            path=path,
        )


def wal_in_use(path: Path) -> bool:
    return sidecar(path, "-wal").exists() or sidecar(path, "-shm").exists()


class ReadConnection(apsw.Connection):
    """A connection from :func:`open_readonly`; ``how`` says what it reads.

    * ``"immutable"``: no ``-wal`` beside the file, so every commit is in the database file; it
      is opened ``immutable`` (no locks, nothing created). A caller that must be sure the file
      did not change under it (a writer starting meanwhile) compares ``lstat`` before and after.
    * ``"wal"``: a ``-wal`` and its ``-shm``: read through the WAL index without writing it
      (``readonly_shm``), beside a live writer as after a crash; the writer is never blocked.
    * ``"copy"``: a ``-wal`` with no ``-shm`` (its writer is gone): SQLite would create the
      ``-shm`` beside it, so a private copy of the database and its WAL is read instead
      (copied while unchanged); the copy is removed when the connection is closed. The same
      for a non-empty ``-journal``: the copy is rolled back first (a journal that cannot be
      rolled back leaves the file alone to read, ``immutable``).
    """

    how = "immutable"
    _cleanup: Callable[[], Any] | None = None

    def execute(self, *args: Any, **kwargs: Any) -> apsw.Cursor:
        """As :meth:`apsw.Connection.execute`; a read transaction that meets the writer
        rewriting the WAL index is begun again (see :func:`wal_index_in_flux`)."""
        for delay in _FLUX_RETRIES:
            try:
                return super().execute(*args, **kwargs)
            except apsw.ReadOnlyError as e:
                if not wal_index_in_flux(e) or delay is None:
                    raise
            time.sleep(delay)
        raise AssertionError("unreachable")  # the last delay is None

    def close(self, force: bool = False) -> None:
        try:
            super().close(force)
        finally:
            if self._cleanup is not None:
                self._cleanup()


# Through a read-only -shm (``readonly_shm``) SQLite cannot rebuild a WAL index it finds
# inconsistent, and when no writer holds the write lock at that instant it answers
# SQLITE_READONLY_RECOVERY (or _CANTINIT): the writer was rewriting the index header, and the
# next attempt reads it whole. Measured beside a writer committing continuously on a loaded
# machine: about one read in 300. Retried with these pauses (seconds), then reported busy.
_FLUX_RETRIES: tuple[float | None, ...] = (0.001, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, None)


def wal_index_in_flux(e: BaseException) -> bool:
    """The error a ``readonly_shm`` reader gets while the writer rewrites the WAL index."""
    return isinstance(e, apsw.ReadOnlyError) and getattr(e, "extendedresult", 0) in (
        apsw.SQLITE_READONLY_RECOVERY,
        apsw.SQLITE_READONLY_CANTINIT,
    )


# A -wal with no -shm is copied while it stays unchanged; a file rewritten this many times in a
# row while being copied is reported busy.
_COPY_RETRIES = 3


def _same(a: FileStats, b: FileStats) -> bool:
    def key(st: os.stat_result | None) -> tuple[int, int, int, int] | None:
        return None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    return (key(a.db), key(a.wal), a.shm is None) == (key(b.db), key(b.wal), b.shm is None)


def open_readonly(
    path: Path,
    *,
    max_length: int = MAX_VALUE,
    check_schema: bool = True,
    stats: FileStats | None = None,
    private: bool = False,
    held: bool = False,
    judged: bool = False,
) -> ReadConnection:
    """Open an existing session file for reading only: nothing is created, written or locked
    in its directory, a live writer is never blocked, and what is read is the committed state
    (see :class:`ReadConnection` for the three ways). Never ``immutable`` while a ``-wal``
    exists: immutable ignores the WAL and would miss every commit still in it.

    ``stats`` is the caller's :func:`file_stats` of ``path`` taken just before this call (the
    "before" of its own before/after comparison); without it the files are ``lstat``-ed here.
    Either way the same refusals apply to those stats.

    ``private``: ``path`` is already agentdb's own copy in a private directory (salvage), so a
    ``-wal`` without ``-shm`` is read in place (SQLite creates the ``-shm`` there) instead of
    being copied once more.

    ``held``: the caller holds the session (:func:`agentdb.locks.hold`), which denies the
    ``-shm``'s read lock, so a ``-wal`` is read through a private copy even beside a ``-shm``.

    ``judged``: the caller has refused ``stats`` itself, as :func:`require_regular` and
    :func:`require_secure` would (``check`` judges the entry first, to report every problem):
    they are not applied a second time to the same stats, only to any taken here.
    """
    if stats is None:
        stats = file_stats(path)

    def setup(conn: apsw.Connection) -> None:
        conn.limit(apsw.SQLITE_LIMIT_LENGTH, max_length)
        if check_schema:
            refuse_unsafe_schema(conn, path)

    for _ in range(_COPY_RETRIES):
        if not judged:
            require_regular(path, stats.db)
            require_secure(path, stats)
        judged = False  # stats taken after this pass are judged here
        journal = stats.journal  # file_stats takes it too
        if (
            not private
            and _has_content(journal)
            and (stats.wal is None or _journal_header(os.fspath(path) + "-journal"))
        ):
            # A rollback journal: immutable would read pages a dead (or live) writer's
            # transaction left half-written; the committed state is the copy rolled back —
            # and then its -wal applied, if it has one, as SQLite does (and check judges).
            # Beside a -wal only a journal with a header counts (a zeroed one, left by
            # journal_mode=PERSIST, is not rolled back): a live WAL writer is never copied.
            copied = _open_copy(path, stats, setup, "-journal", journal)
            if copied is not None:
                return copied
            stats = file_stats(path)
            continue
        if stats.wal is None:
            uri, how = _uri(path, mode="ro", immutable="1"), "immutable"
        elif stats.shm is not None and not held and stats.db is not None and stats.db.st_size:
            # Never beside an empty file: SQLite deletes the -wal of a database of 0 pages on
            # open, read-only or not (a file that lost its bytes; the -wal holds the session).
            uri, how = _uri(path, mode="ro", readonly_shm="1"), "wal"
        elif private:
            uri, how = _uri(path, mode="ro"), "wal"
        else:
            copied = _open_copy(path, stats, setup)
            if copied is not None:
                return copied
            stats = file_stats(path)  # it changed while copied: judge it again
            continue
        conn = _connect(path, uri, apsw.SQLITE_OPEN_READONLY, setup, cls=ReadConnection)
        assert isinstance(conn, ReadConnection)
        conn.how = how
        return conn
    raise errors.Busy(
        f"{path}: changed again and again while being copied for reading; retry later", path=path
    )


def _has_content(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISREG(st.st_mode) and st.st_size > 0


_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def _journal_header(journal: str) -> bool:
    """The rollback journal starts with its magic (SQLite would roll it back); never follows a
    link or blocks on a FIFO."""
    try:
        fd = os.open(journal, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.pread(fd, 8, 0) == _JOURNAL_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


def _open_copy(
    path: Path,
    stats: FileStats,
    setup: Callable[[apsw.Connection], None],
    suffix: str = "-wal",
    side: os.stat_result | None = None,
) -> ReadConnection | None:
    """Open a private copy of ``path`` and its ``-wal`` (or its ``-journal``, rolled back in
    the copy, then its ``-wal`` too if it has one: SQLite rolls a hot journal back first and
    then applies a ``-wal`` beside the file, whatever the header says). None: they changed
    while copied."""
    side = stats.wal if suffix == "-wal" else side
    assert stats.db is not None and side is not None
    sides = [(suffix, side)]
    if suffix == "-journal" and stats.wal is not None:
        sides.append(("-wal", stats.wal))
    stack = ExitStack()
    try:
        work = stack.enter_context(fsutil.private_workdir("agentdb-read-"))
        copy = work / path.name
        copied = fsutil.copy_private(path, copy, stats.db) and all(
            fsutil.copy_private(sidecar(path, s), sidecar(copy, s), st) for s, st in sides
        )
        unchanged = True
        for s, st in sides:
            now = _lstat(os.fspath(path) + s)
            unchanged = unchanged and (
                now is not None
                and (now.st_ino, now.st_size, now.st_mtime_ns)
                == (st.st_ino, st.st_size, st.st_mtime_ns)
            )
        if not copied or not unchanged or not _same(file_stats(path), stats):
            stack.close()
            return None
        if suffix == "-journal" and not _rolled_back(copy):
            # A journal that is not this database's (check's foreign_journal) or that SQLite
            # cannot roll back: the file alone is what there is to read, as check judges it —
            # with its -wal, if it has one.
            stack.close()
            if stats.wal is not None:
                return _open_copy(path, stats, setup)
            conn = _connect(
                path,
                _uri(path, mode="ro", immutable="1"),
                apsw.SQLITE_OPEN_READONLY,
                setup,
                cls=ReadConnection,
            )
            assert isinstance(conn, ReadConnection)
            return conn
        conn = _connect(
            path, _uri(copy, mode="ro"), apsw.SQLITE_OPEN_READONLY, setup, cls=ReadConnection
        )
    except BaseException:
        stack.close()
        raise
    assert isinstance(conn, ReadConnection)
    conn.how = "copy"
    conn._cleanup = weakref.finalize(conn, stack.close)
    return conn


def _rolled_back(copy: Path) -> bool:
    """Roll the private ``copy``'s journal back, unless the journal is not the database's;
    False, the copy untouched or left as SQLite failed it, when it was not."""
    journal = sidecar(copy, "-journal")
    with open(copy, "rb") as f:
        head = f.read(100)
    with open(journal, "rb") as f:
        if journal_refused(head, f.read(28), os.fstat(f.fileno()).st_size):
            return False
    try:
        return roll_back_checked(copy) is None
    except errors.AgentdbError:
        return False


def journal_refused(db_head: bytes, journal_head: bytes, journal_size: int) -> bool:
    """Whether a hot journal is not the database's, by the rule
    :func:`agentdb.fileformat.journal_problem` words for check (the SQLite layer stays below the
    format readers, so the rule is restated here; ``tests/test_db.py`` holds the two equal):
    SQLite reads its header (one 512-byte sector at least, the magic, a page size that is 0
    or a power of two in 512..65536, a sector size a power of two in 32..65536) and it names
    another page size than the database's header, or an original size of 0 pages (its rollback
    would truncate the session to nothing). A database header that does not parse refuses
    nothing: the rollback may restore it."""
    if journal_size < 512 or len(journal_head) < 28 or journal_head[:8] != _JOURNAL_MAGIC:
        return False
    initial, sector, page_size = struct.unpack(">III", journal_head[16:28])
    if not (page_size == 0 or _power_of_two(page_size, 512)) or not _power_of_two(sector, 32):
        return False
    if len(db_head) < 100 or db_head[:16] != b"SQLite format 3\x00":
        return False
    raw = int.from_bytes(db_head[16:18], "big")
    db_page = 65536 if raw == 1 else raw
    if not _power_of_two(db_page, 512) or db_page - db_head[20] < 480:
        return False
    return page_size not in (0, db_page) or initial == 0


def _power_of_two(n: int, low: int) -> bool:
    return low <= n <= 65536 and n & (n - 1) == 0


@dataclass(frozen=True)
class _JournalView:
    """What a file says of whose it is, read through SQLite (None: that table does not read)."""

    session_ids: tuple[bytes, ...] | None
    event_ids: dict[int, bytes] | None
    dangling: int | None = None  # cost_ledger and plan_items rows naming no event it holds


def _journal_view(path: Path) -> _JournalView:
    """The file's session_meta ids and its events' ids by sequence, read ``immutable`` (a hot
    journal beside it is not rolled back by this read)."""
    try:
        conn = open_private(path, readonly=True)
    except errors.AgentdbError:
        return _JournalView(None, None)
    try:
        try:
            ids: tuple[bytes, ...] | None = tuple(
                r[0]
                for r in conn.execute(
                    "SELECT CAST(session_id AS BLOB) FROM session_meta NOT INDEXED"
                )
            )
        except READ_ERRORS:
            ids = None
        events = event_ids(conn)
        try:
            dangling: int | None = sum(
                scalar(
                    conn,
                    f"SELECT count(*) FROM {t} NOT INDEXED WHERE event_sequence NOT IN "
                    "(SELECT sequence FROM events NOT INDEXED)",
                )
                for t in ("cost_ledger", "plan_items")
            )
        except READ_ERRORS:
            dangling = None
    finally:
        conn.close()
    return _JournalView(ids, events, dangling)


def journal_rollback_foreign(
    before: _JournalView, after: _JournalView, session_id: str
) -> str | None:
    """Why a hot journal's rollback (done in a private copy) shows it is another session's
    journal, from the content: None when nothing says so. The rule (docs/recover.md, "A hot
    journal that is not this file's"):

    * the rolled-back state's ``session_meta`` names a valid session id other than the file's
      (its name), or names none where the file alone named this one;
    * an event the file alone holds changes its id under the rollback: events are only ever
      appended (no transaction of a session rewrites an event's id, a migration keeps them), so
      a journal that restores another id at the same sequence restores another log's pages;
    * the rollback leaves ``cost_ledger`` or ``plan_items`` rows naming events it does not hold
      where the file alone had none: a rollback gives a committed state, whose rows name their
      events (the killed transaction cannot have removed an event: none is ever deleted).

    Rows that do not read (a damaged file) are no evidence either way."""
    mine = session_id.encode()
    if after.session_ids is not None:
        for raw in after.session_ids:
            if not isinstance(raw, bytes) or raw == mine:
                continue
            try:
                other = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if paths.is_valid_id(other):
                return f"rolled back, it gives session_meta {other}; the file is {session_id}"
        if before.session_ids == (mine,) and mine not in after.session_ids:
            return f"rolled back, it gives no session_meta row for {session_id}, as the file has"
    if before.event_ids is not None and after.event_ids is not None:
        changed = [
            seq
            for seq, eid in after.event_ids.items()
            if seq in before.event_ids and before.event_ids[seq] != eid
        ]
        if changed:
            return (
                f"rolled back, {len(changed)} event(s) change their id (first at sequence "
                f"{min(changed)}): events are only appended, so it restores another log's pages"
            )
    if before.dangling == 0 and after.dangling:
        return (
            f"rolled back, {after.dangling} cost_ledger/plan_items row(s) name events it does "
            "not hold, where the file alone has none"
        )
    return None


def event_ids(conn: apsw.Connection) -> dict[int, bytes] | None:
    """The events' ids by sequence, read from the table itself (an index may disagree with
    it); None when the table does not read."""
    try:
        return {
            r[0]: r[1]
            for r in conn.execute("SELECT sequence, CAST(id AS BLOB) FROM events NOT INDEXED")
            if type(r[0]) is int
        }
    except READ_ERRORS:
        return None


def wal_behind(through_wal: dict[int, bytes] | None, alone: dict[int, bytes] | None) -> str | None:
    """Why a ``-wal`` is not this file's current WAL, from the events read through it and from
    the file alone (None when either does not read, or nothing says so). Events are only ever
    appended, and a checkpoint only copies a WAL's commits into the file, so the state read
    through this file's WAL holds every event the file alone holds: a WAL that drops one
    would move the file behind commits it already holds (an earlier generation's WAL, or
    another session's) — SQLite would read that older state, and the next open checkpoint it
    over the newer pages. (An id that changes is :func:`agentdb.checks.walevidence`'s.)"""
    if through_wal is None or alone is None or not through_wal:
        return None
    dropped = [s for s in alone if s not in through_wal]
    if not dropped:
        return None
    # An earlier generation's state is the file's own history cut short: the events both hold
    # carry the same ids, and what it lacks is the file's tail, right after its own last
    # event. Anything else (another session's page in the file, damage) is no such evidence.
    top = max(through_wal)
    if min(dropped) != top + 1 or any(s < top for s in dropped):
        return None
    if any(through_wal[s] != alone[s] for s in alone.keys() & through_wal.keys()):
        return None
    return (
        f"read through it, the file loses {len(dropped)} of its {len(alone)} events (first "
        f"sequence {min(dropped)}): the file alone holds newer commits — an earlier "
        "generation's WAL"
    )


def chain_whole(conn: apsw.Connection, session_id: str) -> bool:
    """The events read through ``conn`` (revision 3) form one unbroken chain of this session:
    consecutive sequences, the first linked from ``session_id``'s genesis, each ``prev_hash``
    the chain hash before it, and ``session_chain``'s head naming the last. Such a state is
    this session's whole (a WAL that gives it is not another session's, whatever pages of the
    file alone say). False when anything does not read or link (revision 1 or 2 included)."""
    try:
        expected, last = hashing.genesis(session_id), None
        for seq, prev, link in conn.execute(
            "SELECT sequence, prev_hash, chain_hash FROM events NOT INDEXED ORDER BY sequence"
        ):
            if prev != expected or (last is not None and seq != last + 1):
                return False
            expected, last = link, seq
        head = conn.execute("SELECT head_sequence, head_hash FROM session_chain").fetchall()
    except READ_ERRORS:
        return False
    return last is not None and head == [(last, expected)]


def roll_back_checked(path: Path) -> str | None:
    """Roll back the hot journal beside ``path`` (a private copy agentdb owns, named as the
    session file) unless its content shows it is another session's: the problem then (``path``
    is left rolled back; the caller reads the original instead), else None. Raises what
    :func:`roll_back_private` raises."""
    session_id = paths.session_id_of(path.name)
    before = _journal_view(path) if session_id is not None else None
    roll_back_private(path)
    if session_id is None or before is None:
        return None
    return journal_rollback_foreign(before, _journal_view(path), session_id)


def roll_back_private(path: Path) -> None:
    """Roll back the hot journal beside ``path``, a private copy agentdb owns (never a session
    file): SQLite does it on the first read of a read-write connection. Raises what SQLite
    raises (translated) when it cannot."""
    conn = open_private(path)
    try:
        with translated(path):
            scalar(conn, "SELECT count(*) FROM sqlite_schema")
    finally:
        conn.close()


# ---------------------------------------------------------------------------- attached reads

# The schema name a file is ATTACHed under on this process's shared reader.
ATTACHED = "s"
_SHARED: tuple[int, apsw.Connection] | None = None  # (pid that made it, the connection)


def shared_reader() -> apsw.Connection:
    """This process's one hardened reader: an in-memory main database, hardened once (defensive
    mode, ``trusted_schema`` off, triggers and views disabled, limits, ``cell_size_check``,
    ``mmap_size=0`` for every database attached later, the SQL functions), URI names on, the
    value-size cap and the busy timeout. Session files are ATTACHed to it one at a time
    (:func:`attached_immutable`): a file costs an ATTACH instead of a connection made and
    hardened for it. Made again in a forked child (a connection is never shared across fork)."""
    global _SHARED
    pid = os.getpid()
    if _SHARED is None or _SHARED[0] != pid:
        conn = apsw.Connection(
            ":memory:",
            flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI,
        )
        harden(conn)
        conn.limit(apsw.SQLITE_LIMIT_LENGTH, MAX_VALUE)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        _SHARED = (pid, conn)
    return _SHARED[1]


def _drop_shared() -> None:
    global _SHARED
    if _SHARED is not None and _SHARED[0] == os.getpid():
        _SHARED[1].close(True)
    _SHARED = None


class attached_immutable:  # named as the function it replaced: ``with attached_immutable(p)``
    """The database file ``path`` ATTACHed read-only and ``immutable`` (no locks, nothing
    created or written beside it) to :func:`shared_reader`, as schema :data:`ATTACHED`; detached
    on leaving. Only for a file the caller has judged (a regular file, owner-only, no link) and
    whose ``lstat`` showed no ``-wal``, ``-shm`` or ``-journal``: immutable ignores a WAL, so the
    caller compares ``lstat`` before and after, as for :func:`open_readonly`'s ``immutable``.
    Statements must name the schema (``s.sqlite_schema``, ``PRAGMA s.user_version``) where
    SQLite would otherwise use the empty main database; a table name alone finds the file's.
    Raises APSW's errors untranslated (the caller decides what they mean).

    A class, not a generator-based context manager, and the URI's query fixed: both are paid
    per file of ``check --all`` (measured: ~14 µs per file less in the loaded, cache-cold
    loop, though ~3 µs alone)."""

    __slots__ = ("conn", "path")

    def __init__(self, path: Path | str) -> None:
        self.path = path

    def __enter__(self) -> apsw.Connection:
        conn = shared_reader()
        conn.execute(_ATTACH, (_uri_path(self.path) + "?mode=ro&immutable=1",))
        self.conn = conn
        return conn

    def __exit__(self, *exc: object) -> None:
        try:
            self.conn.execute(_DETACH)
        except apsw.Error:
            _drop_shared()  # a statement left open on the file: the next file gets a new one


_ATTACH = f"ATTACH ? AS {ATTACHED}"
_DETACH = f"DETACH {ATTACHED}"


def open_readonly_alone(path: Path) -> ReadConnection:
    """The database file alone, its ``-wal`` ignored (``immutable``: no locks, no sidecars).

    For judging a WAL that may belong to another database: what the file holds without it.
    Only for a file nobody has open; the same refusals as :func:`open_readonly` apply.
    """
    stats = file_stats(path)
    require_regular(path, stats.db)
    require_secure(path, stats)

    def setup(conn: apsw.Connection) -> None:
        conn.limit(apsw.SQLITE_LIMIT_LENGTH, MAX_VALUE)

    uri = _uri(path, mode="ro", immutable="1")
    conn = _connect(path, uri, apsw.SQLITE_OPEN_READONLY, setup, cls=ReadConnection)
    assert isinstance(conn, ReadConnection)
    return conn


def open_writer(path: Path, *, create: bool = False) -> apsw.Connection:
    """Open (or with ``create``, exclusively create) a session file for the kernel's writes.

    The connection is hardened and has its busy timeout, but journal mode and the other
    durability pragmas are set by :func:`configure_writer` after the caller has checked the
    file's identity: a foreign file must not be switched to WAL.
    """
    fsutil.ensure_dir(path.parent)
    if create:
        try:
            fsutil.create_exclusive(path)
        except FileExistsError:
            raise errors.SessionExists(
                f"{path}: already exists; refusing to create a session over it", path=path
            ) from None
        fsutil.fsync_dir(path.parent)

    def setup(conn: apsw.Connection) -> None:
        try:
            refuse_unsafe_schema(conn, path)  # the first read: waits while a job holds it
        except BaseException:
            if has_moved(conn):
                raise _Moved from None
            raise
        if has_moved(conn):
            raise _Moved

    for _ in range(_MOVED_RETRIES):
        require_regular(path)
        require_secure(path)
        try:
            return _connect(path, _uri(path), apsw.SQLITE_OPEN_READWRITE, setup)
        except _Moved:
            continue
    raise errors.Busy(f"{path}: replaced again and again while opening; retry later", path=path)


def open_held(path: Path) -> apsw.Connection:
    """Open a session for writing while the caller holds it with :func:`agentdb.locks.hold`.

    The hold is an open-file-description lock that every SQLite connection's POSIX locks
    conflict with, this process's included; so this connection takes no file lock at all
    (the ``unix-none`` VFS) and keeps its WAL index in its own memory (``locking_mode``
    ``EXCLUSIVE``): while the hold lasts nobody else can open the file. The caller has judged
    the file (identity, integrity, revision); the connection is hardened, with the writer's
    durability settings. Closing it checkpoints the WAL into the file and removes it.
    """
    require_regular(path)
    require_secure(path)

    def setup(conn: apsw.Connection) -> None:
        exec_script(conn, "PRAGMA locking_mode=EXCLUSIVE")
        refuse_unsafe_schema(conn, path)
        exec_script(conn, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON")

    return _connect(path, _uri(path), apsw.SQLITE_OPEN_READWRITE, setup, vfs="unix-none")


# SQLite opens the path before it takes a lock: a job holding the file (recover, prune) may
# rename another file over the path, or unlink it, while the first read waits for the lock.
_MOVED_RETRIES = 5


class _Moved(Exception):
    """The path no longer names the file a new connection has open: open it again."""


def has_moved(conn: apsw.Connection) -> bool:
    """True when the path ``conn`` was opened with no longer names the file it has open.

    SQLITE_FCNTL_HAS_MOVED: the unix VFS compares ``stat(path)`` with the open inode. Such a
    connection must not write (it would write into a ``.corrupt`` copy or a deleted file, with
    a WAL named after the path); SQLite itself neither checkpoints nor deletes that WAL on close.
    """
    # the int SQLite writes into, in an array: its address without ctypes, whose import cost
    # every command that records a verdict 2 ms of start-up
    flag = array.array("i", [0])
    conn.file_control("main", apsw.SQLITE_FCNTL_HAS_MOVED, flag.buffer_info()[0])
    return bool(flag[0])


def _connect(
    path: Path,
    uri: str,
    flags: int,
    setup: Callable[[apsw.Connection], None],
    *,
    cls: type[apsw.Connection] = apsw.Connection,
    vfs: str | None = None,
) -> apsw.Connection:
    """Open ``uri``, harden the connection, give it the busy timeout and run ``setup``; on any
    failure the connection is closed and APSW's error translated."""
    try:
        conn = cls(uri, flags=flags | apsw.SQLITE_OPEN_URI, vfs=vfs)
    except apsw.Error as e:
        raise translate(e, path) from e
    try:
        harden(conn)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        setup(conn)
    except READ_ERRORS as e:
        failure = translate(e, path, conn)  # before close: the connection knows the errno
        conn.close()
        raise failure from e
    except BaseException:
        conn.close()
        raise
    return conn


def open_memory() -> apsw.Connection:
    """A hardened in-memory database (schema fingerprints, scratch work that never touches disk)."""
    conn = apsw.Connection(":memory:")
    harden(conn)
    return conn


def open_private(path: Path, *, readonly: bool = False) -> apsw.Connection:
    """Open (creating when ``readonly`` is false) a database agentdb itself owns and no one else
    uses: scratch databases in agentdb's private 0700 directories, the shell self-test file,
    the demo's own files. Hardened like every connection; no busy timeout (nobody else holds it).
    ``readonly`` opens a closed file ``immutable`` (no locks, no sidecars)."""
    if readonly:
        uri = _uri(path, mode="ro", immutable="1")
        flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    else:
        uri = _uri(path)
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI
    try:
        conn = apsw.Connection(uri, flags=flags)
    except apsw.Error as e:
        raise translate(e, path) from e
    try:
        harden(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def configure_writer(conn: apsw.Connection, path: Path) -> None:
    """WAL, ``synchronous=FULL``, foreign keys on (the spec's and the contract's settings)."""
    with translated(path):
        mode = pragma(conn, "journal_mode=WAL")
        if str(mode).lower() != "wal":
            raise errors.Unreadable(f"{path}: cannot switch to WAL (journal_mode is {mode})")
        exec_script(conn, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON")


def integrity_problems(conn: apsw.Connection, *, quick: bool = False, limit: int = 20) -> list[str]:
    """The lines ``PRAGMA integrity_check`` (or ``quick_check``) reports; empty when healthy."""
    name = "quick_check" if quick else "integrity_check"
    rows = [str(r[0]) for r in conn.execute(f"PRAGMA {name}({int(limit)})")]
    return [] if rows == ["ok"] else rows


def allow_only(
    conn: apsw.Connection, allowed: Callable[[int, str | None, str | None], bool]
) -> None:
    """Install an authorizer that denies every action ``allowed(code, arg1, arg2)`` rejects."""

    def authorizer(
        code: int, a1: str | None, a2: str | None, _db: str | None, _trig: str | None
    ) -> int:
        return apsw.SQLITE_OK if allowed(code, a1, a2) else apsw.SQLITE_DENY

    conn.authorizer = authorizer


def backup_to(src: apsw.Connection, dest: Path) -> None:
    """Copy ``src``'s main database into the new file ``dest`` (created 0600; must not exist).

    SQLite's online backup API in one pass (``step(-1)``): the copy is made inside one read
    transaction on ``src``, so it is a transaction-consistent snapshot even while another
    connection keeps committing (WAL lets the writer go on). A stepped backup would restart at
    every commit of another connection and might never finish under a busy writer. The copy is
    switched to rollback-journal mode (a self-contained single file that opens without ``-wal``
    or ``-shm``) and fsynced; the caller fsyncs the directory and renames it into place.
    """
    # Exclusive 0600 create under any umask; no fsync yet (the complete copy is fsynced below).
    try:
        fd = os.open(dest, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise
    except OSError as e:
        raise fsutil.os_error(e, dest, "create") from e
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    try:
        conn = apsw.Connection(str(dest), flags=apsw.SQLITE_OPEN_READWRITE)
        try:
            harden(conn)
            with translated(dest, conn):
                # The copy is a temporary file until the caller renames it: no journal, no
                # syncs while it is written; it is fsynced once, below, when complete.
                exec_script(conn, "PRAGMA synchronous=OFF; PRAGMA journal_mode=OFF")
                with conn.backup("main", src, "main") as b:
                    b.step(-1)
                pragma(conn, "journal_mode=DELETE")
        finally:
            conn.close()
        try:
            fsutil.fsync_file(dest)
        except OSError as e:
            raise fsutil.os_error(e, dest) from e
    except BaseException:
        for p in (dest, sidecar(dest, "-wal"), sidecar(dest, "-shm"), sidecar(dest, "-journal")):
            p.unlink(missing_ok=True)
        raise
