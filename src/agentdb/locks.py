"""Is someone using this session? Probe without disturbing, or hold a lock to act.

SQLite's unix VFS takes POSIX record locks: a connection with a WAL database open holds a read
lock on the database file's SHARED range (from byte 0x40000002, 510 bytes) and on byte 128 of
the ``-shm`` file. We look at and take those locks with Linux *open file description* (OFD)
locks: they conflict with SQLite's POSIX locks, even from this process, and unlike POSIX locks
they are not dropped when some other descriptor of the same file is closed.

``probe`` asks the kernel who holds a conflicting lock (F_OFD_GETLK) and takes nothing.
``hold`` write-locks the whole PENDING/RESERVED/SHARED range, so any SQLite connection that
tries to start reading gets SQLITE_BUSY until we let go: acting on a session under ``hold`` is
not check-then-act.

The sole writer's *lease* (:class:`Lease`, taken by ``SessionWriter``): an OFD write lock on
one byte, :data:`LEASE_BYTE`, of the database file, so a second writer — from this process or
another — is refused with :class:`~agentdb.errors.SessionBusy`. OFD locks carry no pid, so the
holder also takes a POSIX read lock on :data:`LEASE_PID_BYTE`, which F_OFD_GETLK reports with
the holder's pid. A POSIX lock is dropped when its process closes *any* descriptor of the file:
the holder's process must never open and close another descriptor of a leased file, so
``probe``, ``hold`` and a second lease in that process answer from :data:`_LEASES` without
opening the file (SQLite's own connections keep their descriptors open while it holds locks).

Why those two bytes are safe: SQLite's unix VFS locks only the 512 bytes from PENDING_BYTE
(``0x40000000``, the same range ``hold`` takes) on the database and bytes 120..128 of the
``-shm``; nothing locks bytes beyond, and with the default 4096-byte pages SQLite never stores
data in the page holding PENDING_BYTE. Linux record locks are advisory, so locking a byte — even
one inside data, or past the end of the file — changes no read or write of it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from agentdb import fsutil
from agentdb.errors import FileSystemError, SessionBusy, SessionLive
from agentdb.paths import sidecar

PENDING_BYTE = 0x40000000
LOCK_RANGE = 512  # PENDING, RESERVED and the 510-byte SHARED range
SHM_LOCK_START = 120  # WALINDEX_LOCK_OFFSET: 8 lock bytes then the DMS byte at 128
SHM_LOCK_LEN = 9
# The sole writer's lease and the byte that names its pid: past SQLite's (and hold's) 512 bytes,
# inside the page SQLite leaves unused at PENDING_BYTE (see the module docstring).
LEASE_BYTE = PENDING_BYTE + 0x400
LEASE_PID_BYTE = LEASE_BYTE + 1

# Why opening a session for the lock can fail that is no sign of another user of it.
_SYSTEM_REFUSALS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.ENOSPC)

_FLOCK = "@hhqqi4x"  # struct flock on Linux: type, whence, start, len, pid


@dataclass(frozen=True)
class Holder:
    """A lock that someone else holds on a session."""

    file: str  # which file the lock is on: the database or its -shm
    pid: int | None  # the holding process (None for an OFD lock, whose owner is not a process)
    exclusive: bool  # a write lock (a writer mid-commit, or another agentdb job acting on it)
    lease: bool = False  # the holder is a SessionWriter holding the sole-writer lease


def _getlk(fd: int, start: int, length: int) -> tuple[int, int] | None:
    req = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
    res = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, req)
    ltype, _, _, _, pid = struct.unpack(_FLOCK, res)
    if ltype == fcntl.F_UNLCK:
        return None
    return ltype, pid


def _probe_file(path: Path | str, start: int, length: int) -> Holder | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        got = _getlk(fd, start, length)
    finally:
        os.close(fd)
    if got is None:
        return None
    ltype, pid = got
    return Holder(os.path.basename(path), pid if pid > 0 else None, ltype == fcntl.F_WRLCK)


def _lease_pid(fd: int) -> int | None:
    """The pid the lease holder recorded on LEASE_PID_BYTE, if it is there."""
    got = _getlk(fd, LEASE_PID_BYTE, 1)
    return got[1] if got is not None and got[1] > 0 else None


def probe(db_path: Path | str) -> Holder | None:
    """Who, if anyone, has this session open right now. Takes no lock, changes nothing.

    A writer's lease is reported first (``lease=True``, with the writer's pid), then SQLite's
    locks on the database, then on its ``-shm``. Besides a lease this process holds (answered
    without opening the file), do not call this from a process that has the same file open
    through SQLite: POSIX locks are per process, so a process never sees its own, and closing
    the probe's descriptor drops them.
    """
    if _own_lease(db_path) is not None:  # before any descriptor: closing one drops its lock
        return Holder(os.path.basename(db_path), os.getpid(), True, lease=True)
    try:
        fd = os.open(db_path, OPEN_FLAGS)
    except OSError:
        fd = None
    try:
        return probe_open(fd, db_path)
    finally:
        if fd is not None:
            os.close(fd)


# How a probe opens a database file: never following a link, never blocking on a FIFO.
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def probe_open(fd: int | None, db_path: Path | str) -> Holder | None:
    """:func:`probe` through ``fd``, the caller's descriptor of ``db_path`` opened with
    :data:`OPEN_FLAGS` (None: it could not be opened), kept open by the caller across a probe
    before and one after an immutable read (which takes no lock), so the file is opened once.
    The caller has asked :func:`leased_here` first: a process holding the file's lease must
    not open (and close) a descriptor of it."""
    if _own_lease(db_path) is not None:
        return Holder(os.path.basename(db_path), os.getpid(), True, lease=True)
    if fd is not None:
        if _getlk(fd, LEASE_BYTE, 1) is not None:
            return Holder(os.path.basename(db_path), _lease_pid(fd), True, lease=True)
        got = _getlk(fd, PENDING_BYTE, LOCK_RANGE)
        if got is not None:
            ltype, pid = got
            return Holder(
                os.path.basename(db_path), pid if pid > 0 else None, ltype == fcntl.F_WRLCK
            )
    # A missing -shm (or one that cannot be opened) holds no lock: _probe_file says None.
    return _probe_file(os.fspath(db_path) + "-shm", SHM_LOCK_START, SHM_LOCK_LEN)


def wait_free(db_path: Path, seconds: float) -> Holder | None:
    """:func:`probe` until nobody holds the session or ``seconds`` have passed; the last answer.

    A lease this process holds is answered at once (waiting for ourselves would never end).
    Polls every 50 ms, backing off to 250 ms; takes no lock, changes nothing.
    """
    deadline = time.monotonic() + max(0.0, seconds)
    pause = 0.05
    while True:
        holder = probe(db_path)
        if holder is None or (holder.lease and holder.pid == os.getpid()):
            return holder
        left = deadline - time.monotonic()
        if left <= 0:
            return holder
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.25)


@contextmanager
def hold_waiting(db_path: Path, seconds: float) -> Iterator[int]:
    """:func:`hold`, retried while the session is live for up to ``seconds`` (``--wait``); then
    :class:`SessionLive` as from :func:`hold`. Any other error is raised at once."""
    deadline = time.monotonic() + max(0.0, seconds)
    pause = 0.05
    while True:
        stack = ExitStack()
        try:
            fd = stack.enter_context(hold(db_path))
        except SessionLive:
            left = deadline - time.monotonic()
            if left <= 0 or _own_lease(db_path) is not None:
                raise
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.25)
            continue
        with stack:
            yield fd
        return


@contextmanager
def hold(db_path: Path) -> Iterator[int]:
    """Hold the session so that no SQLite connection can open it until the block ends.

    Raises :class:`SessionLive` if someone has it open (or another agentdb job holds it), and
    always while a writer holds its lease. Yields the descriptor that carries the lock; read
    the file through it (``os.pread``) if needed, never through a new descriptor and never
    through SQLite while held.
    """
    if _own_lease(db_path) is not None:
        raise SessionLive(
            f"{db_path}: this process's own writer holds the session; close it first",
            path=db_path,
        )
    try:
        fd = os.open(db_path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in _SYSTEM_REFUSALS:  # not someone else's use: the system's (read-only, ...)
            raise fsutil.os_error(e, db_path, "open to lock") from e
        raise SessionLive(f"{db_path}: cannot open to lock ({e.strerror})", path=db_path) from e
    try:
        req = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, PENDING_BYTE, LOCK_RANGE, 0)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, req)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                holder = _getlk(fd, PENDING_BYTE, LOCK_RANGE)
                who = f" by pid {holder[1]}" if holder and holder[1] > 0 else ""
                raise SessionLive(
                    f"{db_path}: session is open{who}; stop the process using it, or retry later",
                    path=db_path,
                ) from e
            raise
        if _getlk(fd, LEASE_BYTE, 1) is not None:
            # Belt and braces: a leaseholder also holds SQLite's SHARED lock (WAL), which the
            # range lock above already met, and it takes the lease only while holding that.
            pid = _lease_pid(fd)
            who = f" by pid {pid}" if pid else ""
            raise SessionLive(
                f"{db_path}: a writer holds the session{who}; stop it, or retry later",
                path=db_path,
            )
        shm = sidecar(db_path, "-shm")
        if shm.exists() and _probe_file(shm, SHM_LOCK_START, SHM_LOCK_LEN) is not None:
            raise SessionLive(
                f"{shm}: session's WAL index is in use; stop the process using it, or retry later",
                path=db_path,
            )
        yield fd
    finally:
        os.close(fd)  # closing the description releases its OFD lock


# ------------------------------------------------------------------------------ the lease

# Leases this process holds, by (st_dev, st_ino): checked before any descriptor is opened, so
# the holder's process never opens and closes another descriptor of the file (which would drop
# its POSIX locks: the pid byte's and SQLite's own).
_LEASES: dict[tuple[int, int], Lease] = {}
_LEASES_LOCK = threading.Lock()


def _key(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def leased_here(db_path: Path | str) -> bool:
    """This process holds the sole-writer lease of ``db_path`` (answered without opening it)."""
    return _own_lease(db_path) is not None


def _own_lease(db_path: Path | str) -> Lease | None:
    if not _LEASES:
        return None
    try:
        st = os.lstat(db_path)
    except OSError:
        return None
    with _LEASES_LOCK:
        return _LEASES.get(_key(st))


def _busy(db_path: Path | str, pid: int | None) -> SessionBusy:
    if pid == os.getpid():
        who = f"another SessionWriter in this process (pid {pid})"
    elif pid:
        who = f"the writer with pid {pid}"
    else:
        who = "another writer"
    return SessionBusy(
        f"{db_path}: {who} holds this session's writer lease and keeps writing; a session has "
        "one writer — use that one, or open it again once it is closed",
        path=db_path,
        pid=pid,
    )


class Lease:
    """The sole-writer lease on one session file, from :meth:`acquire` until :meth:`release`.

    ``check`` then ``acquire``: open the descriptor early (``check``: refuse at once when
    another writer holds the lease, before any integrity check), take the lock last (after the
    integrity check and any automatic recovery, so the recovery hook never meets its own
    kernel's lease). The descriptor is ``O_CLOEXEC``: a plugin started as a child process does
    not inherit it and cannot keep a dead kernel's session "live" (a child made by ``fork``
    without ``exec`` shares the open file description, and with it the lease, until it exits).

    A refused ``check``/``acquire`` closes its descriptor: that drops any POSIX lock this
    process holds on the file, so a process should not keep its own SQLite connections to a
    session another process writes while it tries to become that session's writer.
    """

    def __init__(self, db_path: Path) -> None:
        self.path = db_path
        self.fd: int | None = None  # open from check() to release(); carries the locks
        self.key: tuple[int, int] | None = None  # the (dev, ino) the lock is on, once held

    def check(self) -> None:
        """Raise :class:`SessionBusy` if a writer holds the lease now; keeps the descriptor."""
        own = _own_lease(self.path)
        if own is not None:
            raise _busy(self.path, os.getpid())
        try:
            self._open()
        except (SessionBusy, FileSystemError):
            return  # missing, a symlink, a FIFO...: the SQLite open that follows says what it is
        assert self.fd is not None
        if _getlk(self.fd, LEASE_BYTE, 1) is not None:
            pid = _lease_pid(self.fd)
            self._close()
            raise _busy(self.path, pid)

    def _open(self) -> None:
        """Open the session file (a regular file only: never a device, FIFO or symlink)."""
        try:
            st = os.lstat(self.path)
            if not stat.S_ISREG(st.st_mode):
                raise SessionBusy(f"{self.path}: not a regular file; retry", path=self.path)
            self.fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise fsutil.os_error(e, self.path, "open for the writer lease") from e

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def acquire(self) -> None:
        """Take the lease on the file the path names now (after recovery, that may be a new
        inode); raise :class:`SessionBusy` naming the holder if someone else has it."""
        try:
            st = os.lstat(self.path)
        except OSError as e:
            raise fsutil.os_error(e, self.path, "open for the writer lease") from e
        if not stat.S_ISREG(st.st_mode):
            raise SessionBusy(f"{self.path}: replaced while opening; retry", path=self.path)
        if self.fd is not None and _key(os.fstat(self.fd)) != _key(st):
            self._close()  # the original was renamed away (recovered): lock the new file
        if self.fd is None:
            self._open()
        assert self.fd is not None
        if _key(os.fstat(self.fd)) != _key(st):
            raise SessionBusy(f"{self.path}: replaced while opening; retry", path=self.path)
        with _LEASES_LOCK:
            if _key(st) in _LEASES:
                raise _busy(self.path, os.getpid())
            req = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, LEASE_BYTE, 1, 0)
            try:
                fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, req)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise _busy(self.path, _lease_pid(self.fd)) from e
            # The pid for a second opener to read: a POSIX read lock, owned by this process.
            pid_req = struct.pack(_FLOCK, fcntl.F_RDLCK, os.SEEK_SET, LEASE_PID_BYTE, 1, 0)
            try:
                fcntl.fcntl(self.fd, fcntl.F_SETLK, pid_req)
            except OSError:
                pass  # the lease holds without it; a second opener just cannot name the pid
            self.key = _key(st)
            _LEASES[self.key] = self

    @property
    def held(self) -> bool:
        return self.key is not None

    def release(self) -> None:
        """Let go (closing the descriptor releases both locks). Idempotent."""
        with _LEASES_LOCK:
            if self.key is not None and _LEASES.get(self.key) is self:
                del _LEASES[self.key]
            self.key = None
            self._close()
