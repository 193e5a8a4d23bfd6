"""``agentdb backup``: consistent online copies of sessions, safe while the kernel writes;
run it again and again into the same folder.

Per session, into ``DIR`` (names: :mod:`agentdb.jobs.backupdir`):

0. **Judge the session** with ``agentdb check``'s own judge: one ``check`` calls ``corrupt`` or
   ``unreadable`` is ``corrupt`` and nothing in ``DIR`` changes. The snapshot's own check
   cannot stand in for it: SQLite's backup API copies a WAL only up to a bad frame and reads
   pages past a truncated end as zeros, so the copy of a damaged session can look healthy.
1. **Snapshot.** The source is opened read-only (never blocks its writer; a file with no
   ``-wal`` is opened ``immutable`` so nothing is created beside it) and copied with SQLite's
   backup API in one pass inside one read transaction (:func:`agentdb.db.backup_to`: a
   transaction-consistent snapshot that cannot restart under a busy writer) into a temp file
   ``DIR/<id>.sqlite.agentdb-backup-tmp-<pid>``, 0600, in rollback-journal mode (one
   self-contained file that opens without ``-wal``/``-shm``), fsynced.
2. **Verify** the snapshot with ``agentdb check``'s own judge (:func:`agentdb.checks.judge`:
   integrity, identity, schema, content hashes...). The outcome follows check's verdict
   (:func:`refused_outcome`): ``corrupt`` exactly when check calls the session corrupt, and
   nothing in ``DIR`` changes; ``foreign`` for a foreign file; ``failed`` for an unreadable
   one.
3. **Place** it, holding the session's lock in ``DIR`` (so concurrent runs take turns):

   * no ``DIR/<id>.sqlite`` yet: ``link(2)`` it there (never replaces a file) — ``copied``;
   * ``DIR/<id>.sqlite`` is another name of the session itself (a hard link to the session file
     or one of its sidecars: every write changes it too, so it is no backup): the snapshot is
     renamed over that name (the session keeps its own) — ``copied``, saying so. Never
     ``unchanged``: a backup is a separate inode;
   * the old copy fails verification: it is renamed ``<id>.sqlite.corrupt[.N]`` (never
     deleted) and the snapshot takes its place — ``copied``, with ``corrupt_path``;
   * the old copy holds the same rows, or the old copy holds everything the snapshot does
     (a concurrent run was there first) — ``unchanged``, the snapshot is dropped;
   * the old copy is a prefix of the snapshot (:mod:`agentdb.checks.prefix`, compared with the
     old copy as it is at that moment, under the lock) — the snapshot is renamed over it:
     ``updated``. A copy is never replaced by one that holds less;
   * the session is a *proper* prefix of the copy, proven by the chain heads (revision 3:
     the session's head is a link in the copy's chain, which goes on past it) — the session
     lost the copy's last events consistently, a rollback ``check`` cannot see: the copy stays
     and nothing is written beside it (its state is in the copy already), ``kept`` with
     ``rollback`` and a message that names the lost events and ``agentdb restore``;
   * neither is a prefix of the other (the session was recovered with losses) — the old copy
     stays and the snapshot is written beside it as ``DIR/<id>.sqlite.<UTC timestamp>``
     (``kept``); the newest such copy is itself updated, left unchanged or kept the same way on
     later runs, so what the session gains after a lossy recovery is backed up too.

   From revision 3 (both files) the comparison is the head proof of design §11 when it applies
   (``decided_by`` ``proof``: a full chain walk of each file plus one indexed lookup, no row
   compared), else today's row comparison (``rows``); a revision-3 copy that fails chain
   verification is treated as one that fails verification.

``kill -9`` anywhere leaves every copy complete: the final names only ever change by an atomic
``link``/``rename`` of a verified, fsynced file; a killed run's temp file is removed by the
next run. :func:`agentdb.jobs.backupdir.verify_dir` checks a backup folder with the rules of
``agentdb check``.

Size: over 500 lines because it is one job whose steps (judge, snapshot, verify, place, replace
by a superset, keep a lossy state beside) each guard the next and share one outcome.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from agentdb import checks, db, errors, faults, fsutil, paths, workers
from agentdb.checks import policy, prefix
from agentdb.checks.run import read_recovery_index, was_recovered
from agentdb.errors import one_line
from agentdb.jobs import backupdir
from agentdb.jobs.backupdir import VerifyReport, verify_dir
from agentdb.results import BackupOutcomeName, SessionCheck, Verdict
from agentdb.schema.identity import identify

__all__ = ["OUTCOMES", "BackupOutcome", "BackupReport", "VerifyReport", "verify_dir"]

OUTCOMES: tuple[BackupOutcomeName, ...] = get_args(BackupOutcomeName)
DONE: tuple[BackupOutcomeName, ...] = (
    "copied",
    "updated",
    "unchanged",
    "kept",
)  # the session's state is in DIR
# check's verdicts under which a copy is a faithful backup: an older revision is, and so is a
# session that is merely inconsistent (its copy is as good as the session; `check` reports it)
USABLE = policy.ACTS["backup"]
# ...but never a copy whose session_meta does not name the session it is filed under
_IDENTITY = ("meta_missing", "meta_multiple", "meta_id_mismatch")
VERSION = 1  # of the JSON document
_ATTEMPTS = 5  # placements tried when other runs keep creating and removing the copy


@dataclass
class BackupOutcome:
    """What happened to one session's copy."""

    session_id: str  # the ULID in the file name
    outcome: BackupOutcomeName
    path: Path | None  # DIR/<id>.sqlite (None when nothing is there)
    bytes: int = 0  # size of the file written this run (0 when nothing was written)
    seconds: float = 0.0  # wall time for this session (copy, verify, compare, rename)
    revision: int | None = None  # the snapshot's user_version
    verdict: Verdict | None = None  # check's verdict of the snapshot
    message: str = ""  # why not, or what else to know, in one line
    corrupt_path: Path | None = None  # where an old copy that failed verification went
    current_path: Path | None = None  # kept: the timestamped copy that holds the current state
    lost: str | None = None  # kept: what the old copy has that the session lost
    # how the copy was compared with the session: proof (chain heads, design §11) or rows
    # (None: nothing was compared)
    decided_by: str | None = None
    # kept: the session is a proper prefix of this copy, proven by the chain heads (a rollback):
    # {"copy", "session_head", "copy_head", "lost_events": [[first, last], ...]}
    rollback: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        def opt(p: Path | None) -> str | None:
            return str(p) if p else None

        return {
            "session_id": self.session_id,
            "outcome": self.outcome,
            "path": opt(self.path),
            "bytes": self.bytes,
            "seconds": round(self.seconds, 6),
            "revision": self.revision,
            "verdict": self.verdict,
            "message": self.message,
            "corrupt_path": opt(self.corrupt_path),
            "current_path": opt(self.current_path),
            "lost": self.lost,
            "decided_by": self.decided_by,
            "rollback": self.rollback,
        }


