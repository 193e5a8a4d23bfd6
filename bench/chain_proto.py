"""A throw-away prototype of the damage-evident revision (docs/design/damage-evident-revision.md),
used only by ``bench/bench_chain_design.py`` to measure the design before it is released.

Not agentdb's schema: the scratch schema below is never written by agentdb's ladder, and its
user_version is left at 0. What it prototypes, as the design document specifies:

* ``row_hash(table, values)``: BLAKE2b-128 (person ``agentdb-row-v1``) over the table name and
  every column, each framed as rev 2 frames them (type tag, 8-byte length, bytes; integers as
  decimal ASCII, reals as big-endian IEEE doubles, TEXT as its stored UTF-8 bytes);
  ``events.content_hash`` stays revision 2's ``hashing.event_hash``;
* ``chain_hash(prev, content, derived)``: BLAKE2b-128 (person ``agentdb-chain-v1``) over
  prev ‖ content ‖ for each derived table a 4-byte count and that table's row hashes, sorted;
* the writer: one transaction writes the rows, their hashes, and the single ``session_chain``
  row (count, head, meta hash, gaps), exactly like ``SessionWriter._write`` otherwise;
* the verifier: full (every row, every link, the head) and quick (the head and the last event);
* the migration step from revision 2: ``INSERT ... SELECT`` into new tables, then rename.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
from tests.hash_reference import HASH, chain_hash, gaps_hash, genesis, row_hash, row_hash_raw

from agentdb import db
from agentdb.hashing import event_hash, event_hash_raw
from agentdb.schema.revisions import (
    REV2_COST_LEDGER,
    REV2_EVENTS,
    REV2_INDEXES,
    REV2_PLAN_ITEMS,
    REV2_PRODUCERS,
    REV2_SESSION_META,
)
from agentdb.store import SessionWriter
from agentdb.store.model import Event, now_timestamp
from agentdb.store.writer import _Rows

_H = f"BLOB NOT NULL CHECK (typeof({{c}}) = 'blob' AND length({{c}}) = {HASH})"

COLUMNS: dict[str, tuple[str, ...]] = {
    "events": (
        "sequence",
        "id",
        "timestamp",
        "kind",
        "producer_category",
        "producer_name",
        "producer_version",
        "schema_version",
        "payload",
    ),
    "session_meta": (
        "session_id",
        "parent_session_id",
        "profile",
        "status",
        "depth",
        "started_at",
        "ended_at",
    ),
    "cost_ledger": (
        "sequence",
        "event_sequence",
        "provider_name",
        "model_id",
        "input_tokens",
        "output_tokens",
        "cache_write_tokens",
        "cache_read_tokens",
        "cost_usd",
    ),
    "plan_items": (
        "sequence",
        "event_sequence",
        "turn_id",
        "tool_call_id",
        "provider_name",
        "tool_name",
        "decision",
        "decided_by",
    ),
    "producers": ("category", "name", "version", "first_seen_sequence"),
    "session_chain": (
        "id",
        "event_count",
        "cost_count",
        "plan_count",
        "producer_count",
        "head_sequence",
        "head_hash",
        "meta_hash",
        "gap_count",
        "gaps_hash",
        "origin",
        "origin_at",
    ),
    "chain_gaps": (
        "sequence",
        "kind",
        "from_seq",
        "to_seq",
        "expected_hash",
        "recovered_at",
    ),
}
# Derived tables, the column that names their event, and their tag in the chain.
DERIVED = (("cost_ledger", "event_sequence"), ("plan_items", "event_sequence"))
DERIVED += (("producers", "first_seen_sequence"),)


def _add_hash_column(ddl: str, column: str) -> str:
    assert ddl.endswith("\n)")
    return ddl[:-2] + f",\n  {column} " + _H.format(c=column) + "\n)"


EVENTS = _add_hash_column(_add_hash_column(REV2_EVENTS, "prev_hash"), "chain_hash")
COST_LEDGER = _add_hash_column(REV2_COST_LEDGER, "content_hash")
PLAN_ITEMS = _add_hash_column(REV2_PLAN_ITEMS, "content_hash")
PRODUCERS = REV2_PRODUCERS.replace(
    "  PRIMARY KEY",
    "  content_hash         " + _H.format(c="content_hash") + ",\n  PRIMARY KEY",
)
SESSION_CHAIN = f"""\
CREATE TABLE session_chain (
  id             INTEGER PRIMARY KEY CHECK (id = 1),
  event_count    INTEGER NOT NULL,
  cost_count     INTEGER NOT NULL,
  plan_count     INTEGER NOT NULL,
  producer_count INTEGER NOT NULL,
  head_sequence  INTEGER NOT NULL,
  head_hash      {_H.format(c="head_hash")},
  meta_hash      {_H.format(c="meta_hash")},
  gap_count      INTEGER NOT NULL,
  gaps_hash      {_H.format(c="gaps_hash")},
  origin         TEXT NOT NULL CHECK (origin IN ('created', 'migrated_from_1', 'migrated_from_2',
                                                 'recovered_from_1', 'recovered_from_2')),
  origin_at      TEXT NOT NULL,
  content_hash   {_H.format(c="content_hash")}
)"""
CHAIN_GAPS = f"""\
CREATE TABLE chain_gaps (
  sequence       INTEGER PRIMARY KEY AUTOINCREMENT,
  kind           TEXT NOT NULL CHECK (kind IN ('lost_events', 'lost_rows', 'lost_tail')),
  from_seq       INTEGER NOT NULL,
  to_seq         INTEGER NOT NULL,
  expected_hash  BLOB,
  recovered_at   TEXT NOT NULL,
  content_hash   {_H.format(c="content_hash")}
)"""
DDL = (
    ";\n".join(
        [EVENTS, REV2_SESSION_META, COST_LEDGER, PLAN_ITEMS, PRODUCERS, SESSION_CHAIN, CHAIN_GAPS]
    )
    + ";\n"
    + REV2_INDEXES
)

# ------------------------------------------------------------------------------ the hashing
# tests/hash_reference.py (imported above): one copy, which tests/test_hashing.py checks the
# product against.


def _sql_chain(prev: bytes, content: bytes, *blobs: bytes | None) -> bytes:
    derived = []
    for b in blobs:
        b = b or b""
        derived.append([b[i : i + HASH] for i in range(0, len(b), HASH)])
    return chain_hash(prev, content, derived)


def register(conn: apsw.Connection) -> None:
    conn.create_scalar_function("proto_row_hash", _sql_row_hash, -1, deterministic=True)
    conn.create_scalar_function("proto_chain", _sql_chain, 5, deterministic=True)
    conn.create_scalar_function("proto_genesis", genesis, 1, deterministic=True)
    conn.create_scalar_function("proto_gaps", lambda: gaps_hash([]), 0, deterministic=True)


def _sql_row_hash(table: str, mask: int, *values: Any) -> bytes:
    return row_hash_raw(table, mask, *values)


def raw_sql(table: str, prefix: str = "") -> str:
    """SQL arguments ``mask, v1, ..., vn`` for the hash of the current row of ``table``."""
    cols = [prefix + c for c in COLUMNS[table]]
    mask = " | ".join(f"((typeof({c}) = 'text') << {i})" for i, c in enumerate(cols))
    vals = ", ".join(f"iif(typeof({c}) = 'text', CAST({c} AS BLOB), {c})" for c in cols)
    return f"{mask}, {vals}"


# ------------------------------------------------------------------------------ the writer


@dataclass
class _Head:
    next_event: int
    next_cost: int
    next_plan: int
    row: list[Any]  # the session_chain row, without its content hash (COLUMNS order)


def _next(conn: apsw.Connection, table: str) -> int:
    return int(
        db.scalar(
            conn,
            f"SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name='{table}'), 0), "
            f"coalesce((SELECT max(sequence) FROM {table}), 0)) + 1",
        )
    )


class ProtoWriter(SessionWriter):
    """``SessionWriter`` writing the prototype schema: same validation, lock and transaction;
    plus the derived rows' hashes, the chain, and the head row in the same transaction."""

    _head: _Head | None = None

    @classmethod
    def create_scratch(cls, path: Path, session_id: str, profile: str = "bench") -> ProtoWriter:
        conn = db.open_writer(path, create=True)
        db.configure_writer(conn, path)
        register(conn)
        meta = (session_id, None, profile, "running", 0, now_timestamp(), None)
        head = (1, 0, 0, 0, 0, 0, genesis(session_id), row_hash("session_meta", meta), 0)
        head += (gaps_hash([]), "created", meta[5])
        with conn:
            db.exec_script(conn, DDL)
            conn.execute("INSERT INTO session_meta VALUES (?,?,?,?,?,?,?)", meta)
            conn.execute(
                "INSERT INTO session_chain VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (*head, row_hash("session_chain", head)),
            )
        return cls(conn, path, session_id, 3, None, "running")

    def _read_head(self) -> _Head:
        c = self.conn
        cols = ", ".join(COLUMNS["session_chain"])
        row = db.row(c, f"SELECT {cols} FROM session_chain WHERE id = 1")
        assert row is not None
        return _Head(_next(c, "events"), _next(c, "cost_ledger"), _next(c, "plan_items"), list(row))

    def _write(self, batch: list[Event]) -> list[int]:
        conn = self.conn
        out: list[int] = []
        stamp = now_timestamp()
        with db.translated(self.path):
            conn.execute("BEGIN IMMEDIATE")
            try:
                if self._producers is None:
                    self._producers = {
                        (str(c), str(n), str(v))
                        for c, n, v in db.rows(
                            conn, "SELECT category, name, version FROM producers"
                        )
                    }
                if self._head is None:
                    self._head = self._read_head()
                h = self._head
                seq = h.next_event
                rows = _Rows()
                for ev in batch:
                    self._collect(ev, seq, stamp, rows)
                    out.append(seq)
                    seq += 1
                by_event: dict[int, tuple[list[bytes], list[bytes], list[bytes]]] = {}

                def bucket(s: int) -> tuple[list[bytes], list[bytes], list[bytes]]:
                    b = by_event.get(s)
                    if b is None:
                        b = by_event[s] = ([], [], [])
                    return b

                costs, plans, prods = [], [], []
                cseq, pseq = h.next_cost, h.next_plan
                for r in rows.costs:
                    full = (cseq, *r)
                    ch = row_hash("cost_ledger", full)
                    costs.append((*full, ch))
                    bucket(r[0])[0].append(ch)
                    cseq += 1
                for r in rows.plans:
                    full = (pseq, *r)
                    ch = row_hash("plan_items", full)
                    plans.append((*full, ch))
                    bucket(r[0])[1].append(ch)
                    pseq += 1
                for r in rows.producers:
                    ch = row_hash("producers", r)
                    prods.append((*r, ch))
                    bucket(r[3])[2].append(ch)
                prev = h.row[6]
                events = []
                empty: tuple[list[bytes], list[bytes], list[bytes]] = ([], [], [])
                for r in rows.events:
                    link = chain_hash(prev, r[-1], by_event.get(r[0], empty))
                    events.append((*r, prev, link))
                    prev = link
                insert = (
                    "INSERT INTO events (sequence, id, timestamp, kind, producer_category, "
                    "producer_name, producer_version, schema_version, payload, content_hash, "
                    "prev_hash, chain_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
                )
                if len(events) == 1:
                    conn.execute(insert, events[0])
                else:
                    conn.executemany(insert, events)
                if prods:
                    conn.executemany(
                        "INSERT INTO producers (category, name, version, first_seen_sequence, "
                        "content_hash) VALUES (?,?,?,?,?)",
                        prods,
                    )
                if costs:
                    conn.executemany("INSERT INTO cost_ledger VALUES (?,?,?,?,?,?,?,?,?,?)", costs)
                if plans:
                    conn.executemany("INSERT INTO plan_items VALUES (?,?,?,?,?,?,?,?,?)", plans)
                head = list(h.row)
                head[1] += len(events)
                head[2] += len(costs)
                head[3] += len(plans)
                head[4] += len(prods)
                head[5], head[6] = seq - 1, prev
                conn.execute(
                    "UPDATE session_chain SET event_count = ?, cost_count = ?, plan_count = ?, "
                    "producer_count = ?, head_sequence = ?, head_hash = ?, content_hash = ? "
                    "WHERE id = 1",
                    (*head[1:7], row_hash("session_chain", head)),
                )
                conn.execute("COMMIT")
            except BaseException:
                self._head = None
                self._producers = None
                if not conn.get_autocommit():
                    conn.execute("ROLLBACK")
                raise
        h.next_event, h.next_cost, h.next_plan, h.row = seq, cseq, pseq, head
        return out

    def set_status(self, status: str, *, at: str | None = None) -> None:
        with self._lock, db.translated(self.path):
            c = self.conn
            c.execute("BEGIN IMMEDIATE")
            try:
                ended = None if status == "running" else (at or now_timestamp())
                c.execute("UPDATE session_meta SET status = ?, ended_at = ?", (status, ended))
                meta = db.row(c, "SELECT * FROM session_meta")
                assert meta is not None
                cols = ", ".join(COLUMNS["session_chain"])
                head = list(db.row(c, f"SELECT {cols} FROM session_chain") or ())
                head[7] = row_hash("session_meta", meta)
                c.execute(
                    "UPDATE session_chain SET meta_hash = ?, content_hash = ? WHERE id = 1",
                    (head[7], row_hash("session_chain", head)),
                )
                c.execute("COMMIT")
            except BaseException:
                if not c.get_autocommit():
                    c.execute("ROLLBACK")
                raise
            self._status = status
            self._head = None


