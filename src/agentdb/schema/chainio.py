"""The chain walk (``schema/chain.py``) over an open revision-3 file, and what a recovery writes.

* :func:`verify_full` and :func:`verify_quick` read one file in one read transaction (a writer
  committing meanwhile cannot make head and rows disagree) and return a ``ChainReport``. The
  full walk streams: events in ``sequence`` order, ``cost_ledger``/``plan_items`` in event order
  through their indexes and ``producers`` sorted by SQLite, merged beside the events (constant
  memory in Python); TEXT is read as its stored bytes.
* :func:`record_gaps` and :func:`write_head` write a replacement's gap rows and head (§6).
* :func:`proves_prefix` is §11's head-link proof for backups and restores.

Every function expects the revision-3 tables (the caller has read the file's revision).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import apsw

from agentdb import db
from agentdb.hashing import as_bytes_sql, genesis, text_mask_sql
from agentdb.schema.chain import (
    COUNTED,
    DERIVED,
    MAX_BOUND,
    MAX_GAP_RECORDS,
    ChainReport,
    Gap,
    GapRecord,
    Row,
    gap_row,
    meta_row,
    quick_report,
    walk,
)
from agentdb.schema.revisions import REV3_BOUND, REV3_HASHED

_EXTRA = {"events": ("content_hash", "prev_hash", "chain_hash"), "session_meta": ()}
_KEY = dict(REV3_BOUND)


def _select(table: str, tail: str = "") -> str:
    cols = REV3_HASHED[table]
    vals = ", ".join(as_bytes_sql(c) for c in cols)
    extra = "".join(", " + c for c in _EXTRA.get(table, ("content_hash",)))
    return f"SELECT {text_mask_sql(cols)}, {vals}{extra} FROM {table} {tail}"


def _rows(conn: apsw.Connection, table: str, tail: str, bindings: Any = None) -> Iterator[Row]:
    n = len(REV3_HASHED[table])
    for rec in conn.cursor().execute(_select(table, tail), bindings):
        mask, values, rest = rec[0], tuple(rec[1 : 1 + n]), rec[1 + n :]
        if table == "events":
            yield Row(table, mask, values, rest[0], rest[1], rest[2])
        elif table == "session_meta":
            yield meta_row(mask, values)
        else:
            yield Row(table, mask, values, rest[0])


@contextmanager
def _read_transaction(conn: apsw.Connection) -> Iterator[None]:
    if not conn.get_autocommit():  # the caller's transaction
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if not conn.get_autocommit():
            conn.execute("ROLLBACK")


def _meta_and_heads(conn: apsw.Connection) -> tuple[list[Row], list[Row]]:
    meta = list(_rows(conn, "session_meta", "ORDER BY rowid LIMIT 2"))
    heads = list(_rows(conn, "session_chain", "ORDER BY rowid LIMIT 2"))
    return meta, heads


def _session_id(given: str | bytes | None, meta: Sequence[Row]) -> str | bytes | None:
    """The id whose genesis starts the chain: the caller's (the file name's), else the one
    session_meta row's stored bytes."""
    if given is not None:
        return given
    if len(meta) == 1 and type(meta[0].values[0]) is bytes:
        sid: bytes = meta[0].values[0]
        return sid
    return None


def read_gap_records(conn: apsw.Connection) -> tuple[list[GapRecord], bool]:
    """The ``chain_gaps`` rows in sequence order, and whether there were more than
    MAX_GAP_RECORDS (then only that many are returned)."""
    rows = list(_rows(conn, "chain_gaps", f"ORDER BY sequence LIMIT {MAX_GAP_RECORDS + 1}"))
    return [GapRecord.from_row(r) for r in rows[:MAX_GAP_RECORDS]], len(rows) > MAX_GAP_RECORDS


def verify_full(
    conn: apsw.Connection,
    *,
    session_id: str | bytes | None = None,
    heads: bool = True,
    max_listed: int | None = 100,
) -> ChainReport:
    """Every row's hash in every table, every event's chain, every link, every derived row bound
    to an event, the gaps against their records, the head against what the walk found.

    ``heads=False`` ignores any session_chain row (a replacement being built, before its head
    is computed); ``max_listed=None`` keeps every break (what :func:`chain.gaps_to_record`
    needs)."""
    with _read_transaction(conn):
        meta, head_rows = _meta_and_heads(conn)
        records, excess = read_gap_records(conn)
        events = _rows(conn, "events", "ORDER BY sequence")
        derived = [_rows(conn, table, f"ORDER BY {key}, rowid") for table, key in REV3_BOUND]
        return walk(
            _session_id(session_id, meta),
            events,
            derived,
            meta=meta,
            heads=head_rows if heads else [],
            records=records,
            gap_records_excess=excess,
            max_listed=max_listed,
        )


