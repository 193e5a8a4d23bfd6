"""Evidence from a WAL's pages alone that it is another session's (used by ``check`` and by
``recover``, so that both call the same WAL foreign on the same file).

Events are append-only: a WAL of this file never gives an existing sequence another event id.
Another session's ``-wal`` whose ``session_meta`` page was cut off, or lies past a checksum
break, may still apply cleanly over this file (SQLite reads the mix without error); its events
pages then give this file's sequences other ids.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from pathlib import Path

from agentdb.fileformat.btree import (
    BtreePage,
    FormatError,
    PageKind,
    TableInteriorCell,
    TableLeafCell,
    parse_page,
)
from agentdb.fileformat.record import record_shape, serial_type_size
from agentdb.fileformat.varint import read_varint
from agentdb.fileformat.wal import WalScan


def events_rewritten(scan: WalScan, db_copy: Path) -> str | None:
    """Evidence that the WAL is another session's from its events alone (its session_meta page
    may be cut off): events are append-only, so a WAL of this file never gives an existing
    sequence another event id. The events on the WAL's newest committed page copies are matched
    by sequence with those on the file's own copies of the same pages, and those not found there
    with the file's own events b-tree (another session's pages need not lie where this file keeps
    the same sequences); evidence when at least 3 sequences appear in both and most carry another
    id (a few that differ are damage)."""
    size = scan.page_size
    if size is None:
        return None
    newest = {f.pgno: f for f in scan.valid_frames}
    mine: dict[int, bytes] = {}
    theirs: dict[int, bytes] = {}
    fd = os.open(db_copy, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for pgno, frame in newest.items():
            mine.update(_event_ids(os.pread(fd, size, (pgno - 1) * size), pgno, size))
            theirs.update(_event_ids(scan.frame_page(frame), pgno, size))
        elsewhere = sorted(theirs.keys() - mine.keys())
        if len(elsewhere) > _SAMPLE:  # evidence needs a majority, not every sequence
            elsewhere = [elsewhere[i * len(elsewhere) // _SAMPLE] for i in range(_SAMPLE)]
        if elsewhere:
            mine.update(_tree_event_ids(fd, size, elsewhere))
    finally:
        os.close(fd)
    both = mine.keys() & theirs.keys()
    other = sum(mine[s] != theirs[s] for s in both)
    if other >= 3 and other * 2 > len(both):
        return f"{other} of the file's events carry other ids in it (events are append-only)"
    return None


_SAMPLE = 64  # sequences of the WAL's looked up in the file's own events b-tree, at most
_BUDGET = 512  # pages of the file read to find them


def _tree_event_ids(fd: int, size: int, wanted: list[int]) -> dict[int, bytes]:
    """sequence -> event id of the file's own events rows (its WAL ignored) for the ``wanted``
    sequences (sorted), found by descending the events b-tree its own page 1 names into the
    subtrees that can hold them; at most ``_BUDGET`` pages read, and whatever does not parse
    (damage) gives nothing rather than an error."""
    pages = os.fstat(fd).st_size // size
    budget = [_BUDGET]

    def page(pgno: int) -> BtreePage | None:
        if not 1 <= pgno <= pages or budget[0] <= 0:
            return None
        budget[0] -= 1
        try:
            return parse_page(os.pread(fd, size, (pgno - 1) * size), pgno, size)
        except FormatError:
            return None

    root = _events_root(page)
    out: dict[int, bytes] = {}
    if root is None:
        return out
    seen: set[int] = set()
    stack = [(root, -(1 << 63), (1 << 63) - 1, 0)]  # (page, lowest key, highest key, depth)
    while stack:
        pgno, lo, hi, depth = stack.pop()
        if pgno in seen or depth > 64:
            continue
        seen.add(pgno)
        p = page(pgno)
        if p is None:
            continue
        if p.kind is PageKind.LEAF_TABLE:
            out.update((s, i) for s, i in _event_ids(p.data, pgno, size).items() if lo <= s <= hi)
        elif p.kind is PageKind.INTERIOR_TABLE:
            try:
                stack.extend((c, a, b, depth + 1) for c, a, b in _children_for(p, wanted, lo, hi))
            except FormatError:
                continue  # a divider that does not parse: nothing below this page is looked at
    keep = set(wanted)
    return {s: i for s, i in out.items() if s in keep}


def _children_for(p: BtreePage, wanted: list[int], lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(child, lowest key, highest key) of the children of an interior table page whose key
    range holds one of the ``wanted`` sequences in [lo, hi]: a binary search over the dividers
    per child, so a page of hundreds of cells costs a few cell decodes, not all of them."""
    cells = p.cell_count

    def key(i: int) -> int:
        cell = p.cell(i)
        if not isinstance(cell, TableInteriorCell):
            raise FormatError("not a table divider")
        return cell.key

    out: list[tuple[int, int, int]] = []
    j = bisect.bisect_left(wanted, lo)
    while j < len(wanted) and wanted[j] <= hi:
        i = bisect.bisect_left(range(cells), wanted[j], key=key)
        first = key(i - 1) + 1 if i else lo
        if i < cells:
            cell = p.cell(i)
            assert isinstance(cell, TableInteriorCell)
            out.append((cell.left_child, first, cell.key))
            last = cell.key
        elif p.right_child is not None:
            out.append((p.right_child, first, hi))
            last = hi
        else:
            break
        j = bisect.bisect_right(wanted, last)
    return out


