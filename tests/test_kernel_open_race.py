"""The kernel opens a session at the instant recover or prune holds it (``locks.hold``).

``apsw.Connection(path)`` opens the path before it takes any lock; the first read then waits
(busy timeout) while the job holds the file. If the job swaps a replacement in (recover) or
unlinks the file (prune) meanwhile, the kernel's descriptor points at the old inode. It must
notice and go on with what the path names now, never write into the old inode (the
``.corrupt`` copy, or a deleted file). Real processes: a holder, a kernel, a swap.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from agentdb import paths, recoverylog, swap
from agentdb.jobs import backup
from tests.rows import all_rows
from tests.support import SRC, make_session, wait_for

_HOLDER = r"""
import sys, os
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb import fsutil, locks, swap
p, repl, what = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[4]
with locks.hold(p) as fd:
    print("held", flush=True)
    sys.stdin.readline()
    if what == "swap":
        swap.swap(p, repl, swap.next_corrupt_name(p))
    else:  # prune's removal
        os.unlink(p)
        fsutil.fsync_dir(p.parent)
        os.ftruncate(fd, 0)
    print("done", flush=True)
"""

_KERNEL = r"""
import sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb import errors, kernel
from agentdb.store import Event, Producer
try:
    w = kernel.open_session(Path(sys.argv[1]), sys.argv[2])
except errors.AgentdbError as e:
    print("error", type(e).__name__, e, flush=True)
    raise SystemExit(e.exit_code)
seq = w.emit(Event("tool_result", Producer("tool", "shell", "2.0.0"), b"MARKER"))
print("wrote", seq, flush=True)
w.close()
"""


def _pad(path: Path) -> None:
    """Give the replacement another page layout than the original (as a real salvage does)."""
    c = apsw.Connection(str(path))
    c.execute("CREATE TABLE pad(x)")
    c.execute(
        "INSERT INTO pad SELECT randomblob(3000) FROM "
        "(WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r WHERE i<50) SELECT i FROM r)"
    )
    c.execute("DROP TABLE pad")
    c.close()


def _start_kernel(sessions_dir: Path, sid: str) -> subprocess.Popen[str]:
    """A real process opening ``sid`` with the kernel's open and writing one event."""
    return subprocess.Popen(
        [sys.executable, "-c", _KERNEL, str(sessions_dir), sid, str(SRC)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _has_open(pid: int, path: Path) -> bool:
    """Process ``pid`` has a descriptor of ``path`` (SQLite has opened it)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


def _race(sessions_dir: Path, path: Path, repl: Path, what: str) -> subprocess.Popen[str]:
    """Hold ``path``, start a kernel opening it, act (swap/unlink), release; the kernel's pid."""
    sid = path.name.removesuffix(".sqlite")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), str(repl), str(SRC), what],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    k = _start_kernel(sessions_dir, sid)

    assert wait_for(lambda: _has_open(k.pid, path), 60)  # and now waits for the lock
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "done"
    holder.wait(timeout=60)
    return k


