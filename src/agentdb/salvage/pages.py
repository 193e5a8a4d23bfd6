"""Engine c: page-level salvage by SQLite's file format, with no SQLite call at all.

Reads every page of the database file and every committed frame of its WAL (the newest committed
copy of a page wins; torn or uncommitted frames are ignored; after a checksum break the chain is
resumed, so intact later commits are kept), decodes table-leaf cells (varints, record headers,
serial types, overflow chains), assigns each record to one of our tables by its shape, validates
it and hands back *candidates* in three tiers:

* tier 0, ``live``: reached by walking each table's b-tree from the root ``sqlite_schema`` names;
* tier 1, ``stray``: table-leaf pages of the current image that no live walk reached (the
  subtree under a damaged interior page, or every leaf when the schema page is lost);
* tier 2, ``stale``: older copies of pages (the file's copy under a newer WAL frame, superseded
  WAL frames) and freelist pages. These only ever fill gaps (see :mod:`.merge`).

Rejected: cells that do not parse, keys out of order for their page (or outside the bounds the
parent page gives), overflow chains that loop, leave the file or run through a live b-tree page,
records of no known shape, rows that fail validation, revision-2 events whose content_hash does
not match.

Size: over 500 lines because it is one engine: every page and WAL frame read by the file format,
with its tiers of trust.
"""

from __future__ import annotations

import bisect
import os
import pickle
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdb.fileformat import (
    FileBytes,
    FormatError,
    PageKind,
    PageSource,
    TableLeafCell,
    decode_record,
    iter_freelist,
    parse_page,
    read_overflow,
    scan_wal,
)
from agentdb.fileformat.btree import TableInteriorCell
from agentdb.fileformat.wal import CHAIN_COMMITTED, CHAIN_RESUMED, WalScan
from agentdb.salvage import chainrows, freespace, tables
from agentdb.salvage.diskrows import Candidate, Candidates, HashSets, Verified
from agentdb.salvage.scratch import Scratch
from agentdb.salvage.tables import Row

LIVE, STRAY, STALE = 0, 1, 2
TIER_NAMES = {LIVE: "live", STRAY: "stray", STALE: "stale"}
GetPage = Callable[[int], "bytes | None"]
Keep = Callable[[Row], Row]
_MIN_KEY = -(1 << 63) - 1


@dataclass
class PageSalvage:
    """What engine c found."""

    candidates: Candidates  # in the order found (live walks first)
    event_hashes: HashSets  # every stored content hash seen, by sequence
    verified: Verified  # sequence -> (row, its matching stored hash), the first copy found
    chain: chainrows.ChainEvidence  # revision 3: stored hashes, the live head, gap rows
    sequences: dict[str, int] = field(default_factory=dict)  # sqlite_sequence counters seen
    rejected: Counter[str] = field(default_factory=Counter)  # reason -> count
    notes: list[str] = field(default_factory=list)
    page_size: int | None = None
    revision: int | None = None  # the header's user_version, when the header is readable
    schema_found: bool = False  # sqlite_schema named our tables' roots
    free: list[freespace.FreeRow] = field(default_factory=list)  # records in free space
    opaque_pages: list[int] = field(default_factory=list)  # b-tree-typed pages that do not parse
    # Rowids of cells in a live b-tree whose payload this engine rejected structurally (an
    # overflow chain that loops, leaves the file or runs into a b-tree page; a record that does
    # not decode): SQLite may still return a row for them, of the right length and wrong bytes.
    broken: dict[str, set[int]] = field(default_factory=dict)
    # Rowids of live cells whose overflow chains share pages (a cross-link): at most one of
    # them holds its own bytes. ``crosslink_owner`` are the ones the layout names (the shared
    # page directly follows the previous page of their chain): kept, but unverified.
    crosslinked: dict[str, set[int]] = field(default_factory=dict)
    crosslink_owner: dict[str, set[int]] = field(default_factory=dict)
    # Keys (table -> keys) of rows no hash vouches for that were read from a page image on which
    # something else did not parse or validate (damage there may have rewritten their bytes too).
    doubtful: dict[str, set[Any]] = field(default_factory=dict)
    # Keys (table -> keys) of rows read from a live leaf outside the key range its parent gives
    # it: a flipped key, or a page in the wrong place. SQLite's own read returns such a cell as
    # if it belonged there, so where an in-bounds live cell holds the same key, that one wins.
    misplaced: dict[str, set[Any]] = field(default_factory=dict)

    @property
    def fully_understood(self) -> bool:
        """Every page typed as a b-tree page parsed and every cell decoded: SQLite's own
        recovery, which reads pages by the same rules, cannot find a row this engine missed."""
        undecoded = ("cell does not parse", "record does not decode", "overflow chain broken")
        return not self.opaque_pages and not any(self.rejected[k] for k in undecoded)


