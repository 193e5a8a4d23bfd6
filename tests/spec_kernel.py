"""A session-file kernel from the state-backend spec's text alone (issue 27's yardstick): stdlib
``sqlite3``, the spec's DDL verbatim, ``<session_id>.sqlite``, WAL, user_version 1, its open rules
(refuse newer; integrity_check, salvage with ``.corrupt`` kept), ``SELECT *`` reads, appends with
derived rows, the in-place resume. It never imports agentdb."""

from __future__ import annotations

import os
import sqlite3
import uuid
from datetime import datetime, timezone
from pathlib import Path

REVISION = 1  # this document's schema revision number
DDL = """\
CREATE TABLE events (
  sequence          INTEGER PRIMARY KEY AUTOINCREMENT,
  id                TEXT NOT NULL UNIQUE,   -- stable event identifier, independent of storage
  timestamp         TEXT NOT NULL,          -- wall-clock, display only, not ordering-authoritative
  kind              TEXT NOT NULL,          -- see "The kind enum" below for the authoritative enum
  producer_category TEXT NOT NULL,          -- model | tool | context | memory | frontend | widget | slashcommand
  producer_name     TEXT NOT NULL,
  producer_version  TEXT NOT NULL,
  schema_version    TEXT NOT NULL,
  payload           BLOB NOT NULL           -- opaque; the kernel never inspects this
);
CREATE INDEX idx_events_kind ON events(kind);
CREATE INDEX idx_events_producer ON events(producer_category, producer_name, producer_version);
CREATE TABLE session_meta (
  session_id         TEXT PRIMARY KEY,    -- matches the filename stem
  parent_session_id  TEXT,                -- NULL for a root session
  profile            TEXT NOT NULL,
  status             TEXT NOT NULL,       -- running | completed | error_max_turns |
                                           -- error_max_budget_usd | error_max_wall_clock |
                                           -- cancelled | failed (agent-loop/turn-algorithm.md)
  depth              INTEGER NOT NULL,    -- cached depth-budget value, avoids re-deriving
                                           -- via parent-chain walks when scanning
                                           -- (agent-loop/subagents.md#depth-limits)
  started_at         TEXT NOT NULL,
  ended_at           TEXT                 -- NULL while running
);
CREATE TABLE cost_ledger (
  sequence           INTEGER PRIMARY KEY AUTOINCREMENT,
  event_sequence     INTEGER NOT NULL REFERENCES events(sequence),
  provider_name      TEXT NOT NULL,
  model_id           TEXT NOT NULL,
  input_tokens       INTEGER NOT NULL,
  output_tokens      INTEGER NOT NULL,
  cache_write_tokens INTEGER NOT NULL DEFAULT 0,
  cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
  cost_usd           REAL NOT NULL
);
CREATE TABLE plan_items (
  sequence         INTEGER PRIMARY KEY AUTOINCREMENT,
  event_sequence   INTEGER NOT NULL REFERENCES events(sequence),
  turn_id          TEXT NOT NULL,
  tool_call_id     TEXT NOT NULL,
  provider_name    TEXT NOT NULL,
  tool_name        TEXT NOT NULL,
  decision         TEXT NOT NULL,   -- allow | ask | deny
  decided_by       TEXT NOT NULL    -- policy rule name, or the subscriber that decided
);
CREATE TABLE producers (
  category             TEXT NOT NULL,
  name                 TEXT NOT NULL,
  version              TEXT NOT NULL,
  first_seen_sequence  INTEGER NOT NULL REFERENCES events(sequence),
  PRIMARY KEY (category, name, version)
);
"""
TABLES = ("events", "session_meta", "cost_ledger", "plan_items", "producers")
COLUMNS = {"events": 9, "session_meta": 7, "cost_ledger": 9, "plan_items": 8, "producers": 4}


class TooNew(Exception):
    """user_version newer than this kernel understands."""


class Unreadable(Exception):
    """integrity_check failed and nothing could be salvaged."""


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def path_of(sessions_dir: Path, session_id: str) -> Path:  # the spec's file layout
    return Path(sessions_dir) / f"{session_id}.sqlite"


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)  # explicit transactions only
    if (mode := conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]) != "wal":
        raise OSError(f"{path}: cannot open in WAL mode ({mode})")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def create(sessions_dir: Path, session_id: str, profile: str = "default",
           parent: str | None = None, depth: int = 0) -> Path:  # fmt: skip
    """A new session file: the spec's DDL, user_version = 1, WAL, its session_meta row."""
    path = path_of(sessions_dir, session_id)
    conn = _connect(path)
    try:
        conn.executescript(f"BEGIN; {DDL} PRAGMA user_version = {REVISION}; COMMIT;")
        conn.execute("INSERT INTO session_meta VALUES (?, ?, ?, 'running', ?, ?, NULL)",
                     (session_id, parent, profile, depth, now()))  # fmt: skip
    finally:
        conn.close()
    return path


