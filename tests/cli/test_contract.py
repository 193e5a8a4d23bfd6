"""Acceptance tests of /work/shared/CONTRACT.md against the real CLI, one test per point.

Real files, real ``agentdb`` processes (exit codes and the stdout/stderr split matter).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentdb import demo
from agentdb.results import VERDICTS
from agentdb.schema import enums
from tests.support import held_open, make_session

GOOD_ID = "01KRJ2J16Z66Y18RC6X1RVCXA6"
BAD_IDS = ["../x", "*", GOOD_ID.lower(), GOOD_ID + ".sqlite", "", "8" + GOOD_ID[1:], "01KRJ2J16Z"]


def agentdb(
    *args: str,
    env: dict[str, str] | None = None,
    umask: int | None = None,
    drop: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """The real console entry point; no terminal on stdin (prune never prompts)."""
    full = {k: v for k, v in os.environ.items() if k not in drop and k != "AGENTDB_FAULT"}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
        preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )


def snapshot(root: Path) -> dict[str, tuple[int, str | None]]:
    """Every entry under ``root``: mode and, for regular files, a hash of the bytes."""
    out: dict[str, tuple[int, str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out[str(p.relative_to(root))] = (st.st_mode, digest)
    return out


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory: pytest.TempPathFactory) -> demo.DemoState:
    """One demo state shared by the read-only tests (they must leave it as it is)."""
    return demo.build(tmp_path_factory.mktemp("demo") / "d")


def global_opts(state: demo.DemoState) -> list[str]:
    return ["--sessions-dir", str(state.sessions_dir), "--plugin-cache", str(state.plugin_cache)]


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


# --- Where things live ------------------------------------------------------------------------


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
    r = agentdb("check", "--json", env=env, drop=drop)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {s["session_id"] for s in doc["sessions"]} == {s.session_id for s in state.sessions}
    assert all(Path(s["path"]).parent == sessions for s in doc["sessions"])
    pinned = state.by_role("pinned").session_id
    r = agentdb("preflight", pinned, "--json", env=env, drop=drop)
    assert Path(json.loads(r.stdout)["plugin_cache"]) == cache
    damaged = state.by_role("damaged").session_id
    r = agentdb("recover", damaged, env=env, drop=drop)
    assert r.returncode == 0, r.stderr
    assert (home / ".local" / "state" / "agent" / "recovery.log").is_file()
    # Relative XDG values are invalid (XDG spec) and ignored.
    r = agentdb("check", "--json", env={**env, "XDG_STATE_HOME": "rel/state"})
    assert {s["session_id"] for s in json.loads(r.stdout)["sessions"]} == {
        s.session_id for s in state.sessions
    }


def test_xdg_variables_and_overrides(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    env = {
        "XDG_STATE_HOME": str(tmp_path / "d" / "state"),
        "XDG_CACHE_HOME": str(tmp_path / "d" / "cache"),
    }
    pinned = state.by_role("pinned").session_id
    r = agentdb("preflight", pinned, "--json", env=env)
    doc = json.loads(r.stdout)
    assert doc["plugin_cache"] == str(state.plugin_cache)
    states = {(p["category"], p["name"], p["version"]): p["state"] for p in doc["producers"]}
    assert states[("model", "anthropic", "1.4.0")] == "cached"
    # --plugin-cache overrides: an empty cache lacks everything.
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    r = agentdb("--plugin-cache", str(empty), "preflight", pinned, "--json", env=env)
    assert r.returncode == 1 and json.loads(r.stdout)["plugin_cache"] == str(empty)
    # --sessions-dir overrides XDG_STATE_HOME.
    other = tmp_path / "other" / "sessions"
    other.mkdir(parents=True)
    sid, _ = make_session(other)
    r = agentdb("--sessions-dir", str(other), "check", "--json", env=env)
    assert [s["session_id"] for s in json.loads(r.stdout)["sessions"]] == [sid]


def test_recovery_log_follows_sessions_dir_parent(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    moved = tmp_path / "elsewhere" / "deeper" / "sessions"
    moved.parent.mkdir(parents=True)
    state.sessions_dir.rename(moved)
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg-state")}
    damaged = state.by_role("damaged").session_id
    r = agentdb("--sessions-dir", str(moved), "recover", damaged, "--json", env=env)
    assert r.returncode == 0, r.stderr
    log = moved.parent / "recovery.log"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines and all(e["session_id"] == damaged for e in lines)
    assert not (tmp_path / "xdg-state").exists()
    assert not (tmp_path / "d" / "state" / "agent" / "recovery.log").exists()


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
            [sys.executable, str(runner), str(log), *global_opts(state), *cmd],
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


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_ids_rejected_before_any_file_is_touched(tmp_path: Path, bad: str) -> None:
    state = demo.build(tmp_path / "d")
    # A file whose name the bad id would reach if it were used as a path.
    (state.sessions_dir / (bad.replace("/", "_") + ".sqlite")).write_bytes(b"bait")
    before = snapshot(tmp_path)
    backup = tmp_path / "backup-dir"
    for cmd in ID_COMMANDS:
        argv = [a.replace("{backup}", str(backup)) for a in cmd]
        r = agentdb(*global_opts(state), *argv, bad)
        assert r.returncode == 2, (argv, bad, r.stderr)
        assert "not a session id" in r.stderr, (argv, r.stderr)
        assert r.stdout == ""
        # A valid id next to the bad one does not get the command started either.
        r = agentdb(*global_opts(state), *argv, state.sessions[0].session_id, bad)
        if argv[:2] not in (["sessions", "show"], ["sessions", "tree"]) and argv[0] not in (
            "events",
            "preflight",
        ):
            assert r.returncode == 2, (argv, r.stderr)
        assert snapshot(tmp_path) == before, argv
    assert not backup.exists()


# --- Sessions directory entries ------------------------------------------------------------


def hostile_extras(sessions_dir: Path, model_id: str) -> dict[str, str]:
    """Files that are not sessions (never touched) and <ULID>.sqlite entries that cannot be
    opened; returns {name: kind}."""
    base = GOOD_ID[:25]
    src = sessions_dir / f"{model_id}.sqlite"
    (sessions_dir / "notes.txt").write_text("operator notes\n")
    (sessions_dir / "foo.sqlite").write_bytes(src.read_bytes())
    (sessions_dir / f"{model_id.lower()}.sqlite").write_bytes(src.read_bytes())
    (sessions_dir / "random").mkdir()
    (sessions_dir / "random" / "inside.sqlite").write_bytes(src.read_bytes())
    (sessions_dir / f"{model_id}.sqlite.bak").write_bytes(src.read_bytes())
    (sessions_dir / f"{base}9.sqlite.corrupt.notes").write_text("not a corrupt copy\n")
    os.mkdir(sessions_dir / f"{base}0.sqlite")
    os.mkfifo(sessions_dir / f"{base}1.sqlite")
    os.symlink(src.name, sessions_dir / f"{base}2.sqlite")
    return {f"{base}0": "directory", f"{base}1": "fifo", f"{base}2": "symlink"}


def test_check_lists_every_session_entry_with_a_verdict(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    refused = hostile_extras(state.sessions_dir, state.sessions[0].session_id)
    r = agentdb(*global_opts(state), "check", "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    got = {s["session_id"]: s for s in doc["sessions"]}
    assert set(got) == {s.session_id for s in state.sessions} | set(refused)
    for sid in refused:
        assert got[sid]["verdict"] in VERDICTS and got[sid]["findings"], got[sid]
    assert got[f"{GOOD_ID[:25]}2"]["verdict"] == "insecure"  # a symlink
    assert [s["session_id"] for s in doc["sessions"]] == sorted(got)


def test_other_files_never_touched_by_any_command(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    extras = hostile_extras(state.sessions_dir, state.sessions[0].session_id)
    opts = global_opts(state)

    def others() -> dict[str, tuple[int, str | None]]:
        snap = snapshot(state.sessions_dir)
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
        r = agentdb(*opts, *cmd)
        assert r.returncode in (0, 1), (cmd, r.stderr)
        assert others() == before, cmd


def test_corrupt_names_never_overwritten(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    damaged = state.by_role("damaged")
    taken = [damaged.path.with_name(damaged.path.name + s) for s in (".corrupt", ".corrupt.1")]
    for i, p in enumerate(taken):
        p.write_bytes(f"an older copy {i}".encode())
    before = {p: p.read_bytes() for p in taken}
    r = agentdb(*global_opts(state), "recover", damaged.session_id, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["sessions"][0]
    assert out["outcome"] == "recovered"
    assert out["corrupt_path"] == str(damaged.path) + ".corrupt.2"
    assert {p: p.read_bytes() for p in taken} == before


# --- Modes --------------------------------------------------------------------------------


def test_created_files_and_dirs_private_under_umask_000(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    opts = global_opts(state)
    log = state.sessions_dir.parent / "recovery.log"
    assert not log.exists()
    damaged = state.by_role("damaged")
    old = state.by_role("old-revision")
    r = agentdb(*opts, "recover", damaged.session_id, umask=0)
    assert r.returncode == 0, r.stderr
    r = agentdb(*opts, "migrate", old.session_id, "--keep-backups", umask=0)
    assert r.returncode == 0, r.stderr
    backups = tmp_path / "new" / "nested" / "backups"
    r = agentdb(*opts, "backup", "--all", "--to", str(backups), umask=0)
    assert r.returncode == 0, r.stderr
    # A recovery log in a directory that does not exist yet: created 0700.
    moved = tmp_path / "fresh" / "sessions"
    moved.parent.mkdir()
    os.chmod(moved.parent, 0o755)
    moved.mkdir()
    sid, p = make_session(moved, turns=30)
    demo.damage_page(p, table="events", nth_leaf=1)
    (moved.parent).chmod(0o755)
    r = agentdb("--sessions-dir", str(moved), "recover", sid, umask=0)
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


# --- JSON shapes and streams --------------------------------------------------------------


def test_check_json_shape(demo_state: demo.DemoState) -> None:
    r = agentdb(*global_opts(demo_state), "check", "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert isinstance(doc["summary"], dict)
    for s in doc["sessions"]:
        assert isinstance(s["session_id"], str) and isinstance(s["path"], str)
        assert s["verdict"] in ("ok", *VERDICTS)
        for f in s["findings"]:
            assert isinstance(f["code"], str) and isinstance(f["message"], str)
    verdicts = {s["session_id"]: s["verdict"] for s in doc["sessions"]}
    assert verdicts[demo_state.by_role("damaged").session_id] == "corrupt"
    assert verdicts[demo_state.by_role("old-revision").session_id] == "needs_migration"
    assert verdicts[demo_state.by_role("recent").session_id] == "ok"
    assert VERDICTS == (
        "insecure",
        "foreign",
        "too_new",
        "unsafe_schema",
        "unreadable",
        "corrupt",
        "inconsistent",
        "needs_migration",
    )


def test_verdict_is_the_first_that_applies(tmp_path: Path, sessions_dir: Path) -> None:
    """An insecure (mode 0666) file that is also an old revision and damaged: insecure first;
    a damaged old-revision file: corrupt before needs_migration; findings list everything."""
    sid, p = make_session(sessions_dir, turns=30, revision=1)
    demo.damage_page(p, table="events", nth_leaf=1)
    r = agentdb("--sessions-dir", str(sessions_dir), "check", sid, "--json")
    s = json.loads(r.stdout)["sessions"][0]
    assert s["verdict"] == "corrupt"
    assert {"integrity", "needs_migration"} <= {f["code"] for f in s["findings"]}
    os.chmod(p, 0o666)
    r = agentdb("--sessions-dir", str(sessions_dir), "check", sid, "--json")
    assert json.loads(r.stdout)["sessions"][0]["verdict"] == "insecure"
    assert r.returncode == 1


def test_recover_json_shape(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    r = agentdb(*global_opts(state), "recover", "--all", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    outs = {s["session_id"]: s for s in doc["sessions"]}
    assert set(outs) == {s.session_id for s in state.sessions}
    for s in outs.values():
        assert s["outcome"] in ("recovered", "healthy", "unreadable", "skipped_live", "refused")
        assert s["corrupt_path"] is None or isinstance(s["corrupt_path"], str)
        assert isinstance(s["tables"], dict)
    got = outs[state.by_role("damaged").session_id]
    assert got["outcome"] == "recovered" and Path(got["corrupt_path"]).is_file()
    assert all(isinstance(v["salvaged"], int) for v in got["tables"].values())
    assert got["tables"]["events"]["salvaged"] > 0
    assert "damaged" in r.stderr  # never silent
    # recover of a healthy session: 0, outcome healthy
    r = agentdb(*global_opts(state), "recover", state.by_role("recent").session_id, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["sessions"][0]["outcome"] == "healthy"


def test_migrate_json_shape(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    r = agentdb(*global_opts(state), "migrate", "--all", "--json")
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
    assert (old["from"], old["to"], old["outcome"]) == (1, 2, "migrated")
    assert outs[state.by_role("damaged").session_id]["outcome"] == "corrupt"
    assert outs[state.by_role("recent").session_id]["outcome"] == "current"


def test_prune_json_shape_and_reason_codes(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    parent = state.by_role("parent").session_id
    child = state.by_role("child").session_id
    recent = state.by_role("recent")
    with held_open(recent.path):
        r = agentdb(
            *global_opts(state),
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


def test_prune_needs_confirmation_and_dry_run_changes_nothing(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    before = snapshot(tmp_path)
    for extra in ([], ["--dry-run"]):
        r = agentdb(*global_opts(state), "prune", "--older-than", "0s", *extra)
        assert r.returncode == 1, r.stderr  # no terminal: nothing removed / some refused
        assert snapshot(tmp_path) == before
    r = agentdb(*global_opts(state), "prune")
    assert r.returncode == 2


def test_backup_contract(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    dest = tmp_path / "b" / "c"
    sid = state.by_role("recent").session_id
    r = agentdb(*global_opts(state), "backup", sid, "--to", str(dest), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["sessions"][0]
    assert out["session_id"] == sid and (dest / f"{sid}.sqlite").is_file()
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o700
    r = agentdb(*global_opts(state), "backup", sid, "--to", str(dest), "--json")
    assert r.returncode == 0  # a repeated backup is the normal case
    doc = json.loads(r.stdout)
    assert doc["version"] == 1 and doc["sessions"][0]["outcome"] == "unchanged"
    assert doc["summary"]["unchanged"] == 1
    (dest / f"{sid}.sqlite").write_bytes(b"someone else's file")
    r = agentdb(*global_opts(state), "backup", sid, "--to", str(dest), "--json")
    out = json.loads(r.stdout)["sessions"][0]
    # a copy that fails verification is renamed, never overwritten, and a fresh copy written
    assert r.returncode == 0 and out["outcome"] == "copied"
    assert out["corrupt_path"] == str(dest / f"{sid}.sqlite.corrupt")
    assert (dest / f"{sid}.sqlite.corrupt").read_bytes() == b"someone else's file"


def test_events_json_lines(demo_state: demo.DemoState) -> None:
    sid = demo_state.by_role("parent").session_id
    r = agentdb(*global_opts(demo_state), "events", sid, "--json")
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
    r = agentdb(
        *global_opts(demo_state), "events", sid, "--json", "--kind", "plan", "--after", str(seqs[3])
    )
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert got and all(e["kind"] == "plan" and e["sequence"] > seqs[3] for e in got)


def test_json_stdout_is_one_document(demo_state: demo.DemoState) -> None:
    """With --json, stdout parses as one JSON document whatever the outcome; words go to stderr."""
    for cmd in read_only_commands(demo_state):
        if "--json" not in cmd:
            continue
        r = agentdb(*global_opts(demo_state), *cmd)
        assert r.returncode in (0, 1), (cmd, r.stderr)
        if cmd[0] == "events":
            if r.returncode == 0:
                [json.loads(line) for line in r.stdout.splitlines()]
            continue
        if cmd[0] in ("sessions", "preflight") and r.returncode == 1 and not r.stdout:
            assert len(r.stderr.strip().splitlines()) == 1  # an error: one line
            continue
        json.loads(r.stdout)


# --- Exit codes ------------------------------------------------------------------------


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
            r = agentdb("--sessions-dir", str(sdir), *cmd)
            assert r.returncode == 2, (sdir, cmd, r.stderr)
            assert str(sdir) in r.stderr
            if sdir == missing:
                assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not missing.exists() and not (tmp_path / "b").exists()


def test_exit_codes(tmp_path: Path, sessions_dir: Path) -> None:
    sid, _ = make_session(sessions_dir)
    opts = ["--sessions-dir", str(sessions_dir), "--plugin-cache", str(tmp_path / "pc")]
    assert agentdb(*opts, "check").returncode == 0
    assert agentdb(*opts, "recover", sid).returncode == 0
    assert agentdb(*opts, "migrate", sid).returncode == 0
    assert agentdb(*opts, "events", sid).returncode == 0
    assert agentdb(*opts, "check", "--bogus").returncode == 2
    assert agentdb(*opts, "check", "--jobs", "0").returncode == 2
    assert agentdb(*opts, "recover").returncode == 2  # neither ids nor --all
    assert agentdb(*opts, "events", sid, "--kind", "NOPE").returncode == 2
    assert agentdb(*opts, "check", GOOD_ID).returncode == 1  # no such session
    assert agentdb(*opts, "preflight", sid).returncode == 1  # producers missing


# --- Read-only promises -------------------------------------------------------------------


def test_read_only_commands_change_nothing(demo_state: demo.DemoState) -> None:
    root = demo_state.root
    before = snapshot(root)
    for cmd in read_only_commands(demo_state):
        agentdb(*global_opts(demo_state), *cmd)
        assert snapshot(root) == before, cmd
    bdir = root.parent / "verify-me"
    r = agentdb(*global_opts(demo_state), "backup", "--all", "--to", str(bdir))
    assert r.returncode == 1  # the damaged one is not copied
    b_before = snapshot(bdir)
    agentdb("backup", "--verify", str(bdir), "--json")
    assert snapshot(bdir) == b_before
    assert snapshot(root) == before


# --- Enums and the kernel producer ---------------------------------------------------------


def test_enums_are_the_specs() -> None:
    assert len(enums.KINDS) == 10 and "KIND_UNSPECIFIED" not in enums.KINDS
    assert len(enums.STATUSES) == 7
    assert tuple(enums.DECISIONS) == ("allow", "ask", "deny")
    assert set(enums.PRODUCER_CATEGORIES) == {*enums.PLUGIN_CATEGORIES, "kernel"}
    assert len(enums.PLUGIN_CATEGORIES) == 7


def test_kernel_never_looked_up_in_the_plugin_cache(tmp_path: Path, sessions_dir: Path) -> None:
    cache = tmp_path / "pc"
    k = demo.KERNEL
    (cache / k.category / k.name / k.version).mkdir(parents=True)
    sid, _ = make_session(sessions_dir, turns=2)
    opts = ["--sessions-dir", str(sessions_dir), "--plugin-cache", str(cache)]
    r = agentdb(*opts, "preflight", sid, "--json")
    doc = json.loads(r.stdout)
    assert all(p["category"] != "kernel" for p in doc["missing"]), doc
    assert {p["state"] for p in doc["producers"] if p["category"] == "kernel"} == {"kernel"}
    r = agentdb(*opts, "prune", sid, "--dry-run", "--json")
    assert json.loads(r.stdout)["would_remove"] == [sid], r.stdout  # not pinned by the kernel dir
    r = agentdb(*opts, "plugins", "refs", "--json")
    doc = json.loads(r.stdout)
    assert all(v.get("sessions", 0) == 0 for v in doc["versions"]), doc


# --- Error messages ---------------------------------------------------------------------


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
            r = agentdb(*opts, *cmd)
            assert r.returncode == 1, (what, cmd)
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1, (what, cmd, r.stderr)
            assert str(path) in lines[0] and fix in lines[0], (what, lines)
    # recover names the session file, never a temporary copy
    sid, p = make_session(sessions_dir)
    c = apsw.Connection(str(p))
    c.execute("CREATE VIEW v AS SELECT 1")
    c.close()
    r = agentdb(*opts, "recover", sid)
    assert r.returncode == 1
    assert str(p) in r.stderr and "agentdb-recover-" not in r.stderr, r.stderr
    # a live session: skipped, named
    sid, p = make_session(sessions_dir, turns=30)
    with held_open(p):
        r = agentdb(*opts, "recover", sid)
        assert r.returncode == 1 and str(p) in r.stderr and "skipped_live" in r.stderr, r.stderr


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
    before = snapshot(sessions_dir)
    opts = ["--sessions-dir", str(sessions_dir), "--plugin-cache", str(tmp_path / "pc")]
    for cmd in (["check"], ["sessions", "list"], ["events", w.session_id]):
        r = agentdb(*opts, *cmd)
        assert r.returncode == 0, (cmd, r.stderr)
        after = snapshot(sessions_dir)
        assert {k: v for k, v in after.items() if not k.endswith("-shm")} == before, cmd
        assert set(after) - set(before) <= {f"{w.path.name}-shm"}


def test_demo_creates_private_directories(tmp_path: Path) -> None:
    r = agentdb("demo", str(tmp_path / "d"), "--no-walkthrough", umask=0o022)
    assert r.returncode == 0, r.stderr
    for dirpath, dirnames, _ in os.walk(tmp_path / "d"):
        for name in [".", *dirnames]:
            p = Path(dirpath) / name
            assert stat.S_IMODE(os.lstat(p).st_mode) == 0o700, p


def test_backup_verify_judges_a_recovered_session_as_check_does(tmp_path: Path) -> None:
    """check says ok for a salvaged session (its lost events are in the recovery log); the
    backup of it must verify the same, not send the operator to recover a healthy file."""
    state = demo.build(tmp_path / "d")
    sid = state.by_role("damaged").session_id
    assert agentdb(*global_opts(state), "recover", sid).returncode == 0
    r = agentdb(*global_opts(state), "check", sid, "--json")
    assert r.returncode == 0, r.stdout
    dest = tmp_path / "b"
    assert agentdb(*global_opts(state), "backup", sid, "--to", str(dest)).returncode == 0
    r = agentdb(*global_opts(state), "backup", "--verify", str(dest), "--json")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["sessions"][0]["verdict"] == "ok"


def test_scratch_left_by_a_killed_job_is_swept(tmp_path: Path) -> None:
    """Private scratch copies live in $XDG_CACHE_HOME/agentdb/tmp; a killed job's are removed by
    the next job (their pid no longer runs), a running job's are left alone."""
    state = demo.build(tmp_path / "d")
    cache = tmp_path / "cache-home"
    base = cache / "agentdb" / "tmp"
    base.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = base / f"agentdb-recover-{dead.pid}-abc123"
    stale.mkdir()
    (stale / "copy.sqlite").write_bytes(b"private bytes")
    alive = base / f"agentdb-recover-{os.getpid()}-def456"
    alive.mkdir()
    sid = state.by_role("damaged").session_id
    r = agentdb(*global_opts(state), "recover", sid, env={"XDG_CACHE_HOME": str(cache)})
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and alive.exists()
    assert sorted(p.name for p in base.iterdir()) == [alive.name]
