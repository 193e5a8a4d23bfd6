"""The newcomer path: README's first command, then every command the demo prints, run verbatim
in a shell that has not activated the venv (as right after ``pip install``), and in one that
has."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "agentdb"  # this venv's console script
BARE_PATH = "/usr/bin:/bin"


def readme_first_command() -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(r"```sh\n(.*?)\n```", text, re.S).group(1)  # type: ignore[union-attr]


def printed(out: str) -> tuple[list[str], list[str]]:
    """The walk-through's ``$`` lines and the "Try it yourself" lines, as printed."""
    shown = [m.group(1) for m in re.finditer(r"^\$ (.*?)    # ", out, re.M)]
    tail = out.split("Try it yourself", 1)[1].splitlines()[1:]
    return shown, [ln[2:] for ln in tail if ln.startswith("  ")]


def run_verbatim(lines: list[str], export: str, env: dict[str, str]) -> list[tuple[int, str]]:
    """Each line in its own bash after ``export``: its exit code and its output."""
    done = []
    for line in lines:
        r = subprocess.run(
            ["bash", "-c", f"{export}\n{line}"],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        assert "Traceback" not in r.stderr, (line, r.stderr)
        done.append((r.returncode, r.stdout + r.stderr))
    return done


def check_printed(out: str, env: dict[str, str], agentdb_cmd: str) -> None:
    shown, lines = printed(out)
    export = lines[0]
    assert export.startswith("export XDG_STATE_HOME=/"), lines
    commands = lines[1:]
    assert all(ln.startswith(agentdb_cmd + " ") for ln in [*shown, *commands[:-1]]), lines
    for line, (code, text) in zip(commands, run_verbatim(commands, export, env), strict=True):
        if line.startswith(("man ", "MANPATH=")):
            if shutil.which("man") is None:
                continue
            assert code == 0 and "AGENTDB-CHECK" in text, (line, text)
            continue
        assert code in (0, 1), (line, code, text)  # 1: the demo keeps an interrupted session
        assert "command not found" not in text
    # the walk-through's lines too (each was run once already: they answer again)
    for line, (code, text) in zip(shown, run_verbatim(shown, export, env), strict=True):
        assert code in (0, 1), (line, code, text)


def bare_env(tmp_path: Path) -> dict[str, str]:
    """A login shell's environment right after ``pip install``: the venv is not on PATH."""
    return {
        "PATH": BARE_PATH,
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
        "MANPAGER": "cat",
        "PAGER": "cat",
        "LANG": "C.UTF-8",
    }


def test_readme_first_command_is_the_one_tested() -> None:
    assert readme_first_command() == (
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/agentdb demo"
    ), "README's first command changed: update the newcomer path"


@pytest.mark.skipif(not SCRIPT.exists(), reason="no agentdb console script beside this python")
def test_try_it_yourself_runs_as_printed_without_the_venv_on_path(tmp_path: Path) -> None:
    """README's first command's effect with this checkout's venv in place of a fresh one:
    ``.venv/bin/agentdb demo`` from a shell that has not activated the venv."""
    env = bare_env(tmp_path)
    r = subprocess.run(
        [str(SCRIPT), "demo", "--no-walkthrough"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    m = re.search(r"remove it with `rm -rf (\S+)` when done", r.stdout)
    assert m and Path(m.group(1)).parent == tmp_path, r.stdout[:500]
    check_printed(r.stdout, env, str(SCRIPT))
    assert (Path(m.group(1)) / "report.html").exists()  # the report line wrote where it said
    assert "activate" in r.stdout.split("Try it yourself", 1)[1]


@pytest.mark.slow
@pytest.mark.skipif(not SCRIPT.exists(), reason="no agentdb console script beside this python")
def test_every_line_the_demo_prints_runs_as_printed(tmp_path: Path) -> None:
    """The whole walk-through's lines too, with the venv off PATH and on it (activated)."""
    env = bare_env(tmp_path)
    r = subprocess.run(
        [str(SCRIPT), "demo", str(tmp_path / "off")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert printed(r.stdout)[0], "no walk-through lines"
    check_printed(r.stdout, env, str(SCRIPT))
    on_path = {**env, "PATH": f"{SCRIPT.parent}:{BARE_PATH}"}
    r = subprocess.run(
        ["agentdb", "demo", str(tmp_path / "on")],
        capture_output=True,
        text=True,
        env=on_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    check_printed(r.stdout, on_path, "agentdb")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git for a fresh clone")
def test_newcomer_path_on_a_fresh_clone(tmp_path: Path) -> None:
    """README's first command verbatim in a fresh clone (a real ``pip install .``: the man pages
    land in the venv's share/man), then each line the demo printed."""
    clone = tmp_path / "clone"
    r = subprocess.run(
        ["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot clone the checkout: {r.stderr.strip()}")
    # the working tree's README and sources, committed or not
    for rel in ("README.md", "src", "pyproject.toml"):
        dest = clone / rel
        if dest.is_dir():
            shutil.rmtree(dest)
        src = ROOT / rel
        if src.is_dir():
            shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, dest)
    # pip's own settings (its index) carry over; nothing else of this environment does
    keep = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    user_conf = Path.home() / ".config" / "pip" / "pip.conf"  # HOME changes below
    if user_conf.exists() and "PIP_CONFIG_FILE" not in keep:
        keep["PIP_CONFIG_FILE"] = str(user_conf)
    env = {**keep, **bare_env(tmp_path)}
    r = subprocess.run(
        ["bash", "-c", readme_first_command()],
        cwd=clone,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if r.returncode != 0 and "No matching distribution" in r.stderr:
        pytest.skip("no package index reachable for pip install .")
    assert r.returncode == 0, r.stderr[-3000:]
    venv_script = clone / ".venv" / "bin" / "agentdb"
    check_printed(r.stdout, env, str(venv_script))
    _, lines = printed(r.stdout)
    assert lines[-1].startswith("MANPATH="), lines  # pip put the pages in the venv's share/man
    # activated: `agentdb` and `man agentdb-check` as they are
    activated = {**env, "PATH": f"{venv_script.parent}:{BARE_PATH}"}
    r = subprocess.run(
        ["agentdb", "demo", str(tmp_path / "second")],
        capture_output=True,
        text=True,
        env=activated,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    check_printed(r.stdout, activated, "agentdb")
    assert printed(r.stdout)[1][-1] == "man agentdb-check"
