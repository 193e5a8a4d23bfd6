"""Check many sessions: parallel processes, results in session-id order, Ctrl-C safe."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentdb import errors, paths, recoverylog, workers
from agentdb.checks.codes import finding, verdict_of
from agentdb.checks.file import check_path
from agentdb.results import CheckReport, DirectoryFinding, Finding, SessionCheck

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
            ),
        )


def was_recovered(entries: Iterable[dict[str, Any]]) -> bool:
    return any(e.get("event") == "outcome" and e.get("outcome") == "recovered" for e in entries)


def _recovery_date(entries: list[dict[str, Any]], corrupt_name: str) -> str | None:
    for e in reversed(entries):
        cp = e.get("corrupt_path")
        if isinstance(cp, str) and os.path.basename(cp) == corrupt_name:
            t = e.get("time")
            return str(t) if t is not None else None
    return None


def check_directory_extras(
    sessions_dir: Path,
    ids: Iterable[str] | None = None,
    *,
    recovery: dict[str, list[dict[str, Any]]] | None = None,
) -> tuple[dict[str, list[Finding]], list[DirectoryFinding]]:
    """Findings about entries beside the session files, restricted to ``ids`` when given.

    Returns (findings to attach to existing sessions by id, findings about the directory):
    ``.corrupt`` siblings (``recovered_earlier``, dated from the recovery log), files an
    interrupted agentdb job left (``job_leftover``), sidecars without a database
    (``orphan_sidecar``). Uses ``scandir`` and ``lstat`` only.
    """
    wanted = None if ids is None else set(ids)
    recovery = recovery or {}
    per_session: dict[str, list[Finding]] = {}
    directory: list[DirectoryFinding] = []
    names = []
    with os.scandir(sessions_dir) as it:
        names = sorted(de.name for de in it)
    present = {n[: -len(paths.SESSION_SUFFIX)] for n in names if paths.session_id_of(n)}

    def put(sid: str, name: str, f: Finding) -> None:
        if sid in present:
            per_session.setdefault(sid, []).append(f)
        else:
            directory.append(DirectoryFinding(sessions_dir / name, sid, f))

    for name in names:
        if m := _SIDECAR_NAME.fullmatch(name):
            sid = m.group("id")
            if (wanted is None or sid in wanted) and sid not in present:
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
                when = _recovery_date(recovery.get(sid, []), name)
                dated = f"recovered on {when}" if when else "no entry in the recovery log"
                put(
                    sid,
                    name,
                    finding(
                        "recovered_earlier",
                        f"{name}: the damaged original of an earlier recovery ({dated}); "
                        "this session's history may be incomplete",
                    ),
                )
    for sid in sorted(present):
        if wanted is not None and sid not in wanted:
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
    extra, _ = check_directory_extras(sessions_dir, [sid], recovery=recovery)
    result.findings.extend(extra.get(sid, []))
    if log_problem is not None:
        result.findings.append(log_problem.finding)
    return result


# ------------------------------------------------------------------------------ many files

_Work = tuple[str, str, bool, bool]  # (session_id, path, quick, recovered)


def _check_chunk(chunk: list[_Work]) -> list[SessionCheck]:
    return [check_path(Path(p), sid, quick=q, recovered=r) for sid, p, q, r in chunk]


def check_sessions(
    sessions_dir: Path,
    ids: Iterable[str] | None = None,
    *,
    quick: bool = False,
    jobs: int = 1,
    progress: Progress | None = None,
    recovery_log: Path | None = None,
) -> CheckReport:
    """Check ``ids`` (every ``<ULID>.sqlite`` entry when None) with ``jobs`` processes.

    Results come back in session-id order. Ctrl-C stops the run: files not yet checked are left
    out and the report is marked ``interrupted``.
    """
    if ids is None:
        selected = [e.session_id for e in paths.iter_session_entries(sessions_dir)]
    else:
        selected = sorted({paths.validate_id(i) for i in ids})
    log = recovery_log if recovery_log is not None else paths.recovery_log_path(sessions_dir)
    recovery, log_problem = read_recovery_index_or_finding(log)
    work: list[_Work] = [
        (
            sid,
            str(paths.session_path(sessions_dir, sid)),
            quick,
            was_recovered(recovery.get(sid, [])),
        )
        for sid in selected
    ]
    results: list[SessionCheck] = []
    interrupted = False
    total = len(work)
    if jobs <= 1 or total < POOL_THRESHOLD:
        try:
            for i, w in enumerate(work):
                results.extend(_check_chunk([w]))
                if progress:
                    progress(i + 1, total)
        except KeyboardInterrupt:
            interrupted = True
    else:
        size = max(8, min(256, total // (jobs * 8) or 1))
        chunks = [work[i : i + size] for i in range(0, total, size)]
        try:
            with workers.forked_pool(jobs) as pool:
                for part in pool.imap_unordered(_check_chunk, chunks):
                    results.extend(part)
                    if progress:
                        progress(len(results), total)
        except KeyboardInterrupt:
            interrupted = True
    extra, directory = check_directory_extras(
        sessions_dir, None if ids is None else selected, recovery=recovery
    )
    for r in results:
        if r.session_id in extra:
            r.findings.extend(extra[r.session_id])
            r.verdict = verdict_of(r.findings)
    results.sort(key=lambda r: r.session_id)
    if log_problem is not None:
        directory.insert(0, log_problem)
    return CheckReport(results, directory, interrupted=interrupted, quick=quick)
