"""One row of ``sessions list``: a session file's session_meta row, as the scan and the
index both hold it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import ulid

from agentdb import errors, paths
from agentdb.durations import parse_timestamp
from agentdb.store import SessionInfo, SessionReader

UNREADABLE = "unreadable"  # the status shown for a file whose session_meta cannot be read


@dataclass
class SessionRow:
    """One line of ``sessions list``: the session_meta row plus what it costs to scan."""

    session_id: str  # the ULID in the file name
    path: Path
    status: str  # session_meta.status, or "unreadable"
    profile: str | None = None
    parent_session_id: str | None = None
    depth: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    cost_usd: float | None = None  # SUM(cost_ledger.cost_usd)
    events: int | None = None  # number of events
    revision: int | None = None  # schema revision (user_version)
    error: str | None = None  # why the file cannot be used: it could not be read (status
    #   "unreadable"), or check's verdict is unreadable, corrupt or foreign
    error_code: str | None = None  # that error's stable code (the verdict, for check's)
    verdict: str | None = None  # check's verdict; list: the one recorded for the file as it is
    #   now (None: never checked, or changed since)
    checked_at: str | None = None  # when that verdict was recorded (None: judged just now)

    @property
    def reference_time(self) -> dt.datetime:
        """When the session ended, else when it started (the id's time if neither parses)."""
        t = parse_timestamp(self.ended_at) or parse_timestamp(self.started_at)
        return t or id_time(self.session_id)


def id_time(session_id: str) -> dt.datetime:
    """The creation time a ULID encodes."""
    return ulid.ULID.from_str(session_id).datetime.astimezone(dt.timezone.utc)


def read_row(entry: paths.Entry, *, count_events: bool = True) -> SessionRow:
    """The session_meta row of one entry, or an "unreadable" row saying why. Never raises
    for a bad file."""
    try:
        with SessionReader(entry.path, session_id=entry.session_id) as r:
            if count_events:
                info, n = r.info_and_count()
            else:
                info, n = r.info(), None
            rev = r.revision
    except errors.AgentdbError as e:
        return SessionRow(entry.session_id, entry.path, UNREADABLE, error=str(e), error_code=e.code)
    return row_of(entry, info, n, rev)


def row_of(entry: paths.Entry, info: SessionInfo, n: int | None, rev: int | None) -> SessionRow:
    """The list row of a session whose ``session_meta`` was read (``n``: its event count)."""
    return SessionRow(
        entry.session_id,
        entry.path,
        info.status,
        info.profile,
        info.parent_session_id,
        info.depth,
        info.started_at,
        info.ended_at,
        info.cost_usd,
        n,
        rev,
    )
