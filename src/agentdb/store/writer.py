"""The kernel's single writer for one session file.

Every write validates first and then runs in one ``BEGIN IMMEDIATE`` transaction, so invalid
input raises and writes nothing. A writer may be shared by any number of threads: one lock
serialises everything that touches its connection, so every event lands, and sequences are
given in commit order with no gap (the spec's parallel data_source calls)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import ulid

from agentdb import db, errors, locks
from agentdb.hashing import event_hash
from agentdb.paths import require_short_path, session_path, validate_id
from agentdb.schema import enums
from agentdb.schema.migrations import create_schema
from agentdb.schema.revisions import CURRENT_REVISION, KNOWN_DDL
from agentdb.store import chained, opening
from agentdb.store.model import (
    Event,
    JudgeHook,
    RecoverHook,
    SessionInfo,
    new_session_id,
    now_timestamp,
    require_text_size,
    validate_event,
    validate_transition,
)
from agentdb.store.reader import read_info

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


@dataclass
class _Rows:
    """What one transaction inserts, per table, in sequence order."""

    events: list[tuple[Any, ...]] = field(default_factory=list)
    producers: list[tuple[Any, ...]] = field(default_factory=list)
    costs: list[tuple[Any, ...]] = field(default_factory=list)
    plans: list[tuple[Any, ...]] = field(default_factory=list)

    def write(self, conn: apsw.Connection, revision: int) -> None:
        # events first: the other three reference them (foreign keys are checked per statement)
        insert = _INSERT_EVENT[min(revision, 2)]
        if len(self.events) == 1:
            conn.execute(insert, self.events[0])
        else:
            conn.executemany(insert, self.events)
        if self.producers:
            conn.executemany(
                "INSERT OR IGNORE INTO producers (category, name, version, first_seen_sequence) "
                "VALUES (?,?,?,?)",
                self.producers,
            )
        if self.costs:
            conn.executemany(
                "INSERT INTO cost_ledger (event_sequence, provider_name, model_id, input_tokens, "
                "output_tokens, cache_write_tokens, cache_read_tokens, cost_usd) "
                "VALUES (?,?,?,?,?,?,?,?)",
                self.costs,
            )
        if self.plans:
            conn.executemany(
                "INSERT INTO plan_items (event_sequence, turn_id, tool_call_id, provider_name, "
                "tool_name, decision, decided_by) VALUES (?,?,?,?,?,?,?)",
                self.plans,
            )


class SessionWriter:
    """The kernel's single writer for one session file."""

    def __init__(
        self,
        conn: apsw.Connection,
        path: Path,
        session_id: str,
        revision: int,
        lease: locks.Lease | None = None,
        status: str | None = None,
    ):
        self.conn = conn  # the one connection; nobody else writes this file
        self.lease = lease  # the sole-writer lease (None only for a writer built by hand)
        self.path = path
        self.session_id = session_id
        self.revision = revision  # the schema revision rows are written at
        self._next_seq: int | None = None  # next sequence, known after our own commits
        self._producers: set[tuple[str, str, str]] | None = None  # rows known to exist
        self._chain_head: chained.Head | None = None  # revision 3 only: the head, cached
        self._head_cursor: apsw.Cursor | None = None  # revision 3 only: runs the head's UPDATE
        # Held by every use of ``conn`` (and of the two caches above): APSW raises on a
        # connection used from two threads at once, and a transaction must not interleave.
        self._lock = threading.Lock()
        # The session's status, read once: under the lease nobody else changes it.
        self._status = status if status is not None else opening.read_status(conn, path, session_id)

    # -- opening

    @classmethod
    def create(
        cls,
        sessions_dir: str | os.PathLike[str],
        *,
        profile: str,
        parent_session_id: str | None = None,
        depth: int = 0,
        session_id: str | None = None,
        started_at: str | None = None,
        revision: int = CURRENT_REVISION,
    ) -> SessionWriter:
        """Create a new session file (0600, WAL) with its session_meta row, status running.

        ``revision`` below the current one exists for fixtures that need old files; from
        revision 3 (the damage-evident revision) the session_chain head is written in the
        session_meta row's transaction.
        """
        sid = validate_id(session_id) if session_id else new_session_id()
        sessions_dir = Path(os.fspath(sessions_dir))
        require_short_path(sessions_dir)  # else SQLite would fail after creating the file
        if parent_session_id is not None:
            validate_id(parent_session_id)
            if parent_session_id == sid:
                raise errors.InvalidLineage(f"session {sid} cannot be its own parent")
        if not isinstance(profile, str) or not profile:
            raise errors.InvalidInput("profile must be a non-empty string")
        require_text_size("profile", profile)
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
            raise errors.InvalidInput("depth must be a non-negative integer")
        if revision not in KNOWN_DDL:
            raise errors.InvalidInput(f"no schema revision {revision}")
        if parent_session_id is not None:
            opening.require_child_depth(sessions_dir, parent_session_id, depth)
        path = session_path(sessions_dir, sid)
        conn = db.open_writer(path, create=True)
        try:
            with db.translated(path):
                db.configure_writer(conn, path)
                create_schema(conn, revision)
                created = now_timestamp()
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
                            started_at or created,
                        ),
                    )
                    if revision == chained.REVISION:
                        chained.create_head(conn, sid, created)
            lease = locks.Lease(path)
            lease.acquire()
            opening.tighten_modes(path, lease.fd)
        except BaseException:
            conn.close()
            raise
        return cls(conn, path, sid, revision, lease, enums.RUNNING)

    @classmethod
    def open(
        cls,
        sessions_dir: str | os.PathLike[str],
        session_id: str,
        *,
        recover: RecoverHook | None = None,
        judge: JudgeHook | None = None,
        migrate: bool = True,
    ) -> SessionWriter:
        """Open an existing session the way the spec says the kernel must.

        First the file is judged: by ``judge(path, session_id)`` when given (the kernel passes
        ``agentdb check``'s judge: integrity, content hashes, text, WAL, journal), else by the
        writer's own ``PRAGMA integrity_check`` and content hashes. Damage calls
        ``recover(path, session_id)`` once (the kernel's automatic salvage attempt, which
        renames the original and puts a replacement in its place) and the open is retried;
        without a hook :class:`~agentdb.errors.Corrupt` is raised. A foreign or too-new file is
        refused, never recovered. Then the migration ladder brings an older file to the
        current revision before anything else — never a file the judge calls damaged.
        Another writer's lease is refused at once (:class:`~agentdb.errors.SessionBusy`, naming
        its pid); this writer takes the lease last, once the file it will write is settled.
        """
        require_short_path(sessions_dir)
        path = session_path(Path(os.fspath(sessions_dir)), session_id)
        lease = locks.Lease(path)
        try:
            lease.check()
            conn, revision = opening.open_checked(path, session_id, recover, judge, migrate, lease)
        except BaseException:
            lease.release()
            raise
        return cls(conn, path, session_id, revision, lease)

    def close(self) -> None:
        """Close the connection, then let go of the lease. Idempotent."""
        with self._lock:
            try:
                self.conn.close()
            finally:
                if self.lease is not None:
                    self.lease.release()

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
        Safe from any thread; a batch's sequences are consecutive.
        """
        batch = list(events)
        for ev in batch:
            validate_event(ev)
        if not batch:
            return []
        with self._lock:
            self._require_running()
            return self._write(batch)

    def _require_running(self) -> None:
        status = self._status
        if status == enums.RUNNING:
            return
        if status in enums.REOPENABLE_STATUSES:
            raise errors.SessionEnded(
                f"{self.path}: session is {status!r}; re-open it with set_status('running') "
                "before emitting (nothing was written)"
            )
        raise errors.SessionEnded(
            f"{self.path}: session is {status!r}, which is terminal and replay-only; it takes "
            "no more events (nothing was written)"
        )

    def _write(self, batch: list[Event]) -> list[int]:
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
                head = None
                if self.revision >= chained.REVISION:
                    # taken out of the cache: only this transaction's commit puts one back
                    head, self._chain_head = self._chain_head, None
                    if head is None:
                        head = chained.read_head(conn)
                    seq = head.next_event
                else:
                    seq = self._next_seq or int(db.scalar(conn, _NEXT_SEQUENCE))
                rows = _Rows()
                for ev in batch:
                    self._collect(ev, seq, stamp, rows)
                    out.append(seq)
                    seq += 1
                if head is not None:
                    cursor = self._head_cursor
                    if cursor is None:  # one cursor for every head UPDATE: cheaper than one each
                        cursor = self._head_cursor = conn.cursor()
                    head = chained.write(conn, head, rows, cursor)
                else:
                    rows.write(conn, self.revision)
                conn.execute("COMMIT")
            except BaseException:
                self._next_seq = None
                self._producers = None
                self._chain_head = None
                if not conn.get_autocommit():
                    conn.execute("ROLLBACK")
                raise
        self._next_seq = seq
        self._chain_head = head
        return out

    def _collect(self, ev: Event, seq: int, stamp: str, rows: _Rows) -> None:
        """The rows ``ev`` adds to each table, appended to ``rows`` (written in bulk)."""
        p = ev.producer
        row: tuple[Any, ...] = (
            seq,
            ev.id or str(ulid.ULID()),
            ev.timestamp or stamp,
            ev.kind,
            p.category,
            p.name,
            p.version,
            ev.schema_version,
            bytes(ev.payload),
        )
        if self.revision >= 2:
            row = (*row, event_hash(*row))
        rows.events.append(row)
        key = (p.category, p.name, p.version)
        assert self._producers is not None
        if key not in self._producers:
            rows.producers.append((*key, seq))
            self._producers.add(key)
        if ev.usage is not None:
            u = ev.usage
            rows.costs.append(
                (
                    seq,
                    u.provider_name,
                    u.model_id,
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_write_tokens,
                    u.cache_read_tokens,
                    float(u.cost_usd),
                )
            )
        for item in ev.plan_items:
            rows.plans.append(
                (
                    seq,
                    item.turn_id,
                    item.tool_call_id,
                    item.provider_name,
                    item.tool_name,
                    item.decision,
                    item.decided_by,
                )
            )

    def set_status(self, status: enums.Status, *, at: str | None = None) -> None:
        """Move the session's status: ``ended_at`` is set on ending and cleared on re-open."""
        with self._lock, db.translated(self.path):
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
                head = None
                if self.revision >= chained.REVISION:
                    # meta_hash changes; taken out of the cache until the commit
                    head, self._chain_head = self._chain_head, None
                    head = chained.after_status(self.conn, head)
                self.conn.execute("COMMIT")
            except BaseException:
                if not self.conn.get_autocommit():
                    self.conn.execute("ROLLBACK")
                raise
            self._status = status
            self._chain_head = head

    def info(self) -> SessionInfo:
        with self._lock, db.translated(self.path):
            return read_info(self.conn, self.path, self.session_id)
