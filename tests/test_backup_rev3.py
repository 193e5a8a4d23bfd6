"""backup and restore of revision-3 sessions compare by the chain heads (design §11): real
files written by the revision-3 writer, real processes for the command line. The proof path is
asserted by the result's ``decided_by`` and by counting the row comparison's table merges
(``prefix._merge``), which the proof must not need."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb import db
from agentdb.checks import prefix
from agentdb.jobs import backup, backupdir, demo
from agentdb.schema import chain, chainio
from agentdb.store import Event, Producer, SessionWriter
from tests.chain_support import SID, append, build, edit, opened
from tests.rows import all_rows
from tests.runner import run_cli
from tests.support import make_session

TOOL = Producer("tool", "shell", "2.0.0")


@pytest.fixture
def merges(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables the row comparison merged (empty: no row was compared)."""
    seen: list[str] = []
    real = prefix._merge

    def counted(old: Any, new: Any, table: str, lost: Any) -> prefix.TableDiff:
        seen.append(table)
        return real(old, new, table, lost)

    monkeypatch.setattr(prefix, "_merge", counted)
    return seen


@pytest.fixture
def writer(sessions_dir: Path) -> Iterator[SessionWriter]:
    """A live revision-3 session with 3 model turns (SessionWriter.open does not take a
    revision-3 file yet: the writer stays open across backups, as a kernel would)."""
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    demo._turns(w, demo.MODEL_OLD, 3, seed=3)
    try:
        yield w
    finally:
        w.close()


def emit(w: SessionWriter, n: int) -> None:
    for i in range(n):
        w.emit(Event("tool_result", TOOL, b"more %d" % i))


def run(sessions_dir: Path, dest: Path, sid: str) -> backup.BackupOutcome:
    (out,) = backup.backup_sessions(sessions_dir, [sid], dest).sessions
    return out


def backup_cli(sessions_dir: Path, dest: Path, sid: str) -> tuple[int, dict[str, Any]]:
    r = run_cli("--sessions-dir", str(sessions_dir), "backup", sid, "--to", str(dest), "--json")
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


def restore_cli(sessions_dir: Path, *args: str) -> tuple[int, dict[str, Any]]:
    r = run_cli("--sessions-dir", str(sessions_dir), "restore", *args, "--json")
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def naive(path: Path, *sql: str) -> None:
    """Plain SQL that recomputes no hash (a hand edit)."""
    conn = apsw.Connection(str(path))
    try:
        with conn:
            for s in sql:
                conn.execute(s)
    finally:
        conn.close()


def head(path: Path) -> int:
    conn = db.open_readonly(path)
    try:
        return int(db.scalar(conn, "SELECT head_sequence FROM session_chain"))
    finally:
        conn.close()


# -------------------------------------------------------------------------- backup: proof


@pytest.mark.slow
def test_grown_session_is_updated_by_the_proof(
    sessions_dir: Path, tmp_path: Path, writer: SessionWriter, merges: list[str]
) -> None:
    dest, sid = tmp_path / "b", writer.session_id
    first = run(sessions_dir, dest, sid)
    assert first.outcome == "copied" and first.decided_by is None  # nothing to compare with
    emit(writer, 4)
    out = run(sessions_dir, dest, sid)
    assert out.outcome == "updated", out.message
    assert out.decided_by == "proof" and merges == []  # not one row compared
    assert all_rows(dest / f"{sid}.sqlite") == all_rows(writer.path)
    again = run(sessions_dir, dest, sid)
    assert again.outcome == "unchanged" and again.decided_by == "proof" and merges == []
    assert again.to_json()["decided_by"] == "proof"


@pytest.mark.slow
def test_status_change_alone_is_updated_by_the_proof(
    sessions_dir: Path, tmp_path: Path, writer: SessionWriter, merges: list[str]
) -> None:
    dest, sid = tmp_path / "b", writer.session_id
    run(sessions_dir, dest, sid)
    writer.set_status("completed")  # meta_hash changes, the head does not
    out = run(sessions_dir, dest, sid)
    assert (out.outcome, out.decided_by, merges) == ("updated", "proof", [])
    assert all_rows(dest / f"{sid}.sqlite")["session_meta"] == all_rows(writer.path)["session_meta"]


