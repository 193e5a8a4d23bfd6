"""recover_session's decisions: healthy, dry run, live, unreadable, refused, revisions, rebuilt
session_meta, stale copies; the kernel's automatic attempt; the CLI."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path

import apsw
import pytest

from agentdb import recoverylog, salvage
from agentdb.kernel import open_session
from agentdb.paths import sidecar
from agentdb.salvage import merge
from agentdb.store import Event, SessionReader
from tests.rows import row_sets, zero_page
from tests.runner import Agentdb
from tests.salvage import corpus
from tests.salvage.test_corpus import assert_passes_check
from tests.support import held_open, make_session


def snapshot(d: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mode) for p in sorted(d.iterdir())}


def log_of(sessions_dir: Path) -> Path:
    return sessions_dir.parent / "recovery.log"


def test_healthy_is_left_alone(sessions_dir: Path) -> None:
    sid, _ = make_session(sessions_dir, turns=3)
    before = snapshot(sessions_dir)
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "healthy"
    assert snapshot(sessions_dir) == before
    assert not log_of(sessions_dir).exists()


@pytest.mark.slow
def test_dry_run_changes_nothing(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    before = snapshot(sessions_dir)
    out = salvage.recover_session(sessions_dir, sid, dry_run=True)
    assert out.outcome == "recovered" and out.dry_run
    assert out.tables["events"]["salvaged"] > 0
    assert snapshot(sessions_dir) == before
    assert not log_of(sessions_dir).exists()


@pytest.mark.slow
def test_live_session_is_skipped(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    with held_open(path):
        before = snapshot(sessions_dir)
        out = salvage.recover_session(sessions_dir, sid)
        assert out.outcome == "skipped_live"
        assert snapshot(sessions_dir) == before


@pytest.mark.slow
def test_unsalvageable_file_is_unreadable_and_untouched(sessions_dir: Path) -> None:
    sid = "01HZZZZZZZZZZZZZZZZZZZZZZZ"
    path = sessions_dir / f"{sid}.sqlite"
    path.write_bytes(random.Random(1).randbytes(40_000))
    os.chmod(path, 0o600)
    before = snapshot(sessions_dir)
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "unreadable"
    assert snapshot(sessions_dir) == before
    entry = recoverylog.entries_for(log_of(sessions_dir), sid)[-1]
    assert entry["outcome"] == "unreadable" and entry["corrupt_path"] is None


def test_symlink_and_foreign_are_refused(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(tmp_path / "elsewhere", turns=1)
    (sessions_dir / path.name).symlink_to(path)
    assert salvage.recover_session(sessions_dir, sid).outcome == "refused"
    fid = "01HYYYYYYYYYYYYYYYYYYYYYYY"
    conn = apsw.Connection(str(sessions_dir / f"{fid}.sqlite"))
    conn.execute("PRAGMA application_id=7; CREATE TABLE t(x)")
    conn.close()
    before = snapshot(sessions_dir)
    assert salvage.recover_session(sessions_dir, fid).outcome == "refused"
    assert snapshot(sessions_dir) == before


def test_revision_1_file_recovers_to_current_revision(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=20, revision=1)
    original = row_sets(path)
    corpus.d_interior_page(path)
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered"
    assert_passes_check(path, sid)
    got = row_sets(path)
    assert {r[:9] for r in got["events"]} == original["events"]


def test_lost_session_meta_is_rebuilt_and_said(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=5)
    zero_page(path, corpus.pages_of(path, "session_meta")[0])
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered"
    assert "session_meta" in out.lost and "derived" in out.engines
    info = SessionReader(path).info()
    assert (info.session_id, info.profile, info.status) == (sid, merge.REBUILT_PROFILE, "failed")
    assert any("rebuilt" in n for n in out.notes)


@pytest.mark.slow
def test_stale_session_meta_is_never_resurrected(sessions_dir: Path, tmp_path: Path) -> None:
    """The status moves to 'completed' in a WAL commit after a broken frame: SQLite alone sees
    the older 'running' row; the resumed live copy must win over it."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    sid, path = corpus.build_wal(scratch, sessions_dir)
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    conn.execute("UPDATE session_meta SET status='completed', ended_at='2026-01-01T00:00:00.000Z'")
    shutil.copyfile(path, tmp_path / "db")
    shutil.copyfile(sidecar(path, "-wal"), tmp_path / "wal")
    conn.close()
    shutil.copyfile(tmp_path / "db", path)
    shutil.copyfile(tmp_path / "wal", sidecar(path, "-wal"))
    corpus.d_flipped_wal_frame(path)
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered"
    assert SessionReader(path).info().status == "completed"


