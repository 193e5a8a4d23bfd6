"""Lazy command loading (issues 10 and 12: start-up): a command imports its own module, not the
others'; ``agentdb --help`` and completion of command names import none, from a static table
that must say what the real commands say."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from agentdb.cli import commands
from agentdb.cli.main import cli
from agentdb.jobs import demo
from tests.runner import state_options

# what `agentdb <command>` imports to run; each must stay out of every other command's process
OWN = {name: ref.split(":")[0] for name, ref in commands.LAZY.items()}
CORE = {  # the core a command's module calls, where only that command (or few) needs it
    "backup": "agentdb.jobs.backup",
    "migrate": "agentdb.jobs.migrate",
    "prune": "agentdb.prune",
    "recover": "agentdb.salvage",
    "report": "agentdb.views.report",
    "restore": "agentdb.restore",
    "demo": "agentdb.jobs.demo",
}

DUMP = """import json, sys
from agentdb.cli.main import main
try:
    rc = main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as f:
        json.dump(sorted(sys.modules), f)
sys.exit(rc)
"""


def loaded(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, set[str]]:
    """Run the console entry point in a fresh interpreter; the modules it had at the end."""
    out = tmp_path / "modules.json"
    r = subprocess.run(
        [sys.executable, "-c", DUMP, str(out), *args],
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, set(json.loads(out.read_text()))


def others(command: str, modules: set[str]) -> list[str]:
    """Modules of commands other than ``command`` (and their submodules) that were loaded."""
    banned = [m for name, m in (*OWN.items(), *CORE.items()) if name != command]
    return sorted(m for m in modules if any(m == b or m.startswith(b + ".") for b in banned))


def test_summary_table_says_what_each_command_says() -> None:
    """SUMMARY is the short help of every command, as every consumer shortens it."""
    assert set(commands.SUMMARY) == set(commands.LAZY)
    ctx = click.Context(cli)
    for name in commands.LAZY:
        real = cli.get_command(ctx, name)
        assert real is not None and not real.hidden, name
        assert commands.SUMMARY[name] == real.get_short_help_str(limit=1000), name
        stand_in = click.Command(name, help=commands.SUMMARY[name])
        for limit in (45, 80, 200):  # completion, man page list, man page NAME
            assert stand_in.get_short_help_str(limit) == real.get_short_help_str(limit), name


@pytest.mark.slow
def test_help_imports_no_command_and_lists_every_one(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "--help")
    assert code == 0
    assert others("", modules) == []
    r = subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "1000"},
        timeout=120,
    )
    listed = r.stdout.split("Commands:", 1)[1]
    for name, summary in commands.SUMMARY.items():
        assert f"{name} " in listed and " ".join(summary.split()) in " ".join(listed.split())


@pytest.mark.slow
def test_completing_a_command_name_imports_no_command(tmp_path: Path) -> None:
    env = {"_AGENTDB_COMPLETE": "zsh_complete", "COMP_WORDS": "agentdb ", "COMP_CWORD": "1"}
    code, modules = loaded(tmp_path, env=env)
    assert code == 0
    assert others("", modules) == []
    r = subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    words = r.stdout.splitlines()
    for name in commands.LAZY:
        i = words.index(name)
        shortened = click.Command(name, help=commands.SUMMARY[name]).get_short_help_str()
        assert words[i + 1] == shortened


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "role", "args"),
    [
        ("check", "parent", []),
        ("recover", "damaged", ["--dry-run"]),
        ("recover", "parent", []),  # healthy: nothing to do, still its own modules only
    ],
)
def test_a_command_imports_no_other_command(
    tmp_path: Path, demo_state: demo.DemoState, command: str, role: str, args: list[str]
) -> None:
    sid = demo_state.by_role(role).session_id
    code, modules = loaded(tmp_path, *state_options(demo_state), command, sid, *args)
    assert code in (0, 1)
    assert OWN[command] in modules  # the log is there
    assert others(command, modules) == []
    # nor what neither path uses: OpenSSL (BLAKE2b comes from _blake2), a worker pool, ctypes
    for unused in ("_hashlib", "multiprocessing", "ctypes", "csv"):
        assert unused not in modules, unused
    if command == "recover" and "--dry-run" in args:  # planned, not executed
        assert "agentdb.salvage.execution" not in modules


@pytest.mark.slow
def test_help_of_one_command_imports_that_command_only(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "recover", "--help")
    assert code == 0
    assert OWN["recover"] in modules
    assert others("recover", modules) == []


@pytest.mark.slow
def test_a_recovery_imports_no_other_command(tmp_path: Path, demo_state: demo.DemoState) -> None:
    """The whole job on a copy of a damaged session: engines, replacement, swap, log."""
    damaged = demo_state.by_role("damaged").path
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    for suffix in ("", "-wal", "-journal"):  # the file and any sidecar
        p = damaged.with_name(damaged.name + suffix)
        if p.exists():
            shutil.copyfile(p, sessions / p.name)
            os.chmod(sessions / p.name, 0o600)
    sid = damaged.name.removesuffix(".sqlite")
    code, modules = loaded(tmp_path, "--sessions-dir", str(sessions), "recover", sid)
    assert code == 0
    assert (sessions / f"{sid}.sqlite.corrupt").exists()  # it did recover
    assert "agentdb.salvage.execution" in modules
    assert others("recover", modules) == []
    for unused in ("_hashlib", "multiprocessing", "ctypes", "csv"):
        assert unused not in modules, unused
