"""The progress line on a real pseudo-terminal 80 columns wide: one line on stderr, redrawn in
place (``\\r`` and erase to the end of the line), never wider than the terminal, with a rate and
an ETA, erased at the end; on recover, restore and prune as on backup and check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.test_terminal_tables import build
from tests.runner import Terminal, invoke, state_options

_CSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def progress_seen(argv: list[str], cols: int = 80) -> tuple[int, list[str], str]:
    """Run ``argv`` with only stderr on the terminal; the progress lines drawn, and what the
    terminal shows at the end."""
    with Terminal(*argv, stdout=False, stderr=True, size=(cols, 24)) as t:
        code, _, seen = t.finish(timeout=900)
    draws = [_CSI.sub("", d) for d in seen.split("\r")]
    # The last draw is erased: everything after the last "\r\x1b[K" is what stays.
    return code, [d for d in draws if d.strip()], seen


def assert_behaves(argv: list[str], label: str, cols: int = 80) -> None:
    code, draws, seen = progress_seen(argv, cols)
    assert code in (0, 1), (argv, seen[-500:])
    bars = [d for d in draws if d.startswith(label)]
    assert bars, (argv, seen[-500:])
    assert all(len(d) <= cols - 1 for d in bars), max(bars, key=len)
    assert all("\n" not in d for d in bars)  # redrawn in place, never a new line
    assert any(re.search(r"\d+/\d+  [\d.]+/s  ETA \d+:\d\d", d) for d in bars), bars[-3:]
    assert seen.rstrip("\n").endswith("\r\x1b[K") or not seen.endswith(bars[-1])


def test_progress_on_recover_restore_and_prune(tmp_path: Path) -> None:
    state, ids, _ = build(tmp_path / "d", 60)
    g = state_options(state)
    backup = tmp_path / "backup"
    assert invoke([*g, "backup", "--all", "--to", str(backup), "-q"]).code in (0, 1)
    assert_behaves([*g, "recover", "--all", "--dry-run"], "recover")
    assert_behaves([*g, "restore", "--all", "--from", str(backup), "--dry-run"], "restore")
    assert_behaves([*g, "prune", "--older-than", "0s", "--dry-run", "--no-index"], "prune: judging")
    victims = ids[:40]
    assert_behaves([*g, "prune", *victims, "--yes", "--include-pinned"], "prune")


@pytest.mark.slow
def test_progress_on_a_long_job_stays_one_clipped_line(tmp_path: Path) -> None:
    state, _, _ = build(tmp_path / "d", 1500)
    g = state_options(state)
    for cols in (80, 200):
        assert_behaves([*g, "check", "--jobs", "1"], "checking", cols)
        assert_behaves([*g, "backup", "--all", "--to", str(tmp_path / f"b{cols}")], "backup", cols)
