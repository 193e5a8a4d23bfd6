"""B-tree pages of real files: table and index cells, overflow chains, freelist, freeblocks."""

from __future__ import annotations

import struct
from pathlib import Path

import apsw
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentdb.fileformat.btree import (
    IndexCell,
    PageKind,
    TableLeafCell,
    cell_payload,
    freeblocks,
    iter_freelist,
    local_payload_size,
    parse_page,
    read_overflow,
    walk_table,
)
from agentdb.fileformat.errors import FormatError
from agentdb.fileformat.header import parse_header
from agentdb.fileformat.pager import PageSource
from agentdb.fileformat.record import decode_record

from .conftest import insert_rows, make_db, select_rows


def schema_roots(src: PageSource) -> dict[str, int]:
    out = {}
    for cell in walk_table(src.get_page, 1, src.usable, src.page_count):
        row = decode_record(cell_payload(cell, src.get_page, src.usable, src.page_count))
        out[str(row[1])] = int(row[3])  # type: ignore[arg-type]
    return out


def rows_from_pages(src: PageSource) -> list[tuple]:
    root = schema_roots(src)["events"]
    rows = []
    for cell in walk_table(src.get_page, root, src.usable, src.page_count):
        values = decode_record(cell_payload(cell, src.get_page, src.usable, src.page_count))
        assert values[0] is None  # the rowid alias is stored as NULL
        rows.append((cell.rowid, *values[1:]))
    return rows


