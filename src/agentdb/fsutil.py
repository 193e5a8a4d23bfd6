"""File-system steps every job shares.

* Safe opens of the files agentdb keeps beside the sessions (the recovery log, intent files,
  scratch, temporary and backup copies): :func:`open_regular` never follows a symlink, never
  blocks on a FIFO and accepts only a regular file; :func:`read_regular` and :func:`iter_lines`
  never read more than a caller's cap.
* OS errors as one line naming the file, the error and the fix (:func:`os_error`).
* Hard links: :func:`refuse_hard_linked` for jobs that rewrite a session in place.
* Crash-safe creation: owner-only files and directories, fsync of files and directories.

Size: over 500 lines because it is the file-system steps every job shares (safe opens, fsync,
private work directories and their sweep); each is small, and moving one out gives two modules
every job imports.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shlex
import stat
from collections.abc import Iterator
from pathlib import Path

from agentdb import errors, paths
from agentdb.paths import DIR_MODE, FILE_MODE

# ---------------------------------------------------------------------------- safe opens

# Never follow a symlink, never wait for a FIFO's other end, never adopt a terminal.
_SAFE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
# What a refused open of something that is not a regular file fails with.
_NOT_REGULAR_ERRNOS = (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.ENOTDIR)


def kind_of(mode: int) -> str:
    """What a non-regular entry is, in words."""
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "regular file" if stat.S_ISREG(mode) else "special file"


def not_regular(path: Path | str, mode: int) -> errors.NotRegularFile:
    return errors.NotRegularFile(
        problem=f"is a {kind_of(mode)}, not a regular file",
        fix="agentdb does not follow or open it — move it away",
        path=path,
    )


def open_regular(path: Path | str, flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> int:
    """Open a file that is not a session the way session files are opened: never through a
    symlink (``O_NOFOLLOW``), never blocking on a FIFO (``O_NONBLOCK``, cleared once open),
    and only a regular file (``fstat`` after the open). Returns the descriptor.

    Raises :class:`~agentdb.errors.NotRegularFile` for anything else, ``OSError`` otherwise.
    """
    try:
        fd = os.open(path, flags | _SAFE_FLAGS, mode)
    except OSError as e:
        if e.errno in _NOT_REGULAR_ERRNOS:
            try:
                st = os.lstat(path)
            except OSError:
                raise e from None
            if not stat.S_ISREG(st.st_mode):
                raise not_regular(path, st.st_mode) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path | str, limit: int | None = None) -> bytes:
    """The bytes of a regular file (see :func:`open_regular`): at most ``limit`` of them, or
    with no ``limit`` the size it had when opened (a file that keeps growing is not followed).

    Raises ``FileNotFoundError`` when absent and :class:`~agentdb.errors.NotRegularFile` when
    the file is larger than ``limit`` (nothing beyond the cap is read).
    """
    fd = open_regular(path)
    try:
        data = read_fd(fd, os.fstat(fd).st_size if limit is None else limit + 1)
    finally:
        os.close(fd)
    if limit is not None and len(data) > limit:
        raise errors.NotRegularFile(
            f"{path}: larger than {limit} bytes, more than agentdb reads from it; move it away",
            path=path,
        )
    return data


def read_fd(fd: int, limit: int, offset: int = 0) -> bytes:
    """Up to ``limit`` bytes from ``offset`` of an open file, whatever its size claims."""
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        chunk = os.pread(fd, min(1 << 24, limit - got), offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte (a short write, as under a file size limit, is continued: the error
    comes from the next write instead of leaving a silently truncated file)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def iter_lines(fd: int, max_line: int, offset: int = 0, *, limit: int) -> Iterator[bytes]:
    """The lines in ``limit`` bytes of an open file from ``offset``; a line longer than
    ``max_line`` is skipped without ever being held whole (memory stays within ``max_line``
    plus one chunk), and a file that keeps growing is not followed past ``limit``."""
    buf = b""
    skipping = False
    pos = offset
    end = offset + limit
    while pos < end:
        chunk = os.pread(fd, min(1 << 16, end - pos), pos)
        if not chunk:
            break
        pos += len(chunk)
        buf += chunk
        start = 0
        while (nl := buf.find(b"\n", start)) >= 0:
            line, start = buf[start : nl + 1], nl + 1
            if skipping:
                skipping = False  # the rest of an over-long line
            elif len(line) <= max_line:
                yield line
        buf = buf[start:]
        if len(buf) > max_line:
            buf = b""
            skipping = True
    if buf and not skipping and len(buf) <= max_line:
        yield buf


# ---------------------------------------------------------------------------- OS errors


@contextlib.contextmanager
def naming(path: Path | str) -> Iterator[None]:
    """An ``OSError`` from the block that names no file (``write``, ``fsync`` on a descriptor)
    is raised again naming ``path``, so its one-line message says which file failed."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno:
            raise OSError(e.errno, e.strerror, os.fspath(path)) from e
        raise