def _integrity(path: Path) -> str:
    c = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return str(c.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        c.close()


def _has_marker(path: Path) -> bool:
    return any(b"MARKER" in e for e in all_rows(path)["events"])


@pytest.mark.slow
def test_kernel_open_during_recover_swap_writes_into_the_replacement(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=3, status="running")
    backup.backup_session(path, tmp_path / "b")
    repl = paths.job_file(path, "recover", "tmp")
    os.rename(tmp_path / "b" / path.name, repl)
    _pad(repl)
    original = path.read_bytes()
    k = _race(sessions_dir, path, repl, "swap")
    out, err = k.communicate(timeout=120)
    assert k.returncode == 0, (out, err)
    assert out.startswith("wrote"), out
    corrupt = swap.corrupt_name(path, 0)
    # the old inode, now the .corrupt copy, is untouched: same bytes, no WAL of its own
    assert corrupt.read_bytes() == original
    assert not paths.sidecar(corrupt, "-wal").exists()
    # the kernel wrote into the replacement, which stays sound
    assert _integrity(path) == "ok"
    assert _has_marker(path)
    assert not _has_marker(corrupt)


@pytest.mark.slow
def test_kernel_open_during_prune_does_not_resurrect(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=3, status="completed")
    k = _race(sessions_dir, path, path, "unlink")
    out, err = k.communicate(timeout=120)
    assert k.returncode != 0, (out, err)  # a clear error, not a write into a deleted file
    assert out.startswith("error"), out
    assert "Traceback" not in err
    assert not path.exists()
    assert sorted(os.listdir(sessions_dir)) == []  # no session, no -wal/-shm created anew


@pytest.mark.slow
def test_a_recover_job_between_the_kernels_judge_and_its_hook(
    sessions_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`recover --all` replaced the damaged file after the kernel's open judged it and before
    its recovery hook ran: the hook found the job's replacement healthy, and the open raised
    Corrupt ("recover finds no damage to salvage") on a session that was fine. Seen once in a
    full-suite run at load 6 (test_writers_starting_while_recover_runs). The open now judges
    the new file."""
    from agentdb import kernel
    from agentdb.jobs import demo
    from agentdb.salvage import recover_session
    from agentdb.store import Event, Producer

    sid, path = make_session(sessions_dir, turns=4, status="running")
    demo.damage_page(path, table="events")
    real_judge = kernel.judge_hook

    def judge_then_job(p: Path, session_id: str) -> str | None:
        problem = real_judge(p, session_id)
        if problem is not None and not p.with_name(p.name + ".corrupt").exists():
            assert recover_session(sessions_dir, session_id).outcome == "recovered"
        return problem

    monkeypatch.setattr(kernel, "judge_hook", judge_then_job)
    with kernel.open_session(sessions_dir, sid) as w:
        w.emit(Event("tool_result", Producer("tool", "shell", "1.0.0"), b"{}"))
    assert _integrity(path) == "ok"
    assert len(list(sessions_dir.glob(f"{sid}.sqlite.corrupt*"))) == 1


def _paused(argv: list[str], point: str, gate: Path) -> subprocess.Popen[str]:
    """``agentdb ARGV`` as a real process, stopped at fault point ``point`` until ``gate/go``."""
    gate.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTDB_FAULT", "AGENTDB_PAUSE")}
    p = subprocess.Popen(
        [sys.executable, "-m", "agentdb.cli.main", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env | {"PYTHONPATH": str(SRC), "AGENTDB_PAUSE": f"{point}:{gate}"},
    )
    assert wait_for(lambda: (gate / "reached").exists(), 120), "never paused"
    return p


def _outcome_lines(sessions_dir: Path, sid: str) -> list[dict[str, object]]:
    log = paths.recovery_log_path(sessions_dir)
    return [e for e in recoverylog.entries_for(log, sid) if e.get("event") == "outcome"]


@pytest.mark.slow
def test_a_recovered_file_is_held_until_its_outcome_line(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """Recover held the damaged original, but its replacement was free from the rename until
    the outcome line: a kernel opening the session then judged the new file without that line
    (no sign it was a recovered file), called it inconsistent, and refused it as unreadable.
    Seen in CI (test_writers_starting_while_recover_runs). The replacement is now held from
    before the rename until the outcome line is written."""
    from agentdb import locks
    from agentdb.jobs import demo

    sid, path = make_session(sessions_dir, turns=4, status="running")
    demo.damage_page(path, table="events")
    job = _paused(
        ["--sessions-dir", str(sessions_dir), "recover", sid], "after_rename", tmp_path / "g"
    )
    try:
        assert swap.corrupt_name(path, 0).exists()  # swapped: the path names the replacement
        assert not _outcome_lines(sessions_dir, sid)
        assert locks.probe(path) is not None, "the replacement is free before its outcome line"
        k = _start_kernel(sessions_dir, sid)
        # the kernel meets the held replacement (its judge, then SQLite's busy wait)
        assert wait_for(lambda: _has_open(k.pid, path), 60)
    finally:
        (tmp_path / "g" / "go").touch()
    _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    out, err = k.communicate(timeout=120)
    assert k.returncode == 0 and out.startswith("wrote"), (out, err)
    assert "damaged" not in err, err
    assert [e["outcome"] for e in _outcome_lines(sessions_dir, sid)] == ["recovered"]
    assert _has_marker(path) and _integrity(path) == "ok"


@pytest.mark.slow
def test_a_restored_file_is_held_until_its_outcome_line(sessions_dir: Path, tmp_path: Path) -> None:
    """Restore's swap has the same window as recover's: the copy renamed into place is held
    until the outcome line is written."""
    from agentdb import kernel, locks
    from agentdb.store import Event, Producer
    from tests.runner import run_cli

    sid, path = make_session(sessions_dir, turns=2)
    dest = tmp_path / "b"
    r = run_cli("--sessions-dir", str(sessions_dir), "backup", sid, "--to", str(dest))
    assert r.returncode == 0, r.stderr
    with kernel.open_session(sessions_dir, sid) as w:  # the session grows past its copy
        w.set_status("running")
        w.emit(Event("tool_result", Producer("tool", "shell", "2.0.0"), b"{}"))
    argv = ["--sessions-dir", str(sessions_dir), "restore", sid, "--from", str(dest), "--force"]
    job = _paused(argv, "restore_after_rename", tmp_path / "g")
    try:
        assert path.with_name(path.name + ".pre-restore").exists()
        assert locks.probe(path) is not None, "the restored copy is free before its outcome line"
    finally:
        (tmp_path / "g" / "go").touch()
    _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    assert [e["outcome"] for e in _outcome_lines(sessions_dir, sid)] == ["restored"]


def test_a_session_removed_after_the_kernels_judge_is_not_called_damaged(
    sessions_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Prune truncated and unlinked a session while the kernel's judge read it: the judge saw an
    empty file, and the recovery hook then found no file, warned "damaged and could not be
    recovered (no such session file)" and raised Unreadable. Seen once in
    test_writers_starting_while_prune_runs. The open now says the session is gone, and warns
    of no damage."""
    from agentdb import errors, kernel

    sid, path = make_session(sessions_dir, turns=2)

    def judge_while_pruned(p: Path, session_id: str) -> str | None:
        os.unlink(p)  # what prune does between the judge's open and its reads
        return "file is not a database"

    monkeypatch.setattr(kernel, "judge_hook", judge_while_pruned)
    with pytest.raises(errors.SessionNotFound, match="removed while it was being opened"):
        kernel.open_session(sessions_dir, sid)
    assert "damaged" not in caplog.text
    assert sorted(os.listdir(sessions_dir)) == []
