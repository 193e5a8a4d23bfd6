"""OS errors during every job, for real: a file size limit (RLIMIT_FSIZE: EFBIG), a small full
file system (tmpfs: ENOSPC), a read-only file system (tmpfs remounted: EROFS) and permission
denied (an unprivileged uid: EACCES). Each gives one line naming the file and the error, leaves
the session as it was and no job file behind, and exits 1 — never a traceback.

EIO is not produced here: that needs a device that fails on demand (device-mapper's ``error``
target), which this environment lacks; its message is tested through the same mapping."""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentdb import errors, fsutil
from tests.salvage import corpus
from tests.support import SRC, make_session

JOBS = ["recover", "migrate", "backup", "prune"]
NOBODY = 65534


@dataclass
class Setup:
    """A sessions directory holding one session a job will act on, and the job's arguments."""

    sessions_dir: Path
    sid: str
    args: list[str]
    dest: Path | None = None  # backup's --to


def prepare(job: str, sessions_dir: Path, dest: Path) -> Setup:
    if job == "recover":
        sid, path = make_session(sessions_dir, turns=20)
        corpus.d_zeroed_page(path)
        return Setup(sessions_dir, sid, ["recover", "--json", sid])
    if job == "migrate":
        sid, _ = make_session(sessions_dir, turns=20, revision=1)
        return Setup(sessions_dir, sid, ["migrate", "--json", sid])
    if job == "backup":
        sid, _ = make_session(sessions_dir, turns=20)
        return Setup(sessions_dir, sid, ["backup", "--json", "--to", str(dest), sid], dest)
    sid, _ = make_session(sessions_dir, turns=3)
    return Setup(sessions_dir, sid, ["prune", "--json", "--yes", sid])


def as_nobody(uid: int = NOBODY) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def run(
    setup: Setup,
    *,
    fsize: int | None = None,
    user: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    def limits() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    prefix = as_nobody(user) if user is not None else []
    cache = setup.sessions_dir.parent.parent / "cache"
    dirs = ["--sessions-dir", str(setup.sessions_dir), "--plugin-cache", str(cache / "plugins")]
    return subprocess.run(
        [*prefix, sys.executable, "-m", "agentdb.cli.main", *dirs, *setup.args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC), "XDG_CACHE_HOME": str(cache), **(env or {})},
        preexec_fn=limits,
    )


def message_of(job: str, doc: dict) -> tuple[str, str]:  # type: ignore[type-arg]
    """(outcome, one-line message) for the one session the job acted on."""
    if job == "recover":
        s = doc["sessions"][0]
        return s["outcome"], s["notes"][-1]
    if job in ("migrate", "backup"):
        s = doc["sessions"][0]
        return s["outcome"], s["message"]
    assert not doc.get("removed"), doc
    (refused,) = doc["refused"]
    (reason,) = refused["reasons"]
    return reason["code"], reason["message"]


def snapshot(d: Path | None) -> dict[str, bytes]:
    if d is None or not d.exists():
        return {}
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def assert_failed_cleanly(
    job: str,
    setup: Setup,
    proc: subprocess.CompletedProcess[str],
    before: dict[str, bytes],
    errno_name: str,
) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    outcome, message = message_of(job, json.loads(proc.stdout))
    assert outcome == "failed", message
    assert "\n" not in message
    assert errno_name in message, message
    assert message.startswith("/"), message  # names the file first
    assert snapshot(setup.sessions_dir) == before  # the session as it was, nothing added
    if setup.dest is not None:
        assert not [n for n in snapshot(setup.dest) if "agentdb" in n or n.endswith(".sqlite")]
    return message


# ------------------------------------------------------------------------ EFBIG


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS)
def test_file_size_limit(job: str, sessions_dir: Path, tmp_path: Path) -> None:
    setup = prepare(job, sessions_dir, tmp_path / "backups")
    before = snapshot(sessions_dir)
    size = os.stat(sessions_dir / f"{setup.sid}.sqlite").st_size
    # Half the session: any copy or replacement of it fails; prune's intent line is longer.
    proc = run(setup, fsize=1 if job == "prune" else size // 2)
    assert_failed_cleanly(job, setup, proc, before, "EFBIG")


# ------------------------------------------------------------------------ tmpfs: ENOSPC, EROFS


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A 4 MiB tmpfs of our own (root only; skipped, saying why, when it cannot be mounted)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; ENOSPC/EROFS not tested")
    mnt = Path(tempfile.mkdtemp(prefix="agentdb-smallfs-"))
    got = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if got.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a tmpfs here ({got.stderr.strip()}); ENOSPC/EROFS not tested")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        mnt.rmdir()


def fill(fs: Path) -> None:
    """Use up every free byte of the file system."""
    for name, size in (("filler", 1 << 16), ("filler-tail", 1)):  # then the last partial block
        fd = os.open(fs / name, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * size)
        except OSError as e:
            assert e.errno == errno.ENOSPC
        finally:
            os.close(fd)


def remount_ro(fs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)


def on_small_fs(job: str, fs: Path, tmp_path: Path, where: str) -> Setup:
    """Sessions (and the recovery log) on the small fs, or only backup's --to there."""
    if where == "dest":
        sessions = tmp_path / "state" / "agent" / "sessions"
        fsutil.ensure_dir(sessions)
        return prepare(job, sessions, fs / "backups")
    sessions = fs / "state" / "agent" / "sessions"
    fsutil.ensure_dir(sessions)
    return prepare(job, sessions, tmp_path / "backups")


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS)
def test_file_system_full(job: str, small_fs: Path, tmp_path: Path) -> None:
    setup = on_small_fs(job, small_fs, tmp_path, "dest" if job == "backup" else "sessions")
    if job == "backup":
        (small_fs / "backups").mkdir(mode=0o700)
    before = snapshot(setup.sessions_dir)
    fill(small_fs)
    proc = run(setup)
    assert_failed_cleanly(job, setup, proc, before, "ENOSPC")


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS)
def test_read_only_file_system(job: str, small_fs: Path, tmp_path: Path) -> None:
    setup = on_small_fs(job, small_fs, tmp_path, "dest" if job == "backup" else "sessions")
    if job == "backup":
        (small_fs / "backups").mkdir(mode=0o700)
    before = snapshot(setup.sessions_dir)
    remount_ro(small_fs)
    proc = run(setup)
    assert_failed_cleanly(job, setup, proc, before, "EROFS")


