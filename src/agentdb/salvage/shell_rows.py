"""Validate the rows ``.recover`` brought back, and map ``lost_and_found`` rows to our tables.

``.recover`` is generic: it files rows under whatever a damaged schema says, fills a short
record's missing columns with NULL, reads broken overflow chains into rows of the right length
and the wrong bytes, and mixes index records into ``lost_and_found``. So every row is checked
against what our writer can have stored — column count, types, enums, the session's own id — and,
for revision-2 and -3 events and revision-3 derived rows, against the stored ``content_hash``. A
row that fails is dropped and counted.

Rows are returned in revision-1 column order (:data:`agentdb.schema.revisions.COLUMNS` ``[1]``);
a verified ``content_hash`` (and a revision-3 event's stored ``prev_hash``, ``chain_hash``) is
returned beside the row (:class:`Mapped`), for the chain evidence.
"""

from __future__ import annotations

import functools
import math
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentdb.hashing import HASH_SIZE, event_hash, row_hash
from agentdb.paths import is_valid_id
from agentdb.schema.enums import DECISIONS, KINDS, PRODUCER_CATEGORIES, STATUSES
from agentdb.schema.revisions import COLUMNS, TABLES

Row = tuple[object, ...]


def _text(v: object) -> bool:
    return isinstance(v, str)


def _opt_text(v: object) -> bool:
    return v is None or isinstance(v, str)


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _pos_int(v: object) -> bool:
    return _int(v) and v > 0  # type: ignore[operator]


def _count(v: object) -> bool:
    return _int(v) and v >= 0  # type: ignore[operator]


def _events(r: list[object]) -> bool:
    seq, eid, ts, kind, cat, name, ver, sv, payload = r
    return (
        _pos_int(seq)
        and _text(eid)
        and eid != ""
        and _text(ts)
        and kind in KINDS
        and cat in PRODUCER_CATEGORIES
        and _text(name)
        and _text(ver)
        and _text(sv)
        and isinstance(payload, bytes | str)
    )


def _cost_ledger(r: list[object]) -> bool:
    seq, evseq, provider, model, tin, tout, tcw, tcr, cost = r
    if _int(cost):
        cost = r[8] = float(cost)  # type: ignore[arg-type]
    return (
        _pos_int(seq)
        and _pos_int(evseq)
        and _text(provider)
        and _text(model)
        and all(_count(t) for t in (tin, tout, tcw, tcr))
        and isinstance(cost, float)
        and math.isfinite(cost)
        and cost >= 0
    )


def _plan_items(r: list[object]) -> bool:
    seq, evseq, turn, call, provider, tool, decision, by = r
    return (
        _pos_int(seq)
        and _pos_int(evseq)
        and all(_text(v) for v in (turn, call, provider, tool, by))
        and decision in DECISIONS
    )


def _producers(r: list[object]) -> bool:
    cat, name, ver, first = r
    return cat in PRODUCER_CATEGORIES and _text(name) and _text(ver) and _pos_int(first)


def _session_meta(r: list[object], session_id: str) -> bool:
    sid, parent, profile, status, depth, started, ended = r
    return (
        sid == session_id
        and (parent is None or (isinstance(parent, str) and is_valid_id(parent)))
        and _text(profile)
        and status in STATUSES
        and _count(depth)
        and _text(started)
        and _opt_text(ended)
    )


_VALID = {
    "events": _events,
    "cost_ledger": _cost_ledger,
    "plan_items": _plan_items,
    "producers": _producers,
}


def validate(table: str, row: Sequence[object], *, session_id: str) -> Row | None:
    """``row`` (revision-1 order) if our writer could have stored it, else None.

    ``cost_usd`` stored as an integer (SQLite writes integral REALs as integers on disk) comes
    back as a float, as SQLite itself would return it.
    """
    if table not in COLUMNS[1] or len(row) != len(COLUMNS[1][table]):
        return None
    r = list(row)
    if table == "session_meta":
        ok = _session_meta(r, session_id)
    elif table in _VALID:
        ok = _VALID[table](r)
    else:
        return None
    return tuple(r) if ok else None


def check_event_hash(row: Row, content_hash: object) -> bool:
    """True when ``content_hash`` is the revision-2 hash of the event ``row`` (rev-1 order)."""
    if not isinstance(content_hash, bytes) or len(content_hash) != HASH_SIZE:
        return False
    return event_hash(*row) == content_hash  # type: ignore[arg-type]


def check_row_hash(table: str, row: Row, content_hash: object) -> bool:
    """True when ``content_hash`` is the revision-3 row hash of the derived ``row``."""
    if not isinstance(content_hash, bytes) or len(content_hash) != HASH_SIZE:
        return False
    return row_hash(table, row) == content_hash  # type: ignore[arg-type]


def event_from_scratch(
    rowid: object, values: Sequence[object], *, revision: int | None, session_id: str
) -> Row | None:
    """A validated event from the scratch ``events`` table (revision-3 columns: a revision-1
    or -2 record leaves the later ones NULL)."""
    seq = values[0] if values[0] is not None else rowid
    row = validate("events", (seq, *values[1:9]), session_id=session_id)
    if row is None:
        return None
    content_hash = values[9]
    if content_hash is None:
        return row if revision is None or revision < 2 else None
    return row if check_event_hash(row, content_hash) else None


def derived_from_scratch(
    table: str, values: Sequence[object], *, session_id: str
) -> tuple[Row, object] | None:
    """A validated row of another table from its scratch table (revision-3 columns) and its
    stored content_hash (None when it has none), which must be the row's own."""
    n = len(COLUMNS[1][table])
    row = validate(table, values[:n], session_id=session_id)
    stored = values[n] if len(values) > n else None
    if row is None or (stored is not None and not check_row_hash(table, row, stored)):
        return None  # a revision-3 row whose own hash fails is rejected
    return row, stored