@pytest.mark.slow
def test_compare_reports_the_proof_and_counts(
    sessions_dir: Path, tmp_path: Path, writer: SessionWriter, merges: list[str]
) -> None:
    old = tmp_path / "old.sqlite"
    conn = db.open_readonly(writer.path)
    db.backup_to(conn, old)
    conn.close()
    emit(writer, 2)
    c = prefix.compare_paths(old, writer.path)
    assert c.decided_by == "proof" and c.is_prefix and not c.identical and merges == []
    assert c.tables["events"].added == 2 and c.lost_rows == 0 and c.rollback is None
    assert (c.old_head, c.new_head) == (18, 20)
    back = prefix.compare_paths(writer.path, old)  # the other way: old is a proper prefix
    assert back.decided_by == "proof" and not back.is_prefix and merges == []
    assert back.rollback == (18, 20) and back.lost_event_ranges == [(19, 20)]
    assert back.describe_loss() == "events 19-20"


# ------------------------------------------------------------- a copy that fails its chain


@pytest.mark.slow
def test_copy_altered_by_naive_update_is_never_a_prefix(
    sessions_dir: Path, tmp_path: Path, writer: SessionWriter
) -> None:
    dest, sid = tmp_path / "b", writer.session_id
    run(sessions_dir, dest, sid)
    copy = dest / f"{sid}.sqlite"
    naive(copy, "UPDATE cost_ledger SET cost_usd = cost_usd + 1 WHERE sequence = 1")
    altered = copy.read_bytes()
    # the same edit made to a second copy: every row alike, so rows alone call them identical
    twin = tmp_path / "twin.sqlite"
    shutil.copyfile(copy, twin)
    twin.chmod(0o600)
    c = prefix.compare_paths(copy, twin)
    assert c.old_chain_ok is False and c.new_chain_ok is False and c.decided_by == "rows"
    assert c.lost_rows == 0 and not c.is_prefix and not c.identical
    assert "fails full chain verification" in c.proof_refused
    c = prefix.compare_paths(copy, writer.path)
    assert not c.is_prefix and not c.identical

    emit(writer, 2)
    out = run(sessions_dir, dest, sid)
    # a revision-3 copy whose chain fails is a copy that fails verification: kept as .corrupt
    assert out.outcome == "copied", out.message
    assert out.corrupt_path == dest / f"{sid}.sqlite.corrupt"
    assert out.corrupt_path.read_bytes() == altered  # never deleted
    assert "cost_ledger rows do not match their hash" in out.message
    assert all_rows(copy) == all_rows(writer.path)


@pytest.mark.slow
def test_restore_refuses_a_copy_whose_chain_fails(
    sessions_dir: Path, tmp_path: Path, writer: SessionWriter
) -> None:
    dest, sid = tmp_path / "b", writer.session_id
    run(sessions_dir, dest, sid)
    emit(writer, 1)
    writer.close()
    naive(dest / f"{sid}.sqlite", "UPDATE plan_items SET decision = 'deny'")
    code, doc = restore_cli(sessions_dir, sid, "--from", str(dest), "--force")
    (s,) = doc["sessions"]
    assert code == 1 and s["outcome"] == "refused" and s["reason"] == "bad_copy", s


@pytest.mark.slow
def test_restore_over_a_current_file_whose_chain_fails_needs_force(
    sessions_dir: Path, tmp_path: Path, writer: SessionWriter
) -> None:
    dest, sid = tmp_path / "b", writer.session_id
    emit(writer, 2)
    run(sessions_dir, dest, sid)
    writer.close()
    # a change only the chain sees (a cost): check's judge names it
    naive(writer.path, "UPDATE cost_ledger SET cost_usd = 0.5 WHERE sequence = 2")
    code, doc = restore_cli(sessions_dir, sid, "--from", str(dest))
    (s,) = doc["sessions"]
    assert code == 1 and [r["code"] for r in s["reasons"]] == ["damaged"], s
    assert "cost_ledger rows do not match their hash" in s["reasons"][0]["message"]
    code, doc = restore_cli(sessions_dir, sid, "--from", str(dest), "--force")
    (s,) = doc["sessions"]
    assert code == 0 and s["outcome"] == "restored" and s["forced"], s
    assert s["lost_events"] is None  # it cannot be compared
    assert all_rows(writer.path) == all_rows(dest / f"{sid}.sqlite")


