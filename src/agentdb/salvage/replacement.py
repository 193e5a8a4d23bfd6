"""Write the merged rows into a fresh session file at the current revision, and verify it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import apsw

from agentdb import db, fsutil
from agentdb.hashing import event_hash
from agentdb.salvage import tables
from agentdb.salvage.merge import Merged
from agentdb.schema.identity import identify, schema_differences
from agentdb.schema.migrations import create_schema
from agentdb.schema.revisions import CURRENT_REVISION

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


@dataclass
class ReplacementCheck:
    """What verifying the replacement found."""

    ok: bool  # integrity, schema, identity, session_meta, hashes and row counts all hold
    problems: list[str] = field(default_factory=list)  # why not ok
    fk_orphans: int = 0  # rows whose event was lost (informational: history kept)


def write(path: Path, merged: Merged) -> None:
    """Create ``path`` (0600, exclusive, WAL, current revision) holding ``merged``; fsync."""
    conn = db.open_writer(path, create=True)
    try:
        with db.translated(path, conn):
            db.configure_writer(conn, path)
            conn.execute("PRAGMA foreign_keys=OFF")  # rows whose event was lost are kept
            create_schema(conn, CURRENT_REVISION)
            conn.execute("BEGIN IMMEDIATE")
            try:
                for table in tables.TABLES:
                    rows = merged.rows[table]
                    batch = [rows[k] for k in sorted(rows)]
                    if table == "events":
                        known = merged.hashes  # verified against these very rows
                        batch = [(*r, known.get(r[0]) or event_hash(*r)) for r in batch]
                    conn.executemany(_INSERT[table], batch)
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
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    fsutil.fsync_file(path)
    fsutil.fsync_dir(path.parent)


def verify(path: Path, session_id: str, merged: Merged) -> ReplacementCheck:
    """Integrity check, the schema of the current revision, identity, one session_meta row for
    this id, every content_hash, and exactly the merged row counts."""
    problems: list[str] = []
    orphans = 0
    try:
        conn = db.open_readonly(path)
    except Exception as e:  # an unopenable replacement is a failed recovery, not a crash
        return ReplacementCheck(False, [f"cannot open the replacement: {e}"])
    try:
        problems += [f"integrity_check: {p}" for p in db.integrity_problems(conn)]
        ident = identify(conn)
        if ident.kind != "session" or ident.revision != CURRENT_REVISION:
            problems.append(f"identity {ident.kind} revision {ident.revision}")
        problems += schema_differences(conn, CURRENT_REVISION)
        ids = [r[0] for r in conn.execute("SELECT session_id FROM session_meta")]
        if ids != [session_id]:
            problems.append(f"session_meta holds {ids!r}")
        bad = conn.execute(
            "SELECT count(*) FROM events WHERE content_hash IS NOT agentdb_event_hash(sequence, "
            "id, timestamp, kind, producer_category, producer_name, producer_version, "
            "schema_version, payload)"
        ).fetchall()[0][0]
        if bad:
            problems.append(f"{bad} events fail their content_hash")
        for table in tables.TABLES:
            n = conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
            if n != len(merged.rows[table]):
                problems.append(f"{table} holds {n} rows, expected {len(merged.rows[table])}")
        # Rows whose event was lost are kept (history); any other dangling key is a bug.
        for table, _rowid, parent, _fk in conn.execute("PRAGMA foreign_key_check"):
            if parent != "events":
                problems.append(f"foreign key from {table} to {parent}")
            orphans += 1
    except apsw.Error as e:
        problems.append(f"reading the replacement fails: {e}")
    finally:
        conn.close()
    return ReplacementCheck(not problems, problems, orphans)
