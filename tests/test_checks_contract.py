"""check: the spec and contract points of issue 11, each from a real file (no mocks)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import apsw
import pytest

from agentdb import checks, db
from agentdb.store import SessionReader
from tests.chain_support import reseal
from tests.support import make_session
from tests.test_checks import check, codes, listing, raw


def hardened_raw(path: Path, sql: str) -> None:
    """Like ``raw``, as another conforming writer would write it: on a connection that has
    agentdb's hash function (to keep revision 2's event hashes right), and from revision 3
    with every row hash, the chain and the head recomputed after the edit."""
    conn = apsw.Connection(str(path))
    try:
        db.harden(conn)
        db.exec_script(conn, sql)
        chained = int(db.scalar(conn, "PRAGMA user_version")) >= 3
    finally:
        conn.close()
    if chained:
        reseal(path)


@pytest.mark.slow
def test_application_id_zero_with_a_trigger_is_unsafe_schema_not_foreign(
    sessions_dir: Path,
) -> None:
    """The tables match the revision (another conforming writer): the trigger is the problem."""
    sid, path = make_session(sessions_dir)
    raw(path, "PRAGMA application_id = 0")
    assert check(sessions_dir, sid).verdict == "ok"
    raw(path, "CREATE TRIGGER t AFTER INSERT ON events BEGIN DELETE FROM cost_ledger; END")
    r = check(sessions_dir, sid)
    assert r.verdict == "unsafe_schema", r.findings
    assert "foreign" not in codes(r) and "unsafe_schema" in codes(r)
    old, p1 = make_session(sessions_dir, revision=1)
    raw(p1, "PRAGMA application_id = 0; CREATE VIEW v AS SELECT * FROM events")
    r = check(sessions_dir, old)
    assert r.verdict == "unsafe_schema" and "foreign" not in codes(r), r.findings
    # Tables that do not match a revision still make an application-id-0 file foreign.
    other, p2 = make_session(sessions_dir)
    raw(p2, "PRAGMA application_id = 0; CREATE TABLE extra(x); CREATE VIEW w AS SELECT 1")
    assert check(sessions_dir, other).verdict == "foreign"


@pytest.mark.slow
def test_plan_or_apply_not_by_the_kernel_and_kernel_writing_other_kinds(
    sessions_dir: Path,
) -> None:
    sid, path = make_session(sessions_dir)
    assert check(sessions_dir, sid).verdict == "ok"
    # Another writer's file: its plans written by a plugin producer (listed, hashes right, so
    # nothing else fires; the new producer's row hash is computed by the reseal).
    hardened_raw(
        path,
        "UPDATE events SET producer_category = 'tool', producer_name = 'shell', "
        "producer_version = '9.9.9', content_hash = agentdb_event_hash(sequence, id, timestamp,"
        " kind, 'tool', 'shell', '9.9.9', schema_version, payload) WHERE kind = 'plan'; "
        "INSERT INTO producers (category, name, version, first_seen_sequence, content_hash) "
        "VALUES ('tool', 'shell', '9.9.9', (SELECT min(sequence) FROM events WHERE "
        "producer_version = '9.9.9'), zeroblob(16)); UPDATE producers SET first_seen_sequence = "
        "(SELECT min(sequence) FROM events WHERE producer_category = 'kernel') "
        "WHERE category = 'kernel'",
    )
    r = check(sessions_dir, sid)
    assert "kernel_kind_mismatch" in codes(r), r.findings
    assert r.verdict == "ok"  # a warning: the file is intact, another writer made it
    [f] = [f for f in r.findings if f.code == "kernel_kind_mismatch"]
    assert f.severity == "warning" and "3 plan/apply events" in f.message
    # And the other way round: the kernel producer writing a plugin's kind.
    other, p2 = make_session(sessions_dir)
    hardened_raw(
        p2,
        "UPDATE events SET producer_category = 'kernel', producer_name = 'kernel', "
        "producer_version = '0.9.0', content_hash = agentdb_event_hash(sequence, id, timestamp,"
        " kind, 'kernel', 'kernel', '0.9.0', schema_version, payload) WHERE kind = 'tool_result';"
        "DELETE FROM producers WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.producer_category"
        " = category AND e.producer_name = name AND e.producer_version = version); "
        "UPDATE producers SET first_seen_sequence = (SELECT min(sequence) FROM events e WHERE "
        "e.producer_category = category AND e.producer_name = name AND e.producer_version = "
        "version)",
    )
    r = check(sessions_dir, other)
    assert codes(r) == ["kernel_kind_mismatch"] and r.verdict == "ok", r.findings
    assert "0 plan/apply events" in r.findings[0].message


@pytest.mark.slow
def test_message_without_a_cost_ledger_row(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)  # another writer's file, which wrote no cost row
    hardened_raw(path, "DELETE FROM cost_ledger WHERE rowid = (SELECT min(rowid) FROM cost_ledger)")
    r = check(sessions_dir, sid)
    assert codes(r) == ["message_without_cost"], r.findings
    assert r.verdict == "ok" and r.findings[0].severity == "warning"
    old, p1 = make_session(sessions_dir, revision=1)  # no index on cost_ledger.event_sequence
    raw(p1, "DELETE FROM cost_ledger")
    assert "message_without_cost" in codes(check(sessions_dir, old))
    assert "message_without_cost" not in codes(check(sessions_dir, old, quick=True))


def test_hard_linked_file_is_a_warning(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir)
    os.link(path, tmp_path / "backup.sqlite")  # as `cp -al` / `rsync --link-dest` make
    before = listing(sessions_dir)
    r = check(sessions_dir, sid)
    assert codes(r) == ["hard_linked"] and r.verdict == "ok"
    assert r.findings[0].fix is not None and "cp -p" in r.findings[0].fix
    assert "2 names" in r.findings[0].message
    assert listing(sessions_dir) == before


@pytest.mark.parametrize("target", ["", "-wal"])
def test_readable_by_others_is_a_warning(sessions_dir: Path, target: str) -> None:
    sid, path = make_session(sessions_dir)
    p = path.with_name(path.name + target)
    if target:
        p.write_bytes(b"")
    os.chmod(p, 0o644)
    r = check(sessions_dir, sid)
    assert "readable_by_others" in codes(r), r.findings
    assert r.verdict == "ok"
    [f] = [f for f in r.findings if f.code == "readable_by_others"]
    assert f.fix == f"chmod 600 {p}" and f.severity == "warning"
    os.chmod(p, 0o640)
    assert "readable_by_others" in codes(check(sessions_dir, sid))
    os.chmod(p, 0o664)  # group-writable stays insecure
    assert check(sessions_dir, sid).verdict == "insecure"


@pytest.mark.slow
def test_depth_mismatch_against_a_readable_parent(sessions_dir: Path, tmp_path: Path) -> None:
    parent, pp = make_session(sessions_dir, depth=2)
    child, pc = make_session(sessions_dir)
    # written by another writer that counts depth differently
    hardened_raw(pc, f"UPDATE session_meta SET parent_session_id = '{parent}', depth = 5")
    r = check(sessions_dir, child)
    assert codes(r) == ["depth_mismatch"] and r.verdict == "ok", r.findings
    assert "depth 5" in r.findings[0].message and "expected 3" in r.findings[0].message
    hardened_raw(pc, "UPDATE session_meta SET depth = 3")
    assert codes(check(sessions_dir, child)) == []
    hardened_raw(pc, "UPDATE session_meta SET depth = 0")
    report = checks.check_sessions(sessions_dir, None, jobs=1)
    by_id = {s.session_id: [f.code for f in s.findings] for s in report.sessions}
    assert by_id == {parent: [], child: ["depth_mismatch"]}
    # No readable parent: nothing to compare (parent moved away, or unreadable).
    shutil.move(pp, tmp_path / pp.name)
    assert codes(check(sessions_dir, child)) == []
    (sessions_dir / pp.name).symlink_to(tmp_path / pp.name)
    assert codes(check(sessions_dir, child)) == []
    with SessionReader(tmp_path / pp.name) as reader:  # the parent itself was fine
        assert reader.info().depth == 2
