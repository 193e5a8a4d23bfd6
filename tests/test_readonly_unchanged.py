"""Read-only commands and every --dry-run change nothing: not a byte, a mode, an mtime, a name.

The sessions directory holds every state a session's sidecars can be in — no sidecars; a
``-wal`` and its ``-shm`` left by a killed writer; a ``-wal`` whose ``-shm`` is gone (SQLite
would create a ``-shm`` to read it); a stale ``-shm`` with no ``-wal`` (SQLite would create a
``-wal``) — plus a parent and child, an old revision, a damaged file and a pinned session.
Every command of the click tree is either run here (each read-only command, each ``--dry-run``)
or named as one that changes sessions, so a new command cannot slip past this test.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import click
import pytest

from agentdb import db
from agentdb.cli.main import cli
from agentdb.jobs import demo
from tests.runner import Agentdb
from tests.support import WriterProcess, make_session

# Commands that change sessions when asked to (their --dry-run, if any, is run below).
MUTATING = {"recover", "migrate", "prune", "restore", "sessions end", "demo"}


def leaf_commands() -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}

    def walk(cmd: click.Command, path: list[str], ctx: click.Context) -> None:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name))
        else:
            out[" ".join(path)] = cmd

    walk(cli, [], click.Context(cli, info_name="agentdb"))
    return out


def tree_listing(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every entry under ``root`` (directories included): (size, mtime_ns, mode, inode)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in ["", *dirnames, *filenames]:
            p = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(p)
            size = 0 if stat.S_ISDIR(st.st_mode) else st.st_size
            out[os.path.relpath(p, root)] = (size, st.st_mtime_ns, st.st_mode, st.st_ino)
    return out


def _mode_600(d: Path) -> None:
    for p in d.iterdir():
        os.chmod(p, 0o600)


def killed_writer(sessions_dir: Path, sid: str, commits: int) -> list[int]:
    """A kernel appending to ``sid`` killed with SIGKILL after ``commits`` events: its -wal
    (uncheckpointed commits) and -shm stay. Returns the sequences it had committed."""
    w = WriterProcess(sessions_dir, sid)
    w.wait_for_commits(commits)
    seqs, err = w.stop()
    assert "Traceback" not in err, err
    return seqs


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("ro")
    sessions = root / "state" / "agent" / "sessions"
    sessions.mkdir(parents=True)
    cache = root / "cache" / "plugins"
    (cache / "model" / "anthropic" / "1.4.0").mkdir(parents=True)
    plain, _ = make_session(sessions)
    parent, _ = make_session(sessions, model=demo.MODEL_CACHED)
    child, _ = make_session(sessions, parent=parent, depth=1)
    old, _ = make_session(sessions, revision=1)
    damaged, dpath = make_session(sessions, turns=20)
    demo.damage_page(dpath, table="events", nth_leaf=1)
    running, _ = make_session(sessions, status=None)
    # both sidecars (a killed kernel)
    both, _ = make_session(sessions, status=None)
    both_seqs = killed_writer(sessions, both, 30)
    # a -wal whose -shm is gone
    wal_only, _ = make_session(sessions, status=None)
    wal_only_seqs = killed_writer(sessions, wal_only, 30)
    shm = sessions / f"{wal_only}.sqlite-shm"
    stale_shm = shm.read_bytes()
    shm.unlink()
    # a stale -shm and no -wal
    shm_only, _ = make_session(sessions)
    (sessions / f"{shm_only}.sqlite-shm").write_bytes(stale_shm)
    # a hot rollback journal (a writer killed mid-transaction in DELETE mode)
    from tests.fuzz.test_hot_journal import hot_journal_session

    hot, _, _ = hot_journal_session(sessions, "UPDATE events SET payload = randomblob(2000)")
    _mode_600(sessions)
    for sid in (both, wal_only):
        assert (sessions / f"{sid}.sqlite-wal").stat().st_size > 0
    return {
        "root": root,
        "sessions": sessions,
        "cache": cache,
        "ids": {
            "plain": plain,
            "parent": parent,
            "child": child,
            "old": old,
            "damaged": damaged,
            "running": running,
            "both": both,
            "wal_only": wal_only,
            "shm_only": shm_only,
            "hot": hot,
        },
        "committed": {both: both_seqs, wal_only: wal_only_seqs},
    }


def runs(state: dict[str, object], elsewhere: Path) -> list[list[str]]:
    ids: dict[str, str] = state["ids"]  # type: ignore[assignment]
    every = list(ids.values())
    out: list[list[str]] = [
        ["check"],
        ["check", "--all", "--quick", "--json"],
        ["check", *every, "--jobs", "2"],
        ["sessions", "list", "--json"],
        ["sessions", "list"],
        ["sessions", "tree"],
        ["sessions", "tree", ids["parent"], "--json"],
        ["plugins", "refs", "--json"],
        ["plugins", "users", "anthropic", "--json"],
        ["sessions", "costs", "--json"],
        ["sessions", "list", "--no-index", "--json"],
        ["check", "--changed", "--json"],
        ["prune", "--older-than", "0s", "--dry-run", "--json"],
        ["prune", *every, "--include-damaged", "--with-descendants", "--dry-run"],
        ["prune", "--older-than", "0s", "--json"],  # no terminal, no --yes: nothing removed
        ["migrate", "--all", "--dry-run", "--json"],
        ["recover", "--all", "--dry-run", "--json"],
        ["backup", "--all", "--to", str(elsewhere / "backups"), "--json"],
        ["completion", "bash"],
        ["prune", "--leftovers", "--dry-run", "--json"],
        ["prune", "--leftovers", "--json"],  # no terminal, no --yes: nothing removed
    ]
    for sid in every:
        out += [
            ["sessions", "show", sid, "--json"],
            ["events", sid, "--json"],
            ["events", sid, "--kind", "message", "--after", "2"],
            ["preflight", sid, "--json"],
        ]
    commands = leaf_commands()
    if "restore" in commands:
        out.append(["restore", "--all", "--from", str(elsewhere / "backups"), "--dry-run"])
    if "sessions end" in commands:
        out.append(["sessions", "end", *every, "--dry-run", "--json"])
    if "status" in commands:
        out.append(["status", "--json"])
    if "report" in commands:
        out.append(["report", "--html", str(elsewhere / "report.html")])
    return out


def test_every_command_is_run_here_or_changes_sessions(tmp_path: Path) -> None:
    """A new command must be added to ``runs`` (read-only) or to MUTATING; every command that
    has --dry-run is run with it."""
    state = {"ids": {"parent": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}}
    ran = {
        " ".join(a[:2]) if a[0] in ("sessions", "plugins") else a[0] for a in runs(state, tmp_path)
    }
    dry = {
        " ".join(a[:2]) if a[0] in ("sessions", "plugins") else a[0]
        for a in runs(state, tmp_path)
        if "--dry-run" in a
    }
    commands = leaf_commands()
    missing = set(commands) - ran - MUTATING
    assert not missing, f"add these commands to runs() or to MUTATING: {sorted(missing)}"
    for name, cmd in commands.items():
        if any("--dry-run" in getattr(p, "opts", []) for p in cmd.params):
            assert name in dry, f"run `{name} --dry-run` in runs()"


@pytest.mark.slow
def test_read_only_commands_and_dry_runs_change_nothing(
    state: dict[str, object], tmp_path: Path, agentdb: Agentdb
) -> None:
    root: Path = state["root"]  # type: ignore[assignment]
    sessions: Path = state["sessions"]  # type: ignore[assignment]
    g = ["--sessions-dir", str(sessions), "--plugin-cache", str(state["cache"])]
    before = tree_listing(root)
    names = sorted(os.listdir(sessions))
    ids: dict[str, str] = state["ids"]  # type: ignore[assignment]
    assert f"{ids['wal_only']}.sqlite-shm" not in names
    assert f"{ids['shm_only']}.sqlite-wal" not in names
    for args in runs(state, tmp_path):
        code, _, err = agentdb(*g, *args)
        assert code in (0, 1), (args, code, err)
        assert "Traceback" not in err, (args, err)
        assert tree_listing(root) == before, (args, sorted(os.listdir(sessions)))


@pytest.mark.slow
def test_the_answer_is_the_committed_state(state: dict[str, object], agentdb: Agentdb) -> None:
    """Every committed event is read, whatever the sidecars: never immutable beside a -wal
    (immutable ignores the WAL)."""
    sessions: Path = state["sessions"]  # type: ignore[assignment]
    committed: dict[str, list[int]] = state["committed"]  # type: ignore[assignment]
    g = ["--sessions-dir", str(sessions)]
    for sid, seqs in committed.items():
        code, out, _ = agentdb(*g, "events", sid, "--json")
        assert code == 0
        got = {json.loads(line)["sequence"] for line in out.splitlines()}
        assert set(seqs) <= got and len(seqs) >= 30
        ran = agentdb(*g, "check", sid, "--json")
        assert ran.code == 0
        doc = ran.json()
        assert doc["sessions"][0]["verdict"] == "ok", doc


@pytest.mark.slow
@pytest.mark.parametrize("case", ["wal_only", "shm_only", "both", "neither"])
def test_open_readonly_in_each_sidecar_state(tmp_path: Path, case: str) -> None:
    sessions = tmp_path / "s"
    sessions.mkdir()
    sid, path = make_session(sessions, status=None)
    if case in ("wal_only", "both"):
        seqs = killed_writer(sessions, sid, 25)
        least, most = max(seqs), max(seqs) + 1  # one more may commit before it prints
    else:
        least = most = int(
            db.scalar(db.open_private(path, readonly=True), "SELECT max(sequence) FROM events")
        )
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if case == "wal_only":
        shm.unlink()
    if case == "shm_only":
        shm.write_bytes(b"\0" * 32768)
        os.chmod(shm, 0o600)
    before = tree_listing(sessions)
    conn = db.open_readonly(path)
    try:
        assert conn.how == {"wal_only": "copy", "both": "wal"}.get(case, "immutable")
        n = int(db.scalar(conn, "SELECT max(sequence) FROM events"))
        assert tree_listing(sessions) == before  # not even while it is open
    finally:
        conn.close()
    assert tree_listing(sessions) == before
    assert least <= n <= most
    assert wal.exists() == (case in ("wal_only", "both"))
    assert shm.exists() == (case in ("shm_only", "both"))


@pytest.mark.slow
def test_a_private_copy_is_removed_on_close_and_a_changing_wal_is_retried(
    tmp_path: Path,
) -> None:
    sessions = tmp_path / "s"
    sessions.mkdir()
    sid, path = make_session(sessions, status=None)
    killed_writer(sessions, sid, 5)
    Path(f"{path}-shm").unlink()
    work = Path(os.environ["XDG_CACHE_HOME"]) / "agentdb" / "tmp"
    conn = db.open_readonly(path)
    assert conn.how == "copy"
    held = [p for p in work.iterdir() if p.name.startswith("agentdb-read-")]
    assert len(held) == 1 and (held[0] / path.name).exists()
    conn.close()
    assert not [p for p in work.iterdir() if p.name.startswith("agentdb-read-")]
    # Stats taken before the WAL changed: the copy notices, judges the file again, and reads it.
    stale = db.file_stats(path)
    with open(f"{path}-wal", "ab") as f:
        f.write(b"\0" * 10)  # torn bytes past the last frame: SQLite ignores them
    conn = db.open_readonly(path, stats=stale)
    try:
        assert conn.how == "copy"
        assert db.scalar(conn, "SELECT count(*) FROM session_meta") == 1
    finally:
        conn.close()
    shutil.rmtree(sessions)


@pytest.mark.slow
def test_a_live_writer_is_never_blocked(tmp_path: Path) -> None:
    """Reads through the writer's own -shm, read-only: the writer keeps committing meanwhile,
    and what is read is a committed state (never a partial one)."""
    sessions = tmp_path / "s"
    sessions.mkdir()
    sid, path = make_session(sessions, status=None)
    w = WriterProcess(sessions, sid)
    try:
        w.wait_for_commits(5)
        for _ in range(20):
            conn = db.open_readonly(path)
            try:
                assert conn.how == "wal"
                conn.execute("BEGIN")
                n = db.scalar(conn, "SELECT count(*) FROM events WHERE producer_name = 'shell'")
                w.wait_for_commits(2)  # the writer commits while this read transaction is open
                assert (
                    db.scalar(conn, "SELECT count(*) FROM events WHERE producer_name = 'shell'")
                    == n
                )
                conn.execute("COMMIT")
            finally:
                conn.close()
    finally:
        seqs, err = w.stop()
    assert "Traceback" not in err and "Busy" not in err, err
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # gap-free: no emit failed


@pytest.mark.slow
def test_salvage_reads_its_own_private_copy_in_place(tmp_path: Path) -> None:
    """``private=True`` (salvage's copies, already in a private directory) is not copied again."""
    sessions = tmp_path / "s"
    sessions.mkdir()
    sid, path = make_session(sessions, status=None)
    seqs = killed_writer(sessions, sid, 5)
    Path(f"{path}-shm").unlink()
    conn = db.open_readonly(path, private=True)
    try:
        assert conn.how == "wal"
        assert int(db.scalar(conn, "SELECT max(sequence) FROM events")) >= max(seqs)
    finally:
        conn.close()


@pytest.mark.slow
def test_a_hot_journal_is_read_rolled_back_and_left_alone(tmp_path: Path, agentdb: Agentdb) -> None:
    """A writer killed mid-transaction in rollback-journal mode: immutable would read its
    uncommitted pages; every read-only open reads the committed state (a private copy, rolled
    back) and the file, its journal and the directory stay as they were."""
    from tests.fuzz.test_hot_journal import hot_journal_session

    sessions = tmp_path / "s"
    sessions.mkdir()
    sid, path, committed = hot_journal_session(sessions, "DELETE FROM events WHERE sequence > 3")
    before = tree_listing(sessions)
    conn = db.open_readonly(path)
    try:
        assert conn.how == "copy"
        n = int(db.scalar(conn, "SELECT count(*) FROM events"))
    finally:
        conn.close()
    assert n == len(committed["events"]) > 3
    assert agentdb("--sessions-dir", str(sessions), "events", sid, "--json").code == 0
    assert tree_listing(sessions) == before


@pytest.mark.slow
def test_an_empty_file_beside_a_wal_and_shm_keeps_its_wal(tmp_path: Path, agentdb: Agentdb) -> None:
    """The file lost its bytes (0 bytes) while a killed writer's -wal and -shm stay. SQLite
    deletes the -wal of a database of 0 pages when it opens it, read-only or not, and the
    read-only open used to open such a file in place (a -shm beside it): the first `check`
    (or events, show, backup...) deleted the -wal, and every commit in it, which `recover`
    could have salvaged."""
    sessions = tmp_path / "state" / "agent" / "sessions"
    sessions.mkdir(parents=True)
    sid, path = make_session(sessions, status=None)
    killed_writer(sessions, sid, 25)
    assert Path(f"{path}-shm").exists() and Path(f"{path}-wal").stat().st_size > 0
    os.truncate(path, 0)
    before = tree_listing(sessions)
    g = ["--sessions-dir", str(sessions)]
    for argv in (
        ["check", sid, "--json"],
        ["check", sid, "--quick", "--json"],
        ["events", sid, "--json"],
        ["sessions", "show", sid, "--json"],
        ["sessions", "list", "--json"],
        ["recover", sid, "--dry-run", "--json"],
        ["backup", sid, "--to", str(tmp_path / "b"), "--json"],
        ["prune", sid, "--dry-run", "--json"],
        ["migrate", sid, "--dry-run", "--json"],
        ["status", "--json"],
    ):
        code, _, err = agentdb(*g, *argv)
        assert code in (0, 1), err
        assert tree_listing(sessions) == before, argv