# ------------------------------------------------------------------------------ the verifier


def _select_raw(table: str, extra: str = "", order: str = "rowid") -> str:
    return f"SELECT {raw_sql(table)}{extra} FROM {table} ORDER BY {order}"


def verify_full(conn: apsw.Connection) -> list[str]:
    """Every row's hash, every link, and the head. Returns what failed (empty: proven)."""
    problems: list[str] = []
    meta = list(conn.execute(_select_raw("session_meta")))
    if len(meta) != 1:
        return [f"{len(meta)} session_meta rows"]
    sid = meta[0][1]
    meta_hash = row_hash_raw("session_meta", *meta[0])
    derived: dict[Any, tuple[list[bytes], list[bytes], list[bytes]]] = {}
    for i, (table, key) in enumerate(DERIVED):
        for row in conn.execute(_select_raw(table, f", content_hash, {key}")):
            *raw, stored, event = row
            if row_hash_raw(table, *raw) != stored:
                problems.append(f"{table} row hash")
            derived.setdefault(event, ([], [], []))[i].append(stored)
    counts = {t: 0 for t, _ in DERIVED}
    for i, (table, _key) in enumerate(DERIVED):
        counts[table] = sum(len(v[i]) for v in derived.values())
    prev_chain, prev_seq, count = genesis(sid), 0, 0
    empty: tuple[list[bytes], list[bytes], list[bytes]] = ([], [], [])
    sql = f"SELECT sequence, {raw_sql('events')}, content_hash, prev_hash, chain_hash FROM events"
    for row in conn.execute(sql + " ORDER BY sequence"):
        seq, mask, *rest = row
        raw, content, prev, link = rest[:-3], rest[-3], rest[-2], rest[-1]
        count += 1
        if event_hash_raw(mask, *raw) != content:
            problems.append(f"event {seq} content hash")
        if seq != prev_seq + 1:
            problems.append(f"sequence gap {prev_seq + 1}-{seq - 1}")
        if prev != prev_chain:
            problems.append(f"link broken before {seq}")
        if chain_hash(prev, content, derived.pop(seq, empty)) != link:
            problems.append(f"event {seq} chain hash")
        prev_chain, prev_seq = link, seq
    if derived:
        problems.append(f"derived rows bound to no event: {sorted(map(str, derived))[:3]}")
    counts["events"] = count
    problems += _head_problems(conn, meta_hash, counts, prev_seq, prev_chain, full=True)
    return problems


