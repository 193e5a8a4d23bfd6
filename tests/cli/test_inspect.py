"""sessions list/show/tree, events, preflight through the CLI on the demo state."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import apsw
import pytest

from agentdb import demo
from agentdb import sessions as sessions_mod
from agentdb.cli.main import main
from agentdb.cli.sessions import tree_lines
from agentdb.sessions import build_forest, session_tree
from tests.support import make_session, run_cli


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> demo.DemoState:
    return demo.build(tmp_path_factory.mktemp("demo"))


def run(capsys, state: demo.DemoState, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    g = ["--sessions-dir", str(state.sessions_dir), "--plugin-cache", str(state.plugin_cache)]
    code = main([*g, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_list(capsys, state: demo.DemoState) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, state, "sessions", "list", "--json")
    assert code == 0
    rows = json.loads(out)["sessions"]
    assert [r["session_id"] for r in rows] == sorted(s.session_id for s in state.sessions)
    parent = next(r for r in rows if r["session_id"] == state.by_role("parent").session_id)
    assert parent["events"] == 36 and parent["cost_usd"] > 0 and parent["status"] == "completed"
    code, out, _ = run(capsys, state, "sessions", "list", "--status", "running", "--json")
    assert [r["session_id"] for r in json.loads(out)["sessions"]] == [
        state.by_role("running").session_id
    ]
    code, out, _ = run(capsys, state, "sessions", "list", "--older-than", "90d", "--json")
    old = {r["session_id"] for r in json.loads(out)["sessions"]}
    assert state.by_role("parent").session_id in old
    assert state.by_role("recent").session_id not in old
    code, out, _ = run(capsys, state, "sessions", "list", "--newer-than", "2d", "--json")
    new = {r["session_id"] for r in json.loads(out)["sessions"]}
    assert new == {state.by_role("recent").session_id, state.by_role("running").session_id}
    assert run(capsys, state, "sessions", "list", "--older-than", "soon")[0] == 2
    code, out, _ = run(capsys, state, "sessions", "list")
    assert "researcher" in out


def test_unreadable_file_is_listed_not_fatal(sessions_dir: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    sid, _ = make_session(sessions_dir)
    bad = "01ARZ3NDEKTSV4RRFFQ69G5FA9"
    (sessions_dir / f"{bad}.sqlite").write_bytes(b"not a database" * 100)
    os.chmod(sessions_dir / f"{bad}.sqlite", 0o600)
    code = main(["--sessions-dir", str(sessions_dir), "sessions", "list", "--json"])
    rows = json.loads(capsys.readouterr().out)["sessions"]
    assert code == 0
    assert {r["session_id"]: r["status"] for r in rows} == {sid: "completed", bad: "unreadable"}


def test_show(capsys, state: demo.DemoState) -> None:  # type: ignore[no-untyped-def]
    sid = state.by_role("parent").session_id
    code, out, _ = run(capsys, state, "sessions", "show", sid, "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc["session"]["session_id"] == sid
    assert doc["cost_by_model"][0]["model"] == "claude-sonnet"
    rules = {(d["decided_by"], d["decision"]): d["count"] for d in doc["plan_decisions"]}
    assert rules == {("allow-read-only", "allow"): 4, ("deny-network", "deny"): 2}
    assert {p["category"] for p in doc["producers"]} == {"context", "model", "kernel", "tool"}
    code, out, _ = run(capsys, state, "sessions", "show", sid)
    assert "Plan decisions by rule" in out and "deny-network" in out
    missing = "01ARZ3NDEKTSV4RRFFQ69G5FA9"
    assert run(capsys, state, "sessions", "show", missing)[0] == 1


def test_tree(capsys, state: demo.DemoState) -> None:  # type: ignore[no-untyped-def]
    parent = state.by_role("parent").session_id
    code, out, _ = run(capsys, state, "sessions", "tree", parent)
    lines = out.splitlines()
    assert code == 0
    assert lines[0].startswith(parent)
    assert lines[1].startswith("├── ") and lines[2].startswith("└── ")
    code, out, _ = run(capsys, state, "sessions", "tree", "--json")
    roots = json.loads(out)["roots"]
    p = next(r for r in roots if r["session_id"] == parent)
    assert len(p["children"]) == 2


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


def test_events(capsys, state: demo.DemoState, sessions_dir: Path) -> None:  # type: ignore[no-untyped-def]
    sid = state.by_role("parent").session_id
    code, out, _ = run(capsys, state, "events", sid, "--json")
    evs = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [e["sequence"] for e in evs] == list(range(1, 37))
    code, out, _ = run(capsys, state, "events", sid, "--json", "--kind", "plan", "--after", "10")
    evs = [json.loads(line) for line in out.splitlines()]
    assert {e["kind"] for e in evs} == {"plan"} and min(e["sequence"] for e in evs) > 10
    code, out, _ = run(capsys, state, "events", sid, "--json", "--max-payload", "5")
    e = json.loads(out.splitlines()[1])
    assert e["truncated"] is True and len(e["payload"]) == 5
    assert run(capsys, state, "events", sid, "--kind", "bogus")[0] == 2
    code, out, _ = run(capsys, state, "events", sid, "--kind", "tool_result")
    assert "tool_result" in out


def test_events_binary_and_control_payloads(sessions_dir: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from agentdb.store import Event, Producer, SessionWriter

    w = SessionWriter.create(sessions_dir, profile="p")
    w.emit(Event("tool_result", Producer("tool", "t", "1"), b"\xff\x00\x01binary"))
    w.emit(Event("tool_result", Producer("tool", "t", "1"), b"\x1b[31mred\x1b[0m\r\nnext"))
    w.close()
    g = ["--sessions-dir", str(sessions_dir)]
    assert main([*g, "events", w.session_id, "--json"]) == 0
    a, b = (json.loads(x) for x in capsys.readouterr().out.splitlines())
    assert a["payload_encoding"] == "base64"
    assert base64.b64decode(a["payload"]) == b"\xff\x00\x01binary"
    assert b["payload_encoding"] == "utf-8" and b["payload"].startswith("\x1b[31m")
    assert main([*g, "events", w.session_id]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31mred" in out and "0xff0001" in out


def test_preflight(capsys, state: demo.DemoState) -> None:  # type: ignore[no-untyped-def]
    pinned = state.by_role("pinned").session_id
    code, out, err = run(capsys, state, "preflight", pinned, "--json")
    doc = json.loads(out)
    assert code == 1
    states = {(p["category"], p["name"], p["version"]): p["state"] for p in doc["producers"]}
    assert states[("model", "anthropic", "1.4.0")] == "cached"
    assert states[("kernel", "kernel", "0.9.0")] == "kernel"
    assert states[("tool", "shell", "2.0.0")] == "missing"
    assert {(m["category"], m["name"]) for m in doc["missing"]} == {
        ("tool", "shell"),
        ("context", "repo-map"),
    }
    for cat, name, ver in [("tool", "shell", "2.0.0"), ("context", "repo-map", "0.2.1")]:
        (state.plugin_cache / cat / name / ver).mkdir(parents=True)
    code, out, err = run(capsys, state, "preflight", pinned)
    assert code == 0 and "every producer" in err


def test_preflight_hostile_names(sessions_dir: Path, plugin_cache: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from agentdb.store import Event, Producer, SessionWriter

    (plugin_cache.parent / "x").mkdir()
    w = SessionWriter.create(sessions_dir, profile="p")
    w.emit(Event("tool_result", Producer("tool", "..", ".."), b"x"))
    w.close()
    g = ["--sessions-dir", str(sessions_dir), "--plugin-cache", str(plugin_cache)]
    assert main([*g, "preflight", w.session_id, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["producers"][0]["state"] == "invalid"


def test_list_with_jobs_gives_the_same_rows(
    capsys: pytest.CaptureFixture[str], state: demo.DemoState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forked readers, small chunks: same rows in the same order as one process (the demo has
    unreadable, running and damaged sessions)."""
    code, one, _ = run(capsys, state, "sessions", "list", "--json", "-j1")
    assert code == 0
    monkeypatch.setattr(sessions_mod, "POOL_THRESHOLD", 1)
    monkeypatch.setattr(sessions_mod, "CHUNK", 2)
    code, two, _ = run(capsys, state, "sessions", "list", "--json", "-j2")
    assert code == 0 and two == one
    assert len(json.loads(two)["sessions"]) == len(state.sessions) > 2


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