@dataclass
class BackupReport:
    """Every session's outcome, in id order."""

    dest_dir: Path  # where the copies went
    sessions: list[BackupOutcome] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C stopped the run: only the sessions before it are here

    @property
    def ok(self) -> bool:
        return all(s.outcome in DONE for s in self.sessions)

    def summary(self) -> dict[str, Any]:
        counts: dict[str, Any] = {"total": len(self.sessions), **dict.fromkeys(OUTCOMES, 0)}
        for s in self.sessions:
            counts[s.outcome] += 1
        counts["bytes"] = sum(s.bytes for s in self.sessions)
        counts["seconds"] = round(sum(s.seconds for s in self.sessions), 6)
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "to": str(self.dest_dir),
            "sessions": [s.to_json() for s in self.sessions],
            "summary": self.summary(),
        }


def _snapshot(src_path: Path, tmp: Path) -> int:
    """Copy ``src_path`` into the new file ``tmp`` (fsynced); returns its revision."""
    src = db.open_readonly(src_path)
    try:
        with db.translated(src_path):
            ident = identify(src)
            if ident.kind not in ("session", "too_new"):
                why = ident.problem or "an empty file"
                raise errors.ForeignFile(
                    f"{src_path}: {why}; not a session file, not copied", path=src_path
                )
            db.backup_to(src, tmp)
            return ident.user_version
    finally:
        src.close()


def _judge(path: Path, sid: str, recovered: bool) -> backupdir.VerifyResult:
    return backupdir.check_copy(path, sid, recovered)