# ---------------------------------------------------------------------------- rollback


@pytest.mark.slow
def test_session_rolled_back_is_kept_and_restore_puts_it_back(
    sessions_dir: Path, tmp_path: Path, writer: SessionWriter
) -> None:
    sid = writer.session_id
    earlier, dest = tmp_path / "earlier", tmp_path / "b"
    assert backup_cli(sessions_dir, earlier, sid)[0] == 0  # the session at event 18
    emit(writer, 5)
    assert backup_cli(sessions_dir, dest, sid)[1]["sessions"][0]["outcome"] == "copied"
    writer.close()
    # an older file put back: a consistent earlier state, which check calls ok
    for s in ("-wal", "-shm"):
        Path(str(writer.path) + s).unlink(missing_ok=True)
    shutil.copyfile(earlier / f"{sid}.sqlite", writer.path)
    writer.path.chmod(0o600)
    assert head(writer.path) == 18
    copy = dest / f"{sid}.sqlite"
    before = copy.read_bytes()

    code, doc = backup_cli(sessions_dir, dest, sid)
    (s,) = doc["sessions"]
    assert code == 0 and s["outcome"] == "kept", s
    assert s["decided_by"] == "proof" and s["lost"] == "events 19-23"
    assert s["rollback"] == {
        "copy": str(copy),
        "session_head": 18,
        "copy_head": 23,
        "lost_events": [[19, 23]],
    }
    assert (
        "events 19-23" in s["message"] and f"agentdb restore {sid} --from {dest}" in (s["message"])
    )
    assert s["current_path"] is None and copy.read_bytes() == before
    assert sorted(p.name for p in dest.iterdir()) == [copy.name]  # nothing written beside it

    code, doc = restore_cli(sessions_dir, sid, "--from", str(dest))
    (r,) = doc["sessions"]
    assert code == 0 and r["outcome"] == "restored" and not r["forced"], r
    assert r["decided_by"] == "proof" and any("rollback" in n for n in r["notes"])
    assert all_rows(writer.path) == all_rows(copy) and head(writer.path) == 23
    code, doc = backup_cli(sessions_dir, dest, sid)
    assert doc["sessions"][0]["outcome"] == "unchanged"


@pytest.mark.slow
def test_revision_2_rollback_is_unchanged_behaviour(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir, status=None, revision=2)
    earlier = tmp_path / "earlier.sqlite"
    shutil.copyfile(path, earlier)
    with SessionWriter.open(sessions_dir, sid, migrate=False) as w:  # it stays at revision 2
        for i in range(3):
            w.emit(Event("tool_result", TOOL, b"more %d" % i))
    dest = tmp_path / "b"
    assert run(sessions_dir, dest, sid).outcome == "copied"
    for s in ("-wal", "-shm"):
        Path(str(path) + s).unlink(missing_ok=True)
    shutil.copyfile(earlier, path)
    path.chmod(0o600)
    out = run(sessions_dir, dest, sid)
    # rows decide; the session's state is written beside the copy, as before revision 3
    assert out.outcome == "kept" and out.decided_by == "rows" and out.rollback is None
    assert out.current_path is not None and backupdir.STAMPED_RE.fullmatch(out.current_path.name)
    assert out.lost == "events 19-21"
    c = prefix.compare_paths(path, dest / f"{sid}.sqlite")
    assert c.decided_by == "rows" and c.proof_refused == "" and c.old_chain_ok is None


# ------------------------------------------------------- recorded gaps: rows decide


