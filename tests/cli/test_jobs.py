"""``--jobs`` on prune, plugins refs, migrate and backup, with real processes.

The same tree (healthy, damaged, foreign, revision-1, running, pinned, parent and child
sessions) gives the same JSON with -j1 and -j2; a worker killed with a real SIGKILL mid-file
is replaced, its file is done again and nothing partial is left; Ctrl-C reports what was done.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb.jobs import demo
from agentdb.schema.revisions import CURRENT_REVISION
from tests.cli.test_interrupts import _LOCKER, interrupt_after_progress
from tests.migrate_support import foreign_file
from tests.runner import Agentdb, run_cli
from tests.salvage import corpus
from tests.support import SRC, clone_session, make_session, wait_for

AGENTDB = [sys.executable, "-m", "agentdb.cli.main"]
FOREIGN = "01ARZ3NDEKZZZZZZZZZZZZZZZZ"  # another application's file, user_version 1
CLONES = 200  # with the others, over workers.POOL_THRESHOLD: the read-only scans fork too


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("AGENTDB_FAULT", "AGENTDB_PAUSE")}
    return base | {"PYTHONPATH": str(SRC)} | extra


def clone(src: Path, sessions_dir: Path, sid: str) -> None:
    clone_session(src, sessions_dir, sid)


def build_tree(root: Path, *, clones: int = CLONES, revision_1: int = 3) -> tuple[Path, Path]:
    """A sessions dir and a plugin cache with every kind of file the commands tell apart."""
    sessions, cache = root / "sessions", root / "plugins"
    sessions.mkdir(mode=0o700)
    (cache / "model" / "anthropic" / demo.MODEL_CACHED.version).mkdir(parents=True)
    _, src = make_session(sessions, turns=1, revision=2)  # the template of the clones
    for i in range(clones):
        clone(src, sessions, f"01ARZ3NDEK{i:016d}")
    src.unlink()
    for _ in range(revision_1):
        make_session(sessions, turns=2, revision=1)
    for _ in range(2):
        make_session(sessions, turns=1, model=demo.MODEL_CACHED)  # pinned
    make_session(sessions, turns=1, status="running")
    parent, _ = make_session(sessions, turns=1)
    make_session(sessions, turns=1, parent=parent, depth=1, status="running")  # keeps parent
    for _ in range(2):
        _, bad = make_session(sessions, turns=20)
        corpus.d_zeroed_page(bad)
    foreign_file(sessions, FOREIGN)
    return sessions, cache


def run(sessions: Path, cache: Path, *argv: str, **extra: str) -> tuple[int, Any, str]:
    r = run_cli(
        *("--sessions-dir", str(sessions), "--plugin-cache", str(cache), *argv),
        env={"PYTHONPATH": str(SRC)},
        drop=("AGENTDB_PAUSE",),
        fault=extra.get("AGENTDB_FAULT"),
        timeout=600,
    )
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout), r.stderr


def normal(doc: Any, *roots: Path) -> Any:
    """The document with wall times dropped and the tree's own paths named alike."""
    text = json.dumps(doc)
    for i, root in enumerate(roots):
        text = text.replace(str(root), f"<root{i}>")
    return _drop_times(json.loads(text))


def _drop_times(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _drop_times(x) for k, x in v.items() if k not in ("seconds", "wall_seconds")}
    if isinstance(v, list):
        return [_drop_times(x) for x in v]
    return v


def names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    build_tree(root)
    return root


