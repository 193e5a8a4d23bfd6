"""A row the page engine rejects structurally never wins the merge through SQLite's read.

At dd60f0c, on :func:`corpus.build_base`'s revision-1 file, :func:`damage.loop_overflow` seeds
0 and 2 and :func:`damage.cross_link_overflow` seeds 0-3 gave an event of the right length and
the wrong bytes in the replacement with nothing in ``lost``; the page engine had rejected the
looping chains ("overflow chain broken") but SQLite's copy won, and cross-link seed 3 went
through ``index-rebuild``. Now such a row is lost (or, when the layout names it the owner of
the shared pages, kept and counted unverified), and every other row is byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agentdb import salvage
from tests.fuzz import damage
from tests.rows import row_sets
from tests.salvage import corpus

pytestmark = pytest.mark.slow

CASES: list[tuple[str, Callable[[Path, int], damage.Damage], int]] = [
    ("loop", damage.loop_overflow, 0),
    ("loop", damage.loop_overflow, 2),
    *[("cross", damage.cross_link_overflow, s) for s in range(4)],
]


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, Path]]:
    return {
        rev: corpus.build_base(tmp_path_factory.mktemp(f"rev{rev}"), revision=rev) for rev in (1, 2)
    }


def _in(ranges: list[list[int]], n: int) -> bool:
    return any(a <= n <= b for a, b in ranges)


@pytest.mark.parametrize("revision", [1, 2])
@pytest.mark.parametrize(("kind", "hurt", "seed"), CASES)
def test_structurally_rejected_rows_never_kept_silently(
    bases: dict[int, tuple[str, Path]],
    tmp_path: Path,
    revision: int,
    kind: str,
    hurt: Callable[[Path, int], damage.Damage],
    seed: int,
) -> None:
    sid, src = bases[revision]
    original = {r[0]: r[:9] for r in row_sets(src)["events"]}
    path = damage.copy_session(src, tmp_path)
    what = hurt(path, seed)
    out = salvage.recover_session(tmp_path, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", (str(what), out.notes)
    got = {r[0]: r[:9] for r in row_sets(path)["events"]}
    unverified = out.lost.get("unverified_event_sequences", [])
    wrong = [s for s, row in got.items() if original.get(s) != row and not _in(unverified, s)]
    assert wrong == [], (str(what), out.lost, out.engines)
    assert set(got) <= set(original)
    assert out.tables["events"]["salvaged"] == len(got)
    assert out.tables["events"].get("unverified", 0) == sum(b - a + 1 for a, b in unverified)
    if revision == 2:
        assert not unverified  # the content hash vouches for every kept event
    if kind == "cross":
        assert "index-rebuild" not in out.engines
    if got != original:  # whatever is not byte-identical is said to be lost or unverified
        assert out.lost, str(what)
