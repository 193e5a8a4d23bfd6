"""sessions list/show/tree, events, preflight through the CLI on the demo state."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import apsw
import pytest

from agentdb.cli.sessions import tree_lines
from agentdb.jobs import demo
from agentdb.views import queries, sessions
from agentdb.views import sessions as sessions_mod
from agentdb.views.sessions import build_forest, session_tree
from tests.runner import Agentdb, run_cli, state_options
from tests.support import make_session, ulids


@pytest.mark.slow
def test_list(agentdb: Agentdb, demo_state: demo.DemoState) -> None:
    code, out, _ = agentdb(*state_options(demo_state), "sessions", "list", "--json")
    assert code == 0
    rows = json.loads(out)["sessions"]
    assert [r["session_id"] for r in rows] == sorted(s.session_id for s in demo_state.sessions)
    parent = next(r for r in rows if r["session_id"] == demo_state.by_role("parent").session_id)
    assert parent["events"] == 36 and parent["cost_usd"] > 0 and parent["status"] == "completed"
    code, out, _ = agentdb(
        *state_options(demo_state), "sessions", "list", "--status", "running", "--json"
    )
    assert [r["session_id"] for r in json.loads(out)["sessions"]] == [
        demo_state.by_role("running").session_id
    ]
    code, out, _ = agentdb(
        *state_options(demo_state), "sessions", "list", "--older-than", "90d", "--json"
    )
    old = {r["session_id"] for r in json.loads(out)["sessions"]}
    assert demo_state.by_role("parent").session_id in old
    assert demo_state.by_role("recent").session_id not in old
    code, out, _ = agentdb(
        *state_options(demo_state), "sessions", "list", "--newer-than", "2d", "--json"
    )
    new = {r["session_id"] for r in json.loads(out)["sessions"]}
    assert new == {
        demo_state.by_role("recent").session_id,
        demo_state.by_role("running").session_id,
    }
    assert agentdb(*state_options(demo_state), "sessions", "list", "--older-than", "soon")[0] == 2
    code, out, _ = agentdb(*state_options(demo_state), "sessions", "list")
    assert "researcher" in out


def test_unreadable_file_is_listed_not_fatal(sessions_dir: Path, agentdb: Agentdb) -> None:
    sid, _ = make_session(sessions_dir)
    bad = "01ARZ3NDEKTSV4RRFFQ69G5FA9"
    (sessions_dir / f"{bad}.sqlite").write_bytes(b"not a database" * 100)
    os.chmod(sessions_dir / f"{bad}.sqlite", 0o600)
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "sessions", "list", "--json")
    rows = json.loads(out)["sessions"]
    assert code == 0
    assert {r["session_id"]: r["status"] for r in rows} == {sid: "completed", bad: "unreadable"}


@pytest.mark.slow
def test_show(agentdb: Agentdb, demo_state: demo.DemoState) -> None:
    sid = demo_state.by_role("parent").session_id
    code, out, _ = agentdb(*state_options(demo_state), "sessions", "show", sid, "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc["session"]["session_id"] == sid
    assert doc["cost_by_model"][0]["model"] == "claude-sonnet"
    rules = {(d["decided_by"], d["decision"]): d["count"] for d in doc["plan_decisions"]}
    assert rules == {("allow-read-only", "allow"): 4, ("deny-network", "deny"): 2}
    assert {p["category"] for p in doc["producers"]} == {"context", "model", "kernel", "tool"}
    code, out, _ = agentdb(*state_options(demo_state), "sessions", "show", sid)
    assert "Plan decisions by rule" in out and "deny-network" in out
    missing = "01ARZ3NDEKTSV4RRFFQ69G5FA9"
    assert agentdb(*state_options(demo_state), "sessions", "show", missing)[0] == 1


def test_tree(agentdb: Agentdb, demo_state: demo.DemoState) -> None:
    parent = demo_state.by_role("parent").session_id
    code, out, _ = agentdb(*state_options(demo_state), "sessions", "tree", parent)
    lines = out.splitlines()
    assert code == 0
    assert lines[0].startswith(parent)
    assert lines[1].startswith("├── ") and lines[2].startswith("└── ")
    code, out, _ = agentdb(*state_options(demo_state), "sessions", "tree", "--json")
    roots = json.loads(out)["roots"]
    p = next(r for r in roots if r["session_id"] == parent)
    assert len(p["children"]) == 2


@pytest.mark.slow
def test_tree_orphans_and_cycles(sessions_dir: Path) -> None:
    a, _ = make_session(sessions_dir)
    b, _ = make_session(sessions_dir, parent=a, depth=1)
    make_session(sessions_dir, parent=b, depth=2)
    ghost = "01ARZ3NDEKTSV4RRFFQ69G5FA9"
    make_session(sessions_dir, parent=ghost, depth=1)
    x, px = make_session(sessions_dir)
    y, _py = make_session(sessions_dir, parent=x, depth=1)
    conn = apsw.Connection(str(px))
    conn.execute("UPDATE session_meta SET parent_session_id = ?", (y,))
    conn.close()
    forest = session_tree(sessions_dir)
    text = "\n".join(tree_lines(forest))
    assert f"parent {ghost} not found" in text
    assert "parent cycle" in text
    assert text.count(x) == 1 and text.count(y) == 2  # y also appears as x's parent note
    assert len(build_forest([])) == 0
    sub = session_tree(sessions_dir, b)
    assert len(sub) == 1 and len(sub[0].children) == 1


def test_list_with_jobs_gives_the_same_rows(
    agentdb: Agentdb, demo_state: demo.DemoState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forked readers, small chunks: same rows in the same order as one process (the demo has
    unreadable, running and damaged sessions)."""
    code, one, _ = agentdb(*state_options(demo_state), "sessions", "list", "--json", "-j1")
    assert code == 0
    monkeypatch.setattr(sessions_mod, "POOL_THRESHOLD", 1)
    monkeypatch.setattr(sessions_mod, "CHUNK", 2)
    code, two, _ = agentdb(*state_options(demo_state), "sessions", "list", "--json", "-j2")
    assert code == 0 and two == one
    assert len(json.loads(two)["sessions"]) == len(demo_state.sessions) > 2


