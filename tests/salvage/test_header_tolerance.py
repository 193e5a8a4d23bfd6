"""Header fields SQLite's recovery tolerates are tolerated by the page engine.

At bcf0498 the reserved-bytes field (offset 20) set to 1 made the page engine read every page
with one usable byte less: the cells at the end of each page and the overflow pointers did not
parse, session_meta's b-tree was unreachable and rows were kept only when SQLite's recovery
extension found them (unverified), or lost without it. Now the field is tried against the
file's own b-tree pages (``PageSource._plausible_reserved``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentdb import salvage
from agentdb.fileformat import PageSource
from tests.rows import row_sets, write_at
from tests.salvage import corpus
from tests.support import make_session


@pytest.mark.parametrize("revision", [1, 3])
@pytest.mark.parametrize("value", [1, 8, 32])
def test_a_damaged_reserved_bytes_field_loses_nothing(
    sessions_dir: Path, tmp_path: Path, revision: int, value: int
) -> None:
    sid, path = make_session(sessions_dir, turns=30, revision=revision)
    mine = row_sets(path)
    write_at(path, 20, bytes([value]))
    assert PageSource(path.read_bytes()).usable == PageSource(path.read_bytes()).page_size
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", out.notes
    assert not [n for n in out.notes if "unverified" in n or "unreachable" in n], out.notes
    assert corpus.at_revision(row_sets(path), revision) == mine


@pytest.mark.parametrize("revision", [1, 3])
@pytest.mark.parametrize("raw", [512, 1024, 8192, 1])  # 1: 65536
def test_a_garbled_page_size_loses_nothing(
    sessions_dir: Path, tmp_path: Path, revision: int, raw: int
) -> None:
    """A page size field garbled to another legal size: at bcf0498 the page engine believed
    the header (8192 over a 4096 file kept 83 of 180 events and no plan item); now the size
    the file's pages bear out wins (:func:`agentdb.fileformat.pager.plausible_page_size`)."""
    sid, path = make_session(sessions_dir, turns=30, revision=revision)
    mine = row_sets(path)
    true_size = PageSource(path.read_bytes()).page_size
    write_at(path, 16, raw.to_bytes(2, "big"))
    assert PageSource(path.read_bytes()).page_size == true_size
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", out.notes
    assert not [n for n in out.notes if "unverified" in n or "unreachable" in n], out.notes
    assert corpus.at_revision(row_sets(path), revision) == mine
