"""SQLite's errors keep their kind when translated, so a harness can tell "skip this session"
(:class:`SessionUnusable`) from "retry later" (:class:`Retryable`) from a bug in the caller.

Every error here is raised by real SQLite on a real file; nothing is mocked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from agentdb import db, errors
from agentdb.store import Event, Producer, SessionReader, SessionWriter
from tests.rows import all_rows
from tests.support import SRC, make_session

TOOL = Producer("tool", "shell", "1.0")


def _raised(fn: object) -> apsw.Error:
    try:
        fn()  # type: ignore[operator]
    except apsw.Error as e:
        return e
    raise AssertionError("no SQLite error")


def test_hierarchy_separates_skip_from_retry() -> None:
    for cls in (
        errors.Unreadable,
        errors.Corrupt,
        errors.ForeignFile,
        errors.TooNew,
        errors.UnsafeSchema,
    ):
        assert issubclass(cls, errors.SessionUnusable)
        assert not issubclass(cls, errors.Retryable)
    for cls in (errors.Busy, errors.SessionBusy, errors.Full):
        assert issubclass(cls, errors.Retryable)
        assert not issubclass(cls, errors.SessionUnusable)
    for cls in (
        errors.Misuse,
        errors.ThreadingViolation,
        errors.ConstraintViolation,
        errors.DiskIOError,
        errors.ReadOnly,
    ):
        assert not issubclass(cls, errors.SessionUnusable | errors.Retryable)
        assert issubclass(cls, errors.AgentdbError)


def test_misuse_is_not_unreadable(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir)
    conn = apsw.Connection(str(path))
    try:
        conn.execute("BEGIN")
        e = _raised(lambda: conn.execute("BEGIN"))
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    err = db.translate(e, path)
    assert type(err) is errors.Misuse, err
    assert str(path) in str(err) and "transaction within a transaction" in str(err)
    closed = _raised(lambda: conn.execute("SELECT 1"))
    assert type(db.translate(closed, path)) is errors.Misuse


def test_threading_violation_has_its_own_type(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir)
    conn = apsw.Connection(str(path))
    cur = conn.cursor()
    conn.create_scalar_function("reenter", lambda: cur.execute("SELECT 1").fetchall() and 1)
    try:
        e = _raised(lambda: cur.execute("SELECT reenter()").fetchall())
    finally:
        conn.close()
    assert isinstance(e, apsw.ThreadingViolationError)
    err = db.translate(e, path)
    assert type(err) is errors.ThreadingViolation
    assert isinstance(err, errors.Misuse)


def test_constraint_violation_has_its_own_type(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir)
    conn = apsw.Connection(str(path))
    try:
        e = _raised(lambda: conn.execute("INSERT INTO events SELECT * FROM events LIMIT 1"))
    finally:
        conn.close()
    err = db.translate(e, path)
    assert type(err) is errors.ConstraintViolation, err
    assert not isinstance(err, errors.SessionUnusable)


def test_full_is_retryable(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, status="running")
    with SessionWriter.open(sessions_dir, sid) as w:
        pages = db.pragma(w.conn, "page_count")
        w.conn.execute(f"PRAGMA max_page_count={int(pages)}")  # SQLite's own "disk is full"
        before = all_rows(path)["events"]
        with pytest.raises(errors.Full) as got:
            w.emit(Event("tool_result", TOOL, os.urandom(200_000)))
        assert isinstance(got.value, errors.Retryable)
        assert str(path) in str(got.value)
        assert all_rows(path)["events"] == before  # nothing written
        w.conn.execute("PRAGMA max_page_count=1073741823")
        w.emit(Event("tool_result", TOOL, b"after"))  # the same writer goes on
    assert len(all_rows(path)["events"]) == len(before) + 1


def test_read_only_has_its_own_type(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        e = _raised(lambda: conn.execute("DELETE FROM events"))
    finally:
        conn.close()
    assert type(db.translate(e, path)) is errors.ReadOnly


_EFBIG = r"""
import resource, signal, sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb import errors
from agentdb.store import Event, Producer, SessionWriter
w = SessionWriter.open(Path(sys.argv[1]), sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
size = w.path.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 8192, resource.RLIM_INFINITY))
try:
    w.emit(Event("tool_result", Producer("tool", "shell", "1"), bytes(1_000_000)))
