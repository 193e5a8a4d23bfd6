"""Files agentdb opens that are not sessions (the recovery log, scratch and temporary copies)
get the session-file treatment: no symlink followed, no FIFO waited on, regular files only,
bounded reads, a one-line error. Real processes with a timeout: the old code hung or grew."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentdb import errors, faults, fsutil, recoverylog, salvage
from agentdb.index import plugins
from agentdb.paths import job_file
from agentdb.views import sessions
from tests.salvage import corpus
from tests.support import SRC, make_session

TIMEOUT = 30


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """In-process opens that would block (a FIFO) fail the test instead of hanging it."""

    def hung(*_: object) -> None:
        raise TimeoutError(f"still blocked after {TIMEOUT} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def log_of(sessions_dir: Path) -> Path:
    return sessions_dir.parent / "recovery.log"


def cli(sessions_dir: Path, *args: str, mem: int | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, killed after TIMEOUT (a hang fails the test)."""

    def limit() -> None:
        if mem is not None:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    return subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions_dir), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        preexec_fn=limit,
    )


def assert_one_line_naming(proc: subprocess.CompletedProcess[str], path: Path) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if str(path) in ln]
    assert lines, proc.stderr
    assert all(ln.startswith("agentdb: ") for ln in lines), proc.stderr


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.fixture
def damaged(sessions_dir: Path) -> tuple[str, Path]:
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    return sid, path


# ------------------------------------------------------------------------ the recovery log


def _checked_every_session(
    proc: subprocess.CompletedProcess[str], sessions_dir: Path, ids: list[str], what: str
) -> None:
    """check ran over every session and reported the log as one directory finding (it used to
    stop at the log with one line for the whole run)."""
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    assert sorted(s["session_id"] for s in doc["sessions"]) == sorted(ids)
    [d] = [d for d in doc["directory"] if d["code"] == "recovery_log_unreadable"]
    assert d["path"] == str(log_of(sessions_dir)) and what in d["message"]
    assert d["severity"] == "error"


@pytest.mark.slow
def test_check_with_a_fifo_recovery_log_does_not_block(
    sessions_dir: Path, damaged: tuple[str, Path]
) -> None:
    healthy, _ = make_session(sessions_dir)
    os.mkfifo(log_of(sessions_dir))
    proc = cli(sessions_dir, "check", "--json")  # old code: blocked in open() forever
    _checked_every_session(proc, sessions_dir, [damaged[0], healthy], "FIFO")
    one = cli(sessions_dir, "check", healthy)
    assert one.returncode == 1 and "recovery_log_unreadable" in one.stdout, one.stderr
    assert "Traceback" not in one.stderr


@pytest.mark.slow
def test_check_with_a_recovery_log_linked_to_dev_zero_reads_nothing(
    sessions_dir: Path, damaged: tuple[str, Path]
) -> None:
    os.symlink("/dev/zero", log_of(sessions_dir))
    # old code: followed the link and read one endless line until MemoryError
    proc = cli(sessions_dir, "check", "--json", mem=1 << 30)
    _checked_every_session(proc, sessions_dir, [damaged[0]], "symbolic link")


@pytest.mark.slow
def test_status_and_report_with_a_hostile_recovery_log(
    tmp_path: Path, sessions_dir: Path, damaged: tuple[str, Path]
) -> None:
    """status and report still count and judge; the log's problem is one next command."""
    healthy, _ = make_session(sessions_dir)
    os.mkfifo(log_of(sessions_dir))
    env_cache = ("--plugin-cache", str(tmp_path / "none"))
    st = cli(sessions_dir, *env_cache, "status", "--json")
    assert st.returncode == 1 and "Traceback" not in st.stderr, st.stderr
    doc = json.loads(st.stdout)
    assert doc["summary"]["sessions"] == 2
    assert "FIFO" in doc["recoveries"]["problem"]
    assert any("recovery log" in n["why"] for n in doc["next"])
    rep = cli(sessions_dir, *env_cache, "report", "--json")
    # a report that was written is success (docs/exit-codes.md), whatever it lists to do
    assert rep.returncode == 0 and "Traceback" not in rep.stderr, rep.stderr
    assert json.loads(rep.stdout)["summary"]["sessions"] == 2


@pytest.mark.slow
def test_verdicts_read_without_the_recovery_log_are_not_cached(
    tmp_path: Path, sessions_dir: Path
) -> None:
    """Without the log a recovered session's orphan rows read as missing_event (inconsistent):
    that verdict must not outlive the run, or status would call it damaged once the log is
    back."""
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    rec = _cli_env(env, sessions_dir, "recover", sid)
    assert rec.returncode in (0, 1), rec.stderr
    log = log_of(sessions_dir)
    log.rename(tmp_path / "log")
    os.symlink(tmp_path / "log", log)
    assert _cli_env(env, sessions_dir, "check").returncode == 1
    os.unlink(log)
    (tmp_path / "log").rename(log)
    good = _cli_env(env, sessions_dir, "check", "--json")
    want = json.loads(good.stdout)["sessions"][0]["verdict"]
    st = _cli_env(env, sessions_dir, "--plugin-cache", str(tmp_path / "n"), "status", "--json")
    assert json.loads(st.stdout)["by_verdict"] == {want: 1}
    os.unlink(tmp_path / "cache" / "agentdb" / "index.sqlite")
    log.rename(tmp_path / "log")
    os.symlink(tmp_path / "log", log)
    assert _cli_env(env, sessions_dir, "check").returncode == 1
    st = _cli_env(env, sessions_dir, "--plugin-cache", str(tmp_path / "n"), "status", "--json")
    assert json.loads(st.stdout)["summary"]["never_checked"] == 1