def open_session(path: Path) -> sqlite3.Connection:
    """The spec's open: refuse a newer user_version; integrity_check; on failure salvage."""
    conn = _connect(path)
    if (version := conn.execute("PRAGMA user_version").fetchone()[0]) > REVISION:
        conn.close()
        raise TooNew(f"{path}: user_version {version} is newer than {REVISION}; refusing")
    try:
        if [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"]:
            return conn
    except sqlite3.DatabaseError:  # too damaged for integrity_check to finish: it failed
        pass
    conn.close()
    return _salvage(path)


def _readable(conn: sqlite3.Connection, table: str) -> list[tuple[object, ...]]:
    try:
        return conn.execute(f"SELECT * FROM {table}").fetchall()
    except sqlite3.DatabaseError:  # that table is lost: salvage is an attempt
        return []


def _salvage(path: Path) -> sqlite3.Connection:
    """Rows still readable go into a fresh file; the original is kept as ``.corrupt``."""
    corrupt = path.with_name(path.name + ".corrupt")
    for sfx in ("", "-wal"):
        if Path(f"{path}{sfx}").exists():
            os.rename(f"{path}{sfx}", f"{corrupt}{sfx}")
    Path(str(path) + "-shm").unlink(missing_ok=True)
    old = sqlite3.connect(f"file:{corrupt}?mode=ro", uri=True)
    saved = {t: _readable(old, t) for t in TABLES}
    old.close()
    if not saved["session_meta"]:
        raise Unreadable(f"{path}: damaged and unsalvageable; kept as {corrupt}")
    conn = _connect(path)
    conn.executescript(f"BEGIN; {DDL} PRAGMA user_version = {REVISION}; COMMIT;")
    conn.executescript("BEGIN; PRAGMA defer_foreign_keys=ON;")
    for t, rows in saved.items():
        conn.executemany(f"INSERT OR IGNORE INTO {t} VALUES ({','.join('?' * COLUMNS[t])})", rows)
    conn.execute("COMMIT")
    print(f"spec kernel: {path} was damaged; recovered, original kept as {corrupt}")  # flagged
    return conn


def read_all(conn: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table with SELECT *, unpacked into the spec's columns."""
    out = {t: conn.execute(f"SELECT * FROM {t}").fetchall() for t in TABLES}
    for t, rows in out.items():
        if any(len(row) != COLUMNS[t] for row in rows):
            raise ValueError(f"{t}: {len(rows[0])} columns, the spec has {COLUMNS[t]}")
    return out


def append(conn: sqlite3.Connection, kind: str, producer: tuple[str, str, str],
           payload: bytes, cost: tuple[object, ...] | None = None,
           plan: tuple[tuple[object, ...], ...] = ()) -> int:  # fmt: skip
    """One event with its derived rows in one transaction; returns its sequence. ``cost``: the
    cost_ledger columns after event_sequence; ``plan``: plan_items' columns after it, per row."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        cur = conn.execute(
            "INSERT INTO events (id, timestamp, kind, producer_category, producer_name, "
            "producer_version, schema_version, payload) VALUES (?, ?, ?, ?, ?, ?, '1', ?)",
            (str(uuid.uuid4()), now(), kind, *producer, payload),
        )
        seq = int(cur.lastrowid or 0)
        conn.execute("INSERT OR IGNORE INTO producers VALUES (?, ?, ?, ?)", (*producer, seq))
        if cost is not None:  # the columns after sequence, by name
            conn.execute("INSERT INTO cost_ledger (event_sequence, provider_name, model_id, input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (seq, *cost))  # fmt: skip
        for item in plan:
            conn.execute("INSERT INTO plan_items (event_sequence, turn_id, tool_call_id, provider_name, tool_name, decision, decided_by) VALUES (?, ?, ?, ?, ?, ?, ?)", (seq, *item))  # fmt: skip
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return seq


def end(conn: sqlite3.Connection, status: str) -> None:  # status and ended_at, in place
    conn.execute("UPDATE session_meta SET status = ?, ended_at = ?", (status, now()))


def resume(conn: sqlite3.Connection) -> None:
    """ResumeSession: a completed or cancelled row goes back to running, ended_at NULL."""
    status = conn.execute("SELECT status FROM session_meta").fetchone()[0]
    if status not in ("completed", "cancelled"):  # the spec: other end statuses are terminal
        raise ValueError(f"status {status!r} is terminal or running; it is not re-opened")
    conn.execute("UPDATE session_meta SET status = 'running', ended_at = NULL")
