"""Write the merged rows into a fresh session file at the current revision (in the job's
private work directory), and check it once."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw

from agentdb import db, errors
from agentdb.checks import check_path
from agentdb.hashing import event_hash
from agentdb.salvage import tables
from agentdb.salvage.diskrows import DiskMap, ordered
from agentdb.salvage.merge import Merged
from agentdb.salvage.tables import Row
from agentdb.schema.migrations import create_schema
from agentdb.schema.revisions import CURRENT_REVISION

Resolve = Callable[[Row], Row]

_INSERT = {
    "events": "INSERT INTO events (sequence, id, timestamp, kind, producer_category, "
    "producer_name, producer_version, schema_version, payload, content_hash) "
    "VALUES (?,?,?,?,?,?,?,?,?,?)",
    "session_meta": "INSERT INTO session_meta (session_id, parent_session_id, profile, status, "
    "depth, started_at, ended_at) VALUES (?,?,?,?,?,?,?)",
    "cost_ledger": "INSERT INTO cost_ledger (sequence, event_sequence, provider_name, model_id, "
    "input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, cost_usd) "
    "VALUES (?,?,?,?,?,?,?,?,?)",
    "plan_items": "INSERT INTO plan_items (sequence, event_sequence, turn_id, tool_call_id, "
    "provider_name, tool_name, decision, decided_by) VALUES (?,?,?,?,?,?,?,?)",
    "producers": "INSERT INTO producers (category, name, version, first_seen_sequence) "
    "VALUES (?,?,?,?)",
}


def _as_is(row: Row) -> Row:
    return row


def _rows(merged: Merged, table: str, resolve: Resolve) -> Iterator[Row]:
    """The rows of ``table`` in key order, long values read back one row at a time."""
    rows, known = merged.rows[table], merged.hashes  # hashes verified against these rows
    if table != "events":
        for _, row in ordered(rows):
            yield resolve(row)
    elif isinstance(rows, DiskMap) and isinstance(known, DiskMap):
        for _, v, h in rows.raw(known):
            r = resolve(pickle.loads(v))
            yield (*r, pickle.loads(h) if h is not None else event_hash(*r))
    else:
        for _, row in ordered(rows):
            r = resolve(row)
            yield (*r, known.get(r[0]) or event_hash(*r))


def write(path: Path, merged: Merged, resolve: Resolve | None = None) -> None:
    """Create ``path`` (0600, exclusive, WAL, current revision) holding ``merged``. Scratch: not
    fsynced here (the copy put beside the session is). The rows are loaded with no journal
    and no sync (each byte written once; a failure discards the whole file), then the file
    goes to WAL mode like every session file; :func:`check` judges the result."""
    resolve = resolve or _as_is
    conn = db.open_writer(path, create=True)
    try:
        with db.translated(path, conn):
            # foreign keys off: rows whose event was lost are kept
            db.exec_script(
                conn, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA foreign_keys=OFF"
            )
            create_schema(conn, CURRENT_REVISION)
            conn.execute("BEGIN IMMEDIATE")
            try:
                for table in tables.TABLES:
                    conn.executemany(_INSERT[table], _rows(merged, table, resolve))
                for name, seq in merged.sequences.items():
                    conn.execute(
                        "INSERT INTO sqlite_sequence (name, seq) SELECT ?, 0 WHERE NOT EXISTS "
                        "(SELECT 1 FROM sqlite_sequence WHERE name = ?)",
                        (name, name),
                    )
                    conn.execute(
                        "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (seq, name)
                    )
                conn.execute("COMMIT")
            except BaseException:
                if not conn.get_autocommit():
                    conn.execute("ROLLBACK")
                raise
            db.configure_writer(conn, path)  # WAL, as every session file
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def check(path: Path, session_id: str, merged: Merged) -> tuple[list[str], int]:
    """(problems, rows whose event was lost) of the replacement at ``path``: judged once, by
    ``agentdb check``'s own full judge as a recovered file (integrity_check, identity, schema,
    session_meta, every content_hash; informational findings such as ``orphan_of_recovery``
    allowed), and holding exactly the merged row counts."""
    result = check_path(path, session_id, recovered=True)
    problems: list[str] = []
    if result.verdict != "ok":
        bad = [f for f in result.findings if f.severity == "error"] or result.findings
        problems += [f"check: {result.verdict}: {f.code}: {f.message}" for f in bad[:3]]
        if not bad:
            problems.append(f"check: verdict {result.verdict}")
        return problems, 0
    try:
        counts = table_counts(path)
    except (apsw.Error, errors.AgentdbError) as e:
        return [f"reading the replacement fails: {e}"], 0
    for table in tables.TABLES:
        if counts[table] != len(merged.rows[table]):
            problems.append(
                f"{table} holds {counts[table]} rows, expected {len(merged.rows[table])}"
            )
    return problems, _orphans(merged)


def table_counts(path: Path) -> dict[str, int]:
    """Rows per table of a session file."""
    conn = db.open_readonly(path)
    try:
        return {
            t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0])  # type: ignore[arg-type]
            for t in tables.TABLES
        }
    finally:
        conn.close()


def _orphans(merged: Merged) -> int:
    """Kept rows whose event was lost (history: money was spent, a decision was made)."""
    events = merged.rows["events"]
    return sum(
        1
        for t in ("cost_ledger", "plan_items")
        for _, row in ordered(merged.rows[t])
        if row[1] not in events
    )
