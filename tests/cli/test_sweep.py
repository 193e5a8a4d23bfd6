"""Every command, every option, at its boundaries — derived from the click tree.

The commands and their parameters are read from ``agentdb.cli.main``'s group, so a new command
or option is swept without anyone adding it here. Each parameter gets the odd values of its
type (empty, negative, huge, NaN, non-ULID and lower-case ids, ids of a FIFO / symlink /
directory entry, paths through files, ``/proc``, FIFOs, symlinks, loops) with the rest of the
command line valid, in-process through ``main`` (as the console script runs). Every run must end
with exit 0, 1, 2 or 130, no traceback, no hang, and a usage error must be one line naming the
option or the value. Destructive commands run with ``--dry-run`` when they have it and never
with ``--yes``, against a small temporary sessions directory of real sessions.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from agentdb.cli import params
from agentdb.cli.common import SessionIdType
from agentdb.cli.main import cli
from tests.runner import invoke
from tests.support import make_session

EXITS = {0, 1, 2, 130}
HANG = 20  # seconds one in-process run may take before it counts as a hang
NEVER = {"--yes", "-y", "--help", "-h", "--version"}  # destructive, or not about the input

# Known-good values for options a command cannot run without (found when a command's base
# line is a usage error: test_every_base_line_runs says which). "{new}" is a fresh directory.
REQUIRED: dict[str, dict[str, list[str]]] = {
    "backup": {"dest": ["--to", "{new}"]},
    "completion": {"shell": ["bash"]},
    "demo": {"directory": ["{new}"], "no_walkthrough": ["--no-walkthrough"]},
    "plugins users": {"plugin": ["anthropic"]},
    "prune": {"older_than": ["--older-than", "0s"]},
    "report": {"html_file": ["--html", "{new}.html"]},
    "restore": {"from_dir": ["--from", "{backups}"]},
}
# Parameters that replace others when swept (backup --verify DIR takes no --to or ids).
ALONE: dict[tuple[str, str], set[str]] = {("backup", "verify"): {"dest", "all_", "ids"}}


@dataclass
class World:
    """A small sessions directory of real sessions, hostile entries, and odd paths."""

    root: Path
    sessions: Path
    cache: Path
    backups: Path
    ids: dict[str, str]  # role -> id
    counter: Iterator[int]

    def new_dir(self) -> str:
        return str(self.root / f"new-{next(self.counter)}")

    def fill(self, token: str) -> str:
        token = token.replace("{backups}", str(self.backups))
        return token.replace("{new}", self.new_dir()) if "{new}" in token else token


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("sweep")
    sessions = root / "state" / "agent" / "sessions"
    sessions.mkdir(parents=True, mode=0o700)
    os.chmod(sessions.parent, 0o700)
    cache = root / "cache" / "agent" / "plugins"
    cache.mkdir(parents=True)
    ids = {
        "healthy": make_session(sessions, turns=2)[0],
        "old": make_session(sessions, turns=1, revision=1)[0],
        "running": make_session(sessions, turns=1, status="running")[0],
    }
    parent = ids["healthy"]
    ids["child"] = make_session(sessions, turns=1, parent=parent, depth=1)[0]
    damaged = make_session(sessions, turns=3)[1]
    ids["damaged"] = damaged.name.removesuffix(".sqlite")
    with open(damaged, "r+b") as f:  # zero the last page: a broken b-tree
        size = f.seek(0, os.SEEK_END)
        f.seek(size - 4096)
        f.write(b"\0" * 4096)
    for role, make in (
        ("fifo", lambda p: os.mkfifo(p, 0o600)),
        ("symlink", lambda p: p.symlink_to(sessions / f"{ids['healthy']}.sqlite")),
        ("directory", lambda p: p.mkdir(mode=0o700)),
    ):
        sid = f"01ARZ3NDEK{len(ids):016d}"
        make(sessions / f"{sid}.sqlite")
        ids[role] = sid
    backups = root / "backups"
    assert (
        invoke(["--sessions-dir", str(sessions), "backup", "--all", "--to", str(backups)])[0] == 1
    )
    # odd paths
    (root / "file").write_text("a file\n")
    os.mkfifo(root / "fifo", 0o600)
    (root / "empty").mkdir()
    (root / "link-to-dir").symlink_to(root / "empty")
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "loop").symlink_to(root / "loop")
    return World(root, sessions, cache, backups, ids, itertools.count())


def id_values(w: World) -> list[str]:
    real = [w.ids[r] for r in ("healthy", "old", "damaged", "fifo", "symlink", "directory")]
    missing = "01ARZ3NDEKTSV4RRFFQ69G5FAV"  # a ULID no file has
    return [*real, missing, w.ids["healthy"].lower(), "../x", "*", "", "x" * 300, "-"]


def path_values(w: World) -> list[str]:
    r = w.root
    return [
        "",
        "/",
        "/proc",
        "/proc/self",
        "/sys",
        "/dev/null",
        f"{r}/file",
        f"{r}/file/sub",
        f"{r}/fifo",
        f"{r}/fifo/sub",
        f"{r}/empty",
        f"{r}/link-to-dir",
        f"{r}/dangling",
        f"{r}/loop",
        f"{r}/loop/sub",
        str(w.sessions),
        f"{w.sessions}/sub",
        "{new}",
        "{new}/not-utf8-\udcff",  # a byte that is not UTF-8 in argv (surrogate-escaped)
        "x" * 5000,
    ]


def _is_path(p: click.Parameter) -> bool:
    return isinstance(p.type, params.DirectoryType | click.Path | click.File)


def values_for(p: click.Parameter, w: World) -> list[str]:
    """The odd values of a parameter's type."""
    t = p.type
    if isinstance(t, SessionIdType):
        return id_values(w)
    if _is_path(p):
        return path_values(w)
    if isinstance(t, params.DurationType):
        return ["", "0s", "1s", "90d", "-1d", "1.5d", "36526d", "999999999w", "9" * 40 + "d", "x"]
    if isinstance(t, params.TableFormatType):
        return ["", "bogus", "html", "tsv", "latex", "SIMPLE"]
    if isinstance(t, click.Choice):
        first = str(t.choices[0])
        return ["", "bogus", first, first.upper(), first.lower(), f"{first},{first}"]
    if isinstance(t, click.types.IntParamType | click.IntRange):
        big = ["9223372036854775807", "9223372036854775808", "9" * 40]
        return ["", "-1", "0", "1", "256", "257", *big, "nan", "1.5", "x"]
    if isinstance(t, click.types.FloatParamType | params.SecondsType):
        return ["", "-1", "0", "0.5", "86401", "nan", "inf", "-inf", "1e308", "x"]
    # free text (names, statuses, anything else)
    return [
        *["", " ", ",", "-", "x" * 5000, "../../etc/passwd", "é\u202e", "\udcff"],
        "completed,running",
    ]