def key_of(table: str, row: Row) -> object:
    """The primary key a merge matches rows on."""
    if table == "session_meta":
        return row[0]
    if table == "producers":
        return row[:3]
    return row[0]  # events, cost_ledger, plan_items: sequence


@dataclass
class Mapped:
    """Where one ``lost_and_found`` row went."""

    table: str | None  # our table, or None when it was rejected
    row: Row | None  # the validated row (revision-1 order)
    reason: str = ""  # why it was rejected: index_record, shape, invalid
    stored: object = None  # its stored content_hash, checked against the row (None: none)
    links: tuple[object, ...] = ()  # a revision-3 event's stored (prev_hash, chain_hash)


def map_lost_and_found(
    nfield: object,
    rowid: object,
    fields: Sequence[object],
    *,
    revision: int | None,
    session_id: str,
) -> Mapped:
    """Map one ``lost_and_found`` row (``c0..``) to our table by its shape, or reject it.

    Index records have no rowid (``id`` is NULL) and are rejected: ``idx_events_producer`` and
    ``producers`` records have the same four columns. A table whose key is an ``INTEGER
    PRIMARY KEY`` stores NULL in the record's first column; its value is the rowid.
    """
    if not _int(rowid):
        return Mapped(None, None, "index_record")
    if not _int(nfield) or not 0 < nfield <= len(fields):  # type: ignore[operator]
        return Mapped(None, None, "shape")
    c = list(fields[: int(nfield)])  # type: ignore[call-overload]
    shaped = _shape(c, rowid)
    if shaped is None or (shaped[0] == "events" and shaped[2] is None and (revision or 0) >= 2):
        return Mapped(None, None, "shape")  # an event without its hash: not this revision's
    table, row, stored, links = shaped
    valid = validate(table, row, session_id=session_id)
    if valid is None:
        return Mapped(None, None, "invalid")
    if stored is not None:
        check = check_event_hash if table == "events" else functools.partial(check_row_hash, table)
        if not check(valid, stored):
            return Mapped(None, None, "invalid")
    return Mapped(table, valid, stored=stored, links=links)


_Shaped = tuple[str, Sequence[object], object, tuple[object, ...]]


def _shape(c: list[object], rowid: object) -> _Shaped | None:
    """(table, revision-1 row, stored content_hash or None, an event's stored chain fields) of
    a ``lost_and_found`` record by its shape at any revision (revision 3 adds a content_hash to
    every derived table, prev_hash and chain_hash to events), or None."""
    n = len(c)
    keyed = n > 0 and c[0] in (None, rowid)
    if n in (9, 10, 12) and keyed and _text(c[1]):
        return "events", (rowid, *c[1:9]), c[9] if n > 9 else None, tuple(c[10:12])
    if n == 10 and keyed and _int(c[1]):
        return "cost_ledger", (rowid, *c[1:9]), c[9], ()  # revision 3
    if n == 9 and keyed and _int(c[1]):
        if isinstance(c[8], bytes):
            return "plan_items", (rowid, *c[1:8]), c[8], ()  # revision 3
        return "cost_ledger", (rowid, *c[1:9]), None, ()
    if n == 8 and keyed:
        return "plan_items", (rowid, *c[1:8]), None, ()
    if n == 7:
        return "session_meta", c, None, ()
    if n in (4, 5) and _text(c[0]):
        return "producers", c[:4], c[4] if n == 5 else None, ()
    return None


_UNKNOWN = -(1 << 80)  # ByKey.top when keys are not tracked (below every integer key)


@dataclass
class ByKey:
    """``.recover``'s rows per table keyed by primary key; the first valid row for a key wins."""

    # table -> key -> row (the caller may give mappings in the job's scratch database)
    rows: dict[str, MutableMapping[Any, Row]] = field(
        default_factory=lambda: {t: {} for t in TABLES}
    )
    conflicts: int = 0  # a second, different row for a key already taken
    # table -> the largest integer key added, for a mapping that was empty when first added to
    # (a larger key cannot be taken: no lookup needed; .recover prints rows in key order)
    top: dict[str, int | None] = field(default_factory=dict)

    def add(self, table: str, row: Row) -> bool:
        """Add ``row`` unless its key is taken; True when it was added."""
        k = key_of(table, row)
        if table not in self.top:
            self.top[table] = None if not len(self.rows[table]) else _UNKNOWN
        top = self.top[table]
        if type(k) is int and top is not _UNKNOWN:
            if top is None or k > top:
                self.rows[table][k] = row
                self.top[table] = k
                return True
        elif top is not _UNKNOWN:
            self.top[table] = _UNKNOWN  # another kind of key: look every key up from now on
        have = self.rows[table].get(k)
        if have is None:
            self.rows[table][k] = row
            return True
        if have != row:
            self.conflicts += 1
        return False

    def as_lists(self) -> dict[str, Any]:
        """Each table's rows in key order: a list, or the mapping itself when it is kept in the
        scratch database (iterated in key order by :func:`~agentdb.salvage.diskrows.ordered`)."""
        return {
            t: d if not isinstance(d, dict) else [r for _, r in sorted(d.items(), key=_sort_key)]
            for t, d in self.rows.items()
        }


def _sort_key(item: tuple[object, Row]) -> tuple[str, ...] | tuple[int]:
    k = item[0]
    if isinstance(k, tuple):
        return tuple(str(x) for x in k)
    if isinstance(k, int):
        return (k,)
    return (str(k),)
