"""Engine b (and the diagnosis): read every table through SQLite on a private copy.

Never run on the original: the caller copies the database and its WAL into a private temporary
directory first (SQLite may build a ``-shm`` there, or checkpoint). Each table is read in rowid
order; when SQLite reports damage, the reader steps around it: the row right after the last good
one is skipped if the b-tree still finds its key, else the next readable key is found by probing
exponentially growing rowid distances and bisecting back. Everything reachable by b-tree traversal
is saved; what lies under a damaged page is left to engine c.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors, paths
from agentdb.checks.file import chain_names
from agentdb.hashing import as_bytes_sql, mismatch_sql, text_mask_sql
from agentdb.salvage import chainrows, tables
from agentdb.salvage.diskrows import Verified
from agentdb.salvage.scratch import Scratch
from agentdb.salvage.tables import Row
from agentdb.schema.identity import identify, schema_differences
from agentdb.schema.revisions import COLUMNS, KNOWN_REVISION, REV3_HASHED
from agentdb.schema.text import invalid_text, text_encoding


@dataclass
class Diagnosis:
    """Whether a session file needs recovery, judged on a private copy."""

    damaged: bool  # integrity, readability, hashes, WAL or shape say so
    reasons: list[str] = field(default_factory=list)  # why, one line each
    refused: str | None = None  # foreign / too new: never recovered (reason)
    revision: int | None = None  # user_version when readable
    integrity_only: bool = False  # only integrity_check complains (tables may be intact)


@dataclass
class RowSalvage:
    """What engine b read."""

    # table -> key -> row (the AUTOINCREMENT tables' in the scratch database, the others dicts)
    rows: dict[str, MutableMapping[Any, Row]]
    event_hashes: MutableMapping[int, bytes]  # stored content hashes (scratch database)
    chain: chainrows.ChainEvidence | None = None  # revision 3: stored hashes, head, gap rows
    sequences: dict[str, int] = field(default_factory=dict)  # sqlite_sequence counters
    rejected: Counter[str] = field(default_factory=Counter)
    damaged_regions: int = 0  # times a read had to step around damage (all tables)
    restarts: dict[str, int] = field(default_factory=dict)  # table -> scans run again
    # rowid -> key for the tables whose key is not the rowid (session_meta, producers)
    rowid_keys: dict[str, dict[int, Any]] = field(default_factory=dict)
    regions: dict[str, int] = field(default_factory=dict)  # table -> damaged regions
    complete: bool = False  # every table was read start to end without an error
    notes: list[str] = field(default_factory=list)


def open_copy(path: Path) -> apsw.Connection:
    """A hardened read-only connection to a private copy (refuses triggers and views); its WAL
    is read in place, not copied again."""
    return db.open_readonly(path, private=True)


def diagnose(
    conn: apsw.Connection | None, open_error: BaseException | None, session_id: str | None = None
) -> Diagnosis:
    """Judge a file from a connection to its copy (or from the error opening it). A file whose
    one ``session_meta`` row names another valid session id is that session's file copied or
    renamed under this name: refused as ``foreign`` (``check``'s ``meta_id_mismatch``)."""
    if conn is None:
        if isinstance(open_error, errors.UnsafeSchema):
            return Diagnosis(False, [str(open_error)], refused="unsafe_schema")
        return Diagnosis(True, [f"SQLite cannot open it: {open_error}"])
    try:
        ident = identify(conn)
    except db.READ_ERRORS as e:
        return Diagnosis(True, [f"SQLite cannot read its header or schema: {e}"])
    if ident.kind in ("foreign", "too_new", "empty"):
        return Diagnosis(False, [ident.problem or ident.kind], refused=ident.kind)
    d = Diagnosis(False, revision=ident.revision)
    try:
        problems = db.integrity_problems(conn)
        if problems:
            d.reasons += [f"integrity_check: {p}" for p in problems[:5]]
    except db.READ_ERRORS as e:
        d.reasons.append(f"integrity_check fails: {type(e).__name__}: {e}")
    seen_by_integrity = len(d.reasons)
    try:
        diffs = schema_differences(conn, ident.revision)
        if diffs:
            d.reasons.append(f"schema differs from revision {ident.revision}: {diffs[0]}")
        if not diffs:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT CAST(session_id AS BLOB) FROM session_meta NOT INDEXED LIMIT 2"
                )
            ]
            other = None
            if len(ids) != 1:
                d.reasons.append(f"session_meta holds {len(ids)} rows, expected 1")
            elif (other := _another_session(ids[0], session_id)) is not None and not (
                session_id is not None and chain_names(conn, session_id)
            ):
                why = (
                    f"session_meta names another session ({other}): that session's file, "
                    "copied or renamed under this name; move it back by hand"
                )
                return Diagnosis(False, [why], refused="foreign", revision=ident.revision)
            if other is not None:
                d.reasons.append(
                    f"session_meta names another session ({other}), but the event chain starts "
                    "at this session's genesis: a page of another session's file; its row is "
                    "not kept"
                )
            if not seen_by_integrity:  # else damaged already: the engines check every row
                _row_problems(conn, ident.revision, d)
    except db.READ_ERRORS as e:
        d.reasons.append(f"reading it fails: {type(e).__name__}: {e}")
    d.integrity_only = seen_by_integrity > 0 and len(d.reasons) == seen_by_integrity
    d.damaged = bool(d.reasons)
    return d