_FIXES = {
    errno.ENOSPC: "free space on that file system, then run it again",
    errno.EDQUOT: "the disk quota is used up; free space, then run it again",
    errno.EFBIG: "a file size limit was reached (see `ulimit -f`); raise it, then run it again",
    errno.EACCES: "check the owner and mode of the file and its directory",
    errno.EPERM: "check the owner and mode of the file and its directory",
    errno.EROFS: "the file system is mounted read-only; remount it read-write",
    errno.EIO: "the device reported an I/O error; check the disk (dmesg) before retrying",
}


# Each errno as the kind a harness acts on: full (retry later), I/O error, read-only.
_KINDS: dict[int, type[errors.FileSystemError]] = {
    errno.ENOSPC: errors.FileSystemFull,
    errno.EDQUOT: errors.FileSystemFull,
    errno.EFBIG: errors.FileSystemFull,
    errno.EIO: errors.FileSystemIOError,
    errno.EACCES: errors.FileSystemReadOnly,
    errno.EPERM: errors.FileSystemReadOnly,
    errno.EROFS: errors.FileSystemReadOnly,
}


def os_error(
    e: OSError, path: Path | str | None = None, doing: str = "write"
) -> errors.FileSystemError:
    """``e`` as one line: ``<file>: cannot <doing>: <error> (<ERRNO>); <fix>``."""
    where = path if path is not None else (e.filename or "?")
    return errno_error(e.errno or 0, where, doing)


def errno_error(code: int, path: Path | str, doing: str = "write") -> errors.FileSystemError:
    name = errno.errorcode.get(code, str(code))
    fix = _FIXES.get(code, "fix the cause, then run it again")
    cls = _KINDS.get(code, errors.FileSystemError)
    return cls(
        problem=f"cannot {doing}: {os.strerror(code)} ({name})", fix=fix, path=path, errno=code
    )


def refuse_unwritable(path: Path) -> None:
    """Before a job rewrites ``path`` in place (SQLite also creates a journal or WAL beside
    it): raise the error the system would give, read-only file system (EROFS) or permission
    denied (EACCES), instead of SQLite's vaguer "unable to open database file"."""
    try:
        ro = bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        ro = False
    if ro:
        raise errno_error(errno.EROFS, path, "write")
    ids = os.access in os.supports_effective_ids
    if not os.access(path, os.W_OK, effective_ids=ids):
        raise errno_error(errno.EACCES, path, "write")
    if not os.access(path.parent, os.W_OK | os.X_OK, effective_ids=ids):
        raise errno_error(errno.EACCES, path.parent, "create files in")


# ---------------------------------------------------------------------------- hard links


def break_link_command(path: Path) -> str:
    """The shell step that gives ``path`` a file of its own (the other names keep theirs)."""
    src, tmp = shlex.quote(str(path)), shlex.quote(f"{path}.new")
    return f"cp -p {src} {tmp} && mv {tmp} {src}"


def hard_link_problem(path: Path, st: os.stat_result | None = None) -> str | None:
    """Why a job that rewrites ``path`` in place must not (it has other names), or None."""
    if st is None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink <= 1:
        return None
    return (
        f"{path}: has {st.st_nlink} hard links (a `cp -al` or `rsync --link-dest` backup?); "
        "rewriting it in place would change every copy — break the link first: "
        f"`{break_link_command(path)}` while no kernel has it open"
    )


def refuse_hard_linked(path: Path, st: os.stat_result | None = None) -> None:
    """Raise :class:`~agentdb.errors.HardLinked` if ``path`` has more than one name."""
    problem = hard_link_problem(path, st)
    if problem is not None:
        raise errors.HardLinked(problem, path=path)


# ---------------------------------------------------------------------------- creation
StatKey = tuple[int, int, int]  # (inode, size, mtime_ns)
Stamp = tuple[StatKey | None, StatKey | None, StatKey | None]  # main, -wal, -journal


