"""recover's memory is bounded: the WAL and the database are read page by page, never whole,
and the rows salvaged go into the job's scratch database as they are found.

Each recovery runs in a fresh process, and its peak RSS (``wait4``, through
:mod:`tests.peak_rss`, so this test process's own peak does not count) is compared with a
recovery of a small damaged session in another fresh process: the difference is what the
large WAL (or the many rows) costs. Reading the WAL whole (as recover once did) costs about
twice its size; the bound is a third of it. Holding the salvaged rows in Python (as recover
once did) costs about 2 KiB per small event, 86 MiB for 40,000; the bound is 48 MiB, what
SQLite's page caches may hold whatever the number of rows.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path

import pytest

from agentdb.paths import sidecar
from agentdb.store import Event, SessionWriter
from tests import peak_rss
from tests.rows import zero_page
from tests.salvage import corpus

pytestmark = pytest.mark.slow

WAL_MB = (16, 64)  # two large WALs: the fixed costs (page caches, buffers) are full in both


def _session_with_wal(root: Path, mb: int) -> tuple[str, Path]:
    """A session of about ``mb`` MB living only in its WAL (copied while the writer is open),
    one sector of a frame in the middle zeroed: SQLite stops at the checksum break, the page
    engine reads the intact commits after it."""
    w = SessionWriter.create(root / "live", profile="coder")
    w.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    rng = random.Random(7)
    batch: list[Event] = []
    for _ in range(max(mb * 1_000_000 // 20_000, 4)):
        batch.append(Event("tool_result", corpus.BIG, rng.randbytes(10_000) * 2))
        if len(batch) == 100:
            w.emit_batch(batch)
            batch = []
    if batch:
        w.emit_batch(batch)
    dst = root / "sessions" / w.path.name
    dst.parent.mkdir()
    shutil.copyfile(w.path, dst)
    shutil.copyfile(sidecar(w.path, "-wal"), sidecar(dst, "-wal"))
    w.close()
    wal = sidecar(dst, "-wal")
    with open(wal, "r+b") as f:
        page_size = int.from_bytes(f.read(32)[8:12], "big")
        frames = (wal.stat().st_size - 32) // (page_size + 24)
        f.seek(32 + (frames // 2) * (page_size + 24) + 24 + 512)
        f.write(bytes(512))
    return w.session_id, dst


def _recover_rss(sessions: Path, session_id: str, state: Path) -> tuple[int, dict[str, object]]:
    """(peak RSS in KiB, the outcome as JSON) of ``recover_session`` in a fresh process."""
    code = (
        "import json, sys; from pathlib import Path; from agentdb import salvage; "
        "out = salvage.recover_session(Path(sys.argv[1]), sys.argv[2], "
        "recovery_log=Path(sys.argv[3]) / 'recovery.log'); "
        "print(json.dumps(out.to_json()))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    usage, out = peak_rss.run(
        [sys.executable, "-c", code, str(sessions), session_id, str(state)], env=env
    )
    assert usage.returncode == 0
    return usage.maxrss_kib, json.loads(out)


def test_recover_never_holds_a_large_wal_in_memory(tmp_path: Path) -> None:
    """Measured this way, 16 MB of WAL peak at ~37 MiB and 96 MB at ~51 MiB (about 0.2 byte per
    byte of WAL: the per-frame index); reading the WAL whole costs about twice its size."""
    small_mb, big_mb = WAL_MB
    small_id, small = _session_with_wal(tmp_path / "small", small_mb)
    big_id, big = _session_with_wal(tmp_path / "big", big_mb)
    more_kib = (sidecar(big, "-wal").stat().st_size - sidecar(small, "-wal").stat().st_size) // 1024
    assert more_kib > (big_mb - small_mb - 4) * 1000
    base_rss, small_out = _recover_rss(small.parent, small_id, tmp_path / "small")
    big_rss, big_out = _recover_rss(big.parent, big_id, tmp_path / "big")
    assert small_out["outcome"] == big_out["outcome"] == "recovered"
    tables = big_out["tables"]
    assert isinstance(tables, dict)
    assert tables["events"]["salvaged"] > big_mb * 1_000_000 // 20_000 // 2  # the WAL was read
    extra = big_rss - base_rss
    assert extra < more_kib // 3, (
        f"recover of {more_kib} KiB more WAL peaked {extra} KiB above the smaller one's"
    )


def _many_small_events(root: Path, n: int) -> tuple[str, Path]:
    """A closed session of ``n`` small events, an interior page of ``events`` zeroed: the rows
    engine reads most of them, the page engine all of them, the merge takes both."""
    w = SessionWriter.create(root / "sessions", profile="coder")
    batch: list[Event] = []
    for i in range(n):
        batch.append(Event("tool_result", corpus.BIG, b"x%d" % i * 10))
        if len(batch) == 1000:
            w.emit_batch(batch)
            batch = []
    if batch:
        w.emit_batch(batch)
    w.close()
    interior = corpus.pages_of(w.path, "events", "internal")
    if interior:
        zero_page(w.path, interior[len(interior) // 2])
    else:
        zero_page(w.path, corpus.pages_of(w.path, "events", "leaf")[0])
    return w.session_id, w.path


def test_recover_memory_does_not_grow_with_the_rows_salvaged(tmp_path: Path) -> None:
    small_id, small = _many_small_events(tmp_path / "small", 500)
    big_id, big = _many_small_events(tmp_path / "big", 40_000)
    base_rss, small_out = _recover_rss(small.parent, small_id, tmp_path / "small")
    big_rss, big_out = _recover_rss(big.parent, big_id, tmp_path / "big")
    assert small_out["outcome"] == big_out["outcome"] == "recovered"
    tables = big_out["tables"]
    assert isinstance(tables, dict)
    events = tables["events"]
    assert events["salvaged"] == events["verified"] == 40_000
    assert events["sources"].keys() >= {"rows", "stray"}  # both engines' rows were merged
    extra = (big_rss - base_rss) // 1024
    assert extra < 48, f"recover of 40,000 small events peaked {extra} MiB above 500 events'"
