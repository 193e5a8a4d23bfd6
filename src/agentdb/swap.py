"""The swap: put a verified replacement in the original's place, keeping the original's bytes.

Runs while the caller holds :func:`agentdb.locks.hold` on the original, so no SQLite connection
can open the session in the middle. Steps, each followed by an fsync of the directory:

1. hard-link the original to ``<id>.sqlite.corrupt[.N]`` (or reuse such a name that already is
   the original: an interrupted earlier run made it); restore uses ``.pre-restore[.N]``;
2. hard-link its WAL or rollback journal, if any, to ``<corrupt>-wal`` / ``<corrupt>-journal``;
3. remove ``<id>.sqlite-wal``, ``-shm`` and ``-journal``;
4. rename the replacement to ``<id>.sqlite``.

At every instant ``<id>.sqlite`` exists, the original bytes exist under some name, and the old
WAL never sits beside the new file. :func:`agentdb.faults.point` is called after each step
(``<prefix>after_link`` …; tests kill the
process there).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from agentdb import faults, fsutil, paths
from agentdb.paths import sidecar

POINTS = (
    "after_salvage",
    "after_intent",
    "after_link",
    "after_wal_link",
    "after_sidecars_removed",
    "after_rename",
)


def kept_name(db_path: Path, n: int, kind: str = "corrupt") -> Path:
    """``<id>.sqlite.<kind>`` (n = 0) or ``<id>.sqlite.<kind>.<n>``; kind is ``corrupt`` (recover)
    or ``pre-restore`` (restore)."""
    return db_path.with_name(f"{db_path.name}.{kind}" + (f".{n}" if n else ""))


def kept_names(db_path: Path, kind: str = "corrupt") -> list[Path]:
    """Existing ``.<kind>[.N]`` names of this session, in order of N."""
    sid = db_path.name[: -len(paths.SESSION_SUFFIX)]
    found: list[tuple[int, Path]] = []
    for entry in os.scandir(db_path.parent):
        m = paths.KEPT_RE.fullmatch(entry.name)
        if m and m.group("id") == sid and m.group("kind") == kind:
            found.append((int(m.group("n") or 0), db_path.parent / entry.name))
    return [p for _, p in sorted(found)]


def corrupt_name(db_path: Path, n: int) -> Path:
    return kept_name(db_path, n, "corrupt")


def corrupt_names(db_path: Path) -> list[Path]:
    return kept_names(db_path, "corrupt")


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


def existing_kept_of(db_path: Path, db_stat: os.stat_result, kind: str = "corrupt") -> Path | None:
    """A ``.<kind>`` name an interrupted run already gave the current file, if any."""
    for p in kept_names(db_path, kind):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) == (db_stat.st_dev, db_stat.st_ino):
            return p
    # A copy (file systems without hard links): compare bytes, newest name first.
    for p in reversed(kept_names(db_path, kind)):
        if same_bytes(db_path, p, a_stat=db_stat):
            return p
    return None


def next_kept_name(db_path: Path, kind: str = "corrupt") -> Path:
    """The first ``.<kind>[.N]`` name not taken (never overwrites an earlier one). A name is
    taken by any entry of its own, or of its ``-wal``, ``-journal`` or ``-shm``: a sidecar left
    there (an earlier original's, whose file was removed by hand) would otherwise sit beside
    this original, and SQLite would apply or roll it back into it on open."""
    taken = {p.name for p in kept_names(db_path, kind)}
    n = 0
    while kept_name(db_path, n, kind).name in taken or any(
        os.path.lexists(f"{kept_name(db_path, n, kind)}{suffix}")
        for suffix in ("", "-wal", "-journal", "-shm")
    ):
        n += 1
    return kept_name(db_path, n, kind)


def existing_corrupt_of(db_path: Path, db_stat: os.stat_result) -> Path | None:
    return existing_kept_of(db_path, db_stat, "corrupt")


def next_corrupt_name(db_path: Path) -> Path:
    return next_kept_name(db_path, "corrupt")


def swap(db_path: Path, replacement: Path, corrupt: Path, prefix: str = "") -> Path | None:
    """Steps 1-4 above; returns the path the WAL was kept under, if there was one.

    ``corrupt`` is the name the original keeps (``.corrupt[.N]`` for recover, ``.pre-restore[.N]``
    for restore); a rollback journal, if any, is kept beside it like the WAL.
    """
    directory = db_path.parent
    if not same_bytes(db_path, corrupt):
        fsutil.link_or_copy(db_path, corrupt)
        fsutil.fsync_dir(directory)
    faults.point(prefix + "after_link")
    kept_wal: Path | None = None
    for suffix in ("-wal", "-journal"):
        side = sidecar(db_path, suffix)
        kept = sidecar(corrupt, suffix)
        if side.exists() and not same_bytes(side, kept):
            if kept.exists():
                raise FileExistsError(
                    errno.EEXIST, f"exists and is not {side}; move it away", str(kept)
                )
            fsutil.link_or_copy(side, kept)
            fsutil.fsync_dir(directory)
        if suffix == "-wal" and kept.exists():
            kept_wal = kept
    faults.point(prefix + "after_wal_link")
    for suffix in ("-wal", "-shm", "-journal"):
        try:
            os.unlink(sidecar(db_path, suffix))
        except FileNotFoundError:
            pass
    fsutil.fsync_dir(directory)
    faults.point(prefix + "after_sidecars_removed")
    os.rename(replacement, db_path)
    fsutil.fsync_dir(directory)
    faults.point(prefix + "after_rename")
    return kept_wal


def remove_job_files(db_path: Path, job: str = "recover") -> None:
    """Remove what an interrupted ``job`` (recover, restore) left beside this session: its
    ``<id>.sqlite.agentdb-<job>-tmp`` and that file's SQLite sidecars (its own names only)."""
    tmp = paths.job_file(db_path, job, "tmp")
    for p in (tmp, sidecar(tmp, "-wal"), sidecar(tmp, "-shm"), sidecar(tmp, "-journal")):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
