"""Schema revisions, identity and the migration ladder, on real files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw
import pytest

from agentdb import db, errors, faults
from agentdb.hashing import event_hash
from agentdb.schema import enums, identity, migrations, revisions
from agentdb.store import Event, Producer, SessionReader, SessionWriter, Usage
from tests.rows import all_rows
from tests.support import make_session


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _released_texts() -> dict[str, str]:
    step2 = migrations.STEP_2
    return {
        "rev1": revisions.REV1_DDL,
        "rev2": revisions.REV2_DDL,
        "step2": step2.sql + "".join(p.sql + p.message for p in step2.prechecks),
        "rev3": revisions.REV3_DDL,
        "step3": migrations.STEP_3.sql
        + "".join(p.sql + p.message for p in migrations.STEP_3.prechecks),
    }


# sha256 of the released text of every revision and step. Editing a released one changes its
# digest and fails this test: add a new step instead.
PINNED = {
    "rev1": "708d97f4bcd382f743a4eb678e186ddeefcef74eee56766e178e9c31797a127c",
    "rev2": "9bd1f9b521a25a2c94fdb5787ea5baa8ccb030343ef270f1e412baca2d6eebab",
    "step2": "f035c4f2bc71bf1860f9140d98d2b263dca72de84c5a5fa3f488ab4d6833b3e2",
    "rev3": "f871ff6b8e544e7bcb650a6afb0b429e4e701e16f22fd1ec3d934a9ac23a537f",
    "step3": "489cd34d87e391d80634fb3bce9ff9a2e71a2895b6f4f8261f797fb44efec36f",
}


def test_released_text_is_pinned() -> None:
    got = {k: _digest(v) for k, v in _released_texts().items()}
    assert got == PINNED, "a released schema revision or migration step was edited"


def test_rev1_is_the_spec_schema_verbatim() -> None:
    spec = Path(__file__).parents[2] / "shared" / "seeds" / "000_e0919556f8bd3d97.txt"
    if not spec.exists():
        pytest.skip("spec not beside the checkout")
    text = spec.read_text()
    for stmt in revisions.REV1_DDL.strip().split(";\n"):
        assert stmt.strip().rstrip(";") in text


def test_ladder_is_contiguous() -> None:
    assert migrations.ladder_is_contiguous()
    assert migrations.STEPS[-1].revision == revisions.CURRENT_REVISION


@pytest.mark.slow
def test_fresh_files_match_their_revision(sessions_dir: Path) -> None:
    for rev in (1, 2):
        _, path = make_session(sessions_dir, revision=rev)
        conn = db.open_readonly(path)
        assert identity.schema_differences(conn, rev) == []
        assert identity.identify(conn).kind == "session"
        conn.close()


def _rev1_with_everything(sessions_dir: Path) -> tuple[str, Path]:
    """A revision-1 file with overflow payloads, a TEXT payload and an AUTOINCREMENT gap."""
    sid, path = make_session(sessions_dir, revision=1, turns=4, status=None)
    w = SessionWriter.open(sessions_dir, sid, migrate=False)
    assert w.revision == 1
    tool = Producer("tool", "shell", "2")
    w.emit(Event("tool_result", tool, bytes(range(256)) * 400))  # 100 KB, overflow pages
    w.close()
    c = apsw.Connection(str(path))
    c.execute(
        "INSERT INTO events VALUES (NULL, 'text-payload', 't', 'tool_result', 'tool', 'x', '1', "
        "'v1', 'a TEXT payload is legal in revision 1')"
    )
    # A higher counter than max(sequence): a rolled-forward sequence must survive the rebuild.
    c.execute("UPDATE sqlite_sequence SET seq = 500 WHERE name = 'events'")
    c.close()
    return sid, path


@pytest.mark.slow
def test_migration_keeps_every_row_and_counter(sessions_dir: Path) -> None:
    sid, path = _rev1_with_everything(sessions_dir)
    before = all_rows(path)
    w = SessionWriter.open(sessions_dir, sid)
    assert w.revision == revisions.CURRENT_REVISION
    seq = w.emit(Event("tool_call", Producer("tool", "shell", "2"), b"{}"))
    assert seq == 501
    w.close()
    after = all_rows(path)
    # events gained content_hash (and from revision 3 their chain), every other column
    # identical and in sequence order; the other tables' columns identical (from revision 3
    # followed by their content_hash)
    assert [r[:9] for r in after["events"][:-1]] == before["events"]
    for r in after["events"]:
        assert r[9] == event_hash(*r[:9])
    for table in ("session_meta", "cost_ledger", "plan_items", "producers"):
        n = len(before[table][0]) if before[table] else 0
        assert [r[:n] for r in after[table]] == before[table], table
    conn = db.open_readonly(path)
    assert db.pragma(conn, "user_version") == revisions.CURRENT_REVISION
    assert db.pragma(conn, "application_id") == revisions.APPLICATION_ID
    assert identity.schema_differences(conn, revisions.CURRENT_REVISION) == []
    assert db.integrity_problems(conn) == []
    conn.close()


@pytest.mark.parametrize(
    "sql,named",
    [
        ("UPDATE events SET kind = 'KIND_UNSPECIFIED' WHERE sequence = 3", "sequence=3"),
        ("UPDATE events SET producer_category = 'plugin' WHERE sequence = 2", "sequence=2"),
        ("UPDATE session_meta SET status = 'paused'", "status 'paused'"),
        ("UPDATE plan_items SET decision = 'maybe' WHERE sequence = 1", "sequence=1"),
        ("UPDATE producers SET category = 'x' WHERE name = 'shell'", "shell"),
    ],
)
def test_enum_violations_fail_naming_the_row_and_roll_back(
    sessions_dir: Path, sql: str, named: str
) -> None:
    sid, path = make_session(sessions_dir, revision=1)
    c = apsw.Connection(str(path))
    c.execute(sql)
    c.close()
    before = all_rows(path)
    with pytest.raises(errors.MigrationFailed) as e:
        SessionWriter.open(sessions_dir, sid)
    assert named in str(e.value) and "rolled back" not in str(e.value).split(";")[0]
    assert all_rows(path) == before
    conn = db.open_readonly(path)
    assert db.pragma(conn, "user_version") == 1
    conn.close()


@pytest.mark.slow
def test_migration_is_one_transaction(sessions_dir: Path) -> None:
    """A failure just before COMMIT leaves the file exactly at revision 1."""
    sid, path = make_session(sessions_dir, revision=1)
    before = all_rows(path)
    conn = db.open_writer(path)
    db.configure_writer(conn, path)

    def boom() -> None:
        raise RuntimeError("injected")

    with pytest.raises(RuntimeError), faults.injected({"before_commit": boom}):
        migrations.apply_steps(conn, path)
    assert db.pragma(conn, "user_version") == 1
    assert db.pragma(conn, "foreign_keys") == 1
    conn.close()
    assert all_rows(path) == before


def test_conforming_rev1_from_another_writer_is_accepted(tmp_path: Path) -> None:
    """application_id 0, the spec's tables written with other spacing and no comments."""
    path = tmp_path / "other.sqlite"
    c = apsw.Connection(str(path))
    ddl = revisions.REV1_DDL
    import re

    ddl = re.sub(r"--[^\n]*", "", ddl)
    ddl = re.sub(r"[ \t]+", " ", ddl)
    db.exec_script(c, ddl + "PRAGMA user_version = 1;")
    ident = identity.identify(c)
    assert ident.kind == "session" and ident.application_id == 0
    c.execute("CREATE TABLE extra(x)")
    assert identity.identify(c).kind == "foreign"
    c.close()


