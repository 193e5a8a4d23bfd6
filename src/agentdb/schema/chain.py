"""The chain walk of revision 3 (docs/design/damage-evident-revision.md §4-§7, §11): pure.

Below checks, salvage and store, so all three judge a chain by one rule; it imports no layer
above ``schema``. Rows come in as stored (TEXT as its bytes, a bit per TEXT value in a mask),
so a walk never decodes untrusted text and never raises on a damaged value.

* :class:`ChainWalk` is fed events in ``sequence`` order, each with the derived rows bound to
  it (:func:`merge_bound` pairs them, streaming), and rows bound to no event; ``finish`` compares
  what it saw with the head and the gap records and returns a :class:`ChainReport`.
* :func:`quick_report` is the O(1) part of ``check --quick``: the head against the last event
  and the row counts.
* Recovery: :func:`gaps_to_record` (the breaks a replacement must record), :func:`rebuild_head`
  (the head computed from a walk, never copied). ``schema/chainio.py`` reads a file into these
  and writes gap rows and the head.

The rules, in short. A row is proven when its own hash recomputes. An event's ``chain_hash``
recomputes from its *stored* ``prev_hash``, ``content_hash`` and bound rows' stored hashes. A
link holds when ``prev_hash`` is the previous event's ``chain_hash`` and the sequences are
consecutive. A break (:class:`Gap`) that exactly matches a proven ``chain_gaps`` row is
recorded (informational); any other break is a problem. A ``tail`` break is matched on its range
only (A19); every other kind on its range and expected hash.

Size: over 500 lines because it is one pure walk of revision 3's chain; its rules (links, gaps,
heads, counts) are one proof and read each other's state.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentdb.hashing import (
    HASH_SIZE,
    chain_hash,
    event_hash_raw,
    gaps_hash,
    genesis,
    row_hash,
    row_hash_raw,
)
from agentdb.schema.revisions import REV3_BOUND, REV3_HASHED

GAP_KINDS = ("events", "tail", "rows", "link", "meta")
DERIVED: tuple[str, ...] = tuple(t for t, _ in REV3_BOUND)  # cost_ledger, plan_items, producers
COUNTED: tuple[str, ...] = ("events", *DERIVED)  # the tables whose counts the head holds
# Caps on what a walk keeps from untrusted rows (a hostile file cannot make it hold more).
MAX_LISTED = 100  # row failures, breaks, unbound rows: the first ones are listed, all counted
MAX_BOUND = 100_000  # derived rows bound to one event; past it the event's chain is not computed
MAX_GAP_RECORDS = 10_000  # chain_gaps rows read; more is itself a problem (gap_records_excess)

_HEAD = REV3_HASHED["session_chain"]
_GAP = REV3_HASHED["chain_gaps"]
_I = {name: i for i, name in enumerate(_HEAD)}
_ORIGINS = (b"created", b"migrated", b"recovered")  # session_chain.origin, as stored (bytes)


def _is_hash(v: object) -> bool:
    return type(v) is bytes and len(v) == HASH_SIZE


def _int(v: object) -> int | None:
    return v if type(v) is int else None


def _text(v: object) -> str:
    if type(v) is bytes:
        return v.decode("utf-8", "backslashreplace")
    return str(v)


def as_stored(values: Iterable[Any]) -> tuple[int, tuple[Any, ...]]:
    """(text mask, values with ``str`` as its UTF-8 bytes): how a row read from SQL arrives,
    for callers that hold Python values (a salvage engine, a test)."""
    mask, out = 0, []
    for i, v in enumerate(values):
        if type(v) is str:
            mask |= 1 << i
            v = v.encode("utf-8", "surrogatepass")
        out.append(v)
    return mask, tuple(out)


# ----------------------------------------------------------------------------------- rows


@dataclass(frozen=True, slots=True)
class Row:
    """One row as stored: ``values`` are the hashed columns in declared order, TEXT as bytes
    (bit i of ``mask``: value i is TEXT); ``content_hash`` as stored (any type)."""

    table: str
    mask: int
    values: tuple[Any, ...]
    content_hash: Any
    prev_hash: Any = None  # events only
    chain_hash: Any = None  # events only

    @property
    def proven(self) -> bool:
        """Its own hash recomputes from its values."""
        if not _is_hash(self.content_hash):
            return False
        if self.table == "events":
            return event_hash_raw(self.mask, *self.values) == self.content_hash
        return row_hash_raw(self.table, self.mask, *self.values) == self.content_hash

    @property
    def key(self) -> object:
        """What names the row in a report: its sequence, a producer's (category, name,
        version), the session id, the head's id."""
        if self.table == "producers":
            return tuple(_text(v) for v in self.values[:3])
        if self.table == "session_meta":
            return _text(self.values[0])
        return self.values[0]

    @property
    def bound_to(self) -> int | None:
        """The event sequence a derived row is bound to (None: not an integer)."""
        return _int(self.values[3] if self.table == "producers" else self.values[1])


