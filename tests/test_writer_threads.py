"""One SessionWriter shared by many threads (the spec's parallel data_source calls): every
call succeeds, every event lands, sequences are given in commit order with no gap."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from agentdb import errors
from agentdb.store import Event, Producer, SessionReader, SessionWriter, Usage
from tests.rows import all_rows

pytestmark = pytest.mark.slow

THREADS = 8
EMITS = 40
ROUNDS = 5


def _run(n: int, work: Callable[[int], None]) -> list[BaseException]:
    """Run ``work(i)`` in ``n`` threads released together; the exceptions they raised."""
    failures: list[BaseException] = []
    start = threading.Barrier(n)

    def body(i: int) -> None:
        start.wait()
        try:
            work(i)
        except BaseException as e:  # collected: the test reports every one
            failures.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return failures


def test_threads_emit_without_errors_or_gaps(sessions_dir: Path) -> None:
    total = 0
    for _ in range(ROUNDS):
        w = SessionWriter.create(sessions_dir, profile="p")
        got: dict[int, list[int]] = {i: [] for i in range(THREADS)}

        def work(i: int, w: SessionWriter = w, got: dict[int, list[int]] = got) -> None:
            p = Producer("tool", f"t{i}", "1")
            m = Producer("model", "m", "1")
            for k in range(EMITS):
                if k % 10 == 9:  # batches and messages (cost_ledger rows) interleave too
                    got[i] += w.emit_batch(
                        [
                            Event("tool_call", p, f"{i}:{k}:a".encode()),
                            Event(
                                "message",
                                m,
                                f"{i}:{k}:b".encode(),
                                usage=Usage("prov", "model", 1, 1, 0.01),
                            ),
                        ]
                    )
                else:
                    got[i].append(w.emit(Event("tool_result", p, f"{i}:{k}".encode())))
                if k % 13 == 0:
                    w.info()

        failures = _run(THREADS, work)
        w.close()
        assert failures == [], failures[:3]
        rows = all_rows(w.path)
        seqs = [int(r[0]) for r in rows["events"]]
        n = THREADS * (EMITS + EMITS // 10)
        assert seqs == list(range(1, n + 1))  # every event landed, no gap
        returned = sorted(s for v in got.values() for s in v)
        assert returned == seqs  # each sequence handed out once, to the call that wrote it
        by_seq = {int(r[0]): bytes(r[8]) for r in rows["events"]}
        for i, mine in got.items():
            assert mine == sorted(mine)  # one thread's calls commit in the order it made them
            payloads = [by_seq[s].split(b":")[:2] for s in mine]
            assert payloads == sorted(payloads, key=lambda x: int(x[1]))
            assert all(p[0] == str(i).encode() for p in payloads)
        assert len(rows["cost_ledger"]) == THREADS * (EMITS // 10)
        assert {r[0] for r in rows["producers"]} == {"tool", "model"}
        with SessionReader(w.path) as r:
            assert r.event_count() == n
        total += n
    assert total == ROUNDS * THREADS * (EMITS + EMITS // 10)


def test_set_status_from_threads_is_serialised(sessions_dir: Path) -> None:
    """Threads end and re-open the session at once: each call either moves the status or is
    told the transition is invalid — none meets another's transaction, and the final status
    is what the successful calls add up to."""
    w = SessionWriter.create(sessions_dir, profile="p")
    moved: list[str] = []

    def work(i: int) -> None:
        for k in range(EMITS):
            status = "completed" if (i + k) % 2 else "running"
            try:
                w.set_status(status)
            except errors.InvalidTransition:
                continue
            moved.append(status)

    failures = _run(THREADS, work)
    w.close()
    assert failures == [], failures[:3]
    assert moved  # some calls moved it
    # every success flipped running <-> completed, alternating
    assert moved == ["completed", "running"] * (len(moved) // 2) + ["completed"] * (len(moved) % 2)
    meta = all_rows(w.path)["session_meta"][0]
    assert meta[3] == moved[-1]
    assert (meta[6] is None) == (moved[-1] == "running")