def _head_problems(
    conn: apsw.Connection,
    meta_hash: bytes,
    counts: dict[str, int],
    last_seq: int,
    last_chain: bytes,
    *,
    full: bool,
) -> list[str]:
    heads = list(conn.execute(_select_raw("session_chain", ", content_hash")))
    if len(heads) != 1:
        return [f"{len(heads)} session_chain rows"]
    *raw, stored = heads[0]
    problems = []
    if row_hash_raw("session_chain", *raw) != stored:
        problems.append("session_chain row hash")
    _mask, _id, *stored_counts, head_seq, head_hash, head_meta, gap_n, gaps, _o, _at = raw
    for table, n in zip(("events", *(t for t, _ in DERIVED)), stored_counts, strict=True):
        if n != counts[table]:
            problems.append(f"{table} count {n}, found {counts[table]}")
    if head_seq != last_seq or head_hash != last_chain:
        problems.append(f"head at {head_seq}, last event {last_seq}")
    if head_meta != meta_hash:
        problems.append("session_meta does not match its hash")
    gap_rows = list(conn.execute(_select_raw("chain_gaps", ", content_hash")))
    if gap_n != len(gap_rows):
        problems.append(f"gap_count {gap_n}, found {len(gap_rows)}")
    if full:
        hashes = []
        for row in gap_rows:
            *graw, gstored = row
            if row_hash_raw("chain_gaps", *graw) != gstored:
                problems.append("chain_gaps row hash")
            hashes.append(gstored)
        if gaps_hash(hashes) != gaps:
            problems.append("gaps_hash")
    return problems


