"""agentdb preflight: producers a session used that the plugin cache lacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentdb.jobs import demo
from tests.runner import Agentdb, run_cli, state_options
from tests.support import make_session


@pytest.mark.slow
def test_kernel_never_looked_up_in_the_plugin_cache(tmp_path: Path, sessions_dir: Path) -> None:
    cache = tmp_path / "pc"
    k = demo.KERNEL
    (cache / k.category / k.name / k.version).mkdir(parents=True)
    sid, _ = make_session(sessions_dir, turns=2)
    opts = ["--sessions-dir", str(sessions_dir), "--plugin-cache", str(cache)]
    r = run_cli(*opts, "preflight", sid, "--json")
    doc = json.loads(r.stdout)
    assert all(p["category"] != "kernel" for p in doc["missing"]), doc
    assert {p["state"] for p in doc["producers"] if p["category"] == "kernel"} == {"kernel"}
    r = run_cli(*opts, "prune", sid, "--dry-run", "--json")
    assert json.loads(r.stdout)["would_remove"] == [sid], r.stdout  # not pinned by the kernel dir
    r = run_cli(*opts, "plugins", "refs", "--json")
    doc = json.loads(r.stdout)
    assert all(v.get("sessions", 0) == 0 for v in doc["versions"]), doc


@pytest.mark.slow
def test_preflight(agentdb: Agentdb, demo_state: demo.DemoState) -> None:
    pinned = demo_state.by_role("pinned").session_id
    code, out, err = agentdb(*state_options(demo_state), "preflight", pinned, "--json")
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
        (demo_state.plugin_cache / cat / name / ver).mkdir(parents=True)
    code, out, err = agentdb(*state_options(demo_state), "preflight", pinned)
    assert code == 0 and "every producer" in err


def test_preflight_hostile_names(sessions_dir: Path, plugin_cache: Path, agentdb: Agentdb) -> None:
    from agentdb.store import Event, Producer, SessionWriter

    (plugin_cache.parent / "x").mkdir()
    w = SessionWriter.create(sessions_dir, profile="p")
    w.emit(Event("tool_result", Producer("tool", "..", ".."), b"x"))
    w.close()
    g = ["--sessions-dir", str(sessions_dir), "--plugin-cache", str(plugin_cache)]
    code, out, _ = agentdb(*g, "preflight", w.session_id, "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["producers"][0]["state"] == "invalid"
