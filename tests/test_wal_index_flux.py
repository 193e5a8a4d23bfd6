"""A reader beside a live writer through a read-only ``-shm`` (``readonly_shm``).

When the reader finds the two copies of the WAL-index header different (the writer is
rewriting them) and no writer holds the write lock at that instant, SQLite answers
SQLITE_READONLY_RECOVERY: it cannot rebuild the index without write access. Seen once in ~300
reads beside a writer committing continuously on a loaded machine (``sessions show`` exited 1
with ``read_only``). The reader begins the read again; a state that stays in flux is ``busy``
(retry later), never "cannot be written".
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentdb import db, errors
from agentdb.store import SessionReader
from tests.rows import write_at
from tests.support import SRC, make_session

pytestmark = pytest.mark.slow

# Opens the session in WAL mode, commits, and stays open without writing: the -wal and -shm
# exist, a live process maps the index (so SQLite trusts the -shm, as beside a kernel), and
# nobody holds the write lock.
_HOLDER = """
import sys, time
sys.path.insert(0, sys.argv[2])
import apsw
c = apsw.Connection(sys.argv[1])
c.execute("PRAGMA journal_mode=WAL").fetchall()
c.execute("PRAGMA wal_autocheckpoint=0")
c.execute("UPDATE session_meta SET depth = depth")
c.execute("SELECT count(*) FROM events").fetchall()
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def held_wal(sessions_dir: Path) -> Iterator[Path]:
    _, path = make_session(sessions_dir, turns=3)
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), str(SRC)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for suffix in ("-wal", "-shm"):
            assert path.with_name(path.name + suffix).exists()
        yield path
    finally:
        p.kill()
        p.wait(timeout=30)


def _second_header(path: Path) -> tuple[Path, bytes]:
    """The -shm and its second copy of the WAL-index header (bytes 48-95)."""
    shm = path.with_name(path.name + "-shm")
    return shm, shm.read_bytes()[48:96]


def test_reader_begins_again_while_the_wal_index_is_rewritten(held_wal: Path) -> None:
    path = held_wal
    with SessionReader(path) as r:
        expected = [e.sequence for e in r.iter_events(payload_cap=16)]
    shm, header = _second_header(path)
    write_at(shm, 48, bytes([header[0] ^ 0xFF]))  # the two copies now differ
    # The "writer" finishes its rewrite a moment later: the copies agree again.
    t = threading.Timer(0.02, write_at, (shm, 48, header[:1]))
    t.start()
    try:
        with SessionReader(path) as r:
            assert r.conn.how == "wal"
            got = [e.sequence for e in r.iter_events(payload_cap=16)]
    finally:
        t.join()
    assert got == expected


def test_a_wal_index_that_stays_in_flux_is_busy_not_read_only(held_wal: Path) -> None:
    path = held_wal
    shm, header = _second_header(path)
    write_at(shm, 48, bytes([header[0] ^ 0xFF]))
    started = time.monotonic()
    with pytest.raises(errors.Busy) as got, SessionReader(path) as r:
        list(r.iter_events(payload_cap=16))
    assert time.monotonic() - started >= sum(d for d in db._FLUX_RETRIES if d)  # retried
    assert str(path) in str(got.value)
