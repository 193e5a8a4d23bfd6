"""Real SQLite files (made with apsw) for the fileformat tests."""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import apsw
import pytest

SCHEMA = (
    "CREATE TABLE events(sequence INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, "
    "kind TEXT NOT NULL, payload BLOB NOT NULL)"
)

Row = tuple[int, str, str, bytes]


def payload_for(i: int) -> bytes:
    """Deterministic payloads: mostly small, some spilling into one or several overflow pages."""
    rnd = random.Random(i)
    size = [12, 200, 10_000, 3_000, 45, 70_000, 4_070, 1][i % 8]
    return rnd.randbytes(size)


def insert_rows(con: apsw.Connection, start: int, count: int) -> None:
    with con:
        for i in range(start, start + count):
            con.execute(
                "INSERT INTO events(id, kind, payload) VALUES (?, ?, ?)",
                (f"ev-{i:05d}", ["user", "tool_call", "assistant", "é✓"][i % 4], payload_for(i)),
            )


def select_rows(path: Path) -> list[Row]:
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [tuple(r) for r in con.execute("SELECT * FROM events ORDER BY sequence")]
    finally:
        con.close()


def open_copy(tmp: Path, db: bytes, wal: bytes | None = None, name: str = "copy") -> list[Row]:
    """What SQLite reads from the given database (and WAL) bytes."""
    d = tmp / name
    d.mkdir()
    (d / "x.db").write_bytes(db)
    if wal is not None:
        (d / "x.db-wal").write_bytes(wal)
    con = apsw.Connection(str(d / "x.db"))
    try:
        return [tuple(r) for r in con.execute("SELECT * FROM events ORDER BY sequence")]
    finally:
        con.close()


def make_db(path: Path, page_size: int = 4096, rows: int = 40, encoding: str = "UTF-8") -> Path:
    con = apsw.Connection(str(path))
    con.execute(f"PRAGMA page_size={page_size}")
    con.execute(f"PRAGMA encoding='{encoding}'")
    con.execute("PRAGMA user_version=7")
    con.execute("PRAGMA application_id=1234567")
    con.execute(SCHEMA)
    insert_rows(con, 0, rows)
    con.close()
    return path


@dataclass
class WalFiles:
    """A WAL-mode database whose data is (partly) still in the copied -wal."""

    db: bytes  # the database file while the connection was open
    wal: bytes  # the -wal copied aside while the connection was open
    rows: list[Row]  # what SQLite read right before the copy
    tail_commits: int  # number of trailing one-row commits


def make_wal(tmp: Path, *, page_size: int = 4096, tail_commits: int = 5) -> WalFiles:
    """Base rows checkpointed, more rows in the WAL, then single-row commits of small rows."""
    path = tmp / "wal.db"
    con = apsw.Connection(str(path))
    con.execute(f"PRAGMA page_size={page_size}")
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute(SCHEMA)
    insert_rows(con, 0, 10)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    insert_rows(con, 10, 15)
    for i in range(tail_commits):
        with con:
            con.execute(
                "INSERT INTO events(id, kind, payload) VALUES (?, 'tail', ?)",
                (f"tail-{i}", bytes([i]) * 20),
            )
    rows = [tuple(r) for r in con.execute("SELECT * FROM events ORDER BY sequence")]
    db, wal = path.read_bytes(), Path(str(path) + "-wal").read_bytes()
    con.close()
    return WalFiles(db, wal, rows, tail_commits)


@pytest.fixture(scope="session")
def db4096(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_db(tmp_path_factory.mktemp("db4096") / "events.db")


@pytest.fixture(scope="session")
def db1024(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_db(tmp_path_factory.mktemp("db1024") / "events.db", page_size=1024)


@pytest.fixture()
def wal_files(tmp_path: Path) -> Iterator[WalFiles]:
    yield make_wal(tmp_path)
    shutil.rmtree(tmp_path / "copy", ignore_errors=True)
