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
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agentdb import fsutil
from agentdb.errors import SessionLive
from agentdb.paths import sidecar

PENDING_BYTE = 0x40000000
LOCK_RANGE = 512  # PENDING, RESERVED and the 510-byte SHARED range
SHM_LOCK_START = 120  # WALINDEX_LOCK_OFFSET: 8 lock bytes then the DMS byte at 128
SHM_LOCK_LEN = 9

# Why opening a session for the lock can fail that is no sign of another user of it.
_SYSTEM_REFUSALS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.ENOSPC)

_FLOCK = "@hhqqi4x"  # struct flock on Linux: type, whence, start, len, pid


@dataclass(frozen=True)
class Holder:
    """A lock that someone else holds on a session."""

    file: str  # which file the lock is on: the database or its -shm
    pid: int | None  # the holding process (None for an OFD lock, whose owner is not a process)
    exclusive: bool  # a write lock (a writer mid-commit, or another agentdb job acting on it)


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


def probe(db_path: Path) -> Holder | None:
    """Who, if anyone, has this session open right now. Takes no lock, changes nothing.

    Do not call this from a process that has the same file open through SQLite: POSIX locks
    are per process, so a process never sees its own.
    """
    holder = _probe_file(db_path, PENDING_BYTE, LOCK_RANGE)
    if holder is not None:
        return holder
    # A missing -shm (or one that cannot be opened) holds no lock: _probe_file says None.
    return _probe_file(os.fspath(db_path) + "-shm", SHM_LOCK_START, SHM_LOCK_LEN)


@contextmanager
def hold(db_path: Path) -> Iterator[int]:
    """Hold the session so that no SQLite connection can open it until the block ends.

    Raises :class:`SessionLive` if someone has it open (or another agentdb job holds it).
    Yields the descriptor that carries the lock; read the file through it (``os.pread``) if
    needed, never through a new descriptor and never through SQLite while held.
    """
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
        shm = sidecar(db_path, "-shm")
        if shm.exists() and _probe_file(shm, SHM_LOCK_START, SHM_LOCK_LEN) is not None:
            raise SessionLive(
                f"{shm}: session's WAL index is in use; stop the process using it, or retry later",
                path=db_path,
            )
        yield fd
    finally:
        os.close(fd)  # closing the description releases its OFD lock
