"""The index through the CLI: the new list queries, ``sessions costs``, ``plugins users``,
``--no-index`` giving the same document, and an index that is missing, damaged, foreign,
unwritable or busy never changing an answer (only a note on stderr)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb import schemas
from agentdb.index import verdicts
from agentdb.jobs import demo
from tests.runner import Agentdb, run_cli

jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> demo.DemoState:
    s = demo.build(tmp_path_factory.mktemp("demo"))
    time.sleep(0.12)  # settled: the index may believe what it stores
    return s


def run(
    agentdb: Agentdb, state: demo.DemoState, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    return agentdb.at(state.sessions_dir, state.plugin_cache)(*args, env=env)


def doc(agentdb: Agentdb, state: demo.DemoState, *args: str) -> dict[str, Any]:
    code, out, err = run(agentdb, state, *args, "--json")
    assert code in (0, 1), err
    d: dict[str, Any] = json.loads(out)
    return d


COMMANDS = [
    ("sessions", "list"),
    ("sessions", "list", "--status", "completed", "--sort", "cost", "--limit", "2"),
    ("sessions", "tree"),
    ("sessions", "costs"),
    ("plugins", "refs"),
    ("plugins", "users", "anthropic"),
    ("status",),
    ("report",),
]


def _stable(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    d.pop("generated_at", None)
    summary = dict(d.get("summary") or {})
    for k in ("oldest_check_age_seconds", "newest_check_age_seconds"):
        summary.pop(k, None)
    d["summary"] = summary
    return d


@pytest.mark.slow
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_no_index_gives_the_same_document(
    agentdb: Agentdb, state: demo.DemoState, args: Any
) -> None:
    cold = doc(agentdb, state, *args)
    warm = doc(agentdb, state, *args)
    scanned = doc(agentdb, state, *args, "--no-index")
    assert _stable(cold) == _stable(scanned) == _stable(warm)


def test_list_queries(agentdb: Agentdb, state: demo.DemoState) -> None:
    parent = state.by_role("parent").session_id
    rows = doc(agentdb, state, "sessions", "list", "--parent", parent)["sessions"]
    assert rows and all(r["parent_session_id"] == parent for r in rows)
    rows = doc(agentdb, state, "sessions", "list", "--sort", "events")["sessions"]
    events = [r["events"] or 0 for r in rows]
    assert events == sorted(events, reverse=True)
    rows = doc(agentdb, state, "sessions", "list", "--sort", "cost", "--limit", "1")["sessions"]
    assert len(rows) == 1
    every = doc(agentdb, state, "sessions", "list")["sessions"]
    assert rows[0]["cost_usd"] == max(r["cost_usd"] or 0 for r in every)
    rows = doc(agentdb, state, "sessions", "list", "--profile", "researcher")["sessions"]
    assert rows and all(r["profile"] == "researcher" for r in rows)
    rows = doc(agentdb, state, "sessions", "list", "--until", "2000-01-01")["sessions"]
    assert rows == []
    rows = doc(agentdb, state, "sessions", "list", "--since", "2000-01-01")["sessions"]
    assert len(rows) == len(every)
    assert run(agentdb, state, "sessions", "list", "--since", "yesterday")[0] == 2
    assert run(agentdb, state, "sessions", "list", "--sort", "size")[0] == 2


def test_costs_and_users_validate(agentdb: Agentdb, state: demo.DemoState) -> None:
    costs = doc(agentdb, state, "sessions", "costs")
    jsonschema.validate(costs, schemas.load("sessions-costs"))
    assert costs["total_usd"] == pytest.approx(sum(d["cost_usd"] for d in costs["by_day"]))
    assert costs["total_usd"] == pytest.approx(sum(m["cost_usd"] for m in costs["by_model"]))
    every = doc(agentdb, state, "sessions", "list")["sessions"]
    unknown = set(costs["unreadable"])  # the demo's damaged session: its costs cannot be read
    assert unknown == {state.by_role("damaged").session_id}
    readable = sum(r["cost_usd"] or 0 for r in every if r["session_id"] not in unknown)
    assert costs["total_usd"] == pytest.approx(readable)
    users = doc(agentdb, state, "plugins", "users", "model/anthropic", "--version", "1.4.0")
    jsonschema.validate(users, schemas.load("plugins-users"))
    assert set(users["by_version"]) <= {"model/anthropic/1.4.0"}
    assert users["sessions"]
    none = doc(agentdb, state, "plugins", "users", "nosuchplugin")
    assert none["sessions"] == []
    assert run(agentdb, state, "plugins", "users", "a/b/c")[0] == 2


def _index() -> Path:
    return verdicts.cache_path()


@pytest.mark.parametrize("damage", ["deleted", "garbage", "foreign", "zeroed_page"])
def test_a_damaged_index_changes_no_answer(
    agentdb: Agentdb, state: demo.DemoState, damage: str
) -> None:
    want = doc(agentdb, state, "sessions", "list", "--no-index")
    doc(agentdb, state, "sessions", "list")  # the index exists and is warm
    path = _index()
    if damage == "deleted":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(os.urandom(8192))
    elif damage == "foreign":
        conn = apsw.Connection(str(path))
        conn.execute("PRAGMA application_id = 1234")
        conn.close()
    else:
        conn = apsw.Connection(str(path))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        with open(path, "r+b") as f:
            f.seek(4096 * 2)
            f.write(bytes(4096))
    assert doc(agentdb, state, "sessions", "list") == want
    assert doc(agentdb, state, "sessions", "list") == want  # and rebuilt


def test_an_unwritable_cache_answers_with_a_note(
    agentdb: Agentdb, state: demo.DemoState, tmp_path: Path
) -> None:
    want = doc(agentdb, state, "sessions", "list", "--no-index")
    home = tmp_path / "home"
    (home / "agentdb").mkdir(parents=True)
    (home / "agentdb" / "index.sqlite").mkdir()  # a directory where the index goes
    env = {"XDG_CACHE_HOME": str(home)}
    code, out, err = run(agentdb, state, "sessions", "list", "--json", env=env)
    assert code == 0 and json.loads(out) == want
    assert "index" in err and "reading every file" in err


@pytest.mark.slow
def test_a_busy_index_answers_by_scan_with_a_note(
    agentdb: Agentdb, state: demo.DemoState, tmp_path: Path
) -> None:
    """Another process holds the index's write lock: this one answers from the files."""
    want = doc(agentdb, state, "sessions", "list", "--no-index")
    home = tmp_path / "busyhome"
    env = {**os.environ, "XDG_CACHE_HOME": str(home)}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from agentdb.index import verdicts; c = verdicts.open_cache(); "
            "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(60)",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        args = ["--sessions-dir", str(state.sessions_dir), "sessions", "list", "--json"]
        p = run_cli(*args, env={"XDG_CACHE_HOME": str(home)}, timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == want
    assert "busy" in p.stderr and "answered from the files" in p.stderr


@pytest.mark.slow
def test_two_processes_building_at_once_agree(state: demo.DemoState, tmp_path: Path) -> None:
    """Two agentdb processes refresh a cold index at the same moment: both answer, the same."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "racehome")}
    argv = [
        sys.executable,
        "-m",
        "agentdb.cli.main",
        "--sessions-dir",
        str(state.sessions_dir),
        "sessions",
        "list",
        "--json",
    ]
    procs = [  # two at once: run_cli waits for its process, so these start here
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    docs = [json.loads(o) for o, _ in outs]
    assert docs[0] == docs[1]
    again = run_cli(*argv[3:], env={"XDG_CACHE_HOME": env["XDG_CACHE_HOME"]}, timeout=120)
    assert json.loads(again.stdout) == docs[0] and again.stderr.strip() == ""


def test_a_limit_past_the_largest_index_lists_every_row(
    agentdb: Agentdb, state: demo.DemoState
) -> None:
    """--limit larger than islice takes (past sys.maxsize) streams every row, as without it
    (it raised ValueError once the list streamed from the index)."""
    every = doc(agentdb, state, "sessions", "list")
    for limit in ("9223372036854775808", "9" * 40):
        assert doc(agentdb, state, "sessions", "list", "--limit", limit) == every
    assert (
        doc(agentdb, state, "sessions", "list", "--limit", "1")["sessions"] == every["sessions"][:1]
    )


def test_no_command_leaves_a_wal_beside_the_index(agentdb: Agentdb, state: demo.DemoState) -> None:
    """Every cross-session command (the first build, a warm answer, a prune's judge that
    records verdicts) ends with the index checkpointed: no -wal or -shm beside it."""
    gc.collect()  # an earlier test's unfinished listing (--limit) holds a connection open
    cache = verdicts.cache_path()
    wal, shm = Path(f"{cache}-wal"), Path(f"{cache}-shm")
    for args in (
        ("sessions", "list"),
        ("sessions", "list"),
        ("status",),
        ("report",),
        ("prune", "--dry-run", "--older-than", "0s"),
        ("check", "--all", "--quick"),
    ):
        code, _, err = run(agentdb, state, *args, "--json")
        assert code in (0, 1), err
        assert cache.exists()
        assert not wal.exists() and not shm.exists(), args
