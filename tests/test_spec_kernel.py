"""Issue 27's yardstick: a kernel written from the spec alone (``tests/spec_kernel.py``) against
agentdb's files, and agentdb against the kernel's files (docs/design/spec-exact-evidence.md).

What holds today passes; every place where today's agentdb departs from the spec is a strict
xfail carrying the measured behaviour: the build of issue 27 turns each into a pass (and a
strict xfail that starts passing fails the suite, so the markers cannot go stale).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from agentdb import kernel
from agentdb.schema.revisions import REV1_DDL
from agentdb.store import Event, PlanItem, Producer, SessionWriter, Usage
from agentdb.store.model import new_session_id
from tests import spec_kernel as spec
from tests.runner import invoke

MODEL = ("model", "claude", "1.0.0")
KERNEL = ("kernel", "kernel", "1")
COST = ("anthropic", "claude", 100, 50, 0, 0, 0.0125)
PLAN = (("turn-1", "call-1", "anthropic", "shell", "allow", "default-allow"),)


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    d = tmp_path / "sessions"
    d.mkdir(mode=0o700)
    return d


def _kernel_file(sessions: Path) -> str:
    """A session the spec kernel created, extended, ended and resumed (agentdb never touched)."""
    sid = new_session_id()
    conn = spec.open_session(spec.create(sessions, sid))
    spec.append(conn, "message", MODEL, b"hello", cost=COST)
    spec.append(conn, "plan", KERNEL, b"plan", plan=PLAN)
    spec.end(conn, "completed")
    spec.resume(conn)
    conn.close()
    return sid


def _agentdb_file(sessions: Path, revision: int | None = None) -> str:
    """A session agentdb's writer made (at ``revision``; None: today's current one), ended."""
    kw = {} if revision is None else {"revision": revision}
    w = SessionWriter.create(sessions, profile="default", **kw)
    usage = Usage("anthropic", "claude", 100, 50, cost_usd=0.0125)
    w.emit(Event(kind="message", producer=Producer(*MODEL), payload=b"hi", usage=usage))
    item = PlanItem(*PLAN[0])
    w.emit(Event(kind="plan", producer=Producer(*KERNEL), payload=b"p", plan_items=[item]))
    w.set_status("completed")
    w.close()
    return w.session_id


def _check(sessions: Path, sid: str) -> tuple[str, list[str]]:
    ran = invoke(["--sessions-dir", str(sessions), "check", "--json", sid])
    (report,) = ran.json()["sessions"]
    return report["verdict"], [f["code"] for f in report["findings"]]


# ------------------------------------------------------------------------- the kernel itself


def test_the_kernel_ddl_is_the_spec_text_agentdb_calls_revision_1() -> None:
    assert spec.DDL == REV1_DDL


def test_a_kernel_file_is_spec_shaped(sessions: Path) -> None:
    sid = _kernel_file(sessions)
    conn = sqlite3.connect(spec.path_of(sessions, sid))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    query = "SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name != 'sqlite_sequence'"
    stored = [r[0] for r in conn.execute(query)]
    expected = [s.strip() for s in spec.DDL.split(";\n") if s.strip()]
    assert stored == expected  # byte for byte, in the spec's order
    conn.close()


def test_the_kernel_round_trips_its_own_rows(sessions: Path) -> None:
    sid = _kernel_file(sessions)
    conn = spec.open_session(spec.path_of(sessions, sid))
    rows = spec.read_all(conn)
    conn.close()
    assert [len(rows[t]) for t in spec.TABLES] == [2, 1, 1, 1, 2]
    assert rows["session_meta"][0][3:] == ("running", 0, rows["session_meta"][0][5], None)
    assert rows["cost_ledger"][0][1] == rows["events"][0][0]
    assert rows["plan_items"][0][1] == rows["events"][1][0]


def test_the_kernel_refuses_a_newer_user_version(sessions: Path) -> None:
    sid = _kernel_file(sessions)
    path = spec.path_of(sessions, sid)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    with pytest.raises(spec.TooNew, match="user_version 2"):
        spec.open_session(path)


def test_the_kernel_salvages_a_damaged_file_and_keeps_the_original(sessions: Path) -> None:
    sid = _kernel_file(sessions)
    path = spec.path_of(sessions, sid)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name='idx_events_kind'")
    page = root.fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:  # an index page's cells point nowhere: integrity_check fails
        f.seek((page - 1) * 4096 + 8)
        f.write(b"\xff" * 64)
    conn = spec.open_session(path)
    assert Path(str(path) + ".corrupt").exists()
    assert len(spec.read_all(conn)["events"]) == 2
    conn.close()


# ------------------------------------------------------------- agentdb on the kernel's files


@pytest.mark.parametrize("make", [_kernel_file, lambda s: _agentdb_file(s, revision=1)])
def test_agentdb_reads_every_event_of_a_spec_exact_file(
    sessions: Path, make: Callable[[Path], str]
) -> None:
    sid = make(sessions)
    ran = invoke(["--sessions-dir", str(sessions), "events", "--json", sid])
    assert ran.code == 0, ran.err
    assert len(ran.out.splitlines()) == 2


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="issue 27: check says needs_migration (user_version 1 is below revision 3), "
    "findings application_id_zero, needs_migration, interrupted",
)
def test_check_says_ok_on_a_kernel_file(sessions: Path) -> None:
    sid = _kernel_file(sessions)
    verdict, codes = _check(sessions, sid)
    assert verdict == "ok", codes


@pytest.mark.xfail(
    strict=True,
    raises=spec.TooNew,
    reason="issue 27: agentdb's writer open migrates a kernel file to user_version 3, which "
    "the spec kernel then refuses as too new",
)
def test_the_kernel_still_opens_its_file_after_agentdb_opened_it(sessions: Path) -> None:
    sid = _kernel_file(sessions)
    kernel.open_session(sessions, sid).close()
    conn = spec.open_session(spec.path_of(sessions, sid))
    assert len(spec.read_all(conn)["events"]) == 2
    conn.close()


# ------------------------------------------------------ the kernel on files agentdb writes


def test_the_kernel_opens_extends_and_resumes_an_agentdb_revision_1_file(sessions: Path) -> None:
    sid = _agentdb_file(sessions, revision=1)
    conn = spec.open_session(spec.path_of(sessions, sid))
    spec.append(conn, "message", MODEL, b"more", cost=COST)
    spec.resume(conn)
    rows = spec.read_all(conn)
    conn.close()
    assert (len(rows["events"]), len(rows["cost_ledger"])) == (3, 2)
    assert rows["session_meta"][0][3] == "running"


@pytest.mark.xfail(
    strict=True,
    raises=spec.TooNew,
    reason="issue 27: agentdb writes user_version 3; the spec kernel refuses it as too new",
)
def test_the_kernel_opens_a_file_agentdb_writes_today(sessions: Path) -> None:
    sid = _agentdb_file(sessions)
    spec.open_session(spec.path_of(sessions, sid)).close()


def _raw(sessions: Path, sid: str) -> sqlite3.Connection:
    """The file opened without the kernel's version refusal, to measure the departures past it."""
    return sqlite3.connect(spec.path_of(sessions, sid), isolation_level=None)


