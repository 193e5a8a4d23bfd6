"""Recover every class of the corruption corpus: no crash, a replacement that passes the checks,
the original kept byte for byte, nothing invented, nothing salvageable lost."""

from __future__ import annotations

import shutil
from pathlib import Path

import apsw
import pytest

from agentdb import checks, db, recoverylog, salvage
from agentdb.paths import sidecar
from agentdb.schema.identity import identify, schema_differences
from agentdb.schema.revisions import CURRENT_REVISION
from tests.rows import row_sets
from tests.salvage import corpus

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path]]:
    root = tmp_path_factory.mktemp("bases")
    plain = root / "plain"
    walled = root / "wal"
    scratch = root / "scratch"
    for d in (plain, walled, scratch):
        d.mkdir()
    return {
        "plain": corpus.build_base(plain),
        "wal": corpus.build_wal(scratch, walled),
    }


def install(base: tuple[str, Path], sessions_dir: Path) -> tuple[str, Path]:
    sid, src = base
    dst = sessions_dir / src.name
    shutil.copyfile(src, dst)
    if sidecar(src, "-wal").exists():
        shutil.copyfile(sidecar(src, "-wal"), sidecar(dst, "-wal"))
    return sid, dst


def assert_passes_check(path: Path, session_id: str) -> None:
    """What check's rules require of a recovered file (FK orphans of lost events allowed)."""
    assert not db.security_problems(path)
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert not sidecar(path, "-wal").exists()
    conn = db.open_readonly(path)
    try:
        assert db.integrity_problems(conn) == []
        ident = identify(conn)
        assert (ident.kind, ident.revision) == ("session", CURRENT_REVISION)
        assert schema_differences(conn, CURRENT_REVISION) == []
        assert [r[0] for r in conn.execute("SELECT session_id FROM session_meta")] == [session_id]
        assert (
            conn.execute(
                "SELECT count(*) FROM events WHERE content_hash IS NOT agentdb_event_hash("
                "sequence, id, timestamp, kind, producer_category, producer_name, "
                "producer_version, schema_version, payload)"
            ).fetchone()[0]
            == 0
        )
        for _table, _rowid, parent, _ in conn.execute("PRAGMA foreign_key_check"):
            assert parent == "events"
    finally:
        conn.close()
    # check's own rules, as a recovered file: ok (informational findings allowed).
    result = checks.check_path(path, session_id, recovered=True)
    assert result.verdict == "ok", [(f.code, f.message) for f in result.findings]


def assert_check_cli_ok(sessions_dir: Path, session_id: str) -> None:
    """`agentdb check <id>` with the real recovery log: ok, the orphans of the recovery and the
    kept original only informational."""
    log = sessions_dir.parent / "recovery.log"
    report = checks.check_sessions(sessions_dir, [session_id], recovery_log=log)
    [result] = report.sessions
    assert result.verdict == "ok", [(f.code, f.message) for f in result.findings]
    codes = {f.code for f in result.findings}
    assert "recovered_earlier" in codes
    assert codes <= {"recovered_earlier", "orphan_of_recovery", "interrupted", "chain_gap_recorded"}


def sqlite_alone(path: Path, original: set[tuple[object, ...]]) -> int:
    """How many of the original events SQLite itself reads intact from the damaged file (a floor
    to beat; a row it reads with bytes changed is damage, which a content hash rejects)."""
    try:
        got = row_sets(path)
    except apsw.Error:
        return 0
    return len(got["events"] & original)


@pytest.mark.parametrize("case", corpus.CASES, ids=[c.name for c in corpus.CASES])
def test_corpus_case(case: corpus.Case, bases: dict, sessions_dir: Path) -> None:
    sid, path = install(bases["wal" if case.wal else "plain"], sessions_dir)
    original = row_sets(path)
    case.damage(path)
    damaged = path.read_bytes()
    wal = sidecar(path, "-wal")
    damaged_wal = wal.read_bytes() if wal.exists() else None

    out = salvage.recover_session(sessions_dir, sid)

    if case.healthy:
        assert out.outcome == "healthy", out.notes
        assert path.read_bytes() == damaged and wal.read_bytes() == damaged_wal
        got = row_sets(path)
        assert all(got[t] <= original[t] for t in corpus.TABLES)
        assert sorted(original["events"])[-8] in got["events"]  # WAL-only commits still there
        return
    assert out.outcome == "recovered", out.notes
    # The original is kept byte for byte (and its WAL beside it), never modified.
    corrupt = Path(out.corrupt_path or "")
    assert corrupt.read_bytes() == damaged
    if damaged_wal is not None:
        assert sidecar(corrupt, "-wal").read_bytes() == damaged_wal
    assert not wal.exists() and not sidecar(path, "-shm").exists()
    expected = {path.name, corrupt.name}
    if damaged_wal is not None:
        expected.add(sidecar(corrupt, "-wal").name)
    assert {p.name for p in sessions_dir.iterdir()} == expected  # no temp or lock files
    assert_passes_check(path, sid)
    assert_check_cli_ok(sessions_dir, sid)
    got = row_sets(path)
    # Nothing invented: every salvaged row is one of the original rows.
    for table in corpus.TABLES:
        extra = got[table] - original[table]
        assert not extra, (table, list(extra)[:2])
    assert out.tables["events"]["salvaged"] == len(got["events"])
    # Damage confined to indexes is recognised (tables read in full, indexes rebuilt); never
    # when table rows were lost. (A broken freelist also leaves every table intact.)
    if case.index_only:
        assert out.engines == ["index-rebuild"], out.engines
    if not case.lossless:
        assert "index-rebuild" not in out.engines
    if case.lossless:
        assert got == original, {t: len(original[t] - got[t]) for t in corpus.TABLES}
    else:
        assert len(got["events"]) >= len(original["events"]) // 2
    # Never fewer rows than SQLite alone reads from the damaged file.
    assert len(got["events"]) >= sqlite_alone(corrupt, original["events"])
    if case.wal:
        # Data committed only in the WAL is recovered: the newest events come back.
        newest = sorted(original["events"])[-2]
        assert newest in got["events"]
    lines = recoverylog.entries_for(sessions_dir.parent / "recovery.log", sid)
    assert [e["event"] for e in lines] == ["intent", "outcome"]
    assert lines[-1]["outcome"] == "recovered"
    assert lines[-1]["corrupt_path"] == str(corrupt)
