"""PageSource over truncated and header-less files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdb.fileformat.errors import FormatError
from agentdb.fileformat.pager import PageSource

from .conftest import select_rows
from .test_btree import rows_from_pages


def test_plain_file(db4096: Path) -> None:
    data = db4096.read_bytes()
    src = PageSource(data)
    assert (src.page_size, src.usable, src.page_count) == (4096, 4096, len(data) // 4096)
    pages = list(src.iter_pages())
    assert [n for n, _ in pages] == list(range(1, src.page_count + 1))
    assert pages[2][1] == data[2 * 4096 : 3 * 4096]
    assert src.get_page(0) is None and src.get_page(src.page_count + 1) is None
    assert src.source_of(1) == "file"
    assert src.image() == data


def test_truncated_last_page_is_padded(db4096: Path) -> None:
    data = db4096.read_bytes()
    cut = data[: len(data) - 1000]
    src = PageSource(cut)
    last = src.page_count
    assert last == len(data) // 4096
    page = src.get_page(last)
    assert page is not None and len(page) == 4096
    assert page[:3096] == data[(last - 1) * 4096 : (last - 1) * 4096 + 3096]
    assert page[3096:] == bytes(1000)
    assert src.padded_pages == {last}


def test_destroyed_header_still_reads_rows(db4096: Path) -> None:
    data = bytearray(db4096.read_bytes())
    data[:100] = bytes(100)
    src = PageSource(bytes(data))
    assert src.header is None and src.header_problem
    assert src.page_size == 4096
    assert rows_from_pages(src) == select_rows(db4096)


def test_no_page_size_at_all() -> None:
    with pytest.raises(FormatError):
        PageSource(bytes(3000))


@settings(max_examples=100)
@given(st.binary(max_size=5000))
def test_garbage_raises_only_format_error(data: bytes) -> None:
    try:
        src = PageSource(data)
    except FormatError:
        return
    for _, page in src.iter_pages():
        assert len(page) == src.page_size