def _another_session(stored: Any, session_id: str | None) -> str | None:
    """The valid session id ``stored`` names when it is not ``session_id``, else None."""
    if session_id is None or not isinstance(stored, bytes):
        return None
    try:
        text = stored.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text != session_id and paths.is_valid_id(text) else None


def _row_problems(conn: apsw.Connection, revision: int, d: Diagnosis) -> None:
    """Content hashes (revision 2) and TEXT that is not valid UTF-8, read in full."""
    encoding = text_encoding(conn)
    if encoding is not None:
        d.reasons.append(encoding)
        return
    if revision >= 2:
        bad = conn.execute(mismatch_sql("count(*)")).fetchall()[0][0]
        if bad:
            d.reasons.append(f"{bad} events do not match their content_hash")
    skip = ("events",) if revision >= 2 else ()  # the hash covers events
    for table, n in invalid_text(conn, skip=skip).items():
        d.reasons.append(f"{n} {table} rows hold TEXT that is not valid UTF-8")
    if revision >= 3:
        _chain_problems(conn, d)


def _chain_problems(conn: apsw.Connection, d: Diagnosis) -> None:
    """Revision 3: the full chain walk (every row's own hash, every link, the head, the gap
    records), as ``check`` judges it; a break a gap record explains is no damage."""
    from agentdb.schema import chainio

    report = chainio.verify_full(conn)
    if report.ok:
        return
    what = ", ".join(report.problems)
    where = [f"{b.gap.kind} {b.gap.from_seq}-{b.gap.to_seq}" for b in report.unexplained_breaks]
    failures = [f"{t} {k!r}" for t, k in report.row_failures[:3]]
    detail = "; ".join(x for x in (", ".join(failures), ", ".join(where[:3])) if x)
    d.reasons.append(f"the chain does not verify: {what}" + (f" ({detail})" if detail else ""))


def _columns(table: str, revision: int) -> list[str]:
    """The columns read of ``table`` at ``revision``: every one the revision has (revision 2:
    events' content_hash; revision 3: events' three hashes, each derived table's own)."""
    return list(COLUMNS[min(max(revision, 1), KNOWN_REVISION)][table])


def _select(table: str, cols: list[str], where: str) -> str:
    """rowid, a bitmask of the TEXT columns, then every column with TEXT as its stored bytes:
    a value that is not valid UTF-8 is rejected here, never raised by APSW's decoding."""
    values = ", ".join(as_bytes_sql(c) for c in cols)
    return (
        f"SELECT rowid, {text_mask_sql(tuple(cols))}, {values} FROM {table} "
        f"WHERE {where} ORDER BY rowid"
    )


def _decode(table: str, cols: list[str], r: tuple[Any, ...]) -> tuple[list[Any], str | None]:
    """The values of a row read by :func:`_select`, TEXT decoded (strict UTF-8)."""
    mask = int(r[1])
    values = list(r[2:])
    for i, v in enumerate(values):
        if mask >> i & 1 and isinstance(v, bytes):
            try:
                values[i] = v.decode("utf-8")
            except UnicodeDecodeError:
                return values, f"{cols[i]} is not valid UTF-8"
    return values, None


