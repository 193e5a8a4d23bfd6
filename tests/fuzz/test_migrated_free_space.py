"""A revision-2 file migrated from revision 1 still holds revision-1 records (no content hash)
in free pages and free space: when such a record fills a gap it is counted as unverified, never
kept silently.

Issue 10 saw one wrong event come back from free space of a revision-2 file with ``lost: {}``;
the likely cause was such a pre-migration record. On :func:`corpus.build_base`'s revision-1 file
migrated to revision 2, :func:`damage.sector_damage` seeds 18 and 22 fill gaps from stale
pre-migration pages and seed 19 from free space; every one of those rows is now listed in
``lost.unverified_event_sequences`` and counted in ``tables.events.unverified``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentdb import checks, db, salvage
from agentdb.jobs import migrate
from agentdb.schema.migrations import apply_steps
from tests.fuzz import damage
from tests.rows import row_sets
from tests.salvage import corpus

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The revision-1 base migrated to revision 2 (the revision this is about; ``agentdb
    migrate`` goes to the current one)."""
    d = tmp_path_factory.mktemp("migrated")
    sid, path = corpus.build_base(d, revision=1)
    conn = db.open_writer(path)
    try:
        assert apply_steps(conn, path, target=2) == (1, 2)
    finally:
        conn.close()
    return sid, path


@pytest.fixture(scope="module")
def migrated3(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    d = tmp_path_factory.mktemp("migrated3")
    sid, path = corpus.build_base(d, revision=1)
    report = migrate.migrate_sessions(d, [sid])
    assert [(s.outcome, report.target) for s in report.sessions] == [("migrated", 3)]
    return sid, path


def _in(ranges: list[list[int]], n: int) -> bool:
    return any(a <= n <= b for a, b in ranges)


@pytest.mark.parametrize("seed", [18, 19, 22])
def test_unhashed_gap_fillers_are_unverified(
    migrated: tuple[str, Path], tmp_path: Path, seed: int
) -> None:
    sid, src = migrated
    original = {r[0]: r[:9] for r in row_sets(src)["events"]}
    path = damage.copy_session(src, tmp_path)
    what = damage.sector_damage(path, seed)
    out = salvage.recover_session(tmp_path, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", (str(what), out.notes)
    got = {r[0]: r[:9] for r in row_sets(path)["events"]}
    sources = out.tables["events"]["sources"]
    unverified = out.lost.get("unverified_event_sequences", [])
    below_live = sum(n for s, n in sources.items() if s in ("stale", "stray", "free-space"))
    assert below_live, (str(what), sources)
    assert sum(b - a + 1 for a, b in unverified) == out.tables["events"]["unverified"]
    assert out.tables["events"]["unverified"] >= below_live
    wrong = [s for s, row in got.items() if original.get(s) != row and not _in(unverified, s)]
    assert wrong == [], str(what)


@pytest.mark.parametrize("seed", [18, 19, 22])
def test_unhashed_gap_fillers_are_dropped_at_revision_3(
    migrated3: tuple[str, Path], tmp_path: Path, seed: int
) -> None:
    """Migrated to revision 3, the same damage: a pre-migration record has no hash the chain
    vouches for, so it never fills a gap (design §6): every event kept is the original's,
    none unverified, and the replacement passes check with its recorded gaps."""
    sid, src = migrated3
    original = {r[0]: r[:9] for r in row_sets(src)["events"]}
    path = damage.copy_session(src, tmp_path)
    what = damage.sector_damage(path, seed)
    out = salvage.recover_session(tmp_path, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", (str(what), out.notes)
    got = {r[0]: r[:9] for r in row_sets(path)["events"]}
    assert [s for s, row in got.items() if original.get(s) != row] == [], str(what)
    assert out.tables["events"]["unverified"] == 0, (str(what), out.notes)
    assert out.gaps, str(what)  # the lost rows are recorded, never silent
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"
