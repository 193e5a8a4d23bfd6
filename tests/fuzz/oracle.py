"""SQLite as the oracle: what SQLite itself reads from a file, and what its `.recover` keeps.

Every read is of a private copy (the file with its ``-wal`` and ``-journal``, which a normal open
applies or rolls back), so the file under test never changes. TEXT is read as its stored bytes
(``CAST(col AS BLOB)``) with its type beside it, so invalid UTF-8 is a value to compare, never an
exception.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from agentdb.hashing import HASHED_COLUMNS, event_hash_raw

TABLES = ("events", "session_meta", "cost_ledger", "plan_items", "producers")
# revision 3's two more tables (design §5, §6): with TABLES, every table of a revision-3 file
CHAIN_TABLES = ("session_chain", "chain_gaps")
# the columns of each table a revision-3 row carries its stored hashes in (design §2)
HASH_COLUMNS = {
    "events": ("content_hash", "prev_hash", "chain_hash"),
    "cost_ledger": ("content_hash",),
    "plan_items": ("content_hash",),
    "producers": ("content_hash",),
}
SIDECARS = ("-wal", "-journal")

Row = tuple[object, ...]


@dataclass
class Rows:
    """Every row of every session table: each value as (type, value); TEXT as bytes."""

    columns: dict[str, list[str]] = field(default_factory=dict)
    rows: dict[str, set[Row]] = field(default_factory=dict)

    def count(self, table: str) -> int:
        return len(self.rows.get(table, ()))

    def sequence(self, row: Row) -> int | None:
        cols = self.columns["events"]
        v = row[cols.index("sequence")] if "sequence" in cols else None
        return v[1] if isinstance(v, tuple) and isinstance(v[1], int) else None


def _select(table: str, cols: list[str]) -> str:
    parts = []
    for c in cols:
        parts.append(f'typeof("{c}")')
        parts.append(f'CASE typeof("{c}") WHEN \'text\' THEN CAST("{c}" AS BLOB) ELSE "{c}" END')
    return f"SELECT {', '.join(parts)} FROM {table}"


def _columns(conn: apsw.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]


def _pairs(r: tuple[object, ...]) -> Row:
    return tuple((r[i], r[i + 1]) for i in range(0, len(r), 2))


def key(table: str, row: Row) -> Row:
    """What names a row of ``table`` across versions of it: its integer key (``sequence``,
    ``session_id``), for producers (category, name, version)."""
    return row[:3] if table == "producers" else row[:1]


def private_copy(path: Path, into: Path, sidecars: tuple[str, ...] = SIDECARS) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    dst = into / path.name
    shutil.copyfile(path, dst)
    for s in sidecars:
        src = path.with_name(path.name + s)
        if src.is_file():
            shutil.copyfile(src, dst.with_name(dst.name + s))
    return dst


def read_rows(path: Path, columns: dict[str, list[str]] | None = None) -> Rows:
    """Every row SQLite presents (WAL applied, hot journal rolled back), from a private copy.
    Raises apsw.Error (or a subclass) when SQLite cannot read them all."""
    with tempfile.TemporaryDirectory(prefix="fuzz-read-") as d:
        copy = private_copy(path, Path(d))
        conn = apsw.Connection(str(copy))
        try:
            out = Rows()
            for t in TABLES:
                cols = columns[t] if columns else _columns(conn, t)
                out.columns[t] = cols
                out.rows[t] = {_pairs(tuple(r)) for r in conn.execute(_select(t, cols))}
            return out
        finally:
            conn.close()


def columns_of(path: Path, tables: tuple[str, ...] = TABLES) -> dict[str, list[str]]:
    """Each table's columns as the file declares them (a table it lacks: no columns). Select
    only these: SQLite reads an unknown double-quoted name as a string literal, not an error."""
    with tempfile.TemporaryDirectory(prefix="fuzz-cols-") as d:
        conn = apsw.Connection(str(private_copy(path, Path(d))))
        try:
            return {t: _columns(conn, t) for t in tables}
        finally:
            conn.close()


def state_digest(rows: Rows) -> str:
    """One digest of every table's columns and rows, independent of row order: two files
    present the same state exactly when their digests are equal."""
    h = hashlib.sha256()
    for t in sorted(rows.rows):
        h.update(repr((t, rows.columns.get(t))).encode())
        for r in sorted(repr(x) for x in rows.rows[t]):
            h.update(r.encode())
            h.update(b"\0")
    return h.hexdigest()


def read_state(path: Path, sidecars: tuple[str, ...] = SIDECARS) -> Rows | None:
    """Every row of every table of a revision-3 file (TABLES and CHAIN_TABLES, each with the
    columns the file declares) as SQLite presents it, from a private copy; None when SQLite
    cannot read them all (or a table is missing)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-state-") as d:
        copy = private_copy(path, Path(d), sidecars)
        try:
            conn = apsw.Connection(str(copy))
        except apsw.Error:
            return None
        try:
            out = Rows()
            for t in TABLES + CHAIN_TABLES:
                cols = _columns(conn, t)
                if not cols:
                    return None
                out.columns[t] = cols
                out.rows[t] = {_pairs(tuple(r)) for r in conn.execute(_select(t, cols))}
            return out
        except (apsw.Error, UnicodeDecodeError):
            return None
        finally:
            conn.close()


def state_changes(before: Rows, after: Rows) -> str:
    """Which tables differ and how (rows only in ``before`` / only in ``after``): for
    messages."""
    out = []
    for t in TABLES + CHAIN_TABLES:
        a, b = before.rows.get(t, set()), after.rows.get(t, set())
        if before.columns.get(t) != after.columns.get(t):
            out.append(f"{t} columns {after.columns.get(t)}")
        elif a != b:
            out.append(f"{t} -{len(a - b)}+{len(b - a)}")
    return ", ".join(out) or "none"


