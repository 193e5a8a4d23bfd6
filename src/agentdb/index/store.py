"""The index's rows in the one derived cache file (:mod:`agentdb.verdicts` opens it: the same
hardened settings as every session, rebuilt from nothing when its application id, version or
tables are wrong or it cannot be read).

Nothing read from here is believed as such: a row is used only when the walk's identity of the
file equals the stored one and is settled (:meth:`agentdb.index.stat.Seen.trusts`), and any
malformed value makes the caller read the file instead.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors, verdicts
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
