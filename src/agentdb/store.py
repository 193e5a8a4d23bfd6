"""The kernel's writer and reader API over one session file.

:class:`SessionWriter` is what the kernel uses: create a session, emit events (one at a time or
as a batch in one transaction), move its status. Every write validates first and then runs in
one ``BEGIN IMMEDIATE`` transaction, so invalid input raises and writes nothing.

:class:`SessionReader` is what tools use: a read-only open that never creates or migrates and
reads through bounded pages (rows per page, bytes per value).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import ulid

from agentdb import db, errors
from agentdb.paths import session_path, validate_id
from agentdb.schema import enums
from agentdb.schema.hashing import event_hash
from agentdb.schema.identity import Identity, identify, schema_differences
from agentdb.schema.migrations import apply_steps
from agentdb.schema.revisions import APPLICATION_ID, CURRENT_REVISION, DDL

# ------------------------------------------------------------------------------ input types


@dataclass(frozen=True)
class Producer:
    """A plugin (or the reserved kernel producer) that writes events."""

    category: str  # one of the seven plugin categories, or "kernel"
    name: str
    version: str


KERNEL_PRODUCER_NAME = "kernel"


@dataclass(frozen=True)
class Usage:
    """A completed model turn's spend, which the kernel has in hand when it writes a message."""

    provider_name: str
    model_id: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0


@dataclass(frozen=True)
class PlanItem:
    """One item of a built plan and the gate's decision on it."""

    turn_id: str
    tool_call_id: str
    provider_name: str
    tool_name: str
    decision: str  # allow | ask | deny
    decided_by: str  # policy rule name, or the subscriber that decided


@dataclass(frozen=True)
class Event:
    """An event to emit. ``id`` and ``timestamp`` default to a fresh ULID and now (UTC)."""

    kind: str
    producer: Producer
    payload: bytes  # opaque; never inspected
    schema_version: str = "1"
    usage: Usage | None = None  # required for, and only for, kind "message"
    plan_items: Sequence[PlanItem] = ()  # only for kind "plan"
    id: str | None = None
    timestamp: str | None = None


# ------------------------------------------------------------------------------ read models


@dataclass(frozen=True)
class SessionInfo:
    """session.v1.SessionInfo: the session_meta row plus cost_usd summed from cost_ledger."""

    session_id: str
    parent_session_id: str | None
    profile: str
    status: str
    depth: int
    started_at: str
    ended_at: str | None
    cost_usd: float  # SUM(cost_ledger.cost_usd), computed at read time


@dataclass(frozen=True)
class EventRow:
    """One stored event as a bounded read returns it."""

    sequence: int
    id: str
    timestamp: str
    kind: str
    producer_category: str
    producer_name: str
    producer_version: str
    schema_version: str
    payload: bytes | str  # at most the page's payload cap; str when stored as TEXT
    payload_length: int  # the full stored length in bytes
    truncated: bool  # True when payload holds only the first bytes


@dataclass(frozen=True)
class ProducerRow:
    category: str
    name: str
    version: str
    first_seen_sequence: int


@dataclass(frozen=True)
class PlanItemRow:
    sequence: int
    event_sequence: int
    turn_id: str
    tool_call_id: str
    provider_name: str
    tool_name: str
    decision: str
    decided_by: str


@dataclass(frozen=True)
class Page:
    """A bounded read: the rows, and whether more follow."""

    rows: list[Any] = field(default_factory=list)
    more: bool = False  # True when the page was cut at its row limit


