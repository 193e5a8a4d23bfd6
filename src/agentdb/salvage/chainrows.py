"""What a salvage of a revision-3 file gathers beside its rows (design §6, damage-evident
revision): the stored hashes that vouch for salvaged rows, the original's head and the gap rows
of earlier recoveries.

The engines keep rows in revision-1 column order (:mod:`.tables`); a revision-3 record's hash
columns are handed here as the engine reads them, while the row's bytes are in hand:

* ``see_event``: an event whose stored ``content_hash`` matches its row, with its stored
  ``prev_hash`` and ``chain_hash`` (every distinct pair seen, in the order seen: the replacement
  takes the first whose chain recomputes);
* ``see_row``: a derived row (``cost_ledger``, ``plan_items``, ``producers``) whose stored
  ``content_hash`` matches it; only such a row may enter a revision-3 replacement of a
  revision-3 original, and its hash is then byte for byte the stored one (the hash is a function
  of the row, so the set holds hashes only);
* ``see_head``: a ``session_chain`` row read from the live b-tree (never an older copy: a stale
  head would make a healthy tail look cut, design A9), kept only as evidence for a ``tail`` and
  a ``meta`` gap, never copied;
* ``see_gap``: a ``chain_gaps`` row whose own hash holds and whose values are a gap (a kind of
  the enum, integer bounds in order, a 16-byte or NULL expected hash: what the replacement's
  CHECKs accept), from any tier (gap rows are append-only: an older copy is the same row),
  carried over unchanged.

Everything large lives in the job's scratch database (:class:`~agentdb.salvage.scratch.Scratch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

from agentdb.hashing import HASH_SIZE, event_hash, row_hash
from agentdb.schema import chain
from agentdb.schema.revisions import REV3_HASHED

HASHED: tuple[str, ...] = ("cost_ledger", "plan_items", "producers")  # derived, row-hashed
CHAIN_TABLES: tuple[str, ...] = ("session_chain", "chain_gaps")  # revision 3's own tables
MAX_GAPS = chain.MAX_GAP_RECORDS  # gap rows kept (a hostile file cannot make a job hold more)
LIVE_PAGES, LIVE_ROWS = 0, 1  # where a head was read: the page engine's live walk, SQLite


def _is_hash(v: object) -> bool:
    return type(v) is bytes and len(v) == HASH_SIZE


def stored_row(table: str, values: Sequence[Any], stored: Any) -> chain.Row | None:
    """A ``session_chain`` or ``chain_gaps`` row as :mod:`agentdb.schema.chain` reads it (TEXT
    as bytes), or None when it has the wrong number of columns."""
    if len(values) != len(REV3_HASHED[table]):
        return None
    mask, vals = chain.as_stored(values)
    return chain.Row(table, mask, vals, stored)


class ChainEvidence:
    """The revision-3 evidence of one salvage (see the module docstring)."""

    def __init__(self, conn: apsw.Connection, name: str) -> None:
        self.conn = conn
        self.links_table = f"{name}_links"
        self.vouched_table = f"{name}_vouched"
        conn.execute(
            f"CREATE TABLE {self.links_table}(k INTEGER NOT NULL, content BLOB NOT NULL, "
            "prev BLOB NOT NULL, chain BLOB NOT NULL, UNIQUE(k, content, prev, chain))"
        )
        conn.execute(f"CREATE TABLE {self.vouched_table}(h BLOB PRIMARY KEY) WITHOUT ROWID")
        self._links: list[tuple[int, bytes, bytes, bytes]] = []
        self._vouched: list[tuple[bytes]] = []
        self.heads: list[tuple[int, chain.Row]] = []  # (LIVE_PAGES or LIVE_ROWS, head row)
        self.gaps: dict[int, chain.Row] = {}  # sequence -> the first proven copy
        self.shaped = False  # a record of a revision-3 shape was seen
        self.rejected = 0  # revision-3 rows whose stored hash failed

    def flush(self) -> None:
        if self._links:
            self.conn.executemany(
                f"INSERT OR IGNORE INTO {self.links_table}(k, content, prev, chain) "
                "VALUES (?, ?, ?, ?)",
                self._links,
            )
            self._links.clear()
        if self._vouched:
            self.conn.executemany(
                f"INSERT OR IGNORE INTO {self.vouched_table}(h) VALUES (?)", self._vouched
            )
            self._vouched.clear()

    def see_event(
        self, row: Sequence[Any], content: Any, prev: Any, link: Any, *, checked: bool = False
    ) -> None:
        """A revision-3 event (revision-1 columns, long values still in hand) and its stored
        hashes; kept when the content hash is the row's (``checked``: the caller compared it
        already) and both chain fields are hashes."""
        self.shaped = True
        if not (_is_hash(content) and _is_hash(prev) and _is_hash(link)):
            return
        if type(row[0]) is not int or (not checked and event_hash(*row) != content):
            return
        self._links.append((row[0], content, prev, link))
        if len(self._links) >= 1000:
            self.flush()

    def see_row(
        self, table: str, row: Sequence[Any], stored: Any, *, checked: bool = False
    ) -> bool:
        """A revision-3 derived row (long values still in hand) and its stored content_hash:
        True (and kept) when the hash is the row's (``checked``: compared by the caller)."""
        self.shaped = True
        if not _is_hash(stored) or (not checked and row_hash(table, row) != stored):
            return False
        self._vouched.append((stored,))
        if len(self._vouched) >= 1000:
            self.flush()
        return True

    def see_head(self, values: Sequence[Any], stored: Any, source: int) -> None:
        """A ``session_chain`` row read from the live b-tree (its hashed columns)."""
        self.shaped = True
        row = stored_row("session_chain", values, stored)
        if row is not None and len(self.heads) < 16:
            self.heads.append((source, row))

    def see_gap(self, values: Sequence[Any], stored: Any) -> None:
        """A ``chain_gaps`` row from any tier; kept when its own hash holds."""
        self.shaped = True
        row = stored_row("chain_gaps", values, stored)
        if row is None or type(row.values[0]) is not int:
            return
        if not chain.GapRecord.from_row(row).proven:  # its hash, and a gap the DDL allows
            return
        if row.values[0] not in self.gaps and len(self.gaps) < MAX_GAPS:
            self.gaps[row.values[0]] = row

    def vouched(self, table: str, row: Sequence[Any]) -> bool:
        """Some engine read this very row (all values resolved) with its stored hash matching."""
        self.flush()
        h = row_hash(table, row)
        sql = f"SELECT 1 FROM {self.vouched_table} WHERE h = ?"
        return self.conn.execute(sql, (h,)).fetchone() is not None

    def links(self, seq: int, content: bytes) -> list[tuple[bytes, bytes]]:
        """Every (prev_hash, chain_hash) stored with this event's content, in the order seen."""
        self.flush()
        sql = (
            f"SELECT prev, chain FROM {self.links_table} WHERE k = ? AND content = ? ORDER BY rowid"
        )
        return [(bytes(p), bytes(c)) for p, c in self.conn.execute(sql, (seq, content))]

    def prevs(self, seq: int) -> set[bytes]:
        """Every prev_hash stored with event ``seq``, whatever its content."""
        self.flush()
        sql = f"SELECT prev FROM {self.links_table} WHERE k = ?"
        return {bytes(p) for (p,) in self.conn.execute(sql, (seq,))}

    def has_link(self, seq: int, content: bytes) -> bool:
        self.flush()
        sql = f"SELECT 1 FROM {self.links_table} WHERE k = ? AND content = ? LIMIT 1"
        return self.conn.execute(sql, (seq, content)).fetchone() is not None

    def head(self) -> chain.Head | None:
        """The original's head: the first live copy whose own hash holds, the page engine's
        walk first (it also reads intact WAL commits after a checksum break: the newest)."""
        for _, row in sorted(self.heads, key=lambda sr: sr[0]):
            if row.proven:
                return chain.Head(row)
        return None

    def gap_rows(self) -> list[chain.Row]:
        """The carried-over gap rows, in sequence order."""
        return [self.gaps[k] for k in sorted(self.gaps)]
