"""The copies recover and restore keep beside a session: ``<id>.sqlite.corrupt[.N]`` (a damaged
original) and ``<id>.sqlite.pre-restore[.N]`` (the file a restore replaced), each with its
``-wal``/``-journal``/``-shm`` beside it under the same name.

They are kept so that no recovery is ever the only copy of what it could not read; they count
in the disk space a sessions directory takes (``status``, ``report``), and only the operator
removes them, with ``agentdb prune --leftovers`` (a plan, then a removal after confirmation):
:func:`find` lists them, :func:`remove` unlinks what the plan listed, never a session file.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from agentdb import errors, fsutil, locks, paths

# a kept copy and the sidecars beside it; never "<id>.sqlite" itself
NAME_RE = re.compile(paths.KEPT_RE.pattern + r"(?P<side>-wal|-journal|-shm)?")
JOB_PREFIX = ".sqlite.agentdb-"  # an interrupted job's files: its session is left alone


@dataclass(frozen=True)
class FileId:
    """What a listed file was when the plan saw it (removed only if it still is)."""

    name: str
    dev: int
    ino: int
    size: int
    mtime_ns: int


@dataclass
class Leftover:
    """One kept copy: the copy and its sidecars."""

    session_id: str
    kind: str  # "corrupt" (recover kept a damaged original) or "pre-restore"
    name: str  # the copy's name, e.g. <id>.sqlite.corrupt.1
    files: list[FileId] = field(default_factory=list)  # the copy first, then its sidecars
    bytes: int = 0  # their sizes together
    mtime: float = 0.0  # the copy's modification time (when it was set aside)
    action: str = "would_remove"  # would_remove, removed, skipped
    reason: str | None = None  # why skipped

    def to_json(self) -> dict[str, object]:
        return {
            "session_id": self.session_id,
            "kind": self.kind,
            "name": self.name,
            "files": [f.name for f in self.files],
            "bytes": self.bytes,
            "action": self.action,
            "reason": self.reason,
        }


def find(sessions_dir: Path, ids: frozenset[str] | None = None) -> list[Leftover]:
    """Every kept copy in ``sessions_dir`` (of ``ids`` only, when given), in name order.
    Regular files only: a link, directory or FIFO under such a name is not listed (nothing
    here ever follows or removes one)."""
    by_copy: dict[str, Leftover] = {}
    with os.scandir(sessions_dir) as it:
        for entry in it:
            m = NAME_RE.fullmatch(entry.name)
            if m is None or (ids is not None and m["id"] not in ids):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if not stat.S_ISREG(st.st_mode):
                continue
            base = entry.name[: len(entry.name) - len(m["side"] or "")]
            left = by_copy.setdefault(base, Leftover(m["id"], m["kind"], base))
            fid = FileId(entry.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if m["side"] is None:
                left.files.insert(0, fid)
                left.mtime = st.st_mtime
            else:
                left.files.append(fid)
            left.bytes += st.st_size
    # a sidecar whose copy is gone (removed by hand) is listed under the copy's name too
    return [by_copy[k] for k in sorted(by_copy)]


def total(sessions_dir: Path) -> tuple[int, int]:
    """(kept copies, their bytes with sidecars): what ``status`` adds to the size on disk."""
    try:
        found = find(sessions_dir)
    except OSError:
        return 0, 0
    return len(found), sum(x.bytes for x in found)


def _skip_reason(sessions_dir: Path, left: Leftover, names: set[str]) -> str | None:
    """Why this copy must stay now (None: it may go)."""
    if any(n.startswith(left.session_id + JOB_PREFIX) for n in names):
        return (
            "a job on this session was interrupted; run it again first (agentdb check says which)"
        )
    for f in left.files:
        try:
            st = os.lstat(sessions_dir / f.name)
        except FileNotFoundError:
            continue  # gone already: nothing to do for it
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != (f.dev, f.ino, f.size, f.mtime_ns):
            return f"{f.name} changed since it was listed; run the command again"
        if not stat.S_ISREG(st.st_mode):
            return f"{f.name} is not a regular file"
        if st.st_nlink != 1:
            # a recover or restore links the file it keeps before it renames the new one
            # into place: another name still has this file (a job under way)
            return f"{f.name} has {st.st_nlink} names (a recover or restore under way?)"
    return None


def remove(sessions_dir: Path, listed: list[Leftover]) -> list[Leftover]:
    """Unlink each listed copy and its sidecars, unless it changed since it was listed, a job
    on its session is under way or was interrupted, or the session is held by a job (its
    lock): those are ``skipped`` with the reason. The session file is never touched. Returns
    ``listed`` with each ``action`` set."""
    names = set(os.listdir(sessions_dir))
    for left in listed:
        session = paths.session_path(sessions_dir, left.session_id)
        try:
            with _held(session):
                why = _skip_reason(sessions_dir, left, names)
                if why is not None:
                    left.action, left.reason = "skipped", why
                    continue
                for f in reversed(left.files):  # sidecars first, the copy last
                    try:
                        os.unlink(sessions_dir / f.name)
                    except FileNotFoundError:
                        pass
                left.action = "removed"
        except errors.SessionLive as e:
            left.action, left.reason = "skipped", f"the session is held by a job ({e})"
    fsutil.fsync_dir(sessions_dir)
    return listed


def _held(session: Path) -> contextlib.AbstractContextManager[object]:
    """The session's job lock (as recover and restore take it) when its file is there; a
    session's own writer does not stop this (the kept copies are not its file)."""
    if not os.path.lexists(session):
        return contextlib.nullcontext()
    holder = locks.probe(session)
    if holder is not None and holder.lease:
        return contextlib.nullcontext()  # a kernel writing the session: not using the copies
    return locks.hold(session)
