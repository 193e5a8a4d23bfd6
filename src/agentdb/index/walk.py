"""The walk behind every index query (see :mod:`agentdb.index`): records of a sessions
directory, stored rows believed while the files are unchanged."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from agentdb import workers
from agentdb.cores import CHUNK, POOL_THRESHOLD
from agentdb.index import stat, store, verdicts
from agentdb.index.record import Record, read, read_many

__all__ = ["Record", "Snapshot", "Stream", "records", "snapshot", "stream"]


@dataclass
class Snapshot:
    """Every ``<ULID>.sqlite`` entry of a sessions directory, in id order."""

    sessions_dir: Path
    records: list[Record] = field(default_factory=list)  # one per entry, in id order
    notes: list[str] = field(default_factory=list)  # for stderr: why the index was not used
    used_index: bool = False  # the stored rows were consulted
    reread: int = 0  # files read this time (new, changed, never trusted)
    interrupted: bool = False  # Ctrl-C while reading: ``records`` are the entries before it


def snapshot(
    sessions_dir: Path,
    *,
    use_index: bool = True,
    jobs: int = 1,
    cache_dir: Path | None = None,
    partial: bool = False,
    extras: bool = True,
) -> Snapshot:
    """Walk ``sessions_dir``, take what the index proves current, read the rest, store it.

    ``use_index=False`` reads every file and touches no index (``--no-index``). Ctrl-C while
    files are read raises KeyboardInterrupt, or with ``partial`` returns the entries before it
    (``interrupted`` set). Without ``extras``, records taken from the index leave producers
    and costs unread (None): for the list and tree views, which do not show them.
    """
    out = Snapshot(sessions_dir)
    stamped = time.time_ns()  # before any lstat: every identity is at least this recent
    seen = stat.seen_all(sessions_dir)
    directory = verdicts.directory_key(sessions_dir)
    conn = None
    stored: store.Stored = {}
    if use_index and not store.usable_for(sessions_dir, cache_dir):
        out.notes.append(
            f"{verdicts.cache_path(cache_dir)}: inside the sessions directory; "
            "answered by reading every file (no index)"
        )
    elif use_index:
        conn, stored = _open_and_load(directory, cache_dir, out.notes, extras)
        out.used_index = conn is not None
    try:
        records: list[Record | None] = [None] * len(seen)
        todo: list[int] = []
        for i, s in enumerate(seen):
            row = stored.get(s.name)
            if row is not None and s.trusts(row[0], row[1]):
                try:
                    records[i] = Record.from_columns(s.entry, s.size, row[3:], extras)
                except (ValueError, TypeError, OverflowError):
                    records[i] = None  # malformed: read the file
            if records[i] is None:
                todo.append(i)
        out.reread = len(todo)
        try:
            _read(seen, todo, records, jobs)
        except KeyboardInterrupt:
            out.interrupted = True
        done: list[Record] = []
        for rec in records:
            if rec is None:
                break
            done.append(rec)
        out.records = done
        if conn is not None and not out.interrupted:
            fresh = [
                (rec, seen[i].name, str(seen[i].key), stamped)
                for i in todo
                if (rec := records[i]) is not None and seen[i].key is not None and rec.stable
            ]
            present = {s.name for s in seen}
            gone = [n for n in stored if n not in present]
            if fresh or gone:
                try:
                    store.write(conn, directory, fresh, gone, cache_dir)
                except store.Unavailable as e:
                    out.notes.append(f"index not updated: {e}; answered from the files")
    finally:
        if conn is not None:
            conn.close()
    if out.interrupted and not partial:
        raise KeyboardInterrupt
    return out


def _open_and_load(
    directory: str, cache_dir: Path | None, notes: list[str], extras: bool
) -> tuple[apsw.Connection | None, store.Stored]:
    for attempt in range(2):
        try:
            conn = store.open_index(cache_dir)
        except store.Unavailable as e:
            notes.append(f"{e}; answered by reading every file")
            return None, {}
        try:
            return conn, store.load(conn, directory, cache_dir, extras)
        except store.Unavailable as e:
            conn.close()
            store.discard(cache_dir)  # damaged: derived data, rebuilt from the files
            if attempt:
                notes.append(f"{e}; answered by reading every file")
                return None, {}
    return None, {}


def _read(seen: list[stat.Seen], todo: list[int], records: list[Record | None], jobs: int) -> None:
    if jobs <= 1 or len(todo) < POOL_THRESHOLD:
        for i in todo:
            records[i] = read(seen[i].entry, seen[i].size)
        return
    chunks = [todo[k : k + CHUNK] for k in range(0, len(todo), CHUNK)]
    work = [([seen[i].entry for i in c], [seen[i].size for i in c]) for c in chunks]
    with workers.forked_pool(jobs) as pool:
        for c, part in zip(chunks, pool.imap(read_many, work), strict=True):
            for i, rec in zip(c, part, strict=True):
                records[i] = rec


from agentdb.index.streaming import Stream, records, stream  # noqa: E402
