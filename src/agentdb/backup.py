"""``agentdb backup``: consistent online copies of sessions, safe while the kernel writes.

Per session: the source is opened read-only (never blocks its writer; a file with no ``-wal``
is opened ``immutable`` so nothing is created beside it), copied with SQLite's backup API in
one pass inside one read transaction (:func:`agentdb.db.backup_to`: a transaction-consistent
snapshot that cannot restart under a busy writer), written 0600 as
``DIR/<id>.sqlite.agentdb-backup-tmp``, checked with ``integrity_check`` and its identity, fsynced,
then given its final name ``DIR/<id>.sqlite`` with ``link(2)``, which fails rather than replace
an existing file (outcome ``exists``; nothing is ever overwritten). The copy is in
rollback-journal mode: a single self-contained file, which opens without ``-wal``/``-shm``.

:func:`verify_dir` checks a backup folder with the rules of ``agentdb check``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdb import checks, db, errors, faults, fsutil, paths
from agentdb.checks.run import read_recovery_index, was_recovered
from agentdb.schema.identity import identify

OUTCOMES = ("copied", "exists", "corrupt", "foreign", "failed")
TMP_SUFFIX = ".agentdb-backup-tmp"


@dataclass
class BackupOutcome:
    """What happened to one session's copy."""

    session_id: str  # the ULID in the file name
    outcome: str  # one of OUTCOMES
    path: Path | None  # DIR/<id>.sqlite when copied (or when it already existed)
    bytes: int = 0  # size of the copy
    seconds: float = 0.0  # wall time for this session (copy, check, fsync, rename)
    revision: int | None = None  # the copy's user_version
    message: str = ""  # why not, in one line, with what to do

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "outcome": self.outcome,
            "path": str(self.path) if self.path else None,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 6),
            "revision": self.revision,
            "message": self.message,
        }


@dataclass
class BackupReport:
    """Every session's outcome, in id order."""

    dest_dir: Path  # where the copies went
    sessions: list[BackupOutcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.outcome == "copied" for s in self.sessions)

    def summary(self) -> dict[str, Any]:
        counts: dict[str, Any] = dict.fromkeys(OUTCOMES, 0)
        for s in self.sessions:
            counts[s.outcome] += 1
        copied = [s for s in self.sessions if s.outcome == "copied"]
        counts["bytes"] = sum(s.bytes for s in copied)
        counts["seconds"] = round(sum(s.seconds for s in self.sessions), 6)
        return counts

    def as_json(self) -> dict[str, Any]:
        return {
            "to": str(self.dest_dir),
            "sessions": [s.as_json() for s in self.sessions],
            "summary": self.summary(),
        }


def one_line(text: str) -> str:
    """SQLite's multi-line messages (integrity_check) as one line."""
    return " ".join(text.split())


def _copy(src_path: Path, tmp: Path) -> int:
    """Snapshot ``src_path`` into the new file ``tmp`` and check the copy; returns its revision."""
    sid = src_path.name.removesuffix(paths.SESSION_SUFFIX)
    src = db.open_readonly(src_path)
    try:
        with db.translated(src_path):
            ident = identify(src)
            if ident.kind not in ("session", "too_new"):
                why = ident.problem or "an empty file"
                raise errors.ForeignFile(
                    f"{src_path}: {why}; not a session file, not copied",
                    path=src_path,
                )
            db.backup_to(src, tmp)
    finally:
        src.close()
    # The copy is judged by check's own rules (integrity, content hashes, TEXT, every row
    # readable): a damaged session is refused, never reported as copied.
    result = checks.check_path(tmp, sid)
    if result.verdict in ("corrupt", "unreadable"):
        bad = [f for f in result.findings if f.severity == "error"] or result.findings
        why = one_line(bad[0].message.split(": ", 1)[-1]) if bad else result.verdict
        raise errors.Corrupt(
            f"{src_path}: the copy is {result.verdict} ({why}); the session is damaged — run "
            f"`agentdb recover {sid}`",
            path=src_path,
        )
    return int(result.revision or 0)