def now_timestamp() -> str:
    """Wall-clock time for display: ISO 8601, UTC, milliseconds. Never used for ordering."""
    t = dt.datetime.now(dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def new_session_id() -> str:
    return str(ulid.ULID())


# ------------------------------------------------------------------------------ validation


def validate_event(ev: Event) -> None:
    """Raise a specific :class:`~agentdb.errors.InvalidInput` for anything the spec forbids."""
    if ev.kind == enums.KIND_UNSPECIFIED:
        raise errors.InvalidKind("kind KIND_UNSPECIFIED is never valid on a persisted event")
    if ev.kind not in enums.KINDS:
        raise errors.InvalidKind(f"unknown event kind {ev.kind!r}; one of {', '.join(enums.KINDS)}")
    p = ev.producer
    if p.category not in enums.PRODUCER_CATEGORIES:
        raise errors.InvalidProducer(
            f"unknown producer category {p.category!r}; one of "
            f"{', '.join(enums.PRODUCER_CATEGORIES)}"
        )
    for what, value in (("name", p.name), ("version", p.version)):
        if not isinstance(value, str) or not value:
            raise errors.InvalidProducer(f"producer {what} must be a non-empty string")
    kernel_kind = ev.kind in ("plan", "apply")
    if (p.category == enums.KERNEL) != kernel_kind:
        raise errors.InvalidProducer(
            f"kind {ev.kind!r} with producer category {p.category!r}: plan and apply are written "
            "by the reserved kernel producer, every other kind by a plugin"
        )
    if not isinstance(ev.payload, bytes | bytearray | memoryview):
        raise errors.InvalidInput("payload must be bytes (it is stored opaque)")
    if not isinstance(ev.schema_version, str) or not ev.schema_version:
        raise errors.InvalidInput("schema_version must be a non-empty string such as '1'")
    if ev.kind == "message":
        if ev.usage is None:
            raise errors.InvalidInput("a message event needs usage: it drives cost_ledger")
        u = ev.usage
        for name in ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens"):
            v = getattr(u, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise errors.InvalidInput(f"usage.{name} must be a non-negative integer")
        if not isinstance(u.cost_usd, int | float) or u.cost_usd < 0:
            raise errors.InvalidInput("usage.cost_usd must be a non-negative number")
    elif ev.usage is not None:
        raise errors.InvalidInput(f"usage belongs to message events, not {ev.kind!r}")
    if ev.plan_items and ev.kind != "plan":
        raise errors.InvalidInput(f"plan items belong to plan events, not {ev.kind!r}")
    for item in ev.plan_items:
        if item.decision not in enums.DECISIONS:
            raise errors.InvalidInput(
                f"plan item decision {item.decision!r}; one of allow, ask, deny"
            )


def validate_transition(current: str, new: str) -> None:
    if new not in enums.STATUSES:
        raise errors.InvalidStatus(f"unknown status {new!r}; one of {', '.join(enums.STATUSES)}")
    if current == enums.RUNNING and new != enums.RUNNING:
        return
    if current in enums.REOPENABLE_STATUSES and new == enums.RUNNING:
        return
    if current in enums.TERMINAL_STATUSES:
        raise errors.InvalidTransition(
            f"status {current!r} is terminal and replay-only; it never changes"
        )
    raise errors.InvalidTransition(f"status cannot go from {current!r} to {new!r}")


# ------------------------------------------------------------------------------ writer

_INSERT_EVENT = {
    1: "INSERT INTO events (sequence, id, timestamp, kind, producer_category, producer_name, "
    "producer_version, schema_version, payload) VALUES (?,?,?,?,?,?,?,?,?)",
    2: "INSERT INTO events (sequence, id, timestamp, kind, producer_category, producer_name, "
    "producer_version, schema_version, payload, content_hash) VALUES (?,?,?,?,?,?,?,?,?,?)",
}
_NEXT_SEQUENCE = (
    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name='events'), 0), "
    "coalesce((SELECT max(sequence) FROM events), 0)) + 1"
)


