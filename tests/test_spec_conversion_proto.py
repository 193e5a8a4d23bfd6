"""A prototype of docs/design/spec-exact-evidence.md §10 step 3 (the in-place conversion of a
revision-3 file to the spec's exact schema), measured on real files written by today's writer.

It de-risks two claims of the design before anything is built: the conversion leaves every
``sqlite_schema.sql`` byte for byte the spec's (a table created under a temp name and renamed
would not: SQLite quotes the new name), and a revision-3 file's proof carries over — every
stored ``content_hash``, ``chain_hash`` and the head recompute from the spec-exact rows alone,
by revision 3's released functions. The SQL lives here, not in ``src/``: the build writes the
released text (``TO_SPEC``) and pins it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentdb.hashing import chain_hash, event_hash, genesis, row_hash
from agentdb.schema.revisions import COLUMNS, REV1_DDL, TABLES
from agentdb.store import Event, PlanItem, Producer, SessionWriter, Usage
from tests import spec_kernel as spec

REV2_INDEXES = ("idx_events_kind", "idx_events_producer", "idx_cost_ledger_event",
                "idx_plan_items_event")  # fmt: skip


def to_spec_sql(lost_max: int) -> str:
    """The conversion, one transaction (foreign keys off and legacy renames on, outside it)."""
    cols = {t: ", ".join(COLUMNS[1][t]) for t in TABLES}
    return (
        "BEGIN IMMEDIATE;\n"
        + "".join(f"DROP INDEX {i};\n" for i in REV2_INDEXES)
        + "".join(f"ALTER TABLE {t} RENAME TO {t}_agentdb_old;\n" for t in TABLES)
        + REV1_DDL
        + "".join(
            f"INSERT INTO {t} ({cols[t]}) SELECT {cols[t]} FROM {t}_agentdb_old ORDER BY rowid;\n"
            for t in TABLES
        )
        + "".join(f"DROP TABLE {t}_agentdb_old;\n" for t in TABLES)
        + "DROP TABLE session_chain;\nDROP TABLE chain_gaps;\n"
        + f"UPDATE sqlite_sequence SET seq = max(seq, {int(lost_max)}) WHERE name = 'events';\n"
        + "PRAGMA user_version = 1;\nCOMMIT;\n"
    )


def _revision_3_file(sessions: Path) -> Path:
    w = SessionWriter.create(sessions, profile="default")
    assert w.revision == 3
    tool, model, kern = (
        Producer("tool", "shell", "1.0"),
        Producer("model", "claude", "1.0"),
        Producer("kernel", "kernel", "1"),
    )
    for i in range(30):
        usage = Usage("anthropic", "claude", 10 + i, 5, cost_usd=0.001 * i)
        w.emit(Event(kind="message", producer=model, payload=b"m%d" % i, usage=usage))
        items = [PlanItem(f"t{i}", f"c{j}", "anthropic", "shell", "allow", "r") for j in range(2)]
        w.emit_batch(
            [
                Event(kind="plan", producer=kern, payload=b"p", plan_items=items),
                Event(kind="tool_call", producer=tool, payload=bytes(range(i % 256))),
            ]
        )
    w.set_status("completed")
    w.close()
    return w.path


def _stored(conn: sqlite3.Connection) -> dict[str, object]:
    return {
        "events": conn.execute(
            "SELECT sequence, content_hash, prev_hash, chain_hash FROM events ORDER BY sequence"
        ).fetchall(),
        "derived": {
            t: dict(conn.execute(f"SELECT {k}, content_hash FROM {t}").fetchall())
            for t, k in (("cost_ledger", "sequence"), ("plan_items", "sequence"))
        },
        "producers": sorted(r[0] for r in conn.execute("SELECT content_hash FROM producers")),
        "head": conn.execute(
            "SELECT head_sequence, head_hash, meta_hash FROM session_chain"
        ).fetchone(),
    }


@pytest.fixture
def converted(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    path = _revision_3_file(sessions)
    conn = sqlite3.connect(path, isolation_level=None)
    before = _stored(conn)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("PRAGMA legacy_alter_table = ON")
    conn.executescript(to_spec_sql(before["head"][0]))
    conn.close()
    return path, before


def test_the_conversion_leaves_the_spec_schema_byte_for_byte(converted: tuple[Path, dict]) -> None:
    path, _ = converted
    conn = sqlite3.connect(path)
    query = "SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name != 'sqlite_sequence'"
    assert sorted(r[0] for r in conn.execute(query)) == sorted(
        s.strip() for s in REV1_DDL.split(";\n") if s.strip()
    )
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("PRAGMA application_id").fetchone()[0] == 0x41474442
    conn.close()


def test_a_revision_3_proof_recomputes_from_the_spec_exact_rows(
    converted: tuple[Path, dict],
) -> None:
    path, before = converted
    conn = sqlite3.connect(path)
    events = conn.execute("SELECT * FROM events ORDER BY sequence").fetchall()
    costs = conn.execute("SELECT * FROM cost_ledger ORDER BY sequence").fetchall()
    plans = conn.execute("SELECT * FROM plan_items ORDER BY sequence").fetchall()
    producers = conn.execute("SELECT * FROM producers").fetchall()
    (meta,) = conn.execute("SELECT * FROM session_meta").fetchall()
    conn.close()
    derived = before["derived"]
    assert {r[0]: row_hash("cost_ledger", r) for r in costs} == derived["cost_ledger"]
    assert {r[0]: row_hash("plan_items", r) for r in plans} == derived["plan_items"]
    assert sorted(row_hash("producers", r) for r in producers) == before["producers"]
    prev = genesis(meta[0])
    stored = before["events"]
    assert len(events) == len(stored)
    for ev, (seq, content, prev_hash, link) in zip(events, stored, strict=True):
        assert ev[0] == seq and event_hash(*ev) == content and prev == prev_hash
        bound = [
            [row_hash("cost_ledger", r) for r in costs if r[1] == seq],
            [row_hash("plan_items", r) for r in plans if r[1] == seq],
            [row_hash("producers", r) for r in producers if r[3] == seq],
        ]
        prev = chain_hash(prev, content, bound)
        assert prev == link
    head_sequence, head_hash, meta_hash = before["head"]
    assert (events[-1][0], prev) == (head_sequence, head_hash)
    assert row_hash("session_meta", meta) == meta_hash


def test_the_spec_kernel_opens_extends_and_resumes_a_converted_file(
    converted: tuple[Path, dict],
) -> None:
    path, before = converted
    conn = spec.open_session(path)
    n = len(spec.read_all(conn)["events"])
    seq = spec.append(
        conn, "message", ("model", "claude", "1.0"), b"x", cost=("a", "c", 1, 1, 0, 0, 0.5)
    )
    spec.resume(conn)
    conn.close()
    assert n == len(before["events"])
    assert seq == before["head"][0] + 1
