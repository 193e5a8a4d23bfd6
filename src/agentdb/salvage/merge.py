"""Merge what the engines found: one row per primary key, the most trustworthy copy first.

Precedence for every key (the first source that has it wins):

1. rows SQLite itself read (engine b), then rows reached by walking the live b-trees (engine c's
   ``live`` tier, which also sees intact WAL commits after a checksum break; for
   ``session_meta``, updated in place, that newest copy comes first);
2. rows from SQLite's own recovery extension (only when it is available), each re-validated;
3. engine c's ``stray`` leaves (orphaned subtrees), then ``stale`` copies (older page versions,
   freelist pages).

Tiers 2 and 3 only fill gaps. ``session_meta`` is updated in place, so a copy from tier 2 or 3 is
used only when no live copy survived, and the report says so.

Then what can be derived is derived: a producer seen in a salvaged event but whose ``producers``
row is lost gets one (first_seen_sequence = its earliest salvaged event; reported as derived).
A lost ``session_meta`` is rebuilt from what is known, by one documented rule: session_id from the
file name, profile ``"unknown"``, parent NULL, depth 0, status ``failed`` (terminal: a session whose
summary was lost must not be resumed as if nothing happened), started_at from the id's ULID time,
ended_at the newest salvaged event's timestamp (else started_at). The report says it was rebuilt.
Salvaged ``cost_ledger``, ``plan_items`` and ``producers`` rows whose event is lost stay: they are
history (money was spent).

Size: over 500 lines because it is one merge with one precedence rule per key across every
engine, and the identity tests that keep another session's rows out.
"""

from __future__ import annotations

import itertools
import pickle
from collections import Counter
from collections.abc import Iterator, MutableMapping
from typing import Any

from agentdb.hashing import chain_hash, event_hash, genesis, row_hash
from agentdb.paths import is_valid_id
from agentdb.salvage import freespace, tables
from agentdb.salvage.chainrows import HASHED, ChainEvidence
from agentdb.salvage.diskrows import DiskMap, HashSets, ordered
from agentdb.salvage.merged import (
    REBUILT_PROFILE,
    REBUILT_STATUS,
    Merged,
    ShellRows,
    count_lost,
    derive_producers,
    missing,
    ranges,
    rebuild_meta,
    rebuilt_meta,
    shell_rows,
)
from agentdb.salvage.merged import keys as merged_keys
from agentdb.salvage.pages import LIVE, STALE, STRAY, PageSalvage
from agentdb.salvage.rows import RowSalvage
from agentdb.salvage.scratch import Scratch
from agentdb.salvage.tables import Row
from agentdb.schema.chain import GapRecord
from agentdb.schema.revisions import REV3_BOUND

__all__ = [  # the merged result is defined in .merged; re-exported here, where it is made
    "REBUILT_PROFILE",
    "REBUILT_STATUS",
    "Merged",
    "ShellRows",
    "merge",
    "ranges",
    "rebuilt_meta",
]

# Sources whose copy is read through the live b-tree (or as SQLite reads it): when the page
# engine found that key's payload structurally broken, such a copy never wins.
_THROUGH_LIVE = ("rows", "live", "sqlite-recover")
_GAP_FILLERS = ("stray", "stale", "free-space", "sqlite-recover")


def merge(
    session_id: str,
    page: PageSalvage | None,
    rows: RowSalvage | None,
    shell: ShellRows | None,
    store: Scratch | None = None,
    torn: frozenset[int] | None = None,
    *,
    torn_witness: PageSalvage | None = None,
    chain: ChainEvidence | None = None,
    revision: int = 0,
) -> Merged:
    """One row per key from what the engines found, by the precedence in the module docstring.
    The merged rows of the AUTOINCREMENT tables go into ``store`` (default: one in memory).
    ``torn``: the file is the rollback of a hot journal that could not restore every page it
    promised; these pages (the ones it did restore) are the only ones known to hold committed
    content, and every other row no hash vouches for is unverified. ``torn_witness``: the page
    engine's walk that says which rows those pages hold (default ``page``; given apart when
    its rows are not merged, as when SQLite reads every table whole). ``revision``: the
    original's; at 3, only rows whose stored hashes ``chain`` holds are kept (see
    :meth:`_Merger.keep_chained`)."""
    m = _Merger(session_id, page, rows, store or Scratch(None))
    m.chain = chain
    m.revision = revision
    m.torn = torn
    m.torn_witness = torn_witness if torn_witness is not None else page
    m.take_engines(shell)
    return m.finish()


