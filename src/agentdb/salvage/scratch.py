"""The job's private scratch database: the rows the engines find go into it as they are found
(:mod:`.diskrows`: the page engine's candidates, SQLite's reads, verified rows and hashes, the
merged rows), and so do their large values, so a salvage's memory is flat in the number of rows
and holds at most :data:`MEMORY_BUDGET` bytes of a session's long payloads.

Each engine validates a row (and, for a revision-2 event, checks its content hash) with the
value in hand, then :meth:`Scratch.keep` writes every value of :data:`SPILL_AT` bytes or more
into the scratch database, keyed by its digest (a value two engines found is stored once), and
the row carries a small :class:`Spilled` in its place. Rows compare equal when their values do
(a :class:`Spilled` compares with another by digest, with bytes or text by hashing them), so the
merge works on rows as before. The replacement is written row by row, each value read back
(:meth:`Scratch.resolve`). The scratch database lives in the job's private work directory
(0700, outside the sessions directory) and goes with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from agentdb import db
from agentdb.salvage.diskrows import Candidates, DiskMap, HashSets, Verified

if TYPE_CHECKING:
    from agentdb.salvage.chainrows import ChainEvidence

try:  # CPython's own BLAKE2b, as agentdb.hashing takes it: hashlib would load OpenSSL
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - another Python: the same function through hashlib
    from hashlib import blake2b

SPILL_AT = 4096  # values this long or longer are kept apart from the rows
MEMORY_BUDGET = 8 << 20  # bytes of such values kept in memory before they go to the database
Row = tuple[Any, ...]
_LONG = (bytes, str)  # the types a long value has (a tuple: isinstance is faster than with a union)
_last: list[Any] = [None, b""]  # the last value digested and its digest (compared, then kept)


def _digest(data: bytes) -> bytes:
    if _last[0] is data:
        return bytes(_last[1])
    digest = blake2b(data, digest_size=20).digest()
    _last[0], _last[1] = data, digest
    return digest


class Spilled:
    """A value kept in the scratch database: its digest, length and type."""

    __slots__ = ("digest", "size", "text")

    def __init__(self, digest: bytes, size: int, text: bool) -> None:
        self.digest = digest  # blake2b-160 of the bytes (UTF-8 for text)
        self.size = size  # bytes
        self.text = text  # the value is TEXT (a str), else a BLOB

    def _key(self) -> tuple[bytes, int, bool]:
        return (self.digest, self.size, self.text)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Spilled):
            return self._key() == other._key()
        if isinstance(other, str) and self.text:
            data = other.encode("utf-8", "surrogatepass")
        elif isinstance(other, bytes) and not self.text:
            data = other
        else:
            return False
        return len(data) == self.size and _digest(data) == self.digest

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Spilled({self.digest.hex()[:12]}, {self.size} bytes)"


class Scratch:
    """A new scratch database at ``path`` (private: 0600, not durable, no journal); None: in
    memory (the engines' default when called alone, as tests do)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path  # created when first needed
        self._conn: apsw.Connection | None = None
        self._tables = 0  # tables made for the engines' rows (see :mod:`.diskrows`)
        self.memory: dict[bytes, bytes] = {}  # digest -> value, while within MEMORY_BUDGET
        self.memory_bytes = 0
        self.spilled = 0  # values written to the database
        self.bytes = 0  # their total size

    def keep(self, row: Row) -> Row:
        """``row`` with every long value written to the scratch database and replaced by a
        :class:`Spilled`."""
        for v in row:
            if isinstance(v, _LONG) and len(v) >= SPILL_AT:
                return tuple(self._spill(v) for v in row)
        return row

    def _spill(self, v: Any) -> Any:
        if not isinstance(v, bytes | str) or len(v) < SPILL_AT:
            return v
        text = isinstance(v, str)
        data = v.encode("utf-8", "surrogatepass") if isinstance(v, str) else v
        digest = _digest(data)
        if digest in self.memory:
            pass
        elif self.memory_bytes + len(data) <= MEMORY_BUDGET:
            self.memory[digest] = data
            self.memory_bytes += len(data)
        else:
            sql = "INSERT OR IGNORE INTO value(digest, data) VALUES (?, ?)"
            self.conn.execute(sql, (digest, data))
            if self.conn.changes():
                self.spilled += 1
                self.bytes += len(data)
        return Spilled(digest, len(data), text)

    def resolve(self, row: Row) -> Row:
        """``row`` with each :class:`Spilled` replaced by its value, read back."""
        if not any(isinstance(v, Spilled) for v in row):
            return row
        return tuple(self._value(v) if isinstance(v, Spilled) else v for v in row)

    def _value(self, s: Spilled) -> bytes | str:
        data = self.memory.get(s.digest)
        if data is None:
            sql = "SELECT data FROM value WHERE digest = ?"
            got = self.conn.execute(sql, (s.digest,)).fetchone()
            if got is None:
                raise LookupError(f"{self.path}: value {s!r} is missing from the scratch database")
            data = bytes(got[0])
        return data.decode("utf-8", "surrogatepass") if s.text else data

    def table_name(self, prefix: str) -> str:
        """A new table name for one of the engines' collections."""
        self._tables += 1
        return f"{prefix}_{self._tables}"

    def map(self, prefix: str) -> DiskMap:
        """A new integer-keyed mapping in this database."""
        return DiskMap(self.conn, self.table_name(prefix))

    def verified(self) -> Verified:
        return Verified(self.conn, self.table_name("verified"))

    def hash_sets(self) -> HashSets:
        return HashSets(self.conn, self.table_name("hashes"))

    def candidates(self) -> Candidates:
        return Candidates(self.conn, self.table_name("candidates"))

    def chain_evidence(self) -> ChainEvidence:
        """Revision-3 evidence (stored hashes, the live head, gap rows) of one salvage."""
        from agentdb.salvage.chainrows import ChainEvidence

        return ChainEvidence(self.conn, self.table_name("chain"))

    @property
    def conn(self) -> apsw.Connection:
        if self._conn is None:
            if self.path is None:
                conn = db.open_memory()
            else:
                conn = db.open_private(self.path)
                os.chmod(self.path, 0o600)  # owner-only, whatever the umask (the dir is 0700)
            conn.limit(apsw.SQLITE_LIMIT_LENGTH, 1_000_000_000)
            db.exec_script(
                conn,
                "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; "
                "CREATE TABLE value(digest BLOB NOT NULL UNIQUE, data BLOB NOT NULL); "
                # one transaction for the whole job: a value is written when the page cache
                # spills, not in a commit of its own (the file is thrown away, never read by
                # another connection)
                "BEGIN",
            )
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.memory.clear()
