"""Engine b (and the diagnosis): read every table through SQLite on a private copy.

Never run on the original: the caller copies the database and its WAL into a private temporary
directory first (SQLite may build a ``-shm`` there, or checkpoint). Each table is read in rowid
order; when SQLite reports damage, the reader steps around it: the row right after the last good
one is skipped if the b-tree still finds its key, else the next readable key is found by probing
exponentially growing rowid distances and bisecting back. Everything reachable by b-tree traversal
is saved; what lies under a damaged page is left to engine c.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors
from agentdb.salvage import tables
from agentdb.salvage.tables import Row
from agentdb.schema.identity import identify, schema_differences
from agentdb.schema.revisions import COLUMNS, CURRENT_REVISION


@dataclass
class Diagnosis:
    """Whether a session file needs recovery, judged on a private copy."""

    damaged: bool  # integrity, readability, hashes, WAL or shape say so
    reasons: list[str] = field(default_factory=list)  # why, one line each
    refused: str | None = None  # foreign / too new: never recovered (reason)
    revision: int | None = None  # user_version when readable
    integrity_only: bool = False  # only integrity_check complains (tables may be intact)


@dataclass
class RowSalvage:
    """What engine b read."""

    rows: dict[str, dict[Any, Row]] = field(default_factory=dict)  # table -> key -> row
    sequences: dict[str, int] = field(default_factory=dict)  # sqlite_sequence counters
    event_hashes: dict[int, bytes] = field(default_factory=dict)  # stored content hashes
    rejected: Counter[str] = field(default_factory=Counter)
    damaged_regions: int = 0  # times a read had to step around damage
    complete: bool = False  # every table was read start to end without an error
    notes: list[str] = field(default_factory=list)


def open_copy(path: Path) -> apsw.Connection:
    """A hardened read-only connection to a private copy (refuses triggers and views)."""
    return db.open_readonly(path)


def diagnose(conn: apsw.Connection | None, open_error: BaseException | None) -> Diagnosis:
    """Judge a file from a connection to its copy (or from the error opening it)."""
    if conn is None:
        if isinstance(open_error, errors.UnsafeSchema):
            return Diagnosis(False, [str(open_error)], refused="unsafe_schema")
        return Diagnosis(True, [f"SQLite cannot open it: {open_error}"])
    try:
        ident = identify(conn)
    except apsw.Error as e:
        return Diagnosis(True, [f"SQLite cannot read its header or schema: {e}"])
    if ident.kind in ("foreign", "too_new", "empty"):
        return Diagnosis(False, [ident.problem or ident.kind], refused=ident.kind)
    d = Diagnosis(False, revision=ident.revision)
    try:
        problems = db.integrity_problems(conn)
        if problems:
            d.reasons += [f"integrity_check: {p}" for p in problems[:5]]
    except apsw.Error as e:
        d.reasons.append(f"integrity_check fails: {type(e).__name__}: {e}")
    seen_by_integrity = len(d.reasons)
    try:
        diffs = schema_differences(conn, ident.revision)
        if diffs:
            d.reasons.append(f"schema differs from revision {ident.revision}: {diffs[0]}")
        if not diffs:
            ids = [r[0] for r in conn.execute("SELECT session_id FROM session_meta LIMIT 2")]
            if len(ids) != 1:
                d.reasons.append(f"session_meta holds {len(ids)} rows, expected 1")
            if ident.revision >= 2:
                bad = conn.execute(
                    "SELECT count(*) FROM events NOT INDEXED WHERE content_hash IS NOT "
                    "agentdb_event_hash(sequence, id, timestamp, kind, producer_category, "
                    "producer_name, producer_version, schema_version, payload)"
                ).fetchall()[0][0]
                if bad:
                    d.reasons.append(f"{bad} events do not match their content_hash")
    except apsw.Error as e:
        d.reasons.append(f"reading it fails: {type(e).__name__}: {e}")
    d.integrity_only = seen_by_integrity > 0 and len(d.reasons) == seen_by_integrity
    d.damaged = bool(d.reasons)
    return d


def _columns(table: str, revision: int) -> list[str]:
    cols = list(COLUMNS[1][table])
    if table == "events" and revision >= 2:
        cols.append("content_hash")
    return cols


def salvage_rows(
    conn: apsw.Connection,
    session_id: str,
    revision: int,
    verified: dict[int, tuple[Row, bytes]] | None = None,
) -> RowSalvage:
    """Read every table of the copy, stepping around damaged regions.

    ``verified`` holds (row, content_hash) pairs another engine already checked: an identical
    row with an identical stored hash is not hashed again.
    """
    known = verified or {}
    out = RowSalvage()
    rev = min(max(revision, 1), CURRENT_REVISION)
    complete = True
    for table in tables.TABLES:
        found: dict[Any, Row] = {}
        out.rows[table] = found
        cols = _columns(table, rev)
        sql = f"SELECT rowid, {', '.join(cols)} FROM {table} WHERE rowid > ? ORDER BY rowid"

        def take(r: tuple[Any, ...], table: str = table, found: dict[Any, Row] = found) -> None:
            values = tables.normalise(table, r[1 : 1 + len(COLUMNS[1][table])])
            why = tables.problem(table, values, session_id)
            if why is None and table == "events" and rev >= 2:
                stored = r[-1]
                if known.get(values[0]) != (values, stored):
                    why = tables.hash_problem(values, stored)
                if why is None:
                    out.event_hashes[values[0]] = stored
            if why is not None:
                out.rejected[f"{table}: {why}"] += 1
                return
            found[tables.key_of(table, values)] = values

        try:
            complete &= _read_stepping(conn, table, sql, take, out)
        except apsw.Error as e:
            out.notes.append(f"rows engine: {table} unreadable ({type(e).__name__})")
            complete = False
    try:
        for name, seq in conn.execute("SELECT name, seq FROM sqlite_sequence"):
            if isinstance(name, str) and isinstance(seq, int):
                out.sequences[name] = max(seq, out.sequences.get(name, 0))
    except apsw.Error:
        complete = False
    out.complete = complete
    return out


def _probe(conn: apsw.Connection, table: str, at: int) -> tuple[bool, int | None]:
    """(seek succeeded, first rowid >= at)."""
    try:
        row = conn.execute(
            f"SELECT rowid FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1", (at,)
        ).fetchone()
    except apsw.Error:
        return False, None
    return True, None if row is None else int(row[0])


def _read_stepping(
    conn: apsw.Connection,
    table: str,
    sql: str,
    take: Callable[[tuple[Any, ...]], None],
    out: RowSalvage,
) -> bool:
    after = -(1 << 63)
    clean = True
    while True:
        progressed = False
        try:
            for r in conn.execute(sql, (after,)):
                progressed = True
                after = int(r[0])
                take(tuple(r))
            return clean
        except apsw.Error as e:
            if isinstance(e, apsw.InterruptError | apsw.NoMemError):
                raise
            clean = False
            out.damaged_regions += 1
        if progressed:
            continue
        if after >= tables.MAX_ROWID:
            return clean
        ok, nxt = _probe(conn, table, after + 1)
        if ok:
            if nxt is None:
                return clean
            out.rejected[f"{table}: row unreadable through SQLite"] += 1
            after = nxt  # the b-tree finds the key but not the row: skip that one row
            continue
        nxt_start = _next_readable(conn, table, after)
        if nxt_start is None:
            return clean
        after = nxt_start - 1


def _next_readable(conn: apsw.Connection, table: str, after: int) -> int | None:
    """Smallest g > after whose seek succeeds (exponential search, then bisection)."""
    bad = after + 1
    step = 1
    good: int | None = None
    while True:
        step *= 2
        g = after + step
        if g > tables.MAX_ROWID:
            g = tables.MAX_ROWID
        ok, _ = _probe(conn, table, g)
        if ok:
            good = g
            break
        bad = g
        if g == tables.MAX_ROWID:
            return None
    while good - bad > 1:
        mid = (good + bad) // 2
        ok, _ = _probe(conn, table, mid)
        if ok:
            good = mid
        else:
            bad = mid
    return good
