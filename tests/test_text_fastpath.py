"""``invalid_text``'s fast path (one short statement whose function reads every value, TEXT
decoded by APSW) gives the exact counts of the per-row queries, and takes BLOBs as bytes."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from agentdb import checks, db
from agentdb.schema.text import invalid_text
from tests.support import make_session

pytestmark = pytest.mark.slow


def _counts(path: Path) -> dict[str, int]:
    conn = db.open_readonly(path, check_schema=False)
    try:
        return invalid_text(conn, skip=("events",))
    finally:
        conn.close()


def test_counts_are_exact_per_table(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=3)
    assert _counts(path) == {}
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE cost_ledger SET model_id = CAST(x'c328' AS TEXT)")
    n = conn.execute("SELECT count(*) FROM cost_ledger").fetchone()[0]
    conn.execute("UPDATE producers SET version = CAST(x'ff' AS TEXT) WHERE rowid = 1")
    conn.close()
    assert n >= 2
    assert _counts(path) == {"cost_ledger": n, "producers": 1}
    r = checks.check_file(sessions_dir, sid, quick=True)
    assert r.verdict == "corrupt"
    assert sorted(f.message.split(": ", 1)[1] for f in r.findings if f.code == "invalid_text") == [
        f"1 producers rows hold TEXT that is not valid UTF-8; run `agentdb recover {sid}`",
        f"{n} cost_ledger rows hold TEXT that is not valid UTF-8; run `agentdb recover {sid}`",
    ]


def test_a_blob_that_is_not_utf8_is_not_text(sessions_dir: Path) -> None:
    """Another writer may store a BLOB in a TEXT column: bytes, not invalid text."""
    _, path = make_session(sessions_dir, turns=1, revision=1)
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE session_meta SET profile = x'ff00c3'")
    conn.close()
    assert _counts(path) == {}