@dataclass(frozen=True, slots=True)
class Gap:
    """One break in the chain: found by a walk, or held by a ``chain_gaps`` row (design §6)."""

    kind: str  # events, tail, rows, link or meta
    from_seq: int  # first sequence of the break (0 for meta)
    to_seq: int  # last sequence of the break
    expected_hash: bytes | None  # the hash the lost part had (see §6's table), None: unknown

    def explains(self, found: Gap) -> bool:
        """This record explains ``found``: same kind and range, and for every kind but
        ``tail`` (A19) the same expected hash."""
        return (
            self.kind == found.kind
            and self.from_seq == found.from_seq
            and self.to_seq == found.to_seq
            and (self.kind == "tail" or self.expected_hash == found.expected_hash)
        )

    def covers(self, sequence: int) -> bool:
        """A row bound to ``sequence`` may be an orphan of this record's lost events."""
        return self.kind in ("events", "tail") and self.from_seq <= sequence <= self.to_seq


@dataclass(frozen=True, slots=True)
class GapRecord:
    """One ``chain_gaps`` row."""

    row: Row  # as stored
    gap: Gap | None  # None when its columns are not a gap (wrong types or kind)
    proven: bool  # its own hash holds (an unproven record explains nothing)

    @classmethod
    def from_row(cls, row: Row) -> GapRecord:
        _seq, kind, lo, hi, expected, _at = row.values
        kind_s = kind.decode("utf-8", "replace") if type(kind) is bytes else None
        ok = (
            kind_s in GAP_KINDS
            and type(lo) is int
            and type(hi) is int
            and lo <= hi  # no writer records an empty or inverted range
            and (expected is None or _is_hash(expected))
        )
        gap = Gap(str(kind_s), int(lo), int(hi), expected) if ok else None
        return cls(row, gap, row.proven and gap is not None)


@dataclass(frozen=True, slots=True)
class Head:
    """The ``session_chain`` row (design §5), as stored."""

    row: Row

    def __getitem__(self, column: str) -> Any:
        return self.row.values[_I[column]]

    @property
    def valid(self) -> bool:
        """Its values are a head the revision allows (the DDL's CHECKs, which a file written
        with ``ignore_check_constraints`` or by another tool may break): id 1 — the row the
        writer reads and rewrites —, an ``origin`` of the enum, an integer origin_revision."""
        rev = self["origin_revision"]
        return (
            type(self["id"]) is int
            and self["id"] == 1
            and self["origin"] in _ORIGINS
            and type(rev) is int
            and rev >= 1
        )

    @property
    def proven(self) -> bool:
        """Its own hash holds and it is :attr:`valid`: a head whose values the revision forbids
        proves nothing, whatever its hash."""
        return self.row.proven and self.valid

    @property
    def sequence(self) -> Any:
        return self["head_sequence"]

    @property
    def hash(self) -> Any:
        return self["head_hash"]

    def count(self, table: str) -> Any:
        return self[
            ("event_count", "cost_count", "plan_count", "producer_count")[COUNTED.index(table)]
        ]


# --------------------------------------------------------------------------------- report


@dataclass(frozen=True, slots=True)
class Break:
    """A break the walk found."""

    gap: Gap
    recorded: bool  # a proven chain_gaps row explains it: informational (chain_gap_recorded)


