"""The check of a healthy file at rest on the shared reader (``checks.atrest.ok_at_rest``,
files ATTACHed to one hardened connection per process): it answers ``ok`` exactly when
``check_path`` would, hands every other file to ``check_path``, and keeps the hardened open's
properties (no sidecar created, nothing written, defensive settings, no file's own SQL run)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import apsw
import pytest

from agentdb import db
from agentdb.checks import check_path, check_sessions
from agentdb.checks.atrest import ok_at_rest
from agentdb.schema.revisions import CURRENT_REVISION, KNOWN_REVISION
from tests.support import held_open, make_session, tree_snapshot


def _quick(path: Path, quick: bool = True) -> object:
    return ok_at_rest(os.fspath(path), path.name[:26], db.file_stats(path), quick=quick)


def quick_ok(path: str, sid: str, stats: db.FileStats) -> object:
    return ok_at_rest(path, sid, stats, quick=True)


def _decided(path: Path) -> None:
    """check_path once: it decides the file's schema text for this process (the memo)."""
    check_path(path, path.name[:26], quick=True)


@pytest.mark.slow
@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
def test_healthy_file_is_ok_with_the_same_result(sessions_dir: Path, quick: bool) -> None:
    sid, path = make_session(sessions_dir, turns=2)
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()
    _decided(path)
    before = tree_snapshot(sessions_dir)
    fast = _quick(path, quick)
    assert fast is not None  # the fast path answered
    assert fast == check_path(path, sid, quick=quick)
    assert fast.verdict == "ok" and fast.revision == CURRENT_REVISION  # type: ignore[attr-defined]
    assert tree_snapshot(sessions_dir) == before  # nothing created, nothing changed
    assert sorted(os.listdir(sessions_dir)) == [path.name]


@pytest.mark.slow
def test_undecided_schema_text_goes_to_check_path(sessions_dir: Path) -> None:
    """A schema text not decided in this process yet (another writer's, migrated) is never
    taken as matching: check_path decides it, and the next file with that text is fast."""
    _, path = make_session(sessions_dir, turns=1)
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_schema SET sql = sql || ' -- formatted by another writer' "
        "WHERE name = 'producers'"
    )
    conn.execute("PRAGMA writable_schema=OFF")
    conn.close()
    assert _quick(path) is None
    _decided(path)
    assert _quick(path) is not None


def _edit(path: Path, sql: str) -> None:
    conn = apsw.Connection(str(path))
    conn.execute(sql)
    conn.close()
    for s in ("-wal", "-shm"):
        assert not Path(f"{path}{s}").exists()


CASES = {
    "trigger": "CREATE TRIGGER t AFTER INSERT ON producers BEGIN SELECT 1; END",
    "view": "CREATE VIEW v AS SELECT 1",
    "invalid_text_meta": "UPDATE session_meta SET profile = CAST(x'ff' AS TEXT)",
    "invalid_text_producers": "UPDATE producers SET version = CAST(x'c328' AS TEXT)",
    "running": "UPDATE session_meta SET status = 'running', ended_at = NULL",
    "meta_multiple": "INSERT INTO session_meta SELECT '01ARZ3NDEKTSV4RRFFQ69G5FAV', "
    "parent_session_id, profile, status, depth, started_at, ended_at FROM session_meta",
    "meta_missing": "DELETE FROM session_meta",
    "bad_status": "PRAGMA ignore_check_constraints=ON; UPDATE session_meta SET status = 'weird'",
    "application_id_zero": "PRAGMA application_id = 0",
    "too_new": f"PRAGMA user_version = {KNOWN_REVISION + 1}",
    "needs_migration": f"PRAGMA user_version = {CURRENT_REVISION - 1}",
    "extra_table": "CREATE TABLE extra (x)",
}


@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_anything_not_plainly_healthy_goes_to_check_path(
    sessions_dir: Path, case: str, quick: bool
) -> None:
    sid, path = make_session(sessions_dir, turns=2)
    _decided(path)
    assert _quick(path, quick) is not None
    _edit(path, "PRAGMA journal_mode=DELETE")
    _edit(path, CASES[case])
    assert _quick(path, quick) is None
    # and the stream (which tries the fast path first) reports what check_path reports
    [got] = check_sessions(sessions_dir, quick=quick).sessions
    want = check_path(path, sid, quick=quick)
    assert (got.verdict, [f.code for f in got.findings]) == (
        want.verdict,
        [f.code for f in want.findings],
    )
    assert want.findings  # each case is a finding of check_path's (some only informative)