@dataclass
class Judgement:
    """SQLite's own verdict on the damaged file, as a normal open presents it."""

    full_read: bool = False  # every row of every table read without an error
    integrity: bool = False  # PRAGMA integrity_check said ok
    hashes: bool = True  # every events.content_hash matched (revision 2 and later)
    utf8: bool = True  # every TEXT value is valid UTF-8
    meta_ids: list[object] = field(default_factory=list)  # session_meta.session_id values
    error: str = ""  # the first error met
    rows: Rows | None = None  # what was read (None when the read failed)
    sequences: set[int] = field(default_factory=set)  # event sequences read

    @property
    def sound(self) -> bool:
        """Nothing SQLite or the hashes can see is wrong."""
        return self.full_read and self.integrity and self.hashes and self.utf8


def judge(path: Path, session_id: str) -> Judgement:
    j = Judgement()
    with tempfile.TemporaryDirectory(prefix="fuzz-judge-") as d:
        copy = private_copy(path, Path(d))
        try:
            conn = apsw.Connection(str(copy))
        except apsw.Error as e:
            j.error = f"open: {e}"
            return j
        try:
            try:
                res = [r[0] for r in conn.execute("PRAGMA integrity_check")]
                j.integrity = res == ["ok"]
                if not j.integrity:
                    j.error = f"integrity_check: {res[:2]}"
            except apsw.Error as e:
                j.error = f"integrity_check: {e}"
            try:
                rows = Rows()
                for t in TABLES:
                    cols = _columns(conn, t)
                    rows.columns[t] = cols
                    rows.rows[t] = {_pairs(tuple(r)) for r in conn.execute(_select(t, cols))}
                j.rows, j.full_read = rows, True
            except apsw.Error as e:
                j.error = j.error or f"read: {e}"
                return j
            except UnicodeDecodeError as e:  # a column's name in the schema is not UTF-8
                j.utf8 = False
                j.error = j.error or f"read: a column name is not UTF-8 ({e.reason})"
                return j
            for t in TABLES:
                for row in rows.rows[t]:
                    for typ, v in row:
                        if typ == "text" and isinstance(v, bytes):
                            try:
                                v.decode("utf-8")
                            except UnicodeDecodeError:
                                j.utf8 = False
            cols = rows.columns["events"]
            for row in rows.rows["events"]:
                seq = rows.sequence(row)
                if seq is not None:
                    j.sequences.add(seq)
            if "content_hash" in cols:
                idx = [cols.index(c) for c in HASHED_COLUMNS]
                for row in rows.rows["events"]:
                    vals = [row[i] for i in idx]
                    mask = sum(1 << n for n, (typ, _) in enumerate(vals) if typ == "text")
                    got = event_hash_raw(mask, *(v for _, v in vals))
                    if got is None or got != row[cols.index("content_hash")][1]:
                        j.hashes = False
            mc = rows.columns["session_meta"]
            if "session_id" in mc:
                k = mc.index("session_id")
                j.meta_ids = [r[k][1] for r in rows.rows["session_meta"]]
        finally:
            conn.close()
    return j


def dot_recover(
    path: Path,
    shell: Path | None,
    columns: dict[str, list[str]],
    sidecars: tuple[str, ...] = SIDECARS,
) -> Rows | None:
    """Rows SQLite's ``.recover`` keeps in the session tables (not lost_and_found), loaded into
    a fresh database by the same shell; None when there is no capable shell or it failed.
    ``sidecars``: which of the file's -wal/-journal it is given (none: the file alone)."""
    if shell is None:
        return None
    with tempfile.TemporaryDirectory(prefix="fuzz-dotrecover-") as d:
        copy = private_copy(path, Path(d) / "in", sidecars)
        sql = Path(d) / "out.sql"
        new = Path(d) / "new.db"
        try:
            with open(sql, "wb") as out:
                subprocess.run(
                    [str(shell), "-batch", "-init", os.devnull, str(copy), ".recover"],
                    stdout=out,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                    timeout=120,
                    check=False,
                )
            with open(sql, "rb") as inp:
                subprocess.run(
                    [str(shell), "-batch", "-init", os.devnull, str(new)],
                    stdin=inp,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=120,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            return None
        if not new.exists():
            return Rows(columns, {t: set() for t in TABLES})
        conn = apsw.Connection(str(new))
        try:
            out_rows = Rows(columns)
            # .recover writes whatever names the damaged schema held: read them as bytes
            have = {
                bytes(r[0]).decode("utf-8", "replace")
                for r in conn.execute("SELECT CAST(name AS BLOB) FROM sqlite_schema")
                if r[0] is not None
            }
            for t in TABLES:
                got: set[Row] = set()
                if t in have:
                    cols = columns[t]
                    if set(cols) <= set(_columns(conn, t)):
                        try:
                            got = {_pairs(tuple(r)) for r in conn.execute(_select(t, cols))}
                        except apsw.Error:
                            got = set()
                out_rows.rows[t] = got
            return out_rows
        except UnicodeDecodeError:  # a column name .recover copied from garbage: nothing usable
            return Rows(columns, {t: set() for t in TABLES})
        finally:
            conn.close()


def capable_shell() -> Path | None:
    """The sqlite3 shell with a working ``.recover`` (AGENTDB_TOOLS_DIR/sqlite3-dbpage)."""
    tools = os.environ.get("AGENTDB_TOOLS_DIR")
    cands = [Path(tools) / "sqlite3-dbpage"] if tools else []
    cands.append(Path(__file__).resolve().parents[2] / ".tools" / "sqlite3-dbpage")
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None
