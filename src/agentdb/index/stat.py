"""The directory walk that validates the index: one ``scandir`` and an ``lstat`` per file, no
SQLite open.

A session's identity is ``(dev, ino, size, mtime_ns, ctime_ns)`` of the database (``ctime``
cannot be set back by ``touch``) and ``(dev, ino, size, mtime_ns, mode, uid, gid)`` of each
sidecar that exists — ``-wal`` (a live session changes only there), ``-shm`` and ``-journal``
(their mode, owner and presence change what a reader sees). Sidecars' ctime is left out for
the reason :mod:`agentdb.index.verdicts` gives: SQLite run as root fchowns them on every open.

A stored row is believed only while the identity is the same *and* the file's newest timestamp
is older than the moment the identity was taken by more than the file system's timestamp
granularity (git's "racily clean" rule): a change in the same clock tick as the stat would
leave every field equal, so such a row is read again next time.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentdb import paths
from agentdb.db import FileStats
from agentdb.index.verdicts import COARSE_GRANULARITY_NS, FINE_GRANULARITY_NS, Recorded

SIDECARS = ("-wal", "-shm", "-journal")
_NO_SIDECARS = ";-;-;-"


@dataclass(slots=True)
class Seen:
    """One ``<ULID>.sqlite`` entry as the walk saw it."""

    entry: paths.Entry
    name: str  # the entry's file name, <ULID>.sqlite
    key: str | None  # the identity; None: not a regular file, or gone (never trusted)
    newest_ns: int  # the newest timestamp in the identity
    granularity_ns: int  # the file system's timestamp granularity, as the stamps suggest
    size: int  # bytes of the database and its -wal (0 if not a regular file)
    # the same lstat results as the verdict cache keys them (verdicts.Identity.key(): the
    # database without its mode, the -wal and -shm, not the -journal), and their newest
    # timestamp and granularity: a recorded verdict is matched without another lstat
    vkey: str | None = None
    vnewest_ns: int = 0
    vgranularity_ns: int = 0

    def verdict_matches(self, recorded: Recorded) -> bool:
        """``recorded`` was given to this very file (:meth:`verdicts.Recorded.matches`)."""
        return (
            self.vkey is not None
            and recorded.identity == self.vkey
            and self.vnewest_ns < recorded.stamped_ns - self.vgranularity_ns
        )

    def trusts(self, key: str, stamped_ns: int) -> bool:
        """A row stored with ``key`` at ``stamped_ns`` describes this file."""
        return (
            self.key is not None
            and key == self.key
            and self.newest_ns < stamped_ns - self.granularity_ns
        )

    def settled(self, stamped_ns: int) -> bool:
        """A row read now (stamp ``stamped_ns``) may be believed next time."""
        return self.key is not None and self.newest_ns < stamped_ns - self.granularity_ns


def _side(st: os.stat_result) -> str:
    return (
        f"{st.st_dev},{st.st_ino},{st.st_size},{st.st_mtime_ns},{st.st_mode},"
        f"{st.st_uid},{st.st_gid}"
    )


def seen(entry: paths.Entry, names: set[str] | None = None, where: str | None = None) -> Seen:
    """The identity of one entry. ``names``: the directory listing (its session files may be
    left out: only sidecar names are looked up), so sidecars that are not there are not
    stat'ed (a sidecar created after the listing changes nothing: the file is read after this,
    and the next walk sees the sidecar and reads it again). ``where``: the directory as a
    string (saves building it from the path for every entry)."""
    base = entry.session_id + paths.SESSION_SUFFIX
    p = os.fspath(entry.path) if where is None else where + base
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return Seen(entry, base, None, 0, 0, 0)
    if not stat.S_ISREG(st.st_mode):
        return Seen(entry, base, None, 0, 0, 0)
    five = f"{st.st_dev},{st.st_ino},{st.st_size},{st.st_mtime_ns},{st.st_ctime_ns}"
    m, c = st.st_mtime_ns, st.st_ctime_ns
    if names is not None and not (
        base + "-wal" in names or base + "-shm" in names or base + "-journal" in names
    ):  # the common case, a closed session: no sidecar
        whole = m % 1_000_000_000 == 0 and c % 1_000_000_000 == 0
        gran = COARSE_GRANULARITY_NS if whole else FINE_GRANULARITY_NS
        key = f"{five},{st.st_mode}{_NO_SIDECARS}"
        return Seen(entry, base, key, max(m, c), gran, st.st_size, five + ";-;", max(m, c), gran)
    found: list[os.stat_result | None] = []
    for suffix in SIDECARS:
        if names is not None and base + suffix not in names:
            found.append(None)
            continue
        try:
            found.append(os.lstat(p + suffix))
        except FileNotFoundError:
            found.append(None)
    return _seen(entry, base, st, five, found[0], found[1], found[2])


def _seen(
    entry: paths.Entry,
    base: str,
    st: os.stat_result,
    five: str,
    wal: os.stat_result | None,
    shm: os.stat_result | None,
    journal: os.stat_result | None,
) -> Seen:
    parts = [f"{five},{st.st_mode}"]
    stamps = [st.st_mtime_ns, st.st_ctime_ns]
    vstamps = list(stamps)
    for s in (wal, shm, journal):
        if s is None:
            parts.append("-")
            continue
        parts.append(_side(s))
        stamps.append(s.st_mtime_ns)
        if s is not journal:
            vstamps.append(s.st_mtime_ns)
    # verdicts.Identity.key() of a regular file: db;wal;[;shm...]
    vkey = f"{five};{parts[1]};" + ("" if shm is None else ";shm" + parts[2])
    whole = all(t % 1_000_000_000 == 0 for t in stamps)
    vwhole = all(t % 1_000_000_000 == 0 for t in vstamps)
    return Seen(
        entry,
        base,
        ";".join(parts),
        max(stamps),
        COARSE_GRANULARITY_NS if whole else FINE_GRANULARITY_NS,
        st.st_size + (wal.st_size if wal is not None else 0),  # as verdicts.Identity.size
        vkey,
        max(vstamps),
        COARSE_GRANULARITY_NS if vwhole else FINE_GRANULARITY_NS,
    )


def seen_of(entry: paths.Entry, stats: FileStats) -> Seen:
    """:func:`seen` (without a listing: every sidecar looked at) from the caller's own
    ``lstat`` of the file and its sidecars (:func:`agentdb.db.file_stats`)."""
    base = entry.session_id + paths.SESSION_SUFFIX
    st = stats.db
    if st is None or not stat.S_ISREG(st.st_mode):
        return Seen(entry, base, None, 0, 0, 0)
    five = f"{st.st_dev},{st.st_ino},{st.st_size},{st.st_mtime_ns},{st.st_ctime_ns}"
    return _seen(entry, base, st, five, stats.wal, stats.shm, stats.journal)


def walk(sessions_dir: Path) -> tuple[list[paths.Entry], set[str]]:
    """Every ``<ULID>.sqlite`` entry in id order, and every other name in the directory (its
    sidecars among them)."""
    return _walk(sessions_dir)


def seen_all(sessions_dir: Path) -> list[Seen]:
    """The walk and every entry's identity."""
    entries, others = _walk(sessions_dir)
    where = os.path.join(os.fspath(sessions_dir), "")
    return [seen(e, others, where) for e in entries]


