"""``check`` that leaves its verdicts in the verdict cache, for ``status`` to show later.

Each file's identity is stamped *before* the run reads it; the verdict is recorded against that
stamp, so a file that changed while it was being checked no longer matches its entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentdb import paths, verdicts
from agentdb.checks import check_sessions
from agentdb.results import CheckReport


def check_and_record(
    sessions_dir: Path,
    ids: Iterable[str] | None = None,
    *,
    cache_dir: Path | None = None,
    **kwargs: Any,
) -> tuple[CheckReport, bool]:
    """:func:`check_sessions`, then record every verdict; returns (report, recorded).

    ``recorded`` is False when the cache could not be written (a read-only home): the report
    stands, only ``status`` will not know about this run.
    """
    if ids is None:
        names = [e.path.name for e in paths.iter_session_entries(sessions_dir)]
    else:
        names = [paths.validate_id(i) + paths.SESSION_SUFFIX for i in ids]
    stamps = {n: verdicts.stamp(sessions_dir / n) for n in names}
    report = check_sessions(sessions_dir, ids, **kwargs)
    if any(d.finding.code == "recovery_log_unreadable" for d in report.directory):
        # verdicts read without the recovery history (an orphan row of a recovery counts as
        # missing_event) must not outlive this run: the log may be put back
        return report, False
    entries = []
    for s in report.sessions:
        st = stamps.get(s.path.name)
        if st is None or s.live is not None:
            continue  # absent, or open right now: its WAL was left unjudged
        entries.append(
            verdicts.Entry(s.path.name, st, s.verdict, report.quick, s.status, s.revision)
        )
    recorded = verdicts.record(sessions_dir, entries, cache_dir=cache_dir) if entries else True
    if ids is None and not report.interrupted:
        verdicts.forget_missing(sessions_dir, names, cache_dir=cache_dir)
    return report, recorded
