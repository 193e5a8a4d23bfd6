"""A backup folder: the names ``agentdb backup`` gives files in it, its lock, and ``--verify``.

Names in ``DIR`` (nothing else there is ever touched):

* ``<id>.sqlite`` — the copy of a session; replaced only by a verified superset of itself;
* ``<id>.sqlite.<UTC timestamp>`` (``20261130T180312Z``, ``.N`` added if two fall in one
  second) — the state of a session that is no longer a superset of its copy (it was recovered
  with losses): written beside the copy, which stays;
* ``<id>.sqlite.corrupt[.N]`` — a copy that failed verification, renamed, never deleted;
* ``<id>.sqlite.agentdb-backup-tmp-<pid>`` (and its ``-journal``) — a copy being written by the
  process ``<pid>``; a later run removes those whose process is gone (killed);

While a run compares and replaces a session's copies it holds a lock on ``<id>.sqlite``
(:func:`locked_copy`), so two concurrent runs never both replace one copy.

:func:`copies_of` lists a session's copies, newest first, for ``restore --from``.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import os
import re
import stat
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdb import checks, errors, fsutil, paths
from agentdb.checks import policy
from agentdb.checks.run import read_recovery_index, was_recovered
from agentdb.results import Finding, Verdict

_ID = r"(?P<id>[0-7][0-9A-HJKMNP-TV-Z]{25})"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
STAMPED_RE = re.compile(_ID + r"\.sqlite\.(?P<stamp>[0-9]{8}T[0-9]{6}Z)(?:\.(?P<n>[0-9]+))?")
TMP_RE = re.compile(_ID + r"\.sqlite\.agentdb-backup-tmp(?:-(?P<pid>[0-9]+))?(?:-journal)?")
LOCK_TIMEOUT = 120.0  # seconds to wait for another backup run to finish with one session

_FLOCK = "@hhqqi4x"  # struct flock on Linux: type, whence, start, len, pid
_LOCK_BYTE = 1 << 62  # past SQLite's lock bytes (0x40000000...) and any real file's end


# ------------------------------------------------------------------------------------ names


def copy_path(dest_dir: Path, session_id: str) -> Path:
    """``DIR/<id>.sqlite``."""
    return dest_dir / (paths.validate_id(session_id) + paths.SESSION_SUFFIX)


def tmp_path(dest_dir: Path, session_id: str) -> Path:
    """Where this process writes a new copy of ``session_id`` before it gets a final name."""
    return copy_path(dest_dir, session_id).with_name(
        f"{session_id}{paths.SESSION_SUFFIX}.agentdb-backup-tmp-{os.getpid()}"
    )


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):
        return False
    return False


def sweep_leftovers(dest_dir: Path) -> list[Path]:
    """Remove temp copies that killed backup runs left (their process is gone). Returns them.

    A temp name without a pid (written by an older agentdb) is removed too, as that version did.
    """
    removed: list[Path] = []
    try:
        names = os.listdir(dest_dir)
    except OSError:
        return removed
    for name in names:
        m = TMP_RE.fullmatch(name)
        if m is None:
            continue
        pid = m.group("pid")
        if pid is not None and (int(pid) == os.getpid() or not _pid_gone(int(pid))):
            continue
        try:
            os.unlink(dest_dir / name)
            removed.append(dest_dir / name)
        except OSError:  # gone already, or a folder we may not write: the run will say so
            pass
    return removed


def stamp(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.timezone.utc)).strftime(STAMP_FORMAT)


def new_stamped_path(dest_dir: Path, session_id: str, now: dt.datetime | None = None) -> Path:
    """A free ``DIR/<id>.sqlite.<UTC timestamp>[.N]`` name."""
    base = f"{copy_path(dest_dir, session_id).name}.{stamp(now)}"
    n = 0
    while os.path.lexists(dest_dir / (base + (f".{n}" if n else ""))):
        n += 1
    return dest_dir / (base + (f".{n}" if n else ""))


def stamped_copies(dest_dir: Path, session_id: str) -> list[Path]:
    """``<id>.sqlite.<timestamp>[.N]`` of one session, oldest first."""
    found: list[tuple[str, int, Path]] = []
    for name in os.listdir(dest_dir):
        m = STAMPED_RE.fullmatch(name)
        if m and m.group("id") == session_id:
            found.append((m.group("stamp"), int(m.group("n") or 0), dest_dir / name))
    return [p for *_, p in sorted(found)]


def copies_of(dest_dir: Path, session_id: str) -> list[Path]:
    """Every copy of a session in a backup folder, newest first: the timestamped ones (each
    written after ``<id>.sqlite`` stopped being a prefix of the session), then ``<id>.sqlite``.
    ``.corrupt`` names and temp files are not copies."""
    out = list(reversed(stamped_copies(dest_dir, session_id)))
    final = copy_path(dest_dir, session_id)
    if os.path.lexists(final):
        out.append(final)
    return out


def corrupt_path(final: Path, n: int) -> Path:
    return final.with_name(final.name + ".corrupt" + (f".{n}" if n else ""))


def corrupt_name_of(final: Path, st: os.stat_result) -> Path:
    """The ``.corrupt[.N]`` name for the file ``final`` (whose lstat is ``st``): one that
    already is that file (a killed run linked it there), else the first free one."""
    n = 0
    while True:
        p = corrupt_path(final, n)
        try:
            other = os.lstat(p)
        except FileNotFoundError:
            return p
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            return p
        n += 1


# ------------------------------------------------------------------------------------- lock


@contextmanager
def locked_copy(final: Path, timeout: float = LOCK_TIMEOUT) -> Iterator[os.stat_result | None]:
    """Hold ``DIR/<id>.sqlite`` while its copies are compared and replaced.

    An open-file-description write lock on one byte far past anything SQLite locks (readers
    open copies ``immutable``, which takes no lock at all), on the inode the name has once the
    lock is held: a run that waited while another renamed a new copy over the name sees the
    inode change and locks the new one. Released when the process dies, however it dies.
    Yields the locked file's ``fstat``, or None when there is no copy yet (nothing to lock:
    ``link(2)`` never replaces a file). Waits up to ``timeout`` for another run.
    """
    deadline = time.monotonic() + timeout
    req = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, _LOCK_BYTE, 1, 0)
    while True:
        try:
            fd = os.open(final, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = -1
        except OSError as e:
            raise errors.NotRegularFile(
                f"{final}: the existing copy cannot be opened ({e.strerror}); move it by hand, "
                "then run the backup again",
                path=final,
            ) from e
        if fd < 0:
            yield None
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise errors.NotRegularFile(
                    f"{final}: is not a regular file; move it by hand, then run the backup again",
                    path=final,
                )
            try:
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, req)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise errors.Busy(
                        f"{final}: another agentdb backup kept working on this copy for "
                        f"{timeout:.0f}s; retry when it is done",
                        path=final,
                    ) from e
                time.sleep(0.05)
                continue
            try:
                now = os.lstat(final)
            except FileNotFoundError:
                continue
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                continue  # replaced while we waited: lock the new copy
            yield st
            return
        finally:
            os.close(fd)  # closing the description releases its lock


# ----------------------------------------------------------------------------------- verify


@dataclass
class VerifyResult:
    """One backup file checked with the rules of ``agentdb check``."""

    session_id: str
    path: Path
    verdict: Verdict  # check's verdict: "ok", or the first problem (foreign, corrupt, ...)
    findings: list[Finding] = field(default_factory=list)  # check's findings

    @property
    def timestamped(self) -> bool:
        """A ``<id>.sqlite.<UTC timestamp>`` copy (the session's state after a lossy recovery)."""
        return self.path.name != self.session_id + paths.SESSION_SUFFIX


@dataclass
class VerifyReport:
    directory: Path
    sessions: list[VerifyResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(policy.is_ok(s.verdict) for s in self.sessions)

    def to_json(self) -> dict[str, Any]:
        verdicts: dict[str, int] = {}
        for s in self.sessions:
            verdicts[s.verdict] = verdicts.get(s.verdict, 0) + 1
        return {
            "version": 1,
            "directory": str(self.directory),
            "sessions": [
                {
                    "session_id": s.session_id,
                    "path": str(s.path),
                    "timestamped": s.timestamped,
                    "verdict": s.verdict,
                    "findings": [{"code": f.code, "message": f.message} for f in s.findings],
                }
                for s in self.sessions
            ],
            "summary": {"total": len(self.sessions), **verdicts},
        }


def check_copy(path: Path, session_id: str, recovered: bool = False) -> VerifyResult:
    """``check``'s own rules, applied to a backup copy."""
    found = checks.judge(path, session_id, recovered=recovered)
    return VerifyResult(session_id, path, found.verdict, found.findings)


def _entries(directory: Path) -> list[tuple[str, Path]]:
    """(session id, path) of every copy in the folder: ``<id>.sqlite`` and timestamped ones."""
    out: list[tuple[str, str, Path]] = []
    with os.scandir(directory) as it:
        for de in it:
            sid = paths.session_id_of(de.name)
            m = None if sid else STAMPED_RE.fullmatch(de.name)
            if m:
                sid = m.group("id")
            if sid:
                out.append((sid, de.name, directory / de.name))
    return [(sid, p) for sid, _, p in sorted(out)]


def verify_dir(directory: Path, recovery_log: Path | None = None) -> VerifyReport:
    """Check every copy in a backup folder (``<id>.sqlite`` and ``<id>.sqlite.<timestamp>``).

    Read-only. ``recovery_log`` (the sessions' own) says which sessions were salvaged: in a
    copy of one, rows whose event was lost are expected, as ``check`` judges the session itself.
    """
    if not directory.is_dir():
        raise errors.UsageError(f"{directory}: no such backup directory")
    recovery = read_recovery_index(recovery_log)
    report = VerifyReport(directory)
    for sid, path in _entries(directory):
        recovered = was_recovered(recovery.get(sid, []))
        report.sessions.append(check_copy(path, sid, recovered))
    return report


def ensure(dest_dir: Path) -> None:
    """Create the backup folder (0700) if it is missing."""
    fsutil.ensure_dir(dest_dir)