def create_schema(conn: apsw.Connection, revision: int) -> None:
    """Write ``revision``'s tables, user_version and application id into an empty file."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        db.exec_script(conn, DDL[revision])
        conn.execute(f"PRAGMA user_version={int(revision)}")
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


RecoverHook = Callable[[Path, str], None]


class SessionWriter:
    """The kernel's single writer for one session file."""

    def __init__(self, conn: apsw.Connection, path: Path, session_id: str, revision: int):
        self.conn = conn  # the one connection; nobody else writes this file
        self.path = path
        self.session_id = session_id
        self.revision = revision  # the schema revision rows are written at
        self._next_seq: int | None = None  # next sequence, known after our own commits
        self._producers: set[tuple[str, str, str]] | None = None  # rows known to exist

    # -- opening

    @classmethod
    def create(
        cls,
        sessions_dir: Path,
        *,
        profile: str,
        parent_session_id: str | None = None,
        depth: int = 0,
        session_id: str | None = None,
        started_at: str | None = None,
        revision: int = CURRENT_REVISION,
    ) -> SessionWriter:
        """Create a new session file (0600, WAL) with its session_meta row, status running.

        ``revision`` below the current one exists for fixtures that need old files.
        """
        sid = validate_id(session_id) if session_id else new_session_id()
        if parent_session_id is not None:
            validate_id(parent_session_id)
        if not isinstance(profile, str) or not profile:
            raise errors.InvalidInput("profile must be a non-empty string")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
            raise errors.InvalidInput("depth must be a non-negative integer")
        if revision not in DDL:
            raise errors.InvalidInput(f"no schema revision {revision}")
        path = session_path(sessions_dir, sid)
        conn = db.open_writer(path, create=True)
        try:
            with db.translated(path):
                db.configure_writer(conn, path)
                create_schema(conn, revision)
                with conn:
                    conn.execute(
                        "INSERT INTO session_meta (session_id, parent_session_id, profile, "
                        "status, depth, started_at, ended_at) VALUES (?,?,?,?,?,?,NULL)",
                        (
                            sid,
                            parent_session_id,
                            profile,
                            enums.RUNNING,
                            depth,
                            started_at or now_timestamp(),
                        ),
                    )
        except BaseException:
            conn.close()
            raise
        return cls(conn, path, sid, revision)

    @classmethod
    def open(
        cls,
        sessions_dir: Path,
        session_id: str,
        *,
        recover: RecoverHook | None = None,
        migrate: bool = True,
        _moves: int = 0,
    ) -> SessionWriter:
        """Open an existing session the way the spec says the kernel must.

        Identity first (a foreign or too-new file is refused), then ``PRAGMA integrity_check``:
        on failure ``recover(path, session_id)`` is called once (the kernel's automatic salvage
        attempt, which renames the original and puts a replacement in its place) and the open
        is retried; without a hook :class:`~agentdb.errors.Corrupt` is raised. Then the
        migration ladder brings an older file to the current revision before anything else.
        """
        path = session_path(sessions_dir, session_id)
        for attempt in (1, 2):
            try:
                conn = db.open_writer(path)
            except (errors.Corrupt, errors.Unreadable):
                # A smashed header or schema page fails before integrity_check can run.
                if recover is None or attempt == 2:
                    raise
                recover(path, session_id)
                continue
            try:
                try:
                    ident = identify(conn)
                    _require_session(ident, path)
                    problems = db.integrity_problems(conn)
                    if not problems:
                        # A rollback-journal file is not locked between statements: a job
                        # may have swapped another file in. Once in WAL mode the connection
                        # keeps its read lock, so no job can act on the file any more.
                        moved = db.has_moved(conn)
                        if not moved:
                            db.configure_writer(conn, path)
                            moved = db.has_moved(conn)
                        if moved and _moves < 5:
                            conn.close()
                            return cls.open(
                                sessions_dir,
                                session_id,
                                recover=recover,
                                migrate=migrate,
                                _moves=_moves + 1,
                            )
                        revision = ident.revision
                        if migrate and revision < CURRENT_REVISION:
                            _, revision = apply_steps(conn, path)
                        _require_shape(conn, path, revision, session_id)
                        return cls(conn, path, session_id, revision)
                except apsw.Error as e:
                    err = db.translate(e, path)
                    if not isinstance(err, errors.Corrupt):
                        raise err from e
                    problems = [str(e).split("\n")[0]]
                except errors.Corrupt as e:  # from db.translated, or session_meta not the file's
                    problems = [str(e)]
            except BaseException:
                conn.close()
                raise
            conn.close()
            if recover is None or attempt == 2:
                raise errors.Corrupt(
                    f"{path}: integrity_check failed ({problems[0]}); run `agentdb recover "
                    f"{session_id}`",
                    path=path,
                )
            recover(path, session_id)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing

    def emit(self, event: Event) -> int:
        """Append one event in one transaction; returns its sequence."""
        return self.emit_batch([event])[0]

    def emit_batch(self, events: Iterable[Event]) -> list[int]:
        """Append events in order in one transaction (group commit); returns their sequences.

        Every event is validated before the transaction starts: one bad event writes nothing.
        """
        batch = list(events)
        for ev in batch:
            validate_event(ev)
        if not batch:
            return []
        conn = self.conn
        out: list[int] = []
        stamp = now_timestamp()
        with db.translated(self.path):
            conn.execute("BEGIN IMMEDIATE")
            try:
                if self._producers is None:
                    self._producers = {
                        (str(c), str(n), str(v))
                        for c, n, v in db.rows(
                            conn, "SELECT category, name, version FROM producers"
                        )
                    }
                seq = self._next_seq or int(db.scalar(conn, _NEXT_SEQUENCE))
                for ev in batch:
                    self._insert(ev, seq, stamp)
                    out.append(seq)
                    seq += 1
                conn.execute("COMMIT")
            except BaseException:
                self._next_seq = None
                self._producers = None
                if not conn.get_autocommit():
                    conn.execute("ROLLBACK")
                raise
        self._next_seq = seq
        return out

    def _insert(self, ev: Event, seq: int, stamp: str) -> None:
        conn = self.conn
        p = ev.producer
        payload = bytes(ev.payload)
        row: tuple[Any, ...] = (
            seq,
            ev.id or str(ulid.ULID()),
            ev.timestamp or stamp,
            ev.kind,
            p.category,
            p.name,
            p.version,
            ev.schema_version,
            payload,
        )
        if self.revision >= 2:
            row = (*row, event_hash(*row))
        conn.execute(_INSERT_EVENT[min(self.revision, 2)], row)
        key = (p.category, p.name, p.version)
        assert self._producers is not None
        if key not in self._producers:
            conn.execute(
                "INSERT OR IGNORE INTO producers (category, name, version, first_seen_sequence) "
                "VALUES (?,?,?,?)",
                (*key, seq),
            )
            self._producers.add(key)
        if ev.usage is not None:
            u = ev.usage
            conn.execute(
                "INSERT INTO cost_ledger (event_sequence, provider_name, model_id, input_tokens, "
                "output_tokens, cache_write_tokens, cache_read_tokens, cost_usd) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (
                    seq,
                    u.provider_name,
                    u.model_id,
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_write_tokens,
                    u.cache_read_tokens,
                    float(u.cost_usd),
                ),
            )
        for item in ev.plan_items:
            conn.execute(
                "INSERT INTO plan_items (event_sequence, turn_id, tool_call_id, provider_name, "
                "tool_name, decision, decided_by) VALUES (?,?,?,?,?,?,?)",
                (
                    seq,
                    item.turn_id,
                    item.tool_call_id,
                    item.provider_name,
                    item.tool_name,
                    item.decision,
                    item.decided_by,
                ),
            )

    def set_status(self, status: str, *, at: str | None = None) -> None:
        """Move the session's status: ``ended_at`` is set on ending and cleared on re-open."""
        with db.translated(self.path):
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                row = db.row(
                    self.conn,
                    "SELECT status FROM session_meta WHERE session_id = ?",
                    (self.session_id,),
                )
                if row is None:
                    raise errors.Corrupt(f"{self.path}: no session_meta row", path=self.path)
                validate_transition(str(row[0]), status)
                ended = None if status == enums.RUNNING else (at or now_timestamp())
                self.conn.execute(
                    "UPDATE session_meta SET status = ?, ended_at = ? WHERE session_id = ?",
                    (status, ended, self.session_id),
                )
                self.conn.execute("COMMIT")
            except BaseException:
                if not self.conn.get_autocommit():
                    self.conn.execute("ROLLBACK")
                raise

    def info(self) -> SessionInfo:
        return _read_info(self.conn, self.path, self.session_id)


