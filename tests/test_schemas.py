"""Every --json document validates against the JSON Schema shipped in the package, on real
command output (the demo state, before and after recovery), and has an integer "version"."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from agentdb import schemas
from agentdb.jobs import demo
from tests.runner import Agentdb

pytestmark = pytest.mark.slow

jsonschema = pytest.importorskip("jsonschema")


def run(agentdb: Agentdb, *args: str) -> dict[str, Any]:
    code, out, _ = agentdb(*args)
    assert code in (0, 1), (args, code)
    doc: dict[str, Any] = json.loads(out)
    return doc


def validate(name: str, doc: dict[str, Any]) -> None:
    assert isinstance(doc["version"], int), name
    if "sessions" in doc and isinstance(doc["sessions"], list):
        assert isinstance(doc.get("summary"), dict), f"{name}: sessions[] without summary{{}}"
    jsonschema.validate(doc, schemas.load(name), cls=jsonschema.Draft202012Validator)


def test_every_schema_is_a_valid_schema() -> None:
    assert {"check", "recover", "migrate", "prune", "sessions-list", "plugins-refs"} <= set(
        schemas.names()
    )
    for name in schemas.names():
        jsonschema.Draft202012Validator.check_schema(schemas.load(name))


def test_real_output_validates(tmp_path: Path, agentdb: Agentdb) -> None:
    state = demo.build(tmp_path / "demo")
    g = ["--sessions-dir", str(state.sessions_dir), "--plugin-cache", str(state.plugin_cache)]
    sid = state.by_role("parent").session_id
    seen = set()

    def check(name: str, *args: str) -> dict[str, Any]:
        doc = run(agentdb, *g, *args, "--json")
        validate(name, doc)
        seen.add(name)
        return doc

    check("status", "status")
    check("check", "check", "--all")
    check("recover", "recover", "--all", "--dry-run")
    rec = check("recover", "recover", state.by_role("damaged").session_id)
    assert rec["summary"]["outcomes"]["recovered"] == 1
    time.sleep(0.12)
    check("check", "check", "--problems")
    check("migrate", "migrate", "--all", "--dry-run")
    check("prune", "prune", "--older-than", "90d", "--dry-run")
    check("sessions-list", "sessions", "list")
    check("sessions-show", "sessions", "show", sid)
    check("sessions-tree", "sessions", "tree")
    check("plugins-refs", "plugins", "refs")
    check("plugins-users", "plugins", "users", "model/anthropic")
    check("sessions-costs", "sessions", "costs")
    check("preflight", "preflight", sid)
    check("status", "status")
    report = check("report", "report")
    assert report["recoveries"] and report["recoveries"][0]["lost_ranges"]
    check("migrate", "migrate", "--all")
    check("backup", "backup", "--all", "--to", str(tmp_path / "copies"))
    again = check("backup", "backup", "--all", "--to", str(tmp_path / "copies"))
    assert again["summary"]["total"] == len(state.sessions)
    check("backup-verify", "backup", "--verify", str(tmp_path / "copies"))
    check("restore", "restore", "--all", "--from", str(tmp_path / "copies"), "--dry-run")
    lost = state.by_role("parent").session_id
    (state.sessions_dir / f"{lost}.sqlite").unlink()
    restored = check("restore", "restore", lost, "--from", str(tmp_path / "copies"))
    assert restored["sessions"][0]["outcome"] == "restored"
    check("sessions-end", "sessions", "end", state.by_role("running").session_id, "--dry-run")
    kept = check("prune-leftovers", "prune", "--leftovers", "--dry-run")
    assert kept["leftovers"] and kept["leftovers"][0]["kind"] == "corrupt"  # recover kept it
    # errors under --json are one document on stderr, with the same version
    for argv, code in (
        (["check", "NOTANID", "--json"], 2),
        (["sessions", "show", "01J9Z8Q4N5X7W3V2T6R8Y0P1KM", "--json"], 1),
    ):
        ran = agentdb(*g, *argv)
        assert ran.code == code
        err = json.loads(ran.err)
        validate("error", err)
        assert err["error"]["exit"] == code
    seen.add("error")
    seen.add("events")  # JSON Lines, one schema per line: test_every_events_line_validates...
    # a schema rejects a document that breaks it (the test can fail)
    bad = dict(report, version="1")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schemas.load("report"))
    assert seen == set(schemas.names()), set(schemas.names()) - seen  # every schema exercised


def test_every_events_line_validates_and_carries_a_version(
    tmp_path: Path, agentdb: Agentdb
) -> None:
    """``events --json`` prints JSON Lines: each line is one document with its own version."""
    state = demo.build(tmp_path / "d")
    sid = state.by_role("parent").session_id
    code, out, _ = agentdb("--sessions-dir", str(state.sessions_dir), "events", sid, "--json")
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines, code
    for doc in lines:
        assert doc["version"] == 1
        jsonschema.validate(doc, schemas.load("events"), cls=jsonschema.Draft202012Validator)
