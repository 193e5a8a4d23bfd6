"""A sessions directory whose resolved path is too long for SQLite (its unix VFS opens no file
whose full path is over ``paths.SQLITE_MAX_PATH`` bytes): every command and every writer call
says so once, up front — exit 2, naming the directory, the limit and the fix — and leaves
nothing behind (a create used to leave a 0-byte ``<ULID>.sqlite``; ``check`` called a healthy
session unreadable). Issue 29, item 5."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import apsw
import pytest

from agentdb import errors, paths
from agentdb.store import SessionWriter
from tests.runner import Agentdb
from tests.support import make_session


def _dir_of(base: Path, size: int) -> Path:
    """A directory under ``base`` whose resolved path is exactly ``size`` bytes."""
    d = os.path.realpath(base)
    while len(d) < size:
        room = size - len(d) - 1
        d += "/" + "d" * min(200, room if room <= 200 or room - 200 > 1 else room - 2)
    assert len(d) == size, (len(d), size)
    os.makedirs(d, mode=0o700)
    return Path(d)


def test_the_limit_is_sqlites(tmp_path: Path) -> None:
    """The constant is what SQLite on this machine accepts: a database path of
    SQLITE_MAX_PATH bytes opens, one byte more does not."""
    d = _dir_of(tmp_path, paths.SQLITE_MAX_PATH - 34)
    ok = d / ("a" * 33)
    conn = apsw.Connection(str(ok))
    conn.execute("PRAGMA journal_mode=wal")
    conn.execute("CREATE TABLE t(x)")
    conn.close()
    with pytest.raises(apsw.CantOpenError):
        apsw.Connection(str(d / ("a" * 34))).execute("CREATE TABLE t(x)")


COMMANDS = [
    ["check", "--all"],
    ["status"],
    ["sessions", "list"],
    ["recover", "--all"],
    ["migrate", "--all"],
    ["events", "ID"],
    ["report", "--html", "OUT"],
    ["prune", "ID", "--yes"],
]


# just over agentdb's limit (a job's longest name would not open), and past SQLite's own for a
# session file (the case: check said unreadable, create left a 0-byte file)
@pytest.fixture(params=[paths.MAX_SESSIONS_DIR + 1, 480])
def long_dir(
    tmp_path: Path, sessions_dir: Path, request: pytest.FixtureRequest
) -> tuple[Path, str]:
    """A healthy session moved into a directory over the limit."""
    sid, path = make_session(sessions_dir)
    d = _dir_of(tmp_path / "long", request.param)
    shutil.move(path, d / path.name)
    return d, sid


@pytest.mark.parametrize("argv", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_command_refuses_it_up_front(
    agentdb: Agentdb, long_dir: tuple[Path, str], tmp_path: Path, argv: list[str]
) -> None:
    d, sid = long_dir
    before = sorted(os.listdir(d))
    args = [sid if a == "ID" else str(tmp_path / "r.html") if a == "OUT" else a for a in argv]
    code, out, err = agentdb("--sessions-dir", str(d), *args)
    assert code == 2, (out, err)
    assert "Traceback" not in err
    line = err.strip()
    assert "\n" not in line, err
    assert str(d) in line and str(paths.SQLITE_MAX_PATH) in line and "shorter" in line
    assert sorted(os.listdir(d)) == before


def test_a_short_symlink_does_not_help(
    agentdb: Agentdb, long_dir: tuple[Path, str], tmp_path: Path
) -> None:
    d, _ = long_dir
    link = tmp_path / "short"
    link.symlink_to(d)
    code, _, err = agentdb("--sessions-dir", str(link), "check", "--all")
    assert code == 2 and "resolved" in err, err


def test_the_writer_refuses_and_leaves_nothing(tmp_path: Path, long_dir: tuple[Path, str]) -> None:
    d, sid = long_dir
    before = sorted(os.listdir(d))
    with pytest.raises(errors.UsageError) as exc:
        SessionWriter.create(d, profile="coder")
    assert str(d) in str(exc.value) and exc.value.exit_code == 2
    with pytest.raises(errors.UsageError):
        SessionWriter.open(d, sid)
    fresh = _dir_of(tmp_path / "fresh", len(os.path.realpath(d)))
    with pytest.raises(errors.UsageError):
        SessionWriter.create(fresh, profile="coder")
    assert sorted(os.listdir(d)) == before and os.listdir(fresh) == []


def test_at_the_limit_everything_works(agentdb: Agentdb, tmp_path: Path) -> None:
    d = _dir_of(tmp_path / "edge", paths.MAX_SESSIONS_DIR)
    sid, _ = make_session(d, revision=1)  # migrate keeps its backup beside it: the longest name
    code, out, err = agentdb("--sessions-dir", str(d), "migrate", "--all", "--json")
    assert code == 0, (out, err)
    assert '"migrated"' in out
    code, out, err = agentdb("--sessions-dir", str(d), "check", "--all", "--json")
    assert code == 0, (out, err)
    with SessionWriter.open(d, sid) as w:
        assert w.session_id == sid
