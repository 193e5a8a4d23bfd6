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

From revision 3 on (design §11) the answer comes from the chain heads when it can: when both
files are revision 3 and pass full chain verification (:func:`agentdb.schema.chainio.verify_full`),
``old`` is a prefix of ``new`` exactly when ``new`` holds an event at ``old``'s
``head_sequence`` whose ``chain_hash`` is ``old``'s ``head_hash`` and neither file has a recorded
gap (other than ``meta``) at or below it (:func:`~agentdb.schema.chainio.proves_prefix`); no
row is compared (``decided_by == "proof"``). The same proof the other way round says when
``new`` is a *proper* prefix of ``old`` (``rollback``: ``new`` lost its tail consistently, a
rollback ``check`` alone cannot see). Anything else — either file below revision 3, a file that
fails verification, a recorded gap at or below the head, rows left by a recovery whose event
was lost, a head the other chain does not hold — is decided by comparing rows
(``decided_by == "rows"``, ``proof_refused`` says why). A revision-3 file that fails chain
verification is never a prefix of anything, nor has one.

* :func:`compare` takes two open read-only connections, each read in one read transaction.
* :func:`compare_paths` opens both files with :func:`agentdb.db.open_readonly` first; a
  :class:`ChainReports` passed to it keeps each file's walk for the next comparison.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import apsw

from agentdb import db
from agentdb.fsutil import StatKey, stat_key
from agentdb.schema import chainio
from agentdb.schema.chain import COUNTED, ChainReport

APPEND_ONLY: tuple[str, ...] = ("events", "cost_ledger", "plan_items", "producers")
# Tables whose primary key is the rowid: merged in key order.
_ROWID_KEYED = ("events", "cost_ledger", "plan_items")
_PRODUCER_KEY = ("category", "name", "version")
# user_version of files that hold the chain (design §2): compared by the head proof when both do
CHAINED: frozenset[int] = frozenset({3})
Method = Literal["proof", "rows"]


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
    decided_by: Method = "rows"  # proof: by the chain heads, no row compared (§11); rows: rows
    proof_refused: str = ""  # both files revision 3, decided by rows all the same: why
    old_chain_ok: bool | None = None  # old passes full chain verification (None: below rev 3)
    new_chain_ok: bool | None = None  # the same of new
    old_head: int | None = None  # old's head_sequence (None: no verified head)
    new_head: int | None = None  # new's head_sequence (None: no verified head)
    # new is proven a *proper* prefix of old by the head proof: (new's head, old's head). new
    # lost old's events past its head consistently (a rollback, design §1 and §11)
    rollback: tuple[int, int] | None = None
    gaps_equal: bool = True  # chain_gaps holds the same rows in both (files without: True)
    old_chain: ChainReport | None = field(default=None, repr=False)  # old's full walk
    new_chain: ChainReport | None = field(default=None, repr=False)  # new's full walk

    @property
    def is_prefix(self) -> bool:
        """Every append-only row of old is in new, unchanged; and neither is a revision-3
        file that fails chain verification."""
        if self.old_chain_ok is False or self.new_chain_ok is False:
            return False
        return all(t.missing == 0 and t.changed == 0 for t in self.tables.values())

    @property
    def identical(self) -> bool:
        """Same rows in every table (session_meta and chain_gaps included), same revision;
        by the proof: same head, same meta_hash, same gaps_hash."""
        return (
            self.is_prefix
            and self.meta_equal
            and self.gaps_equal
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
            "decided_by": self.decided_by,
            "proof_refused": self.proof_refused,
            "rollback": None if self.rollback is None else list(self.rollback),
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


def _by_rows(old: apsw.Connection, new: apsw.Connection) -> PrefixComparison:
    """Today's comparison: every row of the append-only tables, streaming (O(n) in both)."""
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
        gaps_equal=_gaps(old) == _gaps(new),
    )


def _gaps(conn: apsw.Connection) -> list[tuple[Any, ...]] | None:
    """chain_gaps's rows (None when the file has no such table: below revision 3)."""
    if not _columns(conn, "chain_gaps"):
        return None
    return [_typed(tuple(r)) for r in conn.execute("SELECT * FROM chain_gaps ORDER BY rowid")]


def _counts(report: ChainReport) -> dict[str, int]:
    assert report.head is not None
    return {t: int(report.head.count(t)) for t in COUNTED}


def _problems(name: str, report: ChainReport) -> str:
    return f"{name} fails full chain verification ({', '.join(report.problems)})"


def _sequences_after(conn: apsw.Connection, seq: int) -> list[tuple[int, int]]:
    """Event sequences past ``seq``, as ranges (an indexed range read of the rowid)."""
    ranges: list[tuple[int, int]] = []
    for (s,) in conn.execute("SELECT sequence FROM events WHERE sequence > ? ORDER BY 1", (seq,)):
        _add_range(ranges, int(s))
    return ranges


