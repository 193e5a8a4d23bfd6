"""What a SQLite file is: a session file at some revision, an empty file, or something foreign.

The structural fingerprint of a file (tables, columns, keys, indexes and, from revision 2 on,
the normalised CREATE text with its CHECK constraints) is compared with the fingerprint of a
fresh in-memory database built from the revision's DDL, so a revision-1 file written by another
conforming writer with other whitespace or comments still matches.

Fast path: a file whose ``sqlite_schema`` rows are exactly those agentdb writes when it creates
a file at that revision (built once per process in memory) has no differences, since the same
schema text parses to the same structure. Any other schema text (a file another writer made, or
one agentdb migrated) is decided by the fingerprint comparison once per process and remembered
for the files that share it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Literal

import apsw

from agentdb import db
from agentdb.schema.revisions import APPLICATION_ID, KNOWN_DDL, KNOWN_REVISION

Fingerprint = dict[str, Any]


@dataclass(frozen=True)
class Identity:
    """How a file identifies itself, before anything trusts its tables."""

    application_id: int  # PRAGMA application_id
    user_version: int  # PRAGMA user_version (the schema revision)
    kind: Literal["session", "empty", "foreign", "too_new"]
    problem: str | None = None  # why it is not a session file, when kind is not "session"

    @property
    def revision(self) -> int:
        return self.user_version


_COMMENT = re.compile(r"--[^\n]*")
_SPACE = re.compile(r"\s+")
_HEAD = re.compile(r'^CREATE TABLE\s+(?:"([^"]+)"|(\w+))\s*', re.IGNORECASE)


def normalise_sql(sql: str) -> str:
    """CREATE text without comments, runs of white space, or quotes on the table name."""
    s = _SPACE.sub(" ", _COMMENT.sub("", sql)).strip()
    s = _HEAD.sub(lambda m: f"CREATE TABLE {m.group(1) or m.group(2)} ", s)
    return s.replace("( ", "(").replace(" )", ")")


SchemaRows = tuple[tuple[str, str, str, str | None], ...]
_ROWS_SQL = "SELECT type, name, tbl_name, sql FROM sqlite_schema"


def schema_rows(conn: apsw.Connection) -> SchemaRows:
    """(type, name, tbl_name, sql) of every row of ``sqlite_schema`` (SQLite's own objects
    included: a hostile index named ``sqlite_...`` must not slip past the fast path), in the
    table's own order. Not sorted: the rows are compared exactly (the fast path, the memo), so
    the same schema in another order is only decided by its fingerprint; sorting them cost a
    sorter in SQL, or a Python sort, on every file. A type, name or table name that is not
    TEXT (a hostile ``sqlite_schema``) is read as ``str`` of the value; rows of SQLite's own
    making are taken as they come (converting every value cost a quarter of the read)."""
    rows: SchemaRows = tuple(conn.execute(_ROWS_SQL))
    for t, n, tb, _ in rows:
        if type(t) is not str or type(n) is not str or type(tb) is not str:
            return tuple([(str(t), str(n), str(tb), sql) for t, n, tb, sql in rows])
    return rows


@functools.cache
def fresh_schema(revision: int) -> SchemaRows:
    """The schema rows of a file agentdb creates at ``revision`` (its DDL, verbatim): the
    fingerprint is built from the same DDL, so it needs no verification."""
    conn = db.open_memory()
    try:
        db.exec_script(conn, KNOWN_DDL[revision])
        return schema_rows(conn)
    finally:
        conn.close()


def _is_known(revision: int, rows: SchemaRows) -> bool:
    # Only the schema agentdb creates at this revision. A file created at an earlier revision
    # and migrated is decided by its fingerprint once per process (then by the memo, as every
    # other writer's text is): checking it against the ladder's own result cost every process
    # that met one a migration run in memory (20 ms of a one-file `check`).
    return rows == fresh_schema(revision)


def fingerprint(conn: apsw.Connection, *, with_text: bool) -> Fingerprint:
    """Structure of every user table and index, from pragmas (never from parsing SQL)."""
    fp: Fingerprint = {}
    objects = db.rows(
        conn,
        "SELECT type, name, tbl_name, sql FROM sqlite_schema "
        "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name",
    )
    for typ, name, tbl, sql in objects:
        if typ == "table":
            cols = db.rows(
                conn,
                'SELECT name, upper(type), "notnull", dflt_value, pk, hidden '
                "FROM pragma_table_xinfo(?)",
                (name,),
            )
            fks = db.rows(
                conn,
                'SELECT "table", "from", "to", on_update, on_delete '
                "FROM pragma_foreign_key_list(?)",
                (name,),
            )
            keys = sorted(
                (
                    int(u),
                    str(origin),
                    int(partial),
                    tuple(
                        r[0]
                        for r in conn.execute(
                            "SELECT name FROM pragma_index_info(?) ORDER BY seqno", (iname,)
                        )
                    ),
                )
                for iname, u, origin, partial in db.rows(
                    conn,
                    'SELECT name, "unique", origin, partial FROM pragma_index_list(?)',
                    (name,),
                )
            )
            entry: dict[str, Any] = {"columns": cols, "fks": sorted(fks), "keys": keys}
            if with_text:
                entry["sql"] = normalise_sql(sql or "")
            fp[f"table:{name}"] = entry
        elif typ == "index":
            cols = db.rows(
                conn, 'SELECT seqno, name, "desc", coll, key FROM pragma_index_xinfo(?)', (name,)
            )
            uniq = sql is None  # autoindexes of UNIQUE / PRIMARY KEY have no SQL
            fp[f"index:{name}"] = {"table": tbl, "columns": cols, "auto": uniq}
        else:
            fp[f"{typ}:{name}"] = {"table": tbl}
    return fp


@functools.cache
def expected_fingerprint(revision: int) -> Fingerprint:
    conn = db.open_memory()
    for _ in conn.execute(KNOWN_DDL[revision]):
        pass
    fp = fingerprint(conn, with_text=revision >= 2)
    conn.close()
    return fp


def schema_differences(
    conn: apsw.Connection, revision: int, *, rows: SchemaRows | None = None
) -> list[str]:
    """Human-readable differences between the file's schema and ``revision``'s; [] if it matches.

    ``rows`` is :func:`schema_rows` of ``conn`` when the caller has already read it.

    The answer depends only on the schema rows (the same text parses to the same structure),
    so it is decided once per distinct ``sqlite_schema`` content per process: files another
    writer created and agentdb migrated keep that writer's formatting for the tables the
    migration did not rebuild, and every such file shares one decision.
    """
    if rows is None:
        rows = schema_rows(conn)
    if revision in KNOWN_DDL and _is_known(revision, rows):
        return []
    key = (revision, rows)
    decided = _DECIDED.get(key)
    if decided is None:
        decided = tuple(_fingerprint_differences(conn, revision))
        if sum(len(r[3] or "") for r in rows) <= _DECIDED_MAX_TEXT:  # hostile schemas: no memo
            if len(_DECIDED) >= _DECIDED_MAX:
                _DECIDED.pop(next(iter(_DECIDED)))  # the oldest decision goes first
            _DECIDED[key] = decided
    return list(decided)


def decided_same(revision: int, rows: SchemaRows) -> bool:
    """True when ``rows`` are already known to match ``revision`` with no difference at all
    (agentdb's own text, or a text decided by fingerprint earlier in this process); False
    when they differ or are not decided yet (:func:`schema_differences` decides)."""
    return (revision in KNOWN_DDL and _is_known(revision, rows)) or _DECIDED.get(
        (revision, rows)
    ) == ()


# Schemas decided by fingerprint, per (revision, schema rows); bounded in count and in the size
# of what it keeps, so a directory of hostile files cannot grow it.
_DECIDED: dict[tuple[int, SchemaRows], tuple[str, ...]] = {}
_DECIDED_MAX = 64
_DECIDED_MAX_TEXT = 64 * 1024


def _fingerprint_differences(conn: apsw.Connection, revision: int) -> list[str]:
    want = expected_fingerprint(revision)
    have = fingerprint(conn, with_text=revision >= 2)
    diffs = []
    for key in sorted(set(want) | set(have)):
        if key not in have:
            diffs.append(f"missing {key.replace(':', ' ')}")
        elif key not in want:
            diffs.append(f"unexpected {key.replace(':', ' ')}")
        elif have[key] != want[key]:
            diffs.append(f"{key.replace(':', ' ')} differs from revision {revision}")
    return diffs


def has_user_objects(conn: apsw.Connection) -> bool:
    return db.row(conn, "SELECT 1 FROM sqlite_schema LIMIT 1") is not None


def identify(conn: apsw.Connection, *, rows: SchemaRows | None = None) -> Identity:
    """Classify a file by its application id, user_version and (for application id 0) tables.

    ``rows`` is :func:`schema_rows` of ``conn`` when the caller has already read it.
    """
    # Two plain pragmas: measured cheaper than one SELECT over pragma table-valued functions.
    app = int(db.pragma(conn, "application_id"))
    ver = int(db.pragma(conn, "user_version"))
    if app not in (0, APPLICATION_ID):
        return Identity(app, ver, "foreign", f"application_id {app:#x} is not agentdb's")
    if ver > KNOWN_REVISION:
        return Identity(
            app,
            ver,
            "too_new",
            f"user_version {ver} is newer than this agentdb understands "
            f"(it knows revisions up to {KNOWN_REVISION})",
        )
    if ver < 0:  # a signed 32-bit field: garbage there names no revision at all
        why = f"user_version {ver} is no revision: not a session file"
        return Identity(app, ver, "foreign", why)
    if ver == 0:
        if app == 0 and not has_user_objects(conn):
            return Identity(app, ver, "empty")
        return Identity(app, ver, "foreign", "user_version 0: not a session file")
    if app == 0 and table_differences(conn, ver, rows=rows):
        return Identity(
            app, ver, "foreign", f"application_id 0 and tables that do not match revision {ver}"
        )
    return Identity(app, ver, "session")


_UNSAFE = ("unexpected trigger", "unexpected view")


def columns_missing(conn: apsw.Connection, revision: int) -> list[str]:
    """The tables and columns of ``revision`` that the file's schema does not have, by name:
    [] when every one is there (the schema may still differ in types or constraints). A
    conforming writer never drops one, so a gap means the stored CREATE text was damaged (a
    flipped byte in a column name): SQLite reads the file, but no reader finds the session's
    rows where the revision puts them. Called only for a schema that differs."""
    have = {
        str(name)
        for (name,) in db.rows(
            conn, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    gaps = []
    for key, entry in expected_fingerprint(revision).items():
        kind, _, table = key.partition(":")
        if kind != "table":
            continue
        if table not in have:
            gaps.append(f"no table {table}")
            continue
        named = {
            str(r[0]) for r in db.rows(conn, "SELECT name FROM pragma_table_xinfo(?)", (table,))
        }
        gaps += [f"{table} has no column {c[0]}" for c in entry["columns"] if c[0] not in named]
    return gaps


def table_differences(
    conn: apsw.Connection, revision: int, *, rows: SchemaRows | None = None
) -> list[str]:
    """:func:`schema_differences` without added triggers and views: those make a file
    ``unsafe_schema`` whatever its application id, they do not make its tables foreign."""
    return [d for d in schema_differences(conn, revision, rows=rows) if not d.startswith(_UNSAFE)]
