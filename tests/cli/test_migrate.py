"""agentdb migrate / agentdb backup: exit codes, JSON shapes, usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentdb.jobs import demo
from agentdb.schema.revisions import CURRENT_REVISION
from tests.migrate_support import snapshot, user_version
from tests.runner import Agentdb, run_cli, state_options
from tests.support import make_session


@pytest.mark.slow
def test_migrate_json_shape_and_exit(sessions_dir: Path, agentdb: Agentdb) -> None:
    old, p = make_session(sessions_dir, revision=1)
    cur, _ = make_session(sessions_dir)
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "migrate", "--all", "--json")
    assert code == 0
    doc = json.loads(out)
    rows = {s["session_id"]: s for s in doc["sessions"]}
    assert {k: rows[old][k] for k in ("from", "to", "outcome")} == {
        "from": 1,
        "to": CURRENT_REVISION,
        "outcome": "migrated",
    }
    assert rows[cur]["outcome"] == "current"
    assert doc["summary"]["migrated"] == 1 and doc["dry_run"] is False
    assert user_version(p) == CURRENT_REVISION


@pytest.mark.slow
def test_migrate_exit_1_on_problems_and_table(sessions_dir: Path, agentdb: Agentdb) -> None:
    sid, p = make_session(sessions_dir, turns=40, revision=1)
    demo.damage_page(p, table="events", nth_leaf=1)
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "migrate", sid)
    assert code == 1
    assert "corrupt" in out and f"agentdb recover {sid}" in out
    assert "too new" in out and "skipped" in out  # the summary table's columns


def test_migrate_dry_run(sessions_dir: Path, agentdb: Agentdb) -> None:
    make_session(sessions_dir, revision=1)
    before = snapshot(sessions_dir)
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "migrate", "--all", "--dry-run")
    assert code == 0 and "would migrate" in out
    assert snapshot(sessions_dir) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["migrate"],
        ["migrate", "not-a-ulid"],
        ["migrate", "--all", "01HZZZZZZZZZZZZZZZZZZZZZZZ"],
        ["migrate", "--all", "--wait", "-1"],
        ["backup", "--all"],
        ["backup", "--to", "x"],
        ["backup", "--verify", "x", "--all"],
        ["backup", "../etc/passwd", "--to", "x"],
    ],
)
def test_usage_errors(sessions_dir: Path, agentdb: Agentdb, argv: list[str]) -> None:
    before = snapshot(sessions_dir)
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), *argv)
    assert code == 2 and out == ""
    assert snapshot(sessions_dir) == before


def test_missing_sessions_dir(tmp_path: Path, agentdb: Agentdb) -> None:
    code, _, err = agentdb("--sessions-dir", str(tmp_path / "nope"), "migrate", "--all")
    assert code == 2 and "does not exist" in err


def test_backup_and_verify(sessions_dir: Path, tmp_path: Path, agentdb: Agentdb) -> None:
    sid, _ = make_session(sessions_dir)
    dest = tmp_path / "b"
    argv = ["--sessions-dir", str(sessions_dir), "backup", "--all", "--to", str(dest), "--json"]
    code, out, _ = agentdb(*argv)
    assert code == 0
    doc = json.loads(out)
    s = doc["sessions"][0]
    assert (s["session_id"], s["outcome"], s["path"]) == (
        sid,
        "copied",
        str(dest / f"{sid}.sqlite"),
    )
    assert s["bytes"] > 0 and s["seconds"] >= 0
    code, out, _ = agentdb(*argv)  # again: nothing changed, nothing written, exit 0
    assert code == 0 and json.loads(out)["sessions"][0]["outcome"] == "unchanged"
    code, out, _ = agentdb("backup", "--verify", str(dest), "--json")
    assert code == 0
    assert [(x["session_id"], x["verdict"]) for x in json.loads(out)["sessions"]] == [(sid, "ok")]
    demo.damage_page(dest / f"{sid}.sqlite", table="session_meta")
    code, out, _ = agentdb("backup", "--verify", str(dest))
    assert code == 1 and sid in out


@pytest.mark.slow
def test_migrate_json_shape(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    r = run_cli(*state_options(state), "migrate", "--all", "--json")
    assert r.returncode == 1, r.stderr  # the damaged session is not migrated
    outs = {s["session_id"]: s for s in json.loads(r.stdout)["sessions"]}
    for s in outs.values():
        assert s["outcome"] in (
            "migrated",
            "current",
            "too_new",
            "corrupt",
            "skipped_live",
            "failed",
            "foreign",
        )
        assert "from" in s and "to" in s
    old = outs[state.by_role("old-revision").session_id]
    assert (old["from"], old["to"], old["outcome"]) == (1, CURRENT_REVISION, "migrated")
    assert outs[state.by_role("damaged").session_id]["outcome"] == "corrupt"
    assert outs[state.by_role("recent").session_id]["outcome"] == "current"