# Damage in the middle of a current-revision file: a quick check proves the tail and the
# counts (design §7), so a deleted row is no case here (quick sees it: count_mismatch) and
# revision 2's missing_event is revision 3's unbound_rows, which only comes with a deletion.
FULL_CASES = {
    "row_hash_mismatch": "UPDATE cost_ledger SET cost_usd = cost_usd + 1 WHERE sequence = "
    "(SELECT min(sequence) FROM cost_ledger)",
    "chain_break": "UPDATE events SET prev_hash = zeroblob(16) WHERE sequence = 2",
    "content_hash_mismatch": "UPDATE events SET payload = CAST('{}' AS BLOB) WHERE sequence = 2",
    "bad_kind": "PRAGMA ignore_check_constraints=ON; UPDATE events SET kind = 'odd' "
    "WHERE sequence = 1",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(FULL_CASES))
def test_what_only_a_full_check_sees_goes_to_check_path(sessions_dir: Path, case: str) -> None:
    """A quick check does not look (its fast answer is check_path's quick answer); a full
    one hands the file to check_path, which reports it."""
    sid, path = make_session(sessions_dir, turns=2)
    _decided(path)
    _edit(path, "PRAGMA journal_mode=DELETE")
    _edit(path, FULL_CASES[case])
    assert _quick(path, True) == check_path(path, sid, quick=True)
    assert _quick(path, False) is None
    [got] = check_sessions(sessions_dir, quick=False).sessions
    assert case in {f.code for f in got.findings}
    assert [f.code for f in got.findings] == [
        f.code for f in check_path(path, sid, quick=False).findings
    ]


@pytest.mark.slow
def test_a_child_whose_depth_disagrees_with_its_parent(sessions_dir: Path) -> None:
    parent, ppath = make_session(sessions_dir, turns=1, depth=0)
    child, cpath = make_session(sessions_dir, turns=1, parent=parent, depth=1)
    _decided(cpath)
    assert _quick(cpath, False) is not None  # depth 1 under a parent of depth 0: fine
    _edit(ppath, "PRAGMA journal_mode=DELETE")
    _edit(ppath, "UPDATE session_meta SET depth = 3")
    assert _quick(cpath, False) is None
    got = {r.session_id: r for r in check_sessions(sessions_dir).sessions}
    assert "depth_mismatch" in {f.code for f in got[child].findings}


def test_damaged_page_goes_to_check_path(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=4)
    _decided(path)
    data = bytearray(path.read_bytes())
    page = 4096
    n = len(data) // page
    assert n >= 4
    data[(n - 1) * page : n * page] = b"\xa5" * page  # a b-tree page overwritten
    path.write_bytes(bytes(data))
    assert _quick(path) is None
    [got] = check_sessions(sessions_dir, quick=True).sessions
    assert got.verdict == check_path(path, sid, quick=True).verdict != "ok"


@pytest.mark.parametrize("how", ["readable", "writable", "hard_link", "wal", "journal", "symlink"])
def test_entry_and_sidecars_go_to_check_path(sessions_dir: Path, tmp_path: Path, how: str) -> None:
    sid, path = make_session(sessions_dir, turns=1)
    _decided(path)
    if how == "readable":
        os.chmod(path, 0o640)
    elif how == "writable":
        os.chmod(path, 0o620)
    elif how == "hard_link":
        os.link(path, tmp_path / "other-name")
    elif how == "wal":
        Path(f"{path}-wal").write_bytes(b"")
        os.chmod(f"{path}-wal", 0o600)
    elif how == "journal":
        Path(f"{path}-journal").write_bytes(b"")
    else:
        target = tmp_path / "real.sqlite"
        path.rename(target)
        path.symlink_to(target)
    assert _quick(path) is None
    [got] = check_sessions(sessions_dir, quick=True).sessions
    want = check_path(path, sid, quick=True)
    assert [f.code for f in got.findings] == [f.code for f in want.findings]


