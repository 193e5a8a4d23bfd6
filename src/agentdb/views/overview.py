"""One pass over every session for ``status`` and ``report``: each file is opened once and gives
its ``sessions list`` row, its plugin producers and (for ``report``) its cost per day and model.

The row is read exactly as :func:`agentdb.views.sessions.read_row` reads it (a file whose
``session_meta`` cannot be read is an "unreadable" row), so ``status`` counts what ``sessions
list`` lists; producers and costs that cannot be read are None (unknown), never guessed.
Parallel like ``sessions list``: forked readers take chunks of entries, rows come back in id
order. Read-only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentdb import errors, paths, workers
from agentdb.cores import CHUNK, POOL_THRESHOLD
from agentdb.index import plugins
from agentdb.store import SessionReader
from agentdb.views.sessions import UNREADABLE, SessionRow, row_of

Costs = list[tuple[str, str, str, int, float]]  # (day, provider, model, turns, cost_usd)


@dataclass
class Scanned:
    """One session as one open of its file saw it."""

    row: SessionRow  # as ``sessions list`` shows it
    producers: list[plugins.PluginVersion] | None  # plugin versions it references; None: unknown
    costs: Costs | None  # per day and model (only when asked for); None: unknown or not asked
    size: int | None = None  # bytes of the database and its -wal, when the index walk knows it


def read_one(entry: paths.Entry, *, costs: bool = False) -> Scanned:
    """Never raises for a bad file."""
    try:
        reader = SessionReader(entry.path, session_id=entry.session_id)
    except errors.AgentdbError as e:
        return Scanned(_unreadable(entry, e), None, None)
    with reader as r:
        try:
            info, rev = r.info(), r.revision
        except errors.AgentdbError as e:
            return Scanned(_unreadable(entry, e), None, None)
        row = row_of(entry, info, None, rev)
        try:
            producers: list[plugins.PluginVersion] | None = plugins.session_producers(r)
        except errors.AgentdbError:
            producers = None
        spent: Costs | None = None
        if costs:
            try:
                spent = r.cost_by_day_model()
            except errors.AgentdbError:
                spent = None
    return Scanned(row, producers, spent)


def _unreadable(entry: paths.Entry, e: errors.AgentdbError) -> SessionRow:
    return SessionRow(entry.session_id, entry.path, UNREADABLE, error=str(e), error_code=e.code)


def _read_chunk(work: tuple[list[paths.Entry], bool]) -> list[Scanned]:
    entries, costs = work
    return [read_one(e, costs=costs) for e in entries]


def scan(sessions_dir: Path, *, costs: bool = False, jobs: int = 1) -> Iterator[Scanned]:
    """Every ``<ULID>.sqlite`` entry, in id order, each file opened once."""
    entries = list(paths.iter_session_entries(sessions_dir))
    if jobs <= 1 or len(entries) < POOL_THRESHOLD:
        for entry in entries:
            yield read_one(entry, costs=costs)
        return
    chunks = [(entries[i : i + CHUNK], costs) for i in range(0, len(entries), CHUNK)]
    with workers.forked_pool(jobs) as pool:
        for part in pool.imap(_read_chunk, chunks):
            yield from part