class _Merger:
    def __init__(
        self, session_id: str, page: PageSalvage | None, rows: RowSalvage | None, store: Scratch
    ):
        self.session_id = session_id
        self.page = page
        self.found = rows
        self.store = store
        self.rows: dict[str, MutableMapping[Any, Row]] = {
            t: store.map(f"merged_{t}") if t in tables.AUTOINCREMENT_TABLES else {}
            for t in tables.TABLES
        }
        self.sources: dict[str, Counter[str]] = {t: Counter() for t in tables.TABLES}
        self.notes: list[str] = []
        self.drop, self.suspect = _structural_suspects(page, rows)
        self.in_bounds = _in_bounds_copies(page)
        # events taken from a tier below the live b-tree (key -> True)
        self.gap_filled: MutableMapping[Any, bool] = store.map("gap_filled")
        self.dropped: dict[str, set[Any]] = {t: set() for t in tables.TABLES}
        # events a gap filler gave (.recover, free space) whose stored content hash matched
        self.gap_verified: dict[int, bytes] = {}
        self.shell_raw: dict[str, set[Any]] = {t: set() for t in tables.TABLES}  # no check
        # rows SQLite read that no page-engine copy confirms byte for byte (revision-1 rows:
        # nothing checked their overflow chain or their bytes on a damaged page)
        self.unconfirmed: dict[str, set[Any]] = {t: set() for t in tables.TABLES}
        self.live_meta = False
        self.torn: frozenset[int] | None = None  # see merge()
        self.torn_doubt: dict[str, set[Any]] = {}  # table -> keys a torn journal leaves in doubt
        self.torn_witness: PageSalvage | None = None  # see merge()
        self.chain: ChainEvidence | None = None  # see merge()
        self.revision = 0  # the original's revision (see merge())

    def vouched(self, table: str, key: Any, row: Row) -> bool:
        """A revision-2 event whose stored content hash matches these very bytes."""
        if table != "events":
            return False
        page, found = self.page, self.found
        if page is not None and (page.verified.get(key) or (None,))[0] == row:
            return True
        if found is not None and key in found.event_hashes and found.rows["events"].get(key) == row:
            return True
        return key in self.gap_verified

    def put(self, table: str, row: Row, source: str, vouched: bool | None = None) -> bool:
        """Keep ``row`` unless its key is taken or a structural rejection forbids this copy."""
        key = tables.key_of(table, row)
        if key in self.rows[table]:
            return False
        if (
            key in self.drop[table]
            and source in _THROUGH_LIVE
            and not (self.vouched(table, key, row) if vouched is None else vouched)
        ):
            # Read through the same damaged b-tree the page engine rejected: of the right
            # length and perhaps the wrong bytes. Only an older copy may fill the gap.
            self.dropped[table].add(key)
            return False
        if table == "session_meta" and self.rows[table] and source not in ("live", "rows"):
            return False
        if source in _THROUGH_LIVE and source != "live" and self.misplaced(table, key, row):
            return False  # the live tier gives this key's in-bounds copy
        self.rows[table][key] = row
        self.sources[table][source] += 1
        if table == "events" and source in _GAP_FILLERS:
            self.gap_filled[key] = True
        return True

    def misplaced(self, table: str, key: Any, row: Row) -> bool:
        """SQLite's copy of ``key`` came from a cell outside its leaf's key range (it differs
        from the cell the page engine found for that key where the key belongs)."""
        copy = self.in_bounds[table].get(key)
        return copy is not None and copy != row and not self.vouched(table, key, row)

    def take_read(self) -> None:
        """The rows SQLite read (engine b); with the page engine's view, each is confirmed by
        an identical copy the page engine decoded itself, or noted as unconfirmed."""
        if self.found is None:
            return
        for table, got in self.found.rows.items():
            dst = self.rows[table]
            if isinstance(got, DiskMap) and isinstance(dst, DiskMap) and not len(dst):
                self.take_read_all(table, got, dst)
                continue
            for key, row in ordered(got):
                if not self.put(table, row, "rows") or self.page is None:
                    continue
                if self.structural(table, key) != row and not self.vouched(table, key, row):
                    self.unconfirmed[table].add(key)

    def take_read_all(self, table: str, got: DiskMap, dst: DiskMap) -> None:
        """:meth:`take_read` for a table the merge holds nothing of yet, in one statement:
        only the keys the page engine rejected structurally are judged one by one."""
        barred = set()
        for key in self.drop[table]:
            row = got.get(key)
            if row is not None and not self.vouched(table, key, row):
                barred.add(key)  # what put() refuses
        self.dropped[table] |= barred
        for key in self.in_bounds[table]:
            row = got.get(key)
            if row is not None and self.misplaced(table, key, row):
                barred.add(key)  # put() refuses it too: the live tier gives the in-bounds copy
        n = dst.copy_from(got)
        for key in barred:
            del dst[key]
        if n > len(barred):
            self.sources[table]["rows"] += n - len(barred)
        if self.page is None:
            return
        for key, mine, theirs in self.page.candidates.beside(table, dst):
            if mine == theirs:  # the same pickle: the same row
                continue
            row = pickle.loads(mine)
            copy = None if theirs is None else pickle.loads(theirs)
            if copy != row and not self.vouched(table, key, row):
                self.unconfirmed[table].add(key)

    def take_engines(self, shell: ShellRows | None) -> None:
        page = self.page
        # session_meta is updated in place: the page engine's live copy also sees intact WAL
        # commits after a checksum break, so it is the newest; for append-only tables SQLite's
        # read leads.
        if page is not None:
            for c in page.candidates.of_table("session_meta"):
                if c.tier == LIVE:
                    self.put(c.table, c.row, "live")
        self.take_read()
        self.take_tier(LIVE, "live")
        self.live_meta = bool(self.rows["session_meta"])
        if shell is not None:
            self.take_shell(shell)
        self.take_tier(STRAY, "stray")
        self.take_tier(STALE, "stale")
        self.take_free_space()

    def take_tier(self, tier: int, name: str) -> None:
        """The page engine's rows of one tier, in the order found (a key already held is
        skipped in SQL: put() would refuse it)."""
        if self.page is None:
            return
        for table in tables.TABLES:
            dst = self.rows[table]
            if isinstance(dst, DiskMap) and isinstance(self.gap_filled, DiskMap):
                self.take_tier_all(table, tier, name, dst)
            else:
                self.take_tier_rows(table, tier, name)

    def take_tier_rows(self, table: str, tier: int, name: str) -> None:
        """:meth:`take_tier` for one table, row by row through put()."""
        assert self.page is not None
        dst = self.rows[table]
        if isinstance(dst, DiskMap):
            cands = self.page.candidates.not_in(table, tier, dst)
        else:
            cands = (c for c in self.page.candidates.of_table(table) if c.tier == tier)
        for c in cands:
            self.put(c.table, c.row, name)

    def take_tier_all(self, table: str, tier: int, name: str, dst: DiskMap) -> None:
        """:meth:`take_tier` for a table held in the scratch database, in SQL: the first
        candidate found of each key not held yet goes in (what put() keeps, in the same
        order); only the keys the page engine rejected structurally are judged one by one."""
        assert self.page is not None
        cands = self.page.candidates
        judged = self.drop[table] if name in _THROUGH_LIVE else set()
        for key in judged:
            for c in cands.of_key(table, tier, key):
                self.put(c.table, c.row, name)  # keys are independent: order among them is moot
        gap = self.gap_filled if table == "events" and name in _GAP_FILLERS else None
        assert gap is None or isinstance(gap, DiskMap)
        n = cands.copy_tier(table, tier, dst, judged, gap)
        if n:
            self.sources[table][name] += n

    def known_hashes(self, seq: int) -> set[bytes]:
        """Every stored content hash an engine saw for event ``seq`` (empty: none)."""
        hashes = self.page.event_hashes.get(seq) if self.page else set()
        if self.found:
            h = self.found.event_hashes.get(seq)
            if h is not None:
                hashes.add(h)
        return hashes

    def take_shell(self, shell: ShellRows) -> None:
        """Rows from SQLite's recovery extension, re-validated; they only fill gaps. An event
        another engine saw a stored hash for must match it."""
        rejected = 0
        for table, found_rows in shell.rows.items():
            if table not in self.rows:
                continue
            for raw, pre in self.shell_events(shell) if table == "events" else _plain(found_rows):
                row = tables.normalise(table, raw)
                why = tables.problem(table, row, self.session_id)
                h = None
                if why is None and table == "events":
                    h = (shell.hashes.get(row[0]) if pre is None else pre[0]) or event_hash(*row)
                known: set[bytes] = set()
                if h is not None:
                    known = self.known_hashes(row[0]) if pre is None else pre[1]
                if h is not None and known and h not in known:
                    why = "content_hash does not match"
                if why is not None:
                    rejected += 1
                    continue
                if pre is not None and pre[2]:
                    continue  # its key is held: put() would refuse it
                key = tables.key_of(table, row)
                vouched = h is not None and (bool(known) or row[0] in shell.hashed)
                if not self.put(table, row, "sqlite-recover", vouched):
                    continue
                if h is not None and vouched:
                    self.gap_verified[key] = h
                elif row != self.structural(table, key):
                    self.shell_raw[table].add(key)
        if rejected:
            self.notes.append(f"{rejected} rows from SQLite's recovery extension failed validation")

    def shell_events(self, shell: ShellRows) -> Iterator[tuple[Row, _Known | None]]:
        """``.recover``'s events in key order, each with (its content hash, the stored hashes
        the other engines saw for its sequence, whether the merge holds that key already),
        read in one pass over the scratch database; None instead when the rows are not all
        held there (each is then looked up on its own)."""
        got, mine, done = shell.rows["events"], shell.hashes, self.rows["events"]
        pages = self.page.event_hashes if self.page is not None else None
        read = self.found.event_hashes if self.found is not None else None
        maps = (got, mine, done, *([read] if read is not None else []))
        if not all(isinstance(m, DiskMap) for m in maps) or (
            pages is not None and not isinstance(pages, HashSets)
        ):
            return _plain(got)
        return _joined(got, mine, done, pages, read)  # type: ignore[arg-type]

    def structural(self, table: str, key: Any) -> Row | None:
        """The row the page engine decoded itself for (table, key): its first copy found."""
        return self.page.candidates.first(table, key) if self.page else None

    def take_free_space(self) -> None:
        """Lowest tier: stale records in free space inside pages; they only fill gaps."""
        page = self.page
        if page is None or not page.free:
            return
        events = self.rows["events"]
        counter = page.sequences.get("events", 0)
        for table, row, h in freespace.iter_rows(
            page.free,
            self.session_id,
            lambda: missing(events, counter, freespace.MAX_GUESSES),
            self.chain,
            self.revision,
        ):
            if self.put(table, row, "free-space") and h is not None:
                self.gap_verified[row[0]] = h  # its hash vouches for it, as for any tier

    def finish(self) -> Merged:
        self.note_meta_source()
        result = Merged(self.rows, self.sources, self.sequences(), notes=self.notes)
        self.mark_unverified(result)
        self.keep_hashes(result)
        if self.revision >= 3:
            self.keep_chained(result)
        derive_producers(result)
        if not self.rows["session_meta"] and result.count():
            rebuild_meta(result, self.session_id)
        count_lost(result, self.torn_doubt if self.torn is not None else None)
        return result

    def note_meta_source(self) -> None:
        if not self.rows["session_meta"] or self.live_meta:
            return
        if self.sources["session_meta"].keys() & {"stale", "free-space"}:
            self.notes.append(
                "session_meta: no live copy survived; an older copy was used, so its status "
                "may be out of date"
            )
        else:
            src = next(iter(self.sources["session_meta"]))
            self.notes.append(f"session_meta: its b-tree was unreachable; found by {src}")

    def sequences(self) -> dict[str, int]:
        out: dict[str, int] = {}
        page, found = self.page, self.found
        for seen in (page.sequences if page else {}, found.sequences if found else {}):
            for name, seq in seen.items():
                if name in tables.AUTOINCREMENT_TABLES:
                    out[name] = max(seq, out.get(name, 0))
        return out

    def mark_unverified(self, result: Merged) -> None:
        doubtful = self.page.doubtful if self.page is not None else {}
        why = {  # each reason a kept row is unverified, and the note that says so
            "crossed": "their overflow chain shares pages with another row's; the layout says "
            "they own those pages, no hash can confirm it",
            "damaged": "read from a page on which other cells did not parse or validate (the "
            "damage may have rewritten their bytes too)",
            "unconfirmed": "SQLite read them, the page engine found no identical copy",
            "shell": "only SQLite's recovery extension read them (their overflow chains "
            "unchecked) and no content hash vouches for them",
            "torn": "the hot journal is cut short or torn, could not be applied, or its "
            "rollback does not read whole, so no rollback restored every page the killed "
            "transaction wrote: they may be its uncommitted writes",
        }
        counts = dict.fromkeys(why, 0)
        for table in tables.TABLES:
            got = self.rows[table]
            groups = {
                "crossed": self.suspect[table],
                "damaged": doubtful.get(table, set()),
                "unconfirmed": self.unconfirmed[table],
                "shell": self.shell_raw[table],
                "torn": self.torn_doubt.setdefault(table, self.torn_suspects(table)),
            }
            kept: set[Any] = set()
            for name, keys in groups.items():
                new = {k for k in keys - kept if k in got and not self.vouched(table, k, got[k])}
                counts[name] += len(new)
                kept |= new
            if kept:
                result.unverified[table] = kept
            gone = {k for k in self.dropped[table] if k not in got}
            if gone:
                self.notes.append(
                    f"{table}: {len(gone)} rows dropped: SQLite reads them through an overflow "
                    "chain the page engine found broken or cross-linked (right length, wrong "
                    "bytes)"
                )
        for name, n in counts.items():
            if n:
                self.notes.append(f"{n} rows kept unverified: {why[name]}")

    def torn_suspects(self, table: str) -> set[Any]:
        """After a torn hot journal's rollback: every key of ``table`` kept but not read, as
        kept, from a page the journal restored (leaf and overflow chain), the pages known to
        hold committed content. Empty when the journal was whole."""
        if self.torn is None:
            return set()
        got = self.rows[table]
        committed: set[Any] = set()
        witness = self.torn_witness
        if witness is not None and self.torn:
            places = {f"page {p}" for p in self.torn}
            for c in witness.candidates.found_at(places):
                if c.table != table or not set(c.chain) <= self.torn:
                    continue
                key = tables.key_of(table, c.row)
                if got.get(key) == c.row:
                    committed.add(key)
        return {k for k in got if k not in committed}

    def keep_hashes(self, result: Merged) -> None:
        page, found = self.page, self.found
        result.hashes = self.store.map("merged_hashes")
        events = self.rows["events"]
        assert isinstance(events, DiskMap)
        for seq, mine, theirs, h in _beside_verified(events, page):
            row: Row | None = None
            if h is not None and theirs is not None and theirs != mine:
                row = pickle.loads(mine)
                if pickle.loads(theirs) != row:
                    h = None  # another copy was verified, not this one
            if h is not None:
                result.hashes.put_raw(seq, pickle.dumps(bytes(h), pickle.HIGHEST_PROTOCOL))
                continue
            row = pickle.loads(mine) if row is None else row
            if (
                found is not None
                and seq in found.event_hashes
                and found.rows["events"].get(seq) == row
            ):
                result.hashes[seq] = found.event_hashes[seq]
            elif seq in self.gap_verified:
                result.hashes[seq] = self.gap_verified[seq]
        if page is not None and (page.revision or 0) >= 2:
            # A revision-2 file: an event from a lower tier with no content hash to vouch for
            # it (a revision-1 record left in free space by the migration, say) is unverified.
            loose = {k for k in self.gap_filled if k not in result.hashes}
            if loose:
                result.unverified.setdefault("events", set()).update(loose)
                self.notes.append(
                    f"events: {len(loose)} rows from older copies carry no content hash "
                    "(written before the file was migrated): kept, unverified"
                )

    def keep_chained(self, result: Merged) -> None:
        """A revision-3 original (design §6): a salvaged row keeps its stored hashes, so only
        a row some engine read with its stored hash matching may stay — an event with its
        verified content_hash and a stored (prev_hash, chain_hash), a derived row whose own
        content_hash held. The others (a copy from before the file was migrated, an event
        only SQLite's recovery extension read, whose chain fields it does not keep) are
        dropped: each becomes part of a gap the replacement records."""
        chain = self.chain
        dropped: dict[str, list[Any]] = {}
        events = result.rows["events"]
        for seq in list(events):
            h = result.hashes.get(seq)
            if chain is None or h is None or not chain.has_link(seq, h):
                dropped.setdefault("events", []).append(seq)
        for table in HASHED:
            got = result.rows[table]
            for key, row in ordered(got):
                if chain is None or not chain.vouched(table, self.store.resolve(row)):
                    dropped.setdefault(table, []).append(key)
        for table, keys in dropped.items():
            self._remove(result, table, keys)
            self.notes.append(
                f"{table}: {len(keys)} rows dropped: no stored hash of theirs holds (revision "
                "3 keeps a salvaged row's own hashes; each is part of a gap the replacement "
                "records)"
            )
        self.drop_foreign(result)

    def drop_foreign_meta(self, result: Merged) -> None:
        """The events link from this session's genesis: a ``session_meta`` row naming another
        valid session id is a page of another session's file (never this file's identity),
        dropped; the row is then rebuilt from the file name."""
        got = result.rows["session_meta"]
        keys = [
            k
            for k, row in got.items()
            if isinstance(row[0], str) and row[0] != self.session_id and is_valid_id(row[0])
        ]
        if keys:
            self._remove(result, "session_meta", keys)
            result.foreign_ignored["session_meta"] = len(keys)
            self.notes.append(
                "session_meta: the row names another session while the event chain starts at "
                "this session's genesis: another session's row, not kept"
            )

    def _remove(self, result: Merged, table: str, keys: list[Any]) -> None:
        got = result.rows[table]
        for key in keys:
            del got[key]
            if table == "events":
                result.hashes.pop(key, None)
        result.unverified.get(table, set()).difference_update(keys)
        _uncount(result.sources[table], len(keys))

    def drop_foreign(self, result: Merged) -> None:
        """Events of another session (a page of another session's file copied over one of
        this file's, docs/recover.md "Another session's rows"), told from the chain: this
        session's events are the run linked forward from its genesis (its id) and the run
        linked back from its head; a run of events linked among themselves that neither
        reaches is another session's when an anchored neighbour refutes it on each side it
        has one — the event before names another chain hash than its first's prev_hash, the
        event after (or the head) another prev_hash than its last's chain hash, and the run's
        own content and rows do not give the missing link either (that would be its own
        damaged chain field). Such events are dropped and
        counted (``foreign_ignored``); this session's events at those sequences are lost.
        Then the derived rows of another session (:func:`_foreign_derived`)."""
        chain = self.chain
        events = result.rows["events"]
        if chain is None or not events:
            return
        pairs: dict[int, list[tuple[bytes, bytes]]] = {}
        for seq in merged_keys(events):
            h = result.hashes.get(seq)
            if type(seq) is int and h is not None:
                pairs[seq] = chain.links(seq, h)
        head = chain.head()
        bound = _bound_rows(result, pairs, None, self.store.resolve, {})
        anchors = _Anchors(pairs, genesis(self.session_id), head, chain.gap_rows())
        anchors.attest(
            lambda seq: result.hashes.get(seq), lambda seq: _hashes(bound.get(seq, [[], [], []]))
        )
        if anchors.fwd:
            self.drop_foreign_meta(result)
        foreign = anchors.foreign_runs()
        if foreign:
            self._remove(result, "events", foreign)
            result.foreign_ignored["events"] = len(foreign)
            self.notes.append(
                f"{len(foreign)} events of another session ignored (sequences {foreign[0]}.."
                f"{foreign[-1]}): their chain links to neither this session's genesis nor its "
                "head and its neighbours refute them; this session's events there are lost"
            )
        derived = _foreign_derived(result, pairs, anchors.limit(), self.store.resolve)
        for table, keys in derived.items():
            self._remove(result, table, keys)
            result.foreign_ignored[table] = len(keys)
            self.notes.append(
                f"{len(keys)} {table} rows of another session ignored: the chain of the event "
                "each names does not bind them (another subset of its rows fits it, the event "
                "is of another kind than such a row names, or it is past this session's head)"
            )


