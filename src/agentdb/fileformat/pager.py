"""A page source over a (possibly damaged) database file with an optional WAL overlay."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .btree import looks_like_btree_page, parse_page
from .errors import FormatError
from .filebytes import FileBytes
from .header import PAGE_SIZES, DbHeader, parse_header
from .varint import Buffer
from .wal import WalFrame, WalScan, scan_wal

# Pages sampled to judge a header's reserved-bytes field (see PageSource._plausible_reserved).
_RESERVED_SAMPLE = 256
# Bytes at the start of a file on which a declared page size is weighed against the others.
_SIZE_WINDOW = 1 << 20
_SIZE_MIN_BYTES = 8192  # a shorter file keeps its declared size


class PageSource:
    """Pages of one database as SQLite (or a salvage engine) would see them.

    * ``page_size`` comes from ``page_size=`` if given, else the database header, else the WAL
      header, else :func:`infer_page_size`; FormatError when none of those works.
    * ``usable`` is the page size minus the header's reserved bytes (0 without a header, or
      when the file's b-tree pages show the field is damage: :meth:`_plausible_reserved`).
    * ``page_count`` is the database size after the newest used WAL commit when there is one,
      else the number of (whole or partial) pages in the file.
    * :meth:`get_page` returns the newest committed WAL copy of a page, else the file's copy.
      A last page cut short by truncation is returned zero-padded to the page size and its number
      is listed in ``padded_pages``. Pages beyond the file and not in the WAL give None.

    With ``include_resumed=True`` the WAL overlay also applies ``resumed_commits`` (intact commits
    after a checksum break that SQLite itself would ignore).
    """

    def __init__(
        self,
        db: Buffer | FileBytes,
        wal: WalScan | None = None,
        *,
        page_size: int | None = None,
        include_resumed: bool = False,
    ) -> None:
        self.db: bytes | FileBytes = db if isinstance(db, FileBytes) else bytes(db)
        self.wal = wal
        self.header: DbHeader | None = None
        self.header_problem: str | None = None
        try:
            self.header = parse_header(self.db[:100])
        except FormatError as e:
            self.header_problem = str(e)
        wal_size = wal.page_size if wal is not None else None
        declared = self.header.page_size if self.header else None
        if page_size is None and declared is not None:
            declared = plausible_page_size(self.db[:_SIZE_WINDOW], declared)
        size = page_size or declared or wal_size or infer_page_size(self.db[: 16 << 20])
        if size is None:
            raise FormatError("cannot determine the page size (no header, WAL or b-tree pages)")
        self.page_size: int = size
        reserved = self.header.reserved if self.header else 0
        self.file_pages: int = -(-len(self.db) // size)
        if reserved:
            reserved = self._plausible_reserved(size, reserved)
        self.usable: int = size - reserved
        # page -> the WAL frame holding its newest committed copy (read when asked for)
        self.overlay: dict[int, WalFrame] = {}
        wal_count: int | None = None
        if wal is not None and wal_size == size:
            self.overlay = wal.newest_frames(include_resumed=include_resumed)
            wal_count = wal.db_size(include_resumed=include_resumed)
        self.page_count: int = wal_count if wal_count is not None else self.file_pages
        self.padded_pages: set[int] = set()

    def _plausible_reserved(self, size: int, reserved: int) -> int:
        """The header's reserved bytes (offset 20), or 0 when the file's own b-tree pages say
        that field is damage (SQLite's recovery tolerates it): each value is tried on a sample
        of the file's pages, scoring the cells that parse within the usable size with an
        overflow pointer inside the file, minus those that do not. The header's value wins a
        tie (agentdb never writes reserved bytes, but another writer may)."""
        n = self.file_pages
        step = max(1, n // _RESERVED_SAMPLE)
        scores = {reserved: 0, 0: 0}
        for pgno in range(1, n + 1, step):
            start = (pgno - 1) * size
            data = bytes(self.db[start : start + size])
            if len(data) < size:
                break
            for r in scores:
                try:
                    page = parse_page(data, pgno, size - r)
                except FormatError:
                    continue
                for i in range(page.cell_count):
                    try:
                        cell = page.cell(i)
                    except (FormatError, IndexError):
                        scores[r] -= 1
                        continue
                    ovfl = getattr(cell, "overflow_pgno", None)
                    scores[r] += 1 if ovfl is None or 2 <= ovfl <= n else -1
        return 0 if scores[0] > scores[reserved] else reserved

    @classmethod
    def from_files(
        cls, db_path: Path, wal_path: Path | None = None, *, include_resumed: bool = False
    ) -> PageSource:
        """Read a database file and, if given and present, its WAL (plain file reads)."""
        wal = None
        if wal_path is not None and wal_path.exists():
            wal = scan_wal(wal_path.read_bytes())
        return cls(db_path.read_bytes(), wal, include_resumed=include_resumed)

    def source_of(self, pgno: int) -> str | None:
        """Where :meth:`get_page` takes page ``pgno`` from: "wal", "file" or None."""
        if not 1 <= pgno <= self.page_count:
            return None
        if pgno in self.overlay:
            return "wal"
        return "file" if pgno <= self.file_pages else None

    def file_page(self, pgno: int) -> bytes | None:
        """The database file's own copy of a page (no WAL), zero-padded if cut short."""
        if not 1 <= pgno <= self.file_pages:
            return None
        start = (pgno - 1) * self.page_size
        page = self.db[start : start + self.page_size]
        if len(page) < self.page_size:
            self.padded_pages.add(pgno)
            page = page + bytes(self.page_size - len(page))
        return page

    def get_page(self, pgno: int) -> bytes | None:
        """Page ``pgno`` (1-based): newest committed WAL copy, else the file's; None if absent."""
        if not 1 <= pgno <= self.page_count:
            return None
        frame = self.overlay.get(pgno)
        if frame is not None and self.wal is not None:
            return self.wal.frame_page(frame)
        return self.file_page(pgno)

    def iter_pages(self) -> Iterator[tuple[int, bytes]]:
        """Every available page as ``(pgno, data)`` in page order."""
        for pgno in range(1, self.page_count + 1):
            page = self.get_page(pgno)
            if page is not None:
                yield pgno, page

    def image(self) -> bytes:
        """The database as one file image (missing pages zero-filled), e.g. to re-open it."""
        blank = bytes(self.page_size)
        return b"".join(self.get_page(n) or blank for n in range(1, self.page_count + 1))


def _btree_starts(view: memoryview, size: int) -> int:
    """How many page starts at multiples of ``size`` in ``view`` look like b-tree pages."""
    score = 0
    for start in range(0, len(view) - size + 1, size):
        if looks_like_btree_page(view[start : start + size], 100 if start == 0 else 0, size):
            score += 1
    return score


def plausible_page_size(data: Buffer, declared: int) -> int:
    """The header's page size, or the one the file's own pages bear out when the field is
    damage (SQLite's recovery tolerates a garbled page size): every legal size is scored on
    the same first bytes of the file as :func:`infer_page_size` does, and another size wins
    only with strictly more b-tree page starts than the declared one. A size too large sees a
    subset of the real page starts, one too small cuts real pages short."""
    view = memoryview(bytes(data))
    if len(view) < _SIZE_MIN_BYTES:
        return declared  # too few pages to outvote the header
    own = _btree_starts(view, declared)
    best, best_score = declared, own
    for size in PAGE_SIZES:
        if size != declared:
            score = _btree_starts(view, size)
            if score > best_score:
                best, best_score = size, score
    return best


def infer_page_size(data: Buffer, *, max_bytes: int = 16 << 20) -> int | None:
    """Guess the page size of a database whose header is damaged.

    For every legal page size, counts the whole pages (within the first ``max_bytes``) that parse
    as plausible b-tree pages (valid type byte, cell count, cell pointers and content start all in
    range, assuming no reserved bytes). At the true size every real b-tree page is counted; a
    larger guess sees only a subset of the page starts, and a smaller one sees real pages cut
    short so their cell pointers fall outside. The highest count wins; ties go to the smaller
    size. Returns None when no size finds a single plausible page.
    """
    view = memoryview(bytes(data[:max_bytes]))
    best: int | None = None
    best_score = 0
    for size in PAGE_SIZES:
        score = 0
        for start in range(0, len(view) - size + 1, size):
            page = view[start : start + size]
            if looks_like_btree_page(page, 100 if start == 0 else 0, size):
                score += 1
        if score > best_score:
            best, best_score = size, score
    return best