def verify_quick(conn: apsw.Connection) -> list[str]:
    """The head against the last event (its own hashes and derived rows, by index: O(log n)
    reads) and the row count of every table against the head's (count(*) reads the pages of
    each table's smallest index)."""
    meta = list(conn.execute(_select_raw("session_meta")))
    if len(meta) != 1:
        return [f"{len(meta)} session_meta rows"]
    problems = []
    sql = f"SELECT sequence, {raw_sql('events')}, content_hash, prev_hash, chain_hash FROM events"
    last = list(conn.execute(sql + " ORDER BY sequence DESC LIMIT 1"))
    if last:
        seq, mask, *rest = last[0]
        raw, content, prev, link = rest[:-3], rest[-3], rest[-2], rest[-1]
        if event_hash_raw(mask, *raw) != content:
            problems.append(f"event {seq} content hash")
        derived = []
        for table, key in DERIVED:
            hs = []
            for row in conn.execute(
                f"SELECT {raw_sql(table)}, content_hash FROM {table} WHERE {key} = ?", (seq,)
            ):
                *r, stored = row
                if row_hash_raw(table, *r) != stored:
                    problems.append(f"{table} row hash")
                hs.append(stored)
            derived.append(hs)
        if chain_hash(prev, content, derived) != link:
            problems.append(f"event {seq} chain hash")
        last_seq, last_chain = seq, link
    else:
        last_seq, last_chain = 0, genesis(meta[0][1])
    counts = {
        t: int(db.scalar(conn, f"SELECT count(*) FROM {t}"))
        for t in ("events", *(t for t, _ in DERIVED))
    }
    meta_hash = row_hash_raw("session_meta", *meta[0])
    return problems + _head_problems(conn, meta_hash, counts, last_seq, last_chain, full=False)