@dataclass
class ChainReport:
    """What one walk of a revision-3 file found. ``ok`` is the verdict; ``problems`` lists
    stable codes (the design's finding codes, §7)."""

    level: str  # "full" or "quick"
    rows: dict[str, int] = field(default_factory=dict)  # rows read per table
    proven: dict[str, int] = field(default_factory=dict)  # of those, rows whose own hash holds
    row_failures: list[tuple[str, object]] = field(default_factory=list)  # (table, key), capped
    row_failure_count: int = 0  # all of them
    links_checked: int = 0  # links looked at, one per event (the first: to the genesis hash)
    links_broken: int = 0  # of those, broken (a gap, a bad link or a sequence jump)
    chain_failures: int = 0  # events whose chain_hash does not recompute
    breaks: list[Break] = field(default_factory=list)  # in sequence order, capped
    unexplained: int = 0  # breaks no proven gap record explains (all of them)
    unbound: list[tuple[str, object]] = field(default_factory=list)  # (table, key), capped
    unbound_count: int = 0  # derived rows bound to no event, outside recorded gaps
    orphans_of_recovery: int = 0  # derived rows bound to an event a recorded gap lost
    last_sequence: int = 0  # the last event's sequence (0: none)
    last_chain: bytes | None = None  # its chain_hash (genesis when none; None: unknown)
    meta_hash: bytes | None = None  # the row hash of the one session_meta row (None: not one)
    head: Head | None = None  # the session_chain row, when there is exactly one
    head_rows: int = 0  # session_chain rows found
    tail: str = "head_missing"  # matches, cut, head_damaged or head_missing
    count_mismatches: list[tuple[str, object, int]] = field(default_factory=list)
    meta_ok: bool = False  # head.meta_hash is the session_meta row's hash
    gap_records: list[GapRecord] = field(default_factory=list)  # chain_gaps, sequence order
    gap_records_excess: bool = False  # more than MAX_GAP_RECORDS rows (not all read)
    gaps_ok: bool = False  # gap_count and (full) gaps_hash hold, every gap row proven

    @property
    def problems(self) -> list[str]:
        """Stable codes of what is wrong; empty when the file is proven."""
        out = []
        if self.row_failure_count:
            out.append("row_hash_mismatch")
        if self.unexplained:
            out.append("chain_break")
        if self.tail != "matches":
            out.append("head_mismatch")
        if self.count_mismatches:
            out.append("count_mismatch")
        if not self.meta_ok:
            out.append("meta_hash_mismatch")
        if not self.gaps_ok:
            out.append("gap_record_damaged")
        if self.unbound_count:
            out.append("unbound_rows")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def recorded(self) -> list[Break]:
        """Breaks a gap record explains (chain_gap_recorded)."""
        return [b for b in self.breaks if b.recorded]

    @property
    def unexplained_breaks(self) -> list[Break]:
        return [b for b in self.breaks if not b.recorded]


# ----------------------------------------------------------------------------------- walk


def _tally(r: ChainReport, row: Row, max_listed: int | None) -> None:
    r.rows[row.table] = r.rows.get(row.table, 0) + 1
    if row.proven:
        r.proven[row.table] = r.proven.get(row.table, 0) + 1
    else:
        r.row_failure_count += 1
        if max_listed is None or len(r.row_failures) < max_listed:
            r.row_failures.append((row.table, row.key))


def _own_chain(event: Row, bound: Sequence[Sequence[Row]]) -> bool:
    """The event's chain_hash recomputes from its stored prev_hash, content_hash and bound
    rows' stored hashes (any of them not a 16-byte blob: it does not)."""
    prev, content, link = event.prev_hash, event.content_hash, event.chain_hash
    if not (_is_hash(prev) and _is_hash(content) and _is_hash(link)):
        return False
    hashes = [[row.content_hash for row in rows] for rows in bound]
    if not all(_is_hash(h) for hs in hashes for h in hs):
        return False
    return bool(chain_hash(prev, content, hashes) == link)


def _hash_or_none(v: object) -> bytes | None:
    return v if type(v) is bytes and len(v) == HASH_SIZE else None


class _Explaining:
    """The proven gap records a walk matches breaks against, indexed: :meth:`explains` and
    :meth:`covers` answer as ``any(g.explains(found) ...)`` and ``any(g.covers(seq) ...)``
    over the records would, without a pass over every record for every break or orphan (a
    recovered file may hold MAX_GAP_RECORDS of them, one per break its walk finds)."""

    def __init__(self, gaps: Iterable[Gap]) -> None:
        self._by_range: dict[tuple[str, int, int], set[bytes | None]] = {}
        spans: list[tuple[int, int]] = []
        for g in gaps:
            self._by_range.setdefault((g.kind, g.from_seq, g.to_seq), set()).add(g.expected_hash)
            if g.kind in ("events", "tail"):
                spans.append((g.from_seq, g.to_seq))
        # the union of the spans that cover sequences, as disjoint sorted intervals
        merged: list[list[int]] = []
        for lo, hi in sorted(spans):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self._starts = [lo for lo, _ in merged]
        self._ends = [hi for _, hi in merged]

    def explains(self, found: Gap) -> bool:
        hashes = self._by_range.get((found.kind, found.from_seq, found.to_seq))
        return hashes is not None and (found.kind == "tail" or found.expected_hash in hashes)

    def covers(self, sequence: int) -> bool:
        i = bisect_right(self._starts, sequence) - 1
        return i >= 0 and sequence <= self._ends[i]


