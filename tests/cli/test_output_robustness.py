"""Output as a careful user expects it (issue 29, item 5): a closed stdout is one line and a
non-zero exit, never a traceback; a full stdout (``/dev/full``) is named ``stdout``; ``report
--html X --force`` killed by SIGTERM leaves no temp file, and one killed by SIGKILL leaves one
the next run removes; ``report --html -`` writes the page to stdout; U+202E and the other
invisible characters in session fields are shown as escapes in tables and in the page, while
JSON stays exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentdb import fsutil
from tests.runner import Agentdb, run_cli
from tests.support import make_session

CLI = [sys.executable, "-m", "agentdb.cli.main"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("AGENTDB_FAULT", "AGENTDB_PAUSE")}


def test_closed_stdout_is_one_line_and_non_zero(sessions_dir: Path) -> None:
    make_session(sessions_dir)
    for argv in (["check", "--all"], ["check", "--all", "--json"], ["status"]):
        p = subprocess.run(
            [*CLI, "--sessions-dir", str(sessions_dir), *argv],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: os.close(1),
            env=_env(),
            timeout=120,
        )
        assert p.returncode != 0, argv
        assert "Traceback" not in p.stderr, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "stdout" in lines[0], p.stderr


@pytest.mark.parametrize("json_out", [False, True])
def test_a_full_stdout_is_named_stdout(sessions_dir: Path, json_out: bool) -> None:
    make_session(sessions_dir)
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [*CLI, "--sessions-dir", str(sessions_dir), "check", "--all"]
            + (["--json"] if json_out else []),
            stdin=subprocess.DEVNULL,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            timeout=120,
        )
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    if json_out:
        err = json.loads(p.stderr)["error"]
        assert err["path"] == "stdout" and err["message"].startswith("stdout: "), err
    else:
        assert p.stderr.startswith("agentdb: stdout: No space left on device"), p.stderr
    assert "agentdb: agentdb" not in p.stderr


def _report_argv(sessions_dir: Path, target: Path) -> list[str]:
    return ["--sessions-dir", str(sessions_dir), "report", "--html", str(target), "--force"]


def _leftovers(d: Path, target: Path) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.startswith(f".{target.name}.agentdb-tmp-"))


def _terminated_at(point: str, argv: list[str], tmp_path: Path) -> int:
    """Run ``agentdb argv``, SIGTERM it once it pauses at ``point``; its return code."""
    pause = tmp_path / "pause"
    pause.mkdir()
    env = {**_env(), "AGENTDB_PAUSE": f"{point}:{pause}"}
    p = subprocess.Popen(
        [*CLI, *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not (pause / "reached").exists():
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode


def test_sigterm_while_replacing_the_report_leaves_no_temp_file(
    sessions_dir: Path, tmp_path: Path
) -> None:
    make_session(sessions_dir)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "r.html"
    target.write_text("the old report")
    code = _terminated_at("report_after_tmp", _report_argv(sessions_dir, target), tmp_path)
    assert code == -signal.SIGTERM
    assert _leftovers(out, target) == []
    assert target.read_text() == "the old report"  # the old page or the new, never half


def test_sigterm_while_creating_the_report_leaves_no_half_page(
    sessions_dir: Path, tmp_path: Path
) -> None:
    make_session(sessions_dir)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "r.html"
    argv = ["--sessions-dir", str(sessions_dir), "report", "--html", str(target)]
    assert _terminated_at("report_after_open", argv, tmp_path) == -signal.SIGTERM
    assert os.listdir(out) == []


def test_a_killed_runs_temp_file_is_removed_by_the_next_run(
    sessions_dir: Path, tmp_path: Path
) -> None:
    make_session(sessions_dir)
    target = tmp_path / "r.html"
    target.write_text("the old report")
    other_host = (
        tmp_path
        / f".r.html.agentdb-tmp-{'0badc0de' if fsutil.host_tag() != '0badc0de' else '0badc0df'}-1"
    )
    other_host.write_text("another host's run, maybe alive")
    r = run_cli(*_report_argv(sessions_dir, target), fault="report_after_tmp")
    assert r.returncode == -signal.SIGKILL
    [left] = [n for n in _leftovers(tmp_path, target) if n != other_host.name]
    assert fsutil.host_tag() in left
    r = run_cli(*_report_argv(sessions_dir, target))
    assert r.returncode in (0, 1), r.stderr
    assert _leftovers(tmp_path, target) == [other_host.name]
    assert "<html" in target.read_text()


def test_report_html_dash_writes_to_stdout(
    agentdb: Agentdb, sessions_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_session(sessions_dir)
    monkeypatch.chdir(tmp_path)
    code, out, err = agentdb("--sessions-dir", str(sessions_dir), "report", "--html", "-")
    assert code in (0, 1), err
    assert out.lstrip().startswith("<!DOCTYPE html") or "<html" in out[:200], out[:200]
    assert not (tmp_path / "-").exists()
    code, out, err = agentdb("--sessions-dir", str(sessions_dir), "report", "--html", "-", "--json")
    assert code == 2 and "stdout" in err and out == ""
    assert not (tmp_path / "-").exists()


RLO = "\u202e"


def test_bidi_overrides_are_shown_as_escapes(
    agentdb: Agentdb, sessions_dir: Path, tmp_path: Path
) -> None:
    profile = f"coder{RLO}txt.exe\u2066\u200b"
    sid, _ = make_session(sessions_dir, profile=profile)
    code, out, err = agentdb("--sessions-dir", str(sessions_dir), "sessions", "list")
    assert code == 0, err
    assert RLO not in out and "\u2066" not in out and "\u200b" not in out
    assert "coder\\u202etxt.exe\\u2066\\u200b" in out
    code, out, err = agentdb("--sessions-dir", str(sessions_dir), "sessions", "list", "--json")
    assert json.loads(out)["sessions"][0]["profile"] == profile  # JSON stays exact
    page = tmp_path / "r.html"
    agentdb("--sessions-dir", str(sessions_dir), "report", "--html", str(page))
    html = page.read_text()
    assert RLO not in html and "\u2066" not in html and "\u200b" not in html
    assert "coder\\u202etxt.exe" in html
