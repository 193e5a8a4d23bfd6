"""Ctrl-C and closed pipes, with real processes and real signals.

A job interrupted by SIGINT reports what it finished before the signal and exits 130; the
session in hand is as an interrupted run leaves it, and running the job again finishes.
An interrupt while Python is still importing agentdb prints one line, no traceback. A reader
that closes our stdout early (``agentdb events ID --json | head -1``) is not an error.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import apsw
import pytest

from agentdb.schema.revisions import CURRENT_REVISION
from tests.runner import Terminal
from tests.support import SRC, clone_session, make_session, wait_for

N = 60  # sessions in a run that gets interrupted
AGENTDB = [sys.executable, "-m", "agentdb.cli.main"]
PRUNE = ["prune", "--older-than", "0s", "--yes", "--json"]
SHELL_HEAD = ["bash", "-c", 'set -o pipefail; "$@" | head -1', "bash"]  # "$@" | head -1


def clones(sessions_dir: Path, n: int, *, revision: int) -> list[str]:
    """``n`` real sessions, fast: one made by the writer, copied under new ids (their
    session_meta row rewritten to match the file name, as every check demands)."""
    _, path = make_session(sessions_dir, turns=1, revision=min(revision, 2))
    ids = []
    for i in range(n):
        sid = f"01ARZ3NDEK{i:016d}"
        clone_session(path, sessions_dir, sid, revision=revision)
        ids.append(sid)
    os.unlink(path)
    return ids


def user_version(path: Path) -> int:
    """From the header, opening nothing through SQLite (no -shm/-wal appears)."""
    with open(path, "rb") as f:
        return int.from_bytes(f.read(64)[60:64], "big")


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "AGENTDB_FAULT"} | {"PYTHONPATH": str(SRC)}


def interrupt_after_progress(
    argv: list[str], at_least: int, settle: float = 0.0
) -> tuple[int, str, str]:
    """Run ``agentdb argv`` with stderr on a terminal (so it draws its progress bar); once the
    bar shows ``at_least`` sessions done (and ``settle`` seconds more), send SIGINT.
    Returns exit code, stdout, stderr."""

    def far_enough(seen: bytes) -> bool:
        done = [int(m) for m in re.findall(rb"\] (\d+)/\d+ ", seen)]
        return bool(done) and max(done) >= at_least

    with Terminal(*argv, env=env()) as t:
        t.read_until(far_enough)
        time.sleep(settle)
        t.send_signal(signal.SIGINT)
        return t.finish()


@pytest.mark.slow
def test_migrate_all_reports_what_it_migrated_before_ctrl_c(sessions_dir: Path) -> None:
    ids = clones(sessions_dir, N, revision=1)
    code, out, err = interrupt_after_progress(
        ["--sessions-dir", str(sessions_dir), "migrate", "--all", "-j1", "--json"], at_least=2
    )  # one process: the report is a prefix (with workers: tests/cli/test_jobs.py)
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    doc = json.loads(out)
    assert doc["interrupted"] is True
    reported = [s["session_id"] for s in doc["sessions"]]
    assert 2 <= len(reported) < N
    assert reported == ids[: len(reported)]  # in order, none skipped
    assert {s["outcome"] for s in doc["sessions"]} == {"migrated"}
    at_two = {
        sid for sid in ids if user_version(sessions_dir / f"{sid}.sqlite") == CURRENT_REVISION
    }
    assert set(reported) <= at_two
    assert len(at_two - set(reported)) <= 1  # at most the one in hand when the signal came
    # running it again finishes the job and leaves nothing behind
    r = subprocess.run(
        [*AGENTDB, "--sessions-dir", str(sessions_dir), "migrate", "--all", "--json"],
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert all(user_version(sessions_dir / f"{sid}.sqlite") == CURRENT_REVISION for sid in ids)
    assert sorted(p.name for p in sessions_dir.iterdir()) == sorted(f"{s}.sqlite" for s in ids)


_LOCKER = """
import sys, time, apsw
c = apsw.Connection(sys.argv[1])
c.execute("BEGIN IMMEDIATE")  # a kernel in the middle of a write transaction
print("locked", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_ctrl_c_ends_a_long_wait_for_a_lock_at_once(sessions_dir: Path) -> None:
    """``migrate --wait 3600`` on a session whose writer holds its write lock: Ctrl-C ends the
    wait within a second or two (SQLite's busy timeout would sleep out the hour)."""
    ids = clones(sessions_dir, 3, revision=1)
    locked = sessions_dir / f"{ids[1]}.sqlite"
    conn = apsw.Connection(str(locked))  # WAL, so readers (the probe, the backup) go on
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    holder = subprocess.Popen([sys.executable, "-c", _LOCKER, str(locked)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        argv = ["--sessions-dir", str(sessions_dir), "migrate", "--all", "--wait", "3600", "-j1"]
        start = time.monotonic()
        code, out, err = interrupt_after_progress([*argv, "--json"], at_least=1, settle=1.0)
        took = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    assert code == 130, err
    assert took < 30, f"Ctrl-C took {took:.1f}s to end the wait"
    doc = json.loads(out)
    assert [s["session_id"] for s in doc["sessions"]] == ids[:1]
    assert user_version(locked) == 1 and user_version(sessions_dir / f"{ids[2]}.sqlite") == 1


@pytest.mark.slow
def test_backup_all_reports_what_it_copied_before_ctrl_c(
    sessions_dir: Path, tmp_path: Path
) -> None:
    ids = clones(sessions_dir, N, revision=2)
    dest = tmp_path / "backups"
    argv = ["--sessions-dir", str(sessions_dir), "backup", "--all", "--to", str(dest), "-j1"]
    code, out, err = interrupt_after_progress([*argv, "--json"], at_least=2)
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    doc = json.loads(out)
    assert doc["interrupted"] is True
    reported = [s["session_id"] for s in doc["sessions"]]
    assert 2 <= len(reported) < N
    assert reported == ids[: len(reported)]
    assert {s["outcome"] for s in doc["sessions"]} == {"copied"}
    copies = {p.name.removesuffix(".sqlite") for p in dest.glob("*.sqlite")}
    assert set(reported) <= copies
    assert len(copies - set(reported)) <= 1


@pytest.mark.slow
def test_prune_reports_what_it_removed_before_ctrl_c(sessions_dir: Path) -> None:
    n = 200
    ids = clones(sessions_dir, n, revision=2)
    p = subprocess.Popen(
        [*AGENTDB, "--sessions-dir", str(sessions_dir), *PRUNE],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )

    def removed() -> int:
        return n - len(list(sessions_dir.glob("*.sqlite")))

    try:
        assert wait_for(lambda: removed() >= 3, timeout=120), "prune removed nothing"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    doc = json.loads(out)
    assert doc["interrupted"] is True and doc["dry_run"] is False
    gone = {sid for sid in ids if not (sessions_dir / f"{sid}.sqlite").exists()}
    assert 2 <= len(doc["removed"]) < n
    assert set(doc["removed"]) <= gone
    assert len(gone - set(doc["removed"])) <= 1  # the one in hand: its intent file says so
    r = subprocess.run(
        [*AGENTDB, "--sessions-dir", str(sessions_dir), *PRUNE],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert list(sessions_dir.iterdir()) == []  # finished, intent and all


@pytest.mark.slow
def test_ctrl_c_while_prune_creates_its_intent_never_leaves_it_cut(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """SIGINT the moment the intent file exists and is still empty (the window the test above
    hit by chance, one run in ten on a loaded machine): the intent is finished first, so the
    next run completes that removal instead of refusing an unreadable intent."""
    ids = clones(sessions_dir, 3, revision=2)
    gate = tmp_path / "gate"
    gate.mkdir()
    p = subprocess.Popen(
        [*AGENTDB, "--sessions-dir", str(sessions_dir), *PRUNE],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env() | {"AGENTDB_PAUSE": f"intent_created:{gate}"},
    )
    try:
        assert wait_for(lambda: (gate / "reached").exists(), timeout=120), "no intent made"
        intent = sessions_dir / f"{ids[0]}.sqlite.agentdb-prune-intent"
        assert intent.read_bytes() == b""
        p.send_signal(signal.SIGINT)
        time.sleep(0.2)  # delivered (and held back) while the intent is still empty
        (gate / "go").touch()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert json.loads(intent.read_bytes())["session_id"] == ids[0]  # whole
    r = subprocess.run(
        [*AGENTDB, "--sessions-dir", str(sessions_dir), *PRUNE],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(sessions_dir.iterdir()) == []


@pytest.mark.slow
def test_recover_all_reports_what_it_recovered_before_ctrl_c(sessions_dir: Path) -> None:
    n = 30
    ids = clones(sessions_dir, n, revision=2)
    for sid in ids:  # zero the last page: a broken b-tree that integrity_check sees
        with open(sessions_dir / f"{sid}.sqlite", "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(size - 4096)
            f.write(b"\0" * 4096)
    p = subprocess.Popen(
        [*AGENTDB, "--sessions-dir", str(sessions_dir), "recover", "--all", "--json"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )

    def kept() -> set[str]:  # originals renamed <id>.sqlite.corrupt: recoveries done
        return {q.name.split(".")[0] for q in sessions_dir.glob("*.sqlite.corrupt")}

    try:
        assert wait_for(lambda: len(kept()) >= 2, timeout=120), "recover recovered nothing"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    doc = json.loads(out)
    assert doc["interrupted"] is True
    recovered = [s["session_id"] for s in doc["sessions"]]
    assert {s["outcome"] for s in doc["sessions"]} == {"recovered"}
    assert 1 <= len(recovered) < n and recovered == ids[: len(recovered)]
    assert set(recovered) <= kept()
    assert len(kept() - set(recovered)) <= 1  # the one in hand
    r = subprocess.run(
        [*AGENTDB, "--sessions-dir", str(sessions_dir), "recover", "--all", "--json"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env(),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr  # the rest recovered, the in-hand one finished
    assert kept() == set(ids)


# --- start-up ---------------------------------------------------------------------------------

# A sitecustomize that pauses the import of one module (named by $PAUSE_IMPORT) and says so on
# stderr, so the test can send SIGINT exactly while agentdb is still starting up.
_SITE = """
import os, sys, time
class _Pause:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("PAUSE_IMPORT"):
            sys.stderr.write("pausing in import\\n"); sys.stderr.flush()
            time.sleep(60)
        return None
sys.meta_path.insert(0, _Pause())
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("click", ["check"]),  # the console script's own imports
        ("agentdb.cli.check", ["check"]),  # a command's module, loaded on first use
        ("agentdb.jobs.migrate", ["migrate", "--all"]),  # a job module under a command
        # drawing the first table (the plain formats are drawn without tabulate)
        ("tabulate", ["sessions", "list", "--fmt", "grid"]),
    ],
)
def test_ctrl_c_during_start_up_prints_no_traceback(
    tmp_path: Path, sessions_dir: Path, module: str, argv: list[str]
) -> None:
    make_session(sessions_dir, turns=1)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(_SITE))
    p = subprocess.Popen(
        [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions_dir), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**env(), "PYTHONPATH": f"{site}{os.pathsep}{SRC}", "PAUSE_IMPORT": module},
    )
    try:
        assert p.stderr is not None
        assert p.stderr.readline() == b"pausing in import\n"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = err.decode()
    assert p.returncode == 130, text
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1] == "agentdb: interrupted"


# --- closed pipes -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    d = tmp_path_factory.mktemp("long") / "sessions"
    d.mkdir(mode=0o700)
    sid, _ = make_session(d, turns=200)  # 1,200 events: far more than a pipe buffer holds
    return d, sid


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["events", "{id}", "--json"],
        ["events", "{id}"],
        ["sessions", "show", "{id}", "--json"],
        ["--help"],
    ],
)
def test_reader_closing_the_pipe_early_is_not_an_error(
    long_session: tuple[Path, str], argv: list[str]
) -> None:
    """``agentdb events ID --json | head -1``: exit 0, nothing on stderr."""
    sdir, sid = long_session
    args = [a.replace("{id}", sid) for a in argv]
    p = subprocess.Popen(
        [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sdir), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
    )
    assert p.stdout is not None and p.stderr is not None
    first = p.stdout.readline()  # what `head -1` reads
    assert first
    p.stdout.close()  # ... and then it exits
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0, err
    assert err == b""


@pytest.mark.slow
def test_head_in_a_shell_pipeline(long_session: tuple[Path, str]) -> None:
    sdir, sid = long_session
    r = subprocess.run(
        [*SHELL_HEAD, *AGENTDB, "--sessions-dir", str(sdir), "events", sid, "--json"],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert json.loads(r.stdout)["sequence"] == 1
