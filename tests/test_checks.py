"""checks: every finding from a real defect in a real file (no mocks)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import apsw
import pytest

from agentdb import checks, recoverylog, salvage
from agentdb.checks.codes import CODES
from agentdb.jobs import demo
from agentdb.paths import job_file, recovery_log_path, sidecar
from agentdb.schema.revisions import CURRENT_REVISION, DDL
from tests.support import WriterProcess, held_open, make_session

# revision 3's chain findings (docs/check.md): what a hand edit adds from that revision on
CHAIN_CODES = {
    "row_hash_mismatch",
    "chain_break",
    "head_mismatch",
    "count_mismatch",
    "meta_hash_mismatch",
    "gap_record_damaged",
    "unbound_rows",
}
assert set(CODES) >= CHAIN_CODES


def raw(path: Path, sql: str) -> None:
    """Change a closed session file behind agentdb's back (as damage or a hostile edit would)."""
    conn = apsw.Connection(str(path))
    try:
        for _ in conn.execute(sql):
            pass
    finally:
        conn.close()


def codes(result: checks.SessionCheck) -> list[str]:  # type: ignore[name-defined]
    return [f.code for f in result.findings]


def check(sessions_dir: Path, sid: str, **kw: object) -> checks.SessionCheck:  # type: ignore[name-defined]
    return checks.check_file(sessions_dir, sid, **kw)  # type: ignore[arg-type]


def listing(d: Path) -> dict[str, tuple[int, int, int]]:
    return {
        p.name: (p.stat().st_size, p.stat().st_mtime_ns, stat.S_IMODE(p.stat().st_mode))
        for p in d.iterdir()
    }


def test_healthy_file_is_ok_and_left_as_found(sessions_dir: Path) -> None:
    sid, _ = make_session(sessions_dir)
    before = listing(sessions_dir)
    r = check(sessions_dir, sid)
    assert r.verdict == "ok", r.findings
    assert r.findings == []
    assert (r.status, r.revision, r.live) == ("completed", CURRENT_REVISION, None)
    assert listing(sessions_dir) == before


@pytest.mark.slow
def test_corrupt_page(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=40)
    demo.damage_page(path, table="events", nth_leaf=1)
    r = check(sessions_dir, sid)
    assert r.verdict == "corrupt"
    assert "integrity" in codes(r)
    assert f"agentdb recover {sid}" in r.findings[0].message
    rq = check(sessions_dir, sid, quick=True)
    assert rq.verdict == "corrupt"


