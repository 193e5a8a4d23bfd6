"""Every command's exit codes are the ones docs/exit-codes.md's table gives it (the table
CONTRACT.md carries): 0 did what was asked, 1 found or left a problem, 2 usage, 130
interrupted. For every command and every code its row allows, a scenario here must produce
that code; a code the row marks "—" has no scenario; every command the CLI has has a row."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from agentdb import paths
from agentdb.cli import output
from agentdb.cli.main import cli
from agentdb.cli.manpages import iter_commands
from agentdb.jobs import demo
from tests.runner import invoke
from tests.salvage.corpus import pages_of, zero_page
from tests.support import make_session

DOC = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"
CODES = (0, 1, 2, 130)


def table() -> dict[str, dict[int, str]]:
    """docs/exit-codes.md's table: command -> {code: meaning} (a "—" cell: never)."""
    rows: dict[str, dict[int, str]] = {}
    for line in DOC.read_text().splitlines():
        m = re.fullmatch(r"\| `agentdb ([a-z ]+)` \|(.*)\|", line.strip())
        if m:
            cells = [c.strip() for c in m.group(2).split("|")]
            assert len(cells) == len(CODES), line
            rows[m.group(1)] = {c: t for c, t in zip(CODES, cells, strict=True) if t != "—"}
    return rows