# ------------------------------------------------------------------------------ migration


def _rebuild(table: str, ddl: str, select: str) -> str:
    new = f"{table}_agentdb_new"
    ddl = ddl.replace(f"CREATE TABLE {table} (", f"CREATE TABLE {new} (", 1)
    return (
        f"{ddl};\nINSERT INTO {new} {select};\n"
        f"DROP TABLE {table};\nALTER TABLE {new} RENAME TO {table};\n"
    )


def _derived_select(table: str) -> str:
    cols = ", ".join(COLUMNS[table])
    return (
        f"({cols}, content_hash) SELECT {cols}, proto_row_hash('{table}', {raw_sql(table)}) "
        f"FROM {table} ORDER BY rowid"
    )


def _agg(table: str, key: str, alias: str) -> str:
    return (
        f"(SELECT unhex(group_concat(hex(content_hash), '' ORDER BY content_hash)) "
        f"FROM {table} WHERE {key} = {alias}.sequence)"
    )


_EV = ", ".join(COLUMNS["events"])
_EV_E = ", ".join("e." + c for c in COLUMNS["events"])
_AGGS = ", ".join(_agg(t, k, "e") for t, k in DERIVED)
_SID = "(SELECT CAST(session_id AS BLOB) FROM session_meta)"

# The events rebuild as one recursive query: the chain is a fold, so each link needs the one
# before it; the CTE walks events in sequence order and carries (sequence, prev, chain).
EVENTS_BY_CTE = (
    f"({_EV}, content_hash, prev_hash, chain_hash) "
    "WITH RECURSIVE ch(seq, prev, link) AS ("
    f" SELECT -9223372036854775808, NULL, proto_genesis({_SID})"
    " UNION ALL"
    f" SELECT e.sequence, ch.link, proto_chain(ch.link, e.content_hash, {_AGGS})"
    " FROM ch JOIN events e ON e.sequence ="
    " (SELECT min(sequence) FROM events WHERE sequence > ch.seq))"
    f" SELECT {_EV_E}, e.content_hash, ch.prev, ch.link FROM ch"
    " JOIN events e ON e.sequence = ch.seq ORDER BY ch.seq"
)

