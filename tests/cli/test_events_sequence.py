"""agentdb events on a revision-1 file whose event sequences include 0 or negative ones.

Revision 1 has no CHECK on ``sequence``: another conforming writer (or a hand edit) may store
0, -1 or -2**63. ``check`` calls such a file needs_migration and ``sessions show`` counts every
event, so ``events`` prints every event too (``--after`` used to default to 0, hiding them).
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from agentdb.store import SessionReader
from tests.runner import run_cli
from tests.support import make_session

pytestmark = pytest.mark.slow

LOW = (0, -1, -(2**63))


def _low_session(sessions: Path, low: int) -> tuple[str, Path, list[int]]:
    """A revision-1 session whose last event's sequence became ``low``; its sequences."""
    sid, path = make_session(sessions, turns=2, revision=1)
    conn = apsw.Connection(str(path))
    try:
        conn.execute(
            "UPDATE events SET sequence = ? WHERE sequence = (SELECT max(sequence) FROM events)",
            (low,),
        )
        seqs = [r[0] for r in conn.execute("SELECT sequence FROM events ORDER BY sequence")]
    finally:
        conn.close()
    assert seqs[0] == low
    return sid, path, seqs


def _printed(sessions: Path, sid: str, *extra: str) -> list[int]:
    p = run_cli("--sessions-dir", str(sessions), "events", sid, "--json", *extra)
    assert p.returncode == 0, p.stderr
    return [json.loads(line)["sequence"] for line in p.stdout.splitlines()]


@pytest.mark.parametrize("low", LOW)
def test_events_prints_sequences_at_or_below_zero(tmp_path: Path, low: int) -> None:
    sessions = tmp_path / "sessions"
    sid, path, seqs = _low_session(sessions, low)
    g = ("--sessions-dir", str(sessions))
    p = run_cli(*g, "check", sid, "--json")
    assert json.loads(p.stdout)["sessions"][0]["verdict"] == "needs_migration", p.stdout
    p = run_cli(*g, "sessions", "show", sid, "--json")
    assert json.loads(p.stdout)["session"]["events"] == len(seqs), p.stdout
    # the same event log as show counts, in sequence order, the lowest sequence first
    assert _printed(sessions, sid) == seqs
    # an explicit --after still bounds it; --after below zero is accepted
    assert _printed(sessions, sid, "--after", "0") == [s for s in seqs if s > 0]
    assert _printed(sessions, sid, "--after", str(low - 1 if low > -(2**63) else low)) == (
        seqs if low > -(2**63) else seqs[1:]
    )
    p = run_cli(*g, "events", sid)  # the table too
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("\n") >= len(seqs)
    # the reader API: no ``after`` is every event
    with SessionReader(path, session_id=sid) as r:
        assert [e.sequence for e in r.iter_events()] == seqs
        assert [e.sequence for e in r.iter_events(after=0)] == [s for s in seqs if s > 0]


@pytest.mark.parametrize("low", LOW)
def test_migrate_keeps_sequences_at_or_below_zero(tmp_path: Path, low: int) -> None:
    """Revision 2 adds no CHECK on ``sequence``: migrate carries the row, and events still
    prints every event."""
    sessions = tmp_path / "sessions"
    sid, _path, seqs = _low_session(sessions, low)
    g = ("--sessions-dir", str(sessions))
    p = run_cli(*g, "migrate", sid, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["sessions"][0]["outcome"] == "migrated", p.stdout
    assert "Traceback" not in p.stderr
    p = run_cli(*g, "check", sid, "--json")
    assert json.loads(p.stdout)["sessions"][0]["verdict"] == "ok", p.stdout
    assert _printed(sessions, sid) == seqs