class ChainWalk:
    """Full verification, fed in order. ``event`` for every event in ``sequence`` order with
    its bound rows (three lists: cost_ledger, plan_items, producers), ``unbound`` for every
    derived row whose event does not exist, then ``finish``. Holds O(1) state besides the
    lists (capped at ``max_listed`` each; None keeps every break, as a recovery needs) and the
    gap records."""

    def __init__(
        self,
        session_id: str | bytes | None,
        records: Sequence[GapRecord] = (),
        *,
        max_listed: int | None = MAX_LISTED,
    ) -> None:
        self.report = ChainReport("full")
        self.report.gap_records = list(records)
        self._explaining = _Explaining(r.gap for r in records if r.proven and r.gap is not None)
        self._max = max_listed
        self._prev_seq = 0
        self._prev_chain: bytes | None = None if session_id is None else genesis(session_id)
        for t in COUNTED:
            self.report.rows[t] = self.report.proven[t] = 0

    def _break(self, gap: Gap, *, excusable: bool = True) -> None:
        r = self.report
        recorded = excusable and self._explaining.explains(gap)
        if not recorded:
            r.unexplained += 1
        if self._max is None or len(r.breaks) < self._max:
            r.breaks.append(Break(gap, recorded))

    def event(self, event: Row, bound: Sequence[Sequence[Row]], *, too_many: bool = False) -> None:
        """One event and the derived rows bound to it (``too_many``: some were dropped past
        MAX_BOUND, so its chain cannot be recomputed)."""
        r = self.report
        _tally(r, event, self._max)
        for rows in bound:
            for row in rows:
                _tally(r, row, self._max)
        seq = event.values[0]
        prev = _hash_or_none(event.prev_hash)
        # the link from the previous event (the first event's: from the session's genesis)
        r.links_checked += 1
        holds = prev is not None and prev == self._prev_chain
        if seq == self._prev_seq + 1:
            if not holds:
                self._break(Gap("link", seq, seq, prev))
        elif seq > self._prev_seq + 1:
            self._break(Gap("tail" if holds else "events", self._prev_seq + 1, seq - 1, prev))
        else:  # only a first event at sequence 0 or below
            self._break(Gap("link", seq, seq, prev))
        if not holds or seq != self._prev_seq + 1:
            r.links_broken += 1
        # the event's own chain, from its stored hashes
        if too_many or not _own_chain(event, bound):
            r.chain_failures += 1
            self._break(Gap("rows", seq, seq, _hash_or_none(event.chain_hash)))
        self._prev_seq = seq
        self._prev_chain = _hash_or_none(event.chain_hash)

    def unbound(self, row: Row) -> None:
        """A derived row whose event does not exist."""
        r = self.report
        _tally(r, row, self._max)
        seq = row.bound_to
        if seq is not None and self._explaining.covers(seq):
            r.orphans_of_recovery += 1
            return
        r.unbound_count += 1
        if self._max is None or len(r.unbound) < self._max:
            r.unbound.append((row.table, row.key))

    def finish(
        self,
        meta: Sequence[Row],
        heads: Sequence[Row],
        *,
        gap_records_excess: bool = False,
    ) -> ChainReport:
        """Compare with the ``session_meta`` rows (see :func:`meta_row`) and the
        ``session_chain`` rows (none: a replacement before its head is written)."""
        r = self.report
        r.last_sequence, r.last_chain = self._prev_seq, self._prev_chain
        r.gap_records_excess = gap_records_excess
        _compare_head(r, meta, heads, {t: r.rows[t] for t in COUNTED}, len(r.gap_records))
        head = r.head
        if head is not None and head.proven:
            hs = _int(head.sequence)
            if hs is not None and hs > r.last_sequence:  # the head names events that are gone
                self._break(Gap("tail", r.last_sequence + 1, hs, head.hash), excusable=False)
        return r