@pytest.mark.slow
@pytest.mark.parametrize("damage", [corpus.d_zeroed_page, corpus.d_damaged_header])
def test_kernel_open_recovers_automatically(
    damage, sessions_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    damage(path)
    damaged = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="agentdb.kernel"):
        w = open_session(sessions_dir, sid)
    try:
        w.set_status("running")  # ResumeSession: a completed session takes events again
        seq = w.emit(Event("tool_call", corpus.BIG, b"{}"))
        assert seq > 120  # the counter was restored: no sequence is ever reused
    finally:
        w.close()
    assert path.with_name(path.name + ".corrupt").read_bytes() == damaged
    assert "recovered" in caplog.text
    assert recoverylog.entries_for(log_of(sessions_dir), sid)[-1]["outcome"] == "recovered"


@pytest.mark.slow
def test_cli_json_and_exit_codes(sessions_dir: Path, agentdb: Agentdb) -> None:
    good, _ = make_session(sessions_dir, turns=2)
    bad, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    cap = agentdb("--sessions-dir", str(sessions_dir), "recover", "--all", "--json")
    code = cap.code
    assert code == 0
    doc = json.loads(cap.out)
    by_id = {s["session_id"]: s for s in doc["sessions"]}
    assert by_id[good]["outcome"] == "healthy"
    assert by_id[bad]["outcome"] == "recovered"
    assert by_id[bad]["corrupt_path"].endswith(".sqlite.corrupt")
    assert by_id[bad]["tables"]["events"]["salvaged"] > 0
    assert "warning" in cap.err and bad in cap.err  # never silent, even with --json
    junk = "01HXXXXXXXXXXXXXXXXXXXXXXX"
    (sessions_dir / f"{junk}.sqlite").write_bytes(b"\x00" * 5000)
    assert agentdb("--sessions-dir", str(sessions_dir), "recover", junk).code == 1
    assert agentdb("--sessions-dir", str(sessions_dir), "recover", "nope").code == 2
    assert agentdb("--sessions-dir", str(sessions_dir), "recover").code == 2


def test_unsalvageable_file_end_to_end_and_check_shows_the_log_entry(
    sessions_dir: Path, agentdb: Agentdb
) -> None:
    sid = "01HYYYYYYYYYYYYYYYYYYYYYYY"
    path = sessions_dir / f"{sid}.sqlite"
    path.write_bytes(random.Random(7).randbytes(64_000))
    os.chmod(path, 0o600)
    before = snapshot(sessions_dir)
    cap = agentdb("--sessions-dir", str(sessions_dir), "recover", sid, "--json")
    code = cap.code
    assert code == 1
    [s] = json.loads(cap.out)["sessions"]
    assert s["outcome"] == "unreadable" and s["corrupt_path"] is None
    assert sid in cap.err and "unreadable" in cap.err
    assert snapshot(sessions_dir) == before  # the original is untouched, byte for byte
    [entry] = recoverylog.entries_for(log_of(sessions_dir), sid)
    assert (entry["event"], entry["outcome"]) == ("outcome", "unreadable")

    cap = agentdb("--sessions-dir", str(sessions_dir), "check", sid, "--json")
    code = cap.code
    assert code == 1
    [c] = json.loads(cap.out)["sessions"]
    assert c["verdict"] == "unreadable"
    [f] = [f for f in c["findings"] if f["code"] == "recovery_unreadable"]
    assert entry["time"] in f["message"] and "unreadable" in f["message"]
    assert snapshot(sessions_dir) == before

    # A later successful recovery of the same id replaces that finding.
    recoverylog.append(log_of(sessions_dir), {**entry, "outcome": "recovered"})
    [c] = agentdb("--sessions-dir", str(sessions_dir), "check", sid, "--json").json()["sessions"]
    assert "recovery_unreadable" not in {f["code"] for f in c["findings"]}