def _commands() -> Iterator[tuple[list[str], click.Command]]:
    def walk(cmd: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                yield from walk(sub, [*path, name])
        else:
            yield path, cmd

    yield from walk(cli, [])


COMMANDS = list(_commands())


def _opt(p: click.Parameter) -> str:
    return p.opts[0]


def base_line(path: list[str], cmd: click.Command, w: World, swept: str | None) -> list[str]:
    """A valid command line for ``cmd`` without the swept parameter's own tokens."""
    name = " ".join(path)
    drop = ALONE.get((name, swept or ""), set())
    argv: list[str] = []
    names = {p.name for p in cmd.params}
    for p in cmd.params:
        if p.name == swept or p.name in drop:
            continue
        if isinstance(p, click.Option) and p.is_flag and _opt(p) == "--dry-run":
            argv.append("--dry-run")  # a destructive command only plans
        elif p.name == "all_" and "ids" not in (swept, *drop):
            argv.append("--all")
        elif isinstance(p, click.Argument) and p.required and isinstance(p.type, SessionIdType):
            argv.append(w.ids["healthy"])
    for pname, tokens in REQUIRED.get(name, {}).items():
        if pname != swept and pname not in drop and pname in names:
            argv += [w.fill(t) for t in tokens]
    return [*path, *argv]


def run(w: World, argv: list[str]) -> tuple[int, str, str]:
    """``agentdb --sessions-dir S --plugin-cache C argv`` in-process, with a hang guard."""
    full = ["--sessions-dir", str(w.sessions), "--plugin-cache", str(w.cache), *argv]
    return invoke(full, hang=HANG)


def judge(argv: list[str], code: int, out: str, err: str, names: list[str]) -> list[str]:
    """Every way this run breaks the contract (empty when it keeps it)."""
    bad = []
    shown = " ".join(repr(a) if len(a) < 80 else repr(a[:40] + "...") for a in argv)
    if code not in EXITS:
        bad.append(f"exit {code}: {shown}")
    if "Traceback" in err or "Traceback" in out:
        bad.append(f"traceback: {shown}: {err[-300:]}")
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("agentdb: warning")]
    if code == 2:
        if len(lines) != 1:
            bad.append(f"usage error in {len(lines)} lines: {shown}: {err[:300]!r}")
        elif not any(n and (n in lines[0] or _escaped(n) in lines[0]) for n in names):
            bad.append(f"usage error names none of {names[:3]}: {shown}: {lines[0][:300]!r}")
    if code == 1 and not out.strip() and len(lines) != 1:
        bad.append(f"error without a report, in {len(lines)} lines: {shown}: {err[:300]!r}")
    if code in (0, 1) and "--json" in argv and out.strip():
        try:
            if argv[0] == "events":
                [json.loads(ln) for ln in out.splitlines()]
            else:
                json.loads(out)
        except ValueError:
            bad.append(f"--json output does not parse: {shown}: {out[:200]!r}")
    return bad