def _compare_head(
    r: ChainReport,
    meta: Sequence[Row],
    heads: Sequence[Row],
    counts: dict[str, int],
    gap_count: int,
) -> None:
    """The head against the counts, the meta hash, the gap count and (the walk read the gap
    records: ``r.gap_records``) each gap row's hash and gaps_hash."""
    full = r.level == "full"
    r.meta_hash = meta[0].content_hash if len(meta) == 1 else None
    r.head_rows = len(heads)
    if len(heads) != 1:
        r.tail, r.head = "head_missing", None
        r.gaps_ok = False
        return
    head = r.head = Head(heads[0])
    if not head.proven:
        r.tail = "head_damaged"
    elif (
        head.sequence == r.last_sequence and r.last_chain is not None and head.hash == r.last_chain
    ):
        r.tail = "matches"
    else:
        r.tail = "cut"
    for t in COUNTED:
        stored = head.count(t)
        if stored != counts[t]:
            r.count_mismatches.append((t, stored, counts[t]))
    r.meta_ok = r.meta_hash is not None and head["meta_hash"] == r.meta_hash
    records = r.gap_records
    r.gaps_ok = (
        head.proven
        and not r.gap_records_excess
        and head["gap_count"] == gap_count
        and (not full or all(g.proven for g in records))
        and (not full or head["gaps_hash"] == gaps_hash([g.row.content_hash for g in records]))
    )


def meta_row(mask: int, values: tuple[Any, ...]) -> Row:
    """The session_meta row as a :class:`Row` whose ``content_hash`` is its computed hash
    (session_meta stores none: its hash lives in the head)."""
    return Row("session_meta", mask, values, row_hash_raw("session_meta", mask, *values))


# ---------------------------------------------------------------------------------- merge


def merge_bound(
    events: Iterable[Row],
    derived: Sequence[Iterable[Row]],
    unbound: Callable[[Row], None],
) -> Iterator[tuple[Row, list[list[Row]], bool]]:
    """Pair each event (in ``sequence`` order) with its bound rows, streaming: each stream of
    ``derived`` (cost_ledger, plan_items, producers) comes in the order of its bound sequence
    (SQLite's: NULL, numbers, TEXT, BLOB). A row bound to no event, or to a value that is not
    an integer, goes to ``unbound``. Yields (event, bound rows per table, too_many); past
    MAX_BOUND rows for one event the rest are passed on as unbound-but-counted."""
    its = [iter(s) for s in derived]
    heads: list[Row | None] = [next(it, None) for it in its]
    for ev in events:
        seq = ev.values[0]
        bound: list[list[Row]] = [[] for _ in its]
        too_many = False
        n = 0
        for i, it in enumerate(its):
            h = heads[i]
            while h is not None:
                k = h.bound_to
                if k is not None and k > seq:
                    break
                if k == seq:
                    if n < MAX_BOUND:
                        bound[i].append(h)
                        n += 1
                    else:
                        too_many = True
                        unbound(h)
                else:
                    unbound(h)
                h = next(it, None)
            heads[i] = h
        yield ev, bound, too_many
    for i, it in enumerate(its):
        h = heads[i]
        while h is not None:
            unbound(h)
            h = next(it, None)


def walk(
    session_id: str | bytes | None,
    events: Iterable[Row],
    derived: Sequence[Iterable[Row]],
    *,
    meta: Sequence[Row],
    heads: Sequence[Row],
    records: Sequence[GapRecord] = (),
    gap_records_excess: bool = False,
    max_listed: int | None = MAX_LISTED,
) -> ChainReport:
    """Full verification over streams of rows (see :class:`ChainWalk` and :func:`merge_bound`)."""
    w = ChainWalk(session_id, records, max_listed=max_listed)
    for ev, bound, too_many in merge_bound(events, derived, w.unbound):
        w.event(ev, bound, too_many=too_many)
    return w.finish(meta, heads, gap_records_excess=gap_records_excess)


# ---------------------------------------------------------------------------------- quick


def quick_report(
    session_id: str | bytes | None,
    last: Row | None,
    last_bound: Sequence[Sequence[Row]],
    counts: dict[str, int],
    *,
    meta: Sequence[Row],
    heads: Sequence[Row],
    gap_count: int,
    records: Sequence[GapRecord] = (),
) -> ChainReport:
    """``check --quick``'s chain part (§7): the last event (its own hash, its chain from its
    bound rows) against the head, the four counts, the meta hash and the gap count.
    ``records``: the gap rows naming the last event (a recovery may have lost a row bound to
    it: a recorded ``rows`` gap)."""
    r = ChainReport("quick")
    r.proven = {t: 0 for t in COUNTED}
    r.last_sequence, r.last_chain = 0, None if session_id is None else genesis(session_id)
    if last is not None:
        _tally(r, last, MAX_LISTED)
        for rows in last_bound:
            for row in rows:
                _tally(r, row, MAX_LISTED)
        seq, link = last.values[0], _hash_or_none(last.chain_hash)
        if not _own_chain(last, last_bound):
            r.chain_failures += 1
            gap = Gap("rows", seq, seq, link)
            recorded = any(g.proven and g.gap is not None and g.gap.explains(gap) for g in records)
            r.unexplained += not recorded
            r.breaks.append(Break(gap, recorded))
        r.last_sequence, r.last_chain = seq, link
    r.rows = dict(counts)  # the table counts, not the rows this quick look read
    _compare_head(r, meta, heads, counts, gap_count)
    return r


