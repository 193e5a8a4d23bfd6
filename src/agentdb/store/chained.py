"""The writer's revision-3 rows (docs/design/damage-evident-revision.md §4, §5, §8): derived
rows' sequences and hashes, each event's ``prev_hash``/``chain_hash``, and the one
``session_chain`` head row, all written inside the caller's ``BEGIN IMMEDIATE`` transaction.

:class:`~agentdb.store.writer.SessionWriter` reaches this module for every file at revision 3 or
later (the current revision). Fault points: ``emit_before_head`` (rows inserted, head
not yet updated) and ``status_before_head`` (session_meta updated, head not yet).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import apsw

from agentdb import db, errors, faults
from agentdb.hashing import (
    as_bytes_sql,
    chain_hash,
    frame,
    frames,
    gaps_hash,
    genesis,
    row_hash,
    row_hash_framed,
    row_hash_raw,
    text_mask_sql,
)
from agentdb.schema.revisions import COLUMNS, REV3_HASHED

REVISION = 3
_HEAD_COLUMNS = REV3_HASHED["session_chain"]  # the head's hashed columns, in order
# positions in the head row
_EVENTS, _COSTS, _PLANS, _PRODUCERS, _SEQ, _HASH, _META = 1, 2, 3, 4, 5, 6, 7

_META_RAW = (
    f"SELECT {text_mask_sql(COLUMNS[3]['session_meta'])}, "
    + ", ".join(as_bytes_sql(c) for c in COLUMNS[3]["session_meta"])
    + " FROM session_meta"
)
_INSERT_EVENT = (
    "INSERT INTO events (sequence, id, timestamp, kind, producer_category, producer_name, "
    "producer_version, schema_version, payload, content_hash, prev_hash, chain_hash) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)
_INSERT_PRODUCER = (
    "INSERT INTO producers (category, name, version, first_seen_sequence, content_hash) "
    "VALUES (?,?,?,?,?)"
)
_INSERT_COST = (
    "INSERT INTO cost_ledger (sequence, event_sequence, provider_name, model_id, input_tokens, "
    "output_tokens, cache_write_tokens, cache_read_tokens, cost_usd, content_hash) "
    "VALUES (?,?,?,?,?,?,?,?,?,?)"
)
_INSERT_PLAN = (
    "INSERT INTO plan_items (sequence, event_sequence, turn_id, tool_call_id, provider_name, "
    "tool_name, decision, decided_by, content_hash) VALUES (?,?,?,?,?,?,?,?,?)"
)
_UPDATE_HEAD = (
    "UPDATE session_chain SET event_count = ?, cost_count = ?, plan_count = ?, "
    "producer_count = ?, head_sequence = ?, head_hash = ?, meta_hash = ?, content_hash = ? "
    "WHERE id = 1"
)
# An emit sets only the columns it changes (the others keep the values its hash was made from,
# which the cache holds): every derived count, or none of them for an emit without derived rows
# (most). SQLite checks the CHECK constraints of the columns an UPDATE sets; the rest are the
# values the file already holds.
_UPDATE_HEAD_EMIT = (
    "UPDATE session_chain SET event_count = ?, cost_count = ?, plan_count = ?, "
    "producer_count = ?, head_sequence = ?, head_hash = ?, content_hash = ? WHERE id = 1"
)
_UPDATE_HEAD_PLAIN = (
    "UPDATE session_chain SET event_count = ?, head_sequence = ?, head_hash = ?, "
    "content_hash = ? WHERE id = 1"
)


class Rows(Protocol):
    """What one transaction inserts (``writer._Rows``): events with their content hash,
    producers, costs and plans without their own sequence, all bound to an event."""

    events: list[tuple[Any, ...]]
    producers: list[tuple[Any, ...]]
    costs: list[tuple[Any, ...]]
    plans: list[tuple[Any, ...]]


class Head(NamedTuple):
    """The writer's cache of the head, valid under the lease until a rollback. Immutable:
    :func:`write` and :func:`after_status` return a new one, which the writer keeps only once
    its transaction committed (a rolled-back transaction leaves no cache, never one ahead of
    the file)."""

    next_event: int  # the next event's sequence
    next_cost: int  # the next cost_ledger sequence (inside its row hash: given by the writer)
    next_plan: int  # the next plan_items sequence
    row: tuple[Any, ...]  # the session_chain row's hashed columns (REV3_HASHED order)
    # The head's own hash frames its columns in order; an emit rewrites event_count,
    # head_sequence and head_hash, and the three derived counts only when it adds derived rows.
    # The frames of the rest are kept: ``counts`` = frames(cost_count, plan_count,
    # producer_count), ``tail`` = frames(meta_hash .. origin_at), which only a status change
    # (meta_hash) rewrites.
    counts: bytes
    tail: bytes


_TABLE = "session_chain"
_ID_FRAME = frame(1)  # id: the one row


def _head(next_event: int, next_cost: int, next_plan: int, row: tuple[Any, ...]) -> Head:
    return Head(
        next_event, next_cost, next_plan, row, frames(row[_COSTS:_SEQ]), frames(row[_META:])
    )


def _next(conn: apsw.Connection, table: str, floor: int = 0) -> int:
    # the highest of sqlite_sequence, max(sequence) and ``floor`` (the head's), plus one: a
    # lowered sqlite_sequence never hands out a lost number again (design §13 A8)
    return (
        max(
            int(
                db.scalar(
                    conn,
                    f"SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = "
                    f"'{table}'), 0), coalesce((SELECT max(sequence) FROM {table}), 0))",
                )
            ),
            floor,
        )
        + 1
    )


def meta_hash(conn: apsw.Connection) -> bytes:
    """The row hash of the session_meta row as stored (TEXT as its bytes)."""
    row = db.row(conn, _META_RAW)
    if row is None:
        raise LookupError("no session_meta row")
    return row_hash_raw("session_meta", int(row[0]), *row[1:])


def create_head(conn: apsw.Connection, session_id: str, created_at: str) -> None:
    """Insert a new session's head (origin ``created``, the genesis head), in the caller's
    transaction, after its session_meta row."""
    head: list[Any] = [1, 0, 0, 0, 0, 0, genesis(session_id), meta_hash(conn), 0, gaps_hash([])]
    head += ["created", REVISION, created_at]
    conn.execute(
        f"INSERT INTO session_chain ({', '.join(_HEAD_COLUMNS)}, content_hash) "
        f"VALUES ({', '.join('?' * (len(_HEAD_COLUMNS) + 1))})",
        (*head, row_hash(_TABLE, head)),
    )


_LOST_SQL = (
    "SELECT max(to_seq) FROM chain_gaps WHERE kind IN ('events', 'tail') "
    "AND typeof(to_seq) = 'integer'"
)


def read_head(conn: apsw.Connection) -> Head:
    row = db.row(conn, f"SELECT {', '.join(_HEAD_COLUMNS)} FROM session_chain WHERE id = 1")
    if row is None:
        raise LookupError("no session_chain row")
    # numbers a recorded gap says were issued and lost are never issued again (design §13 A8):
    # step 3 records a tail up to the highest number rows were bound to, past the counter
    lost = db.scalar(conn, _LOST_SQL)
    return _head(
        _next(conn, "events", max(int(row[_SEQ]), lost if type(lost) is int else 0)),
        _next(conn, "cost_ledger"),
        _next(conn, "plan_items"),
        tuple(row),
    )


_NONE: Sequence[Sequence[bytes]] = ((), (), ())
_new_head = tuple.__new__  # Head's fields as one tuple: a NamedTuple without its __new__'s call


_LAST_SEQUENCE = (1 << 63) - 1  # SQLite's largest integer


class Statements(Protocol):
    """What runs the head's UPDATE: the connection, or a cursor the writer keeps on it (an
    apsw cursor made once, not one per statement as ``Connection.execute`` makes)."""

    def execute(self, statements: str, bindings: tuple[Any, ...]) -> object: ...


def write(conn: apsw.Connection, head: Head, rows: Rows, cursor: Statements | None = None) -> Head:
    """Insert ``rows`` with their hashes and chain, then rewrite the head (through ``cursor``,
    a cursor on ``conn``, when given); in the caller's transaction (nothing is committed here).
    Returns the head after these rows (``head`` is left as it was)."""
    if rows.events and rows.events[-1][0] > _LAST_SEQUENCE:
        raise errors.ConstraintViolation(
            f"no event sequence is left after {_LAST_SEQUENCE}: nothing was written; "
            "start a new session"
        )
    if rows.costs or rows.plans or rows.producers:
        return _write_derived(conn, head, rows, conn if cursor is None else cursor)
    # no derived row (most emits): each link from its event alone, the derived counts unchanged
    prev: bytes = head.row[_HASH]
    events = []
    for r in rows.events:
        link = chain_hash(prev, r[9])
        events.append((*r, prev, link))
        prev = link
    if len(events) == 1:
        conn.execute(_INSERT_EVENT, events[0])
    else:
        conn.executemany(_INSERT_EVENT, events)
    faults.point("emit_before_head")
    old = head.row
    events_count = old[_EVENTS] + len(events)
    seq = events[-1][0] if events else head.next_event - 1
    # the head's own hash: row_hash("session_chain", row) with the kept frames
    own = row_hash_framed(
        _TABLE,
        b"".join((_ID_FRAME, frame(events_count), head.counts, frame(seq), frame(prev), head.tail)),
    )
    (conn if cursor is None else cursor).execute(_UPDATE_HEAD_PLAIN, (events_count, seq, prev, own))
    row = (old[0], events_count, *old[_COSTS:_SEQ], seq, prev, *old[_META:])
    return _new_head(Head, (seq + 1, head.next_cost, head.next_plan, row, head.counts, head.tail))


def _write_derived(conn: apsw.Connection, head: Head, rows: Rows, update: Statements) -> Head:
    """:func:`write` for rows with derived rows (cost, plan or producer rows)."""
    costs: list[tuple[Any, ...]] = []
    plans: list[tuple[Any, ...]] = []
    producers: list[tuple[Any, ...]] = []
    cseq, pseq = head.next_cost, head.next_plan
    prev: bytes = head.row[_HASH]
    events = []
    # per event, the hashes of the rows bound to it: cost_ledger, plan_items, producers
    bound: dict[int, tuple[list[bytes], list[bytes], list[bytes]]] = {}
    for r in rows.costs:
        # cost_usd + 0.0: a REAL column gives -0.0 back as 0.0 (its integral value is stored
        # as an integer), so the row is hashed as SQLite will return it
        full = (cseq, *r[:-1], r[-1] + 0.0)
        h = row_hash("cost_ledger", full)
        costs.append((*full, h))
        b = bound.get(r[0])
        if b is None:
            bound[r[0]] = ([h], [], [])
        else:
            b[0].append(h)
        cseq += 1
    for r in rows.plans:
        full = (pseq, *r)
        h = row_hash("plan_items", full)
        plans.append((*full, h))
        b = bound.get(r[0])
        if b is None:
            bound[r[0]] = ([], [h], [])
        else:
            b[1].append(h)
        pseq += 1
    for r in rows.producers:
        h = row_hash("producers", r)
        producers.append((*r, h))
        b = bound.get(r[3])
        if b is None:
            bound[r[3]] = ([], [], [h])
        else:
            b[2].append(h)
    for r in rows.events:
        link = chain_hash(prev, r[9], bound.get(r[0], _NONE))
        events.append((*r, prev, link))
        prev = link
    # events first: the other three reference them (foreign keys are checked per statement)
    if len(events) == 1:
        conn.execute(_INSERT_EVENT, events[0])
    else:
        conn.executemany(_INSERT_EVENT, events)
    if producers:
        conn.executemany(_INSERT_PRODUCER, producers)
    if costs:
        conn.executemany(_INSERT_COST, costs)
    if plans:
        conn.executemany(_INSERT_PLAN, plans)
    faults.point("emit_before_head")
    old = head.row
    events_count = old[_EVENTS] + len(events)
    seq = events[-1][0] if events else head.next_event - 1
    derived = (
        old[_COSTS] + len(costs),
        old[_PLANS] + len(plans),
        old[_PRODUCERS] + len(producers),
    )
    counts = frame(derived[0]) + frame(derived[1]) + frame(derived[2])  # frames(derived)
    # the head's own hash: row_hash("session_chain", row) with the kept frames
    own = row_hash_framed(
        _TABLE,
        b"".join((_ID_FRAME, frame(events_count), counts, frame(seq), frame(prev), head.tail)),
    )
    update.execute(_UPDATE_HEAD_EMIT, (events_count, *derived, seq, prev, own))
    row = (old[0], events_count, *derived, seq, prev, *old[_META:])
    return Head(seq + 1, cseq, pseq, row, counts, head.tail)


def after_status(conn: apsw.Connection, head: Head | None = None) -> Head:
    """After session_meta changed (in the caller's transaction): the head's ``meta_hash`` and
    its own hash. ``head``: the writer's cached head (None: read from the file). Returns the
    head after the change (``head`` is left as it was)."""
    if head is None:
        head = read_head(conn)
    old = head.row
    row = (*old[:_META], meta_hash(conn), *old[_META + 1 :])
    faults.point("status_before_head")
    conn.execute(_UPDATE_HEAD, (*row[_EVENTS : _META + 1], row_hash(_TABLE, row)))
    return _head(head.next_event, head.next_cost, head.next_plan, row)