@pytest.mark.slow
def test_report_names_engines_and_what_each_found(sessions_dir: Path, agentdb: Agentdb) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    code, out, _ = agentdb(
        "--sessions-dir", str(sessions_dir), "recover", sid, "--json", "--dry-run"
    )
    [s] = json.loads(out)["sessions"]
    assert code == 0 and s["outcome"] == "recovered"
    by = s["found_by"]
    assert {"rows", "pages"} <= set(by) and set(s["engines"]) <= set(by) | {"derived"}
    # what each engine gave adds up to what the replacement holds, table by table
    for table, t in s["tables"].items():
        assert sum(e["used"].get(table, 0) for e in by.values()) == t["salvaged"], table
    assert 0 < by["rows"]["used"]["events"] <= by["rows"]["found"]["events"]
    assert by["pages"]["found"]["events"] >= by["rows"]["found"]["events"]
    # the human table names, in plain words, every engine that ran and the rows it gave, and
    # what is known lost
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "recover", sid)
    assert code == 0
    assert f"SQLite {sum(by['rows']['used'].values())} rows" in out and "page scan " in out
    assert "lost" in out.splitlines()[0] and "rows found/used" not in out
    missing = s["lost"].get("events_missing", 0)
    assert (f"{missing} events (" if missing else "none") in out
    [entry] = [e for e in recoverylog.entries_for(log_of(sessions_dir), sid)][-1:]
    assert entry["found_by"]["rows"]["found"]["events"] == by["rows"]["found"]["events"]


@pytest.mark.slow
def test_sqlite_recover_runs_only_where_it_could_find_more(
    sessions_dir: Path, capable_shell: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentdb.jobs.demo import damage_page

    monkeypatch.setenv("AGENTDB_SQLITE3", str(capable_shell))
    # A zeroed leaf: the page engine read every page, nothing is left to find.
    sid, path = make_session(sessions_dir, turns=30)
    damage_page(path, table="events", nth_leaf=1)
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered"
    assert "sqlite-recover" not in out.found_by
    assert any("sqlite-recover not run" in n for n in out.notes)
    # A leaf that still says "table leaf" but whose cell count is garbage: the page engine
    # cannot parse it, so SQLite's own recovery gets its chance.
    sid2, path2 = make_session(sessions_dir, turns=30)
    pgno = damage_page(path2, table="events", nth_leaf=1, fill=b"\x0d")
    with open(path2, "r+b") as f:
        f.seek((pgno - 1) * 4096 + 3)
        f.write(b"\xff\xff")
    out2 = salvage.recover_session(sessions_dir, sid2)
    assert out2.outcome == "recovered"
    assert "sqlite-recover" in out2.found_by, out2.notes


@pytest.mark.slow
def test_an_empty_file_whose_wal_holds_the_session_is_salvaged_from_it(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """The file lost every byte (a crash on a file system that kept the -wal), its -wal holds
    the session's last commits, page 1 included. SQLite ignores a WAL beside an empty file (and
    its next write deletes it), and recover refused the file as ``empty``: every row in the WAL
    was left to that fate. Now the WAL's pages are salvaged."""
    (tmp_path / "w").mkdir()
    sid, path = corpus.build_wal(tmp_path / "w", sessions_dir)
    committed = row_sets(path)
    wal = sidecar(path, "-wal").read_bytes()
    os.truncate(path, 0)
    out = salvage.recover_session(sessions_dir, sid, recovery_log=log_of(sessions_dir))
    assert out.outcome == "recovered", out.notes
    assert out.corrupt_wal is not None and Path(out.corrupt_wal).read_bytes() == wal
    assert Path(str(out.corrupt_path)).read_bytes() == b""
    got = row_sets(path)
    assert len(got["events"]) > len(committed["events"]) // 2
    for table in ("events", "cost_ledger", "plan_items"):
        assert got[table] <= committed[table], table
    # its page was not in the WAL: rebuilt (the WAL's events name the session)
    assert [r[0] for r in got["session_meta"]] == [sid]
    assert_passes_check(path, sid)
