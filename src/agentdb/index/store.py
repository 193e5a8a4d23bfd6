"""The index's rows in the one derived cache file (:mod:`agentdb.index.verdicts` opens it: the same
hardened settings as every session, rebuilt from nothing when its application id, version or
tables are wrong or it cannot be read).

Nothing read from here is believed as such: a row is used only when the walk's identity of the
file equals the stored one and is settled (:meth:`agentdb.index.stat.Seen.trusts`), and any
malformed value makes the caller read the file instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors
from agentdb.index import verdicts
from agentdb.index.record import COLUMNS, Record

Stored = dict[str, tuple[Any, ...]]  # name -> (identity, stamped_ns, size, *COLUMNS)

assert ("directory", "name", "identity", "stamped_ns", "size", *COLUMNS) == verdicts.SESSION_COLUMNS
# Rows in name order (the primary key's: no sort); every column is read, so that the checksum
# (verdicts.row_sum) can be verified, and the directory checked again (a damaged b-tree page
# may hand back another directory's row).
_SELECT = (
    f"SELECT {', '.join(verdicts.SESSION_COLUMNS)}, checksum FROM sessions "
    "WHERE directory = ? ORDER BY name"
)
_UPSERT = (
    f"INSERT OR REPLACE INTO sessions ({', '.join(verdicts.SESSION_COLUMNS)}, checksum) "
    f"VALUES ({', '.join('?' * (len(verdicts.SESSION_COLUMNS) + 1))})"
)
_NO_EXTRAS = 2  # producers and costs, the last two COLUMNS


class Unavailable(Exception):
    """The index cannot be used this time; the message says why (a note for stderr)."""


def usable_for(sessions_dir: Path, cache_dir: Path | None) -> bool:
    """False when the cache file would sit inside the sessions directory (agentdb adds nothing
    there)."""
    return not verdicts._inside(verdicts.cache_path(cache_dir), sessions_dir)


def open_index(cache_dir: Path | None) -> apsw.Connection:
    conn = verdicts.open_cache(cache_dir)
    if conn is None:
        raise Unavailable(f"{verdicts.cache_path(cache_dir)}: the index cannot be opened")
    verdicts.leave_no_wal(conn)  # the last to close checkpoints: no -wal left behind
    return conn


def discard(cache_dir: Path | None) -> None:
    """Remove a damaged index (derived data: the next query rebuilds it)."""
    verdicts._remove(verdicts.cache_path(cache_dir))


def load(
    conn: apsw.Connection, directory: str, cache_dir: Path | None, extras: bool = True
) -> Stored:
    """Every row stored for ``directory``; raises :class:`Unavailable` for a damaged index."""
    return dict(rows(conn, directory, cache_dir, extras))


def rows(
    conn: apsw.Connection, directory: str, cache_dir: Path | None, extras: bool = True
) -> Generator[tuple[str, tuple[Any, ...]], None, None]:
    """Every row stored for ``directory`` whose checksum holds, as ``(name, (identity,
    stamped_ns, size, *COLUMNS))``, in name order as far as the file says so (the caller
    must not rely on it: a damaged page can break it); raises :class:`Unavailable` when the
    file cannot be read."""
    path = verdicts.cache_path(cache_dir)
    try:
        with db.translated(path):
            for r in conn.execute(_SELECT, (directory,)):
                body = r[:-1]
                if r[0] != directory or r[-1] != verdicts.row_sum(body) or type(r[1]) is not str:
                    continue
                yield r[1], (body[2:] if extras else (*body[2:-_NO_EXTRAS], None, None))
    except (errors.AgentdbError, UnicodeDecodeError) as e:
        raise Unavailable(f"{path}: {e}") from e


def count(conn: apsw.Connection, directory: str, cache_dir: Path | None) -> int:
    """How many rows are stored for ``directory`` (checksums unchecked)."""
    path = verdicts.cache_path(cache_dir)
    try:
        with db.translated(path):
            n = db.scalar(conn, "SELECT count(*) FROM sessions WHERE directory = ?", (directory,))
    except errors.AgentdbError as e:
        raise Unavailable(f"{path}: {e}") from e
    return n if isinstance(n, int) else 0


def write(
    conn: apsw.Connection,
    directory: str,
    fresh: Iterable[tuple[Record, str, str, int]],
    gone: Iterable[str],
    cache_dir: Path | None,
) -> None:
    """Store ``fresh`` (record, file name, identity, stamp) and forget ``gone`` in one
    transaction under the busy timeout; raises :class:`Unavailable` when it cannot (busy,
    damaged, read-only)."""
    new = [(directory, name, key, stamped, r.size, *r.columns()) for r, name, key, stamped in fresh]
    dead = [(directory, n) for n in gone]
    path = verdicts.cache_path(cache_dir)
    try:
        with db.translated(path), conn:
            conn.executemany(_UPSERT, [(*r, verdicts.row_sum(r)) for r in new])
            conn.executemany("DELETE FROM sessions WHERE directory = ? AND name = ?", dead)
    except errors.Retryable as e:
        raise Unavailable(f"{path}: busy (another agentdb is refreshing it): {e}") from e
    except errors.AgentdbError as e:
        raise Unavailable(f"{path}: {e}") from e


BATCH = 1_000  # rows per write


class Writer:
    """Rows read during one query, written in batches of :data:`BATCH` inside one
    transaction that the first batch opens (on a connection of its own: the query's cursor
    keeps reading its snapshot) and :meth:`finish` commits — nothing is held in memory for
    long, and nothing is written when nothing changed. When the index cannot be written (busy,
    damaged, read-only) the rest is dropped and :meth:`finish` says why."""

    def __init__(self, directory: str, cache_dir: Path | None) -> None:
        self.directory = directory
        self.cache_dir = cache_dir
        self.path = verdicts.cache_path(cache_dir)
        self.pending: list[tuple[Any, ...]] = []
        self.conn: apsw.Connection | None = None
        self.failed: str | None = None

    def add(self, rec: Record, name: str, key: str, stamped: int) -> None:
        if self.failed is not None:
            return
        row = (self.directory, name, key, stamped, rec.size, *rec.columns())
        self.pending.append((*row, verdicts.row_sum(row)))
        if len(self.pending) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        rows, self.pending = self.pending, []
        if not rows or self.failed is not None:
            return
        with self._writing():
            if self.conn is None:
                self.conn = open_index(self.cache_dir)
                with db.translated(self.path):
                    self.conn.execute("BEGIN IMMEDIATE")
            with db.translated(self.path):
                self.conn.executemany(_UPSERT, rows)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A write that fails leaves the index as it was and notes why (answers come from the
        files)."""
        try:
            yield
        except Unavailable as e:
            self._fail(str(e))
        except errors.Retryable as e:
            self._fail(f"{self.path}: busy (another agentdb is refreshing it): {e}")
        except errors.AgentdbError as e:
            self._fail(f"{self.path}: {e}")

    def _fail(self, why: str) -> None:
        self.failed = why
        self.abort()

    def finish(self, gone: Iterable[str]) -> list[str]:
        """Write the rest, forget ``gone``, commit; the notes to show (none when all went
        well)."""
        dead = [(self.directory, n) for n in gone]
        if self.failed is None and (self.pending or self.conn is not None or dead):
            self._flush()
            with self._writing():
                if self.conn is None and dead and self.failed is None:
                    self.conn = open_index(self.cache_dir)
                    with db.translated(self.path):
                        self.conn.execute("BEGIN IMMEDIATE")
                if self.conn is not None and self.failed is None:
                    with db.translated(self.path):
                        self.conn.executemany(
                            "DELETE FROM sessions WHERE directory = ? AND name = ?", dead
                        )
                        self.conn.execute("COMMIT")
        self.abort()
        return (
            []
            if self.failed is None
            else [f"index not updated: {self.failed}; answered from the files"]
        )

    def abort(self) -> None:
        """Roll back whatever is not committed and let go of the index."""
        if self.conn is None:
            return
        conn, self.conn = self.conn, None
        try:
            if not conn.getautocommit():
                conn.execute("ROLLBACK")
        except apsw.Error:
            pass  # closing rolls back too
        finally:
            conn.close()