except errors.AgentdbError as e:
    print(type(e).__name__, isinstance(e, errors.SessionUnusable), e)
"""


@pytest.mark.slow
def test_io_error_is_not_unreadable(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, status="running")
    r = subprocess.run(
        [sys.executable, "-c", _EFBIG, str(sessions_dir), sid, str(SRC)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    name, unusable, message = r.stdout.split(" ", 2)
    assert name == "DiskIOError", r.stdout
    assert unusable == "False"
    assert str(path) in message


@pytest.mark.slow
def test_corrupt_and_busy_keep_their_types(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir)
    a = apsw.Connection(str(path))
    b = apsw.Connection(str(path))
    try:
        a.execute("BEGIN IMMEDIATE")
        e = _raised(lambda: b.execute("BEGIN IMMEDIATE"))
        a.execute("ROLLBACK")
    finally:
        a.close()
        b.close()
    assert type(db.translate(e, path)) is errors.Busy
    with open(path, "r+b") as f:
        f.write(b"not a database at all, not at all")
    with pytest.raises(errors.Unreadable):
        SessionReader(path)


# ------------------------------------------------------------------------------ one size cap


@pytest.mark.slow
def test_writer_refuses_a_payload_over_max_value_naming_the_limit(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    before = all_rows(path)["events"]
    with SessionWriter.open(sessions_dir, sid) as w:
        with pytest.raises(errors.ValueTooLarge) as got:
            w.emit(Event("tool_result", TOOL, bytes(db.MAX_VALUE + 1)))
        assert str(db.MAX_VALUE) in str(got.value) and "MAX_VALUE" in str(got.value)
        with pytest.raises(errors.ValueTooLarge):
            w.emit_batch(
                [
                    Event("tool_result", TOOL, b"small"),
                    Event("tool_result", Producer("tool", "x" * (db.MAX_VALUE + 1), "1"), b""),
                ]
            )
    assert all_rows(path)["events"] == before  # nothing written


@pytest.fixture
def fast_sessions_dir(tmp_path: Path) -> Iterator[Path]:
    """A sessions directory on tmpfs when there is one: the 256 MiB tests' fsyncs cost nothing."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        yield tmp_path / "sessions"
        return
    root = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="agentdb-test-"))
    try:
        yield root / "sessions"
    finally:
        shutil.rmtree(root)


@pytest.mark.slow
def test_max_value_is_accepted_by_the_writer_and_every_reader(fast_sessions_dir: Path) -> None:
    """The boundary: a payload of exactly MAX_VALUE bytes is written and read back (a byte
    more is refused on write, above, and on read: ``test_db.test_length_limit_caps...``)."""
    sessions_dir = fast_sessions_dir
    sid, path = make_session(sessions_dir, turns=1, status="running")
    with SessionWriter.open(sessions_dir, sid) as w:
        seq = w.emit(Event("tool_result", TOOL, bytes(db.MAX_VALUE)))
    with SessionReader(str(path)) as r:
        (row,) = r.events(after=seq - 1).rows
        assert row.payload_length == db.MAX_VALUE and row.truncated
    # readers refuse one byte more (in another writer's file): the same constant
    conn = db.open_readonly(path)
    try:
        assert conn.limit(apsw.SQLITE_LIMIT_LENGTH, -1) == db.MAX_VALUE
    finally:
        conn.close()


# ------------------------------------------------------------------------------ paths


@pytest.mark.slow
def test_str_and_pathlike_directories_are_accepted(sessions_dir: Path) -> None:
    w = SessionWriter.create(str(sessions_dir), profile="coder")
    w.emit(Event("tool_result", TOOL, b"a"))
    w.close()

    class Dir:
        def __fspath__(self) -> str:
            return str(sessions_dir)

    with SessionWriter.open(str(sessions_dir), w.session_id) as w2:
        w2.emit(Event("tool_result", TOOL, b"b"))
    with SessionWriter.open(Dir(), w.session_id) as w3:
        w3.emit(Event("tool_result", TOOL, b"c"))
    with SessionReader.open(str(sessions_dir), w.session_id) as r:
        assert r.event_count() == 3
    with SessionReader.open(Dir(), w.session_id) as r:
        assert isinstance(r.path, Path)
        assert r.info().session_id == w.session_id
