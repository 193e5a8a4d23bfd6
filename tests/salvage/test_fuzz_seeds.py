"""Regression cases the damage generator (tests/fuzz/generator.py) found in recover, replayed
from their seeds: every event the replacement holds is byte-identical to a committed version in
the undamaged file, or counted unverified (``lost.unverified_event_sequences``).

* a revision-1 overflow chain cross-linked with a WAL beside the file: an older copy of the
  second row, read through the shared pages, came back with the wrong payload (now: an older
  copy whose chain runs through another live row's pages is not taken);
* random bytes over a sector of an events leaf (revision 1): a row whose payload bytes were
  overwritten came back silently (now: rows no hash vouches for, read from a page on which
  other cells did not parse, are unverified).

Skipped where the generator is not in the tree (it lives with tests/fuzz).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentdb import salvage

pytestmark = pytest.mark.slow

generator = pytest.importorskip("tests.fuzz.generator")
oracle = pytest.importorskip("tests.fuzz.oracle")

CASES = [
    "rev=1 wal=1 size=long layout=plain damages=overflow_cross/958852332",
    "rev=1 wal=0 size=long layout=autovacuum damages=index_and_table/215253818",
    "rev=1 wal=1 size=long layout=plain damages=index_and_table/998186713",
]


@pytest.mark.parametrize("text", CASES)
def test_no_row_differs_unless_unverified(tmp_path: Path, text: str) -> None:
    case = generator.Case.parse(text)
    bases = pytest.importorskip("tests.fuzz.bases").Bases(tmp_path / "bases")
    applied = generator.apply(case, bases, tmp_path / "sessions")
    out = salvage.recover_session(applied.path.parent, applied.session_id)
    assert out.outcome == "recovered", out.notes
    got = oracle.read_rows(applied.path, applied.base.rows.columns)
    events = got.rows["events"]
    ranges = out.lost.get("unverified_event_sequences", [])
    seqs = [got.sequence(row) or 0 for row in events - applied.base.history.rows["events"]]
    wrong = sorted(s for s in seqs if not any(a <= s <= b for a, b in ranges))
    assert wrong == [], (text, out.notes)
    assert out.tables["events"]["salvaged"] == len(events)


def _events_leaves(path: Path) -> list[tuple[int, bytes]]:
    """The events table's leaf pages (page number, bytes) in key order, from the file alone."""
    import apsw

    from agentdb.fileformat.btree import PageKind, parse_page

    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name='events'").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = path.read_bytes()
    out: list[tuple[int, bytes]] = []
    stack = [root]
    while stack:
        pgno = stack.pop()
        page = parse_page(data[(pgno - 1) * size : pgno * size], pgno, size)
        if page.kind is PageKind.LEAF_TABLE:
            out.append((pgno, page.data))
        else:
            stack.extend(reversed(page.children()))
    return out


def test_a_garbage_key_rejects_itself_not_the_cells_after_it(tmp_path: Path) -> None:
    """Seeds random_sector/563054641 and freelist_trunk/458210018+random_sector/291022477: a
    sector of random bytes gave one cell of an events leaf a key larger than every other; the
    page engine then rejected every later cell of that page as out of order (recover kept 480
    events where .recover kept 482). One wrong key now costs that one cell."""
    from agentdb.fileformat.btree import parse_page
    from tests.salvage import corpus

    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    sid, path = corpus.build_base(d, revision=2, turns=120)
    conn = __import__("apsw").Connection(str(path))
    total = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    # a leaf in the middle of the tree whose cells have two-byte rowid varints (128..16383)
    pgno, data = next(
        (p, b)
        for p, b in _events_leaves(path)[1:-1]
        if (pg := parse_page(b, p, size)).cell_count >= 6
        and all(128 <= c.rowid < 16383 for c in pg.table_leaf_cells())
    )
    page = parse_page(data, pgno, size)
    victim = page.table_leaf_cells()[1]
    at = page.cell_pointers[1]
    while data[at] & 0x80:  # skip the payload-size varint
        at += 1
    at += 1
    assert data[at] & 0x80 and not data[at + 1] & 0x80  # a two-byte rowid varint
    with open(path, "r+b") as f:
        f.seek((pgno - 1) * size + at)
        f.write(b"\xff\x7f")  # rowid 16383: larger than any key of this session
    out = salvage.recover_session(path.parent, sid)
    assert out.outcome == "recovered", out.notes
    assert out.tables["events"]["salvaged"] == total - 1, (out.lost, out.notes)
    assert out.lost["event_sequences"] == [[victim.rowid, victim.rowid]], out.lost


def test_an_overflow_chain_that_runs_on_past_its_payload_is_broken(tmp_path: Path) -> None:
    """Seed page_swap/575980518 (revision 1, auto_vacuum): an index leaf swapped onto the last
    page of an event's overflow chain. SQLite reads the payload through it (its integrity check
    fails: the last page's next-page number is not 0), the page engine agreed, and recover took
    the path for index-only damage: an event with 20,000 bytes of the wrong content, counted
    structural_only. A chain whose last page names a next page is now broken for strict readers,
    and the page engine keeps its row as unverified (a loop after a complete payload reads the
    right bytes: seed overflow_loop/636671458, where .recover keeps that event)."""
    import apsw

    from agentdb.fileformat.btree import FormatError, parse_page, read_overflow
    from tests.salvage import corpus

    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    sid, path = corpus.build_base(d, revision=1)
    conn = apsw.Connection(str(path))
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    count = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())

    def page(n: int) -> bytes:
        return bytes(data[(n - 1) * size : n * size])

    # the last page of the first chain of a big event: follow a 20 KB payload's chain
    big = next(
        c
        for pgno, b in _events_leaves(path)
        for c in parse_page(b, pgno, size).table_leaf_cells()
        if c.overflow_pgno
    )
    chain, pg = [], big.overflow_pgno
    while pg:
        chain.append(pg)
        pg = int.from_bytes(page(pg)[:4], "big")
    last = chain[-1]
    assert read_overflow(page, big.overflow_pgno, big.payload_size - len(big.local), size, count)
    data[(last - 1) * size : (last - 1) * size + 4] = (1).to_bytes(4, "big")
    with pytest.raises(FormatError, match="past the end of its payload"):
        read_overflow(page, big.overflow_pgno, big.payload_size - len(big.local), size, count)
    path.write_bytes(bytes(data))
    out = salvage.recover_session(path.parent, sid)
    assert out.outcome == "recovered", out.notes
    assert out.engines != ["index-rebuild"], out.notes
    # the bytes may be right (a loop after the payload) or not: kept, and counted unverified
    kept = {r[0] for r in apsw.Connection(str(path)).execute("SELECT sequence FROM events")}
    unverified = out.lost.get("unverified_event_sequences", [])
    assert big.rowid in kept and any(a <= big.rowid <= b for a, b in unverified), out.lost
