"""Errors carry their message's parts as fields (path, problem, fix); ``str(e)`` is still the
one line ``<path>: <problem>; <fix>``, so no caller cuts the line apart again."""

from __future__ import annotations

import errno
from pathlib import Path

import apsw
import pytest

from agentdb import db, errors, fsutil


def test_parts_make_the_one_line() -> None:
    e = errors.Corrupt(problem="database is corrupt (x)", fix="run `agentdb recover`", path="/s/a")
    assert str(e) == "/s/a: database is corrupt (x); run `agentdb recover`"
    assert (e.path, e.file, e.problem, e.fix) == ("/s/a", "/s/a", "database is corrupt (x)", e.fix)
    assert e.detail == "database is corrupt (x); run `agentdb recover`"
    bare = errors.Unreadable(problem="cannot open the database (x)", path="/s/a")
    assert str(bare) == "/s/a: cannot open the database (x)" and bare.fix is None


@pytest.mark.parametrize(
    ("message", "path", "file", "problem", "fix"),
    [
        ("/s/a.sqlite: broken; run it", "/s/a.sqlite", "/s/a.sqlite", "broken", "run it"),
        (
            "/s/a.sqlite-wal: mode 0666; chmod",
            "/s/a.sqlite",
            "/s/a.sqlite-wal",
            "mode 0666",
            "chmod",
        ),
        ("/s/a.sqlite: no fix here", None, "/s/a.sqlite", "no fix here", None),
        ("give one or more session ids", None, None, "give one or more session ids", None),
        ("--status 'x': one of a, b", None, None, "--status 'x': one of a, b", None),
    ],
)
def test_a_written_line_is_read_once(
    message: str, path: str | None, file: str | None, problem: str, fix: str | None
) -> None:
    e = errors.AgentdbError(message, path=path)
    assert str(e) == message
    assert (e.file, e.problem, e.fix) == (file, problem, fix)


def test_translated_sqlite_errors_keep_their_line(tmp_path: Path) -> None:
    p = tmp_path / "x.sqlite"
    e = db.translate(apsw.CorruptError("database disk image is malformed"), p)
    assert str(e) == (
        f"{p}: database is corrupt (database disk image is malformed); run `agentdb recover` on it"
    )
    assert e.problem == "database is corrupt (database disk image is malformed)"
    assert e.fix == "run `agentdb recover` on it"
    full = fsutil.errno_error(errno.ENOSPC, p, "write")
    assert str(full).startswith(f"{p}: cannot write: ") and full.fix and full.fix in str(full)
    assert str(full) == f"{p}: {full.problem}; {full.fix}"
    assert isinstance(full, errors.Full)
