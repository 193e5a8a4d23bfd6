"""agentdb status through the real CLI: counts, verdicts from the last check, next commands."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentdb.jobs import demo
from agentdb.store import SessionWriter
from tests.runner import run_cli
from tests.support import held_open, make_session


def _settle() -> None:
    time.sleep(0.12)  # past the timestamp granularity the verdict cache allows for


def _status(*g: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    p = run_cli(*g, "status", "--json")
    assert p.returncode in (0, 1), p.stderr
    doc = json.loads(p.stdout)
    assert isinstance(doc["version"], int) and doc["version"] == 1
    return p.returncode, doc


@pytest.mark.slow
def test_demo_status_before_and_after_check(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "demo")
    g = ("--sessions-dir", str(state.sessions_dir), "--plugin-cache", str(state.plugin_cache))
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdgcache")}
    _settle()
    p = run_cli(*g, "status", "--json", env=env)
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    s = doc["summary"]
    n = len(state.sessions)
    assert s["sessions"] == n and s["never_checked"] == n and s["checked"] == 0
    assert s["needs_migration"] == 1
    assert doc["needs_migration"] == [state.by_role("old-revision").session_id]
    assert doc["interrupted"] == [state.by_role("running").session_id]
    assert s["pinned_plugin_versions"] == 1 and s["cached_plugin_versions"] == 2
    assert s["size_bytes"] == sum(
        p.stat().st_size
        for p in state.sessions_dir.iterdir()
        if p.name.endswith((".sqlite", "-wal"))
    )
    assert sum(doc["by_status"].values()) == n
    # the same counts as the commands that answer each question alone
    refs = json.loads(run_cli(*g, "plugins", "refs", "--json").stdout)
    assert doc["pinned"] == [v for v in refs["versions"] if v["sessions"]]
    listed = json.loads(run_cli(*g, "sessions", "list", "--json").stdout)
    assert doc["by_status"] == listed["summary"]["by_status"]

    c = run_cli(*g, "check", "--all", "--json", env=env)
    assert c.returncode == 1
    check = json.loads(c.stdout)
    assert check["version"] == 1
    code, doc = 1, json.loads(run_cli(*g, "status", "--json", env=env).stdout)
    s = doc["summary"]
    assert doc["by_verdict"] == check["summary"]["verdicts"]
    assert s["checked"] == n and s["never_checked"] == 0 and s["changed_since_check"] == 0
    assert s["newest_check_age_seconds"] is not None
    assert state.by_role("damaged").session_id in doc["damaged"]
    commands = [x["command"] for x in doc["next"]]
    assert "agentdb recover --all --dry-run" in commands
    assert commands.count("agentdb migrate --all") == 1
    assert any(c.startswith("agentdb sessions end ") and c.endswith("--dry-run") for c in commands)
    assert not any("--yes" in c for c in commands)
    assert all("recover" not in c or "--dry-run" in c for c in commands)

    # human screen: the same next commands, exit 1
    h = run_cli(*g, "status", env=env)
    assert h.returncode == 1
    for c in commands:
        assert c in h.stdout

    # the cache is derived: deleting it makes every session "never checked", nothing else
    for f in (tmp_path / "xdgcache" / "agentdb").iterdir():
        f.unlink()
    code, again = _status(*g)
    del again["generated_at"], doc["generated_at"]
    assert again["summary"]["never_checked"] == n
    for k in ("by_status", "interrupted", "needs_migration", "pinned", "recoveries"):
        assert again[k] == doc[k]


@pytest.mark.slow
def test_healthy_directory_exits_0_and_a_change_is_seen(tmp_path: Path, sessions_dir: Path) -> None:
    ids = [make_session(sessions_dir)[0] for _ in range(3)]
    g = ("--sessions-dir", str(sessions_dir), "--plugin-cache", str(tmp_path / "none"))
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdgcache")}
    _settle()
    assert run_cli(*g, "check", env=env).returncode == 0
    p = run_cli(*g, "status", env=env)
    assert p.returncode == 0, p.stdout
    assert "nothing needs doing" in p.stdout
    doc = json.loads(run_cli(*g, "status", "--json", env=env).stdout)
    assert doc["summary"]["ok"] == 3 and doc["next"] == []
    assert doc["summary"]["checked_quick"] == 0
    assert run_cli(*g, "check", "--quick", ids[0], env=env).returncode == 0
    doc = json.loads(run_cli(*g, "status", "--json", env=env).stdout)
    assert doc["summary"]["checked_quick"] == 1 and doc["summary"]["ok"] == 3

    w = SessionWriter.open(sessions_dir, ids[1])
    w.set_status("running")
    w.set_status("completed")
    w.close()
    p = run_cli(*g, "status", "--json", env=env)
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert doc["summary"]["changed_since_check"] == 1 and doc["summary"]["ok"] == 2
    assert doc["unchecked"] == [ids[1]]
    assert [x["command"] for x in doc["next"]] == ["agentdb check --problems"]


@pytest.mark.slow
def test_running_with_a_holder_is_live_not_interrupted(tmp_path: Path, sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, status="running")
    g = ("--sessions-dir", str(sessions_dir), "--plugin-cache", str(tmp_path / "none"))
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdgcache")}
    with held_open(path):
        doc = json.loads(run_cli(*g, "status", "--json", env=env).stdout)
        assert doc["summary"]["live"] == 1 and doc["summary"]["interrupted"] == 0
        assert doc["unchecked"] == []  # a live session is not asked to be checked
    doc = json.loads(run_cli(*g, "status", "--json", env=env).stdout)
    assert doc["summary"]["live"] == 0 and doc["interrupted"] == [sid]


def test_check_problems_shows_only_what_is_not_ok(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "demo")
    g = ("--sessions-dir", str(state.sessions_dir))
    p = run_cli(*g, "check", "--problems", "--json")
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    shown = {s["session_id"] for s in doc["sessions"]}
    assert state.by_role("damaged").session_id in shown
    assert state.by_role("recent").session_id not in shown
    assert all(s["verdict"] != "ok" for s in doc["sessions"])
    assert doc["summary"]["checked"] == len(state.sessions)  # the summary counts everything
    h = run_cli(*g, "check", "--problems")
    assert state.by_role("damaged").session_id in h.stdout
    assert state.by_role("recent").session_id not in h.stdout


def test_status_holds_counts_and_the_first_ids_not_every_row(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    """``status`` keeps no row per session and at most LISTED ids per category, with whole
    counts (its memory is flat in the number of sessions); ``report`` still has every row;
    the verdicts it matches against the index walk are the ones a scan matches."""
    from agentdb.index import checked
    from agentdb.views import status

    n = status.LISTED + 3
    ids = [make_session(sessions_dir, turns=1, status=None)[0] for _ in range(n)]
    time.sleep(0.12)
    checked.check_and_record(sessions_dir, ids[:2])
    time.sleep(0.12)
    st = status.status(sessions_dir, plugin_cache)
    assert st.rows == [] and st.scanned == []
    assert st.summary.interrupted == n and st.interrupted == sorted(ids)[: status.LISTED]
    assert len(st.unchecked) == status.LISTED and st.summary.checked == 2
    assert any(f"{n - 2} changed since" in c.why for c in st.next)
    scanned = status.status(sessions_dir, plugin_cache, use_index=False, keep_rows=True)
    assert len(scanned.rows) == n and scanned.summary == st.summary
    assert len(status.status(sessions_dir, plugin_cache, costs=True).rows) == n
