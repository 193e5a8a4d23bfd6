"""A ``-journal`` beside a session that is not a regular file (a FIFO, a symlink, a directory).

SQLite opens and reads ``<id>.sqlite-journal`` whenever a writer opens a file without a WAL
(the hot-journal test): on a FIFO the kernel's open blocked forever, a symlink's target was
read as a journal and the open ended in "damaged and unsalvageable (healthy)", while `check`
called the session ok. Now the writer refuses it before SQLite sees it and `check` says
``insecure`` naming the sidecar, like a ``-wal`` or ``-shm`` that is not a regular file.
Real processes with a timeout: the open blocked inside SQLite, where no signal reaches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runner import run_cli
from tests.support import SRC, make_session

pytestmark = pytest.mark.slow

_OPEN = """
import sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb import errors, kernel
try:
    kernel.open_session(Path(sys.argv[1]), sys.argv[2]).close()
    print("opened")
except errors.AgentdbError as e:
    print(type(e).__name__, e)
"""


def _journal(path: Path, kind: str, target: Path) -> Path:
    j = Path(f"{path}-journal")
    if kind == "fifo":
        os.mkfifo(j)
    elif kind == "symlink":
        target.write_bytes(b"not a journal\n" * 100)
        os.symlink(target, j)
    else:
        j.mkdir()
    return j


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_kernel_open_refuses_a_journal_that_is_not_a_regular_file(
    sessions_dir: Path, tmp_path: Path, kind: str
) -> None:
    sid, path = make_session(sessions_dir)
    target = tmp_path / "elsewhere"
    _journal(path, kind, target)
    before = target.read_bytes() if kind == "symlink" else None
    r = subprocess.run(
        [sys.executable, "-c", _OPEN, str(sessions_dir), sid, str(SRC)],
        capture_output=True,
        text=True,
        timeout=60,  # the FIFO case blocked forever before
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("InsecureFile "), r.stdout
    assert "-journal" in r.stdout and "not a regular file" in r.stdout
    # Nothing was recovered or renamed, and the link's target was not touched.
    assert sorted(p.name for p in sessions_dir.iterdir()) == [path.name, f"{path.name}-journal"]
    if before is not None:
        assert target.read_bytes() == before


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_check_calls_a_journal_that_is_not_a_regular_file_insecure(
    sessions_dir: Path, tmp_path: Path, kind: str
) -> None:
    sid, path = make_session(sessions_dir)
    _journal(path, kind, tmp_path / "elsewhere")
    for quick in ([], ["--quick"]):
        r = run_cli("--sessions-dir", str(sessions_dir), "check", "--json", *quick, sid)
        assert r.returncode == 1, r.stderr
        (s,) = json.loads(r.stdout)["sessions"]
        assert s["verdict"] == "insecure"
        found = {f["code"]: f["message"] for f in s["findings"]}
        assert "-journal" in found["insecure_sidecar"]
