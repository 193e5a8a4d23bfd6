"""Recovery: salvage damaged sessions into replacements, keep the originals, lose nothing
salvageable.

:func:`recover_session` is the one routine behind ``agentdb recover`` and the kernel's automatic
attempt (:mod:`agentdb.kernel`). For one session it:

1. refuses what must not be touched (a symlink or non-regular file, insecure modes, a session
   another process has open, a foreign or too-new file);
2. under :func:`agentdb.locks.hold` (no SQLite connection can open the session until it is done),
   copies the original and its WAL into a private temporary directory and judges the copy:
   healthy files are reported ``healthy`` and left alone;
3. runs the engines on the copy: rows through SQLite stepping around damage (:mod:`.rows`),
   every page and committed WAL frame by the file format (:mod:`.pages`); merges them by primary
   key (:mod:`.merge`); when rows are still known lost, SQLite's own recovery extension
   (:mod:`.shell`, optional: only when a capable shell exists) may fill gaps, never override;
4. writes the replacement beside the original (0600, current revision), verifies it, logs the
   intent, and swaps (:mod:`agentdb.swap`); then logs the outcome.

Nothing salvageable at all: the original is untouched and the outcome is ``unreadable``.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from agentdb import db, errors, fsutil, locks, paths, recoverylog, swap
from agentdb.fileformat import foreign_evidence, scan_wal
from agentdb.paths import sidecar
from agentdb.results import RecoverOutcomeName
from agentdb.salvage import merge as merge_mod
from agentdb.salvage import pages as pages_mod
from agentdb.salvage import replacement, rows, sidecars
from agentdb.salvage import tables as tables_mod
from agentdb.salvage.tables import TABLES
from agentdb.schema.revisions import APPLICATION_ID

OUTCOMES: tuple[RecoverOutcomeName, ...] = get_args(RecoverOutcomeName)


@dataclass
class RecoveryOutcome:
    """What recovering one session did."""

    session_id: str
    outcome: RecoverOutcomeName
    path: str  # the session file
    corrupt_path: str | None = None  # where the original bytes are kept (None if untouched)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # table -> {"salvaged": N, ..}
    engines: list[str] = field(default_factory=list)  # engines whose rows are in the replacement
    lost: dict[str, Any] = field(default_factory=dict)  # what is known lost
    notes: list[str] = field(default_factory=list)  # reasons, warnings, rebuilt rows
    replacement_check: list[str] = field(default_factory=list)  # verification problems
    dry_run: bool = False  # True: nothing was changed
    corrupt_wal: str | None = None  # where the original's WAL is kept, if it had one
    corrupt_journal: str | None = None  # where the original's hot rollback journal is kept
    # every engine that ran: {"found": {table: rows it found}, "used": {table: rows it gave}}
    found_by: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    swap_started: bool = False  # the intent line is logged: an interrupted swap is resumable
    error: errors.AgentdbError | None = field(default=None, repr=False)  # why "failed"

    def log_entry(self, event: str) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "event": event,
            "outcome": self.outcome,
            "path": self.path,
            "corrupt_path": self.corrupt_path,
            "corrupt_wal": self.corrupt_wal,
            "corrupt_journal": self.corrupt_journal,
            "engines": self.engines,
            "found_by": self.found_by,
            "tables": self.tables,
            "lost": self.lost,
            "notes": self.notes,
        }


@dataclass
class RecoveryReport:
    """Outcomes of one recover run, in the order the sessions were given."""

    sessions: list[RecoveryOutcome] = field(default_factory=list)
    dry_run: bool = False
    interrupted: bool = False  # Ctrl-C stopped the run: only the sessions before it are here

    @property
    def ok(self) -> bool:
        return all(s.outcome in ("recovered", "healthy") for s in self.sessions)


Fault = Callable[[str], None]


def _shell() -> Any:
    try:
        from agentdb.salvage import shell
    except ImportError:
        return None
    return shell


def recover_sessions(
    sessions_dir: Path,
    session_ids: Iterable[str] | None = None,
    *,
    dry_run: bool = False,
    recovery_log: Path | None = None,
    fault: Fault | None = None,
    wait: float | None = None,
) -> RecoveryReport:
    """Recover the given sessions (None: every ``<ULID>.sqlite`` entry in the directory)."""
    if session_ids is None:
        ids = [e.session_id for e in paths.iter_session_entries(sessions_dir)]
    else:
        ids = [paths.validate_id(s) for s in session_ids]
    report = RecoveryReport(dry_run=dry_run)
    try:
        for sid in ids:
            report.sessions.append(
                recover_session(
                    sessions_dir,
                    sid,
                    dry_run=dry_run,
                    recovery_log=recovery_log,
                    fault=fault,
                    wait=wait,
                )
            )
    except KeyboardInterrupt:  # the session in hand is as a killed recover leaves it
        report.interrupted = True
    return report


def recover_session(
    sessions_dir: Path,
    session_id: str,
    *,
    dry_run: bool = False,
    recovery_log: Path | None = None,
    fault: Fault | None = None,
    wait: float | None = None,
) -> RecoveryOutcome:
    """Recover one session if it is damaged; see the module docstring. With ``wait``
    (seconds), a session someone has open is waited for that long before it is skipped."""
    path = paths.session_path(sessions_dir, session_id)
    log = recovery_log or paths.recovery_log_path(sessions_dir)
    out = RecoveryOutcome(session_id, "refused", str(path), dry_run=dry_run)
    try:
        db.require_regular(path)
        db.require_secure(path)
    except errors.AgentdbError as e:
        out.notes.append(str(e))
        return out
    if not dry_run:
        try:
            recoverylog.require_writable(log)  # before anything is written or locked
        except errors.AgentdbError as e:
            out.notes.append(f"{e}; not recovered")
            return out
    holder = locks.probe(path) if wait is None else locks.wait_free(path, wait)
    if holder is not None:
        out.outcome = "skipped_live"
        who = f"pid {holder.pid}" if holder.pid else "another agentdb job"
        out.notes.append(f"{path}: open by {who}; recover it when the session is closed")
        return out
    try:
        with locks.hold_waiting(path, wait or 0.0) as fd:
            return _recover_held(path, session_id, fd, out, log, dry_run, fault)
    except errors.SessionLive as e:
        out.outcome = "skipped_live"
        out.notes.append(str(e))
        return out
    except (OSError, errors.AgentdbError) as e:
        # The system refused a read or write (no space, file too large, permission, read-only,
        # I/O error), or something not a regular file sits where agentdb writes: nothing of
        # this run stays behind. A swap the intent line already announced is finished by the
        # next run (its steps are idempotent); before that line the session is as it was.
        failure = fsutil.os_error(e) if isinstance(e, OSError) else e
        out.error = failure
        if not dry_run:
            with contextlib.suppress(OSError):  # the system may refuse this too (EROFS, EIO)
                swap.remove_job_files(path)
        out.outcome = "failed"
        if out.swap_started:
            out.notes.append(
                f"{failure}; the swap was interrupted — run `agentdb recover {session_id}` "
                "again to finish it"
            )
        else:
            out.corrupt_path = out.corrupt_wal = None
            out.notes.append(f"{failure}; the session is unchanged")
        return out


def _write_private(path: Path, data: bytes) -> None:
    fd = fsutil.open_regular(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, paths.FILE_MODE)
    try:
        with fsutil.naming(path):
            fsutil.write_all(fd, data)
    finally:
        os.close(fd)


def _recover_held(
    path: Path,
    session_id: str,
    fd: int,
    out: RecoveryOutcome,
    log: Path,
    dry_run: bool,
    fault: Fault | None,
) -> RecoveryOutcome:
    st = os.fstat(fd)
    now = os.lstat(path)
    if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
        out.outcome = "skipped_live"
        out.notes.append(f"{path}: replaced while being locked; retry")
        return out
    if not dry_run:
        swap.remove_job_files(path)
    interrupted = swap.existing_corrupt_of(path, st)
    wal_path = sidecar(path, "-wal")
    if not wal_path.exists() and interrupted is not None:
        wal_path = sidecar(interrupted, "-wal")  # an interrupted swap already moved it
    db_bytes = fsutil.read_fd(fd, st.st_size)
    try:
        wal_bytes: bytes | None = fsutil.read_regular(wal_path)
    except FileNotFoundError:
        wal_bytes = None

    journal_path = sidecar(path, "-journal")
    if not journal_path.exists() and interrupted is not None:
        journal_path = sidecar(interrupted, "-journal")
    journal_bytes = sidecars.hot_journal_bytes(journal_path)

    with fsutil.private_workdir("agentdb-recover-") as work:
        journal_note = None
        if journal_bytes is not None:
            rolled, journal_note = sidecars.roll_back(db_bytes, journal_bytes, path.name, work)
            if rolled is not None:
                db_bytes = rolled
        copy = work / path.name
        _write_private(copy, db_bytes)
        if wal_bytes:
            _write_private(sidecar(copy, "-wal"), wal_bytes)
        conn, open_error = sidecars.open_copy(copy)
        engine_wal = wal_bytes  # the WAL the engines read (None when it is foreign)
        try:
            diag = rows.diagnose(conn, open_error)
            if wal_bytes:
                scan = scan_wal(wal_bytes)
                foreign = foreign_evidence(
                    db_bytes[:100], scan, (APPLICATION_ID,)
                ) or sidecars.meta_elsewhere(conn, db_bytes, session_id, work)
                if foreign is not None:
                    # Another database's WAL: salvage this session from its file alone; the
                    # WAL goes with the original as <corrupt>-wal.
                    engine_wal = None
                    if conn is not None:
                        conn.close()
                        conn = None
                    for suffix in ("-wal", "-shm"):
                        sidecar(copy, suffix).unlink(missing_ok=True)
                    conn, open_error = sidecars.open_copy(copy)
                    diag = rows.diagnose(conn, open_error)
                    diag.damaged = True
                    diag.integrity_only = False
                    diag.reasons.append(
                        f"WAL is another database's ({foreign}); salvaged from the file alone"
                    )
                elif "wal_frames_after_break" in scan.codes:
                    diag.damaged = True
                    diag.integrity_only = False
                    diag.reasons.append("WAL: intact commits after a checksum break")
            if journal_note is not None:  # a journal that is not this database's
                diag.damaged = True
                diag.integrity_only = False
                diag.reasons.append(journal_note)
            # Messages about the private copy name the session file the operator knows.
            diag.reasons = [r.replace(str(copy), str(path)) for r in diag.reasons]
            if diag.refused is not None and interrupted is None:
                out.outcome = "refused"
                out.notes += diag.reasons
                return out
            if not diag.damaged and interrupted is None:
                if journal_bytes is not None:
                    out.notes.append("a hot journal will be rolled back on the next open")
                return _healthy(path, out, log)
            if journal_bytes is not None and journal_note is None:
                diag.reasons.append(
                    "salvaged from the state the hot journal's rollback gives; the journal is "
                    "kept with the original"
                )
            if interrupted is not None:
                diag.reasons.append(f"resuming an interrupted recovery ({interrupted.name})")
            out.notes += diag.reasons
            page = pages_mod.salvage_pages(db_bytes, engine_wal, session_id)
            found = None
            if conn is not None and diag.refused is None:
                found = rows.salvage_rows(conn, session_id, diag.revision or 2, page.verified)
        finally:
            if conn is not None:
                conn.close()
        rebuild = tables_intact(diag, found, page)
        merged = merge_mod.merge(session_id, None if rebuild else page, found, None)
        shell_notes: list[str] = []
        shell_rows: dict[str, list[tuple[Any, ...]]] | None = None
        if rebuild:
            shell_notes.append(
                "index-rebuild: every table read in full through SQLite and agreeing with the "
                "page-level walk; the damage lies outside the tables (indexes, free space), "
                "which the replacement rebuilds"
            )
        elif page.fully_understood and merged.rows["session_meta"]:
            if merged.lost:
                shell_notes.append(
                    "sqlite-recover not run: every page typed as a b-tree page parsed and every "
                    "cell decoded, so the rows still missing are on pages with nothing left"
                )
        elif merged.lost or not merged.rows["session_meta"]:
            # Gaps remain: let SQLite's own recovery extension try to fill them (if available).
            shell_rows, shell_notes = _run_shell(copy, engine_wal, session_id, work)
            if shell_rows:
                merged = merge_mod.merge(session_id, page, found, shell_rows)
        _describe(out, diag, found, page, merged, shell_notes, rebuild)
        out.found_by = _found_by(found, page, shell_rows, merged, rebuild)
        if merged.count() == 0 and not merged.rows["session_meta"]:
            out.outcome = "unreadable"
            out.notes.append("nothing could be salvaged; the original is left untouched")
            if not dry_run:
                recoverylog.append(log, out.log_entry("outcome"))
            return out
        target = work / "replacement.sqlite" if dry_run else paths.job_file(path, "recover", "tmp")
        try:
            replacement.write(target, merged)
            check = replacement.verify(target, session_id, merged)
            if check.ok:
                _check_rules(target, session_id, check)
        except BaseException:
            if not dry_run:
                swap.remove_job_files(path)
            raise
        out.replacement_check = check.problems
        if check.fk_orphans:
            out.notes.append(
                f"{check.fk_orphans} rows reference events that were lost (kept: history)"
            )
        if not check.ok:
            if not dry_run:
                swap.remove_job_files(path)
            out.outcome = "unreadable"
            out.notes.append(f"the replacement failed verification: {check.problems[0]}")
            if not dry_run:
                recoverylog.append(log, out.log_entry("outcome"))
            return out
        out.outcome = "recovered"
        _fault(fault, "after_salvage")
        if dry_run:
            out.notes.append("dry run: nothing was changed")
            return out
        corrupt = interrupted or swap.next_corrupt_name(path)
        out.corrupt_path = str(corrupt)
        if wal_bytes:
            out.corrupt_wal = str(sidecar(corrupt, "-wal"))
        if journal_bytes is not None:
            out.corrupt_journal = str(sidecar(corrupt, "-journal"))
        recoverylog.append(log, out.log_entry("intent"))
        out.swap_started = True
        _fault(fault, "after_intent")
        swap.swap(path, target, corrupt, fault)
        out.swap_started = False
        _log_outcome(log, out)
        return out


def _log_outcome(log: Path, out: RecoveryOutcome) -> None:
    """The outcome line of a finished swap; the swap stands even if the line cannot be written."""
    try:
        recoverylog.append(log, out.log_entry("outcome"))
    except (OSError, errors.AgentdbError) as e:
        failure = fsutil.os_error(e) if isinstance(e, OSError) else e
        out.notes.append(f"recovered, but its outcome line is not in the recovery log: {failure}")


def _check_rules(target: Path, session_id: str, check: replacement.ReplacementCheck) -> None:
    """Judge the replacement by ``agentdb check``'s own rules, as a recovered file: its verdict
    must be ok (informational findings such as ``orphan_of_recovery`` are allowed)."""
    from agentdb.checks import check_path

    result = check_path(target, session_id, recovered=True)
    if result.verdict != "ok":
        check.ok = False
        bad = [f for f in result.findings if f.severity == "error"] or result.findings
        check.problems += [f"check: {result.verdict}: {f.code}: {f.message}" for f in bad[:3]]
        if not bad:
            check.problems.append(f"check: verdict {result.verdict}")


def tables_intact(
    diag: rows.Diagnosis, found: rows.RowSalvage | None, page: pages_mod.PageSalvage
) -> bool:
    """True when only integrity_check complains and every table b-tree is intact: SQLite read
    every table start to end with no error and no rejected row (content hashes included), and
    the page engine's walk of the same b-trees found exactly the same rows, with no orphaned
    leaf holding a row SQLite did not see. The damage is then confined to indexes."""
    if not diag.integrity_only or found is None or not page.schema_found:
        return False
    if not found.complete or found.damaged_regions or found.rejected:
        return False
    if page.broken or page.crosslinked or page.crosslink_owner:
        return False  # a live row's payload is structurally wrong: not an index-only damage
    live: dict[str, dict[Any, Any]] = {t: {} for t in TABLES}
    for c in page.candidates:
        key = tables_mod.key_of(c.table, c.row)
        if c.tier == pages_mod.LIVE:
            live[c.table][key] = c.row
        elif c.tier == pages_mod.STRAY and key not in found.rows[c.table]:
            return False  # a row in a leaf no b-tree reaches
    return all(live[t] == found.rows[t] for t in TABLES)


def _fault(fault: Fault | None, point: str) -> None:
    if fault is not None:
        fault(point)


def _healthy(path: Path, out: RecoveryOutcome, log: Path) -> RecoveryOutcome:
    """A healthy file; if an interrupted recovery of it only lacks its outcome line, finish."""
    out.outcome = "healthy"
    entries = recoverylog.entries_for(log, out.session_id)
    if entries and entries[-1].get("event") == "intent":
        last = entries[-1]
        corrupt = last.get("corrupt_path")
        if isinstance(corrupt, str) and Path(corrupt).exists():
            out.outcome = "recovered"
            out.corrupt_path = corrupt
            out.corrupt_wal = last.get("corrupt_wal")
            out.tables = last.get("tables") or {}
            out.engines = last.get("engines") or []
            out.found_by = last.get("found_by") or {}
            out.lost = last.get("lost") or {}
            out.notes = [*list(last.get("notes") or []), "finished an interrupted recovery"]
            _log_outcome(log, out)
    return out


def _run_shell(
    copy: Path, wal_bytes: bytes | None, session_id: str, work: Path
) -> tuple[dict[str, list[tuple[Any, ...]]] | None, list[str]]:
    shell = _shell()
    if shell is None:
        return None, []
    try:
        if shell.find_capable_shell() is None:
            return None, []
        wal = sidecar(copy, "-wal") if wal_bytes else None
        shell_dir = work / "shell"
        fsutil.ensure_dir(shell_dir)
        got = shell.shell_salvage(copy, wal, session_id, shell_dir)
    except Exception as e:  # the optional engine must never sink the others
        return None, [f"sqlite-recover engine failed: {type(e).__name__}: {e}"]
    return dict(got.rows), list(got.notes)


def _found_by(
    found: rows.RowSalvage | None,
    page: pages_mod.PageSalvage,
    shell_rows: dict[str, list[tuple[Any, ...]]] | None,
    merged: merge_mod.Merged,
    rebuild: bool,
) -> dict[str, dict[str, dict[str, int]]]:
    """Per engine that ran: how many rows of each table it found, and how many it gave."""

    def used(*sources: str) -> dict[str, int]:
        return {t: n for t in TABLES if (n := sum(merged.sources[t][s] for s in sources))}

    out: dict[str, dict[str, dict[str, int]]] = {}
    if found is not None:
        name = "index-rebuild" if rebuild else "rows"
        out[name] = {
            "found": {t: len(v) for t, v in found.rows.items() if v},
            "used": used("rows"),
        }
    tiers: dict[str, Counter[str]] = {}
    for c in page.candidates:
        tiers.setdefault(c.table, Counter())[pages_mod.TIER_NAMES[c.tier]] += 1
    out["pages"] = {
        "found": {t: sum(tiers[t].values()) for t in TABLES if t in tiers},
        "used": {} if rebuild else used("live", "stray", "stale"),
    }
    if page.free and not rebuild:
        shapes: Counter[str] = Counter()
        for fr in page.free:
            got = pages_mod.classify(list(fr.rec), fr.rowid or 0)
            if got is not None and got[0] in TABLES:
                shapes[got[0]] += 1
        out["free-space"] = {"found": dict(shapes), "used": used("free-space")}
    if shell_rows is not None:
        out["sqlite-recover"] = {
            "found": {t: len(v) for t, v in shell_rows.items() if v},
            "used": used("sqlite-recover"),
        }
    derived = used("derived", "rebuilt")
    if derived:
        out["derived"] = {"found": derived, "used": derived}
    return out


def _describe(
    out: RecoveryOutcome,
    diag: rows.Diagnosis,
    found: rows.RowSalvage | None,
    page: pages_mod.PageSalvage,
    merged: merge_mod.Merged,
    shell_notes: list[str],
    rebuild: bool = False,
) -> None:
    out.tables = {
        t: {"salvaged": len(merged.rows[t]), "sources": dict(merged.sources[t])} for t in TABLES
    }
    if found is not None:
        # The rows engine's reader: each restart begins past a new damaged region, so
        # restarts <= damaged_regions (the scan runs at most damaged_regions + 1 times).
        for t in TABLES:
            out.tables[t]["restarts"] = found.restarts.get(t, 0)
            out.tables[t]["damaged_regions"] = found.regions.get(t, 0)
    used: Counter[str] = Counter()
    for t in TABLES:
        used.update(merged.sources[t])
    engines = []
    if rebuild:
        engines.append("index-rebuild")
    if used["rows"] and not rebuild:
        engines.append("rows")
    if used["live"] or used["stray"] or used["stale"]:
        engines.append("pages")
    if used["sqlite-recover"]:
        engines.append("sqlite-recover")
    if used["free-space"]:
        engines.append("free-space")
    if used["derived"] or used["rebuilt"]:
        engines.append("derived")
    out.engines = engines
    out.lost = merged.lost
    for t, keys in merged.unverified.items():
        out.tables[t]["unverified"] = len(keys)
        if t in tables_mod.AUTOINCREMENT_TABLES:
            name = "unverified_event_sequences" if t == "events" else f"unverified_{t}_sequences"
            out.lost[name] = merge_mod.ranges(sorted(keys))
        else:
            out.lost[f"unverified_{t}"] = len(keys)
    rejected = Counter(page.rejected)
    if found is not None:
        rejected.update(found.rejected)
        out.notes += found.notes
        if found.damaged_regions:
            out.notes.append(f"rows engine stepped around {found.damaged_regions} damaged regions")
    out.notes += page.notes + merged.notes + shell_notes
    if rejected:
        top = ", ".join(f"{why} ({n})" for why, n in rejected.most_common(6))
        out.notes.append(f"rejected: {top}")