def refused_outcome(
    verdict: str, codes: set[str] | frozenset[str] = frozenset()
) -> BackupOutcomeName:
    """The outcome of a session whose snapshot (or file) is not a faithful backup, by check's
    verdict: ``corrupt`` exactly when check calls it corrupt, ``foreign`` for another
    application's file or another session's (its session_meta names another), else
    ``failed`` (unreadable, too new, insecure, unsafe schema, no single session_meta row)."""
    if policy.is_corrupt(verdict):
        return "corrupt"
    if policy.is_foreign(verdict) or "meta_id_mismatch" in codes:
        return "foreign"
    return "failed"


def _source_refused(db_path: Path, sid: str, recovered: bool, e: errors.AgentdbError) -> _Placed:
    """No snapshot could be taken: the outcome follows check's verdict on the session file."""
    result = checks.judge(db_path, sid, recovered=recovered)
    if result.verdict in USABLE:
        return _Placed("failed", str(e))  # not damage (e.g. a writer kept it busy): say so
    j = checks.judgement_of(result, "full")
    return _Placed(
        refused_outcome(j.verdict, {f.code for f in result.findings}),
        f"{db_path}: not copied — {j.describe()}",
    )


def _usable(judged: backupdir.VerifyResult) -> bool:
    return judged.verdict in USABLE and not any(f.code in _IDENTITY for f in judged.findings)


def _is_error(code: str) -> bool:
    return checks.CODES.get(code, ("info", None))[0] == "error"


def _first_problem(judged: backupdir.VerifyResult) -> str:
    """The first error check found (else the first finding), without the file name."""
    errs = [f for f in judged.findings if _is_error(f.code)]
    for f in errs or judged.findings:
        return one_line(f.message.split(": ", 1)[-1])
    return judged.verdict


class _Placed(Exception):
    """The outcome is decided (raised out of the placing steps)."""

    def __init__(
        self, outcome: BackupOutcomeName, message: str = "", written: Path | None = None
    ) -> None:
        super().__init__(outcome)
        self.outcome, self.message, self.written = outcome, message, written


def _replace(tmp: Path, target: Path, point: str) -> None:
    """Rename the verified snapshot over ``target`` (atomic), durably."""
    faults.point(f"backup_before_{point}")
    os.rename(tmp, target)
    fsutil.fsync_dir(target.parent)
    faults.point(f"backup_after_{point}")


def _rolled_back(out: BackupOutcome, c: prefix.PrefixComparison, copy: Path, sid: str) -> None:
    """The session is a proper prefix of ``copy``, proven (design §11): it lost the copy's
    last events consistently. The copy stays; nothing is written beside it (the session's
    state is in the copy). Raises ``kept``."""
    assert c.rollback is not None
    mine, theirs = c.rollback
    out.decided_by = c.decided_by
    out.rollback = {
        "copy": str(copy),
        "session_head": mine,
        "copy_head": theirs,
        "lost_events": [list(r) for r in c.lost_event_ranges],
    }
    newest = backupdir.copies_of(copy.parent, sid)[:1] == [copy]
    how = f"--from {copy.parent}" if newest else f"--copy {copy}"
    raise _Placed(
        "kept",
        f"the session lost {c.describe_loss()} since {copy.name} was written, consistently: "
        f"its last event ({mine}) is a link in that copy's chain, which goes on to {theirs} "
        f"(a rollback — an older file put back, lost writes — that `agentdb check` cannot "
        f"see); {copy.name} is kept: `agentdb restore {sid} {how}` puts them back",
    )


def _chain_note(c: prefix.PrefixComparison) -> str:
    """Why a revision-3 pair is not a prefix when a chain fails (empty otherwise)."""
    if c.new_chain_ok is False:
        return "the session fails full chain verification: run `agentdb check` on it"
    return ""