Pairs = dict[int, list[tuple[bytes, bytes]]]  # event sequence -> its stored (prev, chain) pairs


class _Anchors:
    """Which events link to this session's chain (see :meth:`_Merger.drop_foreign`)."""

    def __init__(self, pairs: Pairs, genesis_hash: bytes, head: Any, gaps: list[Any]) -> None:
        self.pairs = pairs
        self.seqs = sorted(pairs)
        self.head_seq = head.sequence if head is not None else None
        self.head_hash = head.hash if head is not None else None
        if type(self.head_seq) is not int or type(self.head_hash) is not bytes:
            self.head_seq = self.head_hash = None
        self.genesis = genesis_hash
        self.fwd: dict[int, bytes] = {}  # seq -> its chain hash, linked from the genesis
        expected, last = genesis_hash, None
        for seq in self.seqs:
            got = [c for p, c in pairs[seq] if p == expected]
            if (last is not None and seq != last + 1) or not got:
                break
            self.fwd[seq] = expected = got[0]
            last = seq
        self.bwd: dict[int, bytes] = {}  # seq -> its prev_hash, linked back from the head
        want, at = self.head_hash, self.head_seq
        while want is not None and at is not None and at in pairs:
            back = [p for p, c in pairs[at] if c == want]
            if not back:
                break
            self.bwd[at] = want = back[0]
            at -= 1
        # a break an earlier recovery recorded (a carried chain_gaps row) refutes nothing
        self._content: Any = None
        self._derived: Any = None
        self.recorded = [
            (g.gap.from_seq - 1, g.gap.to_seq + 1)
            for g in map(GapRecord.from_row, gaps)
            if g.gap is not None
        ]

    def attest(self, content: Any, derived: Any) -> None:
        """How to recompute an event's chain hash from a stored prev_hash (its content hash
        and bound rows, by sequence): a neighbour's link that the event's own content and
        rows give is its damaged chain field, not another session's event."""
        self._content, self._derived = content, derived

    def _gives(self, seq: int, prev: bytes, link: bytes) -> bool:
        content = self._content(seq) if self._content is not None else None
        if content is None:
            return False
        return chain_hash(prev, content, self._derived(seq)) == link

    def left_links(self, a: int, long: set[int]) -> set[bytes]:
        """The chain hash the event before ``a`` has, when it is anchored: linked from the
        genesis, or in a run of :data:`_MAJORITY` weight (``long``)."""
        if a - 1 in self.fwd:
            return {self.fwd[a - 1]}
        return {c for _, c in self.pairs[a - 1]} if a - 1 in long else set()

    def right_links(self, b: int, long: set[int]) -> set[bytes]:
        """The prev_hash the event after ``b`` names (or the head's hash, ``b`` being the
        head's), when it is anchored (see :meth:`left_links`)."""
        if b + 1 in self.bwd:
            return {self.bwd[b + 1]}
        if b == self.head_seq and self.head_hash is not None:
            return {self.head_hash}
        return {p for p, _ in self.pairs[b + 1]} if b + 1 in long else set()

    def refuted_left(self, a: int, links: set[bytes]) -> bool:
        """``a`` does not link from its anchored neighbour's chain hash, nor would with its
        own content and rows."""
        if self.explained(a):
            return False
        return not any(self._gives(a, link, c) for link in links for _, c in self.pairs[a])

    def refuted_right(self, b: int, links: set[bytes]) -> bool:
        """``b``'s chain hash is not the prev_hash its anchored neighbour names, nor would
        ``b``'s own content and rows give it."""
        if self.explained(b):
            return False
        return not any(self._gives(b, p, want) for want in links for p, _ in self.pairs[b])

    def explained(self, seq: int) -> bool:
        return any(lo <= seq <= hi for lo, hi in self.recorded)

    def limit(self) -> int | None:
        """The last sequence this session may hold: the head's, or the last event linked from
        the genesis past it; None without a proven head."""
        if self.head_seq is None:
            return None
        return max(self.head_seq, *self.fwd) if self.fwd else self.head_seq

    def runs(self) -> list[list[int]]:
        """The unanchored events, in runs of consecutive sequences linked among themselves."""
        runs: list[list[int]] = []
        for seq in self.seqs:
            if seq in self.fwd or seq in self.bwd:
                continue
            run = runs[-1] if runs else None
            linked = run is not None and run[-1] == seq - 1
            if linked and {c for _, c in self.pairs[seq - 1]} & {p for p, _ in self.pairs[seq]}:
                assert run is not None
                run.append(seq)
            else:
                runs.append([seq])
        return runs

    def foreign_runs(self) -> list[int]:
        """The events of the runs their anchored neighbours refute."""
        foreign: list[int] = []
        head_seq = self.head_seq
        runs = self.runs()
        for run in runs:
            a, b = run[0], run[-1]
            # a run of this session cut off from both anchors (events lost next to the head,
            # say) still outweighs a short one beside it: the majority of the content
            weight = max(_MAJORITY, _MAJORITY_FACTOR * len(run))
            long = {s for r in runs if r is not run and len(r) >= weight for s in (r[0], r[-1])}
            lefts, rights = self.left_links(a, long), self.right_links(b, long)
            has_left, has_right = bool(lefts), bool(rights)
            left = has_left and self.refuted_left(a, lefts)
            right = has_right and self.refuted_right(b, rights)
            if a == 1 and not self.explained(a):
                # the first event links from the genesis: the session's id is its neighbour
                has_left = True
                left = not any(self._gives(a, self.genesis, c) for _, c in self.pairs[a])
            if head_seq is not None and a > head_seq and not self.explained(a):
                # past the head, which the writer moves in each append's own transaction:
                # this session's next event would link from the head's hash
                linked = any(p == self.head_hash for p, _ in self.pairs[a])
                has_left = has_right = left = right = a > head_seq + 1 or not linked
            if (has_left or has_right) and left == has_left and right == has_right:
                foreign.extend(run)
        return foreign


