"""Load the SQL that SQLite's ``.recover`` printed into a scratch database, trusting none of it.

The text comes from a damaged, possibly hostile file: its CREATE statements are the file's own
schema (a DEFAULT or CHECK in them would run on insert, a trigger on every row), its table and
column names are the file's. So nothing the file wrote is executed as DDL. The scratch database
gets our own tables, built from :mod:`agentdb.schema.revisions` column lists without types,
constraints or defaults, and each statement of the output runs alone, under an authorizer that
allows only an INSERT into one of those tables and the few pure functions ``.recover`` uses to
spell text (``replace``, ``char``, ``unistr``). Everything else is counted and skipped.

Statements are split with a port of ``sqlite3_complete()``'s state machine (so a CREATE TRIGGER
body with INSERTs inside stays one statement and is skipped whole), over a regex tokenizer
(linear in the size of the output).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from agentdb import db
from agentdb.schema.revisions import COLUMNS, TABLES

# Functions the output of `.recover` calls to spell a value (escape_crlf, newer unistr quoting).
ALLOWED_FUNCTIONS = frozenset({"replace", "char", "unistr"})
# The scratch tables: every column any revision has, in revision-3 order (each older
# revision's columns lead it, so its INSERTs leave the later ones NULL), no type, no rule.
SCRATCH_COLUMNS: dict[str, tuple[str, ...]] = {t: COLUMNS[3][t] for t in TABLES}
# `CREATE TABLE lost_and_found(rootpgno INTEGER, pgno INTEGER, nfield INTEGER, id INTEGER, c0...)`
# exactly as sqlite3recover.c prints it (the name gets `_N` when the file has such a table).
_LAF_CREATE = re.compile(
    r"CREATE TABLE (lost_and_found(?:_\d{1,3})?)\("
    r"rootpgno INTEGER, pgno INTEGER, nfield INTEGER, id INTEGER((?:, c\d{1,5})*)\)\Z"
)
_MAX_LAF_FIELDS = 1990  # below SQLITE_MAX_COLUMN (2000) with the four leading columns
_USER_VERSION = re.compile(r"PRAGMA user_version = '(\d{1,10})'\Z")
_FIRST_WORD = re.compile(r"[A-Za-z]+")
_NO_SUCH_TABLE = re.compile(r"(?:SQLError: )?no such table: (.*)")

# Token kinds of sqlite3_complete(): SEMI WS OTHER EXPLAIN CREATE TEMP TRIGGER END.
_SEMI, _WS, _OTHER, _EXPLAIN, _CREATE, _TEMP, _TRIGGER, _END = range(8)
_TRANS = (
    (1, 0, 2, 3, 4, 2, 2, 2),  # 0 INVALID
    (1, 1, 2, 3, 4, 2, 2, 2),  # 1 START
    (1, 2, 2, 2, 2, 2, 2, 2),  # 2 NORMAL
    (1, 3, 3, 2, 4, 2, 2, 2),  # 3 EXPLAIN
    (1, 4, 2, 2, 2, 4, 5, 2),  # 4 CREATE
    (6, 5, 5, 5, 5, 5, 5, 5),  # 5 TRIGGER
    (6, 6, 5, 5, 5, 5, 5, 7),  # 6 SEMI
    (1, 7, 5, 5, 5, 5, 5, 5),  # 7 END
)
_KEYWORDS = {
    "create": _CREATE,
    "trigger": _TRIGGER,
    "temp": _TEMP,
    "temporary": _TEMP,
    "end": _END,
    "explain": _EXPLAIN,
}
# One token: a quoted string or identifier (possibly unterminated at the end of the text), a
# comment, a semicolon, white space, a word (IdChar: alnum, _, $, non-ASCII) or any other char.
_TOKEN = re.compile(
    r"""(?P<q>'[^']*'?|"[^"]*"?|`[^`]*`?|\[[^\]]*\]?)"""
    r"|(?P<c>--[^\n]*|/\*(?:.|\n)*?(?:\*/|\Z))"
    r"|(?P<s>;)"
    r"|(?P<w>[ \t\n\r\f]+)"
    r"|(?P<id>[0-9A-Za-z_$\u0080-\U0010ffff]+)"
    r"|(?P<o>.|\n)"
)
_DOT_COMMAND = re.compile(r"\.[^\n]*")
_LEAD = re.compile(r"[ \t\n\r\f]*([0-9A-Za-z_$\u0080-\U0010ffff]*)")
_SIMPLE = re.compile(r"""(?:[^;'"`\[\-/]+|'[^']*'|"[^"]*"|`[^`]*`|\[[^\]]*\]|-(?!-)|/(?!\*))*;""")


