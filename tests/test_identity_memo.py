"""schema_differences decides once per distinct schema text; the memo never changes an answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentdb import db
from agentdb.schema import identity
from agentdb.schema.revisions import REV1_DDL

pytestmark = pytest.mark.slow

_BARE = " ".join(line.split("--")[0].strip() for line in REV1_DDL.splitlines())
OTHER = "\n".join(s.strip() + "; -- another writer" for s in _BARE.split(";") if s.strip())


def _file(tmp_path: Path, name: str, ddl: str) -> Path:
    path = tmp_path / name
    conn = db.open_private(path)
    db.exec_script(conn, ddl)
    conn.close()
    return path


def _decide(path: Path) -> list[str]:
    conn = db.open_private(path, readonly=True)
    try:
        return identity.schema_differences(conn, 1)
    finally:
        conn.close()


def _fingerprint(path: Path) -> list[str]:
    conn = db.open_private(path, readonly=True)
    try:
        return identity._fingerprint_differences(conn, 1)
    finally:
        conn.close()


def test_memo_agrees_with_the_fingerprint(tmp_path: Path) -> None:
    identity._DECIDED.clear()
    same = _file(tmp_path, "same.sqlite", OTHER)
    extra = _file(tmp_path, "extra.sqlite", OTHER + "\nALTER TABLE events ADD COLUMN x;")
    dropped = _file(tmp_path, "dropped.sqlite", OTHER + "\nDROP INDEX idx_events_kind;")
    for _ in range(2):  # second round: every answer comes from the memo
        for path in (same, extra, dropped):
            assert _decide(path) == _fingerprint(path)
    assert _decide(same) == []
    assert _decide(extra) and _decide(dropped) and _decide(extra) != _decide(dropped)
    assert len(identity._DECIDED) == 3  # one decision per distinct schema, not per file


def test_memo_is_bounded(tmp_path: Path) -> None:
    identity._DECIDED.clear()
    for i in range(identity._DECIDED_MAX + 5):
        _decide(_file(tmp_path, f"{i}.sqlite", f"CREATE TABLE t{i}(a)"))
    assert len(identity._DECIDED) == identity._DECIDED_MAX
    big = _file(tmp_path, "big.sqlite", f"CREATE TABLE big(a DEFAULT '{'x' * 70_000}')")
    identity._DECIDED.clear()
    assert _decide(big)  # still decided (a foreign table), just not remembered
    assert not identity._DECIDED
