"""Acceptance tests of /work/shared/CONTRACT.md against the real CLI, one test per point.

Real files, real ``agentdb`` processes (exit codes and the stdout/stderr split matter).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentdb.jobs import demo
from agentdb.schema import enums
from tests.runner import run_cli, state_options
from tests.support import GOOD_ID, held_open, hostile_extras, make_session, tree_snapshot

BAD_IDS = ["../x", "*", GOOD_ID.lower(), GOOD_ID + ".sqlite", "", "8" + GOOD_ID[1:], "01KRJ2J16Z"]


def read_only_commands(state: demo.DemoState) -> list[list[str]]:
    ids = [s.session_id for s in state.sessions]
    cmds = [
        ["check"],
        ["check", "--quick"],
        ["check", "--json"],
        ["sessions", "list"],
        ["sessions", "list", "--json"],
        ["sessions", "tree"],
        ["sessions", "tree", "--json"],
        ["plugins", "refs"],
        ["plugins", "refs", "--json"],
        ["prune", "--older-than", "0s", "--dry-run", "--json"],
        ["prune", *ids, "--dry-run", "--include-damaged"],
        ["migrate", "--all", "--dry-run", "--json"],
        ["recover", "--all", "--dry-run", "--json"],
    ]
    for sid in ids:
        cmds += [
            ["sessions", "show", sid, "--json"],
            ["sessions", "tree", sid],
            ["events", sid, "--json"],
            ["preflight", sid, "--json"],
        ]
    return cmds


@pytest.mark.slow
def test_xdg_defaults_when_unset(tmp_path: Path) -> None:
    """XDG_STATE_HOME / XDG_CACHE_HOME unset: ~/.local/state/agent/sessions, ~/.cache/agent/plugins,
    and the recovery log at ~/.local/state/agent/recovery.log."""
    home = tmp_path / "home"
    sessions = home / ".local" / "state" / "agent" / "sessions"
    cache = home / ".cache" / "agent" / "plugins"
    state = demo.build(tmp_path / "d")
    sessions.parent.mkdir(parents=True)
    state.sessions_dir.rename(sessions)
    cache.parent.mkdir(parents=True)
    state.plugin_cache.rename(cache)
    env = {"HOME": str(home)}
    drop = ("XDG_STATE_HOME", "XDG_CACHE_HOME")
    r = run_cli("check", "--json", env=env, drop=drop)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {s["session_id"] for s in doc["sessions"]} == {s.session_id for s in state.sessions}
    assert all(Path(s["path"]).parent == sessions for s in doc["sessions"])
    pinned = state.by_role("pinned").session_id
    r = run_cli("preflight", pinned, "--json", env=env, drop=drop)
    assert Path(json.loads(r.stdout)["plugin_cache"]) == cache
    damaged = state.by_role("damaged").session_id
    r = run_cli("recover", damaged, env=env, drop=drop)
    assert r.returncode == 0, r.stderr
    assert (home / ".local" / "state" / "agent" / "recovery.log").is_file()
    # Relative XDG values are invalid (XDG spec) and ignored.
    r = run_cli("check", "--json", env={**env, "XDG_STATE_HOME": "rel/state"})
    assert {s["session_id"] for s in json.loads(r.stdout)["sessions"]} == {
        s.session_id for s in state.sessions
    }


@pytest.mark.slow
def test_xdg_variables_and_overrides(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    env = {
        "XDG_STATE_HOME": str(tmp_path / "d" / "state"),
        "XDG_CACHE_HOME": str(tmp_path / "d" / "cache"),
    }
    pinned = state.by_role("pinned").session_id
    r = run_cli("preflight", pinned, "--json", env=env)
    doc = json.loads(r.stdout)
    assert doc["plugin_cache"] == str(state.plugin_cache)
    states = {(p["category"], p["name"], p["version"]): p["state"] for p in doc["producers"]}
    assert states[("model", "anthropic", "1.4.0")] == "cached"
    # --plugin-cache overrides: an empty cache lacks everything.
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    r = run_cli("--plugin-cache", str(empty), "preflight", pinned, "--json", env=env)
    assert r.returncode == 1 and json.loads(r.stdout)["plugin_cache"] == str(empty)
    # --sessions-dir overrides XDG_STATE_HOME.
    other = tmp_path / "other" / "sessions"
    other.mkdir(parents=True)
    sid, _ = make_session(other)
    r = run_cli("--sessions-dir", str(other), "check", "--json", env=env)
    assert [s["session_id"] for s in json.loads(r.stdout)["sessions"]] == [sid]


# Runs main() itself, in a child interpreter, because the audit hook must be installed before
# agentdb is imported; run_cli (``python -m agentdb.cli.main``) has no place to install it.
AUDIT_RUNNER = textwrap.dedent(
    """
    import json, os, sys
    log = []
    def hook(event, args):
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path, mode, flags = args
            writing = (mode and any(c in mode for c in "wax+")) or (
                flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if writing:
                log.append(os.fsdecode(path))
        elif event in ("os.mkdir", "os.rename", "os.link", "os.symlink", "os.replace"):
            log.append(os.fsdecode(args[0]))
            if event != "os.mkdir":
                log.append(os.fsdecode(args[1]))
    sys.addaudithook(hook)
    from agentdb.cli.main import main
    rc = main(sys.argv[2:])
    with open(sys.argv[1], "w") as f:
        json.dump(log, f)
    sys.exit(rc)
    """
)


@pytest.mark.slow
def test_writes_only_where_the_contract_says(tmp_path: Path) -> None:
    """Every file or directory any command creates is a session-dir file, the recovery log, a
    backup under --to, or agentdb's own data under $XDG_CACHE_HOME/agentdb/ (never $TMPDIR)."""
    state = demo.build(tmp_path / "d")
    cache_home = tmp_path / "xdg-cache"
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    runner = tmp_path / "runner.py"
    runner.write_text(AUDIT_RUNNER)
    backups = tmp_path / "backups"
    allowed = (
        str(state.sessions_dir) + os.sep,
        str(state.sessions_dir.parent / "recovery.log"),
        str(backups),
        str(cache_home / "agentdb"),
    )
    cmds = [
        ["check"],
        ["recover", "--all", "--dry-run"],
        ["recover", "--all"],
        ["migrate", "--all", "--keep-backups"],
        ["backup", "--all", "--to", str(backups)],
        ["backup", "--verify", str(backups)],
        ["prune", "--older-than", "0s", "--yes"],
    ]
    for cmd in cmds:
        log = tmp_path / "audit.json"
        r = subprocess.run(
            [sys.executable, str(runner), str(log), *state_options(state), *cmd],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_CACHE_HOME": str(cache_home), "TMPDIR": str(tmpdir)},
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        assert r.returncode in (0, 1), (cmd, r.stderr)
        written = [os.path.abspath(p) for p in json.loads(log.read_text()) if p != str(log)]
        # (creating $XDG_CACHE_HOME itself, on the way to agentdb/, is fine)
        outside = [p for p in written if not p.startswith(allowed) and p != str(cache_home)]
        assert not outside, (cmd, outside)
    assert not list(tmpdir.iterdir())


# --- Ids --------------------------------------------------------------------------------------

ID_COMMANDS = [
    ["check"],
    ["recover"],
    ["recover", "--dry-run"],
    ["migrate"],
    ["migrate", "--dry-run"],
    ["prune", "--yes", "--include-damaged"],
    ["prune", "--dry-run"],
    ["backup", "--to", "{backup}"],
    ["sessions", "show"],
    ["sessions", "tree"],
    ["events"],
    ["preflight"],
]


@pytest.mark.slow
@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_ids_rejected_before_any_file_is_touched(tmp_path: Path, bad: str) -> None:
    state = demo.build(tmp_path / "d")
    # A file whose name the bad id would reach if it were used as a path.
    (state.sessions_dir / (bad.replace("/", "_") + ".sqlite")).write_bytes(b"bait")
    before = tree_snapshot(tmp_path)
    backup = tmp_path / "backup-dir"
    for cmd in ID_COMMANDS:
        argv = [a.replace("{backup}", str(backup)) for a in cmd]
        r = run_cli(*state_options(state), *argv, bad)
        assert r.returncode == 2, (argv, bad, r.stderr)
        assert "not a session id" in r.stderr, (argv, r.stderr)
        assert r.stdout == ""
        # A valid id next to the bad one does not get the command started either.
        r = run_cli(*state_options(state), *argv, state.sessions[0].session_id, bad)
        if argv[:2] not in (["sessions", "show"], ["sessions", "tree"]) and argv[0] not in (
            "events",
            "preflight",
        ):
            assert r.returncode == 2, (argv, r.stderr)
        assert tree_snapshot(tmp_path) == before, argv
    assert not backup.exists()


@pytest.mark.slow
def test_other_files_never_touched_by_any_command(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    extras = hostile_extras(state.sessions_dir, state.sessions[0].session_id)
    opts = state_options(state)

    def others() -> dict[str, tuple[int, str | None]]:
        snap = tree_snapshot(state.sessions_dir)
        return {
            k: v
            for k, v in snap.items()
            if not any(k.startswith(sid) for sid in [s.session_id for s in state.sessions])
            and not any(k.startswith(sid) for sid in extras)
        }

    before = others()
    assert "notes.txt" in before and "random/inside.sqlite" in before
    all_ids = [s.session_id for s in state.sessions] + list(extras)
    for cmd in (
        ["check"],
        ["sessions", "list"],
        ["sessions", "tree"],
        ["plugins", "refs"],
        ["recover", "--all"],
        ["migrate", "--all", "--keep-backups"],
        ["backup", "--all", "--to", str(tmp_path / "b")],
        ["prune", "--older-than", "0s", "--yes", "--include-damaged"],
        ["prune", *all_ids, "--yes", "--include-damaged"],
        ["check"],
    ):
        r = run_cli(*opts, *cmd)
        assert r.returncode in (0, 1), (cmd, r.stderr)
        assert others() == before, cmd


@pytest.mark.slow
def test_created_files_and_dirs_private_under_umask_000(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    opts = state_options(state)
    log = state.sessions_dir.parent / "recovery.log"
    assert not log.exists()
    damaged = state.by_role("damaged")
    old = state.by_role("old-revision")
    r = run_cli(*opts, "recover", damaged.session_id, umask=0)
    assert r.returncode == 0, r.stderr
    r = run_cli(*opts, "migrate", old.session_id, "--keep-backups", umask=0)
    assert r.returncode == 0, r.stderr
    backups = tmp_path / "new" / "nested" / "backups"
    r = run_cli(*opts, "backup", "--all", "--to", str(backups), umask=0)
    assert r.returncode == 0, r.stderr
    # A recovery log in a directory that does not exist yet: created 0700.
    moved = tmp_path / "fresh" / "sessions"
    moved.parent.mkdir()
    os.chmod(moved.parent, 0o755)
    moved.mkdir()
    sid, p = make_session(moved, turns=30)
    demo.damage_page(p, table="events", nth_leaf=1)
    (moved.parent).chmod(0o755)
    r = run_cli("--sessions-dir", str(moved), "recover", sid, umask=0)
    assert r.returncode == 0, r.stderr

    files = [
        log,
        damaged.path,
        Path(str(damaged.path) + ".corrupt"),
        moved.parent / "recovery.log",
        *backups.iterdir(),
        *state.sessions_dir.glob("*.bak"),
    ]
    assert any(f.name.endswith(".bak") for f in files)
    for f in files:
        assert stat.S_IMODE(os.lstat(f).st_mode) == 0o600, f
    for d in (backups, backups.parent, backups.parent.parent):
        assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700, d


@pytest.mark.slow
def test_json_stdout_is_one_document(demo_state: demo.DemoState) -> None:
    """With --json, stdout parses as one JSON document whatever the outcome; words go to stderr."""
    for cmd in read_only_commands(demo_state):
        if "--json" not in cmd:
            continue
        r = run_cli(*state_options(demo_state), *cmd)
        assert r.returncode in (0, 1), (cmd, r.stderr)
        if cmd[0] == "events":
            if r.returncode == 0:
                [json.loads(line) for line in r.stdout.splitlines()]
            continue
        if cmd[0] in ("sessions", "preflight") and r.returncode == 1 and not r.stdout:
            assert len(r.stderr.strip().splitlines()) == 1  # an error: one line
            continue
        json.loads(r.stdout)


@pytest.mark.slow
def test_missing_sessions_dir_is_a_usage_error_everywhere(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    for sdir in (missing, not_dir):
        for cmd in (
            ["check"],
            ["recover", "--all"],
            ["migrate", "--all"],
            ["prune", "--older-than", "0s"],
            ["backup", "--all", "--to", str(tmp_path / "b")],
            ["sessions", "list"],
            ["sessions", "show", GOOD_ID],
            ["sessions", "tree"],
            ["events", GOOD_ID],
            ["preflight", GOOD_ID],
            ["plugins", "refs"],
        ):
            r = run_cli("--sessions-dir", str(sdir), *cmd)
            assert r.returncode == 2, (sdir, cmd, r.stderr)
            assert str(sdir) in r.stderr
            if sdir == missing:
                assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not missing.exists() and not (tmp_path / "b").exists()


@pytest.mark.slow
def test_exit_codes(tmp_path: Path, sessions_dir: Path) -> None:
    sid, _ = make_session(sessions_dir)
    opts = ["--sessions-dir", str(sessions_dir), "--plugin-cache", str(tmp_path / "pc")]
    assert run_cli(*opts, "check").returncode == 0
    assert run_cli(*opts, "recover", sid).returncode == 0
    assert run_cli(*opts, "migrate", sid).returncode == 0
    assert run_cli(*opts, "events", sid).returncode == 0
    assert run_cli(*opts, "check", "--bogus").returncode == 2
    assert run_cli(*opts, "check", "--jobs", "0").returncode == 2
    assert run_cli(*opts, "recover").returncode == 2  # neither ids nor --all
    assert run_cli(*opts, "events", sid, "--kind", "NOPE").returncode == 2
    assert run_cli(*opts, "check", GOOD_ID).returncode == 1  # no such session
    assert run_cli(*opts, "preflight", sid).returncode == 1  # producers missing


@pytest.mark.slow
def test_read_only_commands_change_nothing(demo_state: demo.DemoState) -> None:
    root = demo_state.root
    before = tree_snapshot(root)
    for cmd in read_only_commands(demo_state):
        run_cli(*state_options(demo_state), *cmd)
        assert tree_snapshot(root) == before, cmd
    bdir = root.parent / "verify-me"
    r = run_cli(*state_options(demo_state), "backup", "--all", "--to", str(bdir))
    assert r.returncode == 1  # the damaged one is not copied
    b_before = tree_snapshot(bdir)
    run_cli("backup", "--verify", str(bdir), "--json")
    assert tree_snapshot(bdir) == b_before
    assert tree_snapshot(root) == before


def test_enums_are_the_specs() -> None:
    assert len(enums.KINDS) == 10 and "KIND_UNSPECIFIED" not in enums.KINDS
    assert len(enums.STATUSES) == 7
    assert tuple(enums.DECISIONS) == ("allow", "ask", "deny")
    assert set(enums.PRODUCER_CATEGORIES) == {*enums.PLUGIN_CATEGORIES, "kernel"}
    assert len(enums.PLUGIN_CATEGORIES) == 7


@pytest.mark.slow
def test_error_messages_are_one_line_naming_file_problem_fix(
    tmp_path: Path, sessions_dir: Path
) -> None:
    import apsw

    opts = ["--sessions-dir", str(sessions_dir)]
    cases: dict[str, Any] = {}
    sid, p = make_session(sessions_dir)
    os.chmod(p, 0o666)
    cases["insecure"] = (sid, p, "chmod")
    sid, p = make_session(sessions_dir)
    c = apsw.Connection(str(p))
    c.execute("PRAGMA application_id = 12345")
    c.close()
    cases["foreign"] = (sid, p, "move it")
    sid, p = make_session(sessions_dir)
    c = apsw.Connection(str(p))
    c.execute("PRAGMA user_version = 99")
    c.close()
    cases["too_new"] = (sid, p, "upgrade")
    sid, p = make_session(sessions_dir)
    target = sessions_dir / "target"
    p.rename(target)
    p.symlink_to(target.name)
    cases["symlink"] = (sid, p, "replace")
    sid, p = make_session(sessions_dir)
    p.write_bytes(b"garbage " * 512)
    cases["unreadable"] = (sid, p, "agentdb check")
    for what, (sid, path, fix) in cases.items():
        for cmd in (["events", sid], ["sessions", "show", sid], ["preflight", sid]):
            r = run_cli(*opts, *cmd)
            assert r.returncode == 1, (what, cmd)
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1, (what, cmd, r.stderr)
            assert str(path) in lines[0] and fix in lines[0], (what, lines)
    # recover names the session file, never a temporary copy
    sid, p = make_session(sessions_dir)
    c = apsw.Connection(str(p))
    c.execute("CREATE VIEW v AS SELECT 1")
    c.close()
    r = run_cli(*opts, "recover", sid)
    assert r.returncode == 1
    assert str(p) in r.stderr and "agentdb-recover-" not in r.stderr, r.stderr
    # a live session: skipped, named
    sid, p = make_session(sessions_dir, turns=30)
    with held_open(p):
        r = run_cli(*opts, "recover", sid)
        assert r.returncode == 1 and str(p) in r.stderr and "skipped_live" in r.stderr, r.stderr


@pytest.mark.slow
def test_wal_without_shm_gets_only_sqlites_shm(tmp_path: Path, sessions_dir: Path) -> None:
    """The one documented change a reader makes (docs/check.md): a WAL left without its -shm
    gets SQLite's rebuildable -shm; the database and WAL bytes and modes stay as they were."""
    import shutil

    from agentdb.store import SessionWriter

    live_dir = tmp_path / "live"
    live_dir.mkdir()
    w = SessionWriter.create(live_dir, profile="p")
    demo._turns(w, demo.MODEL_OLD, 3, seed=1)
    for suffix in ("", "-wal"):  # what a kill -9 plus a lost -shm leaves
        shutil.copy(f"{w.path}{suffix}", sessions_dir / f"{w.path.name}{suffix}")
    w.close()
    for p in sessions_dir.iterdir():
        p.chmod(0o600)
    before = tree_snapshot(sessions_dir)
    opts = ["--sessions-dir", str(sessions_dir), "--plugin-cache", str(tmp_path / "pc")]
    for cmd in (["check"], ["sessions", "list"], ["events", w.session_id]):
        r = run_cli(*opts, *cmd)
        assert r.returncode == 0, (cmd, r.stderr)
        after = tree_snapshot(sessions_dir)
        assert {k: v for k, v in after.items() if not k.endswith("-shm")} == before, cmd
        assert set(after) - set(before) <= {f"{w.path.name}-shm"}
