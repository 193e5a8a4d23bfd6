"""Is one copy of a session a *prefix* of another? Read-only; shared by backup and restore.

Definition (issue 15): ``old`` is a prefix of ``new`` (and ``new`` a superset of ``old``) when
every row of the append-only tables (``events``, ``cost_ledger``, ``plan_items``,
``producers``) in ``old`` is in ``new`` under the same primary key with the same full row —
same values of the same SQLite types. ``session_meta`` may differ (a session that ended has
a new status); it is compared too, but only to tell ``identical`` from merely ``is_prefix``.

Rows are compared over the columns both files have (a revision-1 copy of a session migrated
since lacks ``content_hash``); the revisions are reported, and files of different revisions
are never ``identical``. The three tables keyed by ``INTEGER PRIMARY KEY`` are merged in key
order, streaming (no table is held in memory); ``producers`` (a few rows per session) is
compared as a dictionary, so hostile key types cannot upset the merge.

* :func:`compare` takes two open read-only connections, each read in one read transaction.
* :func:`compare_paths` opens both files with :func:`agentdb.db.open_readonly` first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from agentdb import db

APPEND_ONLY: tuple[str, ...] = ("events", "cost_ledger", "plan_items", "producers")
# Tables whose primary key is the rowid: merged in key order.
_ROWID_KEYED = ("events", "cost_ledger", "plan_items")
_PRODUCER_KEY = ("category", "name", "version")


@dataclass
class TableDiff:
    """How one append-only table of ``old`` compares with the same table of ``new``."""

    table: str  # events, cost_ledger, plan_items or producers
    old_rows: int = 0  # rows in old
    new_rows: int = 0  # rows in new
    missing: int = 0  # rows of old with no row under the same key in new
    changed: int = 0  # rows of old whose key is in new with another row
    added: int = 0  # rows of new whose key is not in old


@dataclass
class PrefixComparison:
    """The answer of :func:`compare`: is ``old`` a prefix of ``new``?"""

    tables: dict[str, TableDiff]  # per append-only table, in APPEND_ONLY order
    old_revision: int  # user_version of old
    new_revision: int  # user_version of new
    meta_equal: bool  # session_meta holds the same rows in both
    # events of old that new lacks or holds differently, as inclusive (first, last) sequence
    # ranges: what replacing old with new would lose
    lost_event_ranges: list[tuple[int, int]] = field(default_factory=list)

    @property
    def is_prefix(self) -> bool:
        """Every append-only row of old is in new, unchanged."""
        return all(t.missing == 0 and t.changed == 0 for t in self.tables.values())

    @property
    def identical(self) -> bool:
        """Same rows in every table (session_meta included), same revision."""
        return (
            self.is_prefix
            and self.meta_equal
            and self.old_revision == self.new_revision
            and all(t.added == 0 for t in self.tables.values())
        )

    @property
    def lost_rows(self) -> int:
        """Rows of old (all four tables) that new lacks or holds differently."""
        return sum(t.missing + t.changed for t in self.tables.values())

    def describe_loss(self, limit: int = 5) -> str:
        """One line: what old has that new does not ("events 4-9, 12; 3 cost_ledger rows")."""
        parts = []
        if self.lost_event_ranges:
            shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in self.lost_event_ranges[:limit]]
            more = len(self.lost_event_ranges) - limit
            parts.append(
                "events " + ", ".join(shown) + (f" (+{more} more ranges)" if more > 0 else "")
            )
        for name in APPEND_ONLY[1:]:
            t = self.tables[name]
            if t.missing or t.changed:
                parts.append(f"{t.missing + t.changed} {name} rows")
        return "; ".join(parts) or "nothing"

    def to_json(self) -> dict[str, Any]:
        return {
            "is_prefix": self.is_prefix,
            "identical": self.identical,
            "old_revision": self.old_revision,
            "new_revision": self.new_revision,
            "meta_equal": self.meta_equal,
            "lost_event_ranges": [list(r) for r in self.lost_event_ranges],
            "tables": {
                n: {
                    "old_rows": t.old_rows,
                    "new_rows": t.new_rows,
                    "missing": t.missing,
                    "changed": t.changed,
                    "added": t.added,
                }
                for n, t in self.tables.items()
            },
        }


def _typed(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row as (type, value) pairs: 1 and 1.0 are different SQLite values."""
    return tuple((type(v).__name__, v) for v in row)


def _columns(conn: apsw.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))]


def _quoted(cols: list[str]) -> str:
    return ", ".join('"' + c.replace('"', '""') + '"' for c in cols)


def _shared_columns(old: apsw.Connection, new: apsw.Connection, table: str) -> list[str]:
    theirs = set(_columns(new, table))
    return [c for c in _columns(old, table) if c in theirs]


