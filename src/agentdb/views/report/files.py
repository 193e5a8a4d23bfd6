"""Writing the report file: never over anything without ``--force``, never through a link,
never inside the sessions directory; with ``--force``, written beside and renamed over."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import NoReturn

from agentdb import errors, faults, fsutil, paths
from agentdb.paths import FILE_MODE


class ReportRefused(errors.AgentdbError):
    """The report file cannot be written where it was asked for."""

    code = "report_refused"


def _inside(path: Path, directory: Path) -> bool:
    try:
        d = os.path.realpath(directory)
    except OSError:
        return False
    p = os.path.realpath(path.parent)
    return p == d or p.startswith(d.rstrip(os.sep) + os.sep)


def _write_new(path: Path, data: bytes, created: list[Path] | None = None) -> None:
    """Create ``path`` (never over anything) holding ``data``, fsynced; ``created`` gets
    ``path`` once the file is this call's (for a caller that must remove it if interrupted)."""
    fd = os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
    )
    if created is not None:
        created.append(path)
    try:
        faults.point("report_after_open")  # created, nothing written yet
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


SQLITE_MAGIC = b"SQLite format 3\0"


def _refuse_replacing(path: Path, log: Path) -> None:
    """``--force`` replaces an earlier report or another plain file, or a symlink (never its
    target); never a directory, a device, a FIFO or a socket (as root, renaming over
    ``/dev/null`` would replace the device), nor agentdb's own data: the recovery log or a
    SQLite database such as a backup copy."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise ReportRefused(f"{path}: cannot replace it ({e.strerror})", path=path) from None
    if stat.S_ISLNK(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        raise ReportRefused(f"{path}: is a directory; name a file", path=path)
    if not stat.S_ISREG(st.st_mode):
        raise ReportRefused(
            f"{path}: is not a regular file (a device, FIFO or socket); --force replaces only "
            "files: name another path",
            path=path,
        )
    if os.path.realpath(path) == os.path.realpath(log):
        raise ReportRefused(
            f"{path}: is the recovery log; name another path for the report", path=path
        )
    try:
        fd = fsutil.open_regular(path)
    except (OSError, errors.AgentdbError):
        return  # unreadable here: the rename below decides
    try:
        head = os.pread(fd, len(SQLITE_MAGIC), 0)
    except OSError:
        head = b""
    finally:
        os.close(fd)
    if head == SQLITE_MAGIC:
        raise ReportRefused(
            f"{path}: is a SQLite database (a session or a backup copy?); --force never "
            "replaces one: name another path for the report",
            path=path,
        )


def write_report(
    path: Path,
    text: str,
    *,
    sessions_dir: Path,
    force: bool = False,
    recovery_log: Path | None = None,
) -> None:
    """Create ``path`` (0600) holding ``text``.

    Refused inside ``sessions_dir`` (agentdb never adds files there). An existing ``path`` is
    refused unless ``force``; then the report is written beside it and renamed over it, so a
    reader sees the old file or the new one, never half of one (a symlink at ``path`` is
    replaced, never followed).
    """
    if _inside(path, sessions_dir):
        raise ReportRefused(
            f"{path}: inside the sessions directory {sessions_dir}; write the report elsewhere",
            path=path,
        )
    if not path.parent.is_dir():
        raise ReportRefused(f"{path}: no directory {path.parent}; create it first", path=path)
    data = text.encode("utf-8")
    created: list[Path] = []
    try:
        with _terminated_as_raised():
            _write_new(path, data, created)
        fsutil.fsync_dir(path.parent)
        return
    except _Terminated:
        for p in created:  # a page cut short must not stay under the name asked for
            p.unlink(missing_ok=True)
        _die_of_sigterm()
    except FileExistsError:
        if not force:
            raise ReportRefused(
                f"{path}: already exists; pass --force to replace it", path=path
            ) from None
    except OSError as e:
        raise ReportRefused(f"{path}: cannot create it ({e.strerror})", path=path) from None
    _refuse_replacing(path, recovery_log or paths.recovery_log_path(sessions_dir))
    _sweep_dead_tmps(path)
    tmp = path.with_name(f"{_tmp_prefix(path)}{fsutil.host_tag()}-{os.getpid()}")
    try:
        with _terminated_as_raised():
            _write_new(tmp, data)
            faults.point("report_after_tmp")  # written beside, not renamed yet
            os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ReportRefused(f"{path}: cannot replace it ({e.strerror})", path=path) from None
    except _Terminated:
        tmp.unlink(missing_ok=True)  # killed while writing beside: leave nothing behind
        _die_of_sigterm()
    fsutil.fsync_dir(path.parent)


def _die_of_sigterm() -> NoReturn:
    """End the process as the SIGTERM that interrupted the write asked, with its status."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    raise SystemExit(128 + signal.SIGTERM)  # not reached: the default action ends the process


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}.agentdb-tmp-"


_TMP_TAIL = re.compile(r"(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)")


def _sweep_dead_tmps(path: Path) -> None:
    """Remove what a run on this host killed while replacing ``path`` left beside it (``kill
    -9``: no handler runs): ``.<name>.agentdb-tmp-<host>-<pid>`` whose pid no longer runs here;
    only regular files of this user, never another host's."""
    prefix, me = _tmp_prefix(path), fsutil.host_tag()
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        m = _TMP_TAIL.fullmatch(name[len(prefix) :]) if name.startswith(prefix) else None
        if m is None or m["host"] != me:
            continue
        try:
            os.kill(int(m["pid"]), 0)
            continue  # running (or not ours to signal): its file
        except ProcessLookupError:
            pass
        except (OSError, OverflowError):
            continue
        p = path.parent / name
        try:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(p)
        except OSError:
            pass


class _Terminated(BaseException):
    """SIGTERM arrived while the report was written beside its name."""


@contextlib.contextmanager
def _terminated_as_raised() -> Iterator[None]:
    """SIGTERM raises :class:`_Terminated` inside the block (so the temp file is removed),
    from the main thread; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