@pytest.mark.xfail(
    strict=True,
    raises=ValueError,
    reason="issue 27: SELECT * on agentdb's events gives 12 columns, the spec's has 9",
)
def test_the_kernel_reads_an_agentdb_file_with_select_star(sessions: Path) -> None:
    conn = _raw(sessions, _agentdb_file(sessions))
    try:
        spec.read_all(conn)
    finally:
        conn.close()


@pytest.mark.xfail(
    strict=True,
    raises=sqlite3.IntegrityError,
    reason="issue 27: a spec INSERT INTO events fails: NOT NULL constraint failed: "
    "events.content_hash",
)
def test_the_kernel_appends_to_an_agentdb_file(sessions: Path) -> None:
    conn = _raw(sessions, _agentdb_file(sessions))
    try:
        spec.append(conn, "message", MODEL, b"more", cost=COST, plan=())
    finally:
        conn.close()


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="issue 27: after the spec's in-place resume, check says corrupt (meta_hash_mismatch)",
)
def test_check_says_ok_after_the_kernel_resumes_an_agentdb_file(sessions: Path) -> None:
    sid = _agentdb_file(sessions)
    conn = _raw(sessions, sid)
    spec.resume(conn)
    conn.close()
    verdict, codes = _check(sessions, sid)
    assert verdict == "ok", codes


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="issue 27: after the spec's in-place resume, agentdb's kernel open judges the file "
    "damaged and recovers it: the original is renamed .corrupt and replaced",
)
def test_no_recovery_runs_after_the_kernel_resumes_an_agentdb_file(sessions: Path) -> None:
    sid = _agentdb_file(sessions)
    conn = _raw(sessions, sid)
    spec.resume(conn)
    conn.close()
    kernel.open_session(sessions, sid).close()
    assert not list(sessions.glob("*.corrupt*"))


