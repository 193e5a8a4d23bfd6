"""One session as the index keeps it, read from its file with exactly the reads the scans do.

Each cross-session command scans with its own reads (``sessions list`` reads ``session_meta``
with the event count in one statement; ``sessions tree``, ``status`` and ``report`` read
``session_meta`` alone; ``plugins refs`` and ``prune`` read the producers; ``report`` the cost
per day and model). A file can fail one read and not another, so a record keeps each outcome
— value or error — and each command's view is rebuilt from it exactly as its scan would have
built it: an index answer is a scan answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentdb import errors, paths
from agentdb.checks import policy
from agentdb.index import plugins, verdicts
from agentdb.index.row import UNREADABLE, SessionRow, row_of
from agentdb.index.stat import Seen
from agentdb.store import SessionInfo, SessionReader

# Errors that the file's bytes and modes decide (the identity covers both): a record holding
# only these may be believed next time. Anything else (busy, an OS error, a file that vanished
# between the walk and the read) is read again.
STABLE_CODES = policy.FILE_PROBLEMS
_PATH = "\x00"  # stands for the file's path inside stored error messages

Costs = list[tuple[str, str, str, int, float]]  # (day, provider, model, turns, cost_usd)

# The stored columns, in order (index.store writes and reads them so): the verdict store's
# session table after the file's place and identity.
COLUMNS = verdicts.SESSION_COLUMNS[5:]


@dataclass
class Record:
    """What one open of a session file read (see the module docstring)."""

    entry: paths.Entry
    info: SessionInfo | None  # session_meta, when it could be read
    events: int | None  # event count, when read with session_meta in one statement
    revision: int | None
    error: tuple[str, str] | None  # (message, code): the list read failed
    meta_error: tuple[str, str] | None  # (message, code): session_meta alone failed
    producers: list[plugins.PluginVersion] | None  # plugin versions used; None: unknown
    costs: Costs | None  # cost per day and model; None: unknown
    size: int = 0  # bytes of the database and its -wal, from the walk
    transient: bool = False  # some read failed for a reason outside the file (busy, OS error)
    seen: Seen | None = None  # the walk's lstat of it, when it came from a walk (not stored)

    def list_row(self) -> SessionRow:
        """``sessions list``'s row (``sessions.read_row``'s, with the event count)."""
        if self.error is not None:
            return _unreadable(self.entry, self.error)
        return _row(self.entry, self.info, self.events, self.revision)

    def meta_row(self) -> SessionRow:
        """The row of ``sessions tree``, ``status`` and ``report`` (session_meta alone)."""
        if self.meta_error is not None:
            return _unreadable(self.entry, self.meta_error)
        return _row(self.entry, self.info, None, self.revision)

    def meta_producers(self) -> list[plugins.PluginVersion] | None:
        """The producers as ``status`` reads them (unknown when session_meta failed)."""
        return None if self.meta_error is not None else self.producers

    @property
    def stable(self) -> bool:
        """Everything in it follows from the file's bytes and modes (it may be stored)."""
        return not self.transient and all(
            e is None or e[1] in STABLE_CODES for e in (self.error, self.meta_error)
        )

    # ---------------------------------------------------------------- storage

    def columns(self) -> tuple[Any, ...]:
        i = self.info
        path = str(self.entry.path)

        def err(e: tuple[str, str] | None) -> tuple[str | None, str | None]:
            return (None, None) if e is None else (e[0].replace(path, _PATH), e[1])

        return (
            None if i is None else i.status,
            None if i is None else i.profile,
            None if i is None else i.parent_session_id,
            None if i is None else i.depth,
            None if i is None else i.started_at,
            None if i is None else i.ended_at,
            None if i is None else i.cost_usd,
            self.events,
            self.revision,
            *err(self.error),
            *err(self.meta_error),
            None if self.producers is None else json.dumps(self.producers),
            None if self.costs is None else json.dumps(self.costs),
        )

    @classmethod
    def from_columns(
        cls, entry: paths.Entry, size: int, c: tuple[Any, ...], extras: bool = True
    ) -> Record:
        """Rebuild a stored record; raises ``ValueError``/``TypeError`` on anything malformed
        (the caller reads the file instead). Without ``extras`` the producers and costs are
        left unread (None): for the views that do not show them."""
        (status, profile, parent, depth, started, ended, cost, events, rev) = c[:9]

        def err(msg: Any, code: Any) -> tuple[str, str] | None:
            if msg is None and code is None:
                return None
            if not (isinstance(msg, str) and code in STABLE_CODES):
                raise ValueError("bad stored error")
            return (msg.replace(_PATH, str(entry.path)), code)

        error, meta_error = err(c[9], c[10]), err(c[11], c[12])
        info = None
        if meta_error is None:
            info = SessionInfo(
                entry.session_id, parent, profile, status, depth, started, ended, float(cost)
            )
        if error is None and not isinstance(events, int):
            raise ValueError("bad stored event count")
        producers = costs = None
        if extras:
            producers = None if c[13] is None else [_version(p) for p in json.loads(c[13])]
            costs = None if c[14] is None else [_cost(x) for x in json.loads(c[14])]
        return cls(
            entry,
            info,
            events,
            rev if isinstance(rev, int) else None,
            error,
            meta_error,
            producers,
            costs,
            size,
        )


