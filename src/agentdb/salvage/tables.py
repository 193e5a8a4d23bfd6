"""What a salvaged row must look like: our tables, their keys and the validation every engine's
rows pass before they may enter a replacement.

Rows are tuples in revision-1 column order (``COLUMNS[1]``): for ``events`` the nine revision-1
columns, ``sequence`` first. A revision-2 ``content_hash`` is checked by the engine that read it
and then dropped; the replacement recomputes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentdb.hashing import HASH_SIZE, event_hash
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


def hash_problem(row: Row, stored: Any) -> str | None:
    """Why a revision-2 events row's stored content_hash does not vouch for it."""
    if not isinstance(stored, bytes) or len(stored) != HASH_SIZE:
        return "content_hash is missing or malformed"
    if event_hash(*row) != stored:
        return "content_hash does not match the row"
    return None


def classify(rec: list[Any], rowid: int) -> tuple[str, Row, Any] | None:
    """(table, revision-1 row, stored content_hash or :data:`NO_HASH`) for a record of one of
    our tables' shapes (``sqlite_sequence`` included), or None."""
    n = len(rec)
    if n == 10 and rec[0] is None:
        return "events", (rowid, *rec[1:9]), rec[9]
    if n == 9 and rec[0] is None:
        if isinstance(rec[1], str):
            return "events", (rowid, *rec[1:9]), NO_HASH
        return "cost_ledger", (rowid, *rec[1:]), NO_HASH
    if n == 8 and rec[0] is None:
        return "plan_items", (rowid, *rec[1:]), NO_HASH
    if n == 7 and isinstance(rec[0], str):
        return "session_meta", tuple(rec), NO_HASH
    if n == 4 and isinstance(rec[0], str):
        return "producers", tuple(rec), NO_HASH
    if n == 2 and isinstance(rec[0], str) and isinstance(rec[1], int):
        return "sqlite_sequence", tuple(rec), NO_HASH
    return None