def test_a_file_changed_after_its_stat_pass_goes_to_check_path(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=1)
    _decided(path)
    stats = db.file_stats(path)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # "written" meanwhile
    assert quick_ok(os.fspath(path), sid, stats) is None
    # replaced by another file under the same name: the descriptor is not the judged file
    stats = db.file_stats(path)
    copy = path.with_name("copy")
    copy.write_bytes(path.read_bytes())
    os.chmod(copy, 0o600)
    copy.replace(path)
    assert quick_ok(os.fspath(path), sid, stats) is None
    assert quick_ok(os.fspath(path), sid, db.file_stats(path)) is not None


@pytest.mark.slow
def test_a_file_another_process_has_open_goes_to_check_path(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=1)
    _decided(path)
    stats = db.file_stats(path)  # taken before the other process opened it: no sidecars
    with held_open(path) as pid:
        assert quick_ok(os.fspath(path), sid, stats) is None  # the probe sees the holder
        [got] = check_sessions(sessions_dir, quick=True).sessions
        assert got.live == pid


@pytest.mark.slow
def test_a_live_writer_beside_the_checks(sessions_dir: Path) -> None:
    """A writer committing in another process: every check of it goes to check_path (its
    WAL and lock), which reports it live; a healthy file beside it is still fast."""
    from tests.support import WriterProcess

    sid, path = make_session(sessions_dir, turns=1, status="running")
    _, quiet = make_session(sessions_dir, turns=1)
    _decided(quiet)
    w = WriterProcess(sessions_dir, sid)
    try:
        w.wait_for_commits(3)
        assert _quick(path) is None
        assert _quick(quiet) is not None
        report = check_sessions(sessions_dir, quick=True)
        by_id = {r.session_id: r for r in report.sessions}
        assert by_id[sid].live == w.proc.pid
        assert by_id[quiet.name[:26]].verdict == "ok"
    finally:
        w.stop()


def test_shared_reader_is_hardened_and_reads_only(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir, turns=1)
    before = tree_snapshot(sessions_dir)
    with db.attached_immutable(os.fspath(path)) as conn:
        assert conn.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, -1) == 1
        assert conn.config(apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, -1) == 0
        assert conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, -1) == 0
        assert conn.config(apsw.SQLITE_DBCONFIG_ENABLE_VIEW, -1) == 0
        assert conn.execute("PRAGMA s.mmap_size").fetchall() == [(0,)]
        assert conn.execute("PRAGMA cell_size_check").fetchall() == [(1,)]
        assert conn.limit(apsw.SQLITE_LIMIT_LENGTH, -1) == db.MAX_VALUE
        assert conn.execute("SELECT count(*) FROM session_meta").fetchall() == [(1,)]
        with pytest.raises(apsw.ReadOnlyError):
            conn.execute("UPDATE session_meta SET profile = 'x'")
        with pytest.raises(apsw.Error):
            conn.execute("PRAGMA s.journal_mode=DELETE").fetchall()
            conn.execute("CREATE TABLE s.more (x)")
    assert tree_snapshot(sessions_dir) == before


@pytest.mark.slow
def test_a_statement_left_open_does_not_break_the_next_file(sessions_dir: Path) -> None:
    _, a = make_session(sessions_dir, turns=1)
    _, b = make_session(sessions_dir, turns=1)
    first = db.shared_reader()
    with db.attached_immutable(os.fspath(a)) as conn:
        cur = conn.execute("SELECT * FROM events")
        next(cur)  # left mid-iteration: DETACH fails, the reader is made anew
    assert db.shared_reader() is not first
    with db.attached_immutable(os.fspath(b)) as conn:
        assert conn.execute("SELECT count(*) FROM session_meta").fetchall() == [(1,)]


@pytest.mark.slow
def test_a_forked_child_makes_its_own_reader(sessions_dir: Path) -> None:
    """Checked with two processes (forked workers) and with one: the same results."""
    for _ in range(60):  # above the pool threshold
        make_session(sessions_dir, turns=1)
    one = check_sessions(sessions_dir, quick=True, jobs=1)
    two = check_sessions(sessions_dir, quick=True, jobs=2)
    assert [(r.session_id, r.verdict) for r in one.sessions] == [
        (r.session_id, r.verdict) for r in two.sessions
    ]
    assert {r.verdict for r in one.sessions} == {"ok"}