def _require_session(ident: Identity, path: Path) -> None:
    if ident.kind == "session":
        return
    if ident.kind == "too_new":
        raise errors.TooNew(f"{path}: {ident.problem}; upgrade agentdb to open it", path=path)
    if ident.kind == "empty":
        raise errors.Unreadable(
            f"{path}: an empty database with no session in it; remove it if nothing uses it",
            path=path,
        )
    raise errors.ForeignFile(
        f"{path}: {ident.problem}; it is not a session file — move it out of the sessions "
        "directory",
        path=path,
    )


def _require_shape(conn: apsw.Connection, path: Path, revision: int, session_id: str) -> None:
    diffs = schema_differences(conn, revision)
    if diffs:
        raise errors.ForeignFile(
            f"{path}: schema does not match revision {revision} ({diffs[0]}); "
            "run `agentdb check` on it",
            path=path,
        )
    ids = [r[0] for r in conn.execute("SELECT session_id FROM session_meta LIMIT 2")]
    if ids != [session_id]:
        raise errors.Corrupt(
            f"{path}: session_meta holds {ids!r}, expected exactly [{session_id!r}]; "
            "run `agentdb check` on it",
            path=path,
        )


# ------------------------------------------------------------------------------ reader

MAX_TEXT = 4096  # characters of any text column a bounded read returns
DEFAULT_PAYLOAD_CAP = 64 * 1024  # bytes of payload a bounded read returns per event
DEFAULT_PAGE_ROWS = 1000


