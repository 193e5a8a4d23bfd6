"""The one module of row and damage helpers: read every row of a session file, and damage a
real file's bytes in place (deterministic, no SQLite involved in the damage), or change one
value behind the content hash's back through SQLite (what a flip inside a payload does, and
what integrity_check cannot see).

Reading never changes the file it reads: in place it opens ``immutable`` (no WAL beside it) or
read-only; with ``private_copy=True`` it reads a copy of the file and its ``-wal`` (so reading
neither checkpoints nor removes the original's WAL, and creates no ``-shm`` beside it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import apsw

from agentdb.paths import sidecar
from agentdb.schema.revisions import TABLES


def _read(path: Path, immutable: bool) -> dict[str, list[tuple[object, ...]]]:
    conn = apsw.Connection(
        f"file:{path.absolute()}?{'immutable=1' if immutable else 'mode=ro'}",
        flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
    )
    try:
        return {
            t: [tuple(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY rowid")] for t in TABLES
        }
    finally:
        conn.close()


def all_rows(path: Path, *, private_copy: bool = False) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every session table in rowid order, committed WAL frames included."""
    wal = sidecar(path, "-wal")
    if not private_copy:
        return _read(path, immutable=not wal.exists())
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        if wal.exists():
            shutil.copyfile(wal, sidecar(copy, "-wal"))
        return _read(copy, immutable=False)


def row_sets(path: Path) -> dict[str, set[tuple[object, ...]]]:
    """Every row SQLite sees in ``path`` (+ its WAL) as sets, read from a private copy."""
    return {t: set(rows) for t, rows in all_rows(path, private_copy=True).items()}


# ---------------------------------------------------------------------------------- damage


def page_size(path: Path) -> int:
    """The page size the header of ``path`` declares."""
    with open(path, "rb") as f:
        f.seek(16)
        raw = int.from_bytes(f.read(2), "big")
    return 65536 if raw == 1 else raw


def write_at(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def read_at(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def zero_page(path: Path, pgno: int) -> None:
    ps = page_size(path)
    write_at(path, (pgno - 1) * ps, bytes(ps))


def flip(path: Path, offset: int, length: int) -> None:
    """Flip every bit of ``length`` bytes at ``offset``."""
    write_at(path, offset, bytes(b ^ 0xFF for b in read_at(path, offset, length)))


def payload_without_hash(path: Path, sequence: int = 3) -> None:
    """Change one event's payload and not its content hash."""
    c = apsw.Connection(str(path))
    c.execute("UPDATE events SET payload = X'00112233' WHERE sequence = ?", (sequence,))
    c.close()


def invalid_text(path: Path, sequence: int = 5) -> None:
    """Give one event a timestamp that is not valid UTF-8 ("2026" + a lone lead byte + "(")."""
    c = apsw.Connection(str(path))
    c.execute(
        "UPDATE events SET timestamp = CAST(x'32303236c328' AS TEXT) WHERE sequence = ?",
        (sequence,),
    )
    c.close()