def _stream(conn: apsw.Connection, table: str, cols: list[str]) -> Iterator[tuple[Any, ...]]:
    # rowid first: the merge key (the INTEGER PRIMARY KEY "sequence" is the rowid).
    sql = f"SELECT rowid, {_quoted(cols)} FROM {table} ORDER BY rowid"
    for r in conn.execute(sql):
        yield tuple(r)


def _add_range(ranges: list[tuple[int, int]], seq: int) -> None:
    if ranges and ranges[-1][1] == seq - 1:
        ranges[-1] = (ranges[-1][0], seq)
    else:
        ranges.append((seq, seq))


def _merge(
    old: apsw.Connection, new: apsw.Connection, table: str, lost: list[tuple[int, int]] | None
) -> TableDiff:
    cols = _shared_columns(old, new, table)
    diff = TableDiff(table)
    a, b = _stream(old, table, cols), _stream(new, table, cols)
    ra, rb = next(a, None), next(b, None)
    while ra is not None or rb is not None:
        if rb is None or (ra is not None and ra[0] < rb[0]):
            assert ra is not None
            diff.old_rows += 1
            diff.missing += 1
            if lost is not None:
                _add_range(lost, int(ra[0]))
            ra = next(a, None)
        elif ra is None or rb[0] < ra[0]:
            diff.new_rows += 1
            diff.added += 1
            rb = next(b, None)
        else:
            diff.old_rows += 1
            diff.new_rows += 1
            if _typed(ra) != _typed(rb):
                diff.changed += 1
                if lost is not None:
                    _add_range(lost, int(ra[0]))
            ra, rb = next(a, None), next(b, None)
    return diff


def _keyed(conn: apsw.Connection, table: str, cols: list[str], key: tuple[str, ...]) -> dict:
    at = [cols.index(k) for k in key]
    out: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for r in conn.execute(f"SELECT {_quoted(cols)} FROM {table}"):
        row = _typed(tuple(r))
        out[tuple(row[i] for i in at)] = row
    return out


def _compare_producers(old: apsw.Connection, new: apsw.Connection) -> TableDiff:
    cols = _shared_columns(old, new, "producers")
    diff = TableDiff("producers")
    if not all(k in cols for k in _PRODUCER_KEY):
        return diff
    mine = _keyed(old, "producers", cols, _PRODUCER_KEY)
    theirs = _keyed(new, "producers", cols, _PRODUCER_KEY)
    diff.old_rows, diff.new_rows = len(mine), len(theirs)
    for k, row in mine.items():
        other = theirs.get(k)
        if other is None:
            diff.missing += 1
        elif other != row:
            diff.changed += 1
    diff.added = sum(1 for k in theirs if k not in mine)
    return diff


def _meta(conn: apsw.Connection, cols: list[str]) -> list[tuple[Any, ...]]:
    return sorted(
        (_typed(tuple(r)) for r in conn.execute(f"SELECT {_quoted(cols)} FROM session_meta")),
        key=repr,
    )


def _begin(conn: apsw.Connection) -> bool:
    """Start a read transaction (one snapshot for every query) unless one is open already."""
    if conn.get_autocommit():
        conn.execute("BEGIN")
        return True
    return False


def compare(old: apsw.Connection, new: apsw.Connection) -> PrefixComparison:
    """Is ``old`` a prefix of ``new``? Both are read-only connections to session files whose
    schema the caller has already judged (``agentdb check``'s rules); each is read inside one
    read transaction. APSW errors propagate (wrap the call in :func:`agentdb.db.translated`).
    """
    opened = [c for c in (old, new) if _begin(c)]
    try:
        lost: list[tuple[int, int]] = []
        tables = {t: _merge(old, new, t, lost if t == "events" else None) for t in _ROWID_KEYED}
        tables["producers"] = _compare_producers(old, new)
        meta_cols = _shared_columns(old, new, "session_meta")
        return PrefixComparison(
            tables={t: tables[t] for t in APPEND_ONLY},
            old_revision=int(db.pragma(old, "user_version")),
            new_revision=int(db.pragma(new, "user_version")),
            meta_equal=_meta(old, meta_cols) == _meta(new, meta_cols),
            lost_event_ranges=lost,
        )
    finally:
        for c in opened:
            if not c.get_autocommit():
                c.execute("COMMIT")


def compare_paths(old_path: Path, new_path: Path) -> PrefixComparison:
    """:func:`compare` on two files, each opened with :func:`agentdb.db.open_readonly` (so the
    same refusals apply: links, insecure modes, triggers and views). Errors are ours."""
    old = db.open_readonly(old_path)
    try:
        new = db.open_readonly(new_path)
        try:
            with db.translated(f"{old_path} / {new_path}"):
                return compare(old, new)
        finally:
            new.close()
    finally:
        old.close()