def gone(path: Path | str) -> bool:
    """True when there is no entry of that name (never followed), not when an entry cannot be
    looked at (permission, I/O error)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def stat_key(st: os.stat_result) -> StatKey:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def stamp_of(main: Path) -> Stamp:
    """Who a session file and its ``-wal``/``-journal`` are (None: absent), by ``lstat``: a job
    that judged the file compares this again under its lock before it acts."""

    def one(p: Path) -> StatKey | None:
        try:
            return stat_key(os.lstat(p))
        except FileNotFoundError:
            return None

    return (one(main), one(paths.sidecar(main, "-wal")), one(paths.sidecar(main, "-journal")))


def ensure_dir(path: Path) -> None:
    """Create ``path`` and any missing parents as 0700, whatever the umask.

    Directories that already exist keep their mode.
    """
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, DIR_MODE)
        fsync_dir(d.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY)
    try:
        with naming(path):
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    fd = open_regular(path)
    try:
        with naming(path):
            os.fsync(fd)
    finally:
        os.close(fd)


def create_exclusive(path: Path) -> None:
    """Create an empty file 0600 (under any umask); fail if anything exists at ``path``."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_regular(src: Path, dst: Path, *, fsync: bool = True) -> None:
    """Copy the regular file ``src`` into the new file ``dst`` (0600, exclusive); fsynced
    unless ``fsync`` is False (a private scratch copy)."""
    fin = open_regular(src)
    try:
        fout = open_regular(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            os.fchmod(fout, FILE_MODE)
            offset = 0
            with naming(dst):
                while chunk := os.pread(fin, 1 << 20, offset):
                    write_all(fout, chunk)
                    offset += len(chunk)
                if fsync:
                    os.fsync(fout)
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def link_or_copy(src: Path, dst: Path) -> None:
    """Give ``src``'s bytes the extra name ``dst`` (never overwriting ``dst``), durably.

    A hard link where the file system has them; otherwise a copy written beside, fsynced and
    renamed into place only if ``dst`` still does not exist.
    """
    try:
        os.link(src, dst, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:
        tmp = dst.with_name(dst.name + ".agentdb-tmp")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # our own name, left by an interrupted copy
        try:
            copy_regular(src, tmp)
            os.link(tmp, dst)  # fails if dst appeared meanwhile; never overwrites
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    fsync_dir(dst.parent)


def copy_private(src: Path, dst: Path, expect: os.stat_result) -> bool:
    """Copy the regular file ``src`` into the new private file ``dst`` (0600, not fsynced: it is
    scratch). False, copying nothing, when ``src`` is no longer the file ``expect`` describes
    (another inode, or not a regular file). Never follows a symlink, never blocks on a FIFO."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino):
            return False
        out = os.open(dst, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE)
        try:
            pos = 0
            while pos < st.st_size:
                chunk = os.pread(fd, min(1 << 22, st.st_size - pos), pos)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
                pos += len(chunk)
        finally:
            os.close(out)
        return True
    finally:
        os.close(fd)


@contextlib.contextmanager
def private_workdir(prefix: str) -> Iterator[Path]:
    """A fresh 0700 directory for a job's private scratch files, removed on exit.

    It lives under agentdb's own data, ``$XDG_CACHE_HOME/agentdb/tmp/`` (CONTRACT.md: derived,
    deletable at any time), not in a shared ``$TMPDIR``. Its name carries the host
    (:func:`host_tag`) and the pid; directories a killed job of this host left (their pid no
    longer runs here) are swept on the next call — never another host's (a home shared by two
    hosts: a pid alive there is not alive here), never a name without a host. ``agentdb/`` and
    ``agentdb/tmp`` must be real directories this user owns: a symlink there is never followed
    (nothing is swept, nothing is made in its target). Only then, or when the cache cannot be
    created (a read-only home), does it fall back to the system's temp dir (nothing swept).
    """
    import tempfile  # here: its import (random, shutil) costs every command's start-up

    cache = paths.agentdb_cache_dir()
    base = cache / "tmp"
    fd = -1
    try:
        ensure_dir(base)
        fd = _own_dir_fd(cache, base)
    except OSError:
        base = Path(tempfile.gettempdir())
    else:
        try:
            _sweep_dead(fd)
        finally:
            os.close(fd)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{host_tag()}-{os.getpid()}-", dir=base) as d:
        os.chmod(d, DIR_MODE)
        yield Path(d)


def host_tag() -> str:
    """This host as scratch names carry it: 8 hex digits of its name (``uname -n``), so that
    two hosts sharing one home never take each other's scratch for a dead job's."""
    import zlib

    return f"{zlib.crc32(os.uname().nodename.encode('utf-8', 'surrogateescape')):08x}"


def _own_dir_fd(cache: Path, base: Path) -> int:
    """A descriptor of ``base`` (``cache``/tmp), opened without following a symlink at either
    level; raises OSError when either is a symlink, not a directory, or not this user's."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    top = os.open(cache, flags)
    try:
        fd = os.open(base.name, flags, dir_fd=top)
    finally:
        os.close(top)
    if os.fstat(fd).st_uid != os.geteuid():
        os.close(fd)
        raise PermissionError(errno.EPERM, "not this user's", str(base))
    return fd


_WORKDIR_RE = re.compile(r"agentdb-[a-z]+-(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-[A-Za-z0-9_]+")


def _sweep_dead(dir_fd: int) -> None:
    """Remove scratch directories of this host's agentdb jobs that no longer run (killed -9),
    inside the directory ``dir_fd`` only: entries are looked up and removed relative to it, a
    symlink among them is never followed."""
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return
    me = host_tag()
    for name in names:
        m = _WORKDIR_RE.fullmatch(name)
        if m is None or m["host"] != me:
            continue  # not a job's scratch, or another host's: its pid means nothing here
        try:
            os.kill(int(m["pid"]), 0)
            continue  # still running (or a pid we may not signal): leave it
        except ProcessLookupError:
            pass
        except (OSError, OverflowError):
            continue
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue  # a symlink, a file, another user's: never ours to remove
        with contextlib.suppress(OSError):
            _remove_tree_at(dir_fd, name)


def _remove_tree_at(dir_fd: int, name: str) -> None:
    """Remove the directory ``name`` in ``dir_fd`` and everything in it, each entry relative
    to its own directory's descriptor: a symlink is removed, never followed."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for child, is_dir in entries:
            if is_dir:
                _remove_tree_at(fd, child)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)
