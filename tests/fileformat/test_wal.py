"""WAL scanning on real WAL files, checked against what SQLite itself reads."""

from __future__ import annotations

import struct
from pathlib import Path

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdb.fileformat.errors import FormatError
from agentdb.fileformat.pager import PageSource
from agentdb.fileformat.wal import (
    WAL_MAGIC_BE,
    WalScan,
    parse_wal_header,
    scan_wal,
    wal_checksum,
)

from .conftest import SCHEMA, WalFiles, make_wal, open_copy
from .test_btree import rows_from_pages


def commit_groups(scan: WalScan) -> list[list[int]]:
    groups, cur = [], []
    for f in scan.frames:
        cur.append(f.index)
        if f.is_commit:
            groups.append(cur)
            cur = []
    return groups


def test_clean_wal(wal_files: WalFiles, tmp_path: Path) -> None:
    scan = scan_wal(wal_files.wal)
    assert scan.header is not None and scan.header.checksum_ok
    assert scan.header.page_size == 4096
    assert scan.anomalies == []
    assert scan.valid_frames == scan.frames and scan.frames[-1].is_commit
    assert {f.chain for f in scan.frames} == {"committed"}
    assert all(f.checksum_ok for f in scan.frames)
    assert len(commit_groups(scan)) >= wal_files.tail_commits + 1
    src = PageSource(wal_files.db, scan)
    assert rows_from_pages(src) == wal_files.rows
    # Without the WAL the database file holds only the checkpointed base rows.
    assert len(rows_from_pages(PageSource(wal_files.db))) == 10
    assert open_copy(tmp_path, src.image()) == wal_files.rows


def test_checksum_break_and_resume(wal_files: WalFiles, tmp_path: Path) -> None:
    scan = scan_wal(wal_files.wal)
    groups = commit_groups(scan)
    target = groups[-3]  # the third of the five one-row tail commits
    victim = scan.frames[target[0]]
    wal = bytearray(wal_files.wal)
    wal[victim.offset + 24 + 2000] ^= 0xFF
    bad = scan_wal(bytes(wal))
    assert bad.codes == ["wal_checksum_break", "wal_frames_after_break"]
    assert bad.anomalies[0].frame == victim.index
    assert [f.index for f in bad.valid_frames] == list(range(target[0]))
    assert [[f.index for f in g] for g in bad.resumed_commits] == groups[-2:]
    assert bad.frames[victim.index].chain == "break"
    # What SQLite reads from the damaged WAL is exactly our valid prefix.
    sqlite_rows = open_copy(tmp_path, wal_files.db, bytes(wal), "sqlite")
    assert len(sqlite_rows) == len(wal_files.rows) - 3
    assert rows_from_pages(PageSource(wal_files.db, bad)) == sqlite_rows
    # The resumed commits recover the later rows (each rewrote the whole leaf).
    resumed = PageSource(wal_files.db, bad, include_resumed=True)
    assert rows_from_pages(resumed) == wal_files.rows
    assert open_copy(tmp_path, resumed.image(), name="resumed") == wal_files.rows


def test_truncated_mid_frame_is_torn_tail(wal_files: WalFiles, tmp_path: Path) -> None:
    scan = scan_wal(wal_files.wal)
    last = scan.frames[-1]
    cut = wal_files.wal[: last.offset + 100]
    torn = scan_wal(cut)
    assert torn.codes == ["wal_torn_tail"]
    assert torn.tail_bytes == 100
    groups = commit_groups(scan)
    assert [f.index for f in torn.valid_frames] == list(range(groups[-1][0]))
    sqlite_rows = open_copy(tmp_path, wal_files.db, cut)
    assert rows_from_pages(PageSource(wal_files.db, torn)) == sqlite_rows
    assert sqlite_rows == wal_files.rows[:-1]


def test_uncommitted_tail(wal_files: WalFiles) -> None:
    scan = scan_wal(wal_files.wal)
    groups = commit_groups(scan)
    big = [g for g in groups if len(g) > 1][-1]
    cut = wal_files.wal[: scan.frames[big[-1]].offset]  # drop the commit frame of a group
    torn = scan_wal(cut)
    assert torn.codes == ["wal_torn_tail"]
    assert torn.frames[-1].chain == "uncommitted"
    assert torn.valid_frames[-1].index == big[0] - 1


def test_corrupt_last_frame_is_torn_tail(wal_files: WalFiles) -> None:
    wal = bytearray(wal_files.wal)
    wal[-10] ^= 1
    scan = scan_wal(bytes(wal))
    assert scan.codes == ["wal_torn_tail"]
    assert scan.resumed_commits == []


def test_bad_magic(wal_files: WalFiles) -> None:
    wal = bytearray(wal_files.wal)
    wal[0] ^= 0x10
    scan = scan_wal(bytes(wal))
    assert scan.codes == ["wal_bad_header"]
    assert scan.header is None and scan.valid_frames == [] and scan.page_versions() == {}


