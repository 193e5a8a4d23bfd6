"""``agentdb sessions end`` through the real CLI: a killed kernel's session, a live writer,
every refusal, and kill -9 at every point of the update."""

from __future__ import annotations

import json
import os
from pathlib import Path

import apsw
import pytest

from agentdb import recoverylog
from tests.rows import all_rows
from tests.runner import run_cli
from tests.salvage import corpus
from tests.support import WriterProcess, make_session

POINTS = [
    "sessions_end_after_intent",
    "sessions_end_in_update",
    "sessions_end_after_commit",
    "sessions_end_after_write",
]


def end(sessions_dir: Path, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_cli("--sessions-dir", str(sessions_dir), "sessions", "end", *args, "--json", env=env)


def meta(path: Path) -> tuple[str, str | None]:
    row = all_rows(path)["session_meta"][0]
    return str(row[3]), row[6]  # type: ignore[return-value]


def check(sessions_dir: Path, sid: str) -> dict:  # type: ignore[type-arg]
    r = run_cli("--sessions-dir", str(sessions_dir), "check", sid, "--json")
    return json.loads(r.stdout)["sessions"][0]  # type: ignore[no-any-return]


def interrupted(sessions_dir: Path) -> tuple[str, Path, list[int]]:
    """A session whose kernel was killed mid-run: status running, its WAL left beside it."""
    sid, path = make_session(sessions_dir, turns=2, status=None)
    w = WriterProcess(sessions_dir, sid)
    w.wait_for_commits(5)
    seqs, _ = w.stop()
    return sid, path, seqs


@pytest.mark.slow
def test_ends_an_interrupted_session(sessions_dir: Path) -> None:
    sid, path, seqs = interrupted(sessions_dir)
    found = check(sessions_dir, sid)
    hint = [f for f in found["findings"] if f["code"] == "interrupted"]
    assert hint and f"agentdb sessions end {sid}`" in hint[0]["message"]
    assert "--status failed" not in json.dumps(found)
    events = all_rows(path)["events"]
    assert {e[0] for e in events} >= set(seqs)

    r = end(sessions_dir, sid)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["version"] == 1 and doc["summary"]["ended"] == 1
    s = doc["sessions"][0]
    assert (s["outcome"], s["from"], s["status"]) == ("ended", "running", "cancelled")
    status, ended_at = meta(path)
    assert status == "cancelled" and ended_at == s["ended_at"] and ended_at
    assert all_rows(path)["events"] == events  # nothing else changed
    after = check(sessions_dir, sid)
    assert after["verdict"] == "ok"
    assert "interrupted" not in {f["code"] for f in after["findings"]}
    assert not path.with_name(path.name + "-wal").exists()  # checkpointed on close
    log = [e for e in recoverylog.read(sessions_dir.parent / "recovery.log")]
    assert [(e["event"], e["job"], e["status"]) for e in log] == [
        ("intent", "sessions-end", "cancelled"),
        ("outcome", "sessions-end", "cancelled"),
    ]
    r = end(sessions_dir, sid)  # again: nothing to do
    assert r.returncode == 0 and json.loads(r.stdout)["sessions"][0]["outcome"] == "unchanged"
    r = end(sessions_dir, sid, "--status", "failed")  # cancelled never becomes failed
    assert r.returncode == 1 and json.loads(r.stdout)["sessions"][0]["reason"] == "not_running"


def test_status_failed_is_terminal(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=1, status=None)
    r = end(sessions_dir, sid, "--status", "failed")
    assert r.returncode == 0, r.stderr
    assert meta(path)[0] == "failed"
    r = end(sessions_dir, sid)
    assert r.returncode == 1
    assert json.loads(r.stdout)["sessions"][0]["reason"] == "not_running"
    assert meta(path)[0] == "failed"


@pytest.mark.slow
def test_live_session_is_refused(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=1, status=None)
    w = WriterProcess(sessions_dir, sid)
    try:
        w.wait_for_commits(2)
        r = end(sessions_dir, sid)
        assert r.returncode == 1
        assert json.loads(r.stdout)["sessions"][0]["reason"] == "live"
        w.wait_for_commits(2)
    finally:
        w.stop()
    assert meta(path)[0] == "running"


@pytest.mark.slow
def test_refusals_change_nothing(sessions_dir: Path, tmp_path: Path) -> None:
    damaged, dpath = make_session(sessions_dir, turns=30, status=None)
    corpus.d_flipped_bytes(dpath)
    old, opath = make_session(sessions_dir, turns=1, status=None, revision=1)
    linked, lpath = make_session(sessions_dir, turns=1, status=None)
    os.link(lpath, tmp_path / "other-name.sqlite")
    done, cpath = make_session(sessions_dir, turns=1)
    foreign, fpath = make_session(sessions_dir, turns=1, status=None)
    c = apsw.Connection(str(fpath))
    c.execute("PRAGMA application_id=1234")
    c.close()
    missing = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    before = {p: p.read_bytes() for p in (dpath, opath, lpath, cpath, fpath)}
    r = end(sessions_dir, damaged, old, linked, done, foreign, missing)
    assert r.returncode == 1
    got = {s["session_id"]: s for s in json.loads(r.stdout)["sessions"]}
    assert {k: v["reason"] for k, v in got.items()} == {
        damaged: "damaged",
        old: "needs_migration",
        linked: "hard_linked",
        done: "not_running",
        foreign: "foreign",
        missing: "missing",
    }
    assert f"agentdb recover {damaged}" in got[damaged]["message"]
    assert f"agentdb migrate {old}" in got[old]["message"]
    assert all(v["outcome"] == "refused" for v in got.values())
    assert {p: p.read_bytes() for p in before} == before  # never migrated, recovered, written
    assert not (sessions_dir.parent / "recovery.log").exists()


@pytest.mark.slow
def test_dry_run_and_usage(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=1, status=None)
    before = path.read_bytes()
    r = end(sessions_dir, sid, "--dry-run")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["dry_run"] and doc["sessions"][0]["status"] == "cancelled"
    assert path.read_bytes() == before and meta(path)[0] == "running"
    for args in ((), (sid, "--status", "completed"), ("nope",)):
        r = run_cli("--sessions-dir", str(sessions_dir), "sessions", "end", *args)
        assert r.returncode == 2, (args, r.stderr)
    help_text = run_cli("sessions", "end", "--help").stdout
    assert "never" in help_text and "resumed" in help_text


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_kill_9_leaves_status_unchanged_or_ended(sessions_dir: Path, point: str) -> None:
    sid, path, _ = interrupted(sessions_dir)
    events = all_rows(path)["events"]
    r = end(sessions_dir, sid, env={"AGENTDB_FAULT": point})
    assert r.returncode == -9, r.stderr
    status, ended_at = meta(path)
    if point in ("sessions_end_after_intent", "sessions_end_in_update"):
        assert (status, ended_at) == ("running", None)
    else:
        assert status == "cancelled" and ended_at
    assert check(sessions_dir, sid)["verdict"] == "ok"
    assert all_rows(path)["events"] == events
    r = end(sessions_dir, sid)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["sessions"][0]
    assert s["outcome"] == "ended" and s["status"] == "cancelled"
    assert meta(path) == ("cancelled", s["ended_at"])
    log = [e for e in recoverylog.read(sessions_dir.parent / "recovery.log")]
    assert log[-1]["event"] == "outcome" and log[-1]["job"] == "sessions-end"
    assert check(sessions_dir, sid)["verdict"] == "ok"
