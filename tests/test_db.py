"""The two openers against hostile files: each refusal is produced by a real defect."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import apsw
import pytest
import ulid

from agentdb import checks, db, errors
from agentdb.schema.revisions import KNOWN_REVISION
from agentdb.store import Event, Producer, SessionReader, SessionWriter
from tests.support import make_session


def _listing(d: Path) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for p in sorted(d.iterdir()):
        st = os.lstat(p)
        data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
        out[p.name] = (st.st_mode, st.st_size, data)
    return out


def test_readonly_open_leaves_directory_untouched(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    before = _listing(sessions_dir)
    with SessionReader(path) as r:
        assert r.info().session_id == sid
        assert r.event_count() == 18
    assert _listing(sessions_dir) == before


def test_symlink_is_refused(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    link = sessions_dir / f"{ulid.ULID()}.sqlite"
    link.symlink_to(path)
    with pytest.raises(errors.NotRegularFile, match="symbolic link"):
        db.open_readonly(link)
    with pytest.raises(errors.NotRegularFile):
        SessionWriter.open(sessions_dir, link.name[:-7])


def test_fifo_and_directory_are_refused(sessions_dir: Path) -> None:
    fifo = sessions_dir / f"{ulid.ULID()}.sqlite"
    os.mkfifo(fifo)
    with pytest.raises(errors.NotRegularFile, match="FIFO"):
        db.open_readonly(fifo)
    d = sessions_dir / f"{ulid.ULID()}.sqlite"
    d.mkdir()
    with pytest.raises(errors.NotRegularFile, match="directory"):
        db.open_readonly(d)


@pytest.mark.parametrize("target", ["", "-wal"])
def test_group_or_world_writable_is_refused(sessions_dir: Path, target: str) -> None:
    sid, path = make_session(sessions_dir)
    victim = path.with_name(path.name + target)
    if target:
        victim.write_bytes(b"")
        os.chmod(victim, 0o600)
    os.chmod(victim, 0o666)
    with pytest.raises(errors.InsecureFile) as e:
        db.open_readonly(path)
    assert str(victim) in str(e.value) and "chmod 600" in str(e.value)
    with pytest.raises(errors.InsecureFile):
        SessionWriter.open(sessions_dir, sid)


def test_file_owned_by_another_user_is_refused(sessions_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    sid, path = make_session(sessions_dir)
    os.chown(path, 12345, 12345)
    with pytest.raises(errors.InsecureFile, match="owned by uid 12345") as e:
        db.open_readonly(path)
    # the fix is to run as the owner, never to chown the harness's files to whoever runs agentdb
    assert "run agentdb as that user" in str(e.value) and "sudo -u 12345" in str(e.value)
    assert "chown 0" not in str(e.value) and f"chown {os.geteuid()}" not in str(e.value)
    report = checks.check_file(sessions_dir, sid)
    [f] = [f for f in report.findings if f.code == "insecure_owner"]
    assert "chown" not in f.message.split(";", 1)[1].replace("do not chown", "")


@pytest.mark.parametrize(
    "ddl,what",
    [
        (
            "CREATE TRIGGER t AFTER INSERT ON events BEGIN SELECT 1; END",
            "trigger",
        ),
        ("CREATE VIEW v AS SELECT * FROM events", "view"),
    ],
)
def test_triggers_and_views_are_refused(sessions_dir: Path, ddl: str, what: str) -> None:
    sid, path = make_session(sessions_dir)
    c = apsw.Connection(str(path))
    c.execute(ddl)
    c.close()
    with pytest.raises(errors.UnsafeSchema, match=what):
        db.open_readonly(path)
    with pytest.raises(errors.UnsafeSchema):
        SessionWriter.open(sessions_dir, sid)


def test_foreign_application_id_is_refused_and_untouched(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    c = apsw.Connection(str(path))
    c.execute("PRAGMA application_id = 7")
    c.close()
    before = path.read_bytes()
    with pytest.raises(errors.ForeignFile, match="0x7"):
        SessionReader(path)
    with pytest.raises(errors.ForeignFile):
        SessionWriter.open(sessions_dir, sid)
    assert path.read_bytes() == before


def test_too_new_is_refused_naming_both_versions(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    c = apsw.Connection(str(path))
    c.execute(f"PRAGMA user_version = {KNOWN_REVISION + 1}")  # the first revision it cannot read
    c.close()
    before = path.read_bytes()
    with pytest.raises(errors.TooNew) as e:
        SessionWriter.open(sessions_dir, sid)
    assert f"user_version {KNOWN_REVISION + 1} " in str(e.value)
    assert f"revisions up to {KNOWN_REVISION})" in str(e.value)
    assert path.read_bytes() == before


def test_not_a_database_is_unreadable(sessions_dir: Path) -> None:
    path = sessions_dir / f"{ulid.ULID()}.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    os.chmod(path, 0o600)
    with pytest.raises(errors.Unreadable):
        SessionReader(path)


def test_connections_are_hardened(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    conn = db.open_readonly(path)
    try:
        assert conn.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, -1) == 1
        assert conn.config(apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, -1) == 0
        assert conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, -1) == 0
        assert conn.config(apsw.SQLITE_DBCONFIG_ENABLE_VIEW, -1) == 0
        assert db.pragma(conn, "cell_size_check") == 1
        assert db.pragma(conn, "mmap_size") == 0
        assert conn.limit(apsw.SQLITE_LIMIT_LENGTH, -1) == db.MAX_VALUE
        with pytest.raises(apsw.ReadOnlyError):
            conn.execute("DELETE FROM events")
    finally:
        conn.close()


@pytest.mark.slow
def test_length_limit_caps_what_a_row_brings_in(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, status="running")
    with SessionWriter.open(sessions_dir, sid) as w:
        big = w.emit(Event("tool_result", Producer("tool", "shell", "1"), b"x" * 50_000))
    conn = db.open_readonly(path, max_length=10_000)
    try:
        assert db.scalar(conn, "SELECT length(payload) FROM events WHERE sequence = ?", (big,)) == (
            50_000
        )
        with pytest.raises(apsw.TooBigError):
            conn.execute("SELECT payload FROM events WHERE sequence = ?", (big,)).fetchall()
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("target", ["", "-wal", "-shm"])
def test_caller_stats_are_judged_like_fresh_ones(sessions_dir: Path, target: str) -> None:
    """open_readonly(stats=) refuses what the stats show, as it would after its own lstat."""
    _, path = make_session(sessions_dir)
    victim = path.with_name(path.name + target)
    if target:
        victim.write_bytes(b"")
    os.chmod(victim, 0o622)
    stats = db.file_stats(path)
    assert stats.db is not None and stats.wal_in_use == bool(target)
    given = [(code, str(e)) for code, e in db.security_problems(path, stats)]
    assert given and given == [(code, str(e)) for code, e in db.security_problems(path)]
    code, e = db.security_problems(path)[0]
    assert (code, e.file, e.fix) == ("insecure_mode", str(victim), f"run `chmod 600 {victim}`")
    assert str(e) == f"{victim}: mode 0622 lets group or others write it; run `chmod 600 {victim}`"
    with pytest.raises(errors.InsecureFile, match="chmod 600"):
        db.open_readonly(path, stats=stats)
    if target:
        victim.unlink()
        victim.symlink_to(path)
        with pytest.raises(errors.InsecureFile, match="not a regular file"):
            db.open_readonly(path, stats=db.file_stats(path))


def test_caller_stats_of_a_symlink_or_missing_file_are_refused(sessions_dir: Path) -> None:
    _, path = make_session(sessions_dir)
    link = sessions_dir / f"{ulid.ULID()}.sqlite"
    link.symlink_to(path)
    with pytest.raises(errors.NotRegularFile, match="symbolic link"):
        db.open_readonly(link, stats=db.file_stats(link))
    gone = sessions_dir / f"{ulid.ULID()}.sqlite"
    with pytest.raises(errors.SessionNotFound):
        db.open_readonly(gone, stats=db.file_stats(gone))


@pytest.mark.parametrize("name", ["plain-dir_1.x~", "a b?c#d%25e&f=g", "ünï"])
def test_readonly_open_of_a_directory_with_uri_characters(tmp_path: Path, name: str) -> None:
    """A sessions directory whose name holds characters a SQLite URI gives a meaning to (`?`,
    `#`, `%`, `&`, `=`, spaces, non-ASCII) is quoted; a plain one is used as it is. Either way
    the file named is the one opened, relative path or not."""
    d = tmp_path / name
    d.mkdir(mode=0o700)
    sid, path = make_session(d)
    conn = db.open_readonly(path)
    try:
        assert db.row(conn, "SELECT session_id FROM session_meta") == (sid,)
    finally:
        conn.close()
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        conn = db.open_readonly(Path(name) / path.name)
        try:
            assert db.row(conn, "SELECT session_id FROM session_meta") == (sid,)
        finally:
            conn.close()
    finally:
        os.chdir(old)


def test_has_moved_sees_a_rename_over_the_path(tmp_path: Path) -> None:
    """SQLITE_FCNTL_HAS_MOVED read without ctypes (the int's address from an array): False
    while the path names the open file, True once another file is renamed over it."""
    path = tmp_path / "a.sqlite"
    conn = db.open_private(path)
    try:
        conn.execute("CREATE TABLE t(x)")
        assert db.has_moved(conn) is False
        other = tmp_path / "b.sqlite"
        other.write_bytes(b"")
        os.replace(other, path)
        assert db.has_moved(conn) is True
    finally:
        conn.close()


def _journal_cases() -> Any:
    from hypothesis import strategies as st

    sizes = st.sampled_from([0, 1, 31, 32, 256, 511, 512, 1024, 3000, 4096, 65536, 131072])
    header = st.tuples(
        st.sampled_from([0, 1, 3, -1]),  # records
        st.sampled_from([0, 1, 2, 75]),  # original size in pages
        sizes,  # sector size
        sizes,  # page size
    )
    db_page = st.sampled_from([0, 1, 512, 1000, 4096, 65536 // 2])
    return st.tuples(header, db_page, st.integers(0, 40), st.sampled_from([28, 100, 511, 512]))


@pytest.mark.slow
def test_the_sqlite_layer_refuses_exactly_the_journals_check_calls_foreign() -> None:
    """db.journal_refused restates fileformat.journal_problem (db stays below the format
    readers): the two agree on every header, database page size, reserved bytes and length."""
    from hypothesis import given, settings

    from agentdb import fileformat

    @settings(max_examples=400, deadline=None)
    @given(_journal_cases())
    def agree(case: Any) -> None:
        (records, initial, sector, page), db_page, reserved, length = case
        journal = bytes.fromhex("d9d505f920a163d7") + b"".join(
            v.to_bytes(4, "big", signed=True) for v in (records, 0, initial, sector, page)
        )
        head = bytearray(b"SQLite format 3\x00".ljust(100, b"\0"))
        head[16:18] = (db_page if db_page != 65536 else 1).to_bytes(2, "big")
        head[20] = reserved
        expect = fileformat.journal_problem(bytes(head), journal, length) is not None
        assert db.journal_refused(bytes(head), journal, length) == expect

    agree()
