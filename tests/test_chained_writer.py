"""The writer at revision 3 (design §4, §5, §8; unreleased: reached only by
``SessionWriter.create(revision=3)``): every emit, batch and status change writes its rows'
hashes, the chain and the head in one transaction. Proven by the independent recomputation in
tests/chain_oracle.py, and after kill -9 at the fault points between the rows and the head."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb import db, errors, faults
from agentdb.hashing import row_hash
from agentdb.jobs import demo
from agentdb.schema import chainio, migrations
from agentdb.store import Event, PlanItem, Producer, SessionWriter, Usage, chained
from tests import chain_oracle

ROOT = Path(__file__).resolve().parents[1]
SID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
MODEL = Producer("model", "m", "1")
TOOL = Producer("tool", "t", "2")


def _events(start: int, n: int) -> list[Event]:
    out = []
    for i in range(start, start + n):
        kw = {"id": f"ev-{i:04d}", "timestamp": f"2026-12-01T00:00:{i % 60:02d}.000Z"}
        if i % 3 == 0:
            usage = Usage("prov", "mod", 10 + i, 20, 0.001 * i, 1, 2)
            out.append(Event(kind="message", producer=MODEL, payload=b"m", usage=usage, **kw))
        elif i % 3 == 1:
            items = [
                PlanItem(f"turn{i}", f"call{i}-{k}", "prov", "tool", "allow", "rule")
                for k in range(2)
            ]
            out.append(Event(kind="plan", producer=Producer("kernel", "kernel", "1"),
                             payload=b"p", plan_items=items, **kw))  # fmt: skip
        else:
            out.append(Event(kind="tool_call", producer=TOOL, payload=bytes([i % 256]), **kw))
    return out


def _proven(path: Path) -> apsw.Connection:
    conn = db.open_writer(path)
    assert chain_oracle.problems(conn) == []
    assert migrations.head_problems(conn) == []
    assert db.integrity_problems(conn) == []
    return conn


@pytest.mark.slow
def test_emits_batches_and_status_prove(sessions_dir: Path) -> None:
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    path = w.path
    conn = _proven(path)  # the genesis head of an empty session
    conn.close()
    demo._turns(w, demo.MODEL_OLD, 2, seed=2)
    assert w.emit_batch(_events(100, 7)) == list(range(13, 20))
    for ev in _events(200, 4):
        w.emit(ev)
    w.set_status("completed")
    w.set_status("running")
    w.emit(_events(300, 1)[0])
    w.close()
    conn = _proven(path)
    try:
        assert db.scalar(conn, "PRAGMA user_version") == 3
        head = chain_oracle.rows(conn, "session_chain")[0]
        assert head[1] == 24 and head[5] == 24
        assert head[10:12] == ("created", 3)
        assert all(
            db.scalar(conn, f"SELECT count(*) FROM {t}")
            for t in ("cost_ledger", "plan_items", "producers")
        )
    finally:
        conn.close()


@pytest.mark.slow
def test_the_writer_and_step_3_hash_alike(sessions_dir: Path, tmp_path: Path) -> None:
    """Design §13 A20: the same rows written at revision 3, and written at revision 2 then
    migrated by step 3, have identical hashes, links and head (but for origin)."""
    other = tmp_path / "other"
    other.mkdir()
    files = []
    for where, revision in ((sessions_dir, 3), (other, 2)):
        w = SessionWriter.create(
            where, profile="p", revision=revision, session_id=SID, started_at="2026-12-01"
        )
        w.emit_batch(_events(1, 5))
        for ev in _events(6, 4):
            w.emit(ev)
        w.set_status("completed", at="2026-12-02")
        files.append(w.path)
        w.close()
    conn = db.open_writer(files[1])
    migrations.apply_steps(conn, files[1], target=3, steps=migrations.REV3_LADDER)
    conn.close()
    a, b = db.open_writer(files[0]), db.open_writer(files[1])
    try:
        for table in ("events", "cost_ledger", "plan_items", "producers", "session_meta"):
            assert chain_oracle.rows(a, table) == chain_oracle.rows(b, table), table
        ha, hb = chain_oracle.rows(a, "session_chain")[0], chain_oracle.rows(b, "session_chain")[0]
        assert ha[1:10] == hb[1:10]
        assert (ha[10], hb[10], hb[11]) == ("created", "migrated", 2)
    finally:
        a.close()
        b.close()


def test_a_negative_zero_cost_is_hashed_as_stored(sessions_dir: Path) -> None:
    """SQLite returns a REAL -0.0 as 0.0: the writer hashes what will be read back."""
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    w.emit(Event(kind="message", producer=MODEL, payload=b"m", usage=Usage("p", "m", 1, 1, -0.0)))
    path = w.path
    w.close()
    _proven(path).close()


def test_a_failed_emit_leaves_the_chain_whole(sessions_dir: Path) -> None:
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    w.emit_batch(_events(1, 3))
    with pytest.raises(errors.ConstraintViolation):  # a duplicate id: the transaction rolls back
        w.emit_batch([*_events(4, 2), _events(1, 1)[0]])
    w.emit_batch(_events(4, 3))
    path = w.path
    w.close()
    conn = _proven(path)
    conn.close()


def _walked(path: Path) -> None:
    """Proven by the oracle, step 3's head check, integrity_check and the walk (full)."""
    conn = _proven(path)
    try:
        report = chainio.verify_full(conn)
        assert report.problems == []
        assert chainio.verify_quick(conn).problems == []
    finally:
        conn.close()