def salvage_rows(
    conn: apsw.Connection,
    session_id: str,
    revision: int,
    verified: Verified | None = None,
    store: Scratch | None = None,
    chain: chainrows.ChainEvidence | None = None,
) -> RowSalvage:
    """Read every table of the copy, stepping around damaged regions.

    ``verified`` holds (row, content_hash) pairs another engine already checked: an identical
    row with an identical stored hash is not hashed again. The rows go into ``store``, the job's
    scratch database (long values apart: :meth:`~agentdb.salvage.scratch.Scratch.keep`; by
    default one in memory). At revision 3 every table is read with its hash columns: a row
    whose stored hash fails is rejected, the hashes go to ``chain`` (default: new, in
    ``store``), with the head and the gap rows.
    """
    store = store or Scratch(None)
    out = RowSalvage({}, store.map("read_hashes"))
    rev = min(max(revision, 1), KNOWN_REVISION)
    if rev >= 3:
        out.chain = chain or store.chain_evidence()
    complete = True
    for table in tables.TABLES:
        out.rows[table] = store.map(f"read_{table}") if table in tables.AUTOINCREMENT_TABLES else {}
        cols = _columns(table, rev)
        taker = _Taker(out, table, cols, session_id, rev, verified)
        taker.keep = store.keep
        reader = _RowReader(conn, table, cols, taker.take)
        try:
            complete &= reader.read()
        except apsw.Error as e:
            out.notes.append(f"rows engine: {table} unreadable ({type(e).__name__})")
            complete = False
        out.restarts[table] = reader.restarts
        out.regions[table] = reader.regions
        out.damaged_regions += reader.regions
        if reader.skipped:
            out.rejected[f"{table}: rows unreadable through SQLite"] += reader.skipped
    try:
        for name, seq in conn.execute("SELECT name, seq FROM sqlite_sequence"):
            if isinstance(name, str) and isinstance(seq, int):
                out.sequences[name] = max(seq, out.sequences.get(name, 0))
    except db.READ_ERRORS:
        complete = False
    if out.chain is not None:
        complete &= _read_chain_tables(conn, out.chain)
    out.complete = complete
    return out


def _read_chain_tables(conn: apsw.Connection, chain: chainrows.ChainEvidence) -> bool:
    """Revision 3's own tables, read through SQLite (the live b-tree): the head as evidence,
    the gap rows to carry over. False when either cannot be read whole."""
    ok = True
    for table in chainrows.CHAIN_TABLES:
        cols = (*REV3_HASHED[table], "content_hash")
        limit = 16 if table == "session_chain" else chainrows.MAX_GAPS
        sql = _select(table, list(cols), "1") + f" LIMIT {limit}"
        try:
            for r in conn.execute(sql):
                values, why = _decode(table, list(cols), tuple(r))
                if why is not None:
                    continue
                if table == "session_chain":
                    chain.see_head(values[:-1], values[-1], chainrows.LIVE_ROWS)
                else:
                    chain.see_gap(values[:-1], values[-1])
        except apsw.Error as e:
            if isinstance(e, apsw.InterruptError | apsw.NoMemError):
                raise
            ok = False
    return ok


class _Taker:
    """Validates each row one table's reader returns and keeps it in a :class:`RowSalvage`."""

    def __init__(
        self,
        out: RowSalvage,
        table: str,
        cols: list[str],
        session_id: str,
        revision: int,
        known: Verified | None,
    ) -> None:
        self.out = out
        self.table = table
        self.cols = cols
        self.ncols = len(COLUMNS[1][table])
        self.session_id = session_id
        # revision 2: events carry content_hash; revision 3: every table but session_meta
        self.hashed = len(cols) > self.ncols
        self.chained = revision >= 3 and self.hashed
        self.known = known
        self.found = out.rows[table]
        self.keep: Callable[[Row], Row] = _as_is

    def take(self, r: tuple[Any, ...]) -> None:
        raw, why = _decode(self.table, self.cols, r)
        values = tables.normalise(self.table, raw[: self.ncols])
        if why is None:
            why = tables.problem(self.table, values, self.session_id)
        if why is None and self.hashed:
            stored = raw[self.ncols]
            if self.table != "events":
                why = tables.hash_problem(values, stored, self.table)
            elif self.known is None or self.known.get(values[0]) != (values, stored):
                why = tables.hash_problem(values, stored)
            if why is None and self.table == "events":
                self.out.event_hashes[values[0]] = stored
            if why is None and self.chained and self.out.chain is not None:
                if self.table == "events":
                    self.out.chain.see_event(values, stored, *raw[self.ncols + 1 :], checked=True)
                else:
                    self.out.chain.see_row(self.table, values, stored, checked=True)
        if why is not None:
            self.out.rejected[f"{self.table}: {why}"] += 1
            return
        key = tables.key_of(self.table, values)
        self.found[key] = self.keep(values)
        if self.table not in tables.AUTOINCREMENT_TABLES:
            self.out.rowid_keys.setdefault(self.table, {})[int(r[0])] = key