@pytest.mark.slow
def test_no_shared_reader_state_crosses_into_a_child(sessions_dir: Path) -> None:
    """The child of a fork never uses its parent's connection."""
    _, path = make_session(sessions_dir, turns=1)
    parent = db.shared_reader()
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[2]); from agentdb import db; "
        "a = db.shared_reader(); pid = os.fork()\n"
        "if pid == 0:\n"
        "    b = db.shared_reader(); os._exit(0 if b is not a else 3)\n"
        "_, st = os.waitpid(pid, 0); sys.exit(os.waitstatus_to_exitcode(st))"
    )
    src = Path(__file__).resolve().parents[1] / "src"
    r = subprocess.run([sys.executable, "-c", code, os.fspath(path), os.fspath(src)], check=False)
    assert r.returncode == 0
    assert db.shared_reader() is parent


NEIGHBOUR_CASES = {
    "invalid_text": CASES["invalid_text_producers"],
    "trigger": CASES["trigger"],
    "meta_id_mismatch": "UPDATE session_meta SET session_id = '01ARZ3NDEKTSV4RRFFQ69G5FAV'",
    "meta_multiple": CASES["meta_multiple"],
    "damaged_page": "",
}


def _codes(r: object) -> tuple[str, str, list[str]]:
    return (r.session_id, r.verdict, [f.code for f in r.findings])  # type: ignore[attr-defined]


def _row(n: int, sessions_dir: Path) -> list[tuple[str, Path]]:
    made = [make_session(sessions_dir, turns=2) for _ in range(n)]
    for _, p in made:
        _edit(p, "PRAGMA journal_mode=DELETE")
    _decided(made[0][1])
    return sorted(made)


def _damage_last_page(path: Path) -> None:
    data = bytearray(path.read_bytes())
    n = len(data) // 4096
    data[(n - 1) * 4096 : n * 4096] = b"\xa5" * 4096
    path.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
@pytest.mark.parametrize("case", sorted(NEIGHBOUR_CASES))
def test_a_bad_file_between_healthy_neighbours(sessions_dir: Path, case: str, quick: bool) -> None:
    """One file in the middle of a run of healthy files has a problem: the stream, which
    checks the healthy ones on the shared reader, gives every file check_path's verdict and
    findings, the bad one included, in file-name order."""
    row = _row(7, sessions_dir)
    sid, middle = row[3]
    if case == "damaged_page":
        _damage_last_page(middle)
    else:
        _edit(middle, NEIGHBOUR_CASES[case])
    got = [_codes(r) for r in check_sessions(sessions_dir, quick=quick).sessions]
    want = [_codes(check_path(p, s, quick=quick)) for s, p in row]
    assert got == want
    assert [g[0] for g in got] == sorted(s for s, _ in row)
    assert [g[1] == "ok" for g in got] == [i != 3 for i in range(7)]


_READING = """
import sys, time, apsw
c = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)
c.execute("BEGIN")
c.execute("SELECT count(*) FROM sqlite_schema").fetchall()
print("ready", flush=True)
time.sleep(600)
"""


@contextmanager
def _reading(path: Path) -> Iterator[int]:
    """Another process inside a read transaction of ``path`` (a rollback-journal file: an
    idle connection to one holds no lock, a reading one holds SQLite's shared lock)."""
    p = subprocess.Popen([sys.executable, "-c", _READING, str(path)], stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        yield p.pid
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_a_file_that_becomes_live_while_its_neighbours_are_checked(sessions_dir: Path) -> None:
    """A file nobody held when the run began is read by another process from just before its
    turn: the stream reports it live (check_path's answer), its neighbours ok."""
    from agentdb.checks.run import CheckStream

    row = _row(6, sessions_dir)
    sid, middle = row[3]
    with ExitStack() as stack:
        pids: list[int] = []

        def progress(done: int, total: int) -> None:
            if done == 3:  # the next file checked is row[3]
                pids.append(stack.enter_context(_reading(middle)))

        results = list(CheckStream(sessions_dir, quick=True, progress=progress).results())
        assert pids and results[3].live == pids[0]
        assert _codes(results[3]) == _codes(check_path(middle, sid, quick=True))
    assert [r.verdict for i, r in enumerate(results) if i != 3] == ["ok"] * 5
    assert [r.session_id for r in results] == [s for s, _ in row]