# A run of unanchored events at least this long, and this many times longer than a run beside
# it, refutes that run as an anchored neighbour would (_Anchors.foreign_runs).
_MAJORITY, _MAJORITY_FACTOR = 8, 4

Bound = list[list[tuple[str, Any, bytes]]]  # per REV3_BOUND table: (table, key, row hash)


def _bound_rows(
    result: Merged, pairs: Pairs, limit: int | None, resolve: Any, out: dict[str, list[Any]]
) -> dict[int, Bound]:
    """The derived rows naming each kept event; rows naming an event past ``limit`` go to
    ``out`` (another session's: this session's writer appends a row with its event)."""
    bound: dict[int, Bound] = {}
    for i, (table, _key) in enumerate(REV3_BOUND):
        for key, row in ordered(result.rows[table]):
            full = resolve(row)
            seq = full[3] if table == "producers" else full[1]
            if type(seq) is not int:
                continue
            past = limit is not None and seq > limit and seq not in result.hashes
            if table != "producers" and past:
                out.setdefault(table, []).append(key)
                continue
            if seq in pairs and seq in result.hashes:
                lists = bound.setdefault(seq, [[], [], []])
                lists[i].append((table, key, row_hash(table, full)))
    return bound


def _fitting(lists: Bound, content: bytes, pairs: list[tuple[bytes, bytes]]) -> list[Any] | None:
    """The largest subset of an event's ledger and plan rows its stored chain hash binds
    (with its producers), or None when no subset of at most 6 rows fits."""
    doubtful = lists[0] + lists[1]
    if len(doubtful) > 6:
        return None
    for n in range(len(doubtful), -1, -1):
        for keep in itertools.combinations(doubtful, n):
            trial = [[r for r in lists[0] if r in keep], [r for r in lists[1] if r in keep]]
            hashes = _hashes([*trial, lists[2]])
            if any(chain_hash(p, content, hashes) == c for p, c in pairs):
                return list(keep)
    return None


