"""A ``-wal`` of an earlier generation of the same file beside it.

At bcf0498 the WAL's frames were valid in themselves (its own salts and checksums), so check
read it as a consistent earlier state (``ok``), recover left it (``healthy``) and the kernel's
open checkpointed the stale frames over the newer pages: the events the file alone held past
the WAL's state were lost for good. Now the state read through the WAL is compared with the
file alone (:func:`agentdb.db.wal_behind`: events are only appended, so this file's WAL never
drops one): such a WAL is ``foreign_wal``, never applied, and kept with the original.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest

from agentdb import checks, salvage
from agentdb.jobs import demo
from agentdb.paths import sidecar
from agentdb.store import SessionWriter
from tests.rows import row_sets
from tests.salvage import corpus
from tests.support import make_session


def stale_wal_beside(sessions_dir: Path, revision: int) -> tuple[str, Path, dict, bytes]:  # type: ignore[type-arg]
    """A session whose -wal of three turns ago (never checkpointed then) is put back beside it
    after four more turns were committed and checkpointed."""
    sid, path = make_session(sessions_dir, turns=10, revision=revision, status=None)
    w = SessionWriter.open(sessions_dir, sid)
    w.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    w.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    demo._turns(w, demo.MODEL_OLD, 3, seed=5)
    stale = sidecar(path, "-wal").read_bytes()
    w.close()
    w = SessionWriter.open(sessions_dir, sid)
    demo._turns(w, demo.MODEL_OLD, 4, seed=6)
    w.close()
    assert not sidecar(path, "-wal").exists()
    mine = row_sets(path)
    sidecar(path, "-wal").write_bytes(stale)
    os.chmod(sidecar(path, "-wal"), 0o600)
    return sid, path, mine, stale


@pytest.mark.parametrize("revision", [2, 3])
def test_an_earlier_generations_wal_is_never_applied(
    sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    sid, path, mine, stale = stale_wal_beside(sessions_dir, revision)
    result = checks.check_path(path, sid)
    assert result.verdict == "corrupt"
    assert "foreign_wal" in {f.code for f in result.findings}, result.findings
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", out.notes
    assert out.corrupt_wal is not None and Path(out.corrupt_wal).read_bytes() == stale
    assert corpus.at_revision(row_sets(path), revision) == corpus.at_revision(mine, revision)
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"


def test_the_kernels_open_never_checkpoints_an_earlier_generations_wal(
    sessions_dir: Path,
) -> None:
    from agentdb.kernel import open_session

    sid, path, mine, stale = stale_wal_beside(sessions_dir, 3)
    open_session(sessions_dir, sid).close()
    assert row_sets(path) == mine
    kept = sidecar(path.with_name(path.name + ".corrupt"), "-wal")
    assert kept.read_bytes() == stale
