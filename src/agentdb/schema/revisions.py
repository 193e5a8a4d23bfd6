"""The released schema revisions, as DDL text. Released text is never edited.

Revision 1 is the state-backend spec's schema verbatim. Revision 2 keeps every revision-1 table
and column with its meaning and adds: CHECK constraints that make the spec's enums hold in
storage (so ``KIND_UNSPECIFIED`` can never be persisted), a per-event ``content_hash`` (a
BLAKE2b-128 over the whole row, so ``check`` sees a flipped byte inside a payload and salvage
rejects a row rebuilt from a broken overflow chain), and indexes on the two foreign keys.
"""

from __future__ import annotations

REV1_DDL = """\
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

# Table bodies of revision 2. Each is used both to create a fresh file and, under a temporary
# name, by the 1 -> 2 rebuild; the migration step below pins its own copy of the text.
REV2_EVENTS = """\
CREATE TABLE events (
  sequence          INTEGER PRIMARY KEY AUTOINCREMENT,
  id                TEXT NOT NULL UNIQUE,
  timestamp         TEXT NOT NULL,
  kind              TEXT NOT NULL CHECK (kind IN ('message','tool_call','tool_result','plan','apply','context_contribution','memory_write','memory_update','memory_delete','hook_error')),
  producer_category TEXT NOT NULL CHECK (producer_category IN ('model','tool','context','memory','frontend','widget','slashcommand','kernel')),
  producer_name     TEXT NOT NULL,
  producer_version  TEXT NOT NULL,
  schema_version    TEXT NOT NULL,
  payload           BLOB NOT NULL,
  content_hash      BLOB NOT NULL CHECK (typeof(content_hash) = 'blob' AND length(content_hash) = 16)
)"""

REV2_SESSION_META = """\
CREATE TABLE session_meta (
  session_id         TEXT PRIMARY KEY,
  parent_session_id  TEXT,
  profile            TEXT NOT NULL,
  status             TEXT NOT NULL CHECK (status IN ('running','completed','error_max_turns','error_max_budget_usd','error_max_wall_clock','cancelled','failed')),
  depth              INTEGER NOT NULL,
  started_at         TEXT NOT NULL,
  ended_at           TEXT
)"""

REV2_COST_LEDGER = """\
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
)"""

REV2_PLAN_ITEMS = """\
CREATE TABLE plan_items (
  sequence         INTEGER PRIMARY KEY AUTOINCREMENT,
  event_sequence   INTEGER NOT NULL REFERENCES events(sequence),
  turn_id          TEXT NOT NULL,
  tool_call_id     TEXT NOT NULL,
  provider_name    TEXT NOT NULL,
  tool_name        TEXT NOT NULL,
  decision         TEXT NOT NULL CHECK (decision IN ('allow','ask','deny')),
  decided_by       TEXT NOT NULL
)"""

REV2_PRODUCERS = """\
CREATE TABLE producers (
  category             TEXT NOT NULL CHECK (category IN ('model','tool','context','memory','frontend','widget','slashcommand','kernel')),
  name                 TEXT NOT NULL,
  version              TEXT NOT NULL,
  first_seen_sequence  INTEGER NOT NULL REFERENCES events(sequence),
  PRIMARY KEY (category, name, version)
)"""

REV2_INDEXES = """\
CREATE INDEX idx_events_kind ON events(kind);
CREATE INDEX idx_events_producer ON events(producer_category, producer_name, producer_version);
CREATE INDEX idx_cost_ledger_event ON cost_ledger(event_sequence);
CREATE INDEX idx_plan_items_event ON plan_items(event_sequence);
"""

REV2_DDL = (
    ";\n".join([REV2_EVENTS, REV2_SESSION_META, REV2_COST_LEDGER, REV2_PLAN_ITEMS, REV2_PRODUCERS])
    + ";\n"
    + REV2_INDEXES
)

DDL: dict[int, str] = {1: REV1_DDL, 2: REV2_DDL}

TABLES: tuple[str, ...] = ("events", "session_meta", "cost_ledger", "plan_items", "producers")
# Columns of each table at each revision, in order (the record shape a salvage engine matches).
COLUMNS: dict[int, dict[str, tuple[str, ...]]] = {
    1: {
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
    },
}
COLUMNS[2] = {**COLUMNS[1], "events": (*COLUMNS[1]["events"], "content_hash")}

CURRENT_REVISION = 2
# "AGDB": written on create and on migrate. 0 is accepted from other conforming writers.
APPLICATION_ID = 0x41474442