class _PageReader:
    def __init__(
        self, src: PageSource, encoding: str, session_id: str, out: PageSalvage, keep: Keep
    ) -> None:
        self.keep = keep  # where a validated row's long values go (the scratch database)
        self.src = src
        self.encoding = encoding
        self.session_id = session_id
        self.out = out
        self.live_btree_pages: set[int] = set()
        self.overflow_pages: set[int] = set()  # pages read as part of an overflow chain
        self.chain: list[int] | None = None  # when a list: the overflow pages the next read uses
        self.failed = False  # the last record() could not read its cell structurally
        self.image = ""  # the page image being read ("page 7", "wal frame 12 (page 7, older)")
        self.anomalous: set[str] = set()  # images on which a cell did not parse or validate
        # cells of a live leaf whose keys lie outside the range its parent gives (a page moved
        # or swapped) or out of its run of increasing keys: not live rows, but rows all the
        # same, read as stray ones (page, cell, why)
        self.out_of_bounds: list[tuple[int, TableLeafCell, str]] = []
        # overflow page -> the live row whose chain it is (None: shared by several rows)
        self.chain_owner: dict[int, tuple[str, int] | None] = {}

    # -- records

    def payload(self, cell: TableLeafCell, get_page: GetPage) -> bytes | None:
        if cell.overflow_pgno is None:
            return cell.local
        needed = cell.payload_size - len(cell.local)
        guarded = self._guard(get_page)
        chain = self.chain  # the pages read are appended here when it is a list
        try:
            rest = read_overflow(
                guarded,
                cell.overflow_pgno,
                needed,
                self.src.usable,
                self.src.page_count,
                strict_end=chain is None,
            )
        except FormatError:
            self.out.rejected["overflow chain broken"] += 1
            self.anomalous.add(self.image)
            return None
        last = get_page(chain[-1]) if chain else None
        if last is not None and int.from_bytes(last[:4], "big") != 0:
            # The chain goes on past its payload (a loop, or a page of something else put in
            # its last place): the bytes read may be right or not, and no structure can tell.
            # The row is kept, as doubtful as every row no hash vouches for on this page.
            self.out.notes.append(
                f"{self.image}: overflow chain of key {cell.rowid} goes on past its payload"
            )
            self.anomalous.add(self.image)
        return cell.local + rest

    def _guard(self, get_page: GetPage) -> GetPage:
        live = self.live_btree_pages

        def get(pgno: int) -> bytes | None:
            if pgno in live:
                raise FormatError(f"overflow chain runs into b-tree page {pgno}")
            self.overflow_pages.add(pgno)
            if self.chain is not None:
                self.chain.append(pgno)
            return get_page(pgno)

        return get

    def record(self, cell: TableLeafCell, get_page: GetPage) -> list[Any] | None:
        self.failed = True
        payload = self.payload(cell, get_page)
        if payload is None:
            return None
        try:
            rec = decode_record(payload, self.encoding)
        except FormatError:
            self.out.rejected["record does not decode"] += 1
            self.anomalous.add(self.image)
            return None
        self.failed = False
        return rec

    def accept(
        self, rec: list[Any], rowid: int, tier: int, where: str, want: str | None = None
    ) -> None:
        """Assign ``rec`` to a table by shape, validate it and keep it as a candidate (a
        revision-3 record's hashes go to the chain evidence)."""
        got = tables.classify(rec, rowid)
        if got is None:
            if want != "sqlite_schema":
                self.out.rejected["record of no known shape"] += 1
                self.anomalous.add(where)
            return
        table, row, stored = got.table, got.row, got.stored
        if want is not None and table != want:
            self.out.rejected[f"record in {want}'s b-tree has another table's shape"] += 1
            self.anomalous.add(where)
            return
        if table == "sqlite_sequence":
            name, seq = row
            if tier == LIVE or name not in self.out.sequences:
                self.out.sequences[name] = max(seq, self.out.sequences.get(name, 0))
            return
        if table in chainrows.CHAIN_TABLES:
            if table == "chain_gaps":
                self.out.chain.see_gap(row, stored)
            elif tier == LIVE:  # a head only from the live b-tree (design A9)
                self.out.chain.see_head(row, stored, chainrows.LIVE_PAGES)
            return
        row = tables.normalise(table, row)
        why = tables.problem(table, row, self.session_id)
        why = why or self.revision_problem(table, stored, got.chained)
        vouched = why is None and stored is not tables.NO_HASH
        if vouched:
            if table == "events" and isinstance(stored, bytes):
                self.out.event_hashes.add(row[0], stored)
            why = tables.hash_problem(row, stored, table)
            vouched = why is None
        if vouched and got.chained:
            if table == "events":
                self.out.chain.see_event(row, stored, *got.extra, checked=True)
            else:
                self.out.chain.see_row(table, row, stored, checked=True)
        if why is None and not vouched and tier != LIVE and self.foreign_chain(table, rowid):
            why = "an older copy whose overflow chain runs through another row's pages"
        if why is not None:
            self.out.rejected[f"{table}: {why}"] += 1
            self.anomalous.add(where)
            return
        row = self.keep(row)
        data = pickle.dumps(row, pickle.HIGHEST_PROTOCOL)  # once for both
        if vouched and table == "events":
            self.out.verified.first(row[0], row, stored, data)
        chain = tuple(self.chain or ())
        self.out.candidates.append(
            Candidate(table, row, tier, where, rowid, chain), tables.key_of(table, row), data
        )

    def revision_problem(self, table: str, stored: Any, chained: bool) -> str | None:
        """Why a record's shape cannot be this file's at the revision its header names."""
        rev = self.out.revision
        if (rev or 0) >= 3 and stored is tables.NO_HASH and table in ("events", *chainrows.HASHED):
            return "a record without its revision-3 hash columns (an older copy)"
        if chained and rev is not None and 1 <= rev < 3:
            # revisions only go up: a file whose header names revision 1 or 2 never held a
            # revision-3 record of its own (another session's page, a foreign -wal's frame)
            return f"a revision-3 record in a revision-{rev} file (not its own)"
        return None

    def foreign_chain(self, table: str, rowid: int) -> bool:
        """The overflow chain just read runs through a page a live row's chain uses (another
        row's, or one several rows share): the bytes read are not this copy's own."""
        owners = self.chain_owner
        return any(pg in owners and owners[pg] != (table, rowid) for pg in self.chain or ())

    # -- pages

    def leaf_cells(
        self,
        data: bytes,
        pgno: int,
        lo: int = _MIN_KEY,
        hi: int = tables.MAX_ROWID,
        *,
        live: bool = False,
    ) -> list[TableLeafCell] | None:
        """The parseable cells of a table-leaf page whose keys lie in (lo, hi] and form the
        longest run in increasing key order (a garbage key rejects itself, not the valid cells
        after it), or None if it is not a table-leaf page. ``live``: the page is in a live
        b-tree, and the cells outside the bounds or the run are read later as stray rows (the
        run may have kept a garbage cell that repeats a key, and left out the sound one)."""
        try:
            page = parse_page(data, pgno, self.src.usable)
        except FormatError:
            return None
        if page.kind is not PageKind.LEAF_TABLE:
            return None
        cells: list[TableLeafCell] = []
        for i in range(page.cell_count):
            try:
                cell = page.cell(i)
            except FormatError:
                self.out.rejected["cell does not parse"] += 1
                self.anomalous.add(self.image)
                continue
            if not isinstance(cell, TableLeafCell):
                continue
            if not lo < cell.rowid <= hi:
                self.out.rejected["key outside its parent's bounds"] += 1
                self.anomalous.add(self.image)
                if live:
                    # read later as a stray row
                    self.out_of_bounds.append((pgno, cell, "outside its parent's key range"))
                continue
            cells.append(cell)
        keep = _increasing([c.rowid for c in cells])
        if len(keep) < len(cells):
            self.out.rejected["key out of order for its page"] += len(cells) - len(keep)
            self.anomalous.add(self.image)
            if live:
                self.out_of_bounds += [
                    (pgno, c, "out of its page's key order")
                    for i, c in enumerate(cells)
                    if i not in keep
                ]
        return [c for i, c in enumerate(cells) if i in keep]

    def walk(self, root: int, get_page: GetPage) -> Iterator[tuple[int, TableLeafCell]]:
        """Leniently walk a table b-tree: damaged subtrees are skipped (and left to the scan)."""
        count = self.src.page_count
        stack: list[tuple[int, int, int, int]] = [(root, _MIN_KEY, tables.MAX_ROWID, 0)]
        seen: set[int] = set()
        while stack:
            pgno, lo, hi, depth = stack.pop()
            if not 1 <= pgno <= count or pgno in seen or depth > 64:
                self.out.rejected["b-tree child page out of range or loops"] += 1
                continue
            seen.add(pgno)
            data = get_page(pgno)
            if data is None:
                continue
            try:
                page = parse_page(data, pgno, self.src.usable)
            except FormatError:
                continue
            if page.kind is PageKind.LEAF_TABLE:
                self.live_btree_pages.add(pgno)
                self.image = f"page {pgno}"
                for cell in self.leaf_cells(data, pgno, lo, hi, live=True) or []:
                    yield pgno, cell
            elif page.kind is PageKind.INTERIOR_TABLE:
                self.live_btree_pages.add(pgno)
                kids: list[tuple[int, int, int, int]] = []
                prev = lo
                for i in range(page.cell_count):
                    try:
                        c = page.cell(i)
                    except FormatError:
                        continue
                    if not isinstance(c, TableInteriorCell) or not prev <= c.key <= hi:
                        continue
                    kids.append((c.left_child, prev, c.key, depth + 1))
                    prev = c.key
                if page.right_child is not None:
                    kids.append((page.right_child, prev, hi, depth + 1))
                stack.extend(reversed(kids))


