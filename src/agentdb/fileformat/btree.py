"""B-tree pages: page headers, cell pointer arrays, cells, overflow chains, freelist, freeblocks.

Page data is always the whole page (``page_size`` bytes); ``usable`` is page size minus the
reserved bytes from the database header. Page 1 carries the 100-byte database header first, so its
b-tree header starts at byte 100 (cell pointers are still offsets from the start of the page).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from .errors import FormatError
from .varint import Buffer, read_varint, to_signed64

if TYPE_CHECKING:
    from .header import DbHeader

GetPage = Callable[[int], "bytes | None"]


class PageKind(IntEnum):
    """The b-tree page type byte."""

    INTERIOR_INDEX = 2
    INTERIOR_TABLE = 5
    LEAF_INDEX = 10
    LEAF_TABLE = 13

    @property
    def is_leaf(self) -> bool:
        return self in (PageKind.LEAF_INDEX, PageKind.LEAF_TABLE)

    @property
    def is_table(self) -> bool:
        return self in (PageKind.INTERIOR_TABLE, PageKind.LEAF_TABLE)

    @property
    def header_size(self) -> int:
        return 8 if self.is_leaf else 12


_KINDS = {k.value: k for k in PageKind}


@dataclass(frozen=True)
class TableLeafCell:
    """A row: the rowid and the record payload (local part plus overflow pointer)."""

    rowid: int  # signed 64-bit rowid
    payload_size: int  # total payload size P, including the part on overflow pages
    local: bytes  # the payload bytes stored on this page
    overflow_pgno: int | None  # first overflow page, None when the payload is all local
    offset: int  # byte offset of the cell inside the page


@dataclass(frozen=True)
class TableInteriorCell:
    """A divider of a table b-tree: rows with rowid <= key live under left_child."""

    left_child: int  # page number of the left child
    key: int  # signed 64-bit rowid key
    offset: int  # byte offset of the cell inside the page


@dataclass(frozen=True)
class IndexCell:
    """An index entry (leaf, or interior with its left child)."""

    left_child: int | None  # child page for interior index cells, None on leaves
    payload_size: int  # total payload size P (a record: indexed columns then the rowid)
    local: bytes  # the payload bytes stored on this page
    overflow_pgno: int | None  # first overflow page, None when the payload is all local
    offset: int  # byte offset of the cell inside the page


Cell = TableLeafCell | TableInteriorCell | IndexCell


def local_payload_size(payload_size: int, usable: int, *, table_leaf: bool) -> int:
    """How many payload bytes are stored in the cell itself (the spill rule)."""
    max_local = usable - 35 if table_leaf else ((usable - 12) * 64 // 255) - 23
    if payload_size <= max_local:
        return payload_size
    min_local = ((usable - 12) * 32 // 255) - 23
    k = min_local + (payload_size - min_local) % (usable - 4)
    return k if k <= max_local else min_local


@dataclass(frozen=True)
class BtreePage:
    """A parsed b-tree page header and cell pointer array; cells are decoded on demand."""

    pgno: int  # page number (1-based)
    kind: PageKind  # page type
    header_offset: int  # 100 on page 1, else 0
    first_freeblock: int  # offset of the first freeblock, 0 if none
    cell_count: int  # number of cells
    content_start: int  # start of the cell content area (0 already mapped to 65536)
    fragmented_bytes: int  # fragmented free bytes within the content area
    right_child: int | None  # right-most child page (interior pages only)
    cell_pointers: tuple[int, ...]  # offset of each cell from the start of the page, key order
    usable: int  # usable size of the page
    data: bytes  # the whole page

    @property
    def pointer_array_end(self) -> int:
        """Offset just past the cell pointer array (start of the unallocated gap)."""
        return self.header_offset + self.kind.header_size + 2 * self.cell_count

    def cell(self, index: int) -> Cell:
        """Decode cell ``index``; FormatError if it does not fit in the page."""
        return parse_cell(self.data, self.cell_pointers[index], self.kind, self.usable)

    def cells(self) -> list[Cell]:
        """Decode every cell (FormatError on the first bad one; use :meth:`cell` to skip)."""
        return [self.cell(i) for i in range(self.cell_count)]

    def table_leaf_cells(self) -> list[TableLeafCell]:
        """The cells of a table leaf page (FormatError on any other page kind)."""
        if self.kind is not PageKind.LEAF_TABLE:
            raise FormatError(f"page {self.pgno} is {self.kind.name}, not a table leaf")
        return [c for c in self.cells() if isinstance(c, TableLeafCell)]

    def children(self) -> list[int]:
        """Child page numbers of an interior page in key order (right-most last)."""
        if self.kind.is_leaf:
            return []
        out: list[int] = []
        for cell in self.cells():
            child = cell.left_child if isinstance(cell, TableInteriorCell | IndexCell) else None
            if child is not None:
                out.append(child)
        if self.right_child is not None:
            out.append(self.right_child)
        return out


def parse_page(data: Buffer, pgno: int, usable: int) -> BtreePage:
    """Parse a b-tree page header and validate its cell pointer array.

    Raises :class:`FormatError` when the type byte is not a b-tree page type, or the cell count,
    content start or any cell pointer falls outside the page (pointers must lie after the header
    and pointer array and leave room for a minimal 4-byte cell before ``usable``).
    """
    if pgno < 1:
        raise FormatError(f"invalid page number {pgno}")
    if usable < 480 or len(data) < usable:
        raise FormatError(f"page {pgno}: {len(data)} bytes cannot hold usable size {usable}")
    page = bytes(data)
    hdr = 100 if pgno == 1 else 0
    kind = _KINDS.get(page[hdr])
    if kind is None:
        raise FormatError(f"page {pgno}: type byte {page[hdr]} is not a b-tree page")
    first_freeblock = int.from_bytes(page[hdr + 1 : hdr + 3], "big")
    cell_count = int.from_bytes(page[hdr + 3 : hdr + 5], "big")
    content_start = int.from_bytes(page[hdr + 5 : hdr + 7], "big") or 65536
    fragmented = page[hdr + 7]
    right_child = None if kind.is_leaf else int.from_bytes(page[hdr + 8 : hdr + 12], "big")
    array_start = hdr + kind.header_size
    array_end = array_start + 2 * cell_count
    if array_end > usable:
        raise FormatError(f"page {pgno}: {cell_count} cell pointers do not fit in the page")
    if content_start < array_end or content_start > usable:
        raise FormatError(f"page {pgno}: cell content start {content_start} out of range")
    pointers = tuple(
        int.from_bytes(page[p : p + 2], "big") for p in range(array_start, array_end, 2)
    )
    for ptr in pointers:
        if ptr < array_end or ptr > usable - 4:
            raise FormatError(f"page {pgno}: cell pointer {ptr} out of range")
    return BtreePage(
        pgno=pgno,
        kind=kind,
        header_offset=hdr,
        first_freeblock=first_freeblock,
        cell_count=cell_count,
        content_start=content_start,
        fragmented_bytes=fragmented,
        right_child=right_child,
        cell_pointers=pointers,
        usable=usable,
        data=page,
    )


def looks_like_btree_page(data: Buffer, header_offset: int, usable: int) -> bool:
    """Stricter plausibility test used for page-size inference (never raises).

    Besides what :func:`parse_page` checks, every cell must start at or after the content start
    and the first freeblock must be 0 or inside the content area.
    """
    try:
        page = parse_page(data, 1 if header_offset == 100 else 2, usable)
    except FormatError:
        return False
    if any(p < page.content_start for p in page.cell_pointers):
        return False
    fb = page.first_freeblock
    if fb and not page.content_start <= fb <= usable - 4:
        return False
    return page.cell_count > 0 or page.content_start == usable


def _payload_cell(
    page: bytes, pos: int, payload_size: int, usable: int, table_leaf: bool, offset: int
) -> tuple[bytes, int | None]:
    local = local_payload_size(payload_size, usable, table_leaf=table_leaf)
    end = pos + local
    if local < payload_size:
        if end + 4 > usable:
            raise FormatError(f"cell at {offset} overruns the page")
        return page[pos:end], int.from_bytes(page[end : end + 4], "big")
    if end > usable:
        raise FormatError(f"cell at {offset} overruns the page")
    return page[pos:end], None


def parse_cell(data: Buffer, offset: int, kind: PageKind, usable: int) -> Cell:
    """Decode the cell at ``offset`` of a page of ``kind``; FormatError if it leaves the page."""
    page = data if isinstance(data, bytes) else bytes(data)
    if len(page) < usable:
        raise FormatError(f"page of {len(page)} bytes is shorter than usable size {usable}")
    if not 0 <= offset < usable:
        raise FormatError(f"cell offset {offset} outside the page")
    if kind is PageKind.INTERIOR_TABLE:
        if offset + 4 > usable:
            raise FormatError(f"cell at {offset} overruns the page")
        left = int.from_bytes(page[offset : offset + 4], "big")
        key, _ = read_varint(page, offset + 4)
        return TableInteriorCell(left_child=left, key=to_signed64(key), offset=offset)
    if kind is PageKind.LEAF_TABLE:
        size, pos = read_varint(page, offset)
        rowid, pos = read_varint(page, pos)
        local, ovfl = _payload_cell(page, pos, size, usable, True, offset)
        return TableLeafCell(
            rowid=to_signed64(rowid),
            payload_size=size,
            local=local,
            overflow_pgno=ovfl,
            offset=offset,
        )
    child: int | None = None
    pos = offset
    if kind is PageKind.INTERIOR_INDEX:
        if offset + 4 > usable:
            raise FormatError(f"cell at {offset} overruns the page")
        child = int.from_bytes(page[offset : offset + 4], "big")
        pos += 4
    size, pos = read_varint(page, pos)
    local, ovfl = _payload_cell(page, pos, size, usable, False, offset)
    return IndexCell(
        left_child=child, payload_size=size, local=local, overflow_pgno=ovfl, offset=offset
    )


def read_overflow(
    get_page: GetPage,
    first: int,
    needed: int,
    usable: int,
    page_count: int,
    *,
    strict_end: bool = True,
) -> bytes:
    """Follow an overflow chain from page ``first`` and return exactly ``needed`` bytes.

    Each overflow page holds a 4-byte next-page number then ``usable - 4`` payload bytes. Raises
    :class:`FormatError` on a loop, a page number 0 or beyond ``page_count`` before the payload is
    complete, a missing (None) or short page, a last page whose next-page number is not 0 (the
    chain does not end where its payload does: SQLite's integrity check follows it too; with
    ``strict_end`` False the caller looks at that page itself), or when
    ``needed`` cannot fit in ``page_count`` pages at all (so a garbage size never drives the
    allocation).
    """
    per_page = usable - 4
    if per_page <= 0:
        raise FormatError(f"usable size {usable} too small")
    if needed < 0 or needed > page_count * per_page:
        raise FormatError(f"overflow payload of {needed} bytes cannot fit in the file")
    parts: list[bytes] = []
    remaining = needed
    pgno = first
    seen: set[int] = set()
    while remaining > 0:
        if not 1 <= pgno <= page_count:
            raise FormatError(f"overflow chain reaches invalid page {pgno} ({remaining} short)")
        if pgno in seen:
            raise FormatError(f"overflow chain loops at page {pgno}")
        seen.add(pgno)
        page = get_page(pgno)
        if page is None or len(page) < usable:
            raise FormatError(f"overflow page {pgno} is missing")
        take = min(remaining, per_page)
        parts.append(bytes(page[4 : 4 + take]))
        remaining -= take
        pgno = int.from_bytes(page[0:4], "big")
    if strict_end and parts and pgno != 0:
        raise FormatError(f"overflow chain goes on to page {pgno} past the end of its payload")
    return b"".join(parts)


def cell_payload(
    cell: TableLeafCell | IndexCell, get_page: GetPage, usable: int, page_count: int
) -> bytes:
    """The complete payload of a cell: its local bytes plus its overflow chain."""
    if cell.overflow_pgno is None:
        return cell.local
    rest = read_overflow(
        get_page, cell.overflow_pgno, cell.payload_size - len(cell.local), usable, page_count
    )
    return cell.local + rest


def iter_freelist(
    get_page: GetPage, header: DbHeader, page_count: int | None = None, *, strict: bool = False
) -> set[int]:
    """Page numbers on the freelist (trunk pages and their leaves), loop-safe.

    ``page_count`` defaults to the header's. Lenient by default: a loop, an out-of-range or
    missing page ends the walk and what was collected so far is returned; with ``strict=True``
    those raise :class:`FormatError` instead.
    """
    limit = page_count if page_count is not None else header.page_count
    usable = header.usable_size
    max_leaves = (usable - 8) // 4
    found: set[int] = set()
    trunks: set[int] = set()
    trunk = header.freelist_trunk

    def fail(msg: str) -> set[int]:
        if strict:
            raise FormatError(msg)
        return found

    while trunk:
        if not 1 <= trunk <= limit:
            return fail(f"freelist trunk page {trunk} out of range")
        if trunk in trunks:
            return fail(f"freelist trunk chain loops at page {trunk}")
        trunks.add(trunk)
        found.add(trunk)
        page = get_page(trunk)
        if page is None or len(page) < usable:
            return fail(f"freelist trunk page {trunk} is missing")
        count = int.from_bytes(page[4:8], "big")
        if count > max_leaves:
            if strict:
                raise FormatError(f"freelist trunk {trunk} claims {count} leaves")
            count = max_leaves
        for i in range(count):
            leaf = int.from_bytes(page[8 + 4 * i : 12 + 4 * i], "big")
            if 1 <= leaf <= limit:
                found.add(leaf)
            elif strict:
                raise FormatError(f"freelist leaf page {leaf} out of range")
        trunk = int.from_bytes(page[0:4], "big")
    return found


def freeblocks(page: BtreePage) -> list[tuple[int, int]]:
    """Byte ranges ``(start, end)`` of the freeblocks inside a page, in offset order.

    A freeblock is 2 bytes next-offset, 2 bytes size, then stale bytes (often the remains of a
    deleted cell). Offsets must strictly increase and stay within the usable area, which also
    rules out loops; :class:`FormatError` otherwise.
    """
    out: list[tuple[int, int]] = []
    pos = page.first_freeblock
    prev_end = page.pointer_array_end
    while pos:
        if pos < prev_end or pos + 4 > page.usable:
            raise FormatError(f"page {page.pgno}: freeblock at {pos} out of range")
        size = int.from_bytes(page.data[pos + 2 : pos + 4], "big")
        if size < 4 or pos + size > page.usable:
            raise FormatError(f"page {page.pgno}: freeblock at {pos} has bad size {size}")
        out.append((pos, pos + size))
        prev_end = pos + size
        pos = int.from_bytes(page.data[pos : pos + 2], "big")
    return out


def unallocated_ranges(page: BtreePage) -> list[tuple[int, int]]:
    """Where stale bytes may hide: the gap after the pointer array, then the freeblocks."""
    ranges: list[tuple[int, int]] = []
    if page.content_start > page.pointer_array_end:
        ranges.append((page.pointer_array_end, min(page.content_start, page.usable)))
    try:
        ranges.extend(freeblocks(page))
    except FormatError:
        pass
    return ranges


def walk_table(
    get_page: GetPage, root: int, usable: int, page_count: int
) -> Iterator[TableLeafCell]:
    """Yield the table-leaf cells of the b-tree rooted at ``root`` in key order.

    Depth-first over interior pages; a page visited twice or deeper than 64 levels raises
    :class:`FormatError`, as does any page that does not parse.
    """
    seen: set[int] = set()
    stack: list[tuple[int, int]] = [(root, 0)]
    while stack:
        pgno, depth = stack.pop()
        if not 1 <= pgno <= page_count:
            raise FormatError(f"b-tree child page {pgno} out of range")
        if pgno in seen or depth > 64:
            raise FormatError(f"b-tree loops or is too deep at page {pgno}")
        seen.add(pgno)
        data = get_page(pgno)
        if data is None:
            raise FormatError(f"b-tree page {pgno} is missing")
        page = parse_page(data, pgno, usable)
        if page.kind is PageKind.LEAF_TABLE:
            yield from page.table_leaf_cells()
        elif page.kind is PageKind.INTERIOR_TABLE:
            stack.extend((child, depth + 1) for child in reversed(page.children()))
        else:
            raise FormatError(f"page {pgno} is {page.kind.name} inside a table b-tree")
