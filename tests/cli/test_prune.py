"""``agentdb prune`` and ``agentdb plugins refs`` as real processes: exit codes, JSON, kill -9."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentdb.jobs import demo
from agentdb.store import Producer, SessionWriter
from tests.runner import Terminal, global_options, run_cli, state_options
from tests.support import held_open, make_session, tree_snapshot
from tests.test_prune import cache_version, crashed_session, foreign_file, old_session, snapshot


@pytest.mark.slow
def test_usage_errors(sessions_dir: Path, plugin_cache: Path) -> None:
    assert run_cli(*global_options(sessions_dir, plugin_cache), "prune").returncode == 2
    assert (
        run_cli(
            *global_options(sessions_dir, plugin_cache), "prune", "--dry-run", "--yes"
        ).returncode
        == 2
    )
    assert (
        run_cli(*global_options(sessions_dir, plugin_cache), "prune", "not-an-id").returncode == 2
    )
    assert (
        run_cli(
            *global_options(sessions_dir, plugin_cache), "prune", "--older-than", "soon"
        ).returncode
        == 2
    )
    assert (
        run_cli(
            *global_options(sessions_dir, plugin_cache), "prune", "--status", "done,failed"
        ).returncode
        == 2
    )
    missing = sessions_dir / "nope"
    r = run_cli(*global_options(missing, plugin_cache), "prune", "--older-than", "1d")
    assert r.returncode == 2 and "does not exist" in r.stderr


@pytest.mark.slow
def test_dry_run_json_changes_nothing(sessions_dir: Path, plugin_cache: Path) -> None:
    (plugin_cache / "model" / "anthropic" / "1.4.0").mkdir(parents=True)
    gone = old_session(sessions_dir, 200)
    pinned = old_session(sessions_dir, 150, model=demo.MODEL_CACHED)
    crashed_session(sessions_dir, 120)
    foreign = foreign_file(sessions_dir, 100)
    before = snapshot(sessions_dir)
    r = run_cli(
        *global_options(sessions_dir, plugin_cache),
        "prune",
        "--older-than",
        "0s",
        "--dry-run",
        "--json",
    )
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


@pytest.mark.slow
def test_no_terminal_without_yes_deletes_nothing(sessions_dir: Path, plugin_cache: Path) -> None:
    old_session(sessions_dir, 200)
    before = snapshot(sessions_dir)
    r = run_cli(*global_options(sessions_dir, plugin_cache), "prune", "--older-than", "90d")
    assert r.returncode == 1 and "--yes" in r.stderr and "would remove" in r.stdout
    assert snapshot(sessions_dir) == before


@pytest.mark.slow
def test_unconfirmed_json_never_reports_removed(sessions_dir: Path, plugin_cache: Path) -> None:
    """No terminal and no --yes: nothing is removed, and ``removed`` says so (a script that
    reads only ``removed`` is not misled); the plan is in ``would_remove``."""
    sid = old_session(sessions_dir, 200)
    before = snapshot(sessions_dir)
    r = run_cli(*global_options(sessions_dir, plugin_cache), "prune", sid, "--json")
    assert r.returncode == 1 and "--yes" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["removed"] == [] and doc["would_remove"] == [sid]
    assert doc["dry_run"] is True and doc["confirmed"] is False
    assert doc["freed_bytes"] == 0 and doc["would_free_bytes"] > 0
    assert snapshot(sessions_dir) == before
    r = run_cli(*global_options(sessions_dir, plugin_cache), "prune", sid, "--json", "--yes")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["removed"] == [sid] and doc["would_remove"] == []
    assert doc["dry_run"] is False and doc["confirmed"] is True and doc["freed_bytes"] > 0


@pytest.mark.slow
def test_foreign_file_is_never_removed(sessions_dir: Path, plugin_cache: Path) -> None:
    """Not even named with --include-damaged --yes: reason ``foreign``, the file stays."""
    foreign = foreign_file(sessions_dir, 200)
    before = snapshot(sessions_dir)
    r = run_cli(
        *global_options(sessions_dir, plugin_cache),
        "prune",
        foreign,
        "--include-damaged",
        "--yes",
        "--json",
    )
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["removed"] == []
    [refused] = doc["refused"]
    assert [c["code"] for c in refused["reasons"]] == ["foreign"]
    assert "by hand" in refused["reasons"][0]["message"]
    assert snapshot(sessions_dir) == before


@pytest.mark.slow
def test_yes_removes_and_exit_codes(sessions_dir: Path, plugin_cache: Path) -> None:
    gone = old_session(sessions_dir, 200)
    kept = old_session(sessions_dir, 2)
    r = run_cli(
        *global_options(sessions_dir, plugin_cache),
        "prune",
        "--older-than",
        "90d",
        "--yes",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["removed"] == [gone] and doc["refused"] == [] and doc["dry_run"] is False
    assert sorted(os.listdir(sessions_dir)) == [f"{kept}.sqlite"]
    running = old_session(sessions_dir, 300, status=None, ended_at=None)
    r = run_cli(*global_options(sessions_dir, plugin_cache), "prune", running, "--yes")
    assert r.returncode == 1 and "running" in r.stdout
    assert (sessions_dir / f"{running}.sqlite").exists()


FAULTS = ["after_plan", "intent_created", "after_intent", "after_db_unlink", "after_sidecars"]


@pytest.mark.slow
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
    r = run_cli(*global_options(sessions_dir, plugin_cache), *args, fault=fault)
    assert r.returncode == -9, (r.returncode, r.stderr)
    r = run_cli(*global_options(sessions_dir, plugin_cache), *args)
    assert r.returncode == 0, r.stderr
    assert snapshot(sessions_dir) == kept_files
    assert crashed and plain


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS[2:])
def test_kill_9_with_include_damaged(sessions_dir: Path, plugin_cache: Path, fault: str) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    demo.damage_page(path, table="events", nth_leaf=1)
    (sessions_dir / f"{sid}.sqlite.corrupt").write_bytes(b"older damaged original")
    (sessions_dir / f"{sid}.sqlite.corrupt-wal").write_bytes(b"its wal")
    args = ("prune", sid, "--include-damaged", "--yes")
    r = run_cli(*global_options(sessions_dir, plugin_cache), *args, fault=fault)
    assert r.returncode == -9
    # The next run finishes it whatever it selects (here: nothing else matches).
    r = run_cli(
        *global_options(sessions_dir, plugin_cache), "prune", "--older-than", "1000d", "--yes"
    )
    assert r.returncode == 0, r.stderr
    assert os.listdir(sessions_dir) == []


@pytest.mark.slow
def test_intent_cut_short_decides_nothing(sessions_dir: Path, plugin_cache: Path) -> None:
    """A kill between creating the intent and writing it leaves it empty. It is fsynced before
    anything is removed, so nothing was: a run that does not select the session leaves it and
    its files alone (exit 0); one that selects it removes it, the cut intent with it."""
    sid, path = make_session(sessions_dir, turns=20)
    demo.damage_page(path, table="events", nth_leaf=1)
    (sessions_dir / f"{sid}.sqlite.corrupt").write_bytes(b"older damaged original")
    args = ("prune", sid, "--include-damaged", "--yes")
    r = run_cli(*global_options(sessions_dir, plugin_cache), *args, fault="intent_created")
    assert r.returncode == -9
    intent = sessions_dir / f"{sid}.sqlite.agentdb-prune-intent"
    assert intent.read_bytes() == b""
    before = snapshot(sessions_dir)
    r = run_cli(
        *global_options(sessions_dir, plugin_cache), "prune", "--older-than", "1000d", "--yes"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert snapshot(sessions_dir) == before
    r = run_cli(*global_options(sessions_dir, plugin_cache), *args, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["removed"] == [sid]
    assert os.listdir(sessions_dir) == []


@pytest.mark.slow
def test_interrupted_prune_of_a_session_that_changed_is_kept(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    sid = old_session(sessions_dir, 200)
    r = run_cli(
        *global_options(sessions_dir, plugin_cache), "prune", sid, "--yes", fault="after_intent"
    )
    assert r.returncode == -9
    from agentdb.store import Event, Producer, SessionWriter

    with SessionWriter.open(sessions_dir, sid) as w:  # the kernel resumed it meanwhile
        before = w.info()
        w.set_status("running")
        w.emit(Event("tool_result", Producer("tool", "shell", "2.0.0"), b"x"))
        w.set_status(before.status, at=before.ended_at)  # and ended it again
    r = run_cli(
        *global_options(sessions_dir, plugin_cache),
        "prune",
        "--older-than",
        "1000d",
        "--yes",
        "--json",
    )
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["refused"][0]["reasons"][0]["code"] == "changed"
    assert os.listdir(sessions_dir) == [f"{sid}.sqlite"]


@pytest.mark.slow
def test_plugins_refs_json(sessions_dir: Path, plugin_cache: Path) -> None:
    (plugin_cache / "model" / "anthropic" / "1.4.0").mkdir(parents=True)
    (plugin_cache / "tool" / "shell" / "2.1.0").mkdir(parents=True)
    old_session(sessions_dir, 10, model=demo.MODEL_CACHED)
    r = run_cli(*global_options(sessions_dir, plugin_cache), "plugins", "refs", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(v["name"], v["sessions"]) for v in doc["versions"]] == [("anthropic", 1), ("shell", 0)]
    assert [v["version"] for v in doc["unreferenced"]] == ["2.1.0"]


@pytest.mark.slow
@pytest.mark.parametrize("answer", ["y", "n"])
def test_terminal_confirmation(sessions_dir: Path, plugin_cache: Path, answer: str) -> None:
    sid = old_session(sessions_dir, 200)
    code, out, _ = _run_on_terminal(
        sessions_dir, plugin_cache, ["prune", "--older-than", "90d"], answer
    )
    assert sid in out
    assert (sessions_dir / f"{sid}.sqlite").exists() == (answer == "n")
    assert code == (0 if answer == "y" else 1)


def test_prune_json_shape_and_reason_codes(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    parent = state.by_role("parent").session_id
    child = state.by_role("child").session_id
    recent = state.by_role("recent")
    with held_open(recent.path):
        r = run_cli(
            *state_options(state),
            "prune",
            parent,
            child,
            recent.session_id,
            state.by_role("running").session_id,
            state.by_role("damaged").session_id,
            "--dry-run",
            "--json",
        )
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dry_run"] is True and doc["removed"] == []
    reasons = {d["session_id"]: {x["code"] for x in d["reasons"]} for d in doc["refused"]}
    for d in doc["refused"]:
        assert all(isinstance(x["message"], str) and x["message"] for x in d["reasons"])
    assert "has_children" in reasons[parent]  # the other child stays
    assert {"live", "pinned"} <= reasons[recent.session_id]  # every reason that applies
    assert {"running", "pinned"} <= reasons[state.by_role("running").session_id]
    assert "unreadable" in reasons[state.by_role("damaged").session_id]
    assert child in doc["would_remove"]


@pytest.mark.slow
def test_prune_needs_confirmation_and_dry_run_changes_nothing(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    before = tree_snapshot(tmp_path)
    for extra in ([], ["--dry-run"]):
        r = run_cli(*state_options(state), "prune", "--older-than", "0s", *extra)
        assert r.returncode == 1, r.stderr  # no terminal: nothing removed / some refused
        assert tree_snapshot(tmp_path) == before
    r = run_cli(*state_options(state), "prune")
    assert r.returncode == 2


REFUSED_ROW = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25} +refused ", re.MULTILINE)
OTHER = Producer("model", "openai", "2.0.0")  # a second cached version


def _doc(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def _versions(doc: dict[str, Any], key: str = "pinned_versions") -> dict[str, dict[str, Any]]:
    return {f"{v['category']}/{v['name']}/{v['version']}": v for v in doc[key]}


@pytest.mark.slow
def test_totals_by_reason_and_capped_rows(sessions_dir: Path, plugin_cache: Path) -> None:
    cache_version(plugin_cache, demo.MODEL_CACHED)
    pinned = [old_session(sessions_dir, 300 - i, model=demo.MODEL_CACHED) for i in range(14)]
    old_session(sessions_dir, 200, status="running")
    plain = [old_session(sessions_dir, 150 - i) for i in range(3)]
    newest = old_session(sessions_dir, 10, model=demo.MODEL_CACHED)  # kept by --keep-last
    args = ["prune", "--older-than", "0s", "--keep-last", "1", "--dry-run"]

    doc = _doc(run_cli(*global_options(sessions_dir, plugin_cache), *args, "--json"))
    assert doc["version"] == 1 and doc["dry_run"] is True
    sm = doc["summary"]
    assert sm["reasons"] == {"pinned": 14, "running": 1}
    assert (sm["selected"], sm["would_remove"], sm["refused"]) == (18, 3, 15)
    assert sorted(doc["would_remove"]) == sorted(plain)
    v = _versions(doc)["model/anthropic/1.4.0"]
    # 14 selected sessions pin it; the one --keep-last keeps is outside and keeps it cached
    assert (v["selected"], v["outside"], v["removed"]) == (14, 1, 0)
    assert v["unreferenced_after"] is False and doc["unreferenced_versions"] == []

    r = run_cli(*global_options(sessions_dir, plugin_cache), *args)
    assert r.returncode == 1
    assert len(REFUSED_ROW.findall(r.stdout)) == 10  # capped...
    assert "and 5 more refused" in r.stdout  # ...and says how many it left out
    assert re.search(r"^pinned +14$", r.stdout, re.MULTILINE)  # totals by reason
    assert re.search(r"^running +1$", r.stdout, re.MULTILINE)
    assert re.search(r"^model/anthropic/1\.4\.0 +14 +1 +15 still reference it$", r.stdout, re.M)
    assert newest not in r.stdout  # --keep-last kept it out of the selection
    assert "evict" not in r.stdout + r.stderr  # never advises evicting a version in use
    assert "--include-pinned removes them" in r.stderr

    r = run_cli(*global_options(sessions_dir, plugin_cache), *args, "-v")
    assert len(REFUSED_ROW.findall(r.stdout)) == 15
    assert all(s in r.stdout for s in pinned)


@pytest.mark.slow
def test_include_pinned_removes_and_names_unreferenced_versions(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    cache_version(plugin_cache, demo.MODEL_CACHED)
    cache_version(plugin_cache, OTHER)
    only = [old_session(sessions_dir, 300 - i, model=demo.MODEL_CACHED) for i in range(2)]
    shared = old_session(sessions_dir, 250, model=OTHER)
    keeper = old_session(sessions_dir, 1, model=OTHER)  # stays: outside the selection
    running = old_session(sessions_dir, 200, model=demo.MODEL_CACHED, status="running")
    select_ = ["prune", "--until", "2d", "--json"]

    # --yes alone never implies --include-pinned
    doc = _doc(run_cli(*global_options(sessions_dir, plugin_cache), *select_, "--yes"))
    assert doc["removed"] == []
    assert doc["summary"]["reasons"] == {"pinned": 4, "running": 1}

    # with no terminal and no --yes, nothing is removed
    r = run_cli(*global_options(sessions_dir, plugin_cache), *select_, "--include-pinned")
    assert r.returncode == 1 and _doc(r)["removed"] == []
    assert all((sessions_dir / f"{s}.sqlite").exists() for s in [*only, shared])

    r = run_cli(*global_options(sessions_dir, plugin_cache), *select_, "--include-pinned", "--yes")
    doc = _doc(r)
    assert r.returncode == 1  # the running one still refuses
    assert sorted(doc["removed"]) == sorted([*only, shared])
    (ref,) = doc["refused"]
    assert ref["session_id"] == running
    assert [x["code"] for x in ref["reasons"]] == ["running"]  # not pinned any more, still running
    vs = _versions(doc)
    assert vs["model/anthropic/1.4.0"]["removed"] == 2
    assert vs["model/anthropic/1.4.0"]["staying"] == 1  # the running session still uses it
    assert vs["model/openai/2.0.0"]["outside"] == 1  # the keeper still uses it
    assert doc["unreferenced_versions"] == []

    # once the running session has ended, removing it leaves 1.4.0 with no reference at all
    with SessionWriter.open(sessions_dir, running) as w:
        w.set_status("cancelled")
    args = ["prune", running, "--include-pinned", "--yes", "--json"]  # ended just now: by id
    doc = _doc(run_cli(*global_options(sessions_dir, plugin_cache), *args))
    assert doc["removed"] == [running]
    assert list(_versions(doc, "unreferenced_versions")) == ["model/anthropic/1.4.0"]
    refs = _doc(run_cli(*global_options(sessions_dir, plugin_cache), "plugins", "refs", "--json"))
    evictable = {f"{v['category']}/{v['name']}/{v['version']}" for v in refs["unreferenced"]}
    assert "model/anthropic/1.4.0" in evictable and "model/openai/2.0.0" not in evictable
    assert (sessions_dir / f"{keeper}.sqlite").exists()


def _run_on_terminal(
    sessions_dir: Path, plugin_cache: Path, args: list[str], answer: str
) -> tuple[int, str, str]:
    """The real CLI with stdin and stderr on a pseudo-terminal; answers the prompt."""
    with Terminal(*global_options(sessions_dir, plugin_cache), *args, stdin=True) as t:
        t.read_until(b"[y/N]")
        t.write(answer + "\n")
        return t.finish(timeout=60)


@pytest.mark.slow
def test_confirmation_lists_each_version_they_pin(sessions_dir: Path, plugin_cache: Path) -> None:
    cache_version(plugin_cache, demo.MODEL_CACHED)
    cache_version(plugin_cache, OTHER)
    a = old_session(sessions_dir, 300, model=demo.MODEL_CACHED)
    b = old_session(sessions_dir, 250, model=OTHER)
    old_session(sessions_dir, 1, model=OTHER)  # outside the selection
    args = ["prune", "--until", "2d", "--include-pinned"]
    code, _, term = _run_on_terminal(sessions_dir, plugin_cache, args, "n")
    assert code == 1 and "nothing removed" in term
    assert "2 of them are pinned" in term
    assert "model/anthropic/1.4.0: pinned by 1 removed session(s); no session references" in term
    assert "model/openai/2.0.0: pinned by 1 removed session(s); 1 session(s) that stay" in term
    assert (sessions_dir / f"{a}.sqlite").exists() and (sessions_dir / f"{b}.sqlite").exists()

    code, out, term = _run_on_terminal(sessions_dir, plugin_cache, args, "y")
    assert code == 0, term
    assert not (sessions_dir / f"{a}.sqlite").exists()
    assert not (sessions_dir / f"{b}.sqlite").exists()
    assert "plugins refs` lists it as unreferenced" in term and "model/anthropic/1.4.0" in term


@pytest.mark.slow
def test_prune_json_validates_against_the_shipped_schema(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from agentdb import schemas

    cache_version(plugin_cache, demo.MODEL_CACHED)
    old_session(sessions_dir, 300, model=demo.MODEL_CACHED)
    old_session(sessions_dir, 200)
    for extra in ([], ["--include-pinned"]):
        doc = _doc(
            run_cli(
                *global_options(sessions_dir, plugin_cache),
                "prune",
                "--until",
                "1d",
                "--dry-run",
                "--json",
                *extra,
            )
        )
        assert doc["pinned_versions"]
        jsonschema.validate(doc, schemas.load("prune"), cls=jsonschema.Draft202012Validator)