# ------------------------------------- the kernel on what agentdb's jobs make of its files


def _damage_an_index(path: Path) -> None:
    """An index page whose cells point nowhere: integrity_check fails, every table is intact."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name='idx_events_kind'")
    (root,) = page.fetchone()
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * 4096 + 8)
        f.write(b"\xff" * 64)


def _kernel_reads(path: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = spec.open_session(path)
    try:
        spec.append(conn, "tool_call", ("tool", "shell", "1.0"), b"after agentdb")
        spec.end(conn, "completed")
        spec.resume(conn)
        return spec.read_all(conn)
    finally:
        conn.close()


def test_the_kernel_opens_agentdb_s_backup_of_its_file(sessions: Path, tmp_path: Path) -> None:
    sid = _kernel_file(sessions)
    ran = invoke(
        ["--sessions-dir", str(sessions), "backup", "--json", sid, "--to", str(tmp_path / "b")]
    )
    assert ran.code == 0, ran.err
    assert [s["outcome"] for s in ran.json()["sessions"]] == ["copied"]
    assert len(_kernel_reads(tmp_path / "b" / f"{sid}.sqlite")["events"]) == 3


def test_the_kernel_opens_its_file_after_agentdb_restored_it(
    sessions: Path, tmp_path: Path
) -> None:
    sid = _kernel_file(sessions)
    backups = tmp_path / "b"
    assert invoke(["--sessions-dir", str(sessions), "backup", sid, "--to", str(backups)]).code == 0
    conn = spec.open_session(spec.path_of(sessions, sid))
    spec.append(conn, "tool_call", ("tool", "shell", "1.0"), b"lost by the restore")
    conn.close()
    argv = ["restore", "--json", "--force", sid, "--from", str(backups)]
    ran = invoke(["--sessions-dir", str(sessions), *argv])
    assert [s["outcome"] for s in ran.json()["sessions"]] == ["restored"], ran.out + ran.err
    assert len(_kernel_reads(spec.path_of(sessions, sid))["events"]) == 3


@pytest.mark.xfail(
    strict=True,
    raises=spec.TooNew,
    reason="issue 27: agentdb migrate turns a kernel file into user_version 3, which the spec "
    "kernel refuses",
)
def test_the_kernel_opens_its_file_after_agentdb_migrated_it(sessions: Path) -> None:
    sid = _kernel_file(sessions)
    ran = invoke(["--sessions-dir", str(sessions), "migrate", "--json", sid])
    assert [s["outcome"] for s in ran.json()["sessions"]] == ["migrated"]
    _kernel_reads(spec.path_of(sessions, sid))


@pytest.mark.xfail(
    strict=True,
    raises=spec.TooNew,
    reason="issue 27: agentdb recover writes the replacement of a kernel file at user_version "
    "3, which the spec kernel refuses",
)
def test_the_kernel_opens_its_file_after_agentdb_recovered_it(sessions: Path) -> None:
    sid = _kernel_file(sessions)
    _damage_an_index(spec.path_of(sessions, sid))
    ran = invoke(["--sessions-dir", str(sessions), "recover", "--json", sid])
    assert [s["outcome"] for s in ran.json()["sessions"]] == ["recovered"], ran.out
    _kernel_reads(spec.path_of(sessions, sid))