_HEAD_SELECT = (
    "INSERT INTO session_chain SELECT 1, n, nc, np, nr, s, h, m, 0, g, o, t, "
    "proto_row_hash('session_chain', 3072, 1, n, nc, np, nr, s, h, m, 0, g, "
    "CAST(o AS BLOB), CAST(t AS BLOB)) FROM (SELECT "
    "(SELECT count(*) FROM events) AS n, "
    "(SELECT count(*) FROM cost_ledger) AS nc, "
    "(SELECT count(*) FROM plan_items) AS np, "
    "(SELECT count(*) FROM producers) AS nr, "
    "'migrated_from_2' AS o, strftime('%Y-%m-%dT%H:%M:%fZ') AS t, "
    "coalesce((SELECT max(sequence) FROM events), 0) AS s, "
    "coalesce((SELECT chain_hash FROM events ORDER BY sequence DESC LIMIT 1), "
    f"proto_genesis({_SID})) AS h, "
    f"(SELECT proto_row_hash('session_meta', {raw_sql('session_meta')}) FROM session_meta) AS m, "
    "proto_gaps() AS g)"
)


def step_sql(events_by_cte: bool = True) -> str:
    """The prototype 2 -> 3 step. Without ``events_by_cte`` the events rebuild is left to
    :func:`rebuild_events_streaming` (the step's text stops after the derived tables)."""
    sql = "".join(
        _rebuild(t, ddl, _derived_select(t))
        for t, ddl in (
            ("cost_ledger", COST_LEDGER),
            ("plan_items", PLAN_ITEMS),
            ("producers", PRODUCERS),
        )
    )
    # the fold looks derived rows up by event: their indexes first (DROP TABLE dropped them)
    sql += _DERIVED_INDEXES
    if events_by_cte:
        sql += _rebuild("events", EVENTS, EVENTS_BY_CTE) + _tail()
    return sql