def _version(p: Any) -> plugins.PluginVersion:
    c, n, v = p
    if not (isinstance(c, str) and isinstance(n, str) and isinstance(v, str)):
        raise ValueError("bad stored producer")
    return (c, n, v)


def _cost(x: Any) -> tuple[str, str, str, int, float]:
    d, p, m, turns, cost = x
    if not (
        isinstance(d, str) and isinstance(p, str) and isinstance(m, str) and type(turns) is int
    ):
        raise ValueError("bad stored cost")
    return (d, p, m, turns, float(cost))


def _row(
    entry: paths.Entry, info: SessionInfo | None, n: int | None, rev: int | None
) -> SessionRow:
    assert info is not None
    return row_of(entry, info, n, rev)  # the one list-row builder, as for a scan


def _unreadable(entry: paths.Entry, e: tuple[str, str]) -> SessionRow:
    return SessionRow(entry.session_id, entry.path, UNREADABLE, error=e[0], error_code=e[1])


def _err(e: errors.AgentdbError) -> tuple[str, str]:
    return (str(e), e.code)


def read(entry: paths.Entry, size: int = 0) -> Record:
    """Read one file as every scan would (never raises for a bad file)."""
    try:
        reader = SessionReader(entry.path, session_id=entry.session_id)
    except errors.AgentdbError as e:
        return Record(entry, None, None, None, _err(e), _err(e), None, None, size)
    with reader as r:
        rev = r.revision
        info: SessionInfo | None = None
        events: int | None = None
        error = meta_error = None
        try:
            info, events = r.info_and_count()
        except errors.AgentdbError as e:
            error = _err(e)
            try:
                info = r.info()
            except errors.AgentdbError as e2:
                meta_error = _err(e2)
        transient = False
        producers: list[plugins.PluginVersion] | None
        try:
            producers = plugins.session_producers(r)
        except errors.AgentdbError as e:
            producers, transient = None, e.code not in STABLE_CODES
        spent: Costs | None = None
        if meta_error is None:
            try:
                spent = r.cost_by_day_model()
            except errors.AgentdbError as e:
                spent, transient = None, transient or e.code not in STABLE_CODES
    return Record(entry, info, events, rev, error, meta_error, producers, spent, size, transient)


def read_many(work: tuple[list[paths.Entry], list[int]]) -> list[Record]:
    """A worker's chunk (see :func:`read`)."""
    entries, sizes = work
    return [read(e, s) for e, s in zip(entries, sizes, strict=True)]