def walk_ids(sessions_dir: Path) -> tuple[list[str], set[str]]:
    """Every session id in the directory, sorted, and every name in it that is not a session
    file (sidecars, anything else): what :func:`seen` needs, without one set entry per session
    (~0.1 KB each) beside the id list."""
    others: set[str] = set()
    ids: list[str] = []
    with os.scandir(sessions_dir) as it:
        for de in it:
            sid = paths.session_id_of(de.name)
            if sid is not None:
                ids.append(sid)
            else:
                others.add(de.name)
    ids.sort()
    return ids, others


def _walk(sessions_dir: Path) -> tuple[list[paths.Entry], set[str]]:
    ids, names = walk_ids(sessions_dir)
    child = child_maker(sessions_dir)
    return [paths.Entry(sid, child(sid + paths.SESSION_SUFFIX)) for sid in ids], names


def child_maker(directory: Path) -> Callable[[str], Path]:
    """``directory / name`` for plain file names, without re-parsing the directory each time
    (pathlib's own fast path for names it listed itself, where this Python has it)."""
    fast = getattr(directory, "_make_child_relpath", None)
    if fast is None:
        return lambda name: directory / name
    probe = fast("x")
    if probe != directory / "x" or str(probe) != str(directory / "x"):
        return lambda name: directory / name
    return fast