def _escaped(text: str) -> str:
    """``text`` as a message shows it (a byte that is not UTF-8 as its escape)."""
    return text.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")


def _sweep(path: list[str], cmd: click.Command, w: World) -> tuple[list[str], int]:
    problems: list[str] = []
    runs = 0
    json_ok = any(_opt(p) == "--json" for p in cmd.params)
    for p in cmd.params:
        if any(o in NEVER for o in p.opts):
            continue
        if isinstance(p, click.Option) and p.is_flag:
            values: list[str | None] = [None]  # a flag's boundary: given
        else:
            values = list(values_for(p, w))
        for i, raw in enumerate(values):
            base = base_line(path, cmd, w, p.name)
            v = None if raw is None else w.fill(raw)
            if isinstance(p, click.Argument):
                argv = [*base, "--", v] if v is not None else base
                if p.nargs == -1 and v is not None and i == 0:
                    argv = [*argv, w.ids["old"]]  # several ids at once
            elif v is None:
                argv = [*base, _opt(p)]
            else:
                argv = [*base, _opt(p), v]
            if json_ok and i % 2 == 0 and "--json" not in argv:
                argv.insert(len(path), "--json")
            try:
                code, out, err = run(w, argv)
            except Exception as e:  # main() let it escape: a traceback for the user
                tb = traceback.extract_tb(e.__traceback__)[-1]
                problems.append(f"raised {e!r} at {tb.filename}:{tb.lineno}: {argv!r}"[:600])
                continue
            finally:
                runs += 1
            if v == "" and _is_path(p) and code != 2:  # "" would silently mean the cwd
                problems.append(f"an empty path accepted (exit {code}): {argv!r}")
            names = [*p.opts, (p.metavar or "").strip("[]."), (p.name or "").upper(), v or "''"]
            if isinstance(p, click.Argument):
                names.append(f"[{(p.name or '').upper()}]")
            problems += judge(argv, code, out, err, [n for n in names if n])
    return problems, runs


@pytest.mark.slow
def test_every_option_of_every_command_at_its_boundaries(world: World) -> None:
    """The sweep, all commands in one run, within the CI budget of a minute."""
    start = time.monotonic()
    problems: list[str] = []
    runs = 0
    for path, cmd in COMMANDS:
        found, n = _sweep(path, cmd, world)
        problems += found
        runs += n
    elapsed = time.monotonic() - start
    assert not problems, f"{len(problems)} of {runs} runs broke the contract:\n" + "\n".join(
        problems
    )
    assert runs > 300
    assert elapsed < 60, f"{runs} runs took {elapsed:.1f}s"


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_base_line_runs(world: World, path: list[str], cmd: click.Command) -> None:
    """The line each sweep varies is itself valid, so the odd values reach the command's work
    (a new command that needs an option to run at all gets it in REQUIRED)."""
    argv = base_line(path, cmd, world, None)
    code, out, err = run(world, argv)
    assert code in (0, 1), (argv, code, err)
    assert "Traceback" not in err


GLOBALS = [p for p in cli.params if isinstance(p, click.Option) and not p.is_flag]
COMMANDS_FOR_GLOBALS = [["check", "--json"], ["preflight", "{healthy}"], ["sessions", "list"]]


@pytest.mark.slow
@pytest.mark.parametrize("p", GLOBALS, ids=[p.opts[0] for p in GLOBALS])
def test_global_options_at_their_boundaries(world: World, p: click.Option) -> None:
    """The group's own options (and their environment variables), under a few commands."""
    problems: list[str] = []
    option = p.opts[0]
    envvar = p.envvar if isinstance(p.envvar, str) else None
    for v in values_for(p, world):
        value = world.fill(v)
        for line in COMMANDS_FOR_GLOBALS:
            argv = [a.replace("{healthy}", world.ids["healthy"]) for a in line]
            others = [o for q in GLOBALS if q is not p for o in (q.opts[0], _good(q, world))]
            full = [*others, option, value, *argv]
            code, out, err = invoke(full, hang=HANG)
            problems += judge(full, code, out, err, [option, value or "''"])
            if envvar is not None:
                code, out, err = invoke([*others, *argv], env={envvar: value}, hang=HANG)
                names = [envvar, option, value or "''"]
                problems += judge([f"{envvar}={value}", *argv], code, out, err, names)
    assert not problems, "\n".join(problems)


def _good(p: click.Option, w: World) -> str:
    return str(w.sessions if p.name == "sessions_dir" else w.cache)


def test_every_group_without_a_command(world: World) -> None:
    """``agentdb``, ``agentdb sessions``, ...: the group's help, exit 2, no traceback."""
    groups = [()] + [tuple(path[:i]) for path, _ in COMMANDS for i in range(1, len(path))]
    for path in set(groups):
        code, out, err = invoke(list(path), hang=HANG)
        assert code == 2 and "Usage:" in err and "Traceback" not in err, (path, err)
