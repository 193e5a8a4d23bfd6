"""Writing the report file: never over anything without ``--force``, never through a link,
never inside the sessions directory; with ``--force``, written beside and renamed over."""

from __future__ import annotations

import os
from pathlib import Path

from agentdb import errors, fsutil
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


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
    )
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_report(path: Path, text: str, *, sessions_dir: Path, force: bool = False) -> None:
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
    try:
        _write_new(path, data)
        fsutil.fsync_dir(path.parent)
        return
    except FileExistsError:
        if not force:
            raise ReportRefused(
                f"{path}: already exists; pass --force to replace it", path=path
            ) from None
    except OSError as e:
        raise ReportRefused(f"{path}: cannot create it ({e.strerror})", path=path) from None
    if os.path.isdir(path) and not os.path.islink(path):
        raise ReportRefused(f"{path}: is a directory; name a file", path=path)
    tmp = path.with_name(f".{path.name}.agentdb-tmp-{os.getpid()}")
    try:
        _write_new(tmp, data)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ReportRefused(f"{path}: cannot replace it ({e.strerror})", path=path) from None
    fsutil.fsync_dir(path.parent)