def _place_beside(
    tmp: Path,
    final: Path,
    out: BackupOutcome,
    sid: str,
    recovered: bool,
    fresh: bool,
    reports: prefix.ChainReports,
    linked: frozenset[tuple[int, int]],
) -> None:
    """The session is not a superset of ``final``: keep it; put the snapshot in the newest
    timestamped copy if that is a prefix of it, else in a new timestamped copy (unless the
    session is a proven proper prefix of that copy: a rollback, which writes nothing)."""
    dest = final.parent
    stamped = backupdir.stamped_copies(dest, sid)
    if stamped and _inode(stamped[-1]) in linked:
        newest = stamped[-1]
        out.current_path = newest
        _replace(tmp, newest, "replace_stamped")
        raise _Placed("kept", f"{newest.name}: {_LINKED}", newest)
    if stamped and _usable(_judge(stamped[-1], sid, recovered)):
        newest = stamped[-1]
        c = prefix.compare_paths(newest, tmp, reports=reports)
        out.decided_by = c.decided_by
        if c.identical:
            out.current_path = newest
            raise _Placed("kept", f"the session's current state is in {newest.name} already")
        if c.rollback is not None:
            if not fresh:
                raise _Stale
            _rolled_back(out, c, newest, sid)
        if (
            not c.is_prefix
            and not fresh
            and prefix.compare_paths(tmp, newest, reports=reports).is_prefix
        ):
            raise _Stale
        if c.is_prefix:
            out.current_path = newest
            _replace(tmp, newest, "replace_stamped")
            raise _Placed("kept", f"{newest.name} updated to the session's current state", newest)
    stamped_path = backupdir.new_stamped_path(dest, sid)
    faults.point("backup_before_stamped")
    os.link(tmp, stamped_path)  # a fresh name: never replaces anything
    fsutil.fsync_dir(dest)
    faults.point("backup_after_stamped")
    out.current_path = stamped_path
    raise _Placed(
        "kept",
        f"the session's current state written beside it as {stamped_path.name}",
        stamped_path,
    )


class _Retry(Exception):
    """Another run gave the copy its name between our look and our link: place again."""


class _Stale(Exception):
    """The copy holds everything our snapshot does and more: another run placed a newer
    snapshot while ours was taken — or the session lost rows. A fresh snapshot, taken under
    the lock, tells the two apart."""


def _place(
    tmp: Path,
    final: Path,
    st: os.stat_result | None,
    out: BackupOutcome,
    sid: str,
    recovered: bool,
    sync_dir: bool,
    fresh: bool,
    reports: prefix.ChainReports,
    linked: frozenset[tuple[int, int]],
) -> None:
    """Step 3 of the module doc; ``st`` is the locked old copy (None: there is none).
    ``fresh``: the snapshot was taken under the lock; ``reports``: chain walks of the files
    under the lock; ``linked``: the session's and its sidecars' (device, inode).
    Raises :class:`_Placed` (or :class:`_Retry`, :class:`_Stale`)."""
    if st is None:
        try:
            os.link(tmp, final)  # fails (EEXIST) rather than replace a file another run put there
        except FileExistsError:
            raise _Retry from None
        if sync_dir:
            fsutil.fsync_dir(final.parent)
        faults.point("backup_after_link")  # final name made; the temp name still there
        raise _Placed("copied", "", final)
    if (st.st_dev, st.st_ino) in linked:
        _replace(tmp, final, "replace_linked")
        raise _Placed("copied", f"{final.name}: {_LINKED}", final)
    old = _judge(final, sid, recovered)
    if policy.is_insecure_or_too_new(old.verdict):
        raise _Placed(
            "failed",
            f"{final}: the existing copy is {old.verdict} ({_first_problem(old)}); "
            "fix or move it by hand, then run the backup again",
        )
    if not _usable(old):
        _replace_corrupt(tmp, final, st, out, f"{old.verdict}: {_first_problem(old)}")
    c = prefix.compare_paths(final, tmp, reports=reports)  # the old copy as it is now, locked
    out.decided_by = c.decided_by
    if c.old_chain_ok is False and c.new_chain_ok:
        # a revision-3 copy whose chain fails is a copy that fails verification (design §7)
        assert c.old_chain is not None
        _replace_corrupt(tmp, final, st, out, "corrupt: " + ", ".join(c.old_chain.problems))
    if c.identical:
        raise _Placed("unchanged")
    if c.is_prefix:
        _replace(tmp, final, "replace")
        raise _Placed("updated", "", final)
    if c.rollback is not None:
        if not fresh:
            raise _Stale  # a newer copy another run placed, or a rollback: a fresh look tells
        out.lost = c.describe_loss()
        _rolled_back(out, c, final, sid)
    if not fresh and prefix.compare_paths(tmp, final, reports=reports).is_prefix:
        raise _Stale
    out.lost = c.describe_loss()
    note = _chain_note(c)
    try:
        _place_beside(tmp, final, out, sid, recovered, fresh, reports, linked)
    except _Placed as placed:
        if note:
            placed.message = f"{placed.message}; {note}"
        raise


