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

DDL: dict[int, str] = {1: REV1_DDL, 2: REV2_DDL}  # revision 3 joins below, once defined

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


# ------------------------------------------------------------------------------ revision 3
# The damage-evident revision (docs/design/damage-evident-revision.md §2): released (the
# current one), its text pinned by tests/test_schema.py.
# Every revision-1 table and column keeps its name and meaning; added: events.prev_hash and
# chain_hash, a content_hash on the three derived tables, session_chain (the head, one row) and
# chain_gaps (gap records a recovery leaves). Indexes: revision 2's four, unchanged.
REV3_EVENTS = """\
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
  content_hash      BLOB NOT NULL CHECK (typeof(content_hash) = 'blob' AND length(content_hash) = 16),
  prev_hash         BLOB NOT NULL CHECK (typeof(prev_hash) = 'blob' AND length(prev_hash) = 16),
  chain_hash        BLOB NOT NULL CHECK (typeof(chain_hash) = 'blob' AND length(chain_hash) = 16)
)"""

REV3_SESSION_META = REV2_SESSION_META  # the spec's seven columns; its hash is in session_chain

REV3_COST_LEDGER = """\
CREATE TABLE cost_ledger (
  sequence           INTEGER PRIMARY KEY AUTOINCREMENT,
  event_sequence     INTEGER NOT NULL REFERENCES events(sequence),
  provider_name      TEXT NOT NULL,
  model_id           TEXT NOT NULL,
  input_tokens       INTEGER NOT NULL,
  output_tokens      INTEGER NOT NULL,
  cache_write_tokens INTEGER NOT NULL DEFAULT 0,
  cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
  cost_usd           REAL NOT NULL,
  content_hash       BLOB NOT NULL CHECK (typeof(content_hash) = 'blob' AND length(content_hash) = 16)
)"""

REV3_PLAN_ITEMS = """\
CREATE TABLE plan_items (
  sequence         INTEGER PRIMARY KEY AUTOINCREMENT,
  event_sequence   INTEGER NOT NULL REFERENCES events(sequence),
  turn_id          TEXT NOT NULL,
  tool_call_id     TEXT NOT NULL,
  provider_name    TEXT NOT NULL,
  tool_name        TEXT NOT NULL,
  decision         TEXT NOT NULL CHECK (decision IN ('allow','ask','deny')),
  decided_by       TEXT NOT NULL,
  content_hash     BLOB NOT NULL CHECK (typeof(content_hash) = 'blob' AND length(content_hash) = 16)
)"""

REV3_PRODUCERS = """\
CREATE TABLE producers (
  category             TEXT NOT NULL CHECK (category IN ('model','tool','context','memory','frontend','widget','slashcommand','kernel')),
  name                 TEXT NOT NULL,
  version              TEXT NOT NULL,
  first_seen_sequence  INTEGER NOT NULL REFERENCES events(sequence),
  content_hash         BLOB NOT NULL CHECK (typeof(content_hash) = 'blob' AND length(content_hash) = 16),
  PRIMARY KEY (category, name, version)
)"""

# The head (design §5): exactly one row, rewritten in the transaction of every emit and status
# change. origin: since when rows are proven (created here, migrated from origin_revision, or
# recovered from a file at origin_revision).
REV3_SESSION_CHAIN = """\
CREATE TABLE session_chain (
  id               INTEGER PRIMARY KEY CHECK (id = 1),
  event_count      INTEGER NOT NULL,
  cost_count       INTEGER NOT NULL,
  plan_count       INTEGER NOT NULL,
  producer_count   INTEGER NOT NULL,
  head_sequence    INTEGER NOT NULL,
  head_hash        BLOB NOT NULL CHECK (typeof(head_hash) = 'blob' AND length(head_hash) = 16),
  meta_hash        BLOB NOT NULL CHECK (typeof(meta_hash) = 'blob' AND length(meta_hash) = 16),
  gap_count        INTEGER NOT NULL,
  gaps_hash        BLOB NOT NULL CHECK (typeof(gaps_hash) = 'blob' AND length(gaps_hash) = 16),
  origin           TEXT NOT NULL CHECK (origin IN ('created','migrated','recovered')),
  origin_revision  INTEGER NOT NULL CHECK (typeof(origin_revision) = 'integer' AND origin_revision >= 1),
  origin_at        TEXT NOT NULL,
  content_hash     BLOB NOT NULL CHECK (typeof(content_hash) = 'blob' AND length(content_hash) = 16)
)"""

# Gap records (design §6): one row per break a recovery left.
REV3_CHAIN_GAPS = """\
CREATE TABLE chain_gaps (
  sequence       INTEGER PRIMARY KEY AUTOINCREMENT,
  kind           TEXT NOT NULL CHECK (kind IN ('events','tail','rows','link','meta')),
  from_seq       INTEGER NOT NULL,
  to_seq         INTEGER NOT NULL,
  expected_hash  BLOB CHECK (expected_hash IS NULL OR (typeof(expected_hash) = 'blob' AND length(expected_hash) = 16)),
  recovered_at   TEXT NOT NULL,
  content_hash   BLOB NOT NULL CHECK (typeof(content_hash) = 'blob' AND length(content_hash) = 16)
)"""

REV3_INDEXES = REV2_INDEXES

REV3_DDL = (
    ";\n".join(
        [
            REV3_EVENTS,
            REV3_SESSION_META,
            REV3_COST_LEDGER,
            REV3_PLAN_ITEMS,
            REV3_PRODUCERS,
            REV3_SESSION_CHAIN,
            REV3_CHAIN_GAPS,
        ]
    )
    + ";\n"
    + REV3_INDEXES
)

REV3_REVISION = 3
REV3_TABLES: tuple[str, ...] = (*TABLES, "session_chain", "chain_gaps")
# The columns each table's row hash covers, in declared order (design §3): every column but
# content_hash (events: the nine of revision 2's event hash; prev_hash and chain_hash are
# chained, not row-hashed).
REV3_HASHED: dict[str, tuple[str, ...]] = {
    **COLUMNS[1],
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
        "origin_revision",
        "origin_at",
    ),
    "chain_gaps": ("sequence", "kind", "from_seq", "to_seq", "expected_hash", "recovered_at"),
}
# Derived tables, in the order their bound rows enter an event's chain_hash, and the column that
# binds each row to its event.
REV3_BOUND: tuple[tuple[str, str], ...] = (
    ("cost_ledger", "event_sequence"),
    ("plan_items", "event_sequence"),
    ("producers", "first_seen_sequence"),
)
COLUMNS[3] = {
    "events": (*COLUMNS[1]["events"], "content_hash", "prev_hash", "chain_hash"),
    "session_meta": COLUMNS[1]["session_meta"],
    **{t: (*REV3_HASHED[t], "content_hash") for t in REV3_TABLES[2:]},
}

DDL[3] = REV3_DDL
# Every revision a reader knows. Readers learn a revision before writers create it: between a
# reader's release and the ladder's, KNOWN_DDL holds one more revision than DDL.
KNOWN_DDL: dict[int, str] = dict(DDL)

# The revision new files are created at and the ladder migrates to.
CURRENT_REVISION = 3
# The newest revision every reader understands (identity, check, the writer's open, recovery,
# backup and restore): never below CURRENT_REVISION.
KNOWN_REVISION = 3
# "AGDB": written on create and on migrate. 0 is accepted from other conforming writers.
APPLICATION_ID = 0x41474442
