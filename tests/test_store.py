"""The writer and reader API on real files, with real processes where concurrency matters."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentdb import db, errors
from agentdb.schema import enums
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.store import (
    Event,
    PlanItem,
    Producer,
    SessionReader,
    SessionWriter,
    Usage,
)
from tests.rows import all_rows
from tests.support import SRC, WriterProcess, make_session

MODEL = Producer("model", "anthropic", "1.0")
TOOL = Producer("tool", "shell", "2.0")
KERNEL = Producer("kernel", "kernel", "1")


def _usage(cost: float = 0.5) -> Usage:
    return Usage("anthropic", "claude", 100, 20, cost, cache_write_tokens=3, cache_read_tokens=4)


@pytest.mark.slow
def test_create_under_umask_000_is_owner_only(tmp_path: Path) -> None:
    script = (
        "import os, sys; sys.path.insert(0, sys.argv[2]); os.umask(0)\n"
        "from pathlib import Path\nfrom agentdb.store import SessionWriter\n"
        "w = SessionWriter.create(Path(sys.argv[1]), profile='p'); print(w.path)\n"
        "w.emit.__self__  # keep open while we look\n"
        "import agentdb.store as s\n"
        "w.emit(s.Event('tool_call', s.Producer('tool','t','1'), b'x'))\n"
        "print(sorted(os.listdir(sys.argv[1])))\n"
        "for n in os.listdir(sys.argv[1]):\n"
        "    print(n, oct(os.stat(os.path.join(sys.argv[1], n)).st_mode & 0o777))\n"
    )
    d = tmp_path / "a" / "b" / "sessions"
    out = subprocess.run(
        [sys.executable, "-c", script, str(d), str(SRC)], capture_output=True, text=True, check=True
    ).stdout
    modes = dict(line.split() for line in out.splitlines()[2:])
    assert set(modes.values()) == {"0o600"}, out  # db, -wal and -shm
    assert len(modes) == 3
    for p in (tmp_path / "a", tmp_path / "a" / "b", d):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o700


def test_create_is_exclusive(sessions_dir: Path) -> None:
    w = SessionWriter.create(sessions_dir, profile="p")
    w.close()
    with pytest.raises(errors.SessionExists):
        SessionWriter.create(sessions_dir, profile="p", session_id=w.session_id)


def test_writer_pragmas(sessions_dir: Path) -> None:
    with SessionWriter.create(sessions_dir, profile="p") as w:
        assert db.pragma(w.conn, "journal_mode") == "wal"
        assert db.pragma(w.conn, "synchronous") == 2  # FULL
        assert db.pragma(w.conn, "foreign_keys") == 1
        assert db.pragma(w.conn, "user_version") == CURRENT_REVISION
        assert db.pragma(w.conn, "busy_timeout") == db.BUSY_TIMEOUT_MS


def test_emit_keeps_derived_tables(sessions_dir: Path) -> None:
    with SessionWriter.create(sessions_dir, profile="p") as w:
        s1 = w.emit(Event("message", MODEL, b"m1", usage=_usage(0.25)))
        s2 = w.emit(
            Event(
                "plan",
                KERNEL,
                b"plan",
                plan_items=[
                    PlanItem("t1", "c1", "shell", "bash", "deny", "no-net"),
                    PlanItem("t1", "c2", "shell", "cat", "allow", "read-only"),
                ],
            )
        )
        s3 = w.emit(Event("message", MODEL, b"m2", usage=_usage(0.5)))
        assert (s1, s2, s3) == (1, 2, 3)
        rows = all_rows(w.path)
    # the spec's columns (from revision 3 each row is followed by its content_hash)
    assert [r[:4] for r in rows["producers"]] == [
        ("model", "anthropic", "1.0", 1),
        ("kernel", "kernel", "1", 2),
    ]
    assert [r[1] for r in rows["cost_ledger"]] == [1, 3]
    assert rows["cost_ledger"][0][2:9] == ("anthropic", "claude", 100, 20, 3, 4, 0.25)
    assert [(r[1], r[6], r[7]) for r in rows["plan_items"]] == [
        (2, "deny", "no-net"),
        (2, "allow", "read-only"),
    ]
    with SessionReader.open(w.path.parent, w.session_id) as r:
        assert r.info().cost_usd == pytest.approx(0.75)
        assert r.plan_decisions() == [("no-net", "deny", 1), ("read-only", "allow", 1)]


@pytest.mark.parametrize(
    "event,exc",
    [
        (Event("KIND_UNSPECIFIED", TOOL, b""), errors.InvalidKind),
        (Event("note", TOOL, b""), errors.InvalidKind),
        (Event("tool_call", Producer("plugin", "x", "1"), b""), errors.InvalidProducer),
        (Event("tool_call", Producer("tool", "", "1"), b""), errors.InvalidProducer),
        (Event("plan", TOOL, b""), errors.InvalidProducer),
        (Event("tool_call", KERNEL, b""), errors.InvalidProducer),
        (Event("message", MODEL, b""), errors.InvalidInput),  # no usage
        (Event("tool_call", TOOL, b"", usage=_usage()), errors.InvalidInput),
        (
            Event("plan", KERNEL, b"", plan_items=[PlanItem("t", "c", "p", "n", "maybe", "r")]),
            errors.InvalidInput,
        ),
        (Event("tool_call", TOOL, "text"), errors.InvalidInput),  # type: ignore[arg-type]
        # Costs that would poison every SUM(cost_usd) and every JSON report, and counts that
        # SQLite cannot hold: refused, never written.
        (Event("message", MODEL, b"", usage=_usage(float("inf"))), errors.InvalidInput),
        (Event("message", MODEL, b"", usage=_usage(float("nan"))), errors.InvalidInput),
        (Event("message", MODEL, b"", usage=_usage(-0.01)), errors.InvalidInput),
        (
            Event("message", MODEL, b"", usage=Usage("p", "m", 1 << 63, 1, 0.1)),
            errors.InvalidInput,
        ),
    ],
)
def test_invalid_input_raises_and_writes_nothing(
    sessions_dir: Path, event: Event, exc: type[Exception]
) -> None:
    with SessionWriter.create(sessions_dir, profile="p") as w:
        w.emit(Event("tool_call", TOOL, b"ok"))
        before = all_rows(w.path)
        with pytest.raises(exc):
            w.emit_batch([Event("tool_call", TOOL, b"fine"), event])
        assert all_rows(w.path) == before
        assert w.emit(Event("tool_call", TOOL, b"next")) == 2


def test_batch_is_one_transaction(sessions_dir: Path) -> None:
    with SessionWriter.create(sessions_dir, profile="p") as w:
        w.emit(Event("tool_call", TOOL, b"a", id="dup"))
        before = all_rows(w.path)
        with pytest.raises(errors.AgentdbError):  # UNIQUE(id) fails mid-batch
            w.emit_batch([Event("tool_call", TOOL, b"b"), Event("tool_call", TOOL, b"c", id="dup")])
        assert all_rows(w.path) == before
        assert w.emit_batch([Event("tool_call", TOOL, b"d"), Event("tool_call", TOOL, b"e")]) == [
            2,
            3,
        ]


def test_status_transitions(sessions_dir: Path) -> None:
    with SessionWriter.create(sessions_dir, profile="p") as w:
        assert w.info().status == "running" and w.info().ended_at is None
        w.set_status("completed", at="2026-01-01T00:00:00.000Z")
        assert w.info().ended_at == "2026-01-01T00:00:00.000Z"
        w.set_status("running")  # ResumeSession
        assert w.info().ended_at is None
        w.set_status("cancelled")
        with pytest.raises(errors.InvalidTransition):
            w.set_status("completed")
        w.set_status("running")
        w.set_status("error_max_turns")
        for s in enums.STATUSES:
            with pytest.raises(errors.InvalidTransition):
                w.set_status(s)
        with pytest.raises(errors.InvalidStatus):
            SessionWriter.create(sessions_dir, profile="p").set_status("paused")


@pytest.mark.slow
def test_terminal_statuses_never_reopen(sessions_dir: Path) -> None:
    for status in sorted(enums.TERMINAL_STATUSES):
        with SessionWriter.create(sessions_dir, profile="p") as w:
            w.set_status(status)
            with pytest.raises(errors.InvalidTransition):
                w.set_status("running")
            assert w.info().status == status


def test_open_refuses_mismatched_session_meta(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    c = apsw.Connection(str(path))
    c.execute("UPDATE session_meta SET session_id = '01ARZ3NDEKTSV4RRFFQ69G5FAV'")
    c.close()
    with pytest.raises(errors.ForeignFile, match="session_meta names session"):
        SessionWriter.open(sessions_dir, sid)


@pytest.mark.slow
def test_open_runs_integrity_check_and_calls_the_recovery_hook(sessions_dir: Path) -> None:
    from agentdb.jobs.demo import damage_page

    sid, path = make_session(sessions_dir, turns=30)
    damage_page(path, table="events", nth_leaf=1, fill=b"\xff")
    with pytest.raises(errors.Corrupt, match="agentdb recover"):
        SessionWriter.open(sessions_dir, sid)
    calls = []

    def hook(p: Path, s: str) -> None:
        calls.append((p, s))
        # a stand-in recovery: put a healthy session in place (the real one is salvage's job)
        os.rename(p, p.with_name(p.name + ".corrupt"))
        make_session(sessions_dir, session_id=s)

    w = SessionWriter.open(sessions_dir, sid, recover=hook)
    w.close()
    assert calls == [(path, sid)]


payloads = st.binary(max_size=3000)
kinds = st.sampled_from([k for k in enums.KINDS if k not in ("plan", "apply", "message")])


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.lists(st.tuples(kinds, payloads, st.sampled_from(["1", "v1", "2"])), max_size=6),
        max_size=8,
    )
)
def test_any_emitted_sequence_reads_back_identically(
    sessions_dir: Path, batches: list[list[tuple[str, bytes, str]]]
) -> None:
    emitted = []
    with SessionWriter.create(sessions_dir, profile="p") as w:
        for batch in batches:
            evs = [Event(k, TOOL, p, schema_version=v) for k, p, v in batch]
            seqs = w.emit_batch(evs)
            emitted.extend(zip(seqs, evs, strict=True))
        path = w.path
    with SessionReader(path) as r:
        got = list(r.iter_events(page_rows=7, payload_cap=10_000))
    assert [e.sequence for e in got] == list(range(1, len(emitted) + 1))
    for (seq, ev), row in zip(emitted, got, strict=True):
        assert (row.sequence, row.kind, row.payload, row.schema_version) == (
            seq,
            ev.kind,
            ev.payload,
            ev.schema_version,
        )
        assert not row.truncated
    # kind filter and cursor
    with SessionReader(path) as r:
        if emitted:
            k = emitted[0][1].kind
            want = [s for s, e in emitted if e.kind == k and s > 1]
            assert [e.sequence for e in r.iter_events(after=1, kinds=[k])] == want


def test_reads_are_capped(sessions_dir: Path) -> None:
    with SessionWriter.create(sessions_dir, profile="p") as w:
        w.emit(Event("tool_result", TOOL, b"y" * 100_000))
        w.emit_batch([Event("tool_call", TOOL, b"z") for _ in range(30)])
        path = w.path
    with SessionReader(path) as r:
        page = r.events(limit=10, payload_cap=1000)
        assert len(page.rows) == 10 and page.more
        first = page.rows[0]
        assert first.payload == b"y" * 1000 and first.payload_length == 100_000 and first.truncated


@pytest.mark.slow
def test_concurrent_reader_while_writer_commits(sessions_dir: Path) -> None:
    """A reader in this process sees consistent, growing prefixes while a writer process runs."""
    sid, path = make_session(sessions_dir, status=None)
    writer = WriterProcess(sessions_dir, sid)
    seen: list[int] = []
    try:
        for i in range(60):
            if i == 30:  # growth by then is the writer's report, not a guess about its speed
                while not writer.seen or writer.seen[-1] <= seen[0]:
                    writer.wait_for_commits(1)
            with SessionReader(path) as r:
                seqs = [e.sequence for e in r.iter_events(payload_cap=16)]
                assert seqs == list(range(1, len(seqs) + 1))  # no gap, no reordering
                seen.append(len(seqs))
    finally:
        committed, err = writer.stop()
    assert err == ""
    assert seen == sorted(seen) and seen[-1] > seen[0]
    rows = all_rows(path)
    assert {r[0] for r in rows["events"]} >= set(committed)
