"""The verdict cache: the last verdict ``check`` gave each session file, and the file's identity
when it gave it. Derived data under ``$XDG_CACHE_HOME/agentdb/`` (CONTRACT.md): deleting it, or
finding it damaged, changes no answer — a session without a trusted entry is "never checked".

An entry is keyed by the sessions directory and the file name, and carries the file's identity
``(dev, ino, size, mtime_ns, ctime_ns)`` of the database (``ctime`` cannot be set back by
``touch``), and ``(dev, ino, size, mtime_ns, mode, uid, gid)`` of its ``-wal`` (a live session
changes only there) and its ``-shm`` (whose mode and owner the check judges) — not their ctime,
which SQLite run as root changes on every open — taken *before* the check read the file. A
recorded verdict is believed only while the identity is the same, and only if the file's
newest timestamp is older than the moment the identity was taken by more than the file
system's timestamp granularity (git's "racily clean" rule: a change in the same clock tick as
the stat would leave every field equal). Anything else is "changed since last check".

This is the smallest piece of issue 13's derived index: one SQLite file, opened with the same
hardened settings as every session (``db.open_writer``), rebuilt from nothing on any doubt.

Size: over 500 lines because it is one derived table and its identity rules (racily clean,
granularity, checksums) that every reader of it must share.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
import time
import zlib
from collections.abc import Container, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors, fsutil, paths, times
from agentdb.results import Verdict, is_verdict

CACHE_NAME = "index.sqlite"  # one derived file: verdicts and the session index (agentdb.index)
APPLICATION_ID = 0x41474456  # "AGDV": not a session file; a cache file with any other id is rebuilt
# 2: the session index tables joined the verdicts; 3: every row carries a checksum (an older
# file is rebuilt)
USER_VERSION = 3
# Linux stamps files from a coarse clock (one jiffy, at most 10 ms at HZ=100); a file whose
# timestamps are all whole seconds lives on a file system that keeps only seconds.
FINE_GRANULARITY_NS = 50_000_000
COARSE_GRANULARITY_NS = 2_000_000_000

_DDL = f"""
CREATE TABLE IF NOT EXISTS verdicts (
  directory TEXT NOT NULL,      -- the sessions directory, absolute
  name TEXT NOT NULL,           -- the entry's file name, <ULID>.sqlite
  identity TEXT NOT NULL,       -- Identity.key(): db and -wal (dev, ino, size, mtime_ns, ctime_ns)
  stamped_ns INTEGER NOT NULL,  -- time.time_ns() just before the identity was taken
  verdict TEXT NOT NULL,        -- the check's verdict
  quick INTEGER NOT NULL,       -- 1: quick_check ran instead of integrity_check
  checked_at TEXT NOT NULL,     -- UTC ISO time the check finished
  status TEXT,                  -- session_meta.status the check read, if any
  revision INTEGER,             -- user_version the check read, if any
  checksum INTEGER,             -- row_sum of the other columns: a row that fails is unread
  PRIMARY KEY (directory, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (  -- agentdb.index: one row per session file, see there
  directory TEXT NOT NULL,      -- the sessions directory, absolute (as in verdicts)
  name TEXT NOT NULL,           -- <ULID>.sqlite
  identity TEXT NOT NULL,       -- db, -wal, -shm, -journal identity when the file was read
  stamped_ns INTEGER NOT NULL,  -- time.time_ns() just before that identity was taken
  size INTEGER NOT NULL,        -- bytes of the database and its -wal
  status TEXT, profile TEXT, parent TEXT, depth INTEGER, started_at TEXT, ended_at TEXT,
  cost_usd REAL, events INTEGER, revision INTEGER,
  error TEXT, error_code TEXT,  -- why the list row (session_meta + event count) failed
  meta_error TEXT, meta_error_code TEXT,  -- why session_meta alone failed
  producers TEXT,               -- JSON [[category, name, version]...], NULL: unknown
  costs TEXT,                   -- JSON [[day, provider, model, turns, cost]...], NULL: unknown
  checksum INTEGER,             -- row_sum of the other columns
  PRIMARY KEY (directory, name)
) WITHOUT ROWID;
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {USER_VERSION};
"""


VERDICT_COLUMNS = (
    "directory",
    "name",
    "identity",
    "stamped_ns",
    "verdict",
    "quick",
    "checked_at",
    "status",
    "revision",
)
SESSION_COLUMNS = (
    "directory",
    "name",
    "identity",
    "stamped_ns",
    "size",
    "status",
    "profile",
    "parent",
    "depth",
    "started_at",
    "ended_at",
    "cost_usd",
    "events",
    "revision",
    "error",
    "error_code",
    "meta_error",
    "meta_error_code",
    "producers",
    "costs",
)


def row_sum(values: tuple[Any, ...]) -> int:
    """The checksum of a row: CRC-32 of the ``repr`` of its values, every column but the
    checksum, in table order. Values round-trip through SQLite with their types (text, integer,
    real, NULL), so the same row read back gives the same sum. The cache is untrusted input: a
    row whose sum fails (a byte changed in a value that still parses) is treated as absent; a
    page that cannot be read makes the whole file be rebuilt. Against damage, not an attacker
    (who could write the session files as well)."""
    return zlib.crc32(repr(values).encode("utf-8", "surrogatepass"))


def _shape(conn: apsw.Connection, table: str) -> tuple[str, ...]:
    return tuple(r[1] for r in conn.execute(f"PRAGMA table_info({table})"))


# ------------------------------------------------------------------------------ identity


@dataclass(frozen=True)
class Identity:
    """What ``lstat`` says about a session file and its ``-wal`` (None: no ``-wal``)."""

    db: tuple[int, int, int, int, int]  # (dev, ino, size, mtime_ns, ctime_ns)
    # sidecars: (dev, ino, size, mtime_ns, mode, uid, gid), not their ctime — run as root,
    # SQLite fchowns a -wal and -shm to the database's owner on every open, so a read changes
    # their ctime; their mode and owner (what check judges) are taken as they are
    wal: tuple[int, ...] | None
    regular: bool  # the entry is a regular file (a link, FIFO or directory is never trusted)
    shm: tuple[int, ...] | None = None  # the -shm: a group-writable one makes it insecure

    @property
    def size(self) -> int:
        """Bytes of the database plus its ``-wal``."""
        return self.db[2] + (self.wal[2] if self.wal else 0)

    def key(self) -> str:
        wal = "-" if self.wal is None else ",".join(map(str, self.wal))
        shm = "" if self.shm is None else ";shm" + ",".join(map(str, self.shm))
        return ",".join(map(str, self.db)) + ";" + wal + (";" if self.regular else ";x") + shm

    def _stamps(self) -> list[int]:
        return [
            self.db[3],
            self.db[4],
            *(self.wal[3:4] if self.wal else ()),
            *(self.shm[3:4] if self.shm else ()),
        ]

    def newest_ns(self) -> int:
        return max(self._stamps())

    def granularity_ns(self) -> int:
        stamps = self._stamps()
        whole = all(s % 1_000_000_000 == 0 for s in stamps)
        return COARSE_GRANULARITY_NS if whole else FINE_GRANULARITY_NS


def _five(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _side(st: os.stat_result | None) -> tuple[int, ...] | None:
    if st is None:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid, st.st_gid)


def identity_from(stats: db.FileStats) -> Identity | None:
    """The identity in ``stats`` (a :func:`db.file_stats` of the path); None if absent."""
    if stats.db is None:
        return None
    return Identity(
        _five(stats.db), _side(stats.wal), stat.S_ISREG(stats.db.st_mode), _side(stats.shm)
    )


def identity_of(path: Path) -> Identity | None:
    """The identity of ``path`` and ``path-wal`` (``lstat``, never followed); None if absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return Identity(
        _five(st),
        _side(_lstat(paths.sidecar(path, "-wal"))),
        stat.S_ISREG(st.st_mode),
        _side(_lstat(paths.sidecar(path, "-shm"))),
    )


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Stamp:
    """An identity and the moment it was taken."""

    identity: Identity
    stamped_ns: int  # time.time_ns() just before the lstat

    @property
    def settled(self) -> bool:
        """The file's timestamps are older than the stamp by more than their granularity, so
        any later change must change the identity (not "racily clean")."""
        i = self.identity
        return i.regular and i.newest_ns() < self.stamped_ns - i.granularity_ns()


def stamp(path: Path) -> Stamp | None:
    t = time.time_ns()
    ident = identity_of(path)
    return None if ident is None else Stamp(ident, t)


# ------------------------------------------------------------------------------ the cache


@dataclass(frozen=True)
class Recorded:
    """One cache entry as read back."""

    name: str  # <ULID>.sqlite
    identity: str  # Identity.key() when the check started
    stamped_ns: int
    verdict: Verdict
    quick: bool
    checked_at: str  # UTC ISO time
    status: str | None
    revision: int | None

    def matches(self, now: Identity | None) -> bool:
        """The file is provably the one this verdict was given to."""
        if now is None or now.key() != self.identity or not now.regular:
            return False
        return now.newest_ns() < self.stamped_ns - now.granularity_ns()

    def age_seconds(self, now: dt.datetime | None = None) -> float | None:
        try:
            t = dt.datetime.fromisoformat(self.checked_at.replace("Z", "+00:00"))
        except ValueError:
            return None
        now = now or dt.datetime.now(dt.timezone.utc)
        return max(0.0, (now - t).total_seconds())


@dataclass(frozen=True)
class Entry:
    """A verdict to record for one session file."""

    name: str  # <ULID>.sqlite
    stamp: Stamp  # taken before the check read the file
    verdict: Verdict
    quick: bool
    status: str | None = None
    revision: int | None = None


def cache_path(cache_dir: Path | None = None) -> Path:
    return (cache_dir or paths.agentdb_cache_dir()) / CACHE_NAME


def directory_key(sessions_dir: Path) -> str:
    return os.path.realpath(sessions_dir)


def _inside(path: Path, directory: Path) -> bool:
    d = os.path.realpath(directory).rstrip(os.sep) + os.sep
    return os.path.realpath(path).startswith(d)


def _remove(path: Path) -> None:
    for p in (path, paths.sidecar(path, "-wal"), paths.sidecar(path, "-shm")):
        try:
            os.unlink(p)
        except OSError:
            pass  # absent, or not ours to remove: the next open decides


def _usable(conn: apsw.Connection) -> bool:
    """The header, version and schema are this build's (cheap: no page beyond the schema)."""
    return (
        db.pragma(conn, "application_id") == APPLICATION_ID
        and db.pragma(conn, "user_version") == USER_VERSION
        and _shape(conn, "verdicts") == (*VERDICT_COLUMNS, "checksum")
        and _shape(conn, "sessions") == (*SESSION_COLUMNS, "checksum")
        and db.scalar(conn, "SELECT count(*) FROM sqlite_schema") == 2
    )


def _open_once(path: Path) -> apsw.Connection:
    fsutil.ensure_dir(path.parent)
    exists = os.path.lexists(path)
    conn = db.open_writer(path, create=not exists)
    try:
        with db.translated(path):
            db.configure_writer(conn, path)
            # Derived data: an OS crash may lose the last transactions (WAL, NORMAL), never
            # the file's consistency (a lost entry reads as "never checked", or as the entry
            # before it, for a file whose identity did not change). FULL's fsync on every
            # commit was 20 % of a 10,000-file `check --quick` on a shared disk; and the WAL
            # stays when the connection closes (SQLite checkpoints it every 1,000 pages):
            # creating it and checkpointing it on close cost a one-file `check` three fsyncs
            # (0.1-0.3 s of its wall time on a busy disk).
            db.exec_script(conn, "PRAGMA synchronous=NORMAL")
            conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            if db.pragma(conn, "user_version") == 0:
                with conn:  # IMMEDIATE: two processes creating it at once do it one by one
                    db.exec_script(conn, _DDL)
            if not _usable(conn):
                raise errors.Unreadable(f"{path}: not agentdb's verdict cache", path=path)
    except BaseException:
        conn.close()
        raise
    return conn


# A write of at least this many verdicts (a `check --all`, a prune's judge) checkpoints the
# cache and removes its -wal when its connection is the last to close; a one-file `check`
# leaves its few frames for the next such close (what the comment in _open_once saves).
CHECKPOINT_ROWS = 64


def leave_no_wal(conn: apsw.Connection) -> None:
    """When ``conn`` closes as the cache's last connection, SQLite checkpoints the ``-wal``
    into the file and removes it (and the ``-shm``): what the cross-session commands (the
    index's readers and writer) do, so none leaves a ``-wal`` beside the cache."""
    conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0)


def open_cache(cache_dir: Path | None = None) -> apsw.Connection | None:
    """The cache, created if missing and rebuilt from nothing if it is damaged, foreign or
    insecure; None when it cannot be had (a read-only home, another process rebuilding)."""
    path = cache_path(cache_dir)
    for attempt in range(2):
        try:
            return _open_once(path)
        except errors.Busy:
            return None
        except errors.SessionExists:
            continue  # another process created it a moment ago: open theirs
        except (errors.AgentdbError, apsw.Error, OSError):
            if attempt:
                return None
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    return None  # a directory where the cache goes: leave it alone
                _remove(path)
            except OSError:
                return None
    return None


def lookup(sessions_dir: Path, *, cache_dir: Path | None = None) -> dict[str, Recorded]:
    """Every entry recorded for ``sessions_dir``, by file name (empty without a cache). Its size
    grows with the directory: a caller that walks the sessions in order uses :class:`Lookup`."""
    with Lookup(sessions_dir, cache_dir=cache_dir) as found:
        return {r.name: r for r in found.all()}


_SELECT = f"SELECT {', '.join(VERDICT_COLUMNS)}, checksum FROM verdicts WHERE directory = ?"


class Lookup:
    """The entries recorded for ``sessions_dir``, read a page of names at a time: asked in
    ascending name order (the ULID order every walk of the directory takes), one query per
    :data:`PAGE` names and memory flat in the number of sessions; asked out of order, one
    query for that name. A damaged cache is removed (the next check rebuilds it) and answers
    nothing from then on, as if never checked. Use it as a context manager (it holds the
    cache open)."""

    PAGE = 512

    def __init__(self, sessions_dir: Path, *, cache_dir: Path | None = None) -> None:
        self._path = cache_path(cache_dir)
        self._directory = directory_key(sessions_dir)
        self._conn: apsw.Connection | None = None
        self._page: dict[str, Recorded] = {}
        self._lo: str | None = None  # the page holds every entry with lo <= name <= hi
        self._hi: str | None = None
        self._last = ""
        if os.path.lexists(self._path):  # a reader never creates the cache
            self._conn = open_cache(cache_dir)
            if self._conn is not None:
                leave_no_wal(self._conn)  # a cross-session view: the last to close
        self.any: bool = bool(self._read("SELECT 1 FROM verdicts WHERE directory = ? LIMIT 1", ()))

    def __enter__(self) -> Lookup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __bool__(self) -> bool:
        return self.any

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def get(self, name: str) -> Recorded | None:
        if not self.any:
            return None
        in_order, self._last = name >= self._last, name
        if self._lo is not None and self._hi is not None and self._lo <= name <= self._hi:
            return self._page.get(name)
        if not in_order:
            got = self._rows(" AND name = ?", (name,))
            return got[0] if got else None
        rows = self._rows(" AND name >= ? ORDER BY name LIMIT ?", (name, self.PAGE), raw=True)
        self._page = {r.name: r for r in (_recorded(row) for row in rows) if r is not None}
        self._lo = name
        # a short page reaches the end: every later name is in it (that is, absent)
        self._hi = str(rows[-1][1]) if len(rows) == self.PAGE else "\U0010ffff"
        return self._page.get(name)

    def all(self) -> Iterable[Recorded]:
        """Every entry (in no particular order)."""
        return self._rows("", ()) if self.any else []

    def _rows(self, where: str, args: tuple[Any, ...], raw: bool = False) -> list[Any]:
        rows = self._read(_SELECT + where, args)
        if raw:
            return rows
        return [r for r in (_recorded(row) for row in rows) if r is not None]

    def _read(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        if self._conn is None:
            return []
        try:
            with db.translated(self._path):
                return list(self._conn.execute(sql, (self._directory, *args)))
        except errors.AgentdbError as e:
            self.close()
            self.any = False
            if isinstance(e, errors.SessionUnusable):
                _remove(self._path)  # damaged: derived data, the next check rebuilds it
            return []


def _recorded(row: tuple[Any, ...]) -> Recorded | None:
    """One row read back, or None when it fails its checksum or is not what this build
    records (as if never checked)."""
    if row[-1] != row_sum(row[:-1]):
        return None
    name, ident, ns, verdict, quick, at, status, rev = row[1:-1]
    if not (isinstance(name, str) and paths.session_id_of(name)):
        return None
    if not (isinstance(ident, str) and isinstance(ns, int) and is_verdict(verdict)):
        return None
    return Recorded(
        name,
        ident,
        ns,
        verdict,
        bool(quick),
        str(at),
        status if isinstance(status, str) else None,
        rev if isinstance(rev, int) else None,
    )


def record(
    sessions_dir: Path,
    entries: Iterable[Entry],
    *,
    cache_dir: Path | None = None,
    checked_at: str | None = None,
    checkpoint: bool = False,
) -> bool:
    """Record verdicts in one transaction; False when the cache could not be written (the
    caller may say so; no answer depends on it). With ``checkpoint`` (a cross-session job), or
    :data:`CHECKPOINT_ROWS` entries or more, the connection leaves no ``-wal`` behind when it
    closes as the cache's last (:func:`leave_no_wal`). A cache that would sit inside the sessions
    directory (a home inside it) is never created: agentdb adds nothing there. A cache found
    damaged while writing (pages that read as malformed) is removed and rebuilt once, so it
    cannot stay useless forever."""
    if _inside(cache_path(cache_dir), sessions_dir):
        return False
    at = checked_at or times.now()
    directory = directory_key(sessions_dir)
    rows = [
        (
            directory,
            e.name,
            e.stamp.identity.key(),
            e.stamp.stamped_ns,
            e.verdict,
            int(e.quick),
            at,
            e.status,
            e.revision,
        )
        for e in entries
    ]
    for attempt in range(2):
        conn = open_cache(cache_dir)
        if conn is None:
            return False
        if checkpoint or len(rows) >= CHECKPOINT_ROWS:
            leave_no_wal(conn)
        try:
            with db.translated(cache_path(cache_dir)), conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(*r, row_sum(r)) for r in rows],
                )
            return True
        except errors.SessionUnusable:
            conn.close()
            if attempt:
                return False
            _remove(cache_path(cache_dir))
        except errors.AgentdbError:
            return False
        finally:
            conn.close()
    return False


def forget_missing(
    sessions_dir: Path, present: Container[str], *, cache_dir: Path | None = None
) -> None:
    """Drop the entries of ``sessions_dir`` whose file name is not in ``present`` (a set, or
    anything that answers ``in``: a long listing need not be copied into a set)."""
    if _inside(cache_path(cache_dir), sessions_dir) or not os.path.lexists(cache_path(cache_dir)):
        return
    conn = open_cache(cache_dir)
    if conn is None:
        return
    leave_no_wal(conn)  # the end of a check --all: no -wal left behind
    directory = directory_key(sessions_dir)
    try:
        with db.translated(cache_path(cache_dir)), conn:
            gone = [
                (directory, name)
                for (name,) in conn.execute(
                    "SELECT name FROM verdicts WHERE directory = ?", (directory,)
                )
                if name not in present
            ]
            conn.executemany("DELETE FROM verdicts WHERE directory = ? AND name = ?", gone)
    except errors.AgentdbError:
        pass
    finally:
        conn.close()
