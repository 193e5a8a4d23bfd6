"""The migration ladder: one released, never-edited step per revision increment.

A file is migrated in one ``BEGIN IMMEDIATE`` transaction that runs every step it needs, sets
``user_version`` and ``application_id``, restores the AUTOINCREMENT counters the table rebuilds
dropped, and runs ``foreign_key_check`` and ``integrity_check`` before ``COMMIT``; anything wrong
rolls the whole file back. ``PRAGMA foreign_keys`` is a no-op inside a transaction, so it is
turned off before ``BEGIN`` and restored after.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apsw

from agentdb import db, errors, faults
from agentdb.schema import enums
from agentdb.schema.revisions import (
    APPLICATION_ID,
    CURRENT_REVISION,
    DDL,
    REV2_EVENTS,
    REV2_INDEXES,
    REV2_PLAN_ITEMS,
    REV2_PRODUCERS,
    REV2_SESSION_META,
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

# The ladder. Append only: a released step is never edited, reordered or removed.
STEPS: tuple[Step, ...] = (STEP_2,)


def ladder_is_contiguous() -> bool:
    return [s.revision for s in STEPS] == list(range(2, CURRENT_REVISION + 1))


def _fk_violations(conn: apsw.Connection) -> set[tuple[object, ...]]:
    return {tuple(r) for r in conn.execute("PRAGMA foreign_key_check")}


def apply_steps(
    conn: apsw.Connection,
    path: Path | str,
    *,
    target: int = CURRENT_REVISION,
    after_begin: Callable[[], None] | None = None,
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
    """
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
            for step in STEPS:
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
        db.exec_script(conn, DDL[revision])
        conn.execute(f"PRAGMA user_version={int(revision)}")
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)  # an interrupted COMMIT may have rolled back already
        raise
