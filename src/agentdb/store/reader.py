"""Read-only, bounded access to one session file: never creates, migrates or writes; every
read is capped in rows per page and bytes per value."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors
from agentdb.paths import is_valid_id, session_path
from agentdb.schema.identity import identify
from agentdb.store.model import (
    EventRow,
    Page,
    PlanItemRow,
    ProducerRow,
    SessionInfo,
    require_session,
)

MAX_TEXT = 4096  # characters of any text column a bounded read returns
DEFAULT_PAYLOAD_CAP = 64 * 1024  # bytes of payload a bounded read returns per event
DEFAULT_PAGE_ROWS = 1000


def _capped(col: str, cap: int = MAX_TEXT) -> str:
    # As stored bytes: text that is not valid UTF-8 (a damaged file) must not raise in APSW's
    # decoding; :func:`_text` decodes it for display, escaping what is not UTF-8.
    return f"CAST(substr({col}, 1, {int(cap)}) AS BLOB)"


def _text(v: Any) -> Any:
    """A value read through :func:`_capped`: text again (invalid UTF-8 escaped as ``\\xNN``)."""
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v


def _texts(r: Sequence[Any], positions: range | tuple[int, ...]) -> list[Any]:
    out = list(r)
    for i in positions:
        out[i] = _text(out[i])
    return out


_INFO_SQL = (
    f"SELECT {_capped('session_id', 64)}, {_capped('parent_session_id', 64)}, "
    f"{_capped('profile')}, {_capped('status', 64)}, depth, {_capped('started_at', 64)}, "
    f"{_capped('ended_at', 64)}, (SELECT total(cost_usd) FROM cost_ledger)"
)


def read_info(
    conn: apsw.Connection, path: Path, session_id: str | None, *, count_events: bool = False
) -> SessionInfo:
    """The session_meta row; with ``count_events`` the event count rides along as an extra
    column (one statement instead of two), returned by :func:`_read_info_count`."""
    return _read_info_count(conn, path, session_id, count_events=count_events)[0]


def _read_info_count(
    conn: apsw.Connection, path: Path, session_id: str | None, *, count_events: bool
) -> tuple[SessionInfo, int | None]:
    count = ", (SELECT count(*) FROM events)" if count_events else ""
    rows = db.rows(conn, f"{_INFO_SQL}{count} FROM session_meta LIMIT 2")
    r = _texts(_one_row(rows, path, session_id), range(7))
    _require_named(path, session_id, r[0])
    info = SessionInfo(r[0], r[1], r[2], r[3], r[4], r[5], r[6], float(r[7] or 0.0))
    return info, (int(r[8]) if count_events else None)


def _one_row(rows: list[Any], path: Path, session_id: str | None) -> Any:
    """The one session_meta row read (``LIMIT 2``); Corrupt when there are none or two."""
    if len(rows) != 1:
        raise errors.Corrupt(
            f"{path}: expected exactly one session_meta row for {session_id}, found "
            f"{len(rows)}; run `agentdb check` on it",
            path=path,
        )
    return rows[0]


def _require_named(path: Path, session_id: str | None, named: Any) -> None:
    """Raise unless ``named`` (session_meta's id, as read) is ``session_id`` (None: anything)."""
    if session_id is not None and named != session_id and is_valid_id(str(named)):
        raise errors.ForeignFile(
            f"{path}: session_meta names session {named}, not {session_id}: another session's "
            "file under this name; move it back to its own name (see `agentdb check` on it)",
            path=path,
        )
    if session_id is not None and named != session_id:
        raise errors.Corrupt(
            f"{path}: session_meta names {named!r}, not {session_id}; run `agentdb check` on it",
            path=path,
        )


def read_named(conn: apsw.Connection, path: Path, session_id: str | None) -> None:
    """:func:`read_info`'s identity test alone: exactly one session_meta row, naming
    ``session_id``. It reads that one column, so a file whose other session_meta columns or
    cost_ledger cannot be read (damaged CREATE text) still shows whose events it holds."""
    rows = db.rows(conn, f"SELECT {_capped('session_id', 64)} FROM session_meta LIMIT 2")
    _require_named(path, session_id, _text(_one_row(rows, path, session_id)[0]))


class SessionReader:
    """Read-only, bounded access to one session file (never creates, migrates or writes)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        session_id: str | None = None,
        alone: bool = False,
    ):
        """``alone``: read the database file by itself, its ``-wal`` ignored (a WAL that
        belongs to another database, as ``check`` judges it)."""
        path = Path(os.fspath(path))
        self.path = path
        self.session_id = session_id if session_id is not None else _id_from_path(path)
        self.conn = db.open_readonly_alone(path) if alone else db.open_readonly(path)
        try:
            with db.translated(path):
                self.identity = identify(self.conn)
                require_session(self.identity, path)
        except BaseException:
            self.conn.close()
            raise
        self.revision = self.identity.revision

    @classmethod
    def open(cls, sessions_dir: str | os.PathLike[str], session_id: str) -> SessionReader:
        path = session_path(Path(os.fspath(sessions_dir)), session_id)
        return cls(path, session_id=session_id)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SessionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def info(self) -> SessionInfo:
        with db.translated(self.path):
            return read_info(self.conn, self.path, self.session_id)

    def require_named(self) -> None:
        """Raise unless session_meta names this session (see :func:`read_named`)."""
        with db.translated(self.path):
            read_named(self.conn, self.path, self.session_id)

    def info_and_count(self) -> tuple[SessionInfo, int]:
        """:meth:`info` and :meth:`event_count` in one statement."""
        with db.translated(self.path):
            info, n = _read_info_count(self.conn, self.path, self.session_id, count_events=True)
        assert n is not None
        return info, n

    def event_count(self) -> int:
        with db.translated(self.path):
            return int(db.scalar(self.conn, "SELECT count(*) FROM events"))

    def events(
        self,
        *,
        after: int = 0,
        kinds: Sequence[str] | None = None,
        limit: int = DEFAULT_PAGE_ROWS,
        payload_cap: int = DEFAULT_PAYLOAD_CAP,
    ) -> Page:
        """Events with sequence > ``after``, in sequence order, at most ``limit`` of them."""
        rows = list(self._event_rows(after, kinds, limit + 1, payload_cap))
        return Page(rows[:limit], len(rows) > limit)

    def _event_rows(
        self, after: int | None, kinds: Sequence[str] | None, limit: int, payload_cap: int
    ) -> Iterator[EventRow]:
        """One statement's rows, each yielded as soon as SQLite returns it: a damaged page
        raises only after every row before it was yielded. ``after`` None: from the first
        event, whatever its sequence (revision 1 has no CHECK: 0 and negative ones exist)."""
        where, args = "1", list[Any]()
        if after is not None:
            where, args = "sequence > ?", [int(after)]
        if kinds:
            where += f" AND kind IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        cap = max(0, int(payload_cap))
        sql = (
            f"SELECT sequence, {_capped('id', 256)}, {_capped('timestamp', 64)}, "
            f"{_capped('kind', 64)}, {_capped('producer_category', 64)}, "
            f"{_capped('producer_name')}, {_capped('producer_version')}, "
            f"{_capped('schema_version', 64)}, "
            f"substr(CAST(payload AS BLOB), 1, {cap}), "
            "CASE WHEN typeof(payload) = 'text' THEN length(CAST(payload AS BLOB)) "
            "ELSE length(payload) END, typeof(payload) = 'text' "
            f"FROM events WHERE {where} ORDER BY sequence LIMIT ?"
        )
        args.append(int(limit))
        with db.translated(self.path):
            for r in self.conn.execute(sql, args):
                yield _event_row(r)

    def iter_events(
        self,
        *,
        after: int | None = None,
        kinds: Sequence[str] | None = None,
        page_rows: int = DEFAULT_PAGE_ROWS,
        payload_cap: int = DEFAULT_PAYLOAD_CAP,
    ) -> Iterator[EventRow]:
        """Every event after ``after`` (None: every event, from the lowest sequence — 0 or
        negative in a revision-1 file) in sequence order, read a bounded page at a time (one
        statement per page, so no read transaction outlives a page). A row SQLite cannot read
        raises, after every row before it was yielded. Sequences come out strictly increasing:
        a row at or below the last one yielded (a damaged page that loops, or garbage read out of
        order) is not yielded again, and the next page starts after the highest sequence seen,
        so reading never goes back and no event is shown twice."""
        while True:
            n, advanced = 0, False
            for e in self._event_rows(after, kinds, page_rows, payload_cap):
                n += 1
                if after is not None and e.sequence <= after:
                    continue  # never backwards: no row or page is read twice
                after, advanced = e.sequence, True
                yield e
            if n >= page_rows and not advanced:
                raise errors.Corrupt(
                    problem=f"a page of events after sequence {after} holds none after it: the "
                    "events table is damaged",
                    fix=f"run `agentdb check {self.session_id}`",
                    path=self.path,
                )
            if n < page_rows:
                return

    def producers(self, *, limit: int = DEFAULT_PAGE_ROWS) -> Page:
        with db.translated(self.path):
            raw = db.rows(
                self.conn,
                f"SELECT {_capped('category', 64)}, {_capped('name')}, {_capped('version')}, "
                "first_seen_sequence FROM producers ORDER BY first_seen_sequence, category, "
                "name, version LIMIT ?",
                (limit + 1,),
            )
        return Page([ProducerRow(*_texts(r, range(3))) for r in raw[:limit]], len(raw) > limit)

    def plan_items(self, *, after: int = 0, limit: int = DEFAULT_PAGE_ROWS) -> Page:
        with db.translated(self.path):
            raw = db.rows(
                self.conn,
                f"SELECT sequence, event_sequence, {_capped('turn_id', 256)}, "
                f"{_capped('tool_call_id', 256)}, {_capped('provider_name')}, "
                f"{_capped('tool_name')}, {_capped('decision', 16)}, {_capped('decided_by')} "
                "FROM plan_items WHERE sequence > ? ORDER BY sequence LIMIT ?",
                (after, limit + 1),
            )
        rows = [PlanItemRow(*_texts(r, range(2, 8))) for r in raw[:limit]]
        return Page(rows, len(raw) > limit)

    def cost_by_model(self) -> list[tuple[Any, ...]]:
        """(provider, model, turns, input, output, cache tokens, cost_usd) per model."""
        with db.translated(self.path):
            return [
                tuple(_texts(r, (0, 1)))
                for r in self.conn.execute(
                    f"SELECT {_capped('provider_name')}, {_capped('model_id')}, count(*), "
                    "total(input_tokens), total(output_tokens), "
                    "total(cache_write_tokens + cache_read_tokens), total(cost_usd) "
                    "FROM cost_ledger GROUP BY provider_name, model_id ORDER BY 7 DESC LIMIT 1000"
                )
            ]

    def cost_by_day_model(self) -> list[tuple[str, str, str, int, float]]:
        """(day, provider, model, turns, cost_usd) per UTC day of the event's timestamp and
        model; ``day`` is ``YYYY-MM-DD``, or ``unknown`` when the timestamp does not start so."""
        with db.translated(self.path):
            return [
                (str(d), str(_text(p)), str(_text(m)), int(n), float(u))
                for d, p, m, n, u in self.conn.execute(
                    "SELECT CASE WHEN substr(e.timestamp, 1, 10) GLOB "
                    "'[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]' "
                    "THEN substr(e.timestamp, 1, 10) ELSE 'unknown' END, "
                    f"{_capped('c.provider_name', 256)}, {_capped('c.model_id', 256)}, "
                    "count(*), total(c.cost_usd) "
                    "FROM cost_ledger c LEFT JOIN events e ON e.sequence = c.event_sequence "
                    "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 LIMIT 100000"
                )
            ]

    def plan_decisions(self) -> list[tuple[str, str, int]]:
        """(decided_by, decision, count) for every rule and decision."""
        with db.translated(self.path):
            return [
                (str(_text(a)), str(_text(b)), int(c))
                for a, b, c in self.conn.execute(
                    f"SELECT {_capped('decided_by')}, {_capped('decision', 16)}, count(*) "
                    "FROM plan_items GROUP BY decided_by, decision ORDER BY 3 DESC LIMIT 1000"
                )
            ]


def _event_row(r: Sequence[Any]) -> EventRow:
    payload = r[8] if r[8] is not None else b""
    if r[10] and isinstance(payload, bytes):
        try:  # stored as TEXT: str, unless it is not UTF-8 (then the bytes, as BLOB)
            payload = payload.decode("utf-8")
        except UnicodeDecodeError:
            pass
    shown = len(payload.encode() if isinstance(payload, str) else payload)
    seq, eid, ts, kind, cat, name, ver, sv = _texts(r[:8], range(1, 8))
    length = int(r[9]) if r[9] is not None else 0  # NULL: another writer's (or damage)
    return EventRow(seq, eid, ts, kind, cat, name, ver, sv, payload, length, shown < length)


def _id_from_path(path: Path) -> str | None:
    name = os.path.basename(path)
    stem = name[: -len(".sqlite")] if name.endswith(".sqlite") else None
    return stem