def copies(tree: Path, tmp_path: Path) -> list[tuple[Path, Path, Path]]:
    """Two identical copies of the tree: (root, sessions, cache) each."""
    out = []
    for j in ("j1", "j2"):
        shutil.copytree(tree, tmp_path / j)
        out.append((tmp_path / j, tmp_path / j / "sessions", tmp_path / j / "plugins"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["prune", "--older-than", "0s", "--dry-run", "--json"],
        ["prune", "--older-than", "0s", "--include-pinned", "--dry-run", "--json"],
        ["plugins", "refs", "--json"],
        ["migrate", "--all", "--dry-run", "--json"],
        ["migrate", "--all", "--json"],
        ["backup", "--all", "--to", "{root}/backups", "--json"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_same_json_with_one_and_two_jobs(tree: Path, tmp_path: Path, argv: list[str]) -> None:
    docs, codes, listings = [], [], []
    for (root, sessions, cache), jobs in zip(copies(tree, tmp_path), ("1", "2"), strict=True):
        args = [a.replace("{root}", str(root)) for a in argv]
        code, doc, _ = run(sessions, cache, *args, "--jobs", jobs)
        docs.append(normal(doc, root))
        codes.append(code)
        listings.append((names(sessions), names(root / "backups") if "backup" in argv else []))
    assert docs[0] == docs[1]
    assert codes[0] == codes[1] == 1  # damaged and foreign files in every run
    assert listings[0] == listings[1]
    got = json.dumps(docs[0])
    if argv[0] == "migrate":
        outcomes = [s["outcome"] for s in docs[0]["sessions"]]
        assert outcomes.count("migrated") == 3 and outcomes.count("foreign") == 1
        assert outcomes.count("corrupt") == 2
    if argv[0] == "prune":
        for code in ("running", "pinned" if "--include-pinned" not in argv else "running"):
            assert f'"code": "{code}"' in got
        assert '"has_children"' in got and '"unreadable"' in got and '"foreign"' in got
    if argv[0] == "backup":
        assert docs[0]["summary"]["copied"] == CLONES + 8 and docs[0]["summary"]["corrupt"] == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["prune", "--older-than", "0s", "--dry-run"],
        ["plugins", "refs"],
        ["migrate", "--all"],
        ["backup", "--all", "--to", "B"],
    ],
)
def test_jobs_is_validated_like_checks(tmp_path: Path, agentdb: Agentdb, argv: list[str]) -> None:
    sessions = tmp_path / "s"
    sessions.mkdir()
    args = [a.replace("B", str(tmp_path / "b")) for a in argv]
    for bad in ("0", "-1", "x", "257"):
        code, _, err = agentdb("--sessions-dir", str(sessions), *args, "--jobs", bad)
        assert code == 2 and "--jobs" in err and "Traceback" not in err
    assert agentdb("--sessions-dir", str(sessions), *args, "-j", "256").code == 0


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _kill_workers_at(argv: list[str], point: str, gate: Path) -> tuple[int, Any, list[int]]:
    """Run agentdb paused at ``point`` in its workers; SIGKILL every worker, then let the
    replacements go on. Returns exit code, JSON and the killed pids."""
    gate.mkdir()
    p = subprocess.Popen(
        [*AGENTDB, *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(AGENTDB_PAUSE=f"{point}:{gate}"),
    )
    try:
        assert wait_for(lambda: (gate / "reached").exists(), timeout=120), "never paused"
        time.sleep(0.3)  # let the other worker get into its file too
        killed = _children(p.pid)
        assert killed, "no worker processes"
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        (gate / "go").touch()
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "Traceback" not in err, err
    return p.returncode, json.loads(out), killed


@pytest.mark.slow
def test_migrate_worker_killed_mid_file(tmp_path: Path) -> None:
    """SIGKILL to every worker while each holds a file (one paused after its backup, the other
    anywhere, maybe halfway through writing its backup): the files are done again in new
    workers, the report is the -j1 report, and no backup or sidecar is left."""
    root = tmp_path / "t"
    root.mkdir()
    sessions, cache = build_tree(root, clones=0, revision_1=5)
    twin = tmp_path / "twin"
    shutil.copytree(root, twin)
    _, expected, _ = run(twin / "sessions", twin / "plugins", "migrate", "--all", "-j1", "--json")
    before = names(sessions)
    argv = ["--sessions-dir", str(sessions), "migrate", "--all", "-j2", "--json"]
    code, doc, killed = _kill_workers_at(argv, "after_backup", tmp_path / "gate")
    assert code == 1  # damaged and foreign files
    assert normal(doc, root) == normal(expected, twin)
    assert [s["outcome"] for s in doc["sessions"]].count("migrated") == 5
    assert names(sessions) == before  # no *.agentdb-migrate-backup, -wal or -shm left
    assert all(not Path(f"/proc/{pid}").exists() for pid in killed)


@pytest.mark.slow
def test_backup_worker_killed_mid_copy(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    sessions, cache = build_tree(root, clones=4, revision_1=1)
    dest, twin_dest = tmp_path / "backups", tmp_path / "twin-backups"
    _, expected, _ = run(
        sessions, cache, "backup", "--all", "--to", str(twin_dest), "-j1", "--json"
    )
    argv = ["--sessions-dir", str(sessions), "backup", "--all", "--to", str(dest), "-j2", "--json"]
    code, doc, _ = _kill_workers_at(argv, "backup_after_copy", tmp_path / "gate")
    assert code == 1
    assert normal(doc, dest) == normal(expected, twin_dest)
    assert names(dest) == names(twin_dest)  # the killed workers' temp copies are gone


@pytest.mark.slow
def test_backup_worker_that_dies_twice_is_failed_and_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    sessions, cache = build_tree(root, clones=3, revision_1=0)
    dest = tmp_path / "backups"
    code, doc, _ = run(
        sessions,
        cache,
        *("backup", "--all", "--to", str(dest), "-j2", "--json"),
        AGENTDB_FAULT="backup_after_copy",
    )
    assert code == 1
    failed = [s for s in doc["sessions"] if s["outcome"] == "failed"]
    assert len(failed) == 3 + 5  # all but the foreign file: killed twice after the copy
    assert all("killed by SIGKILL" in s["message"] for s in failed)
    assert names(dest) == []  # no temp copy, no copy
    # the two damaged sessions are refused before any copy (backup judges the session first)
    assert {s["outcome"] for s in doc["sessions"]} == {"failed", "foreign", "corrupt"}
    assert [s["outcome"] for s in doc["sessions"]].count("corrupt") == 2


@pytest.mark.slow
def test_migrate_worker_that_dies_twice_then_a_rerun_finishes(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    sessions, cache = build_tree(root, clones=0, revision_1=3)
    before = names(sessions)
    code, doc, _ = run(
        sessions, cache, "migrate", "--all", "-j2", "--json", AGENTDB_FAULT="before_commit"
    )
    assert code == 1
    failed = [s for s in doc["sessions"] if s["outcome"] == "failed"]
    assert len(failed) == 3 and all("killed by SIGKILL" in s["message"] for s in failed)
    code, doc, _ = run(sessions, cache, "migrate", "--all", "-j2", "--json")
    assert [s["outcome"] for s in doc["sessions"]].count("migrated") == 3
    assert names(sessions) == before


def _revision(path: Path) -> int:
    with open(path, "rb") as f:
        return int.from_bytes(f.read(64)[60:64], "big")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["migrate", "backup"])
def test_ctrl_c_with_workers_reports_every_file_done(tmp_path: Path, command: str) -> None:
    """Ctrl-C with two workers: no new file starts, the files in hand are interrupted as a
    single-process run's file is; the report lists the files done, in id order; exit 130.
    Running again finishes and leaves nothing behind."""
    root = tmp_path / "t"
    root.mkdir()
    # A backup of a small file takes milliseconds: with 48 files two workers could finish them
    # all before the signal lands on an idle machine, so backup gets the clones as well.
    clones = 0 if command == "migrate" else CLONES
    sessions, cache = build_tree(root, clones=clones, revision_1=40)
    sessions_ids = sorted(p.name.removesuffix(".sqlite") for p in sessions.glob("*.sqlite"))
    old = {s for s in sessions_ids if _revision(sessions / f"{s}.sqlite") == 1} - {FOREIGN}
    dest = tmp_path / "backups"
    tail = ["migrate", "--all"] if command == "migrate" else ["backup", "--all", "--to", str(dest)]
    argv = ["--sessions-dir", str(sessions), *tail, "-j2", "--json"]
    code, out, err = interrupt_after_progress(argv, at_least=3)
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    doc = json.loads(out)
    assert doc["interrupted"] is True
    reported = [s["session_id"] for s in doc["sessions"]]
    assert 3 <= len(reported) < len(sessions_ids)
    assert reported == sorted(reported)
    if command == "migrate":
        now_at_two = {
            sid for sid in old if _revision(sessions / f"{sid}.sqlite") == CURRENT_REVISION
        }
        done = {s["session_id"] for s in doc["sessions"] if s["outcome"] == "migrated"}
        assert done <= now_at_two
        assert len(now_at_two - done) <= 2  # at most the one in hand in each worker
    else:
        copied = {p.name.removesuffix(".sqlite") for p in dest.glob("*.sqlite")}
        done = {s["session_id"] for s in doc["sessions"] if s["outcome"] == "copied"}
        assert done <= copied and len(copied - done) <= 2
        assert not [n for n in names(dest) if "tmp" in n]  # interrupted copies cleaned up
    code, doc2, _ = run(sessions, cache, *tail, "-j2", "--json")
    assert code == 1  # damaged and foreign
    assert not [n for n in names(sessions) if "agentdb" in n]
    if command == "migrate":
        assert all(_revision(sessions / f"{sid}.sqlite") == CURRENT_REVISION for sid in old)


@pytest.mark.slow
def test_ctrl_c_ends_a_long_wait_for_a_lock_in_a_worker(tmp_path: Path) -> None:
    """``migrate --wait 3600 -j2`` with a session whose writer holds its write lock: the other
    worker does every other file; Ctrl-C then interrupts the worker that waits, at once."""
    root = tmp_path / "t"
    root.mkdir()
    sessions, _ = build_tree(root, clones=0, revision_1=3)
    old = sorted(
        p for p in sessions.glob("*.sqlite") if _revision(p) == 1 and FOREIGN not in p.name
    )
    locked = old[0]
    conn = apsw.Connection(str(locked))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    holder = subprocess.Popen([sys.executable, "-c", _LOCKER, str(locked)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        argv = ["--sessions-dir", str(sessions), "migrate", "--all", "--wait", "3600", "-j2"]
        p = subprocess.Popen(
            [*AGENTDB, *argv, "--json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        try:
            assert wait_for(
                lambda: all(_revision(f) == CURRENT_REVISION for f in old[1:]), timeout=120
            )
            time.sleep(1.0)  # the rest are current: done at once
            start = time.monotonic()
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=120)
            took = time.monotonic() - start
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    finally:
        holder.kill()
        holder.wait()
    assert p.returncode == 130, err
    assert took < 20, f"Ctrl-C took {took:.1f}s to end the wait"
    doc = json.loads(out)
    outcomes = {s["session_id"]: s["outcome"] for s in doc["sessions"]}
    assert locked.name.removesuffix(".sqlite") not in outcomes and _revision(locked) == 1
    assert [outcomes[f.name.removesuffix(".sqlite")] for f in old[1:]] == ["migrated"] * 2
    assert len(outcomes) == len(list(sessions.glob("*.sqlite"))) - 1  # all but the locked one


@pytest.mark.slow
@pytest.mark.parametrize("command", ["prune", "plugins"])
def test_ctrl_c_while_workers_read(tmp_path: Path, command: str) -> None:
    """SIGINT while every worker is inside a file: prune stops before removing anything,
    plugins refs reports what it read, marked interrupted; exit 130, no worker left behind."""
    root = tmp_path / "t"
    root.mkdir()
    sessions, cache = build_tree(root, clones=CLONES, revision_1=0)
    before = names(sessions)
    gate = tmp_path / "gate"
    gate.mkdir()
    point = "prune_read_facts" if command == "prune" else "plugins_refs_read"
    # plugins refs answers from the session index by default; --no-index makes it read every
    # file in the workers, which is what this test interrupts.
    tail = (
        ["prune", "--older-than", "0s", "--yes"]
        if command == "prune"
        else ["plugins", "refs", "--no-index"]
    )
    tail += ["-j2", "--json"]
    p = subprocess.Popen(
        [*AGENTDB, "--sessions-dir", str(sessions), "--plugin-cache", str(cache), *tail],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(AGENTDB_PAUSE=f"{point}:{gate}"),
    )
    try:
        assert wait_for(lambda: (gate / "reached").exists(), timeout=120), "never paused"
        workers_seen = _children(p.pid)
        assert workers_seen
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert all(not Path(f"/proc/{pid}").exists() for pid in workers_seen)
    assert names(sessions) == before  # nothing removed
    if command == "plugins":
        doc = json.loads(out)
        assert doc["interrupted"] is True and doc["unreferenced"] == []
        assert doc["sessions_read"] < len(before)
    else:
        assert json.loads(err)["error"]["code"] == "interrupted"


@pytest.mark.slow
def test_workers_stop_when_the_command_is_killed(tmp_path: Path) -> None:
    """SIGKILL to ``migrate --wait 3600 -j2`` while a worker waits for a writer's lock: the
    worker is told (parent-death signal) and stops at once instead of waiting out the hour as
    an orphan; the session stays at its old revision."""
    root = tmp_path / "t"
    root.mkdir()
    sessions, _ = build_tree(root, clones=0, revision_1=2)
    old = sorted(
        p for p in sessions.glob("*.sqlite") if _revision(p) == 1 and FOREIGN not in p.name
    )
    locked = old[0]
    conn = apsw.Connection(str(locked))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    holder = subprocess.Popen([sys.executable, "-c", _LOCKER, str(locked)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        argv = ["--sessions-dir", str(sessions), "migrate", "--all", "--wait", "3600", "-j2"]
        p = subprocess.Popen(
            [*AGENTDB, *argv, "--json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env(),
        )
        kids: list[int] = []
        try:
            assert wait_for(lambda: _revision(old[1]) == CURRENT_REVISION, timeout=120)
            time.sleep(1.0)  # the rest are current: only the waiting worker is busy now
            kids = _children(p.pid)
            assert kids
            p.kill()
            p.wait()
            assert wait_for(lambda: not any(_running(k) for k in kids), 20), (
                "a worker outlived its killed parent"
            )
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            for k in kids:
                if _running(k):
                    os.kill(k, signal.SIGKILL)
    finally:
        holder.kill()
        holder.wait()
    assert _revision(locked) == 1


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan that exited stays a zombie until pid 1 reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
