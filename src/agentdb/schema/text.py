"""Invalid UTF-8 in TEXT values: found without ever decoding them.

APSW decodes every TEXT value it returns, and a byte sequence that is not UTF-8 raises
``UnicodeDecodeError`` (no ``apsw.Error``). A damaged file is exactly where text is not valid, so
the readers that judge a file look at TEXT as its stored bytes: :func:`invalid_text` counts, per
table, the rows holding a TEXT value that is not valid UTF-8.
"""

from __future__ import annotations

import apsw

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


def invalid_text(conn: apsw.Connection, *, skip: tuple[str, ...] = ()) -> dict[str, int]:
    """Rows per table (revision-1 columns; tables in ``skip`` left out) with a TEXT value that
    is not valid UTF-8; tables without any are absent. Reads every value of every row: a row
    SQLite cannot read raises its error (``apsw.Error``) here."""
    out: dict[str, int] = {}
    for table, cols in COLUMNS[1].items():
        if table in skip:
            continue
        n = conn.execute(
            f"SELECT count(*) FROM {table} WHERE NOT {_row_text_sql(tuple(cols))}"
        ).fetchone()
        if n is not None and int(n[0]):
            out[table] = int(n[0])
    return out
