"""A writer killed inside a transaction larger than its page cache (the kernel's migrating open
of a long session, step 3 rebuilding every table) leaves WAL frames that never committed and
whose checksums do not chain: SQLite rewrites a spilled page's frame in place when the page
changes again before COMMIT and fixes the checksums only at COMMIT. Nothing committed is
lost, so ``check`` calls the file ok (the WAL's tail is torn) and the kernel opens it without a
recovery. Real SQLite, a real process killed by SIGKILL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from agentdb import kernel
from agentdb.checks import check_path
from agentdb.fileformat.wal import scan_wal
from agentdb.paths import sidecar
from agentdb.store import Event, Producer
from tests.support import make_session

pytestmark = pytest.mark.slow

# a big update spills pages to the WAL; changing the first row again rewrites its frame in
# place, so the frames written after it no longer chain from it; then SIGKILL before COMMIT
_KILLED_MID_TRANSACTION = """
import os, signal, sys, apsw
c = apsw.Connection(sys.argv[1])
c.execute("PRAGMA cache_size=2")
c.execute("BEGIN IMMEDIATE")
c.execute("UPDATE events SET payload = randomblob(3000)")
c.execute("UPDATE events SET payload = randomblob(3000) WHERE sequence = 1")
c.execute("UPDATE events SET payload = randomblob(10) WHERE sequence > 50")
os.kill(os.getpid(), signal.SIGKILL)
"""


def _events(path: Path) -> list[tuple[object, ...]]:
    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_READONLY
    )
    try:
        return list(conn.execute("SELECT sequence, payload FROM events ORDER BY sequence"))
    finally:
        conn.close()


def test_frames_of_a_killed_transaction_are_a_torn_tail_not_damage(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=10)
    before = _events(path)
    p = subprocess.run([sys.executable, "-c", _KILLED_MID_TRANSACTION, str(path)], check=False)
    assert p.returncode == -9
    scan = scan_wal(sidecar(path, "-wal").read_bytes())
    # the shape this test is about: a break, frames after it that verify, no commit
    assert scan.frames and not any(f.is_commit for f in scan.frames)
    assert any(f.chain == "break" for f in scan.frames)
    assert any(f.checksum_ok for f in scan.frames if f.chain == "unverified")
    assert "wal_torn_tail" in scan.codes
    assert not [a for a in scan.anomalies if a.severity == "error"], scan.anomalies
    result = check_path(path, sid)
    assert result.verdict == "ok", result.findings
    w = kernel.open_session(sessions_dir, sid)
    try:
        w.set_status("running")
        w.emit(Event("tool_result", Producer("tool", "shell", "2.0.0"), b"after"))
        w.set_status("completed")
    finally:
        w.close()
    assert not path.with_name(path.name + ".corrupt").exists()  # no needless recovery
    assert _events(path)[: len(before)] == before
    assert check_path(path, sid).verdict == "ok"
