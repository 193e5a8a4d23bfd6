"""What a salvaged row must look like: our tables, their keys and the validation every engine's
rows pass before they may enter a replacement.

Rows are tuples in revision-1 column order (``COLUMNS[1]``): for ``events`` the nine revision-1
columns, ``sequence`` first. A stored ``content_hash`` (revision 2's on events, revision 3's on
every derived table) is checked by the engine that read it; a revision-3 record's hash columns
go to :class:`~agentdb.salvage.chainrows.ChainEvidence`, which the replacement takes them from
(a revision-2 event's hash is kept by the merge, or recomputed for a revision-1 row).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from agentdb.hashing import HASH_SIZE, event_hash, row_hash
from agentdb.paths import is_valid_id
from agentdb.salvage.scratch import Spilled
from agentdb.schema import enums
from agentdb.schema.revisions import COLUMNS
from agentdb.schema.revisions import TABLES as TABLES  # the one list, re-exported

Row = tuple[Any, ...]
AUTOINCREMENT_TABLES: tuple[str, ...] = ("events", "cost_ledger", "plan_items")
MAX_ROWID = (1 << 63) - 1
NO_HASH: Any = object()  # classify's "this record has no content_hash column"


def key_of(table: str, row: Row) -> Any:
    """The primary key of a validated row."""
    if table == "producers":
        return (row[0], row[1], row[2])
    return row[0]


def _text(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, Spilled) and v.text)  # long text, kept apart


def _nonempty(v: Any) -> bool:
    return (isinstance(v, str) and v != "") or (isinstance(v, Spilled) and v.text)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _count(v: Any) -> bool:
    return _int(v) and v >= 0


def _seq(v: Any) -> bool:
    return _int(v) and 1 <= v <= MAX_ROWID


def _opt_text(v: Any) -> bool:
    return v is None or _text(v)


def _check_events(row: Row) -> str | None:
    seq, eid, ts, kind, cat, name, ver, sv, payload = row
    if not _seq(seq):
        return "sequence is not a positive integer"
    if not (_nonempty(eid) and _text(ts) and _nonempty(sv)):
        return "id, timestamp or schema_version is not text"
    if kind not in enums.KINDS:
        return f"kind {kind!r} is not in the enum"
    if cat not in enums.PRODUCER_CATEGORIES:
        return f"producer_category {cat!r} is not in the enum"
    if not (_nonempty(name) and _nonempty(ver)):
        return "producer name or version is not text"
    if not isinstance(payload, bytes | str | Spilled):
        return "payload is NULL or not a BLOB"
    return None


def _check_session_meta(row: Row) -> str | None:
    sid, parent, profile, status, depth, started, ended = row
    if not (_nonempty(sid) and _opt_text(parent) and _nonempty(profile) and _text(started)):
        return "a text column has the wrong type"
    if status not in enums.STATUSES:
        return f"status {status!r} is not in the enum"
    # check's own rules for the row (a replacement holding it would fail check: inconsistent)
    if parent is not None and (not is_valid_id(str(parent)) or parent == sid):
        return f"parent_session_id {parent!r} is not another session's id"
    if (status == enums.RUNNING) != (ended is None):
        return f"status {status} with ended_at {'unset' if ended is None else 'set'}"
    if not _count(depth):
        return "depth is not a non-negative integer"
    if not _opt_text(ended):
        return "ended_at is not text"
    return None


def _check_cost_ledger(row: Row) -> str | None:
    seq, ev, provider, model, inp, out, cw, cr, cost = row
    if not (_seq(seq) and _seq(ev)):
        return "sequence or event_sequence is not a positive integer"
    if not (_text(provider) and _text(model)):
        return "provider_name or model_id is not text"
    if not all(_count(v) for v in (inp, out, cw, cr)):
        return "a token count is not a non-negative integer"
    if not isinstance(cost, float):
        return "cost_usd is not REAL"
    return None


def _check_plan_items(row: Row) -> str | None:
    seq, ev, turn, call, provider, tool, decision, decided_by = row
    if not (_seq(seq) and _seq(ev)):
        return "sequence or event_sequence is not a positive integer"
    if not all(_text(v) for v in (turn, call, provider, tool, decided_by)):
        return "a text column has the wrong type"
    if decision not in enums.DECISIONS:
        return f"decision {decision!r} is not in the enum"
    return None


def _check_producers(row: Row) -> str | None:
    cat, name, ver, first = row
    if cat not in enums.PRODUCER_CATEGORIES:
        return f"category {cat!r} is not in the enum"
    if not (_nonempty(name) and _nonempty(ver)):
        return "name or version is not text"
    if not _seq(first):
        return "first_seen_sequence is not a positive integer"
    return None


_CHECKS: dict[str, Callable[[Row], str | None]] = {
    "events": _check_events,
    "session_meta": _check_session_meta,
    "cost_ledger": _check_cost_ledger,
    "plan_items": _check_plan_items,
    "producers": _check_producers,
}


def normalise(table: str, values: list[Any] | Row) -> Row:
    """Apply the column affinity SQLite applies on read (a REAL stored as an integer)."""
    row = tuple(values)
    if table == "cost_ledger" and len(row) == 9 and _int(row[8]):
        row = (*row[:8], float(row[8]))
    return row


def problem(table: str, row: Row, session_id: str) -> str | None:
    """Why ``row`` (revision-1 columns) cannot be salvaged into ``table``; None when it can."""
    if len(row) != len(COLUMNS[1][table]):
        return f"{len(row)} columns, expected {len(COLUMNS[1][table])}"
    why = _CHECKS[table](row)
    if why is None and table == "session_meta" and row[0] != session_id:
        why = f"session_id {str(row[0])[:40]!r} is not the file's id {session_id}"
    return why


def hash_problem(row: Row, stored: Any, table: str = "events") -> str | None:
    """Why a row's stored content_hash does not vouch for it: a revision-2 or -3 event's (the
    event hash), a revision-3 derived row's (its row hash). ``row``: revision-1 columns, every
    value in hand (none spilled)."""
    if not isinstance(stored, bytes) or len(stored) != HASH_SIZE:
        return "content_hash is missing or malformed"
    got = event_hash(*row) if table == "events" else row_hash(table, row)
    if got != stored:
        return "content_hash does not match the row"
    return None


class Shape(NamedTuple):
    """A record assigned to a table by its shape (:func:`classify`)."""

    table: str  # one of our tables, sqlite_sequence, session_chain or chain_gaps
    row: Row  # revision-1 columns (session_chain, chain_gaps: their hashed columns)
    stored: Any  # the stored content_hash, or NO_HASH when the record has no such column
    extra: tuple[Any, ...] = ()  # a revision-3 event's stored (prev_hash, chain_hash)

    @property
    def chained(self) -> bool:
        """A record of a revision-3 shape (its hashes go to the chain evidence)."""
        return (
            bool(self.extra)
            or self.table in ("session_chain", "chain_gaps")
            or (
                self.table in ("cost_ledger", "plan_items", "producers")
                and self.stored is not NO_HASH
            )
        )


def classify(rec: list[Any], rowid: int) -> Shape | None:
    """The table, revision-1 row and stored hashes of a record of one of our tables' shapes at
    any revision (``sqlite_sequence``, and revision 3's ``session_chain`` and ``chain_gaps``,
    included), or None. A rowid alias is stored as NULL: its value is ``rowid``."""
    n = len(rec)
    first_null = n > 0 and rec[0] is None
    if n == 12 and first_null and isinstance(rec[1], str):
        return Shape("events", (rowid, *rec[1:9]), rec[9], (rec[10], rec[11]))
    if n == 10 and first_null:
        if isinstance(rec[1], int) and not isinstance(rec[1], bool):
            return Shape("cost_ledger", (rowid, *rec[1:9]), rec[9])  # revision 3
        return Shape("events", (rowid, *rec[1:9]), rec[9])
    if n == 9 and first_null:
        if isinstance(rec[1], str):
            return Shape("events", (rowid, *rec[1:9]), NO_HASH)
        if isinstance(rec[8], bytes):
            return Shape("plan_items", (rowid, *rec[1:8]), rec[8])  # revision 3
        return Shape("cost_ledger", (rowid, *rec[1:]), NO_HASH)
    if n == 8 and first_null:
        return Shape("plan_items", (rowid, *rec[1:]), NO_HASH)
    if n == 7 and isinstance(rec[0], str):
        return Shape("session_meta", tuple(rec), NO_HASH)
    if n == 7 and first_null:
        return Shape("chain_gaps", (rowid, *rec[1:6]), rec[6])
    if n == 5 and isinstance(rec[0], str):
        return Shape("producers", tuple(rec[:4]), rec[4])  # revision 3
    if n == 4 and isinstance(rec[0], str):
        return Shape("producers", tuple(rec), NO_HASH)
    if n == 14 and first_null:
        return Shape("session_chain", (rowid, *rec[1:13]), rec[13])
    if n == 2 and isinstance(rec[0], str) and isinstance(rec[1], int):
        return Shape("sqlite_sequence", tuple(rec), NO_HASH)
    return None