# ------------------------------------------------------------------------------- recovery


def gaps_to_record(
    report: ChainReport,
    old_head: Head | None,
    *,
    highest_sequence: int = 0,
    original_revision: int = 3,
) -> list[Gap]:
    """The gap rows a recovery writes (§6), from the walk of the salvaged rows (``report``,
    made with the carried-over gap records and no head) and the original's head when it was
    read from the live file (``old_head``; a head that fails its own hash counts as lost).

    Every break no carried record explains; a ``tail`` from the last salvaged event to the
    original head (or, the head lost, to ``highest_sequence``: the highest of sqlite_sequence
    and any sequence seen); a ``meta`` gap when session_meta does not match the original head
    (or, at revision 3, the head is lost). A revision-1 or -2 original has no head to lose."""
    out = [b.gap for b in report.breaks if not b.recorded]
    if report.unexplained > len(out):
        raise ValueError(f"{report.unexplained} unexplained breaks, more than a walk lists")
    head = old_head if old_head is not None and old_head.proven else None
    last = report.last_sequence
    if head is not None and type(head.sequence) is int:
        # rows bound past the head (its page lost a write the rows' pages kept) are evidence
        # of lost events too: the tail reaches them, or they would be rows of no event
        top = max(head.sequence, highest_sequence)
        if top > last:
            tail = Gap("tail", last + 1, top, head.hash if top == head.sequence else None)
            carried = any(
                r.proven and r.gap is not None and r.gap.explains(tail) for r in report.gap_records
            )
            if top == head.sequence or not carried:
                out.append(tail)
    elif highest_sequence > last:
        out.append(Gap("tail", last + 1, highest_sequence, None))
    if head is not None:
        if report.meta_hash is None or head["meta_hash"] != report.meta_hash:
            out.append(Gap("meta", 0, 0, head["meta_hash"]))
    elif original_revision >= 3:
        out.append(Gap("meta", 0, 0, None))
    return out


def gap_row(sequence: int, gap: Gap, recovered_at: str) -> Row:
    """The ``chain_gaps`` row for ``gap`` (its hash computed)."""
    values = (sequence, gap.kind, gap.from_seq, gap.to_seq, gap.expected_hash, recovered_at)
    mask, stored = as_stored(values)
    return Row("chain_gaps", mask, stored, row_hash("chain_gaps", values))


def rebuild_head(
    report: ChainReport,
    records: Sequence[Row],
    *,
    session_id: str | bytes,
    origin: str,
    origin_revision: int,
    origin_at: str,
) -> Row:
    """The ``session_chain`` row of a replacement (§6 step 3), computed from the walk of its
    rows (``report``) and all its gap rows (carried over and new, in sequence order); never
    copied from a salvaged head. Raises ValueError when the walk has no session_meta hash."""
    if report.meta_hash is None:
        raise ValueError("the replacement has no single session_meta row")
    last_chain = report.last_chain if report.last_sequence else genesis(session_id)
    if last_chain is None:
        raise ValueError("the last event's chain_hash is not a hash")
    values: tuple[Any, ...] = (
        1,
        *(report.rows.get(t, 0) for t in COUNTED),
        report.last_sequence,
        last_chain,
        report.meta_hash,
        len(records),
        gaps_hash([g.content_hash for g in records]),
        origin,
        origin_revision,
        origin_at,
    )
    mask, stored = as_stored(values)
    return Row("session_chain", mask, stored, row_hash("session_chain", values))


__all__ = [
    "Break",
    "ChainReport",
    "ChainWalk",
    "Gap",
    "GapRecord",
    "Head",
    "Row",
    "as_stored",
    "gap_row",
    "gaps_to_record",
    "merge_bound",
    "meta_row",
    "quick_report",
    "rebuild_head",
    "walk",
]
