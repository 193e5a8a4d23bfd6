from __future__ import annotations

from pathlib import Path

from agentdb.cli.main import main
from tests.support import run_cli


def test_version_and_help_exit_zero(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["--version"]) == 0
    assert "agentdb" in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert "sessions" in capsys.readouterr().out.lower()


def test_unknown_option_is_usage_error() -> None:
    r = run_cli("--no-such-option")
    assert r.returncode == 2 and r.stdout == ""


def test_demo_builds_a_sample_state(tmp_path: Path) -> None:
    r = run_cli("demo", "--no-walkthrough", str(tmp_path / "demo"))
    assert r.returncode == 0, r.stderr
    sessions = list((tmp_path / "demo" / "state" / "agent" / "sessions").glob("*.sqlite"))
    assert len(sessions) == 9
    for role in ("parent", "child", "running", "old-revision", "pinned", "damaged"):
        assert role in r.stdout
    # nothing beside the session files: every writer closed cleanly
    others = [
        p.name
        for p in (tmp_path / "demo" / "state" / "agent" / "sessions").iterdir()
        if not p.name.endswith(".sqlite")
    ]
    assert others == []


def test_demo_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep me")
    r = run_cli("demo", str(tmp_path))
    assert r.returncode == 2
    assert (tmp_path / "x").read_text() == "keep me"


def test_sessions_dir_that_is_a_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "not-a-dir"
    f.write_text("x")
    r = run_cli("--sessions-dir", str(f), "check")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "not a directory" in r.stderr
    assert f.read_text() == "x"