def split_statements(text: str) -> Iterator[str]:
    """Each complete SQL statement of ``text``, as ``sqlite3_complete()`` would delimit them.

    A line starting with ``.`` where a statement would start is a shell dot-command
    (``.dbconfig defensive off``) and is dropped. An incomplete tail (output cut short by a
    timeout or the size cap) is dropped too.
    """
    return (stmt for stmt, _ in _split(text))


def iter_statements(chunks: Iterable[str]) -> Iterator[str]:
    """:func:`split_statements` over text that arrives in pieces, each ending at a line end
    (so no comment or word is cut): what follows the last complete statement waits for the
    next piece; only one statement is held at a time, never the whole text."""
    rest = ""
    for chunk in chunks:
        buf = rest + chunk
        end = 0
        for stmt, stop in _split(buf):
            yield stmt
            end = stop
        rest = buf[end:]
    # whatever is left is an incomplete tail (split_statements drops it too)


def _split(text: str) -> Iterator[tuple[str, int]]:
    """(statement, offset just past it) for each complete statement of ``text``."""
    state = 0
    start = 0
    pos = 0
    n = len(text)
    while pos < n:
        if state in (0, 1) and (pos == 0 or text[pos - 1] == "\n") and text[pos] == ".":
            m = _DOT_COMMAND.match(text, pos)
            assert m is not None
            pos = start = m.end()
            continue
        if state in (0, 1):
            # Fast path: a statement that cannot be a CREATE TRIGGER, with no comment, ends at
            # its first semicolon outside quotes (state NORMAL until SEMI in the machine).
            w = _LEAD.match(text, pos)
            assert w is not None
            if w.group(1).lower() not in ("create", "explain"):
                f = _SIMPLE.match(text, w.end(1))
                if f is not None:
                    stmt = text[w.start(1) : f.end()]
                    if stmt.strip() != ";":
                        yield stmt.strip(), f.end()
                    pos = start = f.end()
                    state = 1
                    continue
        m = _TOKEN.match(text, pos)
        assert m is not None  # the last alternative matches any character
        kind = m.lastgroup
        tok = m.group()
        pos = m.end()
        if kind == "q":
            if len(tok) < 2 or tok[-1] != {"[": "]"}.get(tok[0], tok[0]):
                return  # unterminated: the text was cut inside a literal
            token = _OTHER
        elif kind == "c":
            if tok.startswith("/*") and not tok.endswith("*/"):
                return
            token = _WS
        elif kind == "s":
            token = _SEMI
        elif kind == "w":
            token = _WS
        elif kind == "id":
            token = _KEYWORDS.get(tok.lower(), _OTHER) if len(tok) <= 9 else _OTHER
        else:
            token = _OTHER
        before = state
        state = _TRANS[state][token]
        if token == _SEMI and state == 1:
            if before != 1:
                yield text[start:pos].strip(), pos
            start = pos


@dataclass
class LoadResult:
    """What happened to each statement of the ``.recover`` output."""

    inserted: int = 0  # INSERT statements that ran (each adds one row to a scratch table)
    denied: int = 0  # statements the authorizer refused (never executed)
    failed: int = 0  # INSERTs SQLite rejected (unknown column, too big, bad text encoding)
    other_tables: Counter[str] = field(default_factory=Counter)  # INSERTs into tables not ours
    skipped: Counter[str] = field(default_factory=Counter)  # non-INSERTs, by first words
    laf_tables: dict[str, int] = field(default_factory=dict)  # lost_and_found name -> nfields
    user_version: int | None = None  # from the output's `PRAGMA user_version = 'N'`
    denied_examples: list[str] = field(default_factory=list)  # first few refused, shortened


def _create_scratch(conn: apsw.Connection) -> None:
    for table, cols in SCRATCH_COLUMNS.items():
        db.exec_script(conn, f"CREATE TABLE {table}({', '.join(cols)})")


def _allowed_tables(laf: dict[str, int]) -> set[str]:
    return {*SCRATCH_COLUMNS, *laf}


