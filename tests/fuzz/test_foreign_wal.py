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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentdb import checks, salvage
from agentdb.checks import walevidence
from agentdb.fileformat.wal import scan_wal
from agentdb.jobs import demo
from agentdb.paths import sidecar
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.store import Event, SessionWriter
from tests.fuzz import damage
from tests.rows import row_sets
from tests.runner import run_cli
from tests.salvage import corpus
from tests.support import make_session


def other_session_wal(root: Path, revision: int = CURRENT_REVISION) -> bytes:
    """The -wal of another session, holding commits (its writer copied while open)."""
    w = SessionWriter.create(root / "other", profile="coder", revision=revision)
    demo._turns(w, demo.MODEL_OLD, 2, seed=5)
    w.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    w.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    demo._turns(w, demo.MODEL_CACHED, 4, seed=6)
    w.set_status("completed")
    data = sidecar(w.path, "-wal").read_bytes()
    w.close()
    return data


def small_page_wal(root: Path, page_size: int = 1024) -> bytes:
    """The -wal of a database with another page size (smaller or larger than the session's)."""
    p = root / "small.db"
    root.mkdir(parents=True, exist_ok=True)
    conn = apsw.Connection(str(p))
    conn.execute(
        f"PRAGMA page_size={page_size}; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; "
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


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["other_session", "page_size", "larger_page_size"])
def test_healthy_file_with_foreign_wal(sessions_dir: Path, tmp_path: Path, kind: str) -> None:
    sid, path = make_session(sessions_dir, turns=4)
    before = rows_alone(path, tmp_path / "alone")
    file_bytes = path.read_bytes()
    if kind == "other_session":
        wal = other_session_wal(tmp_path)
    else:  # the session's pages are 4096 bytes
        wal = small_page_wal(tmp_path, 1024 if kind == "page_size" else 65536)
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


@pytest.mark.slow
@pytest.mark.parametrize("other", [2, 3])
@pytest.mark.parametrize("revision", [2, 3])
def test_damaged_file_with_foreign_wal_salvages_the_file(
    sessions_dir: Path, tmp_path: Path, other: int, revision: int
) -> None:
    """``revision``: the file's; ``other``: the revision of the session whose -wal it is
    (revision 3's events records have 12 columns: they are evidence too, and none of them is
    ever taken as this file's)."""
    sid, path = corpus.build_base(sessions_dir, revision=revision)
    original = rows_alone(path, tmp_path / "alone")
    damage.zero_sector(path, damage.pages_of(path, "events", "leaf")[2], 3)
    put_wal(path, other_session_wal(tmp_path, other))
    out = salvage.recover_session(sessions_dir, sid)
    assert out.outcome == "recovered", out.notes
    got = corpus.at_revision(row_sets(path), revision)  # the replacement: current revision
    kept = got["events"] & original["events"]
    assert got["events"] <= original["events"]  # nothing of the other session
    assert len(kept) >= 0.9 * len(original["events"])
    assert got["session_meta"] == original["session_meta"]


@pytest.mark.slow
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.integers(0, 6),
    after=st.integers(1, 12),
    spill=st.sampled_from([0, 3000, 9000]),
    seed=st.integers(0, 1000),
)
def test_own_wal_is_never_evidence(
    tmp_path_factory: pytest.TempPathFactory, before: int, after: int, spill: int, seed: int
) -> None:
    """A session's own WAL never gives an existing sequence another id, however its pages split
    and move: events_rewritten stays silent on any checkpoint point and any growth after it."""
    root = tmp_path_factory.mktemp("own")
    w = SessionWriter.create(root, profile="coder")
    try:
        demo._turns(w, demo.MODEL_OLD, before, seed=seed)
        w.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        w.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
        demo._turns(w, demo.MODEL_CACHED, after, seed=seed + 1)
        for _ in range(after):
            w.emit(Event("tool_result", demo.SHELL, os.urandom(spill // 2).hex().encode()))
        scan = scan_wal(sidecar(w.path, "-wal").read_bytes())
        assert scan.valid_frames
        assert walevidence.events_rewritten(scan, w.path) is None
    finally:
        w.close()


@pytest.mark.slow
@pytest.mark.parametrize("other_revision", [2, 3])
def test_other_sessions_events_on_other_pages_are_evidence(
    tmp_path: Path, other_revision: int
) -> None:
    """Another session's WAL whose events leaves lie where this file keeps none (its own
    schema on page 1 points elsewhere): the sequences are looked up in this file's own events
    b-tree, and most carry other ids."""
    mine = SessionWriter.create(tmp_path / "mine", profile="coder")
    # big payloads first: this file's low pages past its tables' roots are overflow pages
    for _ in range(6):
        mine.emit(Event("tool_result", demo.SHELL, os.urandom(2000).hex().encode()))
    demo._turns(mine, demo.MODEL_OLD, 6, seed=1)
    mine.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    path = mine.path
    mine.close()
    other = SessionWriter.create(tmp_path / "other", profile="coder", revision=other_revision)
    other.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    demo._turns(other, demo.MODEL_OLD, 12, seed=2)  # small events: its leaves on those pages
    scan = scan_wal(sidecar(other.path, "-wal").read_bytes())
    other.close()
    why = walevidence.events_rewritten(scan, path)
    assert why is not None and "other ids" in why
