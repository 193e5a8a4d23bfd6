"""Salvaged rows kept in the job's scratch database, so a salvage's memory does not grow with the
number of rows it finds.

The engines and the merge work on these as they did on dicts and lists: :class:`DiskMap` (an
integer-keyed mapping: the rows of ``events``, ``cost_ledger`` and ``plan_items`` by sequence,
content hashes, verified rows), :class:`HashSets` (every stored content hash seen per sequence)
and :class:`Candidates` (the page engine's rows in the order found, with their tier and where they
were read). Each is one table of the scratch database (:class:`~agentdb.salvage.scratch.Scratch`,
private to the job, 0600 in a 0700 directory, thrown away with it); SQLite's page cache bounds
what stays in memory. Values are pickled: the file is written and read by this process only.
Iteration is in key (or insertion) order, streamed from SQLite.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import apsw

Row = tuple[Any, ...]
_MIN_KEY, _MAX_KEY = -(1 << 63), (1 << 63) - 1
_PICKLE = pickle.HIGHEST_PROTOCOL


def _dumps(v: Any) -> bytes:
    return pickle.dumps(v, _PICKLE)


def _int_key(k: Any) -> bool:
    return isinstance(k, int) and not isinstance(k, bool) and _MIN_KEY <= k <= _MAX_KEY


class DiskMap(MutableMapping[Any, Any]):
    """An integer-keyed mapping held in table ``name`` of ``conn``. Other keys are never in it."""

    def __init__(self, conn: apsw.Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        self._n = 0
        conn.execute(f"CREATE TABLE {name}(k INTEGER PRIMARY KEY, v BLOB NOT NULL)")
        self._get = f"SELECT v FROM {name} WHERE k = ?"
        self._has = f"SELECT 1 FROM {name} WHERE k = ?"
        self._add = f"INSERT OR IGNORE INTO {name}(k, v) VALUES (?, ?)"
        self._set = f"UPDATE {name} SET v = ? WHERE k = ?"

    def __getitem__(self, k: Any) -> Any:
        got = self.conn.execute(self._get, (k,)).fetchone() if _int_key(k) else None
        if got is None:
            raise KeyError(k)
        return pickle.loads(got[0])

    def get(self, k: Any, default: Any = None) -> Any:
        got = self.conn.execute(self._get, (k,)).fetchone() if _int_key(k) else None
        return default if got is None else pickle.loads(got[0])

    def __contains__(self, k: object) -> bool:
        return _int_key(k) and self.conn.execute(self._has, (k,)).fetchone() is not None

    def __setitem__(self, k: Any, v: Any) -> None:
        if not _int_key(k):
            raise KeyError(k)
        data = _dumps(v)
        self.conn.execute(self._add, (k, data))
        if self.conn.changes():
            self._n += 1
        else:
            self.conn.execute(self._set, (data, k))

    def setdefault(self, k: Any, default: Any = None) -> Any:
        if not _int_key(k):
            raise KeyError(k)
        self.conn.execute(self._add, (k, _dumps(default)))
        if self.conn.changes():
            self._n += 1
            return default
        return self[k]

    def __delitem__(self, k: Any) -> None:
        if k not in self:
            raise KeyError(k)
        self.conn.execute(f"DELETE FROM {self.name} WHERE k = ?", (k,))
        self._n -= 1

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Any]:
        """Keys in ascending order (do not write to this map while iterating)."""
        for (k,) in self.conn.execute(f"SELECT k FROM {self.name} ORDER BY k"):
            yield k

    def ordered(self) -> Iterator[tuple[Any, Any]]:
        """(key, value) in ascending key order, streamed."""
        for k, v in self.conn.execute(f"SELECT k, v FROM {self.name} ORDER BY k"):
            yield k, pickle.loads(v)

    def highest(self) -> Any:
        """The largest key (None when empty)."""
        return self.conn.execute(f"SELECT max(k) FROM {self.name}").fetchone()[0]  # type: ignore[index]


def ordered(m: MutableMapping[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """(key, value) of a :class:`DiskMap` or a dict, in ascending key order."""
    if isinstance(m, DiskMap):
        return m.ordered()
    return iter(sorted(m.items()))


def highest(m: MutableMapping[Any, Any]) -> Any:
    """The largest key of a :class:`DiskMap` or a dict (None when empty)."""
    if isinstance(m, DiskMap):
        return m.highest()
    return max(m) if m else None


class HashSets:
    """Every stored content hash seen per event sequence (several copies may disagree)."""

    def __init__(self, conn: apsw.Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        conn.execute(f"CREATE TABLE {name}(k INTEGER NOT NULL, h BLOB NOT NULL, UNIQUE(k, h))")

    def add(self, k: int, h: bytes) -> None:
        if _int_key(k):
            self.conn.execute(f"INSERT OR IGNORE INTO {self.name}(k, h) VALUES (?, ?)", (k, h))

    def get(self, k: Any) -> set[bytes]:
        """The hashes seen for sequence ``k`` (empty when none)."""
        if not _int_key(k):
            return set()
        return {
            bytes(h) for (h,) in self.conn.execute(f"SELECT h FROM {self.name} WHERE k = ?", (k,))
        }

    def __contains__(self, k: object) -> bool:
        sql = f"SELECT 1 FROM {self.name} WHERE k = ?"
        return _int_key(k) and self.conn.execute(sql, (k,)).fetchone() is not None

    def items(self) -> Iterator[tuple[int, set[bytes]]]:
        """(sequence, its hashes) in ascending order."""
        cur: int | None = None
        got: set[bytes] = set()
        for k, h in self.conn.execute(f"SELECT k, h FROM {self.name} ORDER BY k, h"):
            if k != cur:
                if cur is not None:
                    yield cur, got
                cur, got = k, set()
            got.add(bytes(h))
        if cur is not None:
            yield cur, got


@dataclass(frozen=True)
class Candidate:
    """One validated row found in the file."""

    table: str  # one of our five tables
    row: Row  # revision-1 columns
    tier: int  # LIVE, STRAY or STALE (see :mod:`.pages`)
    where: str  # "page 7" / "wal frame 12 (page 7)" / "file page 7 (older)"
    rowid: int | None = None  # the cell's rowid
    chain: tuple[int, ...] = ()  # the overflow pages its payload was read from


def key_text(key: Any) -> Any:
    """A key as the scratch database stores it: integers and text as they are, others (the
    ``producers`` key, a tuple of text) as their repr."""
    return key if isinstance(key, int | str) else repr(key)


class Candidates:
    """The page engine's rows in the order found."""

    def __init__(self, conn: apsw.Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        self._n = 0
        conn.execute(
            f"CREATE TABLE {name}(id INTEGER PRIMARY KEY, tbl TEXT NOT NULL, k, "
            "tier INTEGER NOT NULL, at TEXT NOT NULL, v BLOB NOT NULL)"
        )
        self._indexed = False

    def append(self, c: Candidate, key: Any) -> None:
        sql = f"INSERT INTO {self.name}(tbl, k, tier, at, v) VALUES (?, ?, ?, ?, ?)"
        data = _dumps((c.row, c.rowid, c.chain))
        self.conn.execute(sql, (c.table, key_text(key), c.tier, c.where, data))
        self._n += 1

    def __len__(self) -> int:
        return self._n

    def _rows(self, where: str = "", args: tuple[Any, ...] = ()) -> Iterator[Candidate]:
        sql = f"SELECT tbl, tier, at, v FROM {self.name} {where} ORDER BY id"
        for tbl, tier, at, v in self.conn.execute(sql, args):
            row, rowid, chain = pickle.loads(v)
            yield Candidate(tbl, row, tier, at, rowid, chain)

    def __iter__(self) -> Iterator[Candidate]:
        return self._rows()

    def of_tier(self, tier: int) -> Iterator[Candidate]:
        return self._rows("WHERE tier = ?", (tier,))

    def of_table(self, table: str) -> Iterator[Candidate]:
        return self._rows("WHERE tbl = ?", (table,))

    def found_at(self, places: set[str]) -> Iterator[Candidate]:
        """The candidates read from any of these page images, in the order found."""
        todo = sorted(places)
        for i in range(0, len(todo), 500):
            part = todo[i : i + 500]
            yield from self._rows(f"WHERE at IN ({','.join('?' * len(part))})", tuple(part))

    def counts(self) -> dict[str, int]:
        """Candidates per table."""
        sql = f"SELECT tbl, count(*) FROM {self.name} GROUP BY tbl"
        return {str(t): int(n) for t, n in self.conn.execute(sql)}

    def first(self, table: str, key: Any) -> Row | None:
        """The row of the first candidate of (table, key) in the order found (None: none)."""
        if not self._indexed:
            self.conn.execute(f"CREATE INDEX {self.name}_key ON {self.name}(tbl, k, id)")
            self._indexed = True
        sql = f"SELECT v FROM {self.name} WHERE tbl = ? AND k = ? ORDER BY id LIMIT 1"
        got = self.conn.execute(sql, (table, key_text(key))).fetchone()
        return None if got is None else pickle.loads(got[0])[0]