def _increasing(keys: list[int]) -> set[int]:
    """The positions of one longest strictly increasing subsequence of ``keys`` (patience
    sorting, O(n log n)): the cells of a leaf that still agree with each other on key order."""
    tails: list[int] = []  # smallest last key of an increasing run of each length
    at: list[int] = []  # the position of that last key
    back = [-1] * len(keys)
    for i, k in enumerate(keys):
        j = bisect.bisect_left(tails, k)
        if j == len(tails):
            tails.append(k)
            at.append(i)
        else:
            tails[j], at[j] = k, i
        back[i] = at[j - 1] if j else -1
    out: set[int] = set()
    i = at[-1] if at else -1
    while i >= 0:
        out.add(i)
        i = back[i]
    return out


def salvage_pages(
    db: Path | bytes,
    wal: WalScan | bytes | None,
    session_id: str,
    store: Scratch | None = None,
    *,
    rolled_back: bool = False,
    chain: chainrows.ChainEvidence | None = None,
) -> PageSalvage:
    """Run engine c over a database file (read page by page as needed; or its bytes) and
    (optionally) its WAL: a scan of it (:func:`~agentdb.fileformat.scan_wal`, whose pages are
    read as needed) or its bytes. The rows found go into ``store``, the job's scratch database
    (long values apart, :meth:`~agentdb.salvage.scratch.Scratch.keep`; by default one in memory).
    ``rolled_back``: the file is a hot journal's rollback, whose freelist pages are not read
    (SQLite does not journal a free page it reuses, so after the rollback such a page may still
    hold the killed transaction's uncommitted rows). ``chain``: where a revision-3 record's
    hashes go (default: new, in ``store``)."""
    scan = scan_wal(wal) if isinstance(wal, bytes) and wal else wal or None
    assert scan is None or isinstance(scan, WalScan)
    store = store or Scratch(None)
    if isinstance(db, bytes):
        return _salvage_pages(db, scan, session_id, store, rolled_back, chain)
    fd = os.open(db, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return _salvage_pages(FileBytes(fd), scan, session_id, store, rolled_back, chain)
    finally:
        os.close(fd)


def _salvage_pages(
    db: bytes | FileBytes,
    wal: WalScan | None,
    session_id: str,
    store: Scratch,
    rolled_back: bool,
    chain: chainrows.ChainEvidence | None = None,
) -> PageSalvage:
    out = PageSalvage(
        store.candidates(), store.hash_sets(), store.verified(), chain or store.chain_evidence()
    )
    keep = store.keep
    if wal is not None and wal.resumed_commits:
        out.notes.append(
            f"WAL: {len(wal.resumed_commits)} intact commits after a checksum break were read "
            "(SQLite itself ignores them)"
        )
    try:
        src = PageSource(db, wal, include_resumed=True)
    except FormatError as e:
        out.notes.append(f"page engine: {e}")
        return out
    out.page_size = src.page_size
    if src.header is None:
        out.notes.append(f"database header unreadable ({src.header_problem}); page size inferred")
    else:
        out.revision = src.header.user_version
    encoding = _schema_encoding(src, src.header.encoding if src.header else "utf-8", out, keep)
    r = _PageReader(src, encoding, session_id, out, keep)
    _walk_live(r)
    if rolled_back:
        out.notes.append(
            "free pages not read: a hot journal was rolled back, and a free page the killed "
            "transaction reused may still hold its uncommitted rows"
        )
    _scan_unreached(r, skip_free=rolled_back)
    _scan_older(r, wal)
    _doubtful(r)
    return out


def _walk_live(r: _PageReader) -> None:
    """Tier ``live``: walk each of our tables' b-trees from the root ``sqlite_schema`` names."""
    out, get = r.out, r.src.get_page
    roots = _schema_roots(r, get)
    out.schema_found = bool(roots)
    if not roots:
        out.notes.append("sqlite_schema unreadable: every table-leaf page was assigned by shape")
    chains: dict[tuple[str, int], list[int]] = {}
    for name in ("sqlite_sequence", *tables.TABLES, *chainrows.CHAIN_TABLES):
        root = roots.get(name)
        if root is None:
            continue
        for pgno, cell in r.walk(root, get):
            r.chain = []
            rec = r.record(cell, get)
            if r.chain and (rec is None or _shaped_as(rec, cell.rowid, name)):
                # a cell of another table's shape (a page swapped into this tree) is a copy
                # of that table's row: its chain is that row's, not a cross-link with it
                chains[(name, cell.rowid)] = r.chain
            if rec is not None:
                r.accept(rec, cell.rowid, LIVE, f"page {pgno}", want=name)
            elif r.failed and name in tables.TABLES:
                out.broken.setdefault(name, set()).add(cell.rowid)
            r.chain = None
    for pgno, cell, why in r.out_of_bounds:
        where = f"page {pgno} ({why})"
        r.image = where
        r.anomalous.add(where)  # no hash: doubtful, as any row of a page in the wrong place
        r.chain = []
        rec = r.record(cell, get)
        if rec is not None:
            r.accept(rec, cell.rowid, STRAY, where)
            got = tables.classify(rec, cell.rowid)
            if got is not None and got[0] in tables.TABLES:
                key = tables.key_of(got[0], tables.normalise(got[0], got[1]))
                out.misplaced.setdefault(got[0], set()).add(key)
        r.chain = None
    _cross_links(chains, out)
    for key, chain in chains.items():
        for pg in chain:
            r.chain_owner[pg] = key if r.chain_owner.get(pg, key) == key else None


def _shaped_as(rec: list[Any], rowid: int, table: str) -> bool:
    got = tables.classify(rec, rowid)
    return got is not None and got[0] == table


def _scan_unreached(r: _PageReader, *, skip_free: bool = False) -> None:
    """Free space of every table leaf; tiers ``stray`` (leaves no walk reached) and ``stale``
    (freelist pages); b-tree-typed pages that do not parse are listed as opaque."""
    src, out, get = r.src, r.out, r.src.get_page
    freelist: set[int] = set()
    if src.header is not None:
        freelist = iter_freelist(get, src.header, src.page_count)
    maybe_opaque: list[int] = []
    from_free: list[tuple[int, int]] = []  # id ranges of the candidates read from free pages
    for pgno in range(2, src.page_count + 1):
        data = get(pgno)
        if data is None:
            continue
        if data[:1] == b"\x0d":
            found = freespace.scan_page(data, pgno, src.usable, r.encoding, f"page {pgno}")
            out.free += freespace.classify_all(found)
        if pgno in r.live_btree_pages or (skip_free and pgno in freelist):
            continue
        before = out.candidates.last_id
        _scan_leaf(r, data, pgno, STALE if pgno in freelist else STRAY, f"page {pgno}", get)
        if pgno in freelist and out.candidates.last_id > before:
            from_free.append((before + 1, out.candidates.last_id))
        # Only a page that says it is a b-tree page can hold cells another engine could read
        # (SQLite's own recovery reads pages by the same type byte); the rest are overflow
        # pages of lost rows or noise.
        if pgno not in freelist and data[0] in (2, 5, 10, 13):
            maybe_opaque.append(pgno)
    if src.header is None or src.header.write_version != 2:
        _no_free_tail(out, from_free)
    lock_page = lock_byte_page(src.page_size)
    for pgno in maybe_opaque:
        if pgno in r.overflow_pages or pgno == lock_page:
            continue
        data = get(pgno)
        try:
            parse_page(data or b"", pgno, src.usable)
        except FormatError:
            out.opaque_pages.append(pgno)


def _no_free_tail(out: PageSalvage, from_free: list[tuple[int, int]]) -> None:
    """A file not in WAL mode may have had a hot journal rolled back before anyone saw it (any
    normal SQLite open does that, and deletes the journal). SQLite does not journal a free page
    a transaction reuses, so after the rollback that page still holds the killed transaction's
    uncommitted rows. Events are append-only: a free page's event past the last event read
    anywhere else is such a row as likely as a lost tail, and is not kept; below it, a free
    page's copy only fills a gap, as before."""
    cands = out.candidates
    free_events = [e for lo, hi in from_free for e in cands.keys_between("events", lo, hi)]
    if not free_events:
        return
    last = cands.highest_key("events", {i for i, _ in free_events}) or 0  # an event's key: seq
    beyond = {i for i, seq in free_events if seq > last}
    if not beyond:
        return
    cands.remove(beyond)
    out.rejected["event past the last one, on a free page"] += len(beyond)
    out.notes.append(
        f"{len(beyond)} events on free pages lie past the last event read elsewhere: not kept "
        "(the file is not in WAL mode, and a rolled-back transaction leaves its rows on the "
        "free pages it reused)"
    )


def _scan_older(r: _PageReader, wal: WalScan | None) -> None:
    """Tier ``stale``: the file's own page under a newer WAL copy, and superseded WAL frames."""
    src, get = r.src, r.src.get_page
    for pgno in sorted(src.overlay):
        data = src.file_page(pgno)
        if data is not None:
            _scan_leaf(r, data, pgno, STALE, f"file page {pgno} (older than the WAL)", get)
    if wal is None or wal.header is None:
        return
    newest: dict[int, int] = {}
    usable = [f for f in wal.frames if f.chain in (CHAIN_COMMITTED, CHAIN_RESUMED)]
    for f in usable:
        newest[f.pgno] = f.index
    for f in usable:
        if newest[f.pgno] != f.index:
            where = f"wal frame {f.index} (page {f.pgno}, older)"
            _scan_leaf(r, wal.frame_page(f), f.pgno, STALE, where, get)


def _cross_links(chains: dict[tuple[str, int], list[int]], out: PageSalvage) -> None:
    """Find live rows whose overflow chains share pages. A shared page belongs to the chain whose
    cell points at it, or in which it directly follows the chain's previous page (SQLite
    allocates a chain's pages in order); when exactly one chain fits, that row is kept as
    unverified, the others are not. When none fits, the layout names no owner: every row is
    kept, unverified (one of them holds its own bytes; dropping all would lose it)."""
    owners: dict[int, list[tuple[str, int]]] = {}
    for key, chain in chains.items():
        for pg in chain:
            owners.setdefault(pg, []).append(key)
    shared = {pg: keys for pg, keys in owners.items() if len(keys) > 1}
    if not shared:
        return
    judged: set[tuple[str, int]] = set()
    for pg, keys in sorted(shared.items()):
        fits = [k for k in keys if _follows(chains[k], pg)]
        for k in keys:
            if k in judged:
                continue
            judged.add(k)
            if (len(fits) == 1 and fits[0] == k) or not fits:
                out.crosslink_owner.setdefault(k[0], set()).add(k[1])
            else:
                out.crosslinked.setdefault(k[0], set()).add(k[1])
    n = len(judged)
    out.notes.append(f"page engine: {n} rows' overflow chains cross-link (share pages)")
    for table, rowids in out.crosslinked.items():
        out.rejected[f"{table}: overflow chain cross-links with another row's"] += len(rowids)


def _follows(chain: list[int], pg: int) -> bool:
    """``pg`` is the chain's own: its cell points at it (the first page), or it directly
    follows the chain's previous page."""
    i = chain.index(pg)
    return i == 0 or chain[i - 1] == pg - 1


def lock_byte_page(page_size: int) -> int:
    """The lock-byte page (at byte 2^30), which holds no data."""
    return (1 << 30) // page_size + 1


def _scan_leaf(r: _PageReader, data: bytes, pgno: int, tier: int, where: str, get: GetPage) -> None:
    if pgno == 1 or data[:1] != b"\x0d":
        return
    r.image = where
    for cell in r.leaf_cells(data, pgno) or []:
        r.chain = []
        rec = r.record(cell, get)
        if rec is not None:
            r.accept(rec, cell.rowid, tier, where)
        r.chain = None


def _doubtful(r: _PageReader) -> None:
    """Rows no hash vouches for, read from a page image on which something did not parse."""
    out = r.out
    for c in out.candidates.found_at(r.anomalous):
        if c.table == "events" and (out.verified.get(c.row[0]) or (None,))[0] == c.row:
            continue
        out.doubtful.setdefault(c.table, set()).add(tables.key_of(c.table, c.row))


def _schema_encoding(src: PageSource, header: str, out: PageSalvage, keep: Keep) -> str:
    """The text encoding the file's records are in: the header's, unless ``sqlite_schema``
    names none of our tables in it but does in another (a damaged encoding field: every text
    of the file would otherwise fail to decode, and nothing be salvaged)."""
    for encoding in (header, *(e for e in ("utf-8", "utf-16le", "utf-16be") if e != header)):
        trial = PageSalvage(out.candidates, out.event_hashes, out.verified, out.chain)
        roots = _schema_roots(_PageReader(src, encoding, "", trial, keep), src.get_page)
        if "events" in roots:
            if encoding != header:
                out.notes.append(
                    f"the header's text encoding ({header}) does not decode sqlite_schema; "
                    f"its records are read as {encoding}"
                )
            return encoding
    return header


def _schema_roots(r: _PageReader, get: GetPage) -> dict[str, int]:
    """Root pages of our tables and sqlite_sequence, from the sqlite_schema b-tree on page 1."""
    roots: dict[str, int] = {}
    wanted = {*tables.TABLES, *chainrows.CHAIN_TABLES, "sqlite_sequence"}
    for _pgno, cell in r.walk(1, get):
        rec = r.record(cell, get)
        if rec is None or len(rec) != 5:
            continue
        typ, name, _tbl, root, _sql = rec
        if typ == "table" and name in wanted and isinstance(root, int) and root > 1:
            roots.setdefault(str(name), root)
    return roots
