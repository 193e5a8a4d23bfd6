"""Invalid UTF-8 in TEXT values: found without ever decoding them.

APSW decodes every TEXT value it returns, and a byte sequence that is not UTF-8 raises
``UnicodeDecodeError`` (no ``apsw.Error``). A damaged file is exactly where text is not valid, so
the readers that judge a file look at TEXT as its stored bytes: :func:`invalid_text` counts, per
table, the rows holding a TEXT value that is not valid UTF-8.
"""

from __future__ import annotations

import functools

import apsw

from agentdb.db import READ_ALL_SQL_FUNCTION as READ_ALL
from agentdb.db import UTF8_SQL_FUNCTION
from agentdb.schema.revisions import COLUMNS

_SEP = " || '|' || "


def _row_text_sql(columns: tuple[str, ...]) -> str:
    # Every TEXT value of the row joined by an ASCII separator (an invalid sequence inside one
    # value stays invalid beside ASCII), other values as ''. Every value is materialised
    # (``length(CAST(.. AS BLOB))`` reads a BLOB's overflow pages too), so a row SQLite cannot
    # read fails the query instead of passing unseen.
    parts = [f"iif(typeof({c}) = 'text', {c}, '')" for c in columns]
    reads = " + ".join(f"ifnull(length(CAST({c} AS BLOB)), 0)" for c in columns)
    return f"(({reads}) >= 0 AND {UTF8_SQL_FUNCTION}(CAST({_SEP.join(parts)} AS BLOB)))"


# Tables whose values are passed whole to Python by the fast path: not ``events``, whose
# payloads may be large (they are checked by the exact query, as bytes inside SQLite).
_SMALL = tuple(t for t in COLUMNS[1] if t != "events")


@functools.cache
def _fast_sql(tables: tuple[str, ...]) -> str:
    parts = [
        f"(SELECT count(*) FROM {t} WHERE NOT {READ_ALL}({', '.join(COLUMNS[1][t])}))"
        for t in tables
    ]
    return "SELECT " + ", ".join(parts)


@functools.cache
def small_tables_columns() -> str:
    """The fast path's reads as result columns of a statement over ``session_meta`` (which
    yields its rows): the row's own values passed whole (1), then per other small table the
    count of rows whose values were not (0). The statement fails with ``UnicodeDecodeError``
    when a TEXT value is not UTF-8. For a caller that reads the ``session_meta`` row anyway."""
    own = f"{READ_ALL}({', '.join(COLUMNS[1]['session_meta'])})"
    return ", ".join([own, _fast_sql(tuple(t for t in _SMALL if t != "session_meta"))[7:]])


def invalid_text(conn: apsw.Connection, *, skip: tuple[str, ...] = ()) -> dict[str, int]:
    """Rows per table (revision-1 columns; tables in ``skip`` left out) with a TEXT value that
    is not valid UTF-8; tables without any are absent. Reads every value of every row: a row
    SQLite cannot read raises its error (``apsw.Error``) here.

    Fast path for the small tables: one short statement hands every value of every row to a
    function that does nothing; APSW decodes each TEXT argument on the way, and the first one
    that is not UTF-8 fails the statement (``UnicodeDecodeError``). Only then are they counted
    exactly, row by row, as stored bytes. Preparing the exact statements for every file costs
    four times as much as running the short one, and almost every file is valid.
    """
    out: dict[str, int] = {}
    tables = [t for t in COLUMNS[1] if t not in skip]
    small = tuple(t for t in tables if t in _SMALL)
    if small:
        try:
            conn.execute(_fast_sql(small)).fetchall()
        except UnicodeDecodeError:
            pass  # one of them holds invalid text: the exact queries below count where
        else:
            tables = [t for t in tables if t not in small]
    for table in tables:
        cols = COLUMNS[1][table]
        n = conn.execute(
            f"SELECT count(*) FROM {table} WHERE NOT {_row_text_sql(tuple(cols))}"
        ).fetchone()
        if n is not None and int(n[0]):
            out[table] = int(n[0])
    return out


def text_encoding(conn: apsw.Connection) -> str | None:
    """Why the database's TEXT is not stored as UTF-8 (a UTF-16 database another tool made:
    SQLite converts on the fly, but agentdb reads, compares and hashes TEXT as its stored
    bytes), or None for a UTF-8 database."""
    row = conn.execute("PRAGMA encoding").fetchone()
    encoding = str(row[0]) if row else "UTF-8"
    if encoding == "UTF-8":
        return None
    return (
        f"the database's text encoding is {encoding}, not UTF-8 (agentdb reads and hashes TEXT "
        "as its stored bytes)"
    )
