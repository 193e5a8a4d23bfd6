"""A corruption corpus built from real session files: one damage function per class.

Every damage is deterministic and done to real pages located with ``dbstat``. The base files are
written through the real writer: enough events for several leaf pages and an interior page,
20 KB payloads that spill into overflow chains, a freelist (a scratch table created and dropped),
and, for the WAL cases, a copy taken while the writer still had committed frames only in its WAL.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apsw

from agentdb.jobs import demo
from agentdb.paths import sidecar
from agentdb.schema.revisions import COLUMNS, CURRENT_REVISION
from agentdb.store import Event, Producer, SessionWriter
from tests.rows import flip, page_size, write_at, zero_page

TABLES = ("events", "session_meta", "cost_ledger", "plan_items", "producers")
BIG = Producer("tool", "fetch", "1.0.0")


def at_revision(
    sets: dict[str, set[tuple[object, ...]]], revision: int
) -> dict[str, set[tuple[object, ...]]]:
    """Rows cut to the columns a file of ``revision`` holds (a recovery writes the current
    revision; every older revision's columns lead it, with the same values)."""
    return {t: {r[: len(COLUMNS[revision][t])] for r in rows} for t, rows in sets.items()}


def big_payload(i: int) -> bytes:
    return random.Random(i).randbytes(20_000)


def build_base(
    directory: Path, *, revision: int = CURRENT_REVISION, turns: int = 30
) -> tuple[str, Path]:
    """A closed session: ~200 events, 6 with 20 KB payloads, and a freelist."""
    w = SessionWriter.create(directory, profile="coder", revision=revision)
    demo._turns(w, demo.MODEL_OLD, turns // 2, seed=1)
    for i in range(6):
        w.emit(Event("tool_result", BIG, big_payload(i)))
    demo._turns(w, demo.MODEL_CACHED, turns - turns // 2, seed=2)
    w.set_status("completed")
    w.close()
    conn = apsw.Connection(str(w.path))
    for _ in conn.execute(
        "CREATE TABLE scratch(x); INSERT INTO scratch VALUES (randomblob(30000)); "
        "INSERT INTO scratch VALUES (randomblob(30000)); DROP TABLE scratch;"
    ):
        pass
    conn.close()
    return w.session_id, w.path


def build_wal(directory: Path, into: Path) -> tuple[str, Path]:
    """A session whose last commits exist only in its WAL (copied while the writer is open)."""
    w = SessionWriter.create(directory, profile="coder")
    demo._turns(w, demo.MODEL_OLD, 4, seed=3)
    w.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    w.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    demo._turns(w, demo.MODEL_CACHED, 12, seed=4)  # 12 commits, WAL only
    w.emit(Event("tool_result", BIG, big_payload(99)))
    dst = into / w.path.name
    shutil.copyfile(w.path, dst)
    shutil.copyfile(sidecar(w.path, "-wal"), sidecar(dst, "-wal"))
    w.close()
    return w.session_id, dst


def pages_of(path: Path, name: str, pagetype: str | None = None) -> list[int]:
    conn = apsw.Connection(
        f"file:{path.absolute()}?immutable=1",
        flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
    )
    try:
        sql = "SELECT pageno FROM dbstat WHERE name = ?"
        args: list[object] = [name]
        if pagetype:
            sql += " AND pagetype = ?"
            args.append(pagetype)
        return [int(r[0]) for r in conn.execute(sql + " ORDER BY pageno", args)]
    finally:
        conn.close()


def d_zeroed_page(p: Path) -> None:
    zero_page(p, pages_of(p, "events", "leaf")[2])


def d_flipped_bytes(p: Path) -> None:
    ps = page_size(p)
    pg = pages_of(p, "events", "leaf")[3]
    flip(p, (pg - 1) * ps + ps // 2, 200)


def d_truncated_at_boundary(p: Path) -> None:
    ps = page_size(p)
    n = p.stat().st_size // ps
    os.truncate(p, (n - 24) * ps)


def d_truncated_inside(p: Path) -> None:
    ps = page_size(p)
    n = p.stat().st_size // ps
    os.truncate(p, (n - 24) * ps + ps // 3)


def d_damaged_header(p: Path) -> None:
    write_at(p, 0, b"\xa5" * 100)


def d_damaged_schema(p: Path) -> None:
    ps = page_size(p)
    write_at(p, 100, bytes(ps - 100))


def d_broken_freelist(p: Path) -> None:
    data = p.read_bytes()
    trunk = int.from_bytes(data[32:36], "big")
    assert trunk, "the fixture has a freelist"
    ps = page_size(p)
    leaves = pages_of(p, "events", "leaf")[:3]
    # The trunk now lists live leaves as free pages, and points at a bogus next trunk.
    body = (999_999).to_bytes(4, "big") + len(leaves).to_bytes(4, "big")
    body += b"".join(x.to_bytes(4, "big") for x in leaves)
    write_at(p, (trunk - 1) * ps, body)


def d_broken_overflow(p: Path) -> None:
    ps = page_size(p)
    ovf = pages_of(p, "events", "overflow")
    write_at(p, (ovf[1] - 1) * ps, ovf[1].to_bytes(4, "big"))  # chain loops on itself
    write_at(p, (ovf[6] - 1) * ps, (10_000_000).to_bytes(4, "big"))  # chain leaves the file


def d_index_only(p: Path) -> None:
    for pg in pages_of(p, "idx_events_kind", "leaf")[:1]:
        zero_page(p, pg)


def d_autoindex_only(p: Path) -> None:
    zero_page(p, pages_of(p, "sqlite_autoindex_events_1", "leaf")[0])


def d_interior_page(p: Path) -> None:
    pgs = pages_of(p, "events", "internal")
    assert pgs, "the fixture has an interior page"
    zero_page(p, pgs[0])


def wal_frames(p: Path) -> tuple[int, int]:
    """(frame size, number of frames) of ``p``'s WAL."""
    wal = sidecar(p, "-wal")
    ps = int.from_bytes(wal.read_bytes()[8:12], "big")
    return 24 + ps, (wal.stat().st_size - 32) // (24 + ps)


def d_torn_wal(p: Path) -> None:
    wal = sidecar(p, "-wal")
    size, n = wal_frames(p)
    os.truncate(wal, 32 + (n - 1) * size + size // 2)


def d_flipped_wal_frame(p: Path) -> None:
    wal = sidecar(p, "-wal")
    size, n = wal_frames(p)
    frame = n // 3
    flip(wal, 32 + frame * size + 24 + 1000, 16)


@dataclass(frozen=True)
class Case:
    name: str
    damage: Callable[[Path], None]
    wal: bool = False  # built with build_wal
    lossless: bool = False  # every original row must come back
    # A torn WAL tail is what every crash mid-commit leaves: SQLite ignores the uncommitted
    # frames by design, so the file is healthy and must be left alone (recovering it after every
    # kernel crash would be wrong); its committed WAL-only data stays readable.
    healthy: bool = False
    index_only: bool = False  # damage confined to indexes: engine index-rebuild, zero rows lost


CASES = [
    Case("zeroed_page", d_zeroed_page),
    Case("flipped_bytes", d_flipped_bytes),
    Case("truncated_at_boundary", d_truncated_at_boundary),
    Case("truncated_inside_page", d_truncated_inside),
    Case("damaged_header", d_damaged_header, lossless=True),
    Case("damaged_schema_page", d_damaged_schema, lossless=True),
    Case("broken_freelist", d_broken_freelist, lossless=True),
    Case("broken_overflow_chain", d_broken_overflow),
    Case("index_only", d_index_only, lossless=True, index_only=True),
    Case("autoindex_only", d_autoindex_only, lossless=True, index_only=True),
    Case("damaged_interior_page", d_interior_page, lossless=True),
    Case("torn_wal", d_torn_wal, wal=True, healthy=True),
    Case("flipped_wal_frame", d_flipped_wal_frame, wal=True),
]