def _recovered(original: Path, replacement: Path, *deletions: str) -> None:
    """tests/test_chain.py's simulated recovery (§6): stored hashes kept, the walk's breaks
    recorded as gaps, the head rebuilt from the walk."""
    conn = opened(original)
    try:
        old = chainio.verify_full(conn)
    finally:
        conn.close()
    shutil.copy(original, replacement)
    edit(replacement, "DELETE FROM session_chain", *deletions)
    conn = apsw.Connection(str(replacement))
    try:
        report = chainio.verify_full(conn, heads=False, max_listed=None)
        todo = chain.gaps_to_record(report, old.head, highest_sequence=old.last_sequence)
        with conn:
            records = chainio.record_gaps(conn, todo, "2026-12-01T02:00:00Z")
            chainio.write_head(
                conn,
                chain.rebuild_head(
                    report,
                    records,
                    session_id=SID,
                    origin="recovered",
                    origin_revision=3,
                    origin_at="2026-12-01T02:00:00Z",
                ),
            )
    finally:
        conn.close()


# 10 events: costs on 2, 5, 9; plan items on 3, 5; producers first seen at 1, 4, 8
SHAPE = [(0, 0, False), (1, 0, False), (0, 2, False), (0, 0, True), (2, 1, False)]
SHAPE += [(0, 0, False), (0, 0, False), (0, 0, True), (1, 0, False), (0, 0, False)]


def _file(path: Path) -> Path:
    os.chmod(path, 0o600)
    return path


@pytest.mark.slow
def test_recorded_gap_below_the_head_falls_back_to_rows(tmp_path: Path, merges: list[str]) -> None:
    original = tmp_path / f"{SID}.sqlite"
    build(original, SHAPE)
    edit(original, "PRAGMA user_version = 3")  # what the writer stamps (build leaves 0)
    repl = tmp_path / "replacement.sqlite"
    _recovered(original, repl, "DELETE FROM events WHERE sequence IN (4, 5)")
    assert append(repl) == 11  # the chain goes on from event 10: 10 chains as in the original
    c = prefix.compare_paths(_file(original), _file(repl))
    assert c.decided_by == "rows" and "recorded gap" in c.proof_refused
    assert merges  # the rows were compared...
    assert not c.is_prefix and c.lost_event_ranges == [(4, 5)]  # ...and 4-5 are lost

    # a copy taken after the recovery holds the same gap record: still rows, and a prefix
    copy = tmp_path / "copy.sqlite"
    shutil.copy(repl, copy)
    assert append(repl) == 12
    merges.clear()
    c = prefix.compare_paths(_file(copy), repl)
    assert c.decided_by == "rows" and merges and c.is_prefix and not c.identical
    assert c.tables["events"].added == 1 and c.old_chain_ok and c.new_chain_ok
    # the untouched original against itself grown: the proof applies
    grown = tmp_path / "grown.sqlite"
    shutil.copy(original, grown)
    append(grown)
    merges.clear()
    c = prefix.compare_paths(original, _file(grown))
    assert c.decided_by == "proof" and c.is_prefix and merges == []


def test_rows_of_lost_events_above_the_head_fall_back_to_rows(
    tmp_path: Path, merges: list[str]
) -> None:
    original = tmp_path / f"{SID}.sqlite"
    build(original, SHAPE)
    edit(original, "PRAGMA user_version = 3")
    # the tail 9-10 lost; event 9's cost row kept by the salvage: bound to no event the head
    # (8) reaches, so the proof (gaps at or below the head only) cannot vouch for it
    copy = tmp_path / "copy.sqlite"
    _recovered(original, copy, "DELETE FROM events WHERE sequence IN (9, 10)")
    grown = tmp_path / "grown.sqlite"
    shutil.copy(copy, grown)
    append(grown)
    c = prefix.compare_paths(_file(copy), _file(grown))
    assert c.old_chain_ok and c.new_chain_ok and c.old_chain and c.old_chain.orphans_of_recovery
    assert (
        c.decided_by == "rows" and c.proof_refused == "a file holds rows of events a recovery lost"
    )
    assert merges and c.is_prefix
