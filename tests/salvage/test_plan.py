"""recover as plan → execute: the plan changes nothing in the sessions directory, its scratch
replacement lives outside it and never stays behind, execute re-checks what the plan read;
verification levels and counts equal what the replacement holds; the recovery log round-trips;
no function in salvage/ is longer than 60 lines. (A copy that structural validation rejects
never winning a merge: tests/fuzz/test_overflow_merge.py.)"""

from __future__ import annotations

import ast
import os
import stat
import tracemalloc
from pathlib import Path

import pytest
import ulid

from agentdb import faults, fsutil, locks, paths, recoverylog, salvage
from agentdb.salvage import RecoveryOutcome, replacement, scratch
from agentdb.store import Event, SessionWriter
from tests.rows import page_size, row_sets, write_at
from tests.salvage import corpus
from tests.support import make_session

SALVAGE = Path(salvage.__file__).parent
LEVELS = ("verified", "structural_only", "unverified")


def scratch_dirs() -> list[Path]:
    base = paths.agentdb_cache_dir() / "tmp"
    return (
        [p for p in base.iterdir() if p.name.startswith("agentdb-recover-")]
        if base.exists()
        else []
    )


def listing(d: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.iterdir())}


@pytest.mark.slow
def test_no_function_in_salvage_is_longer_than_60_lines() -> None:
    long = []
    for path in sorted(SALVAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 60:
                    long.append(f"{path.name}:{node.name} {n} lines")
    assert long == []


@pytest.mark.slow
def test_one_class_per_name_in_salvage() -> None:
    seen: dict[str, str] = {}
    twins = []
    for path in sorted(SALVAGE.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                if node.name in seen:
                    twins.append(f"{node.name}: {seen[node.name]} and {path.name}")
                seen[node.name] = path.name
    assert twins == []


@pytest.mark.slow
def test_no_private_name_is_imported_across_salvage_modules() -> None:
    crossing = []
    for path in sorted(SALVAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentdb"):
                crossing += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert crossing == []


@pytest.mark.slow
def test_plan_changes_nothing_and_execute_swaps(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    log = sessions_dir.parent / "recovery.log"
    before = listing(sessions_dir)
    with locks.hold(path) as fd, fsutil.private_workdir("agentdb-recover-") as work:
        plan = salvage.plan(path, sid, fd, work, log)
        assert plan.outcome.outcome == "recovered"
        assert listing(sessions_dir) == before  # the plan wrote nothing beside the session
        scratch = plan.scratch
        assert scratch is not None and work in scratch.parents
        assert sessions_dir not in scratch.parents
        assert stat.S_IMODE(scratch.stat().st_mode) == 0o600
        assert stat.S_IMODE(work.stat().st_mode) == 0o700
        counts = replacement.table_counts(scratch)
        out = salvage.execute(plan, log)
    assert out.outcome == "recovered"
    assert out.corrupt_path and Path(out.corrupt_path).exists()
    assert replacement.table_counts(path) == counts
    assert not scratch.exists()


@pytest.mark.slow
def test_execute_refuses_a_file_changed_since_the_plan(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    log = sessions_dir.parent / "recovery.log"
    with locks.hold(path) as fd, fsutil.private_workdir("agentdb-recover-") as work:
        plan = salvage.plan(path, sid, fd, work, log)
        assert plan.outcome.outcome == "recovered"
        with open(path, "ab") as f:  # another program appends behind SQLite's locks
            f.write(b"\0" * 512)
        changed = path.read_bytes()
        out = salvage.execute(plan, log)
    assert out.outcome == "skipped_live", out.notes
    assert path.read_bytes() == changed
    assert not any(p.name.endswith(".corrupt") for p in sessions_dir.iterdir())
    assert not log.exists()


@pytest.mark.slow
def test_scratch_is_removed_after_dry_run_and_after_ctrl_c(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    original = path.read_bytes()
    out = salvage.recover_session(sessions_dir, sid, dry_run=True)
    assert out.outcome == "recovered"
    assert scratch_dirs() == []

    def interrupt() -> None:
        raise KeyboardInterrupt

    with faults.injected({"after_salvage": interrupt}):
        report = salvage.recover_sessions(sessions_dir, [sid])
    assert report.interrupted
    assert scratch_dirs() == []
    assert path.read_bytes() == original
    leftovers = [p.name for p in sessions_dir.iterdir() if paths.JOB_FILE_RE.fullmatch(p.name)]
    assert leftovers == [] or salvage.recover_session(sessions_dir, sid).outcome == "recovered"


@pytest.mark.slow
@pytest.mark.parametrize("revision", [1, 2])
def test_levels_and_counts_equal_the_replacement(sessions_dir: Path, revision: int) -> None:
    sid, path = corpus.build_base(sessions_dir, revision=revision)
    corpus.d_zeroed_page(path)
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    held = replacement.table_counts(path)
    for table, got in out.tables.items():
        assert got["salvaged"] == held[table], table
        assert sum(got[k] for k in LEVELS) == got["salvaged"], (table, got)
        assert all(got[k] >= 0 for k in LEVELS)
    events = out.tables["events"]
    if revision == 2:  # every event kept is hash-verified
        assert events["verified"] == events["salvaged"] and events["unverified"] == 0
    else:  # a revision-1 row is at best structurally valid
        assert events["verified"] == 0 and events["structural_only"] == events["salvaged"]
    line = recoverylog.entries_for(sessions_dir.parent / "recovery.log", sid)[-1]
    assert line["event"] == "outcome" and line["tables"] == out.tables


@pytest.mark.slow
def test_log_line_round_trips(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=20)
    corpus.d_zeroed_page(path)
    out = salvage.recover_session(sessions_dir, sid)
    line = recoverylog.entries_for(sessions_dir.parent / "recovery.log", sid)[-1]
    back = RecoveryOutcome.from_log(line)
    assert back.to_log("outcome") == out.to_log("outcome")
    assert {k: v for k, v in line.items() if k != "time"} == out.to_log("outcome")
    assert RecoveryOutcome.from_log({"outcome": "nonsense", "tables": 3}).outcome == "failed"


def big_events_session(sessions_dir: Path, n: int) -> tuple[str, Path]:
    w = SessionWriter.create(sessions_dir, profile="coder")
    w.emit_batch([Event("tool_result", corpus.BIG, os.urandom(10_000) * 2) for _ in range(n)])
    w.close()
    return w.session_id, w.path


@pytest.mark.slow
def test_values_stream_into_the_scratch_database(
    sessions_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no memory budget every long value goes to the scratch database as it is found: the
    salvage's Python allocations stay far below the payloads' total, and the replacement holds
    every salvaged row byte for byte."""
    monkeypatch.setattr(scratch, "MEMORY_BUDGET", 0)
    sid, path = big_events_session(sessions_dir, 300)  # 6 MB of payloads
    original = row_sets(path)
    corpus.d_zeroed_page(path)
    tracemalloc.start()
    try:
        out = salvage.recover_session(sessions_dir, sid)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.outcome == "recovered", out.notes
    got = row_sets(path)
    assert got["events"] <= original["events"]
    assert out.tables["events"]["salvaged"] == len(got["events"]) >= 290
    assert out.tables["events"]["verified"] == len(got["events"])
    assert peak < 3 << 20, f"{peak} bytes traced at peak"


def test_the_scratch_database_is_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "MEMORY_BUDGET", 0)
    os.umask(0o022)
    store = scratch.Scratch(tmp_path / "scratch.sqlite")
    try:
        row = store.keep((1, b"x" * 10_000, "y" * 5000, 3))
        assert isinstance(row[1], scratch.Spilled) and isinstance(row[2], scratch.Spilled)
        assert row == (1, b"x" * 10_000, "y" * 5000, 3)  # compares by value
        assert store.resolve(row) == (1, b"x" * 10_000, "y" * 5000, 3)
        assert stat.S_IMODE((tmp_path / "scratch.sqlite").stat().st_mode) == 0o600
    finally:
        store.close()


@pytest.mark.slow
def test_rows_from_dot_recover_stream_too(
    sessions_dir: Path, monkeypatch: pytest.MonkeyPatch, capable_shell: Path
) -> None:
    """When SQLite's .recover runs (a leaf whose header does not parse), its rows' long values
    go to the scratch database as they are collected, like the other engines'."""
    monkeypatch.setattr(scratch, "MEMORY_BUDGET", 0)
    monkeypatch.setenv("AGENTDB_SQLITE3", str(capable_shell))
    sid, path = big_events_session(sessions_dir, 300)
    original = row_sets(path)
    leaf = corpus.pages_of(path, "events", "leaf")[5]
    ps = page_size(path)
    write_at(path, (leaf - 1) * ps + 3, b"\xff\xff")  # cell count past the page: does not parse
    tracemalloc.start()
    try:
        out = salvage.recover_session(sessions_dir, sid)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.outcome == "recovered", out.notes
    assert "sqlite-recover" in out.found_by, out.found_by
    got = row_sets(path)
    assert got["events"] <= original["events"]
    assert out.tables["events"]["salvaged"] == len(got["events"]) >= 295
    assert peak < 3 << 20, f"{peak} bytes traced at peak"


def test_another_sessions_file_under_this_name_is_refused(sessions_dir: Path) -> None:
    """A session's file copied (or renamed) under another id: its session_meta names a valid
    session that is not this one. check calls it foreign; recover refuses it (dry run too) and
    touches nothing."""
    sid, path = make_session(sessions_dir, turns=3)
    other = str(ulid.ULID())
    copy = sessions_dir / f"{other}.sqlite"
    copy.write_bytes(path.read_bytes())
    os.chmod(copy, 0o600)
    before = listing(sessions_dir)
    for dry_run in (True, False):
        out = salvage.recover_session(sessions_dir, other, dry_run=dry_run)
        assert out.outcome == "refused", out.notes
        assert sid in out.notes[-1]
    assert listing(sessions_dir) == before