_DERIVED_INDEXES = (
    "CREATE INDEX idx_cost_ledger_event ON cost_ledger(event_sequence);\n"
    "CREATE INDEX idx_plan_items_event ON plan_items(event_sequence);\n"
)


def _tail() -> str:
    events_indexes = REV2_INDEXES.replace(_DERIVED_INDEXES, "")
    assert events_indexes != REV2_INDEXES
    return events_indexes + SESSION_CHAIN + ";\n" + CHAIN_GAPS + ";\n" + _HEAD_SELECT + ";\n"


def _derived_stream(conn: apsw.Connection, table: str, key: str) -> Iterable[tuple[int, bytes]]:
    cur = conn.cursor()
    yield from cur.execute(f"SELECT {key}, content_hash FROM {table} ORDER BY {key}")


def rebuild_events_streaming(conn: apsw.Connection, batch: int = 5000) -> None:
    """The events rebuild with the fold in Python over hashes only: (sequence, content_hash)
    read in sequence order, each derived table read once in event order beside it (a merge,
    no per-event lookup), the links kept in a temporary table; then one ``INSERT ... SELECT``
    joins them to the rows, so payloads never pass through Python."""
    conn.execute("CREATE TEMP TABLE agentdb_links (seq INTEGER PRIMARY KEY, prev BLOB, link BLOB)")
    sid = db.scalar(conn, "SELECT CAST(session_id AS BLOB) FROM session_meta")
    prev = genesis(sid)
    streams = [iter(_derived_stream(conn, t, k)) for t, k in DERIVED]
    heads: list[tuple[int, bytes] | None] = [next(s, None) for s in streams]
    pending: list[tuple[Any, ...]] = []
    insert = "INSERT INTO agentdb_links VALUES (?,?,?)"
    reader = conn.cursor()
    for seq, content in reader.execute(
        "SELECT sequence, content_hash FROM events ORDER BY sequence"
    ):
        derived: list[list[bytes]] = [[], [], []]
        for i, s in enumerate(streams):
            h = heads[i]
            while h is not None and h[0] <= seq:
                if h[0] == seq:
                    derived[i].append(h[1])
                h = next(s, None)
            heads[i] = h
        link = chain_hash(prev, content, derived)
        pending.append((seq, prev, link))
        prev = link
        if len(pending) >= batch:
            conn.executemany(insert, pending)
            pending.clear()
    if pending:
        conn.executemany(insert, pending)
    select = (
        f"({_EV}, content_hash, prev_hash, chain_hash) SELECT {_EV_E}, e.content_hash, l.prev, "
        "l.link FROM events e JOIN agentdb_links l ON l.seq = e.sequence ORDER BY e.sequence"
    )
    db.exec_script(conn, _rebuild("events", EVENTS, select) + _tail() + "DROP TABLE agentdb_links;")


def migrate(conn: apsw.Connection, *, events_by_cte: bool = True) -> None:
    """Run the prototype step on an open revision-2 file in one transaction, with the checks
    agentdb's ladder runs before COMMIT (foreign_key_check, integrity_check)."""
    register(conn)
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("BEGIN IMMEDIATE")
    try:
        db.exec_script(conn, step_sql(events_by_cte))
        if not events_by_cte:
            rebuild_events_streaming(conn)
        conn.execute("PRAGMA user_version=0")
        bad = [r[0] for r in conn.execute("PRAGMA integrity_check(5)")]
        assert bad == ["ok"], bad
        conn.execute("COMMIT")
    except BaseException:
        if not conn.get_autocommit():
            conn.execute("ROLLBACK")
        raise


__all__ = ["ProtoWriter", "event_hash", "migrate", "verify_full", "verify_quick"]
