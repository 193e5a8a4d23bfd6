"""agentdb events: the event log in sequence order."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from agentdb.jobs import demo
from agentdb.schema import enums
from tests.runner import Agentdb, run_cli, state_options


@pytest.mark.slow
def test_events_json_lines(demo_state: demo.DemoState) -> None:
    sid = demo_state.by_role("parent").session_id
    r = run_cli(*state_options(demo_state), "events", sid, "--json")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert len(events) > 10 and all(isinstance(e, dict) for e in events)
    seqs = [e["sequence"] for e in events]
    assert seqs == sorted(seqs)
    for e in events:
        assert e["kind"] in enums.KINDS and e["kind"] != "KIND_UNSPECIFIED"
        assert e["producer"]["category"] in enums.PRODUCER_CATEGORIES
        assert e["schema_version"] in ("1", "v1")
    r = run_cli(
        *state_options(demo_state),
        "events",
        sid,
        "--json",
        "--kind",
        "plan",
        "--after",
        str(seqs[3]),
    )
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert got and all(e["kind"] == "plan" and e["sequence"] > seqs[3] for e in got)


@pytest.mark.slow
def test_events(agentdb: Agentdb, demo_state: demo.DemoState, sessions_dir: Path) -> None:
    sid = demo_state.by_role("parent").session_id
    code, out, _ = agentdb(*state_options(demo_state), "events", sid, "--json")
    evs = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [e["sequence"] for e in evs] == list(range(1, 37))
    code, out, _ = agentdb(
        *state_options(demo_state), "events", sid, "--json", "--kind", "plan", "--after", "10"
    )
    evs = [json.loads(line) for line in out.splitlines()]
    assert {e["kind"] for e in evs} == {"plan"} and min(e["sequence"] for e in evs) > 10
    code, out, _ = agentdb(
        *state_options(demo_state), "events", sid, "--json", "--max-payload", "5"
    )
    e = json.loads(out.splitlines()[1])
    assert e["truncated"] is True and len(e["payload"]) == 5
    assert agentdb(*state_options(demo_state), "events", sid, "--kind", "bogus")[0] == 2
    code, out, _ = agentdb(*state_options(demo_state), "events", sid, "--kind", "tool_result")
    assert "tool_result" in out


def test_events_binary_and_control_payloads(sessions_dir: Path, agentdb: Agentdb) -> None:
    from agentdb.store import Event, Producer, SessionWriter

    w = SessionWriter.create(sessions_dir, profile="p")
    w.emit(Event("tool_result", Producer("tool", "t", "1"), b"\xff\x00\x01binary"))
    w.emit(Event("tool_result", Producer("tool", "t", "1"), b"\x1b[31mred\x1b[0m\r\nnext"))
    w.close()
    g = ["--sessions-dir", str(sessions_dir)]
    code, out, _ = agentdb(*g, "events", w.session_id, "--json")
    assert code == 0
    a, b = (json.loads(x) for x in out.splitlines())
    assert a["payload_encoding"] == "base64"
    assert base64.b64decode(a["payload"]) == b"\xff\x00\x01binary"
    assert b["payload_encoding"] == "utf-8" and b["payload"].startswith("\x1b[31m")
    code, out, _ = agentdb(*g, "events", w.session_id)
    assert code == 0
    assert "\x1b" not in out and "\\x1b[31mred" in out and "0xff0001" in out
