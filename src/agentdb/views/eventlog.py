"""``agentdb events ID``: a session's event log in sequence order — every event that reads —
and then the judge's verdict on the file (:mod:`agentdb.checks.judge`, full level)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from agentdb import errors, locks, paths
from agentdb.checks import Judgement
from agentdb.index import checked
from agentdb.store import EventRow, SessionReader

INT64_MAX = 2**63 - 1
_DAMAGE = (errors.Corrupt, errors.Unreadable, errors.DiskIOError)  # a row that does not read
MAX_SKIPS = 256  # damaged regions read past before the rest is left to `agentdb recover`
_BEFORE_ALL = -(2**63) - 1  # below every sequence SQLite can store: "after" with no lower bound
FOLLOW_INTERVAL = 0.5  # seconds between the read-only polls of ``events --follow``


class EventLog:
    """``events``: the readable part of a session's log in sequence order, then the judge.

    Iterating yields every event SQLite can read, in order: past a row or page it cannot read,
    reading resumes at the next event it can (:attr:`skipped` lists the ranges of sequence
    numbers passed over, :attr:`error` the first failure; nothing is raised). A file whose
    WAL, applied, names another session in ``session_meta`` while the file alone names this
    one is read alone, as ``check`` judges it (``foreign_wal``). :meth:`judgement` is then the
    full judge's verdict on the file (or the one ``check`` recorded for it as it is now).
    """

    def __init__(
        self,
        sessions_dir: Path,
        session_id: str,
        *,
        kinds: Sequence[str] | None = None,
        after: int | None = None,
        payload_cap: int = 4096,
    ) -> None:
        self.sessions_dir, self.session_id = sessions_dir, session_id
        self.kinds, self.after, self.payload_cap = kinds, after, payload_cap
        self.path = paths.session_path(sessions_dir, session_id)
        self.error: errors.AgentdbError | None = None  # the first read that failed
        self.skipped: list[tuple[int, int]] = []  # (first, last) sequences that could not be read
        self.count = 0  # events yielded

    def __iter__(self) -> Iterator[EventRow]:
        after = self.after
        try:
            with self._open() as r:
                while True:
                    try:
                        for e in r.iter_events(
                            after=after, kinds=self.kinds, payload_cap=self.payload_cap
                        ):
                            self.count += 1
                            # never backwards
                            after = e.sequence if after is None else max(after, e.sequence)
                            self.after = after  # where a later pass (``follow``) goes on
                            yield e
                        return
                    except _DAMAGE as e:
                        self.error = self.error or e
                        resume = None
                        low = _BEFORE_ALL if after is None else after
                        if len(self.skipped) < MAX_SKIPS:
                            resume = self._past_damage(r, low)
                        if resume is None:
                            return
                        self.skipped.append((low + 1, resume))
                        after = self.after = resume
        except errors.SessionNotFound:
            raise  # no such session: a usage error, not damage
        except errors.AgentdbError as e:
            self.error = self.error or e

    def _readable_after(self, r: SessionReader, after: int) -> bool:
        try:
            next(iter(r.iter_events(after=after, kinds=self.kinds, page_rows=1, payload_cap=1)))
        except StopIteration:
            return True
        except _DAMAGE:
            return False
        return True

    def _past_damage(self, r: SessionReader, after: int) -> int | None:
        """The smallest ``p`` > ``after`` from which reading works again (the events in
        ``after + 1 .. p`` cannot be read), found in O(log) seeks: SQLite finds the first event
        after ``p`` by its key, past a damaged page. None when nothing after works."""
        step, good = 1, None
        while after + step <= INT64_MAX:
            if self._readable_after(r, after + step):
                good = after + step
                break
            step *= 2
        if good is None:
            return None
        bad = after + step // 2 if step > 1 else after
        while good - bad > 1:  # reading after ``bad`` fails, after ``good`` works
            mid = (bad + good) // 2
            if self._readable_after(r, mid):
                good = mid
            else:
                bad = mid
        return good

    def _open(self) -> SessionReader:
        r = SessionReader(self.path, session_id=self.session_id)
        try:
            r.require_named()  # session_meta names this session
            return r
        except (errors.Corrupt, errors.ForeignFile) as first:
            r.close()
            if not os.path.lexists(paths.sidecar(self.path, "-wal")):
                raise
            try:
                alone = SessionReader(self.path, session_id=self.session_id, alone=True)
            except errors.AgentdbError:
                raise first from None
            try:
                alone.require_named()
            except errors.AgentdbError:
                alone.close()
                raise first from None
            return alone
        except BaseException:
            r.close()
            raise

    def follow(
        self,
        interval: float = FOLLOW_INTERVAL,
        *,
        sleep: Callable[[float], object] = time.sleep,
        on_idle: Callable[[], object] | None = None,
    ) -> Iterator[EventRow]:
        """Like ``tail -f``: every event, then each new one a live writer commits, until the
        session's status is no longer ``running`` (or a read fails: :attr:`error`). Polls
        read-only every ``interval`` seconds, each pass a fresh read-only open that is closed
        before the wait, so nothing is created in the sessions directory and the writer (WAL)
        is never blocked. The status is read before each pass's events, so the pass that sees
        it ended has every event written before the end. ``on_idle`` is called once, after the
        first pass, when no process has the file open (a kernel that died: nothing will come)."""
        first = True
        while True:
            running = self._running()
            yield from self
            if not running or self.error is not None:
                return
            if first and on_idle is not None and locks.probe(self.path) is None:
                on_idle()
            first = False
            sleep(interval)

    def _running(self) -> bool:
        """The session's status is ``running`` now (False, with :attr:`error`, when unread)."""
        try:
            with self._open() as r:
                return r.info().status == "running"
        except errors.SessionNotFound:
            raise
        except errors.AgentdbError as e:
            self.error = self.error or e
            return False

    def judgement(self) -> Judgement:
        return checked.judge_session(self.sessions_dir, self.session_id, "full")
