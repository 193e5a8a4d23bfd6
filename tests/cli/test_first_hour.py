"""What a newcomer meets first: examples in ``agentdb --help``, "did you mean" for a mistyped
command, ``agentdb completion SHELL``, whole command summaries in man agentdb(1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentdb import __file__ as package_file
from tests.runner import Agentdb, run_cli
from tests.support import SRC


def test_top_level_help_ends_with_examples(agentdb: Agentdb) -> None:
    code, out, _ = agentdb("--help")
    assert code == 0
    examples = out.split("Examples:", 1)[1]
    for line in ("$ agentdb demo", "$ agentdb status", "$ agentdb events --follow"):
        assert line in examples


@pytest.mark.parametrize(
    ("argv", "typo", "meant"),
    [
        (["chek"], "chek", "'check'"),
        (["sesions", "list"], "sesions", "'sessions'"),
        (["sessions", "lst"], "lst", "'list'"),
        (["plugins", "ref"], "ref", "'refs'"),
        (["restor"], "restor", "'restore'"),
    ],
)
def test_a_mistyped_command_gets_did_you_mean(
    agentdb: Agentdb, argv: list[str], typo: str, meant: str
) -> None:
    code, out, err = agentdb(*argv)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert f"No such command {typo!r}. Did you mean {meant}?" in lines[0]


def test_an_unknown_command_with_nothing_close_says_so(agentdb: Agentdb) -> None:
    code, _, err = agentdb("xyzzy")
    assert code == 2 and "No such command 'xyzzy'." in err and "Did you mean" not in err


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_clicks_script(shell: str) -> None:
    r = run_cli("completion", shell)
    assert r.returncode == 0, r.stderr
    raw = run_cli(env={"_AGENTDB_COMPLETE": f"{shell}_source"})
    assert r.stdout == raw.stdout  # the same script as click's environment variable gives
    assert "_AGENTDB_COMPLETE" in r.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_completion_script_completes_commands_in_bash(tmp_path: Path) -> None:
    """bash loads the script and, asked as the shell asks, agentdb answers with commands."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "agentdb"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m agentdb.cli.main "$@"\n')
    script.chmod(0o755)
    body = (
        'eval "$(agentdb completion bash)"\n'
        "complete -p agentdb\n"
        "COMP_WORDS=(agentdb che); COMP_CWORD=1\n"
        "_agentdb_completion agentdb\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(SRC)}
    r = subprocess.run(["bash", "-c", body], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "complete -o nosort -F _agentdb_completion agentdb" in r.stdout
    assert "check" in r.stdout.splitlines()


def test_man_agentdb_lists_whole_summaries() -> None:
    page = (Path(package_file).parent / "man" / "agentdb.1").read_text()
    commands = page.split(".SH COMMANDS", 1)[1].split(".SH", 1)[0]
    assert not [ln for ln in commands.splitlines() if ln.endswith("...")]  # none cut short
    assert "and the next commands to run" in commands  # status's summary, to its end