def _by_proof(
    old: apsw.Connection, new: apsw.Connection, ro: ChainReport, rn: ChainReport
) -> PrefixComparison | str:
    """§11's decision, or why it cannot be made (then rows decide). Both reports are ok."""
    # rows a recovery kept whose event is lost are bound to no link the proof follows: the
    # counts below would not say whether the other file has them
    orphans = "a file holds rows of events a recovery lost"
    assert ro.head is not None and rn.head is not None
    co, cn = _counts(ro), _counts(rn)
    ho, hn = int(ro.head.sequence), int(rn.head.sequence)

    def result(**kw: Any) -> PrefixComparison:
        return PrefixComparison(
            old_revision=int(db.pragma(old, "user_version")),
            new_revision=int(db.pragma(new, "user_version")),
            decided_by="proof",
            old_chain_ok=True,
            new_chain_ok=True,
            old_head=ho,
            new_head=hn,
            old_chain=ro,
            new_chain=rn,
            **kw,
        )

    forward = chainio.proves_prefix(old, new, copy_report=ro, session_report=rn)
    if forward.proven:
        if ro.orphans_of_recovery or rn.orphans_of_recovery:
            return orphans
        same_meta = ro.head["meta_hash"] == rn.head["meta_hash"]
        # every row of old is bound to one of its events (none unbound, none orphaned), which
        # new holds alike: what new has more is what it added
        tables = {t: TableDiff(t, co[t], cn[t], added=cn[t] - co[t]) for t in APPEND_ONLY}
        return result(
            tables=tables,
            meta_equal=same_meta,
            gaps_equal=ro.head["gaps_hash"] == rn.head["gaps_hash"],
        )
    if hn < ho:
        back = chainio.proves_prefix(new, old, copy_report=rn, session_report=ro)
        if back.proven:
            if ro.orphans_of_recovery or rn.orphans_of_recovery:
                return orphans
            tables = {t: TableDiff(t, co[t], cn[t], missing=co[t] - cn[t]) for t in APPEND_ONLY}
            return result(
                tables=tables,
                meta_equal=ro.head["meta_hash"] == rn.head["meta_hash"],
                gaps_equal=ro.head["gaps_hash"] == rn.head["gaps_hash"],
                lost_event_ranges=_sequences_after(old, hn),
                rollback=(hn, ho),
            )
    return forward.reason


def compare(
    old: apsw.Connection,
    new: apsw.Connection,
    *,
    old_report: ChainReport | None = None,
    new_report: ChainReport | None = None,
) -> PrefixComparison:
    """Is ``old`` a prefix of ``new``? Both are read-only connections to session files whose
    schema the caller has already judged (``agentdb check``'s rules); each is read inside one
    read transaction. APSW errors propagate (wrap the call in :func:`agentdb.db.translated`).

    Revision-3 files are decided by the head proof when it applies (module doc);
    ``old_report``/``new_report``: full chain walks already made of these very files (else
    each is walked here)."""
    opened = [c for c in (old, new) if _begin(c)]
    try:
        revisions = (int(db.pragma(old, "user_version")), int(db.pragma(new, "user_version")))
        if not all(r in CHAINED for r in revisions):
            return _by_rows(old, new)
        ro = old_report if old_report is not None else chainio.verify_full(old)
        rn = new_report if new_report is not None else chainio.verify_full(new)
        if ro.ok and rn.ok:
            proved = _by_proof(old, new, ro, rn)
            if isinstance(proved, PrefixComparison):
                return proved
            why = proved
        else:
            why = "; ".join(_problems(n, r) for n, r in (("old", ro), ("new", rn)) if not r.ok)
        out = _by_rows(old, new)
        out.proof_refused, out.old_chain_ok, out.new_chain_ok = why, ro.ok, rn.ok
        out.old_chain, out.new_chain = ro, rn
        out.old_head = int(ro.head.sequence) if ro.ok and ro.head is not None else None
        out.new_head = int(rn.head.sequence) if rn.ok and rn.head is not None else None
        return out
    finally:
        for c in opened:
            if not c.get_autocommit():
                c.execute("COMMIT")


class ChainReports:
    """Full chain walks of files that do not change meanwhile (a backup folder's copies under
    its lock, a snapshot being placed), keyed by path and (inode, size, mtime): a file replaced
    or rewritten since is walked again."""

    def __init__(self) -> None:
        self._by: dict[tuple[str, StatKey], ChainReport] = {}

    @staticmethod
    def _key(path: Path) -> tuple[str, StatKey] | None:
        try:
            return (str(path), stat_key(os.stat(path)))
        except OSError:
            return None

    def get(self, path: Path) -> ChainReport | None:
        key = self._key(path)
        return None if key is None else self._by.get(key)

    def forget(self, path: Path) -> None:
        """Drop every walk of ``path`` (a file about to be written anew under that name)."""
        self._by = {k: v for k, v in self._by.items() if k[0] != str(path)}

    def put(self, path: Path, report: ChainReport | None) -> None:
        key = self._key(path)
        if key is not None and report is not None:
            self._by[key] = report


def compare_paths(
    old_path: Path, new_path: Path, *, reports: ChainReports | None = None
) -> PrefixComparison:
    """:func:`compare` on two files, each opened with :func:`agentdb.db.open_readonly` (so the
    same refusals apply: links, insecure modes, triggers and views). Errors are ours.

    ``reports``: the walks of files that cannot change meanwhile, used and filled (only for
    files no writer has open: the caller's promise)."""
    old = db.open_readonly(old_path)
    try:
        new = db.open_readonly(new_path)
        try:
            with db.translated(f"{old_path} / {new_path}"):
                if reports is None:
                    return compare(old, new)
                out = compare(
                    old, new, old_report=reports.get(old_path), new_report=reports.get(new_path)
                )
                reports.put(old_path, out.old_chain)
                reports.put(new_path, out.new_chain)
                return out
        finally:
            new.close()
    finally:
        old.close()
