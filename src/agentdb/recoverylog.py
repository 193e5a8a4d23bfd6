"""The recovery log: ``$XDG_STATE_HOME/agent/recovery.log``, one JSON object per line, append-only.

Every recovery outcome (and the intent before a swap) is a line. Lines are written with one
``write`` on an ``O_APPEND`` descriptor and fsynced, so concurrent jobs never interleave bytes.
The fields are :meth:`agentdb.salvage.RecoveryOutcome.to_log`'s; among them ``gaps``: the gap
rows a revision-3 replacement was given by that recovery, ``[{"kind", "from_seq", "to_seq",
"expected_hash"}]`` with the hash as hex or null (empty below revision 3; absent from lines
written before it existed, which readers take as empty).

The log is opened like a session file (:func:`agentdb.fsutil.open_regular`): a symlink, FIFO,
directory or device in its place is refused with one line, never followed, never waited on.
Reading is bounded: a line longer than :data:`MAX_LINE` is skipped without being held whole,
and only the last :data:`MAX_READ` bytes of a larger log are read (the newest entries, which
are the ones that decide anything).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentdb import fsutil, times
from agentdb.paths import FILE_MODE

MAX_LINE = 1 << 20  # a line longer than this is skipped when reading (hostile or damaged log)
MAX_READ = 64 << 20  # of a larger log only the newest MAX_READ bytes are read


def now() -> str:
    return times.now(ms=True)


def append(log_path: Path, entry: dict[str, Any]) -> None:
    """Append one entry (``time`` is added if missing) durably.

    Raises :class:`~agentdb.errors.NotRegularFile` when something other than a regular file is
    in the log's place, and ``OSError`` when the system refuses the write.
    """
    fsutil.ensure_dir(log_path.parent)
    doc = {"time": now(), **entry}
    line = (json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    fd = fsutil.open_regular(log_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        with fsutil.naming(log_path):
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # An earlier append was cut short (a full disk, a size limit, a crash): end
                # that fragment, or this entry would be glued to it and lost to every reader.
                line = b"\n" + line
            fsutil.write_all(fd, line)
            os.fsync(fd)
    finally:
        os.close(fd)


def require_writable(log_path: Path) -> None:
    """Refuse, before a job starts, a log that :func:`append` could not write to.

    Only what is already in the log's place is judged (nothing is created): a symlink, FIFO,
    directory or device raises :class:`~agentdb.errors.NotRegularFile`.
    """
    try:
        st = os.lstat(log_path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise fsutil.not_regular(log_path, st.st_mode)


def read(log_path: Path) -> Iterator[dict[str, Any]]:
    """Every well-formed entry, oldest first; damaged lines are skipped.

    Raises :class:`~agentdb.errors.NotRegularFile` when the log is not a regular file.
    """
    try:
        fd = fsutil.open_regular(log_path)
    except FileNotFoundError:
        return
    try:
        size = os.fstat(fd).st_size
        offset = max(size - MAX_READ, 0)
        partial = offset > 0 and os.pread(fd, 1, offset - 1) != b"\n"
        lines = fsutil.iter_lines(fd, MAX_LINE, offset, limit=MAX_READ)
        if partial:
            next(lines, None)  # the tail starts inside a line
        for raw in lines:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if isinstance(doc, dict):
                yield doc
    finally:
        os.close(fd)


def entries_for(log_path: Path, session_id: str) -> list[dict[str, Any]]:
    return [e for e in read(log_path) if e.get("session_id") == session_id]