def _foreign_derived(
    result: Merged, pairs: Pairs, limit: int | None, resolve: Any
) -> dict[str, list[Any]]:
    """``cost_ledger`` and ``plan_items`` rows of another session: each names a kept event
    whose stored chain hash binds the content hashes of its derived rows. A row is another
    session's when the event's chain recomputes from a subset of its rows without it, or,
    when no subset fits (a row of this session's lost beside it), when the event is not of
    the kind such a row names (a ledger row names a message, a plan item a plan: this
    session's writer binds no other); and a row naming an event past ``limit`` (the proven
    head's sequence, or the last event linked from the genesis past it). A row naming a
    lost event below it proves nothing."""
    out: dict[str, list[Any]] = {}
    events = result.rows["events"]
    for seq, lists in _bound_rows(result, pairs, limit, resolve, out).items():
        content = result.hashes[seq]
        fits = _fitting(lists, content, pairs[seq])
        doubtful = lists[0] + lists[1]
        if fits is not None:
            out_of = [r for r in doubtful if r not in fits]
        else:
            event = events.get(seq)
            kind = resolve(event)[3] if event is not None else None
            out_of = [r for r in doubtful if kind != _NAMED_KIND[r[0]]]
        for table, key, _h in out_of:
            out.setdefault(table, []).append(key)
    return out