@pytest.mark.parametrize("fixture", ["db4096", "db1024"])
def test_leaf_cells_reproduce_select(fixture: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(fixture)
    src = PageSource(path.read_bytes())
    expected = select_rows(path)
    assert len(expected) == 40
    assert rows_from_pages(src) == expected
    assert any(len(r[3]) > 4096 * 2 for r in expected)  # multi-page overflow chains exercised


def test_overflow_spill_rule_matches_sqlite(db4096: Path) -> None:
    src = PageSource(db4096.read_bytes())
    root = schema_roots(src)["events"]
    spilled = 0
    for cell in walk_table(src.get_page, root, src.usable, src.page_count):
        expect_local = local_payload_size(cell.payload_size, src.usable, table_leaf=True)
        assert len(cell.local) == expect_local
        if cell.payload_size > src.usable - 35:
            spilled += 1
            assert cell.overflow_pgno is not None
        else:
            assert cell.overflow_pgno is None
    assert spilled >= 10


def test_index_cells_decode(db4096: Path) -> None:
    src = PageSource(db4096.read_bytes())
    root = schema_roots(src)["sqlite_autoindex_events_1"]
    entries: list[list] = []
    stack = [root]
    kinds = set()
    while stack:
        pgno = stack.pop()
        page = parse_page(src.get_page(pgno) or b"", pgno, src.usable)
        kinds.add(page.kind)
        for cell in page.cells():
            assert isinstance(cell, IndexCell)
            payload = cell_payload(cell, src.get_page, src.usable, src.page_count)
            entries.append(decode_record(payload))
        stack.extend(page.children())
    expected = sorted([r[1], r[0]] for r in select_rows(db4096))
    assert sorted(entries) == expected
    assert kinds <= {PageKind.LEAF_INDEX, PageKind.INTERIOR_INDEX}


def test_interior_pages_and_index_interior(tmp_path: Path) -> None:
    # Long ids force interior index pages with spilled payloads too.
    path = tmp_path / "idx.db"
    con = apsw.Connection(str(path))
    con.execute("PRAGMA page_size=1024")
    con.execute("CREATE TABLE t(k TEXT PRIMARY KEY, v) WITHOUT ROWID")
    with con:
        for i in range(300):
            con.execute("INSERT INTO t VALUES (?, ?)", (f"{i:04d}" + "k" * (i % 900), i))
    con.close()
    src = PageSource(path.read_bytes())
    root = schema_roots(src)["t"]
    seen_kinds = set()
    keys = []
    stack = [root]
    while stack:
        pgno = stack.pop()
        page = parse_page(src.get_page(pgno) or b"", pgno, src.usable)
        seen_kinds.add(page.kind)
        for cell in page.cells():
            assert isinstance(cell, IndexCell)
            keys.append(
                decode_record(cell_payload(cell, src.get_page, src.usable, src.page_count))[0]
            )
        stack.extend(page.children())
    assert PageKind.INTERIOR_INDEX in seen_kinds
    assert sorted(keys) == sorted(f"{i:04d}" + "k" * (i % 900) for i in range(300))


def first_spilled(src: PageSource) -> TableLeafCell:
    root = schema_roots(src)["events"]
    for cell in walk_table(src.get_page, root, src.usable, src.page_count):
        if cell.overflow_pgno is not None and cell.payload_size > 3 * src.usable:
            return cell
    raise AssertionError("no multi-page spilled cell")


def test_looping_overflow_chain(db4096: Path) -> None:
    data = bytearray(db4096.read_bytes())
    src = PageSource(bytes(data))
    cell = first_spilled(src)
    first = cell.overflow_pgno
    assert first is not None
    second = struct.unpack(">I", src.get_page(first)[:4])[0]  # type: ignore[index]
    assert second != 0
    off = (second - 1) * 4096
    data[off : off + 4] = struct.pack(">I", second)  # points to itself
    bad = PageSource(bytes(data))
    with pytest.raises(FormatError, match="loops"):
        cell_payload(cell, bad.get_page, bad.usable, bad.page_count)


@pytest.mark.parametrize("next_pgno", [0, 10_000])
def test_chain_ends_early(db4096: Path, next_pgno: int) -> None:
    data = bytearray(db4096.read_bytes())
    cell = first_spilled(PageSource(bytes(data)))
    off = (cell.overflow_pgno - 1) * 4096  # type: ignore[operator]
    data[off : off + 4] = struct.pack(">I", next_pgno)
    bad = PageSource(bytes(data))
    with pytest.raises(FormatError):
        cell_payload(cell, bad.get_page, bad.usable, bad.page_count)


def test_read_overflow_bounds() -> None:
    pages = {1: b"\x00\x00\x00\x02" + b"a" * 508, 2: b"\x00\x00\x00\x00" + b"b" * 508}
    assert read_overflow(pages.get, 1, 600, 512, 2) == b"a" * 508 + b"b" * 92
    with pytest.raises(FormatError):
        read_overflow(pages.get, 1, 1100, 512, 2)  # cannot fit in 2 pages
    with pytest.raises(FormatError):
        read_overflow(pages.get, 1, 1017, 512, 3)  # chain ends (next = 0) one byte short
    with pytest.raises(FormatError):
        read_overflow({}.get, 1, 10, 512, 5)  # missing page
    with pytest.raises(FormatError):
        read_overflow(pages.get, 0, 10, 512, 5)


def test_freelist_and_freeblocks(tmp_path: Path) -> None:
    path = make_db(tmp_path / "free.db", rows=40)
    con = apsw.Connection(str(path))
    con.execute("PRAGMA secure_delete=OFF")
    with con:
        con.execute("DELETE FROM events WHERE sequence % 8 = 6")  # the 70 KB rows: frees chains
        con.execute("DELETE FROM events WHERE sequence = 2")  # a small row on a leaf
    freelist_count = con.execute("PRAGMA freelist_count").fetchall()[0][0]
    con.close()
    data = path.read_bytes()
    header = parse_header(data)
    src = PageSource(data)
    free = iter_freelist(src.get_page, header)
    assert freelist_count > 20
    assert len(free) == freelist_count == header.freelist_count
    root = schema_roots(src)["events"]
    live = {c.rowid for c in walk_table(src.get_page, root, src.usable, src.page_count)}
    assert 2 not in live and 3 in live
    # The deleted small row (id ev-00001) still sits in a freeblock of some leaf page.
    found = False
    for pgno, raw in src.iter_pages():
        if pgno in free:
            continue
        try:
            page = parse_page(raw, pgno, src.usable)
        except FormatError:
            continue
        for start, end in freeblocks(page):
            found = found or b"ev-00001" in raw[start:end]
    assert found


def test_freelist_loop_is_safe(db4096: Path) -> None:
    data = bytearray(db4096.read_bytes())
    data[32:36] = struct.pack(">I", 3)  # trunk = page 3
    data[36:40] = struct.pack(">I", 2)
    off = 2 * 4096
    data[off : off + 8] = struct.pack(">II", 3, 1)  # next trunk = itself, one leaf
    data[off + 8 : off + 12] = struct.pack(">I", 4)
    header = parse_header(bytes(data))
    src = PageSource(bytes(data))
    assert iter_freelist(src.get_page, header) == {3, 4}
    with pytest.raises(FormatError):
        iter_freelist(src.get_page, header, strict=True)


def test_bad_pointer_rejected(db4096: Path) -> None:
    src = PageSource(db4096.read_bytes())
    root = schema_roots(src)["events"]
    raw = bytearray(src.get_page(root) or b"")
    page = parse_page(bytes(raw), root, 4096)
    assert page.cell_count > 0
    ptr_at = page.header_offset + page.kind.header_size
    raw[ptr_at : ptr_at + 2] = b"\xff\xf0"
    with pytest.raises(FormatError):
        parse_page(bytes(raw), root, 4096)
    with pytest.raises(FormatError):
        parse_page(bytes(4096), 2, 4096)  # type byte 0


def test_page1_offset(db4096: Path) -> None:
    page = parse_page(db4096.read_bytes()[:4096], 1, 4096)
    assert page.header_offset == 100
    assert page.kind is PageKind.LEAF_TABLE


@pytest.mark.slow
@given(st.binary(min_size=512, max_size=700), st.integers(min_value=1, max_value=3))
def test_garbage_pages_raise_only_format_error(data: bytes, pgno: int) -> None:
    for kind_byte in (data[0], 2, 5, 10, 13):
        raw = bytes([kind_byte]) + data[1:]
        try:
            page = parse_page(raw, pgno, 512)
        except FormatError:
            continue
        for i in range(page.cell_count):
            try:
                page.cell(i)
            except FormatError:
                pass
        try:
            freeblocks(page)
        except FormatError:
            pass


@pytest.mark.slow
@given(st.dictionaries(st.integers(0, 6), st.binary(min_size=0, max_size=520), max_size=6),
       st.integers(0, 8), st.integers(-5, 5000))  # fmt: skip
def test_garbage_chains_raise_only_format_error(pages: dict, first: int, needed: int) -> None:
    try:
        out = read_overflow(pages.get, first, needed, 512, 6)
    except FormatError:
        return
    assert len(out) == needed


def test_insert_rows_helper_is_used(tmp_path: Path) -> None:
    # Growing a table after creation still reads back identically (pages reused/split).
    path = make_db(tmp_path / "grow.db", page_size=2048, rows=5)
    con = apsw.Connection(str(path))
    insert_rows(con, 5, 60)
    con.close()
    assert rows_from_pages(PageSource(path.read_bytes())) == select_rows(path)