def _events_root(page: Callable[[int], BtreePage | None]) -> int | None:
    """The root page of ``events`` named by the schema b-tree on page 1, None when unreadable."""
    stack: list[int] = [1]
    seen: set[int] = set()
    while stack:
        pgno = stack.pop()
        if pgno in seen or len(seen) > 64:
            continue
        seen.add(pgno)
        p = page(pgno)
        if p is None:
            continue
        if p.kind is PageKind.INTERIOR_TABLE:
            try:
                stack.extend(p.children())
            except FormatError:
                continue
            continue
        if p.kind is not PageKind.LEAF_TABLE:
            continue
        for i in range(p.cell_count):
            try:
                cell = p.cell(i)
                if not isinstance(cell, TableLeafCell):
                    continue
                head = _leading(cell.local, 4)  # type, name, tbl_name, rootpage: before the SQL
            except FormatError:
                continue
            if head[:2] == [b"table", b"events"] and isinstance(head[3], int) and head[3] > 1:
                return head[3]
    return None


def _leading(local: bytes, n: int) -> list[bytes | int | None]:
    """The first ``n`` values of a record from its local bytes (TEXT and BLOB as bytes)."""
    types = record_shape(local)
    pos, _ = read_varint(local, 0)
    out: list[bytes | int | None] = []
    for t in types[:n]:
        size = serial_type_size(t)
        if pos + size > len(local):
            raise FormatError("value past the local payload")
        chunk = local[pos : pos + size]
        pos += size
        if t >= 12:
            out.append(bytes(chunk))
        elif 1 <= t <= 6:
            out.append(int.from_bytes(chunk, "big", signed=True))
        elif t in (8, 9):
            out.append(t - 8)
        else:
            out.append(None)
    return out


def _event_ids(data: bytes, pgno: int, size: int) -> dict[int, bytes]:
    """sequence -> event id (its bytes) of the events rows on a table-leaf page."""
    out: dict[int, bytes] = {}
    if len(data) < size:
        return out
    try:
        page = parse_page(data, pgno, size)
    except FormatError:
        return out
    if page.kind is not PageKind.LEAF_TABLE:
        return out
    for i in range(page.cell_count):
        try:
            cell = page.cell(i)
            if not isinstance(cell, TableLeafCell):
                continue
            types = record_shape(cell.local)  # the header is local even when the body spills
            body, _ = read_varint(cell.local, 0)
        except FormatError:
            continue
        # an events record (9 columns at revision 1, 10 at 2, 12 at 3), the rowid alias NULL,
        # then the id as TEXT
        if len(types) in (9, 10, 12) and types[0] == 0 and types[1] >= 13 and types[1] % 2:
            n = serial_type_size(types[1])
            if body + n <= len(cell.local):
                out[cell.rowid] = bytes(cell.local[body : body + n])
    return out
