"""Evidence from a WAL's pages alone that it is another session's (used by ``check`` and by
``recover``, so that both call the same WAL foreign on the same file).

Events are append-only: a WAL of this file never gives an existing sequence another event id.
Another session's ``-wal`` whose ``session_meta`` page was cut off, or lies past a checksum
break, may still apply cleanly over this file (SQLite reads the mix without error); its events
pages then give this file's sequences other ids.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentdb.fileformat.btree import FormatError, PageKind, TableLeafCell, parse_page
from agentdb.fileformat.record import record_shape, serial_type_size
from agentdb.fileformat.varint import read_varint
from agentdb.fileformat.wal import WalScan


def events_rewritten(scan: WalScan, db_copy: Path) -> str | None:
    """Evidence that the WAL is another session's from its events alone (its session_meta page
    may be cut off): events are append-only, so a WAL of this file never gives an existing
    sequence another event id. The events on the WAL's newest committed page copies are matched
    by sequence with those on the file's own copies of the same pages; evidence when at least 3
    sequences appear in both and most carry another id (a few that differ are damage)."""
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
    finally:
        os.close(fd)
    both = mine.keys() & theirs.keys()
    other = sum(mine[s] != theirs[s] for s in both)
    if other >= 3 and other * 2 > len(both):
        return f"{other} of the file's events carry other ids in it (events are append-only)"
    return None


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
        # an events record: 9 or 10 columns, the rowid alias NULL, then the id as TEXT
        if len(types) in (9, 10) and types[0] == 0 and types[1] >= 13 and types[1] % 2:
            n = serial_type_size(types[1])
            if body + n <= len(cell.local):
                out[cell.rowid] = bytes(cell.local[body : body + n])
    return out