# The kind of event a derived row names (checks: ledger_not_message, plan_item_not_plan).
_NAMED_KIND = {"cost_ledger": "message", "plan_items": "plan"}


def _hashes(lists: list[list[tuple[str, Any, bytes]]]) -> list[list[bytes]]:
    return [sorted(h for _, _, h in rows) for rows in lists]


def _uncount(sources: Counter[str], n: int) -> None:
    """Take ``n`` dropped rows off the sources' counts, lowest tier first (the tiers such a
    row comes from: SQLite's recovery extension, free space, older copies)."""
    for name in ("sqlite-recover", "free-space", "stale", "stray", "live", "rows"):
        take = min(n, sources[name])
        if take:
            sources[name] -= take
            n -= take
        if name in sources and sources[name] <= 0:
            del sources[name]
        if not n:
            return


_Known = tuple[bytes | None, set[bytes], bool]


def _plain(found_rows: Any) -> Iterator[tuple[Row, _Known | None]]:
    return ((row, None) for row in shell_rows(found_rows))


def _joined(
    got: DiskMap, mine: DiskMap, done: DiskMap, pages: HashSets | None, read: DiskMap | None
) -> Iterator[tuple[Row, _Known | None]]:
    """See :meth:`_Merger.shell_events`. The merge only adds keys this scan has passed (each
    key once), so what the scan reads of ``done`` for the key in hand is current."""
    for m in (got, mine, done, read):
        if m is not None:
            m.flush()
    if pages is not None:
        pages.flush()
    seen = (
        f"(SELECT group_concat(hex(p.h)) FROM {pages.name} p WHERE p.k = s.k)" if pages else "NULL"
    )
    other = f"(SELECT r.v FROM {read.name} r WHERE r.k = s.k)" if read else "NULL"
    sql = (
        f"SELECT s.v, (SELECT h.v FROM {mine.name} h WHERE h.k = s.k), {seen}, {other}, "
        f"EXISTS (SELECT 1 FROM {done.name} d WHERE d.k = s.k) FROM {got.name} s ORDER BY s.k"
    )
    for v, h, hexes, theirs, held in got.conn.execute(sql):
        known = {bytes.fromhex(x) for x in hexes.split(",")} if hexes is not None else set()
        if theirs is not None:
            known.add(pickle.loads(theirs))
        yield pickle.loads(v), (None if h is None else pickle.loads(h), known, bool(held))


