"""The index's rows in the one derived cache file (:mod:`agentdb.verdicts` opens it: the same
hardened settings as every session, rebuilt from nothing when its application id, version or
tables are wrong or it cannot be read).

Nothing read from here is believed as such: a row is used only when the walk's identity of the
file equals the stored one and is settled (:meth:`agentdb.index.stat.Seen.trusts`), and any
malformed value makes the caller read the file instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors, verdicts
from agentdb.index.record import COLUMNS, Record

Stored = dict[str, tuple[Any, ...]]  # name -> (identity, stamped_ns, size, *COLUMNS)

_SELECT = f"SELECT name, identity, stamped_ns, size, {', '.join(COLUMNS)} FROM sessions "
# The same without producers and costs (the list and tree views do not show them).
_SELECT_BARE = (
    f"SELECT name, identity, stamped_ns, size, {', '.join(COLUMNS[:-2])}, NULL, NULL FROM sessions "
)
_UPSERT = (
    "INSERT OR REPLACE INTO sessions (directory, name, identity, stamped_ns, size, "
    f"{', '.join(COLUMNS)}) VALUES ({', '.join('?' * (5 + len(COLUMNS)))})"
)


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
    path = verdicts.cache_path(cache_dir)
    try:
        with db.translated(path):
            sql = _SELECT if extras else _SELECT_BARE
            cur = conn.execute(sql + "WHERE directory = ?", (directory,))
            return {r[0]: r[1:] for r in cur if isinstance(r[0], str)}
    except errors.AgentdbError as e:
        raise Unavailable(f"{path}: {e}") from e


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
    rows = [
        (directory, name, key, stamped, r.size, *r.columns()) for r, name, key, stamped in fresh
    ]
    dead = [(directory, n) for n in gone]
    path = verdicts.cache_path(cache_dir)
    try:
        with db.translated(path), conn:
            conn.executemany(_UPSERT, rows)
            conn.executemany("DELETE FROM sessions WHERE directory = ? AND name = ?", dead)
    except errors.Retryable as e:
        raise Unavailable(f"{path}: busy (another agentdb is refreshing it): {e}") from e
    except errors.AgentdbError as e:
        raise Unavailable(f"{path}: {e}") from e