def test_unversioned_database_is_foreign(tmp_path: Path) -> None:
    c = apsw.Connection(str(tmp_path / "x.sqlite"))
    c.execute("CREATE TABLE t(x)")
    assert identity.identify(c).kind == "foreign"
    c.close()
    c = apsw.Connection(str(tmp_path / "empty.sqlite"))
    assert identity.identify(c).kind == "empty"
    c.close()


@pytest.mark.slow
def test_rev2_constraints_reject_what_the_spec_forbids(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    c = apsw.Connection(str(path))
    for sql in (
        "UPDATE events SET kind = 'KIND_UNSPECIFIED' WHERE sequence = 1",
        "UPDATE events SET producer_category = 'nope' WHERE sequence = 1",
        "UPDATE session_meta SET status = 'paused'",
        "UPDATE plan_items SET decision = 'maybe'",
        "UPDATE producers SET category = 'nope'",
        "UPDATE events SET content_hash = x'00' WHERE sequence = 1",
    ):
        with pytest.raises(apsw.ConstraintError):
            c.execute(sql)
    c.close()


def test_reader_reads_both_revisions(sessions_dir: Path) -> None:
    for rev in (1, 2):
        sid, path = make_session(sessions_dir, revision=rev, turns=2)
        with SessionReader(path) as r:
            assert r.revision == rev
            info = r.info()
            assert info.session_id == sid
            assert info.cost_usd > 0
            assert [e.sequence for e in r.iter_events(page_rows=5)] == list(range(1, 13))


def test_enums_match_the_contract() -> None:
    assert len(enums.KINDS) == 10 and enums.KIND_UNSPECIFIED not in enums.KINDS
    assert len(enums.STATUSES) == 7
    assert set(enums.PRODUCER_CATEGORIES) - set(enums.PLUGIN_CATEGORIES) == {"kernel"}
    assert enums.DECISIONS == ("allow", "ask", "deny")
    assert Usage  # the writer's usage type exists for message events


def test_event_hash_definition_is_pinned() -> None:
    h = event_hash(1, "01ARZ3NDEKTSV4RRFFQ69G5FAV", "t", "message", "model", "m", "1", "1", b"x")
    assert h.hex() == "6630d2be86a2e58a636c9313e4e04ec1"
    assert event_hash(1, "a", "t", "k", "c", "n", "v", "1", "x") != event_hash(
        1, "a", "t", "k", "c", "n", "v", "1", b"x"
    )
