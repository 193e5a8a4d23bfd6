"""The index read as a stream: every entry's record in id order, with flat memory.

The walk's sorted ids are merged with the stored rows, read in the same (primary key) order
from one cursor. Entries are taken a window at a time: each is ``lstat``-ed and taken from its
row when the row is trusted (:meth:`agentdb.index.stat.Seen.trusts`) and its checksum holds,
else read from its file — by worker processes when a window has many such files (the first
build), in this process otherwise. What was read is written back in batches inside one
transaction, held from the first batch to the end (:class:`agentdb.index.store.Writer`), so
not even the first build holds every record. A page of the index that cannot be read makes the
rest be read from the files, and the index is removed (the next query rebuilds it).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from agentdb import paths, workers
from agentdb.cores import CHUNK, POOL_THRESHOLD
from agentdb.index import stat, store, verdicts
from agentdb.index.record import Record, read, read_many

WINDOW = 2_000  # entries stat'ed, matched and read together (what is held at a time)


@dataclass
class Stream:
    """Every ``<ULID>.sqlite`` entry's record, in id order, as they come. ``notes``,
    ``reread`` and ``interrupted`` are complete once ``records`` is exhausted (or closed)."""

    sessions_dir: Path
    records: Iterator[Record]
    notes: list[str] = field(default_factory=list)  # for stderr: why the index was not used
    used_index: bool = False  # the stored rows were consulted
    reread: int = 0  # files read this time (new, changed, never trusted)
    interrupted: bool = False  # Ctrl-C while reading a file: the records before it came


def stream(
    sessions_dir: Path,
    *,
    jobs: int = 1,
    cache_dir: Path | None = None,
    extras: bool = False,
) -> Stream:
    """Walk ``sessions_dir`` and hand out its records (see the module docstring). Without
    ``extras``, records taken from the index leave producers and costs unread (None): for the
    list and tree views, which do not show them."""
    out = Stream(sessions_dir, iter(()))
    stamped = time.time_ns()  # before any lstat: every identity is at least this recent
    ids, others = stat.walk_ids(sessions_dir)
    directory = verdicts.directory_key(sessions_dir)
    conn = None
    if not store.usable_for(sessions_dir, cache_dir):
        out.notes.append(
            f"{verdicts.cache_path(cache_dir)}: inside the sessions directory; "
            "answered by reading every file (no index)"
        )
    else:
        conn = _open(directory, cache_dir, out.notes)
    out.used_index = conn is not None
    out.records = _merge(out, conn, ids, others, stamped, directory, cache_dir, extras, jobs)
    return out


def records(
    sessions_dir: Path,
    notes: list[str],
    *,
    jobs: int = 1,
    cache_dir: Path | None = None,
    extras: bool = True,
) -> Iterator[Record]:
    """:func:`stream`'s records for a command that answers only whole: its notes are added to
    ``notes`` at the end, and a Ctrl-C while files were read raises ``KeyboardInterrupt``."""
    st = stream(sessions_dir, jobs=jobs, cache_dir=cache_dir, extras=extras)
    yield from st.records
    notes += st.notes
    if st.interrupted:
        raise KeyboardInterrupt


def _open(directory: str, cache_dir: Path | None, notes: list[str]) -> apsw.Connection | None:
    """The index, checked on open; a damaged one is removed and made again once."""
    for attempt in range(2):
        try:
            conn = store.open_index(cache_dir)
        except store.Unavailable as e:
            notes.append(f"{e}; answered by reading every file")
            return None
        try:
            store.count(conn, directory, cache_dir)  # the first page reads of this directory
            return conn
        except store.Unavailable as e:
            conn.close()
            store.discard(cache_dir)  # damaged: derived data, rebuilt from the files
            if attempt:
                notes.append(f"{e}; answered by reading every file")
    return None


def _merge(
    out: Stream,
    conn: apsw.Connection | None,
    ids: list[str],
    others: set[str],
    stamped: int,
    directory: str,
    cache_dir: Path | None,
    extras: bool,
    jobs: int,
) -> Iterator[Record]:
    sessions_dir = out.sessions_dir
    where = os.path.join(os.fspath(sessions_dir), "")
    child = stat.child_maker(sessions_dir)
    stored = store.rows(conn, directory, cache_dir, extras) if conn is not None else None
    writer = store.Writer(directory, cache_dir) if conn is not None else None
    doubt: list[str] = []

    def advance() -> tuple[str, tuple[object, ...]] | None:
        if doubt or stored is None:
            return None
        try:
            return next(stored, None)
        except store.Unavailable as e:
            doubt.append(str(e))
            return None

    gone: list[str] = []
    pool = None
    finished = False
    pending = advance()
    try:
        for start in range(0, len(ids), WINDOW):
            window: list[tuple[stat.Seen, Record | None]] = []
            for sid in ids[start : start + WINDOW]:
                name = sid + paths.SESSION_SUFFIX
                while pending is not None and pending[0] < name:
                    gone.append(pending[0])  # ids come in order: a smaller one is not listed
                    pending = advance()
                s = stat.seen(paths.Entry(sid, child(name)), others, where)
                rec = None
                if pending is not None and pending[0] == name:
                    row = pending[1]
                    pending = advance()
                    if s.trusts(row[0], row[1]):  # type: ignore[arg-type]
                        try:
                            rec = Record.from_columns(s.entry, s.size, row[3:], extras)
                        except (ValueError, TypeError, OverflowError):
                            rec = None  # malformed: read the file
                window.append((s, rec))
            todo = [i for i, (_, rec) in enumerate(window) if rec is None]
            got: dict[int, Record] = {}
            if jobs > 1 and len(todo) >= POOL_THRESHOLD:
                if pool is None:
                    pool = multiprocessing.get_context("fork").Pool(
                        jobs, initializer=workers.ignore_sigint
                    )
                chunks = [todo[k : k + CHUNK] for k in range(0, len(todo), CHUNK)]
                work = [
                    ([window[i][0].entry for i in c], [window[i][0].size for i in c])
                    for c in chunks
                ]
                for c, part in zip(chunks, pool.imap(read_many, work), strict=True):
                    got.update(zip(c, part, strict=True))
            for i, (s, rec) in enumerate(window):
                if rec is None:
                    rec = got[i] if i in got else read(s.entry, s.size)
                    out.reread += 1
                    if writer is not None and s.key is not None and rec.stable:
                        writer.add(rec, s.name, s.key, stamped)
                rec.seen = s
                yield rec
        while pending is not None:
            gone.append(pending[0])  # past the last listed id
            pending = advance()
        finished = True
    except KeyboardInterrupt:
        out.interrupted = True
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        if stored is not None:
            stored.close()
        if conn is not None:
            conn.close()
        if writer is not None:
            if doubt:
                writer.abort()
                store.discard(cache_dir)
                out.notes.append(f"{doubt[0]}; the rest read from the files, the index rebuilt")
            else:
                out.notes += writer.finish(gone if finished else [])
