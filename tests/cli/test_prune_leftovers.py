"""agentdb prune --leftovers: the copies recover and restore kept (real files, a real recover),
listed first, removed only after a confirmation or --yes, never a session; counted in status's
and report's sizes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from agentdb.jobs import demo
from tests.runner import Agentdb, Terminal, global_options, run_cli
from tests.support import make_session, tree_snapshot


def kept_state(sessions_dir: Path) -> tuple[str, str, str]:
    """Three sessions: one recovered by a real ``recover`` (its original kept as .corrupt), one
    with a .pre-restore copy and a .corrupt.1 with its -wal, one with nothing beside it."""
    damaged, path = make_session(sessions_dir, turns=40)
    demo.damage_page(path, table="events", nth_leaf=1)
    r = run_cli("--sessions-dir", str(sessions_dir), "recover", damaged)
    assert r.returncode == 0, r.stderr
    assert (sessions_dir / f"{damaged}.sqlite.corrupt").exists()
    other, opath = make_session(sessions_dir, turns=2)
    shutil.copyfile(opath, sessions_dir / f"{other}.sqlite.pre-restore")
    shutil.copyfile(opath, sessions_dir / f"{other}.sqlite.corrupt.1")
    (sessions_dir / f"{other}.sqlite.corrupt.1-wal").write_bytes(b"\0" * 100)
    clean, _ = make_session(sessions_dir, turns=1)
    return damaged, other, clean


def names(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def test_dry_run_lists_every_kept_copy_and_changes_nothing(
    sessions_dir: Path, agentdb: Agentdb
) -> None:
    damaged, other, _ = kept_state(sessions_dir)
    before = tree_snapshot(sessions_dir)
    code, out, err = agentdb(
        "--sessions-dir", str(sessions_dir), "prune", "--leftovers", "--dry-run", "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    got = {(x["name"], tuple(x["files"]), x["action"]) for x in doc["leftovers"]}
    assert got == {
        (f"{damaged}.sqlite.corrupt", (f"{damaged}.sqlite.corrupt",), "would_remove"),
        (
            f"{other}.sqlite.corrupt.1",
            (f"{other}.sqlite.corrupt.1", f"{other}.sqlite.corrupt.1-wal"),
            "would_remove",
        ),
        (f"{other}.sqlite.pre-restore", (f"{other}.sqlite.pre-restore",), "would_remove"),
    }
    assert doc["summary"]["copies"] == 3 and doc["summary"]["removed"] == 0
    assert tree_snapshot(sessions_dir) == before
    code, out, err = agentdb(
        "--sessions-dir", str(sessions_dir), "prune", "--leftovers", "--dry-run"
    )
    assert code == 0 and "would remove" in out and "--leftovers --yes" in err


def test_nothing_is_removed_without_a_confirmation(sessions_dir: Path) -> None:
    kept_state(sessions_dir)
    before = tree_snapshot(sessions_dir)
    r = run_cli("--sessions-dir", str(sessions_dir), "prune", "--leftovers")
    assert r.returncode == 1 and "nothing removed" in r.stderr
    assert tree_snapshot(sessions_dir) == before
    with Terminal("--sessions-dir", str(sessions_dir), "prune", "--leftovers", stdin=True) as t:
        t.read_until(b"[y/N]")
        t.write("n\n")
        code, _, _ = t.finish(timeout=60)
    assert code == 1
    assert tree_snapshot(sessions_dir) == before


def test_yes_removes_only_the_kept_copies(sessions_dir: Path, agentdb: Agentdb) -> None:
    damaged, other, clean = kept_state(sessions_dir)
    sessions = {
        f"{s}.sqlite": (sessions_dir / f"{s}.sqlite").read_bytes() for s in (damaged, other, clean)
    }
    with Terminal("--sessions-dir", str(sessions_dir), "prune", "--leftovers", stdin=True) as t:
        t.read_until(b"[y/N]")
        t.write("y\n")
        code, _, _ = t.finish(timeout=60)
    assert code == 0
    assert names(sessions_dir) >= set(sessions)
    assert not [n for n in names(sessions_dir) if ".corrupt" in n or ".pre-restore" in n]
    for name, data in sessions.items():
        assert (sessions_dir / name).read_bytes() == data  # never a session
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "check", "--json")
    assert code == 0, out


def test_ids_restrict_it_and_selectors_are_refused(sessions_dir: Path, agentdb: Agentdb) -> None:
    damaged, other, _ = kept_state(sessions_dir)
    code, out, err = agentdb(
        "--sessions-dir", str(sessions_dir), "prune", "--leftovers", other, "--yes", "--json"
    )
    assert code == 0, err
    assert {x["session_id"] for x in json.loads(out)["leftovers"]} == {other}
    assert (sessions_dir / f"{damaged}.sqlite.corrupt").exists()
    assert not (sessions_dir / f"{other}.sqlite.pre-restore").exists()
    code, _, err = agentdb(
        "--sessions-dir", str(sessions_dir), "prune", "--leftovers", "--older-than", "1d"
    )
    assert code == 2 and "--leftovers selects by IDS only" in err


def test_a_copy_in_use_or_beside_an_interrupted_job_is_skipped(
    sessions_dir: Path, agentdb: Agentdb
) -> None:
    damaged, other, clean = kept_state(sessions_dir)
    # a swap under way: the kept name is a second link to a file (recover links, then renames)
    os.link(sessions_dir / f"{clean}.sqlite", sessions_dir / f"{clean}.sqlite.corrupt")
    # an interrupted job's file beside the other session
    (sessions_dir / f"{damaged}.sqlite.agentdb-recover-scratch").write_bytes(b"x")
    # a symlink under a kept name is never listed, followed or removed
    os.symlink(f"{other}.sqlite", sessions_dir / f"{other}.sqlite.corrupt.7")
    code, out, err = agentdb(
        "--sessions-dir", str(sessions_dir), "prune", "--leftovers", "--yes", "--json"
    )
    assert code == 1, err  # some were left: exit 1
    doc = json.loads(out)
    actions = {x["name"]: (x["action"], x["reason"]) for x in doc["leftovers"]}
    assert actions[f"{clean}.sqlite.corrupt"][0] == "skipped"
    assert "names" in actions[f"{clean}.sqlite.corrupt"][1]
    assert actions[f"{damaged}.sqlite.corrupt"][0] == "skipped"
    assert "interrupted" in actions[f"{damaged}.sqlite.corrupt"][1]
    assert actions[f"{other}.sqlite.pre-restore"][0] == "removed"
    assert f"{other}.sqlite.corrupt.7" not in actions
    assert os.path.islink(sessions_dir / f"{other}.sqlite.corrupt.7")
    assert (sessions_dir / f"{clean}.sqlite.corrupt").exists()
    assert (sessions_dir / f"{damaged}.sqlite.corrupt").exists()
    assert doc["summary"]["skipped"] == 2 and doc["summary"]["removed"] == 2


def test_status_and_report_count_the_kept_copies(
    tmp_path: Path, sessions_dir: Path, plugin_cache: Path, agentdb: Agentdb
) -> None:
    kept_state(sessions_dir)
    kept = sum(
        p.stat().st_size
        for p in sessions_dir.iterdir()
        if ".corrupt" in p.name or ".pre-restore" in p.name
    )
    sessions = sum(p.stat().st_size for p in sessions_dir.iterdir() if p.name.endswith(".sqlite"))
    g = global_options(sessions_dir, plugin_cache)
    code, out, _ = agentdb(*g, "status", "--json")
    s = json.loads(out)["summary"]
    assert (s["leftover_copies"], s["leftover_bytes"]) == (3, kept)
    assert s["size_bytes"] == sessions and s["disk_bytes"] == sessions + kept
    code, out, _ = agentdb(*g, "status")
    assert "kept copies" in out and "agentdb prune --leftovers --dry-run" in out
    page = tmp_path / "r.html"
    code, out, err = agentdb(*g, "report", "--html", str(page), "--json")
    doc = json.loads(out)
    assert doc["summary"]["leftover_bytes"] == kept and len(doc["leftovers"]) == 3
    html = page.read_text()
    assert "agentdb prune --leftovers --dry-run" in html and 'id="leftovers"' in html