_LINKED = (
    "was another name of the session itself (a hard link, not a copy: every write to the "
    "session changed it too); replaced by an independent, verified copy"
)


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _session_inodes(db_path: Path) -> frozenset[tuple[int, int]]:
    """The (device, inode) of the session file and of its sidecars: a copy that is one of
    them is the session itself under another name."""
    found = (
        _inode(db_path),
        *(_inode(paths.sidecar(db_path, s)) for s in ("-wal", "-shm", "-journal")),
    )
    return frozenset(i for i in found if i is not None)


def _replace_corrupt(
    tmp: Path, final: Path, st: os.stat_result, out: BackupOutcome, why: str
) -> None:
    """The old copy fails verification: it keeps its bytes as ``.corrupt[.N]`` and the
    snapshot takes its name. Raises ``copied``."""
    corrupt = backupdir.corrupt_name_of(final, st)
    if not os.path.lexists(corrupt):
        os.link(final, corrupt)  # the old copy keeps its bytes under the .corrupt name
        fsutil.fsync_dir(final.parent)
    faults.point("backup_after_corrupt_link")
    out.corrupt_path = corrupt
    _replace(tmp, final, "replace_corrupt")
    raise _Placed(
        "copied", f"the old copy failed verification ({why}); kept as {corrupt.name}", final
    )


def _discard(tmp: Path) -> None:
    for p in (tmp, paths.sidecar(tmp, "-journal")):
        try:
            p.unlink()
        except OSError:
            pass


def _take(db_path: Path, tmp: Path, out: BackupOutcome, recovered: bool) -> str:
    """Steps 1 and 2: snapshot the session into ``tmp`` and verify it. Returns a note for the
    report (the verdict when it is not ok); raises :class:`_Placed` when it is not usable."""
    _discard(tmp)
    source = checks.check_path(db_path, out.session_id, recovered=recovered)
    if policy.is_damaged(source.verdict):
        # step 0 (module doc): the snapshot alone could pass (a WAL's frames after a checksum
        # break, another database's WAL or journal are not in it)
        out.verdict = source.verdict
        j = checks.judgement_of(source, "full")
        raise _Placed(
            refused_outcome(source.verdict, {f.code for f in source.findings}),
            f"{db_path}: {j.describe()}; nothing in {tmp.parent} changed",
        )
    out.revision = _snapshot(db_path, tmp)
    faults.point("backup_after_copy")  # a complete, fsynced snapshot; nothing placed yet
    judged = _judge(tmp, out.session_id, recovered)
    out.verdict = judged.verdict
    if policy.is_too_new(judged.verdict):
        raise _Placed(
            "failed",
            f"{db_path}: {_first_problem(judged)}; this agentdb cannot verify it — "
            "upgrade agentdb to back it up",
        )
    if not _usable(judged):
        as_session = SessionCheck(out.session_id, db_path, judged.verdict, findings=judged.findings)
        step = policy.describe(policy.fix_for(as_session))
        raise _Placed(
            refused_outcome(judged.verdict, {f.code for f in judged.findings}),
            f"{db_path}: the snapshot fails verification ({judged.verdict}: "
            f"{_first_problem(judged)}); nothing in {tmp.parent} changed"
            + (f" — {step}" if step else ""),
        )
    return "" if policy.is_ok(judged.verdict) else f"the session is {judged.verdict}"


