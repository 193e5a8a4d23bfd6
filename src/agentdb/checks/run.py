"""Check many sessions: parallel processes, results in session-id order, Ctrl-C safe."""

from __future__ import annotations

import bisect
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentdb import db, errors, fsutil, paths, recoverylog
from agentdb.checks import policy
from agentdb.checks.atrest import ok_at_rest
from agentdb.checks.codes import finding, verdict_of
from agentdb.checks.file import check_path
from agentdb.interrupts import Guarded
from agentdb.results import OK, CheckReport, DirectoryFinding, Finding, SessionCheck

Progress = Callable[[int, int], None]  # (done, total)
POOL_THRESHOLD = 50  # fewer files than this are checked in this process (no pool start-up)

_SIDECAR_NAME = paths.re.compile(
    r"(?P<id>[0-7][0-9A-HJKMNP-TV-Z]{25})\.sqlite(?P<suffix>-wal|-shm|-journal)"
)


def read_recovery_index(log_path: Path | None) -> dict[str, list[dict[str, Any]]]:
    """The recovery log's entries grouped by session id (read once per run)."""
    out: dict[str, list[dict[str, Any]]] = {}
    if log_path is None:
        return out
    for e in recoverylog.read(log_path):
        sid = e.get("session_id")
        if isinstance(sid, str):
            out.setdefault(sid, []).append(e)
    return out


