"""A UTF-16 database (another tool rewrote the session with ``PRAGMA encoding='UTF-16le'``):
the same rows, but TEXT is stored as UTF-16, and agentdb reads, compares and hashes TEXT as its
stored bytes.

Before, the commands disagreed about such a file: ``check`` said ``needs_migration`` (revision
1; ``check --quick`` said ``ok`` for revision 2) while ``events`` and ``sessions show`` failed
on "session_meta names '0\\x001\\x00M...'", ``prune`` refused it as unreadable, and ``backup``
and ``migrate`` took it as healthy; a full check of revision 2 blamed 39 content hashes. Now it
is one finding, ``text_encoding`` (corrupt), from every command, and ``recover`` rewrites it as
UTF-8 with every row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from agentdb import checks
from tests.rows import row_sets
from tests.salvage import corpus
from tests.support import SRC, make_session

pytestmark = pytest.mark.slow


def cli(sessions_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions_dir), *args],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": str(SRC),
            "XDG_STATE_HOME": str(sessions_dir.parent.parent),
        },
        timeout=120,
    )


def to_utf16(path: Path) -> None:
    """Rewrite ``path`` as a UTF-16le database with the same schema, rows and pragmas."""
    new = path.with_name("utf16.tmp")
    old = apsw.Connection(str(path))
    ddl = [
        r[0]
        for r in old.execute(
            "SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name <> 'sqlite_sequence' "
            "ORDER BY type = 'index', rowid"
        )
    ]
    tables = [r[0] for r in old.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
    uv, aid = (old.execute(f"PRAGMA {p}").fetchone()[0] for p in ("user_version", "application_id"))
    old.close()
    conn = apsw.Connection(str(new))
    conn.execute("PRAGMA encoding = 'UTF-16le'")
    for sql in ddl:
        conn.execute(sql)
    old = apsw.Connection(str(path))  # ATTACH needs one encoding: copy row by row
    for t in tables:
        got = old.execute(f"SELECT * FROM {t}").fetchall()
        if got:
            marks = ", ".join("?" * len(got[0]))
            conn.executemany(f"INSERT INTO {t} VALUES ({marks})", got)
    old.close()
    conn.execute(f"PRAGMA user_version = {uv}")
    conn.execute(f"PRAGMA application_id = {aid}")
    assert conn.execute("PRAGMA encoding").fetchone()[0] == "UTF-16le"
    conn.close()
    os.replace(new, path)
    os.chmod(path, 0o600)


@pytest.mark.parametrize("revision", [1, 2])
def test_a_utf16_database_gets_one_verdict_and_is_recovered(
    sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    sid, path = make_session(sessions_dir, turns=3, revision=revision)
    rows = row_sets(path)
    to_utf16(path)
    assert row_sets(path) == rows  # SQLite reads the same rows (converting the text)
    for quick in (False, True):
        result = checks.check_path(path, sid, quick=quick)
        assert result.verdict == "corrupt", (quick, result.findings)
        assert "text_encoding" in {f.code for f in result.findings}
        p = cli(sessions_dir, "check", sid, "--json", *(["--quick"] if quick else []))
        assert json.loads(p.stdout)["sessions"][0]["verdict"] == "corrupt", p.stdout
    before = {q.name: q.read_bytes() for q in sessions_dir.iterdir()}
    p = cli(sessions_dir, "events", sid, "--json")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    p = cli(sessions_dir, "backup", sid, "--to", str(tmp_path / "b"), "--json")
    assert json.loads(p.stdout)["sessions"][0]["outcome"] == "corrupt", p.stdout
    p = cli(sessions_dir, "migrate", sid, "--dry-run", "--json")
    assert json.loads(p.stdout)["sessions"][0]["outcome"] == "corrupt", p.stdout
    p = cli(sessions_dir, "recover", sid, "--dry-run", "--json")
    assert json.loads(p.stdout)["sessions"][0]["outcome"] == "recovered", p.stdout
    assert {q.name: q.read_bytes() for q in sessions_dir.iterdir()} == before
    p = cli(sessions_dir, "recover", sid, "--json")
    assert json.loads(p.stdout)["sessions"][0]["outcome"] == "recovered", p.stdout
    conn = apsw.Connection(f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_URI | 1)
    assert conn.execute("PRAGMA encoding").fetchone()[0] == "UTF-8"
    conn.close()
    got = row_sets(path)
    for table, want in rows.items():  # every row, with revision 1's columns at least
        width = len(next(iter(want))) if want else 0
        assert {r[:width] for r in got[table]} == want, table
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"
    p = cli(sessions_dir, "events", sid, "--json")
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == len(rows["events"])


@pytest.mark.parametrize("revision", [2, 3])
@pytest.mark.parametrize("code", [2, 3])
def test_a_utf16_encoding_field_on_a_utf8_file_loses_nothing(
    sessions_dir: Path, code: int, revision: int
) -> None:
    """One header field damaged: the text encoding (offset 56) says UTF-16 of a UTF-8 file.
    SQLite reads every name and value as UTF-16 (a malformed schema), and so did recover's
    pages engine: ``unreadable``, nothing salvaged of an intact session. The engine now takes
    the encoding in which sqlite_schema names our tables."""
    sid, path = make_session(sessions_dir, turns=3, revision=revision)
    rows = row_sets(path)
    with open(path, "r+b") as f:
        f.seek(56)
        f.write(code.to_bytes(4, "big"))
    assert checks.check_path(path, sid).verdict == "corrupt"
    p = cli(sessions_dir, "recover", sid, "--json")
    doc = json.loads(p.stdout)["sessions"][0]
    assert doc["outcome"] == "recovered", doc
    assert doc["tables"]["events"]["verified"] == len(rows["events"]), doc["tables"]
    assert corpus.at_revision(row_sets(path), revision) == rows  # replacement: current revision
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"
