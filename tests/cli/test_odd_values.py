"""Odd option values: each is a one-line usage error naming the option or file (exit 2), before
anything runs; never a traceback, never silently acted on."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from agentdb.cli.main import cli
from tests.runner import Agentdb
from tests.support import make_session


@pytest.fixture
def two(sessions_dir: Path) -> tuple[Path, list[str]]:
    ids = [make_session(sessions_dir, turns=1)[0], make_session(sessions_dir, turns=1)[0]]
    return sessions_dir, ids


def one_line_error(err: str, *names: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in names:
        assert n in lines[0], (n, err)


def test_events_after_beyond_sqlite_integers(two, agentdb: Agentdb) -> None:
    sdir, ids = two
    code, out, err = agentdb(
        "--sessions-dir", str(sdir), "events", ids[0], "--after", "9223372036854775808"
    )
    assert code == 2 and out == ""
    one_line_error(err, "--after")
    code, out, err = agentdb(
        "--sessions-dir", str(sdir), "events", ids[0], "--after", str(2**63 - 1)
    )
    assert code == 0, err
    assert out == ""  # no event has a sequence above the largest one


def test_backup_to_below_a_file(two, tmp_path: Path, agentdb: Agentdb) -> None:
    sdir, _ = two
    f = tmp_path / "file"
    f.write_text("keep")
    code, _, err = agentdb("--sessions-dir", str(sdir), "backup", "--all", "--to", str(f / "sub"))
    assert code == 2
    one_line_error(err, "--to", str(f), "not a directory")
    code, _, err = agentdb("--sessions-dir", str(sdir), "backup", "--all", "--to", str(f))
    assert code == 2
    one_line_error(err, "--to", str(f), "not a directory")
    assert f.read_text() == "keep"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_backup_to_proc(two, agentdb: Agentdb) -> None:
    sdir, _ = two
    code, _, err = agentdb("--sessions-dir", str(sdir), "backup", "--all", "--to", "/proc/self")
    assert code in (1, 2), err
    one_line_error(err, "/proc/self")


def test_demo_below_a_file(tmp_path: Path, agentdb: Agentdb) -> None:
    f = tmp_path / "file"
    f.write_text("keep")
    code, out, err = agentdb("demo", str(f / "sub"))
    assert code == 2 and out == ""
    one_line_error(err, str(f), "not a directory")
    assert f.read_text() == "keep"


@pytest.mark.parametrize("option", ["--sessions-dir", "--plugin-cache"])
def test_empty_directory_option_is_a_usage_error(
    two, tmp_path: Path, monkeypatch, agentdb: Agentdb, option: str
) -> None:
    """``""`` would mean the current directory without saying so; the cwd here holds sessions."""
    sdir, _ = two
    monkeypatch.chdir(sdir)
    others = ["--sessions-dir", str(sdir)] if option == "--plugin-cache" else []
    code, out, err = agentdb(*others, option, "", "check", "--json")
    assert code == 2 and out == ""
    one_line_error(err, option, "empty")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e300", "x", ""])
def test_migrate_wait_rejects_non_finite_and_absurd(two, agentdb: Agentdb, value: str) -> None:
    sdir, _ = two
    code, out, err = agentdb("--sessions-dir", str(sdir), "migrate", "--all", "--wait", value)
    assert code == 2 and out == ""
    one_line_error(err, "--wait")


@pytest.mark.slow
def test_migrate_wait_zero_is_fine(two, agentdb: Agentdb) -> None:
    sdir, _ = two
    code, _, err = agentdb("--sessions-dir", str(sdir), "migrate", "--all", "--wait", "0")
    assert code == 0, err


def _commands_with(option: str) -> list[list[str]]:
    """Every command path (as argv) whose command takes ``option``: read from the click tree."""
    found: list[list[str]] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None:
                    walk(sub, [*path, name])
        elif any(option in p.opts for p in cmd.params):
            found.append(path)

    walk(cli, [])
    return found


@pytest.mark.slow
def test_every_fmt_option_is_validated(two, agentdb: Agentdb) -> None:
    sdir, ids = two
    commands = _commands_with("--fmt")
    assert ["check"] in commands and ["events"] in commands and len(commands) >= 8
    for argv in commands:
        args = [ids[0] if a == "ID" else a for a in argv]
        extra = [ids[0]] if argv in (["events"], ["preflight"], ["sessions", "show"]) else []
        code, out, err = agentdb("--sessions-dir", str(sdir), *args, *extra, "--fmt", "bogus")
        assert code == 2 and out == "", (argv, err)
        one_line_error(err, "--fmt", "bogus", "github")
    code, out, err = agentdb("--sessions-dir", str(sdir), "check", "--fmt", "github")
    assert code == 0, err
    assert "|" in out  # a github table


@pytest.mark.slow
def test_backup_into_the_sessions_directory_is_refused(
    two, tmp_path: Path, agentdb: Agentdb
) -> None:
    sdir, _ = two
    before = sorted(p.name for p in sdir.iterdir())
    link = tmp_path / "link-to-sessions"
    link.symlink_to(sdir)
    for dest in (sdir, sdir / "backups", sdir / "a" / "b", link, link / "x"):
        code, out, err = agentdb("--sessions-dir", str(sdir), "backup", "--all", "--to", str(dest))
        assert code == 2 and out == "", (dest, err)
        one_line_error(err, str(dest), "sessions directory")
    assert sorted(p.name for p in sdir.iterdir()) == before  # nothing created in it
    code, _, err = agentdb(
        "--sessions-dir", str(sdir), "backup", "--all", "--to", str(tmp_path / "bk")
    )
    assert code == 0, err


def test_relative_xdg_state_home_is_named(tmp_path: Path, monkeypatch, agentdb: Agentdb) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    code, out, err = agentdb("check")
    assert code == 2 and out == ""
    one_line_error(err, "XDG_STATE_HOME", "'relative/state'", "ignored", "absolute")
    # an absolute one that does not exist keeps the plain message
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "nowhere"))
    code, _, err = agentdb("check")
    assert code == 2
    one_line_error(err, str(tmp_path / "nowhere"), "does not exist")
    assert "ignored" not in err


@pytest.mark.slow
def test_relative_xdg_cache_home_is_named(
    two, tmp_path: Path, monkeypatch, agentdb: Agentdb
) -> None:
    sdir, ids = two
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    code, _, err = agentdb("--sessions-dir", str(sdir), "preflight", ids[0])
    assert code == 1  # every producer is missing from a cache that does not exist
    assert "XDG_CACHE_HOME='relative/cache' is ignored" in err
    # with --plugin-cache the variable plays no part
    code, _, err = agentdb(
        "--sessions-dir", str(sdir), "--plugin-cache", str(tmp_path), "preflight", ids[0]
    )
    assert "XDG_CACHE_HOME" not in err


@pytest.mark.parametrize("value", ["999999999w", "1001y", "-1d", "1.5d", "", "0"])
def test_durations_out_of_range(two, agentdb: Agentdb, value: str) -> None:
    sdir, _ = two
    for argv in (
        ["prune", "--dry-run", "--older-than", value],
        ["sessions", "list", "--newer-than", value],
    ):
        code, out, err = agentdb("--sessions-dir", str(sdir), *argv)
        assert code == 2 and out == "", (argv, err)
        one_line_error(err, argv[-2])


def test_usage_errors_are_one_line(two, agentdb: Agentdb) -> None:
    sdir, ids = two
    for argv in (
        ["--no-such-option"],
        ["no-such-command"],
        ["check", "--jobs", "0"],
        ["check", ids[0].lower()],
        ["migrate"],
        ["backup", "--all"],
        ["events"],
    ):
        code, out, err = agentdb("--sessions-dir", str(sdir), *argv)
        assert code == 2 and out == "", (argv, err)
        one_line_error(err, "agentdb")


def test_output_dir_through_a_dangling_symlink(two, tmp_path: Path, agentdb: Agentdb) -> None:
    sdir, _ = two
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    for argv in (["demo", str(link)], ["backup", "--all", "--to", str(link)]):
        code, out, err = agentdb("--sessions-dir", str(sdir), *argv)
        assert code == 2 and out == "", (argv, err)
        one_line_error(err, str(link), "does not exist")
    assert not (tmp_path / "nowhere").exists()


def test_a_group_without_a_command_shows_its_help(agentdb: Agentdb) -> None:
    for argv, listed in (([], "migrate"), (["sessions"], "tree"), (["plugins"], "refs")):
        code, out, err = agentdb(*argv)
        assert code == 2
        assert "Usage:" in err and listed in err and "Traceback" not in err


@pytest.mark.slow
def test_report_html_needs_a_file_name(two, tmp_path: Path, agentdb: Agentdb) -> None:
    sdir, _ = two
    f = tmp_path / "file"
    f.write_text("keep")
    for value, words in (("", "empty"), (str(tmp_path), "is a directory"), (f"{f}/r.html", str(f))):
        code, out, err = agentdb("--sessions-dir", str(sdir), "report", "--html", value)
        assert code == 2 and out == "", (value, err)
        one_line_error(err, "--html", words)
    assert f.read_text() == "keep"
