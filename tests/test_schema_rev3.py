"""Revision 3's DDL (design §2), released: it creates cleanly under agentdb's hardened
connection, keeps every revision-1 table and column with its name and meaning, and is the
ladder's top."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from agentdb import db
from agentdb.schema import migrations, revisions
from agentdb.schema.revisions import COLUMNS, REV3_DDL, REV3_TABLES


def _fresh(path: Path, ddl: str) -> apsw.Connection:
    conn = db.open_writer(path, create=True)
    db.exec_script(conn, ddl)
    return conn


def _table_info(conn: apsw.Connection, table: str) -> list[tuple[object, ...]]:
    # (name, declared type, notnull, default, pk position)
    return [tuple(r[1:]) for r in conn.execute(f"PRAGMA table_info({table})")]


def test_revision_3_is_released() -> None:
    assert revisions.CURRENT_REVISION == revisions.KNOWN_REVISION == 3
    assert revisions.DDL[3] == revisions.KNOWN_DDL[3] == REV3_DDL
    assert [s.revision for s in migrations.STEPS] == [2, 3]


@pytest.mark.slow
def test_creates_cleanly_under_the_hardened_connection(tmp_path: Path) -> None:
    conn = _fresh(tmp_path / "f.sqlite", REV3_DDL)
    names = {
        str(n)
        for (n,) in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    assert names == set(REV3_TABLES)
    for table in REV3_TABLES:
        assert tuple(r[0] for r in _table_info(conn, table)) == COLUMNS[3][table]
    indexes = [r[0] for r in conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'index'")]
    assert [i for i in indexes if i] == [
        s for s in revisions.REV2_INDEXES.strip().rstrip(";").split(";\n")
    ]
    assert db.integrity_problems(conn) == []
    assert db.unsafe_schema_objects(conn) == []


@pytest.mark.slow
def test_every_revision_1_table_and_column_keeps_its_name_and_meaning(tmp_path: Path) -> None:
    old = _fresh(tmp_path / "one.sqlite", revisions.REV1_DDL)
    two = _fresh(tmp_path / "two.sqlite", revisions.REV2_DDL)
    new = _fresh(tmp_path / "three.sqlite", REV3_DDL)
    for table in revisions.TABLES:
        before, after = _table_info(old, table), _table_info(new, table)
        # the revision-1 columns first, in order, with the same type, NOT NULL, default and key
        assert after[: len(before)] == before, table
        # revision 2's columns (events.content_hash) keep their place too
        assert after[: len(_table_info(two, table))] == _table_info(two, table), table
        # every column added is a 16-byte hash, NOT NULL
        for name, decl, notnull, default, pk in after[len(_table_info(two, table)) :]:
            assert str(name).endswith("_hash") and decl == "BLOB" and notnull == 1, name
            assert default is None and pk == 0
    # foreign keys as revision 1 declares them
    for table in ("cost_ledger", "plan_items", "producers"):
        sql = f"PRAGMA foreign_key_list({table})"
        assert [r[2:5] for r in new.execute(sql)] == [r[2:5] for r in old.execute(sql)]


def test_a_revision_1_readers_queries_work_on_revision_3(tmp_path: Path) -> None:
    conn = _fresh(tmp_path / "f.sqlite", REV3_DDL)
    for table in revisions.TABLES:
        cols = ", ".join(COLUMNS[1][table])
        conn.execute(f"SELECT {cols} FROM {table} ORDER BY rowid").fetchall()


HASH = b"\x00" * 16


@pytest.mark.slow
def test_the_new_constraints_hold(tmp_path: Path) -> None:
    conn = _fresh(tmp_path / "f.sqlite", REV3_DDL)
    conn.execute("PRAGMA foreign_keys=ON")
    head = "INSERT INTO session_chain VALUES (?,0,0,0,0,0,?,?,0,?,?,?,'t',?)"
    conn.execute(head, (1, HASH, HASH, HASH, "created", 3, HASH))
    for bad in (
        (2, HASH, HASH, HASH, "created", 3, HASH),  # a second head
        (1, HASH[:15], HASH, HASH, "created", 3, HASH),  # a short hash
        (1, HASH.hex(), HASH, HASH, "created", 3, HASH),  # text, not a blob
        (1, HASH, HASH, HASH, "migrated_from_2", 3, HASH),  # the prototype's origin spelling
        (1, HASH, HASH, HASH, "migrated", 0, HASH),
        (1, HASH, HASH, HASH, "migrated", "2", HASH),
    ):
        with pytest.raises(apsw.ConstraintError):
            conn.execute(head.replace("INSERT", "INSERT OR ABORT"), bad)
    gap = "INSERT INTO chain_gaps (kind, from_seq, to_seq, expected_hash, recovered_at, "
    gap += "content_hash) VALUES (?, 1, 2, ?, 't', ?)"
    for kind in ("events", "tail", "rows", "link", "meta"):
        conn.execute(gap, (kind, None, HASH))
        conn.execute(gap, (kind, HASH, HASH))
    for bad_gap in (("lost_tail", None, HASH), ("tail", HASH[:8], HASH), ("tail", None, None)):
        with pytest.raises(apsw.ConstraintError):
            conn.execute(gap, bad_gap)
    event = "INSERT INTO events VALUES (1,'a','t','message','model','m','1','1',X'',?,?,?)"
    with pytest.raises(apsw.ConstraintError):
        conn.execute(event, (HASH, HASH, None))
    conn.execute(event, (HASH, HASH, HASH))
    cost = "INSERT INTO cost_ledger VALUES (1, 1, 'p', 'm', 1, 2, 0, 0, 0.5, ?)"
    with pytest.raises(apsw.ConstraintError):
        conn.execute(cost, (b"",))
    conn.execute(cost, (HASH,))