def backup_session(
    db_path: Path, dest_dir: Path, *, recovered: bool = False, sync_dir: bool = True
) -> BackupOutcome:
    """Back up one session file into ``dest_dir`` (module doc). ``recovered``: the recovery
    log records a salvage of this session (check then expects rows whose event was lost).

    Renames over existing copies are fsynced where they are made; a new copy's ``link`` is
    fsynced here with ``sync_dir``, else by the caller (``backup_sessions`` does it once, at
    the end, before it reports anything).
    """
    started = time.monotonic()
    sid = paths.session_id_of(db_path.name)
    if sid is None:
        raise errors.UsageError(f"{db_path}: not named like a session file (<ULID>.sqlite)")
    final = backupdir.copy_path(dest_dir, sid)
    out = BackupOutcome(sid, "failed", None)
    note = ""

    def done(
        outcome: BackupOutcomeName, message: str = "", written: Path | None = None
    ) -> BackupOutcome:
        out.outcome, out.message, out.seconds = outcome, message, time.monotonic() - started
        if os.path.lexists(final):
            out.path = final
        if written is not None:
            try:
                out.bytes = os.stat(written).st_size
            except OSError:
                out.bytes = 0
        return out

    tmp = backupdir.tmp_path(dest_dir, sid)
    try:
        backupdir.ensure(dest_dir)
        note = _take(db_path, tmp, out, recovered)
        linked = _session_inodes(db_path)
        for _ in range(_ATTEMPTS):
            with backupdir.locked_copy(final) as st:
                reports = prefix.ChainReports()  # the copies cannot change while locked
                try:
                    _place(tmp, final, st, out, sid, recovered, sync_dir, False, reports, linked)
                except _Retry:
                    continue
                except _Stale:
                    # under the lock no run can place a newer copy: snapshot the session again
                    reports.forget(tmp)
                    note = _take(db_path, tmp, out, recovered)
                    _place(tmp, final, st, out, sid, recovered, sync_dir, True, reports, linked)
        return done("failed", f"{final}: created and removed again and again meanwhile; retry")
    except _Placed as placed:
        message = "; ".join(m for m in (placed.message, note) if m)
        return done(placed.outcome, message, placed.written)
    except (errors.ForeignFile, errors.Corrupt, errors.Unreadable) as e:
        refused = _source_refused(db_path, sid, recovered, e)
        return done(refused.outcome, refused.message)
    except errors.AgentdbError as e:
        return done("failed", str(e))
    except OSError as e:  # no space, a size limit, permission, read-only, I/O error
        return done("failed", str(fsutil.os_error(e)))
    finally:
        _discard(tmp)


def backup_sessions(
    sessions_dir: Path,
    ids: Sequence[str] | None,
    dest_dir: Path,
    *,
    recovery_log: Path | None = None,
    progress: Callable[[BackupOutcome, int, int], None] | None = None,
    jobs: int = 1,
) -> BackupReport:
    """Back up ``ids`` (None: every session) into ``dest_dir``.

    With ``jobs`` > 1, that many worker processes take one session each at a time; the report
    is in id order all the same. Ctrl-C lets the sessions in hand finish and reports them. A
    worker killed mid-copy leaves only its temp file, which this run removes before it reports.
    """
    if dest_dir.resolve() == sessions_dir.resolve():
        raise errors.UsageError(f"{dest_dir}: is the sessions directory; choose another --to")
    report = BackupReport(dest_dir)
    if ids is None:
        targets = [e.path for e in paths.iter_session_entries(sessions_dir)]
    else:
        targets = [paths.session_path(sessions_dir, sid) for sid in dict.fromkeys(ids)]
    log = recovery_log if recovery_log is not None else paths.recovery_log_path(sessions_dir)
    recovery = read_recovery_index(log)
    if dest_dir.is_dir():
        backupdir.sweep_leftovers(dest_dir)

    def one(path: Path) -> BackupOutcome:
        sid = path.name.removesuffix(paths.SESSION_SUFFIX)
        recovered = was_recovered(recovery.get(sid, []))
        return backup_session(path, dest_dir, recovered=recovered, sync_dir=False)

    def died(path: Path, why: str) -> BackupOutcome:
        sid = path.name.removesuffix(paths.SESSION_SUFFIX)
        final = backupdir.copy_path(dest_dir, sid)
        return BackupOutcome(
            sid,
            "failed",
            final if os.path.lexists(final) else None,
            message=f"{path}: {why} while copying it; {final.name} is as it was or complete "
            f"— run the backup again",
        )

    # a copy in hand is only a temp file, which the next run removes
    ran = workers.run_each(one, targets, jobs, died=died, done=progress)
    report.sessions, report.interrupted = ran.results, ran.interrupted
    if dest_dir.is_dir():
        if ran.deaths or ran.interrupted:
            backupdir.sweep_leftovers(dest_dir)  # temp copies of workers that were killed
        fsutil.fsync_dir(dest_dir)  # every link made above is durable before the report
    return report
