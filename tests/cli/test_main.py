"""agentdb itself: --version, --help, global options."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runner import Agentdb, run_cli


def test_version_and_help_exit_zero(agentdb: Agentdb) -> None:
    code, out, _ = agentdb("--version")
    assert code == 0
    assert "agentdb" in out
    code, out, _ = agentdb("--help")
    assert code == 0
    assert "sessions" in out.lower()


@pytest.mark.slow
def test_unknown_option_is_usage_error() -> None:
    r = run_cli("--no-such-option")
    assert r.returncode == 2 and r.stdout == ""


@pytest.mark.slow
def test_sessions_dir_that_is_a_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "not-a-dir"
    f.write_text("x")
    r = run_cli("--sessions-dir", str(f), "check")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "not a directory" in r.stderr
    assert f.read_text() == "x"
