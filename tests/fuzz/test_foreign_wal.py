"""A WAL from another database beside a session file: foreign only on evidence, and then the
session is salvaged from its file alone; check, recover and prune agree.

At dd60f0c, a healthy file with another session's ``-wal`` was ``inconsistent``
(``meta_id_mismatch``) for check, ``healthy`` for recover (left as it was), and prune refused
it with "expected exactly one session_meta row, found 1"; with damage in the file too, recover
salvaged nothing of it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import apsw
import pytest

from agentdb import checks, demo, salvage
from agentdb.paths import sidecar
from agentdb.store import SessionWriter
from tests.fuzz import damage
from tests.rows import row_sets
from tests.runner import run_cli
from tests.salvage import corpus
from tests.support import make_session


def other_session_wal(root: Path) -> bytes:
    """The -wal of another session, holding commits (its writer copied while open)."""
    w = SessionWriter.create(root / "other", profile="coder")
    demo._turns(w, demo.MODEL_OLD, 2, seed=5)
    w.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    w.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    demo._turns(w, demo.MODEL_CACHED, 4, seed=6)
    w.set_status("completed")
    data = sidecar(w.path, "-wal").read_bytes()
    w.close()
    return data


def small_page_wal(root: Path) -> bytes:
    """The -wal of a database with another page size."""
    p = root / "small.db"
    root.mkdir(parents=True, exist_ok=True)
    conn = apsw.Connection(str(p))
    conn.execute(
        "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; "
        "CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(5000))"
    ).fetchall()
    data = sidecar(p, "-wal").read_bytes()
    conn.close()
    return data


def put_wal(path: Path, data: bytes) -> None:
    wal = sidecar(path, "-wal")
    wal.write_bytes(data)
    os.chmod(wal, 0o600)


def rows_alone(path: Path, into: Path) -> dict[str, set[tuple[object, ...]]]:
    """What the file holds without any WAL."""
    into.mkdir()
    copy = into / path.name
    shutil.copyfile(path, copy)
    return row_sets(copy)


@pytest.mark.parametrize("kind", ["other_session", "page_size"])
def test_healthy_file_with_foreign_wal(sessions_dir: Path, tmp_path: Path, kind: str) -> None:
    sid, path = make_session(sessions_dir, turns=4)
    before = rows_alone(path, tmp_path / "alone")
    file_bytes = path.read_bytes()
    wal = other_session_wal(tmp_path) if kind == "other_session" else small_page_wal(tmp_path)
    put_wal(path, wal)

    p = run_cli("--sessions-dir", str(sessions_dir), "check", sid, "--json")
    assert p.returncode == 1, p.stderr
    s = json.loads(p.stdout)["sessions"][0]
    assert s["verdict"] == "corrupt"
    assert "foreign_wal" in {f["code"] for f in s["findings"]}

    p = run_cli("--sessions-dir", str(sessions_dir), "prune", sid, "--yes", "--json")
    assert "Traceback" not in p.stderr
    doc = json.loads(p.stdout)
    assert doc["removed"] == []
    assert "found 1" not in p.stdout
    assert path.exists()

    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    assert any("another database" in n for n in out.notes), out.notes
    assert out.corrupt_path is not None and out.corrupt_wal is not None
    assert Path(out.corrupt_path).read_bytes() == file_bytes
    assert Path(out.corrupt_wal).read_bytes() == wal
    assert not sidecar(path, "-wal").exists()
    after = row_sets(path)
    assert after == before  # every row of this session, nothing of the other's
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"


def test_damaged_file_with_foreign_wal_salvages_the_file(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = corpus.build_base(sessions_dir, revision=2)
    original = rows_alone(path, tmp_path / "alone")
    damage.zero_sector(path, damage.pages_of(path, "events", "leaf")[2], 3)
    put_wal(path, other_session_wal(tmp_path))
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    got = row_sets(path)
    kept = got["events"] & original["events"]
    assert got["events"] <= original["events"]  # nothing of the other session
    assert len(kept) >= 0.9 * len(original["events"])
    assert got["session_meta"] == original["session_meta"]