@pytest.mark.slow
def test_hostile_text_cannot_drive_the_terminal(tmp_path: Path) -> None:
    """A profile with escape sequences and a newline is shown escaped, on one line."""
    from agentdb.store import SessionWriter

    d = tmp_path / "sessions"
    w = SessionWriter.create(d, profile="evil\x1b]0;title\x07\x1b[31mred\nline2\x9b")
    w.close()
    for args in (["sessions", "list"], ["sessions", "tree"], ["sessions", "show", w.session_id]):
        r = run_cli("--sessions-dir", str(d), *args)
        assert r.returncode == 0, r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\x9b" not in r.stdout
        assert "line2" in r.stdout and "\\n" in r.stdout and "\\x1b" in r.stdout
        assert not any(line.startswith("line2") for line in r.stdout.splitlines())


@pytest.mark.slow
def test_json_output_is_inert_on_a_terminal(tmp_path: Path) -> None:
    from agentdb.store import SessionWriter

    d = tmp_path / "sessions"
    w = SessionWriter.create(d, profile="c1\x9bcsi é")
    w.close()
    r = run_cli("--sessions-dir", str(d), "sessions", "list", "--json")
    assert r.returncode == 0
    assert r.stdout.isascii()
    doc = json.loads(r.stdout)
    assert any(s["profile"] == "c1\x9bcsi é" for s in doc["sessions"])


@pytest.mark.slow
@pytest.mark.parametrize("depth", [1500, 60_000])
def test_sessions_tree_json_of_a_deep_chain(
    depth: int, sessions_dir: Path, monkeypatch: pytest.MonkeyPatch, agentdb: Agentdb
) -> None:
    ids = ulids(depth)
    rows = [
        sessions.SessionRow(
            sid, sessions_dir / f"{sid}.sqlite", "completed", "p", ids[i - 1] if i else None, i
        )
        for i, sid in enumerate(ids)
    ]
    monkeypatch.setattr(queries, "session_tree", lambda *_, **__: (sessions.build_forest(rows), []))
    old = sys.getrecursionlimit()
    try:
        code, out, err = agentdb("--sessions-dir", str(sessions_dir), "sessions", "tree", "--json")
        doc = json.loads(out) if code == 0 else None
    finally:
        sys.setrecursionlimit(old)
    assert "Traceback" not in err
    if depth == 1500:  # drawn whole
        assert code == 0 and doc is not None, err
        node = doc["roots"][0]
        n = 1
        while node["children"]:
            node = node["children"][0]
            n += 1
        assert n == depth
    else:  # deeper than any limit: one error (JSON under --json), exit 1
        assert code == 1 and out == "" and len(err.splitlines()) == 1, err
        assert json.loads(err)["error"]["code"] == "too_deep"