@pytest.mark.slow
def test_flipped_payload_byte_caught_by_content_hash(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    raw(path, "UPDATE events SET payload = X'00' WHERE sequence = 3")
    assert check(sessions_dir, sid).verdict == "corrupt"
    assert "content_hash_mismatch" in codes(check(sessions_dir, sid))
    quick = check(sessions_dir, sid, quick=True)
    assert quick.verdict == "ok"  # --quick verifies no payload hashes (documented)
    assert codes(quick) == []


@pytest.mark.slow
def test_trigger_is_unsafe_schema(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    raw(path, "CREATE TRIGGER t AFTER INSERT ON events BEGIN DELETE FROM cost_ledger; END")
    r = check(sessions_dir, sid)
    assert r.verdict == "unsafe_schema"
    assert "unsafe_schema" in codes(r)
    assert "schema_mismatch" not in codes(r)


@pytest.mark.slow
def test_view_is_unsafe_schema(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    raw(path, "CREATE VIEW v AS SELECT * FROM events")
    assert check(sessions_dir, sid).verdict == "unsafe_schema"


@pytest.mark.parametrize("target", ["", "-wal"])
def test_group_writable_is_insecure(sessions_dir: Path, target: str) -> None:
    sid, path = make_session(sessions_dir)
    p = sidecar(path, target) if target else path
    if target:
        p.write_bytes(b"")
        os.chmod(p, 0o600)
    os.chmod(p, 0o664)
    r = check(sessions_dir, sid)
    assert r.verdict == "insecure"
    assert {"insecure_mode", "not_opened"} <= set(codes(r))


def test_symlink_directory_fifo_and_missing(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir)
    link_id, dir_id, fifo_id, gone = (
        "01ARZ3NDEKTSV4RRFFQ69G5FA1",
        "01ARZ3NDEKTSV4RRFFQ69G5FA2",
        "01ARZ3NDEKTSV4RRFFQ69G5FA3",
        "01ARZ3NDEKTSV4RRFFQ69G5FA4",
    )
    (sessions_dir / f"{link_id}.sqlite").symlink_to(path)
    (sessions_dir / f"{dir_id}.sqlite").mkdir()
    os.mkfifo(sessions_dir / f"{fifo_id}.sqlite")
    assert check(sessions_dir, link_id).verdict == "insecure"
    assert codes(check(sessions_dir, link_id)) == ["symlink"]
    assert codes(check(sessions_dir, dir_id)) == ["not_regular"]
    assert codes(check(sessions_dir, fifo_id)) == ["not_regular"]
    assert check(sessions_dir, gone).verdict == "unreadable"
    report = checks.check_sessions(sessions_dir, None, jobs=1)
    assert [s.session_id for s in report.sessions] == sorted([sid, link_id, dir_id, fifo_id])
    assert sum(s.ok for s in report.sessions) == 1


@pytest.mark.slow
def test_identity_foreign_too_new_old_empty_garbage(sessions_dir: Path) -> None:
    foreign, p1 = make_session(sessions_dir)
    raw(p1, "PRAGMA application_id = 12345")
    too_new, p2 = make_session(sessions_dir)
    raw(p2, "PRAGMA user_version = 99")
    old, _ = make_session(sessions_dir, revision=1)
    empty = "01ARZ3NDEKTSV4RRFFQ69G5FB1"
    (sessions_dir / f"{empty}.sqlite").write_bytes(b"")
    os.chmod(sessions_dir / f"{empty}.sqlite", 0o600)
    garbage = "01ARZ3NDEKTSV4RRFFQ69G5FB2"
    (sessions_dir / f"{garbage}.sqlite").write_bytes(os.urandom(8192))
    os.chmod(sessions_dir / f"{garbage}.sqlite", 0o600)
    assert check(sessions_dir, foreign).verdict == "foreign"
    r = check(sessions_dir, too_new)
    assert r.verdict == "too_new" and "99" in r.findings[0].message
    r = check(sessions_dir, old)
    assert r.verdict == "needs_migration" and r.findings[0].fix == f"agentdb migrate {old}"
    assert codes(check(sessions_dir, empty)) == ["empty_database"]
    assert check(sessions_dir, garbage).verdict == "unreadable"


@pytest.mark.parametrize("revision", sorted(DDL))
def test_a_column_missing_by_name_is_corrupt_not_inconsistent(
    sessions_dir: Path, revision: int
) -> None:
    # a flipped byte in the stored CREATE TABLE text: SQLite reads the file, no reader finds
    # session_meta.parent_session_id (the fuzz campaign's seed 360093). Every copy of the text
    # is flipped: a schema that outgrew page 1 (revision 3's) leaves a stale one in free space.
    a, pa = make_session(sessions_dir, revision=revision)
    data = bytearray(pa.read_bytes())
    start = data.index(b"CREATE TABLE session_meta")
    while start >= 0:
        data[data.index(b"parent_session_id", start) + 8] ^= 0x01
        start = data.find(b"CREATE TABLE session_meta", start + 1)
    pa.write_bytes(bytes(data))
    r = check(sessions_dir, a)
    assert r.verdict == "corrupt"
    older = ["needs_migration"] if revision < CURRENT_REVISION else []
    assert codes(r) == [*older, "schema_columns_missing", "schema_mismatch"]
    missing = r.findings[len(older)]
    assert "session_meta has no column parent_session_id" in missing.message
    assert missing.fix == f"agentdb recover {a}"


@pytest.mark.slow
@pytest.mark.parametrize("revision", [2, 3])
def test_schema_and_meta_inconsistencies(sessions_dir: Path, revision: int) -> None:
    older = ["needs_migration"] if revision < CURRENT_REVISION else []
    # from revision 3 a hand edit of session_meta is also a row the head did not hash: damage
    unhashed = ["meta_hash_mismatch"] if revision >= 3 else []
    edited = "corrupt" if revision >= 3 else "inconsistent"
    a, pa = make_session(sessions_dir, revision=revision)
    raw(pa, "DROP INDEX idx_events_kind")  # the schema: no hash covers it
    assert codes(check(sessions_dir, a)) == [*older, "schema_mismatch"]
    assert check(sessions_dir, a).verdict == "inconsistent"
    # another session's file under this name (renamed, at any revision): foreign, not damage
    b, pb = make_session(sessions_dir, revision=revision)
    _other, po = make_session(sessions_dir, revision=revision)
    os.replace(po, pb)
    rb = check(sessions_dir, b)  # (at revision 3 its chain starts from the other id's genesis)
    assert "meta_id_mismatch" in codes(rb) and rb.verdict == "foreign"
    c, pc = make_session(sessions_dir, revision=revision)
    raw(pc, "UPDATE session_meta SET ended_at = NULL")
    assert codes(check(sessions_dir, c)) == [*older, "ended_at_inconsistent", *unhashed]
    d, pd = make_session(sessions_dir, revision=revision)
    raw(pd, "DELETE FROM session_meta")
    assert codes(check(sessions_dir, d)) == [*older, "meta_missing", *unhashed]
    e, pe = make_session(sessions_dir, revision=1)
    raw(pe, "UPDATE session_meta SET status = 'paused'")
    raw(pe, "UPDATE events SET kind = 'bogus' WHERE sequence = 1")
    assert {"bad_status", "bad_kind", "needs_migration"} <= set(codes(check(sessions_dir, e)))
    assert check(sessions_dir, e).verdict == "inconsistent"
    for sid in (c, d):
        assert check(sessions_dir, sid).verdict == edited
    f, pf = make_session(sessions_dir, revision=revision)
    raw(pf, "UPDATE session_meta SET session_id = 'not-a-session-id'")
    assert codes(check(sessions_dir, f)) == [*older, "meta_id_invalid", *unhashed]
    assert check(sessions_dir, f).verdict == edited


@pytest.mark.slow
@pytest.mark.parametrize("revision", [2, 3])
def test_derived_rows_must_point_at_the_right_events(sessions_dir: Path, revision: int) -> None:
    # the consistency rule is reported at every revision; from revision 3 the same hand edit
    # also fails the row's hash or its event's chain (design §4), which makes it corrupt
    cases = [
        # a context_contribution event
        ("UPDATE cost_ledger SET event_sequence = 1", "ledger_not_message", "row_hash_mismatch"),
        # a message event
        ("UPDATE plan_items SET event_sequence = 2", "plan_item_not_plan", "row_hash_mismatch"),
        (
            "UPDATE producers SET first_seen_sequence = 2 WHERE category = 'tool'",
            "producer_mismatch",
            "row_hash_mismatch",
        ),
        ("DELETE FROM producers WHERE category = 'context'", "producer_unlisted", "chain_break"),
    ]
    for sql, rule, evidence in cases:
        sid, path = make_session(sessions_dir, revision=revision)
        raw(path, sql)
        r = check(sessions_dir, sid)
        assert rule in codes(r), (sql, r.findings)
        if revision >= 3:
            assert evidence in codes(r) and r.verdict == "corrupt", (sql, r.findings)
        else:
            assert not CHAIN_CODES & set(codes(r)) and r.verdict == "inconsistent", sql


def test_missing_event_unless_recovered(sessions_dir: Path) -> None:
    """Revision 2: rows of a lost event are inconsistent, unless the recovery log says the
    session was salvaged (revision 3's rule is the next test)."""
    sid, path = make_session(sessions_dir, revision=2)
    raw(path, "DELETE FROM events WHERE kind = 'plan'")
    r = check(sessions_dir, sid)
    assert r.verdict == "inconsistent" and "missing_event" in codes(r)
    recoverylog.append(
        recovery_log_path(sessions_dir),
        {"session_id": sid, "event": "outcome", "outcome": "recovered"},
    )
    r = check(sessions_dir, sid)
    assert r.verdict == "needs_migration", r.findings  # nothing worse
    assert "orphan_of_recovery" in codes(r) and "missing_event" not in codes(r)


@pytest.mark.slow
def test_unbound_rows_unless_a_recovery_recorded_the_gap(sessions_dir: Path) -> None:
    """Revision 3: rows of a deleted event are unbound_rows (the walk replaces missing_event)
    beside the chain break: corrupt. A recovery-log line does not excuse them (the file's gap
    records say what a recovery lost); a real recovery, which records the gaps, does."""
    sid, path = make_session(sessions_dir, revision=3)
    # secure_delete: the deleted cells are zeroed, so no engine finds them in free space (a
    # real loss, which the recovery must record)
    raw(path, "PRAGMA secure_delete=ON; DELETE FROM events WHERE kind = 'plan'")
    r = check(sessions_dir, sid)
    assert r.verdict == "corrupt" and {"unbound_rows", "chain_break"} <= set(codes(r))
    assert "missing_event" not in codes(r)
    recoverylog.append(
        recovery_log_path(sessions_dir),
        {"session_id": sid, "event": "outcome", "outcome": "recovered"},
    )
    r = check(sessions_dir, sid)
    assert r.verdict == "corrupt" and "unbound_rows" in codes(r)
    assert salvage.recover_session(sessions_dir, sid).outcome == "recovered"
    r = check(sessions_dir, sid)
    assert r.verdict == "ok", r.findings
    assert {"orphan_of_recovery", "chain_gap_recorded"} <= set(codes(r))
    assert not CHAIN_CODES & set(codes(r))


def test_live_session_is_shown_and_its_wal_not_judged(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    with held_open(path) as pid:
        r = check(sessions_dir, sid)
    assert r.live == pid
    assert r.verdict == "ok"
    assert "live" in codes(r) and "wal_not_judged" in codes(r)


def test_interrupted_session(sessions_dir: Path) -> None:
    sid, _ = make_session(sessions_dir, status="running")
    r = check(sessions_dir, sid)
    assert r.verdict == "ok" and codes(r) == ["interrupted"]
    with held_open(sessions_dir / f"{sid}.sqlite"):
        assert "interrupted" not in codes(check(sessions_dir, sid))


def _killed_writer(sessions_dir: Path) -> tuple[str, Path, list[int]]:
    sid, path = make_session(sessions_dir, status="running")
    w = WriterProcess(sessions_dir, sid)
    # Enough commits for several WAL frames, far fewer than an automatic checkpoint (which
    # would restart the WAL and leave older frames stale).
    w.wait_for_commits(20)
    seqs, _ = w.stop()  # SIGKILL: the WAL and -shm stay behind
    assert sidecar(path, "-wal").stat().st_size > 0
    return sid, path, seqs


@pytest.mark.slow
def test_writer_killed_with_sigkill(sessions_dir: Path) -> None:
    sid, _, seqs = _killed_writer(sessions_dir)
    r = check(sessions_dir, sid)
    assert r.verdict == "ok", r.findings
    assert "interrupted" in codes(r)
    assert seqs


@pytest.mark.slow
def test_damage_in_the_middle_of_the_wal(sessions_dir: Path) -> None:
    sid, path, _ = _killed_writer(sessions_dir)
    wal = sidecar(path, "-wal")
    data = bytearray(wal.read_bytes())
    page = int.from_bytes(data[8:12], "big")
    frames = (len(data) - 32) // (24 + page)
    assert frames > 4
    off = 32 + 1 * (24 + page) + 24 + 100  # inside the second frame's page
    data[off] ^= 0xFF
    wal.write_bytes(bytes(data))
    r = check(sessions_dir, sid)
    assert r.verdict == "corrupt", r.findings
    assert {"wal_checksum_break", "wal_frames_after_break"} <= set(codes(r))


@pytest.mark.slow
def test_torn_wal_tail_is_normal(sessions_dir: Path) -> None:
    sid, path, _ = _killed_writer(sessions_dir)
    wal = sidecar(path, "-wal")
    with open(wal, "ab") as f:
        f.write(b"\x01" * 1000)  # a partial frame, as a crash mid-write leaves
    r = check(sessions_dir, sid)
    assert r.verdict == "ok", r.findings
    assert "wal_torn_tail" in codes(r)


def test_directory_extras(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    log = recovery_log_path(sessions_dir)
    recoverylog.append(
        log,
        {
            "time": "2026-01-02T03:04:05.000Z",
            "session_id": sid,
            "event": "outcome",
            "outcome": "recovered",
            "corrupt_path": str(path) + ".corrupt",
        },
    )
    (sessions_dir / f"{sid}.sqlite.corrupt").write_bytes(b"x")
    job_file(path, "recover", "tmp").write_bytes(b"x")
    orphan = "01ARZ3NDEKTSV4RRFFQ69G5FC0"
    (sessions_dir / f"{orphan}.sqlite-wal").write_bytes(b"")
    (sessions_dir / "notes.txt").write_text("not ours")
    report = checks.check_sessions(sessions_dir, None, jobs=1)
    (s,) = report.sessions
    assert s.verdict == "ok"
    rec = next(f for f in s.findings if f.code == "recovered_earlier")
    assert "2026-01-02T03:04:05.000Z" in rec.message
    assert "job_leftover" in codes(s)
    assert [d.finding.code for d in report.directory] == ["orphan_sidecar"]
    assert report.directory[0].session_id == orphan


@pytest.mark.slow
def test_parallel_matches_serial_and_is_in_id_order(sessions_dir: Path) -> None:
    ids = [make_session(sessions_dir, turns=1)[0] for _ in range(60)]
    demo.damage_page(sessions_dir / f"{ids[7]}.sqlite", table="events", nth_leaf=0, fill=b"\xff")
    serial = checks.check_sessions(sessions_dir, None, jobs=1, quick=True)
    seen: list[int] = []
    parallel = checks.check_sessions(
        sessions_dir, None, jobs=3, quick=True, progress=lambda d, t: seen.append(d)
    )
    assert [s.session_id for s in parallel.sessions] == sorted(ids)
    assert [(s.session_id, s.verdict) for s in serial.sessions] == [
        (s.session_id, s.verdict) for s in parallel.sessions
    ]
    assert seen[-1] == 60
    assert parallel.summary["problems"] == 1


@pytest.mark.slow
def test_check_beside_a_live_writer(sessions_dir: Path) -> None:
    """A writer appends continuously while check --all runs in a loop."""
    sid, path = make_session(sessions_dir, status="running")
    others = [make_session(sessions_dir, turns=1)[0] for _ in range(3)]
    w = WriterProcess(sessions_dir, sid)
    verdicts = []
    try:
        for i in range(25):
            rep = checks.check_sessions(sessions_dir, None, jobs=1, quick=bool(i % 2))
            verdicts += [(s.session_id, s.verdict, s.live) for s in rep.sessions]
        w.wait_for_commits(11)  # however slow the writer was to start on a loaded machine
    finally:
        seqs, err = w.stop()
    assert "Error" not in err and "Traceback" not in err, err
    assert all(v == "ok" for _, v, _ in verdicts), [x for x in verdicts if x[1] != "ok"]
    assert any(s == sid and live for s, _, live in verdicts)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    stored = {r[0] for r in conn.execute("SELECT sequence FROM events")}
    conn.close()
    assert set(seqs) <= stored, "the writer lost committed events"
    assert len(seqs) > 10
    assert set(others) < {s for s, _, _ in verdicts}


def test_json_shape(sessions_dir: Path) -> None:
    from agentdb.cli.output import jsonable

    make_session(sessions_dir)
    rep = checks.check_sessions(sessions_dir, None, jobs=1)
    doc = json.loads(json.dumps(jsonable(rep.sessions[0])))
    assert {"session_id", "path", "verdict", "findings"} <= set(doc)