def verify_quick(conn: apsw.Connection, *, session_id: str | bytes | None = None) -> ChainReport:
    """§7's O(1) chain work: the head (one row, its own hash), the last event and its bound rows
    (by index; producers by a scan of a few rows), head_sequence/head_hash, the four counts
    (``count(*)``, served by the smallest index), meta_hash and gap_count."""
    with _read_transaction(conn):
        meta, head_rows = _meta_and_heads(conn)
        last = next(_rows(conn, "events", "ORDER BY sequence DESC LIMIT 1"), None)
        bound: list[list[Row]] = []
        records: list[GapRecord] = []
        if last is not None:
            seq = last.values[0]
            for table, key in REV3_BOUND:
                tail = f"WHERE {key} = ? ORDER BY rowid LIMIT {MAX_BOUND}"
                bound.append(list(_rows(conn, table, tail, (seq,))))
            tail = "WHERE from_seq = ? ORDER BY sequence LIMIT 16"
            records = [GapRecord.from_row(r) for r in _rows(conn, "chain_gaps", tail, (seq,))]
        counts = {t: int(db.scalar(conn, f"SELECT count(*) FROM {t}")) for t in COUNTED}
        gap_count = int(db.scalar(conn, "SELECT count(*) FROM chain_gaps"))
        return quick_report(
            _session_id(session_id, meta),
            last,
            bound,
            counts,
            meta=meta,
            heads=head_rows,
            gap_count=gap_count,
            records=records,
        )


# ------------------------------------------------------------------------------- recovery


def _sql_values(row: Row) -> tuple[Any, ...]:
    """A row's values as SQL binds them (TEXT back to ``str``; agentdb wrote it: valid UTF-8)."""
    return tuple(
        v.decode("utf-8", "surrogatepass") if row.mask >> i & 1 and type(v) is bytes else v
        for i, v in enumerate(row.values)
    )


def _insert(conn: apsw.Connection, row: Row, verb: str = "INSERT") -> None:
    cols = (*REV3_HASHED[row.table], "content_hash")
    marks = ", ".join("?" * len(cols))
    conn.execute(
        f"{verb} INTO {row.table} ({', '.join(cols)}) VALUES ({marks})",
        (*_sql_values(row), row.content_hash),
    )


def record_gaps(conn: apsw.Connection, gaps: Sequence[Gap], recovered_at: str) -> list[Row]:
    """Append one ``chain_gaps`` row per gap (its sequence after any carried-over row, its hash
    computed), in the caller's transaction; return every gap row, carried and new, in sequence
    order (what :func:`chain.rebuild_head` hashes)."""
    start = int(
        db.scalar(
            conn,
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'chain_gaps'), 0),"
            " coalesce((SELECT max(sequence) FROM chain_gaps), 0))",
        )
    )
    for i, gap in enumerate(gaps, start + 1):
        _insert(conn, gap_row(i, gap, recovered_at))
    return list(_rows(conn, "chain_gaps", "ORDER BY sequence"))


def write_head(conn: apsw.Connection, head: Row) -> None:
    """Write (or replace) the ``session_chain`` row, in the caller's transaction."""
    if head.table != "session_chain":
        raise ValueError(f"not a session_chain row: {head.table}")
    _insert(conn, head, "INSERT OR REPLACE")


# --------------------------------------------------------------------------------- prefix


@dataclass(frozen=True)
class PrefixProof:
    """§11: is a copy proven to be a prefix of a session by the head link?"""

    proven: bool  # the copy's head is a link in the session's chain, with no gap at or below it
    identical: bool  # same head, same meta_hash, same gaps_hash
    reason: str  # why not (empty when proven): fall back to comparing rows


def proves_prefix(
    copy: apsw.Connection,
    session: apsw.Connection,
    *,
    copy_report: ChainReport | None = None,
    session_report: ChainReport | None = None,
) -> PrefixProof:
    """A copy C is a prefix of a session S when both pass full verification, S holds an event at
    C's ``head_sequence`` whose ``chain_hash`` is C's ``head_hash``, and neither has a recorded
    gap (but ``meta``, which says nothing of the append-only rows) at or below that sequence.
    (The design asks it of S; C's own gaps are excluded too: a recorded ``link`` gap in C
    leaves one of C's events unchained, so the induction would not reach below it.)

    Reports already made of the same read can be passed in; otherwise each file is walked."""
    c = copy_report or verify_full(copy)
    s = session_report or verify_full(session)
    if not c.ok or not s.ok or c.head is None or s.head is None:
        return PrefixProof(False, False, "a file does not pass full verification")
    h, hc = c.head.sequence, c.head.hash
    for name, rep in (("copy", c), ("session", s)):
        if any(
            g.gap is not None and g.gap.kind != "meta" and g.gap.from_seq <= h
            for g in rep.gap_records
        ):
            return PrefixProof(False, False, f"the {name} has a recorded gap at or below {h}")
    if h == 0:
        with _read_transaction(session):
            meta = list(_rows(session, "session_meta", "ORDER BY rowid LIMIT 2"))
        sid = _session_id(None, meta)
        linked = sid is not None and hc == genesis(sid)
    else:
        with _read_transaction(session):
            found = session.execute("SELECT chain_hash FROM events WHERE sequence = ?", (h,))
            linked = [r[0] for r in found] == [hc]
    if not linked:
        return PrefixProof(False, False, f"the session's chain does not hold the copy's head {h}")
    identical = (
        s.head.sequence == h
        and s.head.hash == hc
        and s.head["meta_hash"] == c.head["meta_hash"]
        and s.head["gaps_hash"] == c.head["gaps_hash"]
    )
    return PrefixProof(True, identical, "")


__all__ = [
    "DERIVED",
    "PrefixProof",
    "proves_prefix",
    "read_gap_records",
    "record_gaps",
    "verify_full",
    "verify_quick",
    "write_head",
]
