"""The 100-byte database header, and page-size inference when that header is destroyed."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import FormatError
from .record import ENCODINGS
from .varint import Buffer

MAGIC = b"SQLite format 3\x00"
HEADER_SIZE = 100
#: Every legal page size, smallest first.
PAGE_SIZES: tuple[int, ...] = tuple(1 << n for n in range(9, 17))

_HEADER = struct.Struct(">16sHBBBBBBIIIIIIIIIIII20xII")


@dataclass(frozen=True)
class DbHeader:
    """The parsed database header (offsets per SQLite's file format documentation)."""

    magic: bytes  # offset 0, always b"SQLite format 3\0" here
    page_size: int  # offset 16, with 1 already mapped to 65536
    write_version: int  # offset 18: 1 rollback journal, 2 WAL
    read_version: int  # offset 19: 1 rollback journal, 2 WAL
    reserved: int  # offset 20: unused bytes at the end of each page
    change_counter: int  # offset 24
    page_count: int  # offset 28: size in pages (see page_count_valid)
    freelist_trunk: int  # offset 32: first freelist trunk page, 0 if none
    freelist_count: int  # offset 36: total number of freelist pages
    schema_cookie: int  # offset 40
    schema_format: int  # offset 44: 1..4
    default_cache_size: int  # offset 48
    autovacuum_top_root: int  # offset 52: non-zero in auto/incremental vacuum databases
    text_encoding: int  # offset 56: 1 UTF-8, 2 UTF-16le, 3 UTF-16be (0 for an empty file)
    user_version: int  # offset 60
    incremental_vacuum: int  # offset 64
    application_id: int  # offset 68
    version_valid_for: int  # offset 92
    sqlite_version: int  # offset 96: SQLITE_VERSION_NUMBER of the last writer

    @property
    def usable_size(self) -> int:
        """Usable bytes per page: page size minus the reserved bytes."""
        return self.page_size - self.reserved

    @property
    def encoding(self) -> str:
        """Python codec name of the text encoding (UTF-8 when unset or unknown)."""
        return ENCODINGS.get(self.text_encoding, "utf-8")

    @property
    def page_count_valid(self) -> bool:
        """Whether ``page_count`` can be trusted (change counter == version-valid-for)."""
        return self.page_count > 0 and self.change_counter == self.version_valid_for


def decode_page_size(raw: int) -> int:
    """Map the 2-byte header value to a page size; FormatError when it is not a legal size."""
    size = 65536 if raw == 1 else raw
    if size not in PAGE_SIZES:
        raise FormatError(f"invalid page size {raw}")
    return size


def parse_header(data: Buffer) -> DbHeader:
    """Parse the first 100 bytes of a database file.

    Raises :class:`FormatError` when fewer than 100 bytes are given, the magic string is wrong,
    the page size is not a power of two in 512..65536, or the usable size is below 480.
    """
    if len(data) < HEADER_SIZE:
        raise FormatError(f"database header needs 100 bytes, got {len(data)}")
    f = _HEADER.unpack_from(bytes(data[:HEADER_SIZE]))
    if f[0] != MAGIC:
        raise FormatError("bad database magic string")
    page_size = decode_page_size(f[1])
    reserved = f[4]
    if page_size - reserved < 480:
        raise FormatError(f"usable size {page_size - reserved} is below 480")
    return DbHeader(
        magic=f[0],
        page_size=page_size,
        write_version=f[2],
        read_version=f[3],
        reserved=reserved,
        change_counter=f[8],
        page_count=f[9],
        freelist_trunk=f[10],
        freelist_count=f[11],
        schema_cookie=f[12],
        schema_format=f[13],
        default_cache_size=f[14],
        autovacuum_top_root=f[15],
        text_encoding=f[16],
        user_version=f[17],
        incremental_vacuum=f[18],
        application_id=f[19],
        version_valid_for=f[20],
        sqlite_version=f[21],
    )


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


@dataclass(frozen=True)
class JournalHeader:
    """The first 28 bytes of a rollback journal (``<db>-journal``)."""

    records: int  # offset 8: page records in the first segment (-1: up to the end)
    initial_pages: int  # offset 16: the database's size in pages before the transaction
    sector_size: int  # offset 20
    page_size: int  # offset 24


def parse_journal_header(data: Buffer) -> JournalHeader | None:
    """The header of a *hot* journal, or None when the bytes are not one (empty, zeroed after a
    commit, or too short), or when its page size or sector size is no size SQLite allows:
    SQLite's playback stops at such a header (its writer died before syncing it, so no page
    was written after it) and deletes the journal, so it rolls nothing back."""
    if len(data) < 28 or bytes(data[:8]) != JOURNAL_MAGIC:
        return None
    records, _nonce, initial, sector, page_size = struct.unpack(">iIIII", bytes(data[8:28]))
    # page size 0: SQLite before 3.5.8 wrote no page size; the playback takes the database's
    if not (page_size == 0 or _power_of_two(page_size, 512, 65536)):
        return None
    if not _power_of_two(sector, 32, 65536):
        return None
    return JournalHeader(records, initial, sector, page_size)


def _power_of_two(n: int, low: int, high: int) -> bool:
    return low <= n <= high and n & (n - 1) == 0


def journal_torn(journal: Buffer) -> tuple[frozenset[int], int] | None:
    """A hot journal that cannot roll the whole transaction back, read as SQLite's playback
    reads it (segments of a header, one sector long, then ``records`` page records of page
    number, page and checksum): (the pages its intact records restore, the records its headers
    promise but the file does not hold whole, or holds with a failing checksum). None when
    every promised record is intact (or the journal is not hot). The killed transaction may
    have overwritten any page whose record is missing, so only the restored pages are known to
    hold committed content."""
    got = journal_restores(journal)
    return None if got is None or not got[1] else got


def journal_restores(journal: Buffer) -> tuple[frozenset[int], int] | None:
    """What SQLite's playback of a hot journal does (see :func:`journal_torn`): (the pages its
    intact records restore, the records promised but missing), whole or not. None when the
    journal is not hot or promises nothing.

    A journal cut exactly where a segment's records end reads as whole: nothing in it says
    another segment followed (a transaction killed after a sync writes none). Only the
    database can say so: its rollback then fails integrity."""
    data = memoryview(journal)  # a mapped file: no copy of it
    first = parse_journal_header(data)
    if first is None or first.records == 0:
        return None  # nothing was promised: no page was written before the journal's sync
    ps, sector = first.page_size, first.sector_size
    if ps == 0:  # the database's page size (see parse_journal_header): its records unknown
        return frozenset(), max(first.records, 1)
    restored: set[int] = set()
    missing, off, end = 0, 0, 0
    size = ps + 8
    while off + 28 <= len(data) and data[off : off + 8] == JOURNAL_MAGIC:
        records, nonce = struct.unpack(">iI", data[off + 8 : off + 16])
        at = off + sector
        if records == -1:  # written without syncs: as many records as the file holds
            records = max(0, (len(data) - at) // size)
        for i in range(records):
            rec = data[at : at + size]
            if len(rec) < size:
                missing += records - i
                break
            pgno = int.from_bytes(rec[:4], "big")
            page = rec[4 : 4 + ps]
            cksum = nonce
            j = ps - 200
            while j > 0:
                cksum += page[j]
                j -= 200
            if pgno == 0 or cksum & 0xFFFFFFFF != int.from_bytes(rec[4 + ps :], "big"):
                missing += records - i
                break
            restored.add(pgno)
            at += size
        else:
            end = at
            off = -(-at // sector) * sector  # the next segment starts on a sector boundary
            continue
        break
    if not missing and end < len(data) < off + sector:
        missing = 1  # a next segment's header (written a whole sector at once) was cut short
    return frozenset(restored), missing


# SQLite reads a journal's first header only when the journal holds one whole sector (the
# pager's sector size, 512 where the file system overwrites sectors safely, the default on Unix):
# a shorter hot journal is deleted unread.
JOURNAL_MIN_READ = 512


def journal_problem(db_head: Buffer, journal: Buffer, journal_size: int) -> str | None:
    """Why a hot journal cannot be this database's: its page size is not the file's, or the size
    it would restore is no size at all. None when it may be rolled back (or is not hot)."""
    j = parse_journal_header(journal)
    if j is None or journal_size < JOURNAL_MIN_READ:
        return None  # SQLite reads no header from it: it rolls nothing back
    try:
        head = parse_header(bytes(db_head[:100]))
    except FormatError:
        return None  # the file's header is the damage; the rollback may restore it
    if j.page_size not in (0, head.page_size):
        return f"its page size {j.page_size} is not the database's {head.page_size}"
    if j.initial_pages == 0:
        return "it would restore a database of 0 pages"
    return None