def _cli_env(
    env: dict[str, str], sessions_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions_dir), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(SRC), **env},
    )


@pytest.mark.slow
def test_recover_with_a_fifo_recovery_log_refuses_without_blocking(
    sessions_dir: Path, damaged: tuple[str, Path]
) -> None:
    sid, _ = damaged
    os.mkfifo(log_of(sessions_dir))
    before = snapshot(sessions_dir)
    proc = cli(sessions_dir, "recover", sid, "--json")  # old code: blocked holding the lock
    assert proc.returncode == 1
    assert_one_line_naming(proc, log_of(sessions_dir))
    assert '"outcome": "refused"' in proc.stdout
    assert snapshot(sessions_dir) == before


@pytest.mark.slow
def test_recover_with_a_symlinked_recovery_log_leaves_nothing_behind(
    sessions_dir: Path, damaged: tuple[str, Path], tmp_path: Path
) -> None:
    sid, path = damaged
    target = tmp_path / "elsewhere.log"
    os.symlink(target, log_of(sessions_dir))
    before = snapshot(sessions_dir)
    proc = cli(sessions_dir, "recover", sid)  # old code: ELOOP traceback, -recover-tmp left
    assert proc.returncode == 1
    assert_one_line_naming(proc, log_of(sessions_dir))
    assert snapshot(sessions_dir) == before
    assert not job_file(path, "recover", "tmp").exists()
    assert not target.exists()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_log_replaced_during_recover_fails_cleanly(
    sessions_dir: Path, damaged: tuple[str, Path], tmp_path: Path, kind: str
) -> None:
    """The log turns hostile after the up-front check (a race): the intent line cannot be
    written, so nothing is swapped and the replacement written beside is removed."""
    sid, path = damaged
    log = log_of(sessions_dir)
    before = snapshot(sessions_dir)

    def occupy() -> None:
        if kind == "symlink":
            os.symlink(tmp_path / "elsewhere.log", log)
        elif kind == "fifo":
            os.mkfifo(log)
        else:
            os.mkdir(log)

    with faults.injected({"after_salvage": occupy}):
        out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "failed"
    assert out.corrupt_path is None
    assert str(log) in out.notes[-1] and "\n" not in out.notes[-1]
    assert snapshot(sessions_dir) == before
    assert not job_file(path, "recover", "tmp").exists()


# ------------------------------------------------------------------------ bounded reading


def test_over_long_lines_are_skipped_without_being_held(tmp_path: Path) -> None:
    log = tmp_path / "recovery.log"
    good = b'{"session_id": "A", "event": "outcome"}\n'
    with open(log, "wb") as f:
        f.write(good)
        f.write(b"x" * (3 * recoverylog.MAX_LINE) + b"\n")  # one hostile line
        f.write(good)
        f.write(b"y" * (recoverylog.MAX_LINE + 5))  # an unterminated one at the end
    assert [e["session_id"] for e in recoverylog.read(log)] == ["A", "A"]


@pytest.mark.slow
def test_iter_lines_memory_stays_bounded(tmp_path: Path) -> None:
    """64 MiB without a newline, then a short line: only lines within the cap come out."""
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(64 << 20)
        f.seek(0, os.SEEK_END)
        f.write(b"\nshort\n")
    fd = fsutil.open_regular(big)
    try:
        got = list(fsutil.iter_lines(fd, 1024, limit=1 << 30))
    finally:
        os.close(fd)
    assert got == [b"short\n"]


def test_only_the_tail_of_a_huge_log_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recoverylog, "MAX_READ", 100)
    log = tmp_path / "recovery.log"
    lines = [f'{{"session_id": "S{i:03d}"}}\n'.encode() for i in range(20)]
    log.write_bytes(b"".join(lines))
    got = [e["session_id"] for e in recoverylog.read(log)]
    assert got and got[-1] == "S019"
    assert "S000" not in got
    assert len(got) <= 100 // len(lines[0])


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "dangling"])
def test_open_regular_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    p = tmp_path / "f"
    if kind == "symlink":
        (tmp_path / "real").write_bytes(b"x")
        os.symlink(tmp_path / "real", p)
    elif kind == "dangling":
        os.symlink(tmp_path / "nowhere", p)
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        p.mkdir()
    for flags in (os.O_RDONLY, os.O_WRONLY | os.O_APPEND | os.O_CREAT):
        with pytest.raises(errors.NotRegularFile) as e:
            fsutil.open_regular(p, flags)
        assert str(p) in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "nowhere").exists()  # O_CREAT did not create the link's target