def read_recovery_index_or_finding(
    log_path: Path,
) -> tuple[dict[str, list[dict[str, Any]]], DirectoryFinding | None]:
    """:func:`read_recovery_index` for ``check``: a log that cannot be read (a symlink, FIFO or
    directory in its place, a permission error) is one directory finding, and every session is
    still checked (without the log, an orphan row of a recovery reads as ``missing_event``)."""
    try:
        return read_recovery_index(log_path), None
    except (errors.AgentdbError, OSError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        if str(log_path) not in why:
            why = f"{log_path}: {why}"
        return {}, DirectoryFinding(
            log_path,
            None,
            finding(
                "recovery_log_unreadable",
                f"{why} (sessions were checked without the recovery history; move the log "
                "back or away and check again)",
                policy.move_aside(log_path, sidecars=False),
            ),
        )


def _stamp(path: Path) -> fsutil.StatKey | None:
    try:
        return fsutil.stat_key(os.stat(path))
    except OSError:
        return None


def was_recovered(entries: Iterable[dict[str, Any]]) -> bool:
    return any(e.get("event") == "outcome" and e.get("outcome") == "recovered" for e in entries)


def _recovery_entry(entries: list[dict[str, Any]], corrupt_name: str) -> int | None:
    """The index in ``entries`` of the recovery that kept the original as ``corrupt_name``."""
    for i in range(len(entries) - 1, -1, -1):
        cp = entries[i].get("corrupt_path")
        if isinstance(cp, str) and os.path.basename(cp) == corrupt_name:
            return i
    return None


def lost_nothing(entry: dict[str, Any]) -> bool:
    """A recovery outcome line that says nothing was lost: every ``*_missing`` count of its
    ``lost`` is zero, session_meta was not rebuilt, and it recorded no gap in the history."""
    lost = entry.get("lost")
    gaps = entry.get("gaps")
    if entry.get("outcome") != "recovered" or not isinstance(lost, dict) or gaps:
        return False
    if "session_meta" in lost:
        return False
    return not any(
        k.endswith("_missing") and (type(v) is not int or v != 0) for k, v in lost.items()
    )


def _restored_after(entries: list[dict[str, Any]], since: int) -> dict[str, Any] | None:
    """The newest restore (from a backup copy) logged after entry ``since`` that lost none of
    the events the file then held."""
    for e in reversed(entries[since + 1 :]):
        if (
            e.get("event") == "outcome"
            and e.get("job") == "restore"
            and e.get("outcome") == "restored"
            and not e.get("lost_events")
        ):
            return e
    return None


def _recovered_earlier(name: str, entries: list[dict[str, Any]]) -> str:
    """The message of a ``.corrupt`` sibling: when it was recovered and, from the recovery log,
    whether history may be missing — not when the recovery lost nothing, or when a restore
    from a backup since put a whole copy back."""
    i = _recovery_entry(entries, name)
    head = f"{name}: the damaged original of an earlier recovery"
    if i is None:
        return f"{head} (no entry in the recovery log); this session's history may be incomplete"
    when = entries[i].get("time")
    dated = f"recovered on {when}" if when is not None else "recovered"
    restored = _restored_after(entries, i)
    if restored is not None:
        on = f" on {restored.get('time')}" if restored.get("time") is not None else ""
        return (
            f"{head} ({dated}); restored since{on} from a backup copy that holds every event "
            "the recovered file held: the original can be deleted once you no longer want it"
        )
    if lost_nothing(entries[i]):
        return (
            f"{head} ({dated}); the recovery lost nothing: the original can be deleted once "
            "you no longer want it"
        )
    return f"{head} ({dated}); this session's history may be incomplete"


def list_directory(sessions_dir: Path, ids: set[str] | None = None) -> list[str]:
    """Every entry name of ``sessions_dir`` (only those named after one of ``ids`` when given:
    a session's own file, sidecars and siblings), sorted, so session files come in id order."""
    with os.scandir(sessions_dir) as it:
        if ids is None:
            return sorted(de.name for de in it)
        return sorted(n for de in it if (n := de.name)[:26] in ids)


def check_directory_extras(
    sessions_dir: Path,
    ids: Iterable[str] | None = None,
    *,
    recovery: dict[str, list[dict[str, Any]]] | None = None,
    names: list[str] | None = None,
) -> tuple[dict[str, list[Finding]], list[DirectoryFinding]]:
    """Findings about entries beside the session files, restricted to ``ids`` when given.

    Returns (findings to attach to existing sessions by id, findings about the directory):
    ``.corrupt`` siblings (``recovered_earlier``, dated from the recovery log), files an
    interrupted agentdb job left (``job_leftover``), sidecars without a database
    (``orphan_sidecar``). Uses ``scandir`` only; ``names`` is the caller's sorted listing of
    the directory when it has one (one scan per run).
    """
    wanted = None if ids is None else set(ids)
    recovery = recovery or {}
    per_session: dict[str, list[Finding]] = {}
    directory: list[DirectoryFinding] = []
    if names is None:
        names = list_directory(sessions_dir)
    listing = names  # sorted: membership by bisection, no second copy of a long listing

    def present(sid: str) -> bool:
        name = sid + paths.SESSION_SUFFIX
        i = bisect.bisect_left(listing, name)
        return i < len(listing) and listing[i] == name

    def put(sid: str, name: str, f: Finding) -> None:
        if present(sid):
            per_session.setdefault(sid, []).append(f)
        else:
            directory.append(DirectoryFinding(sessions_dir / name, sid, f))

    for name in names:
        if m := _SIDECAR_NAME.fullmatch(name):
            sid = m.group("id")
            if (wanted is None or sid in wanted) and not present(sid):
                directory.append(
                    DirectoryFinding(
                        sessions_dir / name,
                        sid,
                        finding(
                            "orphan_sidecar",
                            f"{name}: SQLite sidecar with no {sid}.sqlite beside it; if the "
                            "session was moved, move this with it, else remove it by hand",
                        ),
                    )
                )
        elif m := paths.JOB_FILE_RE.fullmatch(name):
            sid, job = m.group("id"), m.group("job")
            if wanted is None or sid in wanted:
                fix = f"agentdb {job} {sid}" + (" --from DIR" if job == "restore" else "")
                put(
                    sid,
                    name,
                    finding(
                        "job_leftover",
                        f"{name}: left by an agentdb {job} job that was interrupted (or is still "
                        f"running); run `{fix}` again to finish it",
                        fix,
                    ),
                )
        elif m := paths.CORRUPT_RE.fullmatch(name):
            sid = m.group("id")
            if wanted is None or sid in wanted:
                put(
                    sid,
                    name,
                    finding("recovered_earlier", _recovered_earlier(name, recovery.get(sid, []))),
                )
    for sid in sorted(recovery):  # only sessions the recovery log names can have this finding
        if (wanted is not None and sid not in wanted) or not present(sid):
            continue
        outcomes = [e for e in recovery.get(sid, []) if e.get("event") == "outcome"]
        if outcomes and outcomes[-1].get("outcome") == "unreadable":
            last = outcomes[-1]
            why = [str(n) for n in (last.get("notes") or [])][:1]
            put(
                sid,
                sid + paths.SESSION_SUFFIX,
                finding(
                    "recovery_unreadable",
                    f"{sid}{paths.SESSION_SUFFIX}: recovery on {last.get('time')} salvaged "
                    f"nothing (outcome unreadable in the recovery log"
                    f"{': ' + why[0] if why else ''}); the file was left untouched: restore it "
                    "from a backup or move it aside",
                ),
            )
    return per_session, directory


def check_file(
    sessions_dir: Path,
    entry: paths.Entry | str,
    *,
    quick: bool = False,
    recovery_log: Path | None = None,
) -> SessionCheck:
    """Check one session of ``sessions_dir`` (its file, its sidecars, its siblings)."""
    sid = entry.session_id if isinstance(entry, paths.Entry) else paths.validate_id(entry)
    log = recovery_log if recovery_log is not None else paths.recovery_log_path(sessions_dir)
    recovery, log_problem = read_recovery_index_or_finding(log)
    result = check_path(
        paths.session_path(sessions_dir, sid),
        sid,
        quick=quick,
        recovered=was_recovered(recovery.get(sid, [])),
    )
    extra, _ = check_directory_extras(
        sessions_dir, [sid], recovery=recovery, names=list_directory(sessions_dir, {sid})
    )
    result.findings.extend(extra.get(sid, []))
    if log_problem is not None:
        result.findings.append(log_problem.finding)
    result.fix = policy.fix_for(result)
    return result


# ------------------------------------------------------------------------------ many files

_Work = tuple[str, str, bool, bool]  # (session_id, path, quick, recovered)


@dataclass
class Checked:
    """One session's result, with the ``lstat`` of its files taken just before it was read
    (the identity a verdict cache records with it) and when."""

    result: SessionCheck
    stats: db.FileStats
    stamped_ns: int  # time.time_ns() just before the lstat


def _check_one(work: _Work) -> Checked:
    sid, path, quick, recovered = work
    t = time.time_ns()
    stats = db.file_stats(path)  # the check's own first (and only "before") stat pass
    result = ok_at_rest(path, sid, stats, quick=quick)  # a healthy file at rest, cheaply
    if result is None:
        result = check_path(Path(path), sid, quick=quick, recovered=recovered, stats=stats)
    return Checked(result, stats, t)


def _check_chunk(chunk: list[_Work]) -> list[Checked]:
    return [_check_one(w) for w in chunk]


class CheckStream:
    """Check ``ids`` (every ``<ULID>.sqlite`` entry when None) with ``jobs`` processes, the
    results produced while they are iterated, in session-id order (the file-name order, which
    is the ULID order): memory stays flat in the number of sessions.

    One directory scan serves the selection and the findings beside the files; ``directory``
    is known before the first result. ``summary``, ``ok`` and ``interrupted`` are final once
    the iteration has ended. Ctrl-C ends the iteration cleanly: the files checked before it
    are what was produced, and ``interrupted`` is set.
    """

    def __init__(
        self,
        sessions_dir: Path,
        ids: Iterable[str] | None = None,
        *,
        quick: bool = False,
        jobs: int = 1,
        progress: Progress | None = None,
        recovery_log: Path | None = None,
    ) -> None:
        if ids is None:
            names = list_directory(sessions_dir)
            self.selected = [
                n[: -len(paths.SESSION_SUFFIX)] for n in names if paths.session_id_of(n)
            ]
        else:
            self.selected = sorted({paths.validate_id(i) for i in ids})
            names = list_directory(sessions_dir, set(self.selected))
        log = recovery_log if recovery_log is not None else paths.recovery_log_path(sessions_dir)
        recovery, log_problem = read_recovery_index_or_finding(log)
        self._extra, self.directory = check_directory_extras(
            sessions_dir, None if ids is None else self.selected, recovery=recovery, names=names
        )
        if log_problem is not None:
            self.directory.insert(0, log_problem)
        self._recovered = {sid for sid, entries in recovery.items() if was_recovered(entries)}
        self._log, self._log_stamp = log, _stamp(log)
        self.sessions_dir = sessions_dir
        self.quick = quick
        self.jobs = jobs
        self.progress = progress
        self.interrupted = False
        self.checked = 0
        self.live = 0
        self.verdicts: dict[str, int] = {}

    def __iter__(self) -> Iterator[Checked]:
        guarded = Guarded(self._produce())
        for c in guarded:
            if c.result.verdict != OK and self._recovered_meanwhile(c.result.session_id):
                # recovered (its outcome line written) after this run read the log: its
                # verdict, judged without that line, would outlive the run in the cache
                c = _check_one((c.result.session_id, str(c.result.path), self.quick, True))
            r = c.result
            extra = self._extra.get(r.session_id)
            if extra:
                r.findings.extend(extra)
                r.verdict = verdict_of(r.findings)
            r.fix = policy.fix_for(r)
            self.checked += 1
            self.verdicts[r.verdict] = self.verdicts.get(r.verdict, 0) + 1
            self.live += r.live is not None
            if self.progress:
                self.progress(self.checked, len(self.selected))
            yield c
        self.interrupted = self.interrupted or guarded.interrupted

    def _recovered_meanwhile(self, sid: str) -> bool:
        """``sid`` was not recovered when the run read the recovery log, and the log, changed
        since, now says it was (read again only when it changed: once per change)."""
        if sid in self._recovered:
            return False
        now = _stamp(self._log)
        if now == self._log_stamp:
            return False
        self._log_stamp = now
        recovery, problem = read_recovery_index_or_finding(self._log)
        if problem is None:
            self._recovered |= {s for s, entries in recovery.items() if was_recovered(entries)}
        return sid in self._recovered

    def results(self) -> Iterator[SessionCheck]:
        """The results alone."""
        return (c.result for c in self)

    def _produce(self) -> Iterator[Checked]:
        total = len(self.selected)
        base = os.fspath(self.sessions_dir)  # joined as strings: a Path per file cost 5 µs
        work = (
            (
                sid,
                os.path.join(base, sid + paths.SESSION_SUFFIX),
                self.quick,
                sid in self._recovered,
            )
            for sid in self.selected
        )
        if self.jobs <= 1 or total < POOL_THRESHOLD:
            for w in work:
                yield _check_one(w)
            return
        from agentdb import workers  # multiprocessing: loaded only when a pool is started

        size = max(8, min(256, total // (self.jobs * 8) or 1))
        chunks = iter(lambda: list(itertools.islice(work, size)), [])
        with workers.forked_pool(self.jobs) as pool:
            for part in pool.imap(_check_chunk, chunks):
                yield from part

    @property
    def summary(self) -> dict[str, Any]:
        """What :attr:`CheckReport.summary` says of the same results."""
        ok = self.verdicts.get(OK, 0)
        return {
            "checked": self.checked,
            "ok": ok,
            "problems": self.checked - ok,
            "verdicts": dict(sorted(self.verdicts.items())),
            "live": self.live,
            "directory_findings": len(self.directory),
            "interrupted": self.interrupted,
            "quick": self.quick,
        }

    @property
    def ok(self) -> bool:
        """What :attr:`CheckReport.ok` says of the same results."""
        return (
            not self.interrupted
            and self.verdicts.get(OK, 0) == self.checked
            and not any(d.finding.severity == "error" for d in self.directory)
        )


def check_sessions(
    sessions_dir: Path,
    ids: Iterable[str] | None = None,
    *,
    quick: bool = False,
    jobs: int = 1,
    progress: Progress | None = None,
    recovery_log: Path | None = None,
) -> CheckReport:
    """Every result of a :class:`CheckStream` at once, in session-id order (for callers that
    need them all; the ``check`` command streams)."""
    stream = CheckStream(
        sessions_dir, ids, quick=quick, jobs=jobs, progress=progress, recovery_log=recovery_log
    )
    results = list(stream.results())
    return CheckReport(results, stream.directory, interrupted=stream.interrupted, quick=quick)
