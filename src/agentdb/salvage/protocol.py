"""The swap: put a verified replacement in the original's place, keeping the original's bytes.

Runs while the caller holds :func:`agentdb.locks.hold` on the original, so no SQLite connection
can open the session in the middle. Steps, each followed by an fsync of the directory:

1. hard-link the original to ``<id>.sqlite.corrupt[.N]`` (or reuse such a name that already is
   the original: an interrupted earlier run made it);
2. hard-link its WAL, if any, to ``<corrupt>-wal``;
3. remove ``<id>.sqlite-wal`` and ``-shm``;
4. rename the replacement to ``<id>.sqlite``.

At every instant ``<id>.sqlite`` exists, the original bytes exist under some name, and the old
WAL never sits beside the new file. ``fault(point)`` is called after each step (tests kill the
process there).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from agentdb import fsutil, paths
from agentdb.paths import sidecar

Fault = Callable[[str], None]
POINTS = (
    "after_salvage",
    "after_intent",
    "after_link",
    "after_wal_link",
    "after_sidecars_removed",
    "after_rename",
)


def corrupt_name(db_path: Path, n: int) -> Path:
    return db_path.with_name(db_path.name + ".corrupt" + (f".{n}" if n else ""))


def corrupt_names(db_path: Path) -> list[Path]:
    """Existing ``.corrupt[.N]`` names of this session, in order of N."""
    sid = db_path.name[: -len(paths.SESSION_SUFFIX)]
    found: list[tuple[int, Path]] = []
    for entry in os.scandir(db_path.parent):
        m = paths.CORRUPT_RE.fullmatch(entry.name)
        if m and m.group("id") == sid:
            found.append((int(m.group("n") or 0), db_path.parent / entry.name))
    return [p for _, p in sorted(found)]


def same_bytes(a: Path, b: Path, *, a_stat: os.stat_result | None = None) -> bool:
    """True when ``b`` is ``a`` (same inode) or a byte-identical regular-file copy of it."""
    try:
        sa = a_stat or os.lstat(a)
        sb = os.lstat(b)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(sb.st_mode):
        return False
    if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    if sa.st_size != sb.st_size:
        return False
    fa = fsutil.open_regular(a)
    try:
        fb = fsutil.open_regular(b)
        try:
            offset = 0
            while True:
                x, y = os.pread(fa, 1 << 20, offset), os.pread(fb, 1 << 20, offset)
                if x != y:
                    return False
                if not x:
                    return True
                offset += len(x)
        finally:
            os.close(fb)
    finally:
        os.close(fa)


def existing_corrupt_of(db_path: Path, db_stat: os.stat_result) -> Path | None:
    """A ``.corrupt`` name an interrupted run already gave the current original, if any."""
    for p in corrupt_names(db_path):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) == (db_stat.st_dev, db_stat.st_ino):
            return p
    # A copy (file systems without hard links): compare bytes, newest name first.
    for p in reversed(corrupt_names(db_path)):
        if same_bytes(db_path, p, a_stat=db_stat):
            return p
    return None


def next_corrupt_name(db_path: Path) -> Path:
    taken = {p.name for p in corrupt_names(db_path)}
    n = 0
    while corrupt_name(db_path, n).name in taken or corrupt_name(db_path, n).exists():
        n += 1
    return corrupt_name(db_path, n)


def swap(
    db_path: Path, replacement: Path, corrupt: Path, fault: Fault | None = None
) -> Path | None:
    """Steps 1-4 above; returns the path the WAL was kept under, if there was one."""
    directory = db_path.parent
    if not same_bytes(db_path, corrupt):
        fsutil.link_or_copy(db_path, corrupt)
        fsutil.fsync_dir(directory)
    _fault(fault, "after_link")
    wal = sidecar(db_path, "-wal")
    kept_wal: Path | None = None
    corrupt_wal = sidecar(corrupt, "-wal")
    if wal.exists():
        if not same_bytes(wal, corrupt_wal):
            if corrupt_wal.exists():
                raise FileExistsError(f"{corrupt_wal}: exists and is not {wal}; move it away")
            fsutil.link_or_copy(wal, corrupt_wal)
            fsutil.fsync_dir(directory)
        kept_wal = corrupt_wal
    elif corrupt_wal.exists():
        kept_wal = corrupt_wal
    _fault(fault, "after_wal_link")
    journal = sidecar(db_path, "-journal")
    corrupt_journal = sidecar(corrupt, "-journal")
    if journal.exists() and not same_bytes(journal, corrupt_journal):
        if corrupt_journal.exists():
            raise FileExistsError(f"{corrupt_journal}: exists and is not {journal}; move it away")
        fsutil.link_or_copy(journal, corrupt_journal)
        fsutil.fsync_dir(directory)
    for suffix in ("-wal", "-shm", "-journal"):
        try:
            os.unlink(sidecar(db_path, suffix))
        except FileNotFoundError:
            pass
    fsutil.fsync_dir(directory)
    _fault(fault, "after_sidecars_removed")
    os.rename(replacement, db_path)
    fsutil.fsync_dir(directory)
    _fault(fault, "after_rename")
    return kept_wal


def _fault(fault: Fault | None, point: str) -> None:
    if fault is not None:
        fault(point)


def remove_job_files(db_path: Path) -> None:
    """Remove what an interrupted recover of this session left beside it (its own names only)."""
    tmp = paths.job_file(db_path, "recover", "tmp")
    for p in (tmp, sidecar(tmp, "-wal"), sidecar(tmp, "-shm"), sidecar(tmp, "-journal")):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