def _cache_is_the_file(w: SessionWriter) -> None:
    """The writer's cached head (the frames it keeps included) is the head read anew from the
    file, and the stored head's own hash is the row hash of its columns."""
    cached = w._chain_head
    assert cached is not None
    assert cached == chained.read_head(w.conn)
    stored = db.row(w.conn, "SELECT content_hash FROM session_chain")
    assert stored is not None and stored[0] == row_hash("session_chain", cached.row)


def test_the_cached_head_is_the_file(sessions_dir: Path) -> None:
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    steps = [
        lambda: w.emit(_events(2, 1)[0]),  # a plain event
        lambda: w.emit(_events(3, 1)[0]),  # with a cost row and a new producer
        lambda: w.emit_batch(_events(10, 9)),
        lambda: w.set_status("cancelled"),
        lambda: w.set_status("running"),
        lambda: w.emit(_events(30, 1)[0]),  # a plan with two items
        lambda: w.emit_batch(_events(40, 1)),
    ]
    for step in steps:
        step()
        _cache_is_the_file(w)
    path = w.path
    w.close()
    _walked(path)


def _orphan_plan_row(w: SessionWriter) -> None:
    # a row whose foreign key fails only at COMMIT: the transaction fails after the head's
    # UPDATE, with every statement before it done
    w.conn.execute("PRAGMA defer_foreign_keys = ON")
    w.conn.execute(
        "INSERT INTO plan_items (event_sequence, turn_id, tool_call_id, provider_name, "
        "tool_name, decision, decided_by, content_hash) VALUES (999999,'t','c','p','x','allow',"
        "'rule', zeroblob(16))"
    )


def _boom() -> None:
    raise RuntimeError("injected")


