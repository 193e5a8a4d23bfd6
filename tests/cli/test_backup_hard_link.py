"""``backup ID --to DIR`` where ``DIR/<id>.sqlite`` is a hard link to the session itself: not
``unchanged`` (there was no copy — every write to the session changed it too) but replaced by
an independent, verified copy, a separate inode; the session keeps its own name and bytes.
And ``check`` warns about a session file with other names, saying it is no backup. Issue 29,
item 5."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from agentdb.store import Event, Producer, SessionWriter
from tests.rows import all_rows
from tests.runner import run_cli
from tests.support import make_session

TOOL = Producer("tool", "shell", "2.0.0")


def _backup(sessions_dir: Path, dest: Path) -> dict[str, object]:
    r = run_cli("--sessions-dir", str(sessions_dir), "backup", "--all", "--to", str(dest), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["sessions"]) == 1
    out: dict[str, object] = doc["sessions"][0]
    return out


def test_a_hard_link_to_the_session_is_replaced_by_an_independent_copy(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir)
    dest = tmp_path / "backups"
    dest.mkdir(mode=0o700)
    copy = dest / path.name
    os.link(path, copy)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    for _ in range(2):  # and again: the second run finds an independent copy
        out = _backup(sessions_dir, dest)
        st, cst = os.stat(path), os.stat(copy)
        assert (st.st_dev, st.st_ino) != (cst.st_dev, cst.st_ino)
        assert st.st_nlink == 1 and cst.st_nlink == 1
        assert all_rows(copy) == all_rows(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    # the session's writes no longer reach the copy
    with SessionWriter.open(sessions_dir, sid) as w:
        w.set_status("running")
        w.emit(Event("tool_result", TOOL, b"after the backup"))
    assert all_rows(copy) != all_rows(path)
    assert out["outcome"] == "unchanged"  # the second run: a real copy, rows the same


def test_the_first_run_says_what_it_replaced(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir)
    dest = tmp_path / "backups"
    dest.mkdir(mode=0o700)
    os.link(path, dest / path.name)
    out = _backup(sessions_dir, dest)
    assert out["outcome"] == "copied"
    assert "hard link" in str(out["message"])


def test_check_warns_that_a_hard_link_is_no_backup(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir)
    os.link(path, tmp_path / "elsewhere.sqlite")
    r = run_cli("--sessions-dir", str(sessions_dir), "check", sid, "--json")
    doc = json.loads(r.stdout)
    (finding,) = [f for f in doc["sessions"][0]["findings"] if f["code"] == "hard_linked"]
    assert "not a backup" in finding["message"]
