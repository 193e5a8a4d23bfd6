"""Man pages are generated from the click tree and checked in; this fails on drift."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import click
import pytest

from agentdb.cli.main import cli
from agentdb.cli.manpages import all_pages, iter_commands, page_name

MAN = Path(__file__).resolve().parents[2] / "man"
COMMANDS = iter_commands(cli, ["agentdb"])
IDS = [" ".join(p) for p, _ in COMMANDS]


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_page_exists_matches_and_lists_every_option(path: list[str], cmd: click.Command) -> None:
    page = MAN / (page_name(path) + ".1")
    assert page.exists(), f"{page} missing: run `python -m agentdb.cli.manpages man`"
    text = page.read_text()
    assert text == all_pages()[page.name], f"{page} is stale: regenerate it"
    ctx = cmd.make_context(" ".join(path), [], resilient_parsing=True)
    for param in cmd.get_params(ctx):
        if isinstance(param, click.Option):
            for opt in param.opts:
                assert opt.replace("-", "\\-") in text, f"{opt} not in {page.name}"
    assert (cmd.help or "").strip(), f"{' '.join(path)} has no help text"


def test_no_page_without_a_command() -> None:
    pages = {p.name for p in MAN.glob("agentdb*.1")}
    assert pages == set(all_pages())


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_check_page_renders() -> None:
    out = subprocess.run(
        ["man", "-l", str(MAN / "agentdb-check.1")],
        capture_output=True,
        text=True,
        env={"MANPAGER": "cat", "PAGER": "cat", "PATH": "/usr/bin:/bin", "MANWIDTH": "100"},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "--quick" in out.stdout.replace("‐", "-")
