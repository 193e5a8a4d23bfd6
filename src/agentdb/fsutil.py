"""Crash-safe file-system steps: owner-only creation, fsync of files and directories."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agentdb import paths
from agentdb.paths import DIR_MODE, FILE_MODE


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


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    _fsync(path, os.O_DIRECTORY)


def fsync_file(path: Path) -> None:
    _fsync(path, os.O_NOFOLLOW)


def create_exclusive(path: Path) -> None:
    """Create an empty file 0600 (under any umask); fail if anything exists at ``path``."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.fsync(fd)
    finally:
        os.close(fd)


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
        shutil.copyfile(src, tmp, follow_symlinks=False)
        os.chmod(tmp, FILE_MODE)
        fsync_file(tmp)
        try:
            os.link(tmp, dst)  # fails if dst appeared meanwhile; never overwrites
        finally:
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
    deletable at any time), not in a shared ``$TMPDIR``. Its name carries the pid; directories
    a killed job left (their pid no longer runs) are swept on the next call. Only when the
    cache cannot be created (a read-only home) does it fall back to the system's temp dir.
    """
    base = paths.agentdb_cache_dir() / "tmp"
    try:
        ensure_dir(base)
    except OSError:
        base = Path(tempfile.gettempdir())
    else:
        _sweep_dead(base)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=base) as d:
        os.chmod(d, DIR_MODE)
        yield Path(d)


_WORKDIR_RE = re.compile(r"agentdb-[a-z]+-(?P<pid>[0-9]+)-[A-Za-z0-9_]+")


def _sweep_dead(base: Path) -> None:
    """Remove scratch directories of agentdb jobs that no longer run (killed -9)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        m = _WORKDIR_RE.fullmatch(name)
        if m is None:
            continue
        try:
            os.kill(int(m["pid"]), 0)
            continue  # still running (or a pid we may not signal): leave it
        except ProcessLookupError:
            pass
        except (OSError, OverflowError):
            continue
        shutil.rmtree(base / name, ignore_errors=True)
