"""What every command shares: -q/-v/--no-progress, --csv/--nl, JSON errors, the environment
variables, id hints and completion, tables that fit the terminal, progress with rate and ETA."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from pathlib import Path

import click
import pytest

from agentdb.cli import output
from agentdb.cli.main import cli
from tests.runner import Agentdb, Terminal, run_cli
from tests.support import make_session


@pytest.fixture
def two(sessions_dir: Path) -> list[str]:
    return [make_session(sessions_dir, turns=1)[0] for _ in range(2)]


def test_every_command_has_the_common_options() -> None:
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = cli.get_command(ctx, name)  # type: ignore[attr-defined]
        assert cmd is not None
        subs = cmd.commands.values() if isinstance(cmd, click.Group) else [cmd]
        for sub in subs:
            opts = {o for p in sub.params for o in getattr(p, "opts", [])}
            assert {"-q", "-v", "--no-progress"} <= opts, sub.name
            if any(p.name == "fmt" for p in sub.params):
                assert {"--csv", "--nl"} <= opts, sub.name


@pytest.mark.slow
def test_quiet_drops_the_summary_line(sessions_dir: Path, two: list[str], agentdb: Agentdb) -> None:
    code, out, err = agentdb("--sessions-dir", str(sessions_dir), "check")
    assert code == 0 and "2 sessions checked" in err and two[0] in out
    code, out, err = agentdb("--sessions-dir", str(sessions_dir), "check", "-q")
    assert code == 0 and err == "" and two[0] in out


@pytest.mark.slow
def test_csv_and_nl(sessions_dir: Path, two: list[str], agentdb: Agentdb) -> None:
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "check", "--csv")
    rows = list(csv.reader(io.StringIO(out)))
    assert code == 0
    assert rows[0][0] == "session" and "verdict" in rows[0]
    assert [r[0] for r in rows[1:]] == sorted(two)
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "check", "--nl")
    docs = [json.loads(line) for line in out.splitlines()]
    assert [d["session"] for d in docs] == sorted(two)
    assert all(d["verdict"] == "ok" for d in docs)
    code, _, err = agentdb("--sessions-dir", str(sessions_dir), "check", "--csv", "--nl")
    assert code == 2 and "--csv or --nl" in err


def test_errors_under_json_are_json_on_stderr(sessions_dir: Path, agentdb: Agentdb) -> None:
    code, out, err = agentdb("--sessions-dir", str(sessions_dir / "nope"), "check", "--json")
    assert code == 2 and out == ""
    doc = json.loads(err)
    assert doc["version"] == 1 and doc["error"]["exit"] == 2
    assert "nope" in doc["error"]["message"]
    code, out, err = agentdb("--sessions-dir", str(sessions_dir), "check", "--json", "bad-id")
    assert code == 2 and json.loads(err)["error"]["code"] == "usage"
    code, out, err = agentdb("--sessions-dir", str(sessions_dir / "nope"), "check")
    assert code == 2 and err.startswith("agentdb: ") and len(err.strip().splitlines()) == 1


def test_lower_case_id_suggests_upper_case(sessions_dir: Path, agentdb: Agentdb) -> None:
    sid = "01arz3ndektsv4rrffq69g5fav"
    code, _, err = agentdb("--sessions-dir", str(sessions_dir), "check", sid)
    assert code == 2 and sid.upper() in err


@pytest.mark.slow
def test_sessions_dir_from_the_environment(sessions_dir: Path, two: list[str]) -> None:
    r = run_cli("check", "--json", env={"AGENTDB_SESSIONS_DIR": str(sessions_dir)})
    assert r.returncode == 0, r.stderr
    assert sorted(s["session_id"] for s in json.loads(r.stdout)["sessions"]) == sorted(two)


@pytest.mark.slow
def test_completion_offers_session_ids(sessions_dir: Path, two: list[str]) -> None:
    r = run_cli(
        "check",
        env={
            "AGENTDB_SESSIONS_DIR": str(sessions_dir),
            "_AGENTDB_COMPLETE": "bash_complete",
            "COMP_WORDS": "agentdb check " + two[0][:20],
            "COMP_CWORD": "2",
        },
    )
    assert two[0] in r.stdout and two[1] not in r.stdout.replace(two[0], "")


def test_long_tables_are_drawn_in_chunks_that_line_up(capsys) -> None:
    rows = [(f"id{i:05d}", "x" * (i % 7 + 1), f"n{i}") for i in range(output.CHUNK_ROWS * 2 + 17)]
    with click.Context(cli):
        output.emit_table(rows, ["id", "text", "n"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(rows) + 2  # one header and one rule line, whatever the length
    starts = {line.index(f"n{i}") for i, line in enumerate(lines[2:])}
    assert len(starts) == 1  # the last column starts at the same place in every chunk


@pytest.mark.slow
def test_terminal_tables_wrap_and_never_cut(tmp_path: Path) -> None:
    """On a 100-column terminal a long finding wraps; every word of it is shown."""
    sessions = tmp_path / "s"
    sessions.mkdir(mode=0o700)
    sid, path = make_session(sessions, turns=1)
    (sessions / f"{sid}.sqlite.agentdb-recover-tmp").write_bytes(b"left by a killed job")
    with Terminal(
        "--sessions-dir",
        str(sessions),
        "check",
        stdout=True,
        stderr=False,
        env={"COLUMNS": "100", "LINES": "24"},
    ) as t:
        _, _, text = t.finish(timeout=60)
    lines = text.replace("\r", "").splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert "..." not in text
    words = re.findall(r"\S+", " ".join(lines))
    assert sid in " ".join(lines) and len(words) > 5


def test_progress_shows_count_rate_and_eta() -> None:
    bar = output.ProgressLine("checking", enabled=True, width=10)
    line = bar.line(50, 200, bar._start + 10.0)
    assert "50/200" in line and "5.0/s" in line and "ETA 0:30" in line


@pytest.mark.slow
def test_progress_never_leaves_a_stale_count(capsys: pytest.CaptureFixture[str]) -> None:
    """An update that comes too soon after the last redraw is drawn a moment later: a burst of
    finished files followed by a long wait (a worker waiting for a writer's lock) shows the
    real count, not the one before the burst."""
    bar = output.ProgressLine("migrating", enabled=True, width=10)
    for done in range(1, 11):  # within far less than the 0.1 s between redraws
        bar.update(done, 11)
    assert "10/11" not in capsys.readouterr().err  # not drawn yet...
    time.sleep(0.5)  # ...the job stalls here
    assert capsys.readouterr().err.rsplit("\r", 1)[-1].split("] ")[1].startswith("10/11")
    bar.update(11, 11)
    bar.close()
    assert "11/11" in capsys.readouterr().err
    time.sleep(0.2)
    bar.update(4, 11)  # drawn at once (the last redraw was 0.2 s ago)...
    bar.update(5, 11)  # ...so this one waits, and close() forgets it
    bar.close()
    time.sleep(0.3)
    err = capsys.readouterr().err
    assert "4/11" in err and "5/11" not in err


def test_every_command_has_examples_and_whole_summaries(agentdb: Agentdb) -> None:
    """Add a new command's examples to src/agentdb/cli/examples.py."""
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = cli.get_command(ctx, name)  # type: ignore[attr-defined]
        assert cmd is not None
        paths = [[name]] + (
            [[name, s] for s in cmd.commands] if isinstance(cmd, click.Group) else []
        )
        for path in paths:
            code, out, _ = agentdb(*path, "--help")  # 80 columns
            assert code == 0
            assert "Examples:" in out and "$ agentdb " in out, path
    top = " ".join(agentdb("--help").out.split())
    for name in cli.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = cli.get_command(ctx, name)  # type: ignore[attr-defined]
        assert cmd is not None
        first = cmd.get_short_help_str(limit=10_000)  # the first sentence, whole
        assert len(first) > 30 and not first.endswith("..."), name
        assert first in top, name  # wrapped on an 80-column terminal, never cut
