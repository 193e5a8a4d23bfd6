"""``check`` that leaves its verdicts in the verdict cache, for ``status`` to show later, and
the judge's answer about one session that takes a recorded verdict instead of checking again.

Each file's identity is stamped *before* the run reads it (the check's own first ``lstat``); the
verdict is recorded against that stamp, so a file that changed while it was being checked no
longer matches its entry. Verdicts are recorded a chunk at a time while the results stream.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agentdb import paths
from agentdb.checks import check_file, policy
from agentdb.checks.judge import Judgement, Level, judgement_of
from agentdb.checks.run import CheckStream
from agentdb.index import verdicts
from agentdb.results import CheckReport, SessionCheck

RECORD_CHUNK = 2000  # verdicts written per transaction while the results stream


class RecordedStream:
    """A :class:`CheckStream` whose results are recorded in the verdict cache as they pass.

    Iterate it for the results (session-id order). ``recorded`` is False once the cache could
    not be written (a read-only home): the report stands, only ``status`` will not know about
    this run. A run whose recovery log could not be read records nothing (an orphan row of a
    recovery then reads as ``missing_event``; that verdict must not outlive the run).
    """

    def __init__(
        self,
        sessions_dir: Path,
        ids: Iterable[str] | None = None,
        *,
        cache_dir: Path | None = None,
        **kwargs: Any,
    ) -> None:
        self.stream = CheckStream(sessions_dir, ids, **kwargs)
        self.sessions_dir = sessions_dir
        self.cache_dir = cache_dir
        self.all = ids is None
        self.recorded = not any(
            d.finding.code == "recovery_log_unreadable" for d in self.stream.directory
        )
        self._skip = not self.recorded

    def __iter__(self) -> Iterator[SessionCheck]:
        pending: list[verdicts.Entry] = []
        for c in self.stream:
            s = c.result
            ident = verdicts.identity_from(c.stats)
            if not self._skip and ident is not None and s.live is None:
                # absent, or open right now (its WAL was left unjudged): nothing to record
                stamp = verdicts.Stamp(ident, c.stamped_ns)
                pending.append(
                    verdicts.Entry(
                        s.path.name, stamp, s.verdict, self.stream.quick, s.status, s.revision
                    )
                )
                if len(pending) >= RECORD_CHUNK:
                    self._flush(pending)
            yield s
        self._flush(pending)
        if self.all and not self.stream.interrupted and not self._skip:
            present = _Names(self.stream.selected)
            verdicts.forget_missing(self.sessions_dir, present, cache_dir=self.cache_dir)

    def _flush(self, pending: list[verdicts.Entry]) -> None:
        if pending and not self._skip and not self._record(pending):
            self.recorded = False
            self._skip = True  # one failure is enough: do not retry on every chunk
        pending.clear()

    def _record(self, entries: list[verdicts.Entry]) -> bool:
        return verdicts.record(
            self.sessions_dir, entries, cache_dir=self.cache_dir, checkpoint=self.all
        )


class _Names:
    """``<id>.sqlite`` in a sorted list of ids, by bisection (no copy of a long listing)."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or not name.endswith(".sqlite"):
            return False
        sid = name[: -len(".sqlite")]
        i = bisect.bisect_left(self.ids, sid)
        return i < len(self.ids) and self.ids[i] == sid


def check_and_record(
    sessions_dir: Path,
    ids: Iterable[str] | None = None,
    *,
    cache_dir: Path | None = None,
    **kwargs: Any,
) -> tuple[CheckReport, bool]:
    """Every result of a :class:`RecordedStream` at once; returns (report, recorded)."""
    run = RecordedStream(sessions_dir, ids, cache_dir=cache_dir, **kwargs)
    results = list(run)
    s = run.stream
    return CheckReport(results, s.directory, interrupted=s.interrupted, quick=s.quick), run.recorded


def changed_ids(
    sessions_dir: Path, *, quick: bool = False, cache_dir: Path | None = None
) -> tuple[list[str], int]:
    """``check --changed``: the sessions with no recorded ``ok`` (a full check's, unless
    ``quick``), or whose identity changed since it (or is too recent to tell: the racily-clean
    rule), or whose file's own read (the session index: a fresh open of every file new or
    changed since it was indexed) says it cannot be read — a recorded ``ok`` that lies; and
    how many sessions there are. Bit rot changes no identity: only a full ``check`` sees it
    (README: how often to run one)."""
    out: list[str] = []
    total = 0
    unreadable = _unreadable_now(sessions_dir, cache_dir)
    with verdicts.Lookup(sessions_dir, cache_dir=cache_dir) as recorded:  # in name order
        for e in paths.iter_session_entries(sessions_dir):
            total += 1
            r = recorded.get(e.path.name)
            if (
                r is None
                or not policy.is_ok(r.verdict)
                or (r.quick and not quick)
                or not r.matches(verdicts.identity_of(e.path))
                or e.session_id in unreadable
            ):
                out.append(e.session_id)
    return out, total


def _unreadable_now(sessions_dir: Path, cache_dir: Path | None) -> set[str]:
    """The sessions whose file's open fails, as the session index reads them (only files new
    or changed since they were indexed are opened)."""
    from agentdb import index  # only here: check's other paths never walk the index

    snap = index.snapshot(sessions_dir, cache_dir=cache_dir, extras=False)
    stable = index.record.STABLE_CODES  # what the bytes say, not a passing lock or OS error
    return {
        r.entry.session_id
        for r in snap.records
        if r.meta_error is not None and r.meta_error[1] in stable
    }


def cached_judgement(
    sessions_dir: Path,
    session_id: str,
    level: Level,
    *,
    recorded: verdicts.Lookup | dict[str, verdicts.Recorded] | None = None,
    cache_dir: Path | None = None,
) -> Judgement | None:
    """The verdict ``check`` recorded for the session file as it is now, when it was judged at
    ``level`` or deeper (a ``--quick`` verdict does not stand in for a full one); None when the
    cache has none, or the file changed since. ``recorded``: :func:`verdicts.lookup`'s answer
    or a :class:`verdicts.Lookup`, when the caller asks about many files."""
    name = paths.validate_id(session_id) + paths.SESSION_SUFFIX
    if recorded is None:
        recorded = verdicts.lookup(sessions_dir, cache_dir=cache_dir)
    entry = recorded.get(name)
    if entry is None:
        return None
    if entry.quick and level == "full":
        return None
    if not entry.matches(verdicts.identity_of(sessions_dir / name)):
        return None
    return recorded_judgement(session_id, entry)


def recorded_judgement(session_id: str, entry: verdicts.Recorded) -> Judgement:
    """The judgement a recorded verdict stands for (the caller has matched it to the file)."""
    verdict = entry.verdict
    problem = (
        None if policy.is_ok(verdict) else f"run `agentdb check {session_id}` for the findings"
    )
    depth: Level = "quick" if entry.quick else "full"
    return Judgement(session_id, verdict, depth, problem, checked_at=entry.checked_at)


def judge_session(
    sessions_dir: Path, session_id: str, level: Level, *, cache_dir: Path | None = None
) -> Judgement:
    """The judge's answer about one session at ``level``: the verdict cache's, when ``check``
    recorded one for the file as it is now (at that level or deeper), else the check itself,
    run now (read-only; nothing is recorded)."""
    found = cached_judgement(sessions_dir, session_id, level, cache_dir=cache_dir)
    if found is not None and found.healthy:
        return found
    if found is not None:  # a recorded problem is judged again, as deep: its findings name the step
        level = found.level
    result = check_file(sessions_dir, session_id, quick=level != "full")
    return judgement_of(result, "full" if level == "full" else "quick")
