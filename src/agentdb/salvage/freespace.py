"""The lowest tier: stale records left in free space *inside* table-leaf pages.

When SQLite deletes a cell, or moves one that an UPDATE made bigger, the old bytes stay in a
freeblock (its first 4 bytes overwritten by the freeblock's own header) or, after a
defragmentation, in the unallocated gap between the cell pointer array and the cell content.
Cell boundaries are unknown there, so every offset of every free range is tried:

* as a whole cell (payload-size varint, rowid varint, record): the payload size must equal the
  record's length exactly and the record must end inside the range;
* as a bare record (its rowid lost): only kept for tables whose key is in the record
  (``session_meta``, ``producers``) or for revision-2 events, whose key is found by trying the
  sequence numbers still missing until the stored ``content_hash`` matches;
* at the start of a freeblock, where the header overwrote the record's first bytes: the record
  header size and (for the first column) the serial type of a rowid alias (NULL) or of a
  26-character ULID text are guessed, and the strict decode and validation decide.

Every record must decode strictly (no overflow: spilled payloads are not followed), have one of
our tables' shapes and pass the same validation as any other row (enums, types, ``session_meta``
id = the file's, revision-2 ``content_hash``). The rows only ever fill gaps (see :mod:`.merge`):
a key any better tier has is never replaced, and a live ``session_meta`` always wins.

Risk, documented: a revision-1 row has no hash, so a stale copy of a row that was later deleted
or updated would be taken if its key is missing from every better tier and it validates. Our
tables are append-only (``session_meta`` aside, which never takes a stale copy over a live one),
so such a row is one the session really held.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agentdb.fileformat import FormatError, PageKind, decode_record, parse_page
from agentdb.fileformat.btree import BtreePage, freeblocks
from agentdb.fileformat.record import serial_type_size
from agentdb.fileformat.varint import read_varint, to_signed64
from agentdb.hashing import event_hash
from agentdb.salvage import tables
from agentdb.salvage.chainrows import HASHED, ChainEvidence
from agentdb.salvage.tables import Row

MAX_GUESSES = 4096  # missing sequences tried against a hash-vouched event whose key was lost
MAX_HEADER = 40  # our records' headers are shorter (10 columns at most)
_ULID_TEXT = 13 + 2 * 26  # serial type of a 26-character text
_GUESS_FIRST = (0, _ULID_TEXT)  # NULL (rowid alias) or a session id


@dataclass(frozen=True)
class FreeRecord:
    """A record found in free space; ``rowid`` None when only the record survived."""

    rec: tuple[Any, ...]
    rowid: int | None
    where: str


@dataclass(frozen=True)
class FreeRow:
    """A free-space record of one of our tables' shapes, classified once."""

    table: str  # one of our five tables
    row: Row  # revision-1 columns (the key is 0 when ``keyed`` is False and it is the rowid)
    stored: Any  # the stored content_hash, or :data:`agentdb.salvage.tables.NO_HASH`
    keyed: bool  # the cell's rowid survived (False: only the record did)
    extra: tuple[Any, ...] = ()  # a revision-3 event's stored (prev_hash, chain_hash)


def _record_length(buf: bytes, pos: int, end: int) -> int | None:
    """Length of the record starting at ``buf[pos]`` if its header is plausible and it ends
    by ``end``; None otherwise."""
    try:
        hsize, p = read_varint(buf, pos)
        if hsize < 2 or hsize > MAX_HEADER or pos + hsize > end:
            return None
        body = 0
        stop = pos + hsize
        n = 0
        while p < stop:
            st, p = read_varint(buf, p)
            body += serial_type_size(st)
            n += 1
        if p != stop or n < 2:
            return None
    except FormatError:
        return None
    total = hsize + body
    return total if pos + total <= end else None


def _decode(payload: bytes, encoding: str) -> list[Any] | None:
    try:
        return decode_record(payload, encoding)
    except FormatError:
        return None


def _ranges(page: BtreePage) -> list[tuple[int, int, bool]]:
    """(start, end, is_freeblock) of the free ranges of a page."""
    out: list[tuple[int, int, bool]] = []
    if page.content_start > page.pointer_array_end:
        out.append((page.pointer_array_end, min(page.content_start, page.usable), False))
    try:
        out.extend((s, e, True) for s, e in freeblocks(page))
    except FormatError:
        pass
    return out


def scan_page(data: bytes, pgno: int, usable: int, encoding: str, where: str) -> list[FreeRecord]:
    """Every record-shaped run of bytes in the free space of a table-leaf page."""
    try:
        page = parse_page(data, pgno, usable)
    except FormatError:
        return []
    if page.kind is not PageKind.LEAF_TABLE:
        return []
    found: list[FreeRecord] = []
    for start, end, is_free in _ranges(page):
        found += _scan_range(data, start, end, is_free, encoding, f"{where}, free space @{start}")
    return found