# (what fails, the exception): each rolls back a transaction that had already computed the
# next head; the cache must not keep it
FAILURES = {
    "batch_midway": None,  # a duplicate id in the batch's last event: events partly inserted
    "emit_before_head": ("emit_before_head", _boom, RuntimeError),
    "emit_commit": ("emit_before_head", None, errors.ConstraintViolation),
    "status_before_head": ("status_before_head", _boom, RuntimeError),
    "status_commit": ("status_before_head", None, errors.ConstraintViolation),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_rolled_back_transaction_leaves_no_cache_ahead(sessions_dir: Path, failure: str) -> None:
    """A transaction that fails anywhere (midway through a batch's rows, between the rows and
    the head, or at COMMIT after the head's UPDATE) rolls back, and the next emits and status
    changes extend the chain from what the file holds: the walk proves it."""
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    w.emit_batch(_events(1, 3))
    w.emit(_events(4, 1)[0])
    spec = FAILURES[failure]
    before = chained.read_head(w.conn)
    # a cost row, a plan, and a producer the file has not seen yet (its row is rolled back too)
    batch = [*_events(5, 3), Event("tool_call", Producer("tool", "new", "9"), b"n", id="ev-new")]
    if spec is None:
        with pytest.raises(errors.ConstraintViolation):
            w.emit_batch([*batch, _events(1, 1)[0]])
    else:
        point, action, exc = spec
        with faults.injected({point: action or (lambda: _orphan_plan_row(w))}), pytest.raises(exc):
            if point == "emit_before_head":
                w.emit_batch(batch)
            else:
                w.set_status("completed")
    assert chained.read_head(w.conn) == before  # nothing of it in the file
    assert w.info().status == "running"
    w.emit(_events(9, 1)[0])
    _walked(w.path)  # at once: a later status change would rewrite a stale meta_hash
    w.emit_batch([*_events(10, 4), batch[-1]])  # the new producer after all
    _cache_is_the_file(w)
    w.set_status("completed")
    _cache_is_the_file(w)
    w.set_status("running")
    w.emit(_events(15, 1)[0])
    _cache_is_the_file(w)
    path = w.path
    w.close()
    _walked(path)
    conn = db.open_writer(path)
    try:
        # 11 events, numbered 1-11: the rolled-back transaction's numbers given again
        assert db.row(conn, "SELECT count(*), max(sequence) FROM events") == (11, 11)
    finally:
        conn.close()


def _read_only(w: SessionWriter) -> None:
    # the head's UPDATE itself fails (through the cursor the writer keeps for it)
    w.conn.execute("PRAGMA query_only = ON")


# A plain emit (no derived row) sets only event_count, head_sequence, head_hash and content_hash:
# the columns it leaves must be what the cache hashed. Each failure leaves the cache of a head
# that never reached the file, if kept: the derived counts (a rolled-back batch with a cost row,
# a plan and a new producer) or meta_hash (a rolled-back status change).
PLAIN_FAILURES: dict[str, tuple[str, Any, type[Exception]]] = {
    "plain_before_head": ("emit_before_head", _boom, RuntimeError),
    "plain_head_update": ("emit_before_head", "read_only", errors.ReadOnly),
    "plain_commit": ("emit_before_head", None, errors.ConstraintViolation),
    "derived_commit": ("emit_before_head", None, errors.ConstraintViolation),
    "status_commit": ("status_before_head", None, errors.ConstraintViolation),
}


@pytest.mark.parametrize("failure", sorted(PLAIN_FAILURES))
def test_a_plain_emit_after_a_rolled_back_transaction(sessions_dir: Path, failure: str) -> None:
    """The first emit after a failed transaction is a plain one (the narrow head UPDATE): it
    extends the chain and the head from what the file holds, and the same cursor runs the
    head's UPDATE after one failed in it."""
    w = SessionWriter.create(sessions_dir, profile="p", revision=3)
    w.emit_batch(_events(1, 4))
    point, action, exc = PLAIN_FAILURES[failure]
    before = chained.read_head(w.conn)
    plain = Event("tool_call", TOOL, b"plain", id="ev-plain")
    derived = [*_events(5, 3), Event("tool_call", Producer("tool", "new", "9"), b"n", id="ev-n")]
    if action == "read_only":
        action = lambda: _read_only(w)  # noqa: E731
    with faults.injected({point: action or (lambda: _orphan_plan_row(w))}), pytest.raises(exc):
        if point == "status_before_head":
            w.set_status("completed")
        elif failure.startswith("derived"):
            w.emit_batch(derived)
        else:
            w.emit(plain)
    w.conn.execute("PRAGMA query_only = OFF")
    w.conn.execute("PRAGMA defer_foreign_keys = OFF")
    assert chained.read_head(w.conn) == before  # nothing of it in the file
    for i in range(3):
        w.emit(Event("tool_call", TOOL, b"p", id=f"ev-p{i}"))
        _cache_is_the_file(w)
    _walked(w.path)
    w.set_status("completed")
    w.set_status("running")
    w.emit(plain)
    w.emit_batch(derived)
    w.emit(Event("tool_call", TOOL, b"p", id="ev-last"))
    _cache_is_the_file(w)
    path = w.path
    w.close()
    _walked(path)


_CHILD = textwrap.dedent(
    """
    import os, sys
    from agentdb.jobs import demo
    from agentdb.store import SessionWriter
    w = SessionWriter.create(sys.argv[1], profile="p", revision=3, session_id=sys.argv[2])
    demo._turns(w, demo.MODEL_OLD, 2, seed=2)
    os.environ["AGENTDB_FAULT"] = sys.argv[3]
    if sys.argv[3] == "status_before_head":
        w.set_status("completed")
    else:
        demo._turns(w, demo.MODEL_OLD, 1, seed=5)
    print("not killed")
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["emit_before_head", "status_before_head"])
def test_kill_between_rows_and_head(sessions_dir: Path, point: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTDB_FAULT"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    killed = subprocess.run(
        [sys.executable, "-c", _CHILD, str(sessions_dir), SID, point],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stdout + killed.stderr
    conn = _proven(sessions_dir / f"{SID}.sqlite")
    try:
        head = chain_oracle.rows(conn, "session_chain")[0]
        assert head[5] == 12  # the two turns committed before the kill, nothing after
        status = db.scalar(conn, "SELECT status FROM session_meta")
        assert status == "running"
    finally:
        conn.close()
