"""``check --changed``: only sessions without a recorded ok (of a full check, unless --quick),
or whose identity changed since it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from agentdb.cli.main import main
from agentdb.store import SessionWriter
from tests.salvage.corpus import d_flipped_bytes
from tests.support import make_session


def _settle() -> None:
    time.sleep(0.12)


def checked(capsys: Any, d: Path, *extra: str) -> list[str]:
    code = main(["--sessions-dir", str(d), "check", "--changed", "--json", *extra])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "have no recorded ok or changed since" in err
    return [s["session_id"] for s in json.loads(out)["sessions"]]


def test_check_changed(capsys: Any, sessions_dir: Path) -> None:
    a, _ = make_session(sessions_dir, turns=1)
    b, _ = make_session(sessions_dir, turns=1, status="running")
    c, path_c = make_session(sessions_dir, turns=12)
    _settle()
    assert checked(capsys, sessions_dir) == [a, b, c]  # never checked
    _settle()
    assert checked(capsys, sessions_dir) == []  # every one ok and unchanged
    w = SessionWriter.open(sessions_dir, b)
    w.set_status("completed")
    w.close()
    _settle()
    assert checked(capsys, sessions_dir) == [b]  # its identity changed
    _settle()
    assert checked(capsys, sessions_dir) == []
    st = os.stat(path_c)
    d_flipped_bytes(path_c)
    os.utime(path_c, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: ctime moved
    _settle()
    assert checked(capsys, sessions_dir) == [c]
    _settle()
    assert checked(capsys, sessions_dir) == [c]  # no recorded ok: checked until it is fixed


def test_a_quick_ok_is_not_a_full_ok(capsys: Any, sessions_dir: Path) -> None:
    a, _ = make_session(sessions_dir, turns=1)
    _settle()
    assert checked(capsys, sessions_dir, "--quick") == [a]
    _settle()
    assert checked(capsys, sessions_dir, "--quick") == []
    assert checked(capsys, sessions_dir) == [a]  # a full --changed wants a full ok
    _settle()
    assert checked(capsys, sessions_dir) == []


def test_changed_with_ids_is_a_usage_error(capsys: Any, sessions_dir: Path) -> None:
    a, _ = make_session(sessions_dir, turns=1)
    assert main(["--sessions-dir", str(sessions_dir), "check", "--changed", a]) == 2
    assert main(["--sessions-dir", str(sessions_dir), "check", "--changed", "--all"]) == 2
