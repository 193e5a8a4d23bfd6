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
from array import array
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import apsw

Row = tuple[Any, ...]
_MIN_KEY, _MAX_KEY = -(1 << 63), (1 << 63) - 1
_PICKLE = pickle.HIGHEST_PROTOCOL
_BATCH = 1000  # writes buffered before they go to SQLite


def _dumps(v: Any) -> bytes:
    return pickle.dumps(v, _PICKLE)


def _int_key(k: Any) -> bool:
    if type(k) is int:  # the common case first: a plain int (never a bool)
        return _MIN_KEY <= k <= _MAX_KEY
    return isinstance(k, int) and not isinstance(k, bool) and _MIN_KEY <= k <= _MAX_KEY


class DiskMap(MutableMapping[Any, Any]):
    """An integer-keyed mapping held in table ``name`` of ``conn``. Other keys are never in it.

    Writes are buffered (:data:`_BATCH` at a time); a point read looks in the buffer first, a
    scan writes it out first. :meth:`first` keeps the value of the first write of a key (the
    others replace it); a map uses one or the other."""

    def __init__(self, conn: apsw.Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        self._cur = conn.cursor()  # point queries only (a scan gets its own cursor)
        self._n: int | None = 0
        self._put: dict[int, bytes] = {}  # writes not yet in the table (replace)
        self._first: list[tuple[int, bytes]] = []  # writes not yet in the table (keep first)
        conn.execute(f"CREATE TABLE {name}(k INTEGER PRIMARY KEY, v BLOB NOT NULL)")
        self._get = f"SELECT v FROM {name} WHERE k = ?"

    def flush(self) -> None:
        """Write the buffered writes out."""
        if self._put:
            sql = f"INSERT OR REPLACE INTO {self.name}(k, v) VALUES (?, ?)"
            self.conn.executemany(sql, list(self._put.items()))
            self._put.clear()
        if self._first:
            sql = f"INSERT OR IGNORE INTO {self.name}(k, v) VALUES (?, ?)"
            self.conn.executemany(sql, self._first)
            self._first.clear()

    def _raw(self, k: Any) -> bytes | None:
        if not _int_key(k):
            return None
        data = self._put.get(k)
        if data is not None:
            return data
        if self._first:
            self.flush()
        got = self._cur.execute(self._get, (k,)).fetchone()
        return None if got is None else got[0]

    def __getitem__(self, k: Any) -> Any:
        data = self._raw(k)
        if data is None:
            raise KeyError(k)
        return pickle.loads(data)

    def get(self, k: Any, default: Any = None) -> Any:
        data = self._raw(k)
        return default if data is None else pickle.loads(data)

    def __contains__(self, k: object) -> bool:
        return self._raw(k) is not None

    def __setitem__(self, k: Any, v: Any) -> None:
        if not _int_key(k):
            raise KeyError(k)
        self._put[k] = _dumps(v)
        self._n = None
        if len(self._put) >= _BATCH:
            self.flush()

    def put_raw(self, k: int, data: bytes) -> None:
        """Set ``k`` to a value already pickled."""
        self._put[k] = data
        self._n = None
        if len(self._put) >= _BATCH:
            self.flush()

    def first(self, k: Any, v: Any) -> None:
        """Set ``k`` to ``v`` unless it is set already."""
        if _int_key(k):
            self._first.append((k, _dumps(v)))
            self._n = None
            if len(self._first) >= _BATCH:
                self.flush()

    def __delitem__(self, k: Any) -> None:
        if k not in self:
            raise KeyError(k)
        self.flush()
        self.conn.execute(f"DELETE FROM {self.name} WHERE k = ?", (k,))
        self._n = None

    def __len__(self) -> int:
        if self._n is None:
            self.flush()
            got = self.conn.execute(f"SELECT count(*) FROM {self.name}").fetchall()
            self._n = int(got[0][0])  # type: ignore[arg-type]
        return self._n

    def __iter__(self) -> Iterator[Any]:
        """Keys in ascending order (do not write to this map while iterating)."""
        self.flush()
        for (k,) in self.conn.execute(f"SELECT k FROM {self.name} ORDER BY k"):
            yield k

    def ordered(self) -> Iterator[tuple[Any, Any]]:
        """(key, value) in ascending key order, streamed."""
        self.flush()
        for k, v in self.conn.execute(f"SELECT k, v FROM {self.name} ORDER BY k"):
            yield k, pickle.loads(v)

    def raw(self, other: DiskMap | None = None) -> Iterator[tuple[int, bytes, bytes | None]]:
        """(key, pickled value, ``other``'s pickled value for the key or None) in key order."""
        self.flush()
        if other is None:
            yield from (
                (k, v, None)
                for k, v in self.conn.execute(f"SELECT k, v FROM {self.name} ORDER BY k")
            )
            return
        other.flush()
        sql = (
            f"SELECT a.k, a.v, b.v FROM {self.name} a LEFT JOIN {other.name} b ON b.k = a.k "
            "ORDER BY a.k"
        )
        yield from self.conn.execute(sql)

    def copy_from(self, other: DiskMap) -> int:
        """Every entry of ``other`` whose key is not here yet, added; how many."""
        self.flush()
        other.flush()
        self.conn.execute(f"INSERT OR IGNORE INTO {self.name}(k, v) SELECT k, v FROM {other.name}")
        n = self.conn.changes()
        self._n = None
        return n

    def highest(self) -> Any:
        """The largest key (None when empty)."""
        self.flush()
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
        self._pending: list[tuple[int, bytes]] = []
        self._cur = conn.cursor()

    def add(self, k: int, h: bytes) -> None:
        if _int_key(k):
            self._pending.append((k, h))
            if len(self._pending) >= _BATCH:
                self.flush()

    def flush(self) -> None:
        if self._pending:
            sql = f"INSERT OR IGNORE INTO {self.name}(k, h) VALUES (?, ?)"
            self.conn.executemany(sql, self._pending)
            self._pending.clear()

    def get(self, k: Any) -> set[bytes]:
        """The hashes seen for sequence ``k`` (empty when none)."""
        if not _int_key(k):
            return set()
        self.flush()
        sql = f"SELECT h FROM {self.name} WHERE k = ?"
        return {bytes(h) for (h,) in self._cur.execute(sql, (k,))}

    def __contains__(self, k: object) -> bool:
        self.flush()
        sql = f"SELECT 1 FROM {self.name} WHERE k = ?"
        return _int_key(k) and self._cur.execute(sql, (k,)).fetchone() is not None


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


_CAND = "tbl, tier, at, r, rowid_, chain"


def _candidate(got: Any) -> Candidate:
    tbl, tier, at, r, rowid, chain = got
    return Candidate(
        tbl, pickle.loads(r), tier, at, rowid, tuple(array("q", chain)) if chain else ()
    )


class Candidates:
    """The page engine's rows in the order found (appends buffered; a read writes them out)."""

    def __init__(self, conn: apsw.Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        self._n = 0
        self._pending: list[tuple[Any, ...]] = []
        self._last = 0  # the id of the last candidate added (ids count from 1, in order)
        conn.execute(
            f"CREATE TABLE {name}(id INTEGER PRIMARY KEY, tbl TEXT NOT NULL, k, "
            "tier INTEGER NOT NULL, at TEXT NOT NULL, r BLOB NOT NULL, rowid_ INTEGER, chain BLOB)"
        )
        self._indexed = False
        self._cur = conn.cursor()

    def append(self, c: Candidate, key: Any, data: bytes | None = None) -> None:
        """Add ``c`` (``data``: its row pickled already)."""
        chain = array("q", c.chain).tobytes() if c.chain else None
        data = _dumps(c.row) if data is None else data
        self._last += 1
        row = (self._last, c.table, key_text(key), c.tier, c.where, data, c.rowid, chain)
        self._pending.append(row)
        self._n += 1
        if len(self._pending) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            sql = (
                f"INSERT INTO {self.name}(id, tbl, k, tier, at, r, rowid_, chain) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            )
            self.conn.executemany(sql, self._pending)
            self._pending.clear()

    def __len__(self) -> int:
        return self._n

    @property
    def last_id(self) -> int:
        """The id of the last candidate added (0: none yet); the next one gets the next id."""
        return self._last

    def keys_between(self, table: str, first: int, last: int) -> list[tuple[int, Any]]:
        """(id, key) of the candidates of ``table`` with ids in [first, last]."""
        self.flush()
        sql = f"SELECT id, k FROM {self.name} WHERE tbl = ? AND id BETWEEN ? AND ? ORDER BY id"
        return [(int(i), k) for i, k in self.conn.execute(sql, (table, first, last))]

    def highest_key(self, table: str, skip: set[int]) -> Any:
        """The largest key of ``table``'s candidates but for those whose id is in ``skip``
        (None: no other)."""
        self._index()
        sql = f"SELECT id, k FROM {self.name} WHERE tbl = ? ORDER BY k DESC"
        for i, k in self.conn.execute(sql, (table,)):
            if i not in skip:
                return k
        return None

    def remove(self, ids: set[int]) -> None:
        """Forget the candidates with these ids."""
        self.flush()
        self.conn.executemany(f"DELETE FROM {self.name} WHERE id = ?", [(i,) for i in ids])
        self._n -= len(ids)

    def _rows(self, where: str = "", args: tuple[Any, ...] = ()) -> Iterator[Candidate]:
        self.flush()
        # in id order, no index: a scan without a sort (not even a spilled one)
        sql = f"SELECT {_CAND} FROM {self.name} NOT INDEXED {where} ORDER BY id"
        return map(_candidate, self.conn.execute(sql, args))

    def __iter__(self) -> Iterator[Candidate]:
        return self._rows()

    def of_tier(self, tier: int) -> Iterator[Candidate]:
        return self._rows("WHERE tier = ?", (tier,))

    def of_table(self, table: str) -> Iterator[Candidate]:
        return self._rows("WHERE tbl = ?", (table,))

    def not_in(self, table: str, tier: int, m: DiskMap) -> Iterator[Candidate]:
        """The candidates of ``table`` and ``tier`` in the order found, but for those whose key
        the table of ``m`` already holds (``m`` only grows while this runs)."""
        m.flush()
        where = f"WHERE tbl = ? AND tier = ? AND NOT EXISTS (SELECT 1 FROM {m.name} WHERE k = c.k)"
        self.flush()
        sql = f"SELECT {_CAND} FROM {self.name} c NOT INDEXED {where} ORDER BY id"
        return map(_candidate, self.conn.execute(sql, (table, tier)))

    def of_key(self, table: str, tier: int, key: Any) -> list[Candidate]:
        """The candidates of (table, tier, key) in the order found."""
        self._index()
        sql = f"SELECT {_CAND} FROM {self.name} WHERE tbl = ? AND k = ? AND tier = ? ORDER BY id"
        return [_candidate(g) for g in self.conn.execute(sql, (table, key_text(key), tier))]

    def copy_tier(
        self, table: str, tier: int, m: DiskMap, skip: set[Any], mark: DiskMap | None = None
    ) -> int:
        """Into ``m``, the first candidate (in the order found) of ``table`` and ``tier`` of
        each integer key ``m`` does not hold yet and ``skip`` does not name; each such key is
        also set to True in ``mark`` when given. Returns how many went in."""
        self.flush()
        m.flush()
        if mark is not None:
            mark.flush()
        # in the scratch database itself: a TEMP table could spill to SQLite's temp directory
        self.conn.execute("CREATE TABLE IF NOT EXISTS skip_keys(k INTEGER PRIMARY KEY)")
        self.conn.execute("DELETE FROM skip_keys")
        ints = [(k,) for k in skip if _int_key(k)]
        if ints:
            self.conn.executemany("INSERT OR IGNORE INTO skip_keys(k) VALUES (?)", ints)
        new = (
            f"FROM {self.name} c NOT INDEXED WHERE c.tbl = ? AND c.tier = ? "
            f"AND typeof(c.k) = 'integer' AND c.k NOT IN (SELECT k FROM skip_keys) "
            f"AND NOT EXISTS (SELECT 1 FROM {m.name} WHERE k = c.k)"
        )
        if mark is not None:
            self.conn.execute(
                f"INSERT OR IGNORE INTO {mark.name}(k, v) SELECT c.k, ? {new}",
                (_dumps(True), table, tier),
            )
            mark._n = None
        # INSERT OR IGNORE in id order: the first copy of a key found wins, as put() does
        self.conn.execute(
            f"INSERT OR IGNORE INTO {m.name}(k, v) SELECT c.k, c.r {new} ORDER BY c.id",
            (table, tier),
        )
        n = self.conn.changes()
        m._n = None
        self.conn.execute("DELETE FROM skip_keys")
        return n

    def found_at(self, places: set[str]) -> Iterator[Candidate]:
        """The candidates read from any of these page images, in the order found."""
        todo = sorted(places)
        for i in range(0, len(todo), 500):
            part = todo[i : i + 500]
            yield from self._rows(f"WHERE at IN ({','.join('?' * len(part))})", tuple(part))

    def counts(self) -> dict[str, int]:
        """Candidates per table."""
        self.flush()
        sql = f"SELECT tbl, count(*) FROM {self.name} GROUP BY tbl"
        return {str(t): int(n) for t, n in self.conn.execute(sql)}

    def _index(self) -> None:
        self.flush()
        if not self._indexed:
            self.conn.execute(f"CREATE INDEX {self.name}_key ON {self.name}(tbl, k, id)")
            self._indexed = True

    def first(self, table: str, key: Any) -> Row | None:
        """The row of the first candidate of (table, key) in the order found (None: none)."""
        self._index()
        sql = f"SELECT r FROM {self.name} WHERE tbl = ? AND k = ? ORDER BY id LIMIT 1"
        got = self._cur.execute(sql, (table, key_text(key))).fetchone()
        return None if got is None else pickle.loads(got[0])

    def beside(self, table: str, m: DiskMap) -> Iterator[tuple[int, bytes, bytes | None]]:
        """(key, pickled row, pickled row of the first candidate of ``table`` with that key or
        None) for every entry of ``m``, in key order."""
        self._index()
        m.flush()
        sql = (
            f"SELECT m.k, m.v, (SELECT c.r FROM {self.name} c WHERE c.tbl = ? AND c.k = +m.k "
            f"ORDER BY c.id LIMIT 1) FROM {m.name} m ORDER BY m.k"
        )
        yield from self.conn.execute(sql, (table,))


class Verified:
    """Revision-2 events whose stored content hash matches their bytes: sequence -> (row, hash)
    of the first such copy found (writes buffered; a read writes them out)."""

    def __init__(self, conn: apsw.Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        self._cur = conn.cursor()
        self._pending: list[tuple[int, bytes, bytes]] = []
        conn.execute(
            f"CREATE TABLE {name}(k INTEGER PRIMARY KEY, v BLOB NOT NULL, h BLOB NOT NULL)"
        )

    def first(self, k: int, row: Row, h: bytes, data: bytes | None = None) -> None:
        """Keep (row, h) for ``k`` unless a copy is kept already (``data``: the row pickled)."""
        if _int_key(k):
            self._pending.append((k, _dumps(row) if data is None else data, h))
            if len(self._pending) >= _BATCH:
                self.flush()

    def flush(self) -> None:
        if self._pending:
            sql = f"INSERT OR IGNORE INTO {self.name}(k, v, h) VALUES (?, ?, ?)"
            self.conn.executemany(sql, self._pending)
            self._pending.clear()

    def get(self, k: Any) -> tuple[Row, bytes] | None:
        if not _int_key(k):
            return None
        self.flush()
        got = self._cur.execute(f"SELECT v, h FROM {self.name} WHERE k = ?", (k,)).fetchone()
        return None if got is None else (pickle.loads(got[0]), bytes(got[1]))

    def __contains__(self, k: object) -> bool:
        return self.get(k) is not None

    def beside(self, m: DiskMap) -> Iterator[tuple[int, bytes, bytes | None, bytes | None]]:
        """(key, pickled value, the pickled verified row and its hash, or None, None) for every
        entry of ``m``, in key order."""
        m.flush()
        self.flush()
        sql = (
            f"SELECT a.k, a.v, b.v, b.h FROM {m.name} a LEFT JOIN {self.name} b ON b.k = a.k "
            "ORDER BY a.k"
        )
        yield from m.conn.execute(sql)