def _capped(col: str, cap: int = MAX_TEXT) -> str:
    return f"substr({col}, 1, {int(cap)})"


_INFO_SQL = (
    f"SELECT {_capped('session_id', 64)}, {_capped('parent_session_id', 64)}, "
    f"{_capped('profile')}, {_capped('status', 64)}, depth, {_capped('started_at', 64)}, "
    f"{_capped('ended_at', 64)}, (SELECT total(cost_usd) FROM cost_ledger)"
)


def _read_info(
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
    if len(rows) != 1 or (session_id is not None and rows[0][0] != session_id):
        raise errors.Corrupt(
            f"{path}: expected exactly one session_meta row for {session_id}, found "
            f"{len(rows)}; run `agentdb check` on it",
            path=path,
        )
    r = rows[0]
    info = SessionInfo(r[0], r[1], r[2], r[3], r[4], r[5], r[6], float(r[7] or 0.0))
    return info, (int(r[8]) if count_events else None)


class SessionReader:
    """Read-only, bounded access to one session file (never creates, migrates or writes)."""

    def __init__(self, path: Path, *, session_id: str | None = None):
        self.path = path
        self.session_id = session_id if session_id is not None else _id_from_path(path)
        self.conn = db.open_readonly(path)
        try:
            with db.translated(path):
                self.identity = identify(self.conn)
                _require_session(self.identity, path)
        except BaseException:
            self.conn.close()
            raise
        self.revision = self.identity.revision

    @classmethod
    def open(cls, sessions_dir: Path, session_id: str) -> SessionReader:
        return cls(session_path(sessions_dir, session_id), session_id=session_id)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SessionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def info(self) -> SessionInfo:
        with db.translated(self.path):
            return _read_info(self.conn, self.path, self.session_id)

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
        where = "sequence > ?"
        args: list[Any] = [int(after)]
        if kinds:
            where += f" AND kind IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        cap = max(0, int(payload_cap))
        sql = (
            f"SELECT sequence, {_capped('id', 256)}, {_capped('timestamp', 64)}, "
            f"{_capped('kind', 64)}, {_capped('producer_category', 64)}, "
            f"{_capped('producer_name')}, {_capped('producer_version')}, "
            f"{_capped('schema_version', 64)}, "
            f"CASE WHEN typeof(payload) = 'text' THEN substr(payload, 1, {cap}) "
            f"ELSE substr(CAST(payload AS BLOB), 1, {cap}) END, "
            "CASE WHEN typeof(payload) = 'text' THEN length(CAST(payload AS BLOB)) "
            "ELSE length(payload) END "
            f"FROM events WHERE {where} ORDER BY sequence LIMIT ?"
        )
        args.append(int(limit) + 1)
        with db.translated(self.path):
            raw = db.rows(self.conn, sql, args)
        rows = []
        for r in raw[:limit]:
            payload = r[8] if r[8] is not None else b""
            shown = len(payload.encode() if isinstance(payload, str) else payload)
            seq, eid, ts, kind, cat, name, ver, sv = r[:8]
            rows.append(
                EventRow(
                    seq, eid, ts, kind, cat, name, ver, sv, payload, int(r[9]), shown < int(r[9])
                )
            )
        return Page(rows, len(raw) > limit)

    def iter_events(
        self,
        *,
        after: int = 0,
        kinds: Sequence[str] | None = None,
        page_rows: int = DEFAULT_PAGE_ROWS,
        payload_cap: int = DEFAULT_PAYLOAD_CAP,
    ) -> Iterator[EventRow]:
        """Every event after ``after`` in sequence order, read a bounded page at a time."""
        while True:
            page = self.events(after=after, kinds=kinds, limit=page_rows, payload_cap=payload_cap)
            yield from page.rows
            if not page.more or not page.rows:
                return
            after = page.rows[-1].sequence

    def producers(self, *, limit: int = DEFAULT_PAGE_ROWS) -> Page:
        with db.translated(self.path):
            raw = db.rows(
                self.conn,
                f"SELECT {_capped('category', 64)}, {_capped('name')}, {_capped('version')}, "
                "first_seen_sequence FROM producers ORDER BY first_seen_sequence, category, "
                "name, version LIMIT ?",
                (limit + 1,),
            )
        return Page([ProducerRow(*r) for r in raw[:limit]], len(raw) > limit)

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
        return Page([PlanItemRow(*r) for r in raw[:limit]], len(raw) > limit)

    def cost_by_model(self) -> list[tuple[Any, ...]]:
        """(provider, model, turns, input, output, cache tokens, cost_usd) per model."""
        with db.translated(self.path):
            return [
                tuple(r)
                for r in self.conn.execute(
                    f"SELECT {_capped('provider_name')}, {_capped('model_id')}, count(*), "
                    "total(input_tokens), total(output_tokens), "
                    "total(cache_write_tokens + cache_read_tokens), total(cost_usd) "
                    "FROM cost_ledger GROUP BY provider_name, model_id ORDER BY 7 DESC LIMIT 1000"
                )
            ]

    def plan_decisions(self) -> list[tuple[str, str, int]]:
        """(decided_by, decision, count) for every rule and decision."""
        with db.translated(self.path):
            return [
                (str(a), str(b), int(c))
                for a, b, c in self.conn.execute(
                    f"SELECT {_capped('decided_by')}, {_capped('decision', 16)}, count(*) "
                    "FROM plan_items GROUP BY decided_by, decision ORDER BY 3 DESC LIMIT 1000"
                )
            ]


def _id_from_path(path: Path) -> str | None:
    name = os.path.basename(path)
    stem = name[: -len(".sqlite")] if name.endswith(".sqlite") else None
    return stem