def open_scratch(path: Path) -> apsw.Connection:
    """A new scratch database with our tables (plain columns: nothing runs on insert)."""
    conn = db.open_private(path)
    # A row of the output carries a whole event payload in hex; allow what a session may hold.
    conn.limit(apsw.SQLITE_LIMIT_SQL_LENGTH, 1_000_000_000)
    conn.limit(apsw.SQLITE_LIMIT_LENGTH, 1_000_000_000)
    conn.limit(apsw.SQLITE_LIMIT_COLUMN, 2000)
    db.exec_script(conn, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF")
    _create_scratch(conn)
    return conn


def load(
    conn: apsw.Connection,
    text: str | Iterable[str],
    *,
    on_statement: Callable[[str], None] | None = None,
) -> LoadResult:
    """Run the INSERTs of ``text`` (a string, or pieces of it each ending at a line end) into
    ``conn``'s scratch tables under a strict authorizer."""
    res = LoadResult()
    laf: dict[str, int] = res.laf_tables
    allowed_tables = _allowed_tables(laf)

    refused: list[int] = []

    def allowed(code: int, a1: str | None, a2: str | None) -> bool:
        if code == apsw.SQLITE_INSERT and a1 in allowed_tables:
            return True
        if code == apsw.SQLITE_FUNCTION and (a2 or "").lower() in ALLOWED_FUNCTIONS:
            return True
        refused.append(code)
        return False

    db.exec_script(conn, "BEGIN")
    cursor = conn.cursor()
    try:
        statements = split_statements(text) if isinstance(text, str) else iter_statements(text)
        for stmt in statements:
            if on_statement is not None:
                on_statement(stmt)
            words = _FIRST_WORD.findall(stmt[:40])[:2]
            first = words[0].upper() if words else ""
            if first != "INSERT":
                conn.authorizer = None  # our own DDL for lost_and_found may run
                _note_other(conn, stmt, words, res, allowed_tables)
                continue
            try:
                stmt.encode("utf-8")
            except UnicodeEncodeError:
                res.failed += 1  # text that was not UTF-8 in the file
                continue
            if conn.authorizer is None:  # set once for a run of INSERTs
                db.allow_only(conn, allowed)
            refused.clear()
            _insert(conn, cursor, stmt, res, refused)
    finally:
        conn.authorizer = None
        db.exec_script(conn, "COMMIT")
    return res


def _insert(
    conn: apsw.Connection, cursor: apsw.Cursor, stmt: str, res: LoadResult, refused: list[int]
) -> None:
    """Run one INSERT under the authorizer already set; count what happened."""
    try:
        before = conn.total_changes()
        for _ in cursor.execute(stmt, can_cache=False):
            pass
        res.inserted += conn.total_changes() - before
    except apsw.Error as e:
        m = _NO_SUCH_TABLE.match(str(e))
        if refused:
            res.denied += 1
            if len(res.denied_examples) < 5:
                res.denied_examples.append(stmt[:80])
        elif m:
            res.other_tables[m.group(1)[:60]] += 1
        else:
            res.failed += 1


def _note_other(
    conn: apsw.Connection,
    stmt: str,
    words: list[str],
    res: LoadResult,
    allowed_tables: set[str],
) -> None:
    """A statement that is not an INSERT: never executed; lost_and_found's shape is noted."""
    m = _LAF_CREATE.match(stmt.rstrip(";").rstrip())
    if m:
        name, cols = m.group(1), m.group(2)
        nfields = cols.count(",")
        expected = "".join(f", c{i}" for i in range(nfields))
        if cols == expected and 0 < nfields <= _MAX_LAF_FIELDS and name not in res.laf_tables:
            # Our own DDL text, built from the count: nothing of the file's text is executed.
            fields = ", ".join(f"c{i}" for i in range(nfields))
            db.exec_script(conn, f"CREATE TABLE {name}(rootpgno, pgno, nfield, id, {fields})")
            res.laf_tables[name] = nfields
            allowed_tables.add(name)
            return
    m2 = _USER_VERSION.match(stmt.rstrip(";").rstrip())
    if m2:
        res.user_version = int(m2.group(1))
    res.skipped[" ".join(w.upper() for w in words)] += 1


def read_scratch(conn: apsw.Connection, table: str) -> Iterator[tuple[object, ...]]:
    """(rowid, *columns) of every row in a scratch table, in rowid order."""
    yield from conn.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid")