def _scan_range(
    data: bytes, start: int, end: int, is_free: bool, encoding: str, where: str
) -> list[FreeRecord]:
    out: list[FreeRecord] = []
    if is_free and end - 4 > start:
        out += _patched(data, start, end, encoding, where)
    # Only offsets where something is written can start a record or a freeblock header
    # (whose size, in its bytes 2-3, is at least 8): zeros on either side are skipped.
    body = data[start:end]
    lead = len(body) - len(body.lstrip(b"\0"))
    if lead == len(body):
        return out
    last = start + len(body.rstrip(b"\0"))  # one past the last byte that is not zero
    intact = start + 4 if is_free else start  # a freeblock's first 4 bytes are its header
    for o in range(max(intact, start + lead), last):
        if data[o] == 0:
            continue
        # a whole cell: payload size, rowid, record of exactly that size
        try:
            size, p = read_varint(data, o)
            rowid, r = read_varint(data, p)
        except FormatError:
            size = 0
        if 2 < size <= end - o:
            n = _record_length(data, r, end)
            if n == size and (rec := _decode(data[r : r + n], encoding)) is not None:
                out.append(FreeRecord(tuple(rec), to_signed64(rowid), where))
        n = _record_length(data, o, end)
        if n is not None and (rec := _decode(data[o : o + n], encoding)) is not None:
            out.append(FreeRecord(tuple(rec), None, where))
    # Where a freeblock header sits (the current one, or a stale one left inside a freeblock
    # that later merged with a neighbour), the record behind it lost its first bytes.
    for o in range(max(start + (1 if is_free else 0), start + lead - 3), min(end - 4, last)):
        nxt = int.from_bytes(data[o : o + 2], "big")
        size = int.from_bytes(data[o + 2 : o + 4], "big")
        if 8 <= size <= end - o and (nxt == 0 or o + size <= nxt < len(data)):
            out += _patched(data, o, o + size, encoding, where)
    return out


def _patched(data: bytes, start: int, end: int, encoding: str, where: str) -> list[FreeRecord]:
    """Records whose first header bytes the freeblock header overwrote: guess them."""
    out: list[FreeRecord] = []
    for o in (start + 2, start + 3):
        lost = start + 4 - o  # bytes of the record that are gone (header size [+ 1st type])
        for hsize in range(3, MAX_HEADER):
            for first in _GUESS_FIRST if lost == 2 else (None,):
                head = bytes([hsize]) + (bytes([first]) if first is not None else b"")
                buf = head + data[start + 4 : end]
                n = _record_length(buf, 0, len(buf))
                if n is None:
                    continue
                rec = _decode(buf[:n], encoding)
                if rec is not None:
                    out.append(FreeRecord(tuple(rec), None, where + " (header guessed)"))
    return out


def classify_all(found: list[FreeRecord]) -> list[FreeRow]:
    """The records of one of our tables' shapes, each classified once (see
    :func:`agentdb.salvage.tables.classify`)."""
    out: list[FreeRow] = []
    for fr in found:
        got = tables.classify(list(fr.rec), fr.rowid if fr.rowid is not None else 0)
        if got is not None and got.table in tables.TABLES:
            row = tables.normalise(got.table, got.row)
            out.append(FreeRow(got.table, row, got.stored, fr.rowid is not None, got.extra))
    return out


def iter_rows(
    found: list[FreeRow],
    session_id: str,
    missing_events: Callable[[], set[int]],
    chain: ChainEvidence | None = None,
    revision: int = 0,
) -> Iterator[tuple[str, Row, bytes | None]]:
    """Validated (table, row, hash) triples from classified free-space records, in the order
    found; ``hash`` is an event's stored content_hash, checked against the row (None when the
    record has none, and for the other tables).

    ``missing_events`` gives the event sequences no better tier has (asked lazily, only when a
    revision-2 event's rowid was lost and must be found by its hash). A revision-3 record's
    hashes go to ``chain``; at ``revision`` 3 a record without them is not taken.
    """
    seen: set[tuple[str, Row]] = set()
    missing: set[int] | None = None
    for fr in found:
        table, row, stored = fr.table, fr.row, fr.stored
        hashed = stored is not tables.NO_HASH
        if not fr.keyed and table in tables.AUTOINCREMENT_TABLES:
            if table != "events" or not isinstance(stored, bytes):
                continue  # the key is lost and nothing vouches for a guess
            if missing is None:
                missing = missing_events()
            found_key = _key_by_hash(row, stored, missing)
            if found_key is None:
                continue
            row = (found_key, *row[1:])
        if tables.problem(table, row, session_id) is not None:
            continue
        if hashed and tables.hash_problem(row, stored, table) is not None:
            continue
        if not hashed and revision >= 3 and table in ("events", *HASHED):
            continue  # an older revision's copy: nothing vouches for it in the chain
        if chain is not None and hashed and (fr.extra or table != "events"):
            if table == "events":
                chain.see_event(row, stored, *fr.extra, checked=True)
            else:
                chain.see_row(table, row, stored, checked=True)
        if (table, row) not in seen:
            seen.add((table, row))
            yield table, row, stored if hashed and table == "events" else None


def _key_by_hash(row: Row, stored: bytes, missing: set[int]) -> int | None:
    """The one missing sequence under which ``row`` hashes to ``stored``, else None."""
    if len(missing) > MAX_GUESSES:
        return None
    rest = row[1:]
    match = [s for s in sorted(missing) if event_hash(s, *rest) == stored]
    return match[0] if len(match) == 1 else None