def _as_is(row: Row) -> Row:
    return row


class _OutOfOrder(Exception):
    """The scan returned a rowid not above the last one: a garbage cell, the b-tree order broke."""


# Probes one damaged region may spend finding the next readable row (exponential search over
# 63 bits, then bisection): the search always ends.
_MAX_PROBES = 2 * 64 + 8


class _RowReader:
    """Reads one table in rowid order through SQLite and steps around damage without looping.

    Progress is monotonic by rowid: a row is taken only when its rowid is above the last one
    taken (a garbage cell that decodes to a smaller rowid ends the scan like an error does).
    After a failure the reader finds the next position where a whole row reads cleanly (full
    rows, probed at exponentially growing distances, then bisected; at most ``_MAX_PROBES``
    probes) and only then restarts the scan there. So every restart starts past a new damaged
    region: ``restarts == regions`` and the scan runs at most ``regions + 1`` times.
    """

    def __init__(
        self,
        conn: apsw.Connection,
        table: str,
        cols: list[str],
        take: Callable[[tuple[Any, ...]], None],
    ) -> None:
        self.conn = conn
        self.table = table
        self.scan_sql = _select(table, cols, "rowid > ?")
        self.probe_sql = _select(table, cols, "rowid >= ?") + " LIMIT 1"
        self.take = take
        self.restarts = 0  # times the scan was run again after a failure
        self.regions = 0  # damaged regions stepped around
        self.skipped = 0  # keys the b-tree still finds inside those regions (rows lost here)

    def read(self) -> bool:
        """Read the whole table; True when no damage was met."""
        after = -(1 << 63)
        while True:
            try:
                for r in self.conn.execute(self.scan_sql, (after,)):
                    rowid = int(r[0])
                    if rowid <= after:
                        raise _OutOfOrder
                    after = rowid
                    self.take(tuple(r))
                return self.regions == 0
            except (apsw.Error, _OutOfOrder) as e:
                if isinstance(e, apsw.InterruptError | apsw.NoMemError):
                    raise
            self.regions += 1
            if after >= tables.MAX_ROWID:
                return False
            nxt = self._next_readable(after)
            if nxt is None:
                return False
            self._count_skipped(after, nxt)
            after = nxt - 1
            self.restarts += 1

    def _readable(self, at: int) -> tuple[bool, bool]:
        """(a whole row reads cleanly at the first rowid >= at, the table ends before it)."""
        try:
            r = self.conn.execute(self.probe_sql, (at,)).fetchone()
        except apsw.Error as e:
            if isinstance(e, apsw.InterruptError | apsw.NoMemError):
                raise
            return False, False
        if r is None:
            return True, True
        return int(r[0]) >= at, False

    def _next_readable(self, after: int) -> int | None:
        """Smallest g > after + 1 (found by exponential search, then bisection) from which a
        whole row reads cleanly; None when no such row exists."""
        bad = after + 1
        step = 1
        probes = 0
        while True:
            step *= 2
            g = min(after + step, tables.MAX_ROWID)
            ok, end = self._readable(g)
            probes += 1
            if ok:
                if end and g == after + 2:
                    return None  # nothing readable lies beyond the damage
                good = g
                break
            bad = g
            if g == tables.MAX_ROWID or probes >= _MAX_PROBES:
                return None
        while good - bad > 1 and probes < _MAX_PROBES:
            mid = (good + bad) // 2
            ok, _ = self._readable(mid)
            probes += 1
            if ok:
                good = mid
            else:
                bad = mid
        return good

    def _count_skipped(self, after: int, nxt: int) -> None:
        """Count the keys the b-tree still finds between ``after`` and ``nxt`` (rows it cannot
        read); a seek that fails counts nothing."""
        try:
            r = self.conn.execute(
                f"SELECT count(*) FROM (SELECT rowid FROM {self.table} "
                "WHERE rowid > ? AND rowid < ? ORDER BY rowid LIMIT 100000)",
                (after, nxt),
            ).fetchone()
        except apsw.Error as e:
            if isinstance(e, apsw.InterruptError | apsw.NoMemError):
                raise
            return
        if r is not None:
            self.skipped += int(r[0])
