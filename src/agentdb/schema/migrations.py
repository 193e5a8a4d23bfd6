"""The migration ladder: one released, never-edited step per revision increment.

A file is migrated in one ``BEGIN IMMEDIATE`` transaction that runs every step it needs, sets
``user_version`` and ``application_id``, restores the AUTOINCREMENT counters the table rebuilds
dropped, and runs ``foreign_key_check`` and ``integrity_check`` before ``COMMIT``; anything wrong
rolls the whole file back. ``PRAGMA foreign_keys`` is a no-op inside a transaction, so it is
turned off before ``BEGIN`` and restored after.

Size: over 500 lines because it is the released steps are kept verbatim (never edited, pinned by
tests/test_schema.py) beside the ladder that runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors, faults, hashing
from agentdb.schema import enums
from agentdb.schema.revisions import (
    APPLICATION_ID,
    COLUMNS,
    CURRENT_REVISION,
    KNOWN_DDL,
    REV2_EVENTS,
    REV2_INDEXES,
    REV2_PLAN_ITEMS,
    REV2_PRODUCERS,
    REV2_SESSION_META,
    REV3_BOUND,
    REV3_CHAIN_GAPS,
    REV3_COST_LEDGER,
    REV3_EVENTS,
    REV3_HASHED,
    REV3_PLAN_ITEMS,
    REV3_PRODUCERS,
    REV3_SESSION_CHAIN,
)


@dataclass(frozen=True)
class Precheck:
    """A query returning the first row that would make the step fail, and how to say so."""

    sql: str  # returns (key, value) of the first offending row, or nothing
    message: str  # format string with {key} and {value}


@dataclass(frozen=True)
class Step:
    """One released migration step. Its text is pinned by a test and never edited."""

    revision: int  # the revision this step produces (it applies to revision - 1)
    description: str  # one line for reports
    sql: str  # the step itself, run as one script inside the migration transaction
    prechecks: tuple[Precheck, ...] = ()


def _rebuild(table: str, new_ddl: str, columns: str, select: str | None = None) -> str:
    new = f"{table}_agentdb_new"
    ddl = new_ddl.replace(f"CREATE TABLE {table} (", f"CREATE TABLE {new} (", 1)
    return (
        f"{ddl};\n"
        f"INSERT INTO {new} ({columns}) SELECT {select or columns} FROM {table} "
        f"ORDER BY rowid;\n"
        f"DROP TABLE {table};\n"
        f"ALTER TABLE {new} RENAME TO {table};\n"
    )


_EVENT_COLS = (
    "sequence, id, timestamp, kind, producer_category, producer_name, producer_version, "
    "schema_version, payload"
)

STEP_2 = Step(
    revision=2,
    description=(
        "enum CHECK constraints on events, session_meta, plan_items and producers; "
        "events.content_hash; indexes on cost_ledger and plan_items event_sequence"
    ),
    sql=(
        _rebuild(
            "events",
            REV2_EVENTS,
            _EVENT_COLS + ", content_hash",
            _EVENT_COLS + f", agentdb_event_hash({_EVENT_COLS})",
        )
        + _rebuild(
            "session_meta",
            REV2_SESSION_META,
            "session_id, parent_session_id, profile, status, depth, started_at, ended_at",
        )
        + _rebuild(
            "plan_items",
            REV2_PLAN_ITEMS,
            "sequence, event_sequence, turn_id, tool_call_id, provider_name, tool_name, "
            "decision, decided_by",
        )
        + _rebuild("producers", REV2_PRODUCERS, "category, name, version, first_seen_sequence")
        + REV2_INDEXES
    ),
    prechecks=(
        Precheck(
            f"SELECT sequence, kind FROM events WHERE kind NOT IN ({enums.sql_in(enums.KINDS)}) "
            "ORDER BY sequence LIMIT 1",
            "events row sequence={key} has kind {value!r}, not one of the spec's ten kinds",
        ),
        Precheck(
            "SELECT sequence, producer_category FROM events WHERE producer_category NOT IN "
            f"({enums.sql_in(enums.PRODUCER_CATEGORIES)}) ORDER BY sequence LIMIT 1",
            "events row sequence={key} has producer_category {value!r}, not a plugin category "
            "or 'kernel'",
        ),
        Precheck(
            "SELECT session_id, status FROM session_meta WHERE status NOT IN "
            f"({enums.sql_in(enums.STATUSES)}) LIMIT 1",
            "session_meta row session_id={key} has status {value!r}, not one of the spec's seven",
        ),
        Precheck(
            "SELECT sequence, decision FROM plan_items WHERE decision NOT IN "
            f"({enums.sql_in(enums.DECISIONS)}) ORDER BY sequence LIMIT 1",
            "plan_items row sequence={key} has decision {value!r}, not allow, ask or deny",
        ),
        Precheck(
            "SELECT name || ' ' || version, category FROM producers WHERE category NOT IN "
            f"({enums.sql_in(enums.PRODUCER_CATEGORIES)}) LIMIT 1",
            "producers row {key} has category {value!r}, not a plugin category or 'kernel'",
        ),
    ),
)


# ------------------------------------------------------------------------------ step 3
# The damage-evident revision (docs/design/damage-evident-revision.md §10): released, on the
# ladder, its text pinned by tests/test_schema.py (never edited: a change is a new step).

MIGRATION_START_SQL_FUNCTION = "agentdb_migration_start"  # the revision the ladder started at


def _raw_args(table: str, prefix: str = "") -> str:
    """SQL arguments ``text_mask, v1, ..., vn`` of ``agentdb_row_hash`` for the current row of
    ``table``: TEXT as its stored bytes, never decoded."""
    cols = tuple(prefix + c for c in REV3_HASHED[table])
    vals = ", ".join(hashing.as_bytes_sql(c) for c in cols)
    return f"{hashing.text_mask_sql(cols)}, {vals}"


def _rehash(table: str, ddl: str) -> str:
    cols = ", ".join(REV3_HASHED[table])
    select = f"{cols}, {hashing.ROW_HASH_SQL_FUNCTION}('{table}', {_raw_args(table)})"
    return _rebuild(table, ddl, cols + ", content_hash", select)


def _bound(table: str, key: str) -> str:
    # the bound rows' hashes, concatenated (NULL: none); the function sorts them
    return (
        f"(SELECT unhex(group_concat(hex(content_hash), '' ORDER BY content_hash)) "
        f"FROM {table} WHERE {key} = e.sequence)"
    )


_EV = ", ".join(COLUMNS[1]["events"])
_EV_E = ", ".join("e." + c for c in COLUMNS[1]["events"])
_SESSION_BYTES = "(SELECT CAST(session_id AS BLOB) FROM session_meta)"
# The chain is a fold (each link needs the one before): one recursive query walks events in
# sequence order carrying (sequence, prev, link); the rows are copied, never updated in place.
_EVENTS_3 = (
    REV3_EVENTS.replace("CREATE TABLE events (", "CREATE TABLE events_agentdb_new (", 1)
    + ";\n"
    + f"INSERT INTO events_agentdb_new ({_EV}, content_hash, prev_hash, chain_hash) "
    # the anchor's seq is NULL (no event's: revision 1 allows any integer, the lowest too);
    # each step finds the next event by the primary key (an OR in one WHERE would scan)
    "WITH RECURSIVE ch(seq, prev, link) AS ("
    f"SELECT NULL, NULL, {hashing.GENESIS_SQL_FUNCTION}({_SESSION_BYTES}) "
    "UNION ALL "
    f"SELECT e.sequence, ch.link, {hashing.CHAIN_HASH_SQL_FUNCTION}(ch.link, e.content_hash, "
    + ", ".join(_bound(t, k) for t, k in REV3_BOUND)
    + ") FROM ch JOIN events e ON e.sequence = iif(ch.seq IS NULL, "
    "(SELECT min(sequence) FROM events), "
    "(SELECT min(sequence) FROM events WHERE sequence > ch.seq))) "
    f"SELECT {_EV_E}, e.content_hash, ch.prev, ch.link FROM ch "
    "JOIN events e ON e.sequence = ch.seq ORDER BY ch.seq;\n"
    "DROP TABLE events;\n"
    "ALTER TABLE events_agentdb_new RENAME TO events;\n"
)
# The breaks the fold's chain shows before any emit, recorded as a recovery records its own
# (design §6): a file recovered at revision 1 or 2 lacks the events it lost, and its rows of
# those events were kept. Each sequence jump (the fold links across it: kind tail, A19); a first
# event at sequence 0 or below (kind link, its prev_hash the genesis); numbers issued past the
# last event — sqlite_sequence, or a row bound to a later event (kind tail). A file with none
# gets no row. Run before the events rebuild, which resets the events counter (apply_steps puts
# it back after the steps).
_GAP_TIME = "strftime('%Y-%m-%dT%H:%M:%fZ')"
_GAPS_3 = (
    "INSERT INTO chain_gaps (sequence, kind, from_seq, to_seq, expected_hash, recovered_at, "
    "content_hash) SELECT n, k, lo, hi, x, t, "
    f"{hashing.ROW_HASH_SQL_FUNCTION}('chain_gaps', 34, n, CAST(k AS BLOB), lo, hi, x, "
    "CAST(t AS BLOB)) FROM (SELECT row_number() OVER (ORDER BY lo) AS n, k, lo, hi, x, "
    f"{_GAP_TIME} AS t FROM ("
    "SELECT 'tail' AS k, p + 1 AS lo, sequence - 1 AS hi, NULL AS x FROM (SELECT sequence, "
    "lag(sequence, 1, 0) OVER (ORDER BY sequence) AS p FROM events) WHERE sequence > p + 1 "
    "UNION ALL "
    f"SELECT 'link', sequence, sequence, {hashing.GENESIS_SQL_FUNCTION}({_SESSION_BYTES}) "
    "FROM events "
    "WHERE sequence = (SELECT min(sequence) FROM events) AND sequence <= 0 "
    "UNION ALL "
    "SELECT 'tail', last + 1, hi, NULL FROM (SELECT "
    "coalesce((SELECT max(sequence) FROM events), 0) AS last, max("
    "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), "
    "coalesce((SELECT max(event_sequence) FROM cost_ledger), 0), "
    "coalesce((SELECT max(event_sequence) FROM plan_items), 0), "
    "coalesce((SELECT max(first_seen_sequence) FROM producers), 0)) AS hi) WHERE hi > last"
    "));\n"
)
_HEAD_COLS = ", ".join(REV3_HASHED["session_chain"])
# origin (bit 10) and origin_at (bit 12) are TEXT
_HEAD_3 = (
    f"INSERT INTO session_chain ({_HEAD_COLS}, content_hash) "
    "SELECT 1, n, nc, np, nr, s, h, m, gc, g, 'migrated', r, t, "
    f"{hashing.ROW_HASH_SQL_FUNCTION}('session_chain', 5120, 1, n, nc, np, nr, s, h, m, gc, g, "
    "CAST('migrated' AS BLOB), r, CAST(t AS BLOB)) FROM (SELECT "
    "(SELECT count(*) FROM events) AS n, "
    "(SELECT count(*) FROM cost_ledger) AS nc, "
    "(SELECT count(*) FROM plan_items) AS np, "
    "(SELECT count(*) FROM producers) AS nr, "
    "coalesce((SELECT max(sequence) FROM events), 0) AS s, "
    "coalesce((SELECT chain_hash FROM events ORDER BY sequence DESC LIMIT 1), "
    f"{hashing.GENESIS_SQL_FUNCTION}({_SESSION_BYTES})) AS h, "
    f"(SELECT {hashing.ROW_HASH_SQL_FUNCTION}('session_meta', {_raw_args('session_meta')}) "
    "FROM session_meta) AS m, "
    "(SELECT count(*) FROM chain_gaps) AS gc, "
    f"{hashing.GAPS_HASH_SQL_FUNCTION}((SELECT unhex(group_concat(hex(content_hash), '' "
    "ORDER BY sequence)) FROM chain_gaps)) AS g, "
    f"{MIGRATION_START_SQL_FUNCTION}() AS r, "
    "strftime('%Y-%m-%dT%H:%M:%fZ') AS t);\n"
)
_DERIVED_INDEXES = (
    "CREATE INDEX idx_cost_ledger_event ON cost_ledger(event_sequence);\n"
    "CREATE INDEX idx_plan_items_event ON plan_items(event_sequence);\n"
)
_EVENTS_INDEXES = REV2_INDEXES.replace(_DERIVED_INDEXES, "")
assert _EVENTS_INDEXES != REV2_INDEXES


def _text_precheck(table: str) -> Precheck:
    cols = COLUMNS[1][table]
    key = "rowid" if table == "producers" else cols[0]
    parts = " || '|' || ".join(f"iif(typeof({c}) = 'text', {c}, '')" for c in cols)
    return Precheck(
        f"SELECT {key}, '{table}' FROM {table} NOT INDEXED "
        f"WHERE NOT {db.UTF8_SQL_FUNCTION}(CAST({parts} AS BLOB)) ORDER BY rowid LIMIT 1",
        "{value} row {key} holds TEXT that is not valid UTF-8 (damage, or another writer): "
        "recover the session first (`agentdb recover`)",
    )


STEP_3 = Step(
    revision=3,
    description=(
        "damage-evident rows: events.prev_hash and chain_hash, a content_hash on cost_ledger, "
        "plan_items and producers, the session_chain head and chain_gaps"
    ),
    sql=(
        _rehash("cost_ledger", REV3_COST_LEDGER)
        + _rehash("plan_items", REV3_PLAN_ITEMS)
        + _rehash("producers", REV3_PRODUCERS)
        # the fold looks bound rows up by event: their indexes before the events rebuild
        + _DERIVED_INDEXES
        + REV3_CHAIN_GAPS
        + ";\n"
        + _GAPS_3
        + _EVENTS_3
        + _EVENTS_INDEXES
        + REV3_SESSION_CHAIN
        + ";\n"
        + _HEAD_3
    ),
    prechecks=(
        # TEXT is hashed as its stored bytes: a UTF-16 file would hash other bytes than the
        # writer later does (design §13 A2)
        Precheck(
            "SELECT 'encoding', encoding FROM pragma_encoding WHERE encoding <> 'UTF-8'",
            "the database {key} is {value}, not UTF-8: convert it by dumping it into a new "
            "UTF-8 file",
        ),
        Precheck(
            "SELECT 'session_meta', count(*) FROM session_meta HAVING count(*) <> 1",
            "{key} holds {value} rows, not exactly one: recover the session first "
            "(`agentdb recover`)",
        ),
        # a damaged file is never hashed: revision 2's event hashes must hold first
        Precheck(
            hashing.mismatch_sql("sequence, 'events'") + " ORDER BY rowid LIMIT 1",
            "{value} row sequence={key} does not match its content hash: recover the "
            "session first (`agentdb recover`)",
        ),
        *(_text_precheck(t) for t in ("session_meta", "cost_ledger", "plan_items", "producers")),
    ),
)

# The ladder. Append only: a released step is never edited, reordered or removed.
STEPS: tuple[Step, ...] = (STEP_2, STEP_3)
REV3_LADDER = STEPS  # the name tests used before the release


def ladder_is_contiguous() -> bool:
    return [s.revision for s in STEPS] == list(range(2, CURRENT_REVISION + 1))


def head_problems(conn: apsw.Connection) -> list[str]:
    """The quick proof of a revision-3 file's head (design §7 items 1-6), in Python over values
    read back: one ``session_chain`` row whose own hash holds; the last event's content and
    chain hashes with its bound rows; head, counts, ``meta_hash``, gaps. Empty: proven."""
    problems: list[str] = []

    def raw(table: str, where: str = "", args: tuple[Any, ...] = ()) -> list[list[Any]]:
        cols = ", ".join(hashing.as_bytes_sql(c) for c in COLUMNS[3][table])
        mask = hashing.text_mask_sql(COLUMNS[3][table])
        sql = f"SELECT {mask}, {cols} FROM {table} {where}"
        return [list(r) for r in conn.execute(sql, args)]

    heads = raw("session_chain")
    metas = raw("session_meta")
    if len(heads) != 1 or len(metas) != 1:
        return [f"{len(heads)} session_chain rows, {len(metas)} session_meta rows"]
    mask, *head = heads[0]
    if hashing.row_hash_raw("session_chain", int(mask), *head[:-1]) != head[-1]:
        problems.append("session_chain fails its own hash")
    meta_mask, *meta = metas[0]
    if hashing.row_hash_raw("session_meta", int(meta_mask), *meta) != head[7]:
        problems.append("session_meta does not match meta_hash")
    sid = meta[0] if isinstance(meta[0], bytes) else str(meta[0]).encode()
    last = raw("events", "ORDER BY sequence DESC LIMIT 1")
    if last:
        emask, *ev = last[0]
        seq = ev[0]
        if hashing.event_hash_raw(int(emask), *ev[:9]) != ev[9]:
            problems.append(f"event {seq} fails its content hash")
        bound: list[list[bytes]] = []
        for table, key in REV3_BOUND:
            hashes = []
            for bmask, *row in raw(table, f"WHERE {key} = ?", (seq,)):
                if hashing.row_hash_raw(table, int(bmask), *row[:-1]) != row[-1]:
                    problems.append(f"{table} row bound to event {seq} fails its hash")
                hashes.append(row[-1] if isinstance(row[-1], bytes) else b"")
            bound.append(hashes)
        try:
            link = hashing.chain_hash(ev[10], ev[9], bound)
        except (TypeError, ValueError):
            link = None
        if link != ev[11]:
            problems.append(f"event {seq} fails its chain hash")
        last_seq, last_link = seq, ev[11]
    else:
        last_seq, last_link = 0, hashing.genesis(sid)
    if (head[5], head[6]) != (last_seq, last_link):
        problems.append(f"head names sequence {head[5]}, the last event is {last_seq}")
    for i, table in enumerate(("events", "cost_ledger", "plan_items", "producers"), start=1):
        n = int(db.scalar(conn, f"SELECT count(*) FROM {table}"))
        if head[i] != n:
            problems.append(f"head counts {head[i]} {table} rows, the table holds {n}")
    gaps = [
        bytes(r[0]) for r in conn.execute("SELECT content_hash FROM chain_gaps ORDER BY sequence")
    ]
    if head[8] != len(gaps) or head[9] != hashing.gaps_hash(gaps):
        problems.append("gap records do not match the head")
    return problems


def _fk_violations(conn: apsw.Connection) -> set[tuple[object, ...]]:
    return {tuple(r) for r in conn.execute("PRAGMA foreign_key_check")}


def apply_steps(
    conn: apsw.Connection,
    path: Path | str,
    *,
    target: int = CURRENT_REVISION,
    after_begin: Callable[[], None] | None = None,
    steps: tuple[Step, ...] = STEPS,
) -> tuple[int, int]:
    """Migrate the open file to ``target`` in one IMMEDIATE transaction. Returns (from, to).

    The caller has already identified the file as a session file. Raises
    :class:`~agentdb.errors.TooNew` for a newer file and :class:`~agentdb.errors.MigrationFailed`
    (after ROLLBACK) when a precheck, a step, ``foreign_key_check`` or ``integrity_check`` fails.
    Fault point ``before_commit`` is just before COMMIT. ``after_begin`` runs once the write
    lock is held (after ``BEGIN IMMEDIATE``): the caller re-checks that the file it has open is
    still the session (an exception from it rolls back and propagates).
    An I/O failure the system reports (no space, file too large, read-only, I/O error) raises
    :class:`~agentdb.errors.FileSystemError` naming it (after ROLLBACK).
    ``steps`` is the released ladder; when ``target`` is 3 or more the new head is proven
    (:func:`head_problems`) before COMMIT.
    """
    if target > max([CURRENT_REVISION, *(s.revision for s in steps)]):
        raise ValueError(f"no migration step reaches revision {target}")
    fk_was_on = bool(db.scalar(conn, "PRAGMA foreign_keys"))
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if after_begin is not None:
                after_begin()
            start = int(db.scalar(conn, "PRAGMA user_version"))
            if start > target:
                raise errors.TooNew(
                    f"{path}: user_version {start} is newer than this agentdb understands "
                    f"(revision {target}); upgrade agentdb",
                    path=path,
                )
            if start == target:
                conn.execute("ROLLBACK")
                return start, start
            fk_before = _fk_violations(conn)
            counters: dict[str, int] = {}
            if db.scalar(conn, "SELECT 1 FROM sqlite_schema WHERE name='sqlite_sequence'"):
                counters = {
                    str(n): int(v)
                    for n, v in db.rows(conn, "SELECT name, seq FROM sqlite_sequence")
                }

            def migration_start(*_: Any) -> int:
                return start

            conn.create_scalar_function(MIGRATION_START_SQL_FUNCTION, migration_start, 0)
            for step in steps:
                if not start < step.revision <= target:
                    continue
                for check in step.prechecks:
                    row = db.row(conn, check.sql)
                    if row is not None:
                        raise errors.MigrationFailed(
                            f"{path}: cannot migrate to revision {step.revision}: "
                            + check.message.format(key=row[0], value=row[1])
                            + "; fix or remove that row, then retry",
                            path=path,
                        )
                for _ in conn.execute(step.sql):
                    pass
                # after each step (a rebuild resets its table's counter): the next step reads
                # them (step 3 records numbers issued past the last event)
                for name, seq in counters.items():
                    conn.execute(
                        "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (seq, name)
                    )
                    if conn.changes() == 0:
                        conn.execute(
                            "INSERT INTO sqlite_sequence(name, seq) VALUES (?, ?)", (name, seq)
                        )
            conn.execute(f"PRAGMA user_version={int(target)}")
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            new_fk = _fk_violations(conn) - fk_before
            if new_fk:
                raise errors.MigrationFailed(
                    f"{path}: migration would break {len(new_fk)} foreign key(s) "
                    f"(first: {sorted(new_fk)[0]}); rolled back, file unchanged",
                    path=path,
                )
            bad = [r[0] for r in conn.execute("PRAGMA integrity_check(5)")]
            if bad != ["ok"]:
                raise errors.MigrationFailed(
                    f"{path}: integrity_check failed after migration ({bad[0]}); rolled back, "
                    "file unchanged — run `agentdb check` on it",
                    path=path,
                )
            if target >= 3:
                head = head_problems(conn)
                if head:
                    raise errors.MigrationFailed(
                        f"{path}: the new chain head does not prove ({head[0]}); rolled back, "
                        "file unchanged",
                        path=path,
                    )
            faults.point("before_commit")
            conn.execute("COMMIT")
            return start, target
        except apsw.Error as e:
            os_failure = db.translate(e, path, conn)  # before ROLLBACK resets the errno
            _rollback(conn)
            if isinstance(os_failure, errors.FileSystemError):
                raise os_failure from e
            raise errors.MigrationFailed(
                f"{path}: migration failed ({e}); rolled back, file unchanged", path=path
            ) from e
        except BaseException:
            _rollback(conn)
            raise
    finally:
        if fk_was_on:
            conn.execute("PRAGMA foreign_keys=ON")


def _rollback(conn: apsw.Connection) -> None:
    if not conn.get_autocommit():
        conn.execute("ROLLBACK")


def create_schema(conn: apsw.Connection, revision: int) -> None:
    """Write ``revision``'s tables, user_version and application id into an empty file."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        db.exec_script(conn, KNOWN_DDL[revision])
        conn.execute(f"PRAGMA user_version={int(revision)}")
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)  # an interrupted COMMIT may have rolled back already
        raise
