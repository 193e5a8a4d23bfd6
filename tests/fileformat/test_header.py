"""Database header parsing and page-size inference on real files."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentdb.fileformat.errors import FormatError
from agentdb.fileformat.header import parse_header
from agentdb.fileformat.pager import infer_page_size

from .conftest import make_db


def pragma(path: Path, name: str) -> object:
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return con.execute(f"PRAGMA {name}").fetchall()[0][0]
    finally:
        con.close()


def test_header_matches_sqlite(db4096: Path) -> None:
    h = parse_header(db4096.read_bytes())
    assert h.page_size == 4096 == pragma(db4096, "page_size")
    assert h.page_count == pragma(db4096, "page_count")
    assert h.page_count * 4096 == db4096.stat().st_size
    assert h.page_count_valid
    assert h.user_version == 7
    assert h.application_id == 1234567
    assert h.encoding == "utf-8" and h.text_encoding == 1
    assert h.write_version == h.read_version == 1
    assert h.reserved == 0 and h.usable_size == 4096
    assert h.schema_cookie == pragma(db4096, "schema_version")
    assert h.freelist_count == pragma(db4096, "freelist_count")
    major, minor, patch = (int(x) for x in apsw.sqlite_lib_version().split("."))
    assert h.sqlite_version == major * 1_000_000 + minor * 1000 + patch


def test_page_size_65536_and_utf16(tmp_path: Path) -> None:
    path = make_db(tmp_path / "big.db", page_size=65536, rows=3, encoding="UTF-16be")
    data = path.read_bytes()
    assert data[16:18] == b"\x00\x01"
    h = parse_header(data)
    assert h.page_size == 65536
    assert h.encoding == "utf-16be"


def test_wal_versions(tmp_path: Path) -> None:
    con = apsw.Connection(str(tmp_path / "w.db"))
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t(x)")
    con.close()
    h = parse_header((tmp_path / "w.db").read_bytes())
    assert (h.write_version, h.read_version) == (2, 2)


@pytest.mark.parametrize(
    ("offset", "value"),
    [
        (0, b"X"),
        (16, b"\x03\x00"),
        (16, b"\x00\x00"),
        (16, b"\x00\x80"),
        (16, b"\x02\x00\x01\x01\xff"),  # 512-byte pages with 255 reserved: usable < 480
    ],
)
def test_bad_header(db4096: Path, offset: int, value: bytes) -> None:
    data = bytearray(db4096.read_bytes()[:100])
    data[offset : offset + len(value)] = value
    with pytest.raises(FormatError):
        parse_header(bytes(data))


def test_short_header() -> None:
    with pytest.raises(FormatError):
        parse_header(b"SQLite format 3\x00")


@pytest.mark.parametrize("fixture", ["db4096", "db1024"])
def test_infer_page_size_without_header(fixture: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(fixture)
    data = bytearray(path.read_bytes())
    data[:100] = bytes(100)
    with pytest.raises(FormatError):
        parse_header(bytes(data))
    assert infer_page_size(bytes(data)) == (4096 if fixture == "db4096" else 1024)


@pytest.mark.parametrize("page_size", [512, 2048, 8192, 65536])
def test_infer_other_sizes(tmp_path: Path, page_size: int) -> None:
    data = bytearray(make_db(tmp_path / "x.db", page_size=page_size, rows=30).read_bytes())
    data[:100] = bytes(100)
    assert infer_page_size(bytes(data)) == page_size


def test_infer_nothing() -> None:
    assert infer_page_size(bytes(10000)) is None
    assert infer_page_size(b"") is None


@given(st.binary(min_size=0, max_size=120))
def test_garbage_raises_only_format_error(data: bytes) -> None:
    try:
        parse_header(data)
    except FormatError:
        pass


@given(st.binary(min_size=0, max_size=3000))
def test_infer_garbage(data: bytes) -> None:
    assert infer_page_size(data) in (None, 512, 1024, 2048)
