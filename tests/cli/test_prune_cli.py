"""``agentdb prune`` and ``agentdb plugins refs`` as real processes: exit codes, JSON, kill -9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentdb import demo
from tests.support import make_session
from tests.test_prune import crashed_session, foreign_file, old_session, snapshot


def run(sessions_dir: Path, plugin_cache: Path, *args: str, fault: str | None = None):  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if k != "AGENTDB_FAULT"}
    if fault:
        env["AGENTDB_FAULT"] = fault
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "agentdb.cli.main",
            "--sessions-dir",
            str(sessions_dir),
            "--plugin-cache",
            str(plugin_cache),
            *args,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_usage_errors(sessions_dir: Path, plugin_cache: Path) -> None:
    assert run(sessions_dir, plugin_cache, "prune").returncode == 2
    assert run(sessions_dir, plugin_cache, "prune", "--dry-run", "--yes").returncode == 2
    assert run(sessions_dir, plugin_cache, "prune", "not-an-id").returncode == 2
    assert run(sessions_dir, plugin_cache, "prune", "--older-than", "soon").returncode == 2
    assert run(sessions_dir, plugin_cache, "prune", "--status", "done,failed").returncode == 2
    missing = sessions_dir / "nope"
    r = run(missing, plugin_cache, "prune", "--older-than", "1d")
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_dry_run_json_changes_nothing(sessions_dir: Path, plugin_cache: Path) -> None:
    (plugin_cache / "model" / "anthropic" / "1.4.0").mkdir(parents=True)
    gone = old_session(sessions_dir, 200)
    pinned = old_session(sessions_dir, 150, model=demo.MODEL_CACHED)
    crashed_session(sessions_dir, 120)
    foreign = foreign_file(sessions_dir, 100)
    before = snapshot(sessions_dir)
    r = run(sessions_dir, plugin_cache, "prune", "--older-than", "0s", "--dry-run", "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dry_run"] is True and doc["confirmed"] is False and doc["removed"] == []
    assert gone in doc["would_remove"] and len(doc["would_remove"]) == 2
    refused = {x["session_id"]: [c["code"] for c in x["reasons"]] for x in doc["refused"]}
    assert refused == {pinned: ["pinned"], foreign: ["foreign"]}
    assert all(set(c) == {"code", "message"} for x in doc["refused"] for c in x["reasons"])
    assert doc["would_free_bytes"] > 0 and doc["freed_bytes"] == 0 and doc["files"] == []
    assert f"{gone}.sqlite" in doc["would_remove_files"]
    assert snapshot(sessions_dir) == before


def test_no_terminal_without_yes_deletes_nothing(sessions_dir: Path, plugin_cache: Path) -> None:
    old_session(sessions_dir, 200)
    before = snapshot(sessions_dir)
    r = run(sessions_dir, plugin_cache, "prune", "--older-than", "90d")
    assert r.returncode == 1 and "--yes" in r.stderr and "would remove" in r.stdout
    assert snapshot(sessions_dir) == before


def test_unconfirmed_json_never_reports_removed(sessions_dir: Path, plugin_cache: Path) -> None:
    """No terminal and no --yes: nothing is removed, and ``removed`` says so (a script that
    reads only ``removed`` is not misled); the plan is in ``would_remove``."""
    sid = old_session(sessions_dir, 200)
    before = snapshot(sessions_dir)
    r = run(sessions_dir, plugin_cache, "prune", sid, "--json")
    assert r.returncode == 1 and "--yes" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["removed"] == [] and doc["would_remove"] == [sid]
    assert doc["dry_run"] is True and doc["confirmed"] is False
    assert doc["freed_bytes"] == 0 and doc["would_free_bytes"] > 0
    assert snapshot(sessions_dir) == before
    r = run(sessions_dir, plugin_cache, "prune", sid, "--json", "--yes")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["removed"] == [sid] and doc["would_remove"] == []
    assert doc["dry_run"] is False and doc["confirmed"] is True and doc["freed_bytes"] > 0


def test_foreign_file_is_never_removed(sessions_dir: Path, plugin_cache: Path) -> None:
    """Not even named with --include-damaged --yes: reason ``foreign``, the file stays."""
    foreign = foreign_file(sessions_dir, 200)
    before = snapshot(sessions_dir)
    r = run(sessions_dir, plugin_cache, "prune", foreign, "--include-damaged", "--yes", "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["removed"] == []
    [refused] = doc["refused"]
    assert [c["code"] for c in refused["reasons"]] == ["foreign"]
    assert "by hand" in refused["reasons"][0]["message"]
    assert snapshot(sessions_dir) == before


def test_yes_removes_and_exit_codes(sessions_dir: Path, plugin_cache: Path) -> None:
    gone = old_session(sessions_dir, 200)
    kept = old_session(sessions_dir, 2)
    r = run(sessions_dir, plugin_cache, "prune", "--older-than", "90d", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["removed"] == [gone] and doc["refused"] == [] and doc["dry_run"] is False
    assert sorted(os.listdir(sessions_dir)) == [f"{kept}.sqlite"]
    running = old_session(sessions_dir, 300, status=None, ended_at=None)
    r = run(sessions_dir, plugin_cache, "prune", running, "--yes")
    assert r.returncode == 1 and "running" in r.stdout
    assert (sessions_dir / f"{running}.sqlite").exists()


FAULTS = ["after_plan", "after_intent", "after_db_unlink", "after_sidecars"]


@pytest.mark.parametrize("fault", FAULTS)
def test_kill_9_then_rerun_leaves_no_orphans(
    sessions_dir: Path, plugin_cache: Path, fault: str
) -> None:
    crashed = crashed_session(sessions_dir, 200)  # has -wal and -shm
    plain = old_session(sessions_dir, 190)
    kept = old_session(sessions_dir, 2)
    kept_files = snapshot(sessions_dir)
    kept_files = {k: v for k, v in kept_files.items() if k.startswith(kept)}
    args = ("prune", "--older-than", "90d", "--yes", "--json")
    r = run(sessions_dir, plugin_cache, *args, fault=fault)
    assert r.returncode == -9, (r.returncode, r.stderr)
    r = run(sessions_dir, plugin_cache, *args)
    assert r.returncode == 0, r.stderr
    assert snapshot(sessions_dir) == kept_files
    assert crashed and plain


@pytest.mark.parametrize("fault", FAULTS[1:])
def test_kill_9_with_include_damaged(sessions_dir: Path, plugin_cache: Path, fault: str) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    demo.damage_page(path, table="events", nth_leaf=1)
    (sessions_dir / f"{sid}.sqlite.corrupt").write_bytes(b"older damaged original")
    (sessions_dir / f"{sid}.sqlite.corrupt-wal").write_bytes(b"its wal")
    args = ("prune", sid, "--include-damaged", "--yes")
    r = run(sessions_dir, plugin_cache, *args, fault=fault)
    assert r.returncode == -9
    # The next run finishes it whatever it selects (here: nothing else matches).
    r = run(sessions_dir, plugin_cache, "prune", "--older-than", "1000d", "--yes")
    assert r.returncode == 0, r.stderr
    assert os.listdir(sessions_dir) == []


def test_interrupted_prune_of_a_session_that_changed_is_kept(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    sid = old_session(sessions_dir, 200)
    r = run(sessions_dir, plugin_cache, "prune", sid, "--yes", fault="after_intent")
    assert r.returncode == -9
    from agentdb.store import Event, Producer, SessionWriter

    with SessionWriter.open(sessions_dir, sid) as w:  # the kernel resumed it meanwhile
        before = w.info()
        w.set_status("running")
        w.emit(Event("tool_result", Producer("tool", "shell", "2.0.0"), b"x"))
        w.set_status(before.status, at=before.ended_at)  # and ended it again
    r = run(sessions_dir, plugin_cache, "prune", "--older-than", "1000d", "--yes", "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["refused"][0]["reasons"][0]["code"] == "changed"
    assert os.listdir(sessions_dir) == [f"{sid}.sqlite"]


def test_plugins_refs_json(sessions_dir: Path, plugin_cache: Path) -> None:
    (plugin_cache / "model" / "anthropic" / "1.4.0").mkdir(parents=True)
    (plugin_cache / "tool" / "shell" / "2.1.0").mkdir(parents=True)
    old_session(sessions_dir, 10, model=demo.MODEL_CACHED)
    r = run(sessions_dir, plugin_cache, "plugins", "refs", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(v["name"], v["sessions"]) for v in doc["versions"]] == [("anthropic", 1), ("shell", 0)]
    assert [v["version"] for v in doc["unreferenced"]] == ["2.1.0"]


@pytest.mark.parametrize("answer", ["y", "n"])
def test_terminal_confirmation(sessions_dir: Path, plugin_cache: Path, answer: str) -> None:
    sid = old_session(sessions_dir, 200)
    master, slave = os.openpty()
    cmd = [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions_dir)]
    cmd += ["--plugin-cache", str(plugin_cache), "prune", "--older-than", "90d"]
    p = subprocess.Popen(cmd, stdin=slave, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    while b"[y/N]" not in seen:
        seen += os.read(master, 1024)
    os.write(master, answer.encode() + b"\n")
    out, _ = p.communicate(timeout=60)
    os.close(master)
    assert sid.encode() in out
    assert (sessions_dir / f"{sid}.sqlite").exists() == (answer == "n")
    assert p.returncode == (0 if answer == "y" else 1)
