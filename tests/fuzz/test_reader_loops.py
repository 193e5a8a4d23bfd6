"""The rows engine cannot loop: seeded sector damage of real revision-1 and revision-2 files.

At dd60f0c, seeds 20, 54 and 68 of :func:`damage.sector_damage` (random bytes over the
cell-pointer array of an ``events`` leaf of :func:`corpus.build_base`'s revision-1 file) made
``recover`` re-read the same rows forever: a garbage cell decoded as rowid 0 just before SQLite
raised ``CorruptError``, and the reader restarted from rowid 0. The kernel's automatic recovery
on open ran the same loop. Every case runs in a subprocess with a 60 s guard; the bound on the
reader's restarts is asserted from the report, not from a clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentdb import salvage
from agentdb.salvage.tables import TABLES
from tests.fuzz import damage
from tests.salvage import corpus
from tests.support import SRC

pytestmark = pytest.mark.slow

GUARD_S = 60
LOOP_SEEDS = (20, 54, 68)


@pytest.fixture(scope="module")
def rev1_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return corpus.build_base(tmp_path_factory.mktemp("rev1"), revision=1)


@pytest.fixture(scope="module")
def rev2_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return corpus.build_base(tmp_path_factory.mktemp("rev2"), revision=2)


def _env(sessions_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "XDG_STATE_HOME": str(sessions_dir.parent.parent),
    }


def recover_guarded(sessions_dir: Path, sid: str) -> dict[str, object]:
    """``agentdb recover --json`` in a subprocess, killed after 60 s (a hang fails the test)."""
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentdb.cli.main",
            "--sessions-dir",
            str(sessions_dir),
            "recover",
            sid,
            "--json",
        ],
        capture_output=True,
        text=True,
        env=_env(sessions_dir),
        timeout=GUARD_S,
    )
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode in (0, 1), p.stderr
    doc = json.loads(p.stdout)
    assert isinstance(doc, dict)
    return doc["sessions"][0]  # type: ignore[no-any-return]


_KERNEL = """
import sys
from pathlib import Path
from agentdb.kernel import open_session
w = open_session(Path(sys.argv[1]), sys.argv[2])
print(w.conn.execute("SELECT count(*) FROM events").fetchone()[0])
w.close()
"""


def assert_reader_bounded(tables: dict[str, dict[str, int]]) -> None:
    for t in TABLES:
        assert tables[t]["restarts"] <= tables[t]["damaged_regions"], (t, tables[t])


@pytest.mark.parametrize("seed", LOOP_SEEDS)
def test_recover_ends_on_cell_pointer_garbage(
    rev1_base: tuple[str, Path], sessions_dir: Path, seed: int
) -> None:
    sid, src = rev1_base
    path = damage.copy_session(src, sessions_dir)
    what = damage.sector_damage(path, seed)
    got = recover_guarded(sessions_dir, sid)
    assert got["outcome"] == "recovered", (str(what), got)
    tables = got["tables"]
    assert isinstance(tables, dict)
    assert_reader_bounded(tables)
    assert tables["events"]["salvaged"] > 150, str(what)


def test_kernel_open_ends_on_cell_pointer_garbage(
    rev1_base: tuple[str, Path], sessions_dir: Path
) -> None:
    sid, src = rev1_base
    path = damage.copy_session(src, sessions_dir)
    damage.sector_damage(path, LOOP_SEEDS[0])
    p = subprocess.run(
        [sys.executable, "-c", _KERNEL, str(sessions_dir), sid],
        capture_output=True,
        text=True,
        env=_env(sessions_dir),
        timeout=GUARD_S,
    )
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) > 150
    assert "has been recovered" in p.stderr


@pytest.mark.parametrize("revision", [1, 2])
def test_sector_damage_sweep_is_bounded(
    rev1_base: tuple[str, Path],
    rev2_base: tuple[str, Path],
    tmp_path: Path,
    revision: int,
) -> None:
    """Twenty seeds of each revision, in process (a dry run): every reader's restarts stay
    within its damaged regions, and nothing raises."""
    sid, src = rev1_base if revision == 1 else rev2_base
    for seed in range(100, 120):
        d = tmp_path / str(seed)
        path = damage.copy_session(src, d)
        what = damage.sector_damage(path, seed)
        out = salvage.recover_session(d, sid, dry_run=True, recovery_log=tmp_path / "log")
        assert out.outcome in ("recovered", "healthy"), (str(what), out.notes)
        if out.outcome == "recovered":
            assert_reader_bounded(out.tables)