def test_read_regular_caps_what_it_reads(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"a" * 100)
    assert fsutil.read_regular(p, 100) == b"a" * 100
    with pytest.raises(errors.NotRegularFile):
        fsutil.read_regular(p, 99)


def test_fsync_file_does_not_block_on_a_fifo(tmp_path: Path) -> None:
    p = tmp_path / "f"
    os.mkfifo(p)
    with pytest.raises(errors.NotRegularFile):
        fsutil.fsync_file(p)  # old code: open(O_RDONLY) of a FIFO blocked forever


# ------------------------------------------------------------------------ the plugin cache


def test_plugin_versions_are_only_tested_for_existence(
    sessions_dir: Path, plugin_cache: Path, tmp_path: Path
) -> None:
    """A version is cached when its path is a directory or a symlink to one; a FIFO, a
    symlink to a device or to nothing is not, and nothing is opened or read."""
    sid, _ = make_session(sessions_dir, turns=2)
    plugins_used = [i for i in sessions.preflight(sessions_dir, sid, plugin_cache).items]
    plugins_used = [i for i in plugins_used if i.state == "missing"]
    assert len(plugins_used) >= 3
    real = tmp_path / "elsewhere-v1"
    real.mkdir()
    shapes = ["symlink_to_dir", "fifo", "symlink_to_dev_zero", "dangling", "directory"]
    expected = {}
    for item, shape in zip(plugins_used, shapes, strict=False):
        d = plugin_cache / item.category / item.name
        d.mkdir(parents=True, exist_ok=True)
        v = d / item.version
        if shape == "symlink_to_dir":
            os.symlink(real, v)
        elif shape == "fifo":
            os.mkfifo(v)
        elif shape == "symlink_to_dev_zero":
            os.symlink("/dev/zero", v)
        elif shape == "dangling":
            os.symlink(tmp_path / "nowhere", v)
        else:
            v.mkdir()
        expected[(item.category, item.name, item.version)] = shape in (
            "symlink_to_dir",
            "directory",
        )
    report = sessions.preflight(sessions_dir, sid, plugin_cache)
    for i in report.items:
        key = (i.category, i.name, i.version)
        if key in expected:
            assert (i.state == "cached") == expected[key], (key, i.state)
    cached = plugins.cached_versions(plugin_cache)
    assert {k for k, v in expected.items() if v} == cached


@pytest.mark.slow
def test_symlinked_sessions_dir_and_backup_dir_stay_legal(tmp_path: Path) -> None:
    """The rule is for the files agentdb opens, not the directories it is pointed at."""
    real = tmp_path / "real-sessions"
    fsutil.ensure_dir(real)
    sid, path = make_session(real, turns=20)
    corpus.d_zeroed_page(path)
    state = tmp_path / "state" / "agent"
    fsutil.ensure_dir(state)
    os.symlink(real, state / "sessions")
    proc = cli(state / "sessions", "recover", "--json", sid)
    assert proc.returncode == 0, proc.stderr
    assert '"outcome": "recovered"' in proc.stdout
    assert any(e.get("event") == "outcome" for e in recoverylog.read(state / "recovery.log"))
    real_to = tmp_path / "real-backups"
    real_to.mkdir(mode=0o700)
    os.symlink(real_to, tmp_path / "backups")
    proc = cli(state / "sessions", "backup", "--to", str(tmp_path / "backups"), sid)
    assert proc.returncode == 0, proc.stderr
    assert (real_to / f"{sid}.sqlite").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink_to_dev_zero"])
def test_prune_reads_no_intent_file_that_is_not_regular(sessions_dir: Path, kind: str) -> None:
    """An interrupted prune's intent file is read like the log: old code crashed on a
    directory (IsADirectoryError traceback)."""
    sid, _ = make_session(sessions_dir, turns=2)
    intent = sessions_dir / f"{sid}.sqlite.agentdb-prune-intent"
    if kind == "directory":
        intent.mkdir()
    elif kind == "fifo":
        os.mkfifo(intent)
    else:
        os.symlink("/dev/zero", intent)
    proc = cli(sessions_dir, "prune", "--older-than", "0s", "--dry-run", "--json", mem=1 << 30)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["dry_run"] is True


@pytest.mark.slow
def test_check_reads_no_wal_that_is_not_regular(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=2)
    os.mkfifo(path.with_name(path.name + "-wal"))
    proc = cli(sessions_dir, "check", "--json", sid)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["sessions"][0]["verdict"] != "ok"


def test_an_append_after_a_cut_short_line_is_not_lost(tmp_path: Path) -> None:
    """A full disk or a size limit can cut an append short; the next entry still reads."""
    log = tmp_path / "recovery.log"
    recoverylog.append(log, {"session_id": "A", "event": "intent"})
    with open(log, "ab") as f:
        f.write(b'{"session_id": "B", "ev')  # what a cut-short write leaves
    recoverylog.append(log, {"session_id": "C", "event": "outcome"})
    assert [e["session_id"] for e in recoverylog.read(log)] == ["A", "C"]