def backup_session(db_path: Path, dest_dir: Path, *, sync_dir: bool = True) -> BackupOutcome:
    """Copy one session file into ``dest_dir/<id>.sqlite``; never overwrites.

    The copy's content is fsynced before it gets its final name; with ``sync_dir`` the
    directory is fsynced after the link too (``backup_sessions`` does that once, at the end,
    before it reports anything as copied).
    """
    started = time.monotonic()
    sid = paths.session_id_of(db_path.name)
    if sid is None:
        raise errors.UsageError(f"{db_path}: not named like a session file (<ULID>.sqlite)")
    final = dest_dir / db_path.name
    out = BackupOutcome(sid, "failed", None)

    def done(outcome: str, message: str = "") -> BackupOutcome:
        out.outcome, out.message, out.seconds = outcome, message, time.monotonic() - started
        return out

    tmp = dest_dir / (db_path.name + TMP_SUFFIX)
    try:
        if dest_dir.is_dir():
            for leftover in (tmp, paths.sidecar(tmp, "-journal")):
                leftover.unlink(missing_ok=True)  # our own temp name, left by an interrupted run
    except OSError as e:
        return done("failed", str(fsutil.os_error(e, doing="remove a temporary copy")))
    if os.path.lexists(final):
        out.path = final
        return done("exists", f"{final}: already exists; not overwritten — choose another --to")
    try:
        fsutil.ensure_dir(dest_dir)
        out.revision = _copy(db_path, tmp)
        faults.point("backup_after_copy")  # copied, checked, fsynced; no final name yet
        try:
            os.link(tmp, final)  # fails if final exists: never replaces it
        except FileExistsError:
            out.path = final
            return done("exists", f"{final}: appeared meanwhile; not overwritten")
        if sync_dir:
            fsutil.fsync_dir(dest_dir)
        faults.point("backup_after_link")  # final name durable; the temp name still there
        out.path = final
        out.bytes = os.stat(final).st_size
    except errors.ForeignFile as e:
        return done("foreign", str(e))
    except (errors.Corrupt, errors.Unreadable) as e:
        return done("corrupt", f"{e}")
    except errors.AgentdbError as e:
        return done("failed", str(e))
    except OSError as e:  # no space, a size limit, permission, read-only, I/O error
        return done("failed", str(fsutil.os_error(e)))
    finally:
        with contextlib.suppress(OSError):  # a temp name a power cut brings back: next run
            tmp.unlink(missing_ok=True)
    return done("copied")


def backup_sessions(
    sessions_dir: Path,
    ids: Sequence[str] | None,
    dest_dir: Path,
    *,
    progress: Callable[[BackupOutcome, int, int], None] | None = None,
) -> BackupReport:
    """Back up ``ids`` (None: every session) into ``dest_dir``, one after another."""
    if dest_dir.resolve() == sessions_dir.resolve():
        raise errors.UsageError(f"{dest_dir}: is the sessions directory; choose another --to")
    report = BackupReport(dest_dir)
    if ids is None:
        targets = [e.path for e in paths.iter_session_entries(sessions_dir)]
    else:
        targets = [paths.session_path(sessions_dir, sid) for sid in dict.fromkeys(ids)]
    for i, path in enumerate(targets, 1):
        out = backup_session(path, dest_dir, sync_dir=False)
        report.sessions.append(out)
        if progress:
            progress(out, i, len(targets))
    if dest_dir.is_dir():
        fsutil.fsync_dir(dest_dir)  # every link made above is durable before the report
    return report


# ------------------------------------------------------------------------------------ verify


@dataclass
class VerifyFinding:
    code: str  # stable code, as agentdb check uses
    message: str  # one line


@dataclass
class VerifyResult:
    """One backup file checked with the rules of ``agentdb check``."""

    session_id: str
    path: Path
    verdict: str  # "ok", or the first problem (insecure, foreign, too_new, corrupt, ...)
    findings: list[VerifyFinding] = field(default_factory=list)


@dataclass
class VerifyReport:
    directory: Path
    sessions: list[VerifyResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.verdict == "ok" for s in self.sessions)

    def as_json(self) -> dict[str, Any]:
        verdicts: dict[str, int] = {}
        for s in self.sessions:
            verdicts[s.verdict] = verdicts.get(s.verdict, 0) + 1
        return {
            "directory": str(self.directory),
            "sessions": [
                {
                    "session_id": s.session_id,
                    "path": str(s.path),
                    "verdict": s.verdict,
                    "findings": [{"code": f.code, "message": f.message} for f in s.findings],
                }
                for s in self.sessions
            ],
            "summary": {"total": len(self.sessions), **verdicts},
        }


def _check_one(path: Path, session_id: str, recovered: bool = False) -> VerifyResult:
    """``check``'s own rules, applied to a backup copy."""
    found = checks.check_path(path, session_id, recovered=recovered)
    return VerifyResult(
        session_id,
        path,
        str(found.verdict),
        [VerifyFinding(str(f.code), str(f.message)) for f in found.findings],
    )


def verify_dir(directory: Path, recovery_log: Path | None = None) -> VerifyReport:
    """Check every ``<ULID>.sqlite`` in a backup folder. Read-only.

    ``recovery_log`` (the sessions' own) says which sessions were salvaged: in a copy of one,
    rows whose event was lost are expected, as ``check`` judges the session itself.
    """
    if not directory.is_dir():
        raise errors.UsageError(f"{directory}: no such backup directory")
    recovery = read_recovery_index(recovery_log)
    report = VerifyReport(directory)
    for entry in paths.iter_session_entries(directory):
        recovered = was_recovered(recovery.get(entry.session_id, []))
        report.sessions.append(_check_one(entry.path, entry.session_id, recovered))
    return report