# ------------------------------------------------------------------------ EACCES


@pytest.fixture
def unprivileged_tree() -> Iterator[Path]:
    """A tree the unprivileged uid can traverse, under /tmp (pytest's tmp_path is 0700 root).
    Permission cases must not run as root: root ignores modes."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged uid with setpriv")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed; EACCES not tested")
    probe = subprocess.run(
        [*as_nobody(), sys.executable, "-c", "import apsw"],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    if probe.returncode != 0:
        pytest.skip(f"uid {NOBODY} cannot run this Python: {probe.stderr[-200:]!r}")
    base = Path(tempfile.mkdtemp(prefix="agentdb-eacces-"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def chown_tree(path: Path, uid: int) -> None:
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, uid)
    os.lchown(path, uid, uid)


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS)
def test_permission_denied(job: str, unprivileged_tree: Path) -> None:
    """The job runs as an unprivileged user who owns the session file but may not create
    files where the job must write (the sessions directory, or backup's --to)."""
    base = unprivileged_tree
    state = base / "state" / "agent"
    sessions = state / "sessions"
    fsutil.ensure_dir(sessions)
    (base / "cache").mkdir(mode=0o700)
    locked = base / "locked"  # backup's --to parent: root's, 0755
    locked.mkdir(mode=0o755)
    setup = prepare(job, sessions, locked / "backups")
    chown_tree(base / "state", NOBODY)
    chown_tree(base / "cache", NOBODY)
    if job != "backup":
        os.chown(sessions, 0, 0)  # the user may read and open files here, not create any
        os.chmod(sessions, 0o755)
        os.chown(state, 0, 0)
        os.chmod(state, 0o755)
    for d in (base / "state", base / "state" / "agent"):
        os.chmod(d, 0o755)
    before = snapshot(sessions)
    proc = run(setup, user=NOBODY)
    assert_failed_cleanly(job, setup, proc, before, "EACCES")


# ------------------------------------------------------------------------ the mapping


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (errno.ENOSPC, errors.Full),
        (errno.EFBIG, errors.Full),
        (errno.EIO, errors.DiskIOError),
        (errno.EACCES, errors.ReadOnly),
        (errno.EROFS, errors.ReadOnly),
        (errno.ENAMETOOLONG, errors.FileSystemError),
    ],
)
def test_each_errno_is_one_line_of_its_kind(code: int, kind: type[Exception]) -> None:
    e = fsutil.os_error(OSError(code, os.strerror(code), "/x/y.sqlite"))
    assert isinstance(e, kind) and isinstance(e, errors.FileSystemError)
    text = str(e)
    assert text.startswith("/x/y.sqlite: cannot write: ")
    assert errno.errorcode[code] in text and "\n" not in text
    assert e.exit_code == 1


@pytest.mark.slow
def test_the_kernels_automatic_recovery_on_a_full_disk_is_retryable(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """Opening a damaged session when the replacement cannot be written: the kernel gets an
    error a harness retries later (Retryable), not "unusable", and nothing changed."""
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    before = snapshot(sessions_dir)
    code = (
        "import sys; from pathlib import Path\n"
        "from agentdb import errors; from agentdb.kernel import open_session\n"
        "try:\n"
        "    open_session(Path(sys.argv[1]), sys.argv[2])\n"
        "except errors.AgentdbError as e:\n"
        "    print(isinstance(e, errors.Retryable), type(e).__name__, e)\n"
    )
    size = os.stat(path).st_size

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, size // 2))

    proc = subprocess.run(
        [sys.executable, "-c", code, str(sessions_dir), sid],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        preexec_fn=limits,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.startswith("True FileSystemFull "), proc.stdout
    assert "EFBIG" in proc.stdout
    assert snapshot(sessions_dir) == before
