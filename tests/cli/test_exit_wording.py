"""The words that go with the exit codes: a dry run says what it would do, -q is quiet,
backup's time is wall time, status does not count damage no check has judged yet, and an
unreadable session is named by its file."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from agentdb.index import verdicts
from tests.runner import Agentdb
from tests.salvage.corpus import pages_of, zero_page
from tests.support import make_session


def _damaged(sessions_dir: Path) -> str:
    sid, path = make_session(sessions_dir, turns=30)
    zero_page(path, pages_of(path, "events", "leaf")[1])
    return sid


def test_recover_dry_run_says_would_recover(sessions_dir: Path, agentdb: Agentdb) -> None:
    sid = _damaged(sessions_dir)
    code, out, err = agentdb("--sessions-dir", str(sessions_dir), "recover", sid, "--dry-run")
    assert code == 0
    assert "would recover" in err and "recovered" not in err
    assert "would recover" in out and not re.search(r"\brecovered\b", out.split("\n", 2)[2])


def test_recover_quiet_prints_no_warnings(sessions_dir: Path, agentdb: Agentdb) -> None:
    sid = _damaged(sessions_dir)
    code, out, err = agentdb("--sessions-dir", str(sessions_dir), "recover", sid, "-q")
    assert code == 0 and err == "" and sid in out  # the table still says it


def test_backup_time_is_wall_time(sessions_dir: Path, agentdb: Agentdb, tmp_path: Path) -> None:
    for _ in range(8):
        make_session(sessions_dir, turns=3)
    g = ["--sessions-dir", str(sessions_dir)]
    t0 = time.monotonic()
    code, _, err = agentdb(*g, "backup", "--all", "--to", str(tmp_path / "b"), "--jobs", "2")
    wall = time.monotonic() - t0
    assert code == 0
    shown = float(re.search(r"written in ([\d.]+)s", err).group(1))  # type: ignore[union-attr]
    assert shown <= wall + 0.01
    doc = json.loads(
        agentdb(*g, "backup", "--all", "--to", str(tmp_path / "c"), "--json", "--jobs", "2").out
    )
    assert doc["wall_seconds"] > 0


def test_status_before_any_check_says_not_yet_checked(
    sessions_dir: Path, agentdb: Agentdb, tmp_path: Path
) -> None:
    make_session(sessions_dir, turns=1)
    _damaged(sessions_dir)  # only a check finds it
    g = ["--sessions-dir", str(sessions_dir)]
    env = {"XDG_CACHE_HOME": str(tmp_path / "fresh-cache")}  # no verdict recorded yet
    code, out, _ = agentdb(*g, "status", env=env)
    damaged = next(line for line in out.splitlines() if line.startswith("damaged"))
    assert "not yet checked" in damaged, damaged
    time.sleep(verdicts.FINE_GRANULARITY_NS / 1e9 * 2)  # settled: the verdict is believed
    agentdb(*g, "check", env=env)
    code, out, _ = agentdb(*g, "status", env=env)
    damaged = next(line for line in out.splitlines() if line.startswith("damaged"))
    assert damaged.split()[1] == "1" and "not yet" not in damaged, damaged


def test_unreadable_sessions_are_named_by_their_files(sessions_dir: Path, agentdb: Agentdb) -> None:
    make_session(sessions_dir, turns=1)
    bad = sessions_dir / "01ARZ3NDEKTSV4RRFFQ69G5FAV.sqlite"
    bad.write_bytes(b"not a database " * 100)
    bad.chmod(0o600)
    g = ["--sessions-dir", str(sessions_dir)]
    for argv in (["sessions", "costs"], ["plugins", "refs"], ["plugins", "users", "anthropic"]):
        code, _, err = agentdb(*g, *argv)
        assert code == 1 and str(bad) in err, (argv, err)