def _beside_verified(
    events: DiskMap, page: PageSalvage | None
) -> Iterator[tuple[int, bytes, bytes | None, bytes | None]]:
    """(sequence, pickled row, the page engine's verified copy and its hash, or None, None)."""
    if page is None:
        for k, v, _ in events.raw():
            yield k, v, None, None
    else:
        yield from page.verified.beside(events)


def _in_bounds_copies(page: PageSalvage | None) -> dict[str, dict[Any, Row]]:
    """table -> key -> the live, in-bounds copy the page engine decoded, for every key it also
    found in a cell outside its leaf's key range."""
    out: dict[str, dict[Any, Row]] = {t: {} for t in tables.TABLES}
    if page is None:
        return out
    for table, keys in page.misplaced.items():
        for key in keys:
            live = page.candidates.of_key(table, LIVE, key)
            if live:
                out[table][key] = live[0].row
    return out


def _structural_suspects(
    page: PageSalvage | None, rows: RowSalvage | None
) -> tuple[dict[str, set[Any]], dict[str, set[Any]]]:
    """(keys no live read may supply, keys kept but unverified) from the page engine's
    structural rejections of live cells, translated from rowids to each table's key."""
    drop: dict[str, set[Any]] = {t: set() for t in tables.TABLES}
    unverified: dict[str, set[Any]] = {t: set() for t in tables.TABLES}
    if page is None:
        return drop, unverified
    for table in tables.TABLES:
        mapping = rows.rowid_keys.get(table, {}) if rows is not None else {}
        if table in tables.AUTOINCREMENT_TABLES:
            to_key: dict[Any, Any] | None = None  # the key is the rowid
        else:
            to_key = {
                c.rowid: tables.key_of(table, c.row)
                for c in page.candidates.of_table(table)
                if c.tier == LIVE
            }
            to_key.update(mapping)
        for rowid in page.broken.get(table, set()) | page.crosslinked.get(table, set()):
            k = rowid if to_key is None else to_key.get(rowid)
            if k is not None:
                drop[table].add(k)
        for rowid in page.crosslink_owner.get(table, set()):
            k = rowid if to_key is None else to_key.get(rowid)
            if k is not None:
                unverified[table].add(k)
    return drop, unverified