def test_bad_header_checksum(wal_files: WalFiles, tmp_path: Path) -> None:
    wal = bytearray(wal_files.wal)
    wal[12] ^= 1  # checkpoint sequence: covered by the header checksum
    scan = scan_wal(bytes(wal))
    assert scan.codes == ["wal_bad_header"]
    assert scan.valid_frames == []
    assert open_copy(tmp_path, wal_files.db, bytes(wal)) == wal_files.rows[:10]


def test_stale_frames_after_restart(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    con = apsw.Connection(str(path))
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute(SCHEMA)
    for i in range(20):
        with con:
            con.execute("INSERT INTO events(id, kind, payload) VALUES (?, 'k', x'00')", (str(i),))
    con.execute("PRAGMA wal_checkpoint(PASSIVE)")
    with con:
        con.execute("INSERT INTO events(id, kind, payload) VALUES ('new', 'k', x'01')")
    rows = [tuple(r) for r in con.execute("SELECT * FROM events ORDER BY sequence")]
    db, wal = path.read_bytes(), Path(f"{path}-wal").read_bytes()
    con.close()
    scan = scan_wal(wal)
    assert scan.stale_frames > 10
    assert scan.codes == ["wal_stale_frames"]
    assert all(f.chain == "committed" for f in scan.valid_frames)
    assert rows_from_pages(PageSource(db, scan)) == rows == open_copy(tmp_path, db, wal)


def rewrite_big_endian(wal: bytes) -> bytes:
    """Re-checksum a WAL with big-endian words (magic 0x377f0683)."""
    h = parse_wal_header(wal)
    out = bytearray(wal)
    out[0:4] = struct.pack(">I", WAL_MAGIC_BE)
    s = wal_checksum(bytes(out[:24]), 0, 0, True)
    out[24:32] = struct.pack(">II", *s)
    size = 24 + h.page_size
    for off in range(32, len(out) - size + 1, size):
        s = wal_checksum(bytes(out[off : off + 8]), *s, True)
        s = wal_checksum(bytes(out[off + 24 : off + size]), *s, True)
        out[off + 16 : off + 24] = struct.pack(">II", *s)
    return bytes(out)


def test_big_endian_checksums(wal_files: WalFiles, tmp_path: Path) -> None:
    wal = rewrite_big_endian(wal_files.wal)
    scan = scan_wal(wal)
    assert scan.header is not None and scan.header.big_endian
    assert scan.anomalies == []
    assert len(scan.valid_frames) == len(scan.frames)
    assert open_copy(tmp_path, wal_files.db, wal) == wal_files.rows  # SQLite agrees


def test_checksum_rejects_odd_length() -> None:
    try:
        wal_checksum(b"1234", 0, 0, False)
    except FormatError:
        return
    raise AssertionError("expected FormatError")


def test_other_page_size(tmp_path: Path) -> None:
    files = make_wal(tmp_path, page_size=1024, tail_commits=2)
    scan = scan_wal(files.wal)
    assert scan.page_size == 1024 and scan.anomalies == []
    damaged = bytearray(files.db)
    damaged[:100] = bytes(100)
    src = PageSource(bytes(damaged), scan)
    assert src.page_size == 1024 and src.header is None


@settings(max_examples=200)
@given(st.binary(max_size=3000), st.booleans())
def test_garbage_raises_nothing(data: bytes, with_header: bool) -> None:
    if with_header:
        data = struct.pack(">8I", 0x377F0682, 3007000, 512, 0, 1, 2, 0, 0) + data
    scan = scan_wal(data)
    scan.page_versions()
    scan.all_committed_page_versions()
    assert len(scan.valid_frames) <= len(scan.frames)


def _checksum_loop(data: bytes, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    """SQLite's own loop (walChecksumBytes), word pair by word pair."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 600).flatmap(lambda n: st.binary(min_size=8 * n, max_size=8 * n)),
    st.integers(0, 0xFFFFFFFF),
    st.integers(0, 0xFFFFFFFF),
    st.booleans(),
)
def test_checksum_is_sqlites_loop(data: bytes, s0: int, s1: int, big_endian: bool) -> None:
    assert wal_checksum(data, s0, s1, big_endian) == _checksum_loop(data, s0, s1, big_endian)


def test_checksum_of_full_pages_is_sqlites_loop() -> None:
    for size in (512, 4096, 65536):
        for fill in (b"\xff", b"\x00", bytes(range(256))):
            data = (fill * size)[:size]
            for s in ((0, 0), (0xFFFFFFFF, 0xFFFFFFFF), (12345, 678)):
                assert wal_checksum(data, *s, False) == _checksum_loop(data, *s, False)
                assert wal_checksum(data, *s, True) == _checksum_loop(data, *s, True)