@dataclass
class World:
    """Two sessions directories: ``good`` (every session healthy, checked, producers cached)
    and ``bad`` (a corrupt session, a file that is no database, a running session no process
    has open, a pinned old session)."""

    good: Path
    bad: Path
    cache: Path
    empty_cache: Path
    sid: str  # healthy, in both directories
    corrupt: str  # in bad: rows damaged (recoverable)
    garbage: str  # in bad: not a database
    running: str  # in bad: status running, no process has it open
    tmp: Path

    def at(self, d: Path, cache: Path | None = None) -> list[str]:
        return ["--sessions-dir", str(d), "--plugin-cache", str(cache or self.cache)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    tmp = tmp_path_factory.mktemp("exit")
    good, bad = tmp / "good", tmp / "bad"
    for d in (good, bad):
        d.mkdir(mode=0o700)
    cache = tmp / "cache"
    for p in (demo.MODEL_OLD, demo.SHELL, demo.CONTEXT):
        (cache / p.category / p.name / p.version).mkdir(parents=True)
    empty_cache = tmp / "empty-cache"
    empty_cache.mkdir()
    sid, _ = make_session(good, turns=2, started_at="2020-01-01T00:00:00.000Z", ended_at=None)
    (bad / f"{sid}.sqlite").write_bytes((good / f"{sid}.sqlite").read_bytes())
    (bad / f"{sid}.sqlite").chmod(0o600)
    corrupt, path = make_session(bad, turns=30)
    zero_page(path, pages_of(path, "events", "leaf")[1])
    garbage = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    (bad / f"{garbage}.sqlite").write_bytes(b"not a database " * 100)
    (bad / f"{garbage}.sqlite").chmod(0o600)
    running, _ = make_session(bad, turns=1, status="running")
    w = World(good, bad, cache, empty_cache, sid, corrupt, garbage, running, tmp)
    assert invoke([*w.at(good), "check"]).code == 0  # verdicts recorded: status has them
    return w


Scenario = Callable[[World, Path], list[str]]

# command -> code -> the argv (after the global options it builds itself) that must exit so
S: dict[str, dict[int, Scenario]] = {
    "backup": {
        0: lambda w, t: [*w.at(w.good), "backup", "--all", "--to", str(t / "b")],
        1: lambda w, t: [*w.at(w.bad), "backup", "--all", "--to", str(t / "b")],
        2: lambda w, t: [*w.at(w.good), "backup", "--all"],
    },
    "check": {
        0: lambda w, t: [*w.at(w.good), "check"],
        1: lambda w, t: [*w.at(w.bad), "check"],
        2: lambda w, t: [*w.at(w.good), "check", "not-an-id"],
    },
    "completion": {
        0: lambda w, t: ["completion", "bash"],
        2: lambda w, t: ["completion", "tcsh"],
    },
    "demo": {
        0: lambda w, t: ["demo", str(t / "demo")],
        2: lambda w, t: ["demo", "--no-such-option"],
    },
    "events": {
        0: lambda w, t: [*w.at(w.good), "events", w.sid],
        1: lambda w, t: [*w.at(w.bad), "events", w.corrupt],
        2: lambda w, t: [*w.at(w.good), "events"],
    },
    "migrate": {
        0: lambda w, t: [*w.at(w.good), "migrate", "--all"],
        1: lambda w, t: [*w.at(w.bad), "migrate", w.garbage],
        2: lambda w, t: [*w.at(w.good), "migrate"],
    },
    "plugins refs": {
        0: lambda w, t: [*w.at(w.good), "plugins", "refs"],
        1: lambda w, t: [*w.at(w.bad), "plugins", "refs"],
        2: lambda w, t: [*w.at(w.good), "plugins", "refs", "--no-such-option"],
    },
    "plugins users": {
        0: lambda w, t: [*w.at(w.good), "plugins", "users", "model/anthropic"],
        1: lambda w, t: [*w.at(w.bad), "plugins", "users", "model/anthropic"],
        2: lambda w, t: [*w.at(w.good), "plugins", "users"],
    },
    "preflight": {
        0: lambda w, t: [*w.at(w.good), "preflight", w.sid],
        1: lambda w, t: [*w.at(w.good, w.empty_cache), "preflight", w.sid],
        2: lambda w, t: [*w.at(w.good), "preflight"],
    },
    "prune": {
        # a pinned session in range, left without --include-pinned: asked for, not a failure
        0: lambda w, t: [*w.at(_copy(w.good, t)), "prune", "--older-than", "0s", "--yes"],
        1: lambda w, t: [*w.at(w.bad), "prune", w.garbage, "--dry-run"],
        2: lambda w, t: [*w.at(w.good), "prune", "--yes"],
    },
    "recover": {
        0: lambda w, t: [*w.at(w.bad), "recover", w.corrupt, "--dry-run"],
        1: lambda w, t: [*w.at(w.bad), "recover", w.garbage, "--dry-run"],
        2: lambda w, t: [*w.at(w.good), "recover"],
    },
    "report": {
        # written: 0 even though the page lists problems to fix
        0: lambda w, t: [*w.at(w.bad), "report", "--html", str(t / "r.html")],
        1: lambda w, t: [*w.at(w.good), "report", "--html", str(_existing(t))],
        2: lambda w, t: [*w.at(w.good), "report"],
    },
    "restore": {
        0: lambda w, t: [*w.at(w.good), "restore", "--all", "--from", str(_backup(w, t))],
        1: lambda w, t: [*w.at(w.bad), "restore", w.running, "--from", str(_backup(w, t))],
        2: lambda w, t: [*w.at(w.good), "restore", "--all"],
    },
    "sessions costs": {
        0: lambda w, t: [*w.at(w.good), "sessions", "costs"],
        1: lambda w, t: [*w.at(w.bad), "sessions", "costs"],
        2: lambda w, t: [*w.at(w.good), "sessions", "costs", "--by", "week"],
    },
    "sessions end": {
        0: lambda w, t: [*w.at(w.bad), "sessions", "end", w.running, "--dry-run"],
        1: lambda w, t: [*w.at(w.bad), "sessions", "end", w.garbage, "--dry-run"],
        2: lambda w, t: [*w.at(w.good), "sessions", "end"],
    },
    "sessions list": {
        0: lambda w, t: [*w.at(w.bad), "sessions", "list"],
        2: lambda w, t: [*w.at(w.good), "sessions", "list", "--status", "sleeping"],
    },
    "sessions show": {
        0: lambda w, t: [*w.at(w.good), "sessions", "show", w.sid],
        1: lambda w, t: [*w.at(w.bad), "sessions", "show", w.garbage],
        2: lambda w, t: [*w.at(w.good), "sessions", "show"],
    },
    "sessions tree": {
        0: lambda w, t: [*w.at(w.good), "sessions", "tree"],
        2: lambda w, t: [*w.at(w.good), "sessions", "tree", "not-an-id"],
    },
    "status": {
        0: lambda w, t: [*w.at(w.good), "status"],
        1: lambda w, t: [*w.at(w.bad), "status"],
        2: lambda w, t: ["--sessions-dir", str(t / "missing"), "status"],
    },
}


def _copy(d: Path, t: Path) -> Path:
    """A copy of ``d`` (prune removes)."""
    import shutil

    dst = t / "copy"
    shutil.copytree(d, dst)
    return dst


def _existing(t: Path) -> Path:
    p = t / "there.html"
    p.write_text("not ours")
    return p


def _backup(w: World, t: Path) -> Path:
    b = t / "backup"
    assert invoke([*w.at(w.good), "backup", "--all", "--to", str(b), "-q"]).code == 0
    return b


def test_every_command_has_a_row_and_a_scenario_per_code() -> None:
    rows = table()
    commands = {" ".join(p[1:]) for p, c in iter_commands(cli, ["agentdb"]) if len(p) > 1}
    commands -= {p for p in commands if isinstance(_cmd(p), click.Group)}
    assert set(rows) == commands, "docs/exit-codes.md needs a row for every command"
    assert set(S) == commands
    for name, codes in rows.items():
        want = set(codes) - {130}
        assert set(S[name]) == want, (name, "scenarios must match the table's codes")
        assert 130 in codes, name  # every command can be interrupted


def _cmd(path: str) -> click.Command:
    cmd: click.Command = cli
    ctx = click.Context(cli)
    for part in path.split():
        assert isinstance(cmd, click.Group)
        sub = cmd.get_command(ctx, part)
        assert sub is not None
        cmd = sub
    return cmd


CASES = [(name, code) for name, codes in S.items() for code in codes]


@pytest.mark.parametrize(("name", "code"), CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_exit_code(world: World, tmp_path: Path, name: str, code: int) -> None:
    argv = S[name][code](world, tmp_path)
    ran = invoke(argv)
    assert ran.code == code, (argv, ran.out[-800:], ran.err[-800:])
    if code == 2:
        assert ran.err.strip(), "a usage error is said on stderr"
    if code == 1:
        assert (ran.err + ran.out).strip(), "the problem is said"
    assert "Traceback" not in ran.err


@pytest.mark.parametrize("name", sorted(S))
def test_interrupted_is_130(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Ctrl-C (KeyboardInterrupt) where a command starts its work: 130, one line."""

    def interrupted(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    argv = S[name][0](world, tmp_path)  # before the patch: a scenario may run a command
    monkeypatch.setattr(paths, "require_sessions_dir", interrupted)
    monkeypatch.setattr(demo, "build", interrupted)
    monkeypatch.setattr(output, "emit_text", interrupted)  # completion's one step
    ran = invoke(argv)
    assert ran.code == 130, (argv, ran.err[-500:])
    assert "interrupted" in ran.err and "Traceback" not in ran.err
