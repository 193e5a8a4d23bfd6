"""Write the merged rows into a fresh session file (in the job's private work directory), and
check it once.

The replacement's revision is the target the plan chose: never below the original's. At
revision 3 (design §6) salvaged rows keep their stored hashes (the merge kept only rows whose
stored hashes held; a revision-1 or -2 original's rows are hashed here, and its events chained
in sequence order), the gap rows of earlier recoveries are carried over unchanged, the
replacement is walked by the verifier ``check`` uses, every break no carried record explains is
recorded (``chain.gaps_to_record``, with the original's live head as evidence for the tail and
``session_meta``), and the head is computed from that walk, never copied."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw

from agentdb import db, errors
from agentdb.checks import check_path, policy
from agentdb.hashing import chain_hash, event_hash, genesis, row_hash
from agentdb.salvage import tables
from agentdb.salvage.chainrows import HASHED, ChainEvidence
from agentdb.salvage.diskrows import DiskMap, ordered
from agentdb.salvage.merge import Merged
from agentdb.salvage.tables import Row
from agentdb.schema import chain, chainio
from agentdb.schema.migrations import create_schema
from agentdb.schema.revisions import (
    COLUMNS,
    CURRENT_REVISION,
    REV3_BOUND,
    REV3_HASHED,
    REV3_REVISION,
)

Resolve = Callable[[Row], Row]

_INSERT = {
    "events": "INSERT INTO events (sequence, id, timestamp, kind, producer_category, "
    "producer_name, producer_version, schema_version, payload, content_hash) "
    "VALUES (?,?,?,?,?,?,?,?,?,?)",
    "session_meta": "INSERT INTO session_meta (session_id, parent_session_id, profile, status, "
    "depth, started_at, ended_at) VALUES (?,?,?,?,?,?,?)",
    "cost_ledger": "INSERT INTO cost_ledger (sequence, event_sequence, provider_name, model_id, "
    "input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, cost_usd) "
    "VALUES (?,?,?,?,?,?,?,?,?)",
    "plan_items": "INSERT INTO plan_items (sequence, event_sequence, turn_id, tool_call_id, "
    "provider_name, tool_name, decision, decided_by) VALUES (?,?,?,?,?,?,?,?)",
    "producers": "INSERT INTO producers (category, name, version, first_seen_sequence) "
    "VALUES (?,?,?,?)",
}


def _as_is(row: Row) -> Row:
    return row


def _rows(merged: Merged, table: str, resolve: Resolve) -> Iterator[Row]:
    """The rows of ``table`` in key order, long values read back one row at a time."""
    rows, known = merged.rows[table], merged.hashes  # hashes verified against these rows
    if table != "events":
        for _, row in ordered(rows):
            yield resolve(row)
    elif isinstance(rows, DiskMap) and isinstance(known, DiskMap):
        for _, v, h in rows.raw(known):
            r = resolve(pickle.loads(v))
            yield (*r, pickle.loads(h) if h is not None else event_hash(*r))
    else:
        for _, row in ordered(rows):
            r = resolve(row)
            yield (*r, known.get(r[0]) or event_hash(*r))


def _insert_sql(table: str, revision: int) -> str:
    cols = COLUMNS[revision][table] if revision >= REV3_REVISION else None
    if cols is None:
        return _INSERT[table]
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


def write(
    path: Path,
    merged: Merged,
    resolve: Resolve | None = None,
    *,
    revision: int = CURRENT_REVISION,
    chained: Chained | None = None,
) -> list[chain.Gap]:
    """Create ``path`` (0600, exclusive, WAL, at ``revision``) holding ``merged``. Scratch: not
    fsynced here (the copy put beside the session is). The rows are loaded with no journal
    and no sync (each byte written once; a failure discards the whole file), then the file
    goes to WAL mode like every session file; :func:`check` judges the result. At revision 3
    ``chained`` is required; returns the gaps this recovery recorded (empty below 3)."""
    resolve = resolve or _as_is
    if revision >= REV3_REVISION and chained is None:
        raise ValueError("a revision-3 replacement needs its chain evidence")
    gaps: list[chain.Gap] = []
    conn = db.open_writer(path, create=True)
    try:
        with db.translated(path, conn):
            # foreign keys off: rows whose event was lost are kept
            db.exec_script(
                conn, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA foreign_keys=OFF"
            )
            create_schema(conn, revision)
            conn.execute("BEGIN IMMEDIATE")
            try:
                if chained is None:
                    for table in tables.TABLES:
                        conn.executemany(_INSERT[table], _rows(merged, table, resolve))
                else:
                    _write_rows_chained(conn, merged, resolve, chained)
                _restore_sequences(conn, merged, chained)
                if chained is not None:
                    gaps = _record_chain(conn, merged, chained)
                conn.execute("COMMIT")
            except BaseException:
                if not conn.get_autocommit():
                    conn.execute("ROLLBACK")
                raise
            db.configure_writer(conn, path)  # WAL, as every session file
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return gaps


class Chained:
    """What a revision-3 replacement needs besides the merged rows."""

    def __init__(
        self,
        session_id: str,
        original_revision: int,
        evidence: ChainEvidence | None,
        recovered_at: str,
    ) -> None:
        self.session_id = session_id
        self.original_revision = original_revision  # 1, 2: rows hashed here; 3: kept
        self.evidence = evidence  # stored hashes, the live head, gap rows (revision 3)
        self.recovered_at = recovered_at  # chain_gaps.recovered_at and the head's origin_at

    @property
    def old_head(self) -> chain.Head | None:
        """The original's head, as evidence only (live tier, own hash holds)."""
        if self.original_revision < REV3_REVISION or self.evidence is None:
            return None
        return self.evidence.head()


def _restore_sequences(conn: apsw.Connection, merged: Merged, chained: Chained | None) -> None:
    """AUTOINCREMENT counters at least as the original's (and, at revision 3, the events
    counter at least the original head's head_sequence: a lost number is never reissued)."""
    seqs = dict(merged.sequences)
    head = chained.old_head if chained is not None else None
    if head is not None and type(head.sequence) is int:
        seqs["events"] = max(seqs.get("events", 0), head.sequence)
    for name, seq in seqs.items():
        conn.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT ?, 0 WHERE NOT EXISTS "
            "(SELECT 1 FROM sqlite_sequence WHERE name = ?)",
            (name, name),
        )
        conn.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (seq, name))


def _write_rows_chained(
    conn: apsw.Connection, merged: Merged, resolve: Resolve, chained: Chained
) -> None:
    """Every merged row with its hashes: derived rows first (an event's chain binds them),
    then events with their stored (or, below revision 3, computed) prev_hash and chain_hash,
    then the carried-over gap rows."""
    rev = REV3_REVISION
    conn.executemany(_INSERT["session_meta"], _rows(merged, "session_meta", resolve))
    for table in HASHED:
        conn.executemany(
            _insert_sql(table, rev),
            ((*r, row_hash(table, r)) for r in _rows(merged, table, resolve)),
        )
    conn.executemany(_insert_sql("events", rev), _chained_events(conn, merged, resolve, chained))
    if chained.original_revision >= REV3_REVISION and chained.evidence is not None:
        for g in chained.evidence.gap_rows():
            cols = (*REV3_HASHED["chain_gaps"], "content_hash")
            conn.execute(
                f"INSERT INTO chain_gaps ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                (*_sql_values(g), g.content_hash),
            )


def _sql_values(row: chain.Row) -> tuple[object, ...]:
    """A stored row's values as SQL binds them (TEXT back to ``str``)."""
    return tuple(
        v.decode("utf-8", "surrogatepass") if row.mask >> i & 1 and type(v) is bytes else v
        for i, v in enumerate(row.values)
    )


_BOUND_SQL = tuple(f"SELECT content_hash FROM {table} WHERE {key} = ?" for table, key in REV3_BOUND)


def _bound(conn: apsw.Connection, seq: int) -> list[list[bytes]]:
    """The content hashes of the derived rows the replacement binds to event ``seq``."""
    return [[bytes(h) for (h,) in conn.execute(sql, (seq,))] for sql in _BOUND_SQL]


def _chained_events(
    conn: apsw.Connection, merged: Merged, resolve: Resolve, chained: Chained
) -> Iterator[tuple[object, ...]]:
    """The events in sequence order, each with content_hash, prev_hash and chain_hash. A
    revision-3 original's are the stored ones: of several stored pairs (a damaged copy), the
    first whose chain recomputes from the bound rows, else the first linking to the event
    before. A revision-1 or -2 original's are computed: its events are chained here."""
    ev = chained.evidence
    stored = chained.original_revision >= REV3_REVISION
    prev_chain = genesis(chained.session_id)
    for r in _rows(merged, "events", resolve):
        *row, content = r
        seq = row[0]
        if stored:
            pairs = ev.links(seq, content) if ev is not None else []
            if ev is None or not pairs:  # the merge keeps only events with a stored pair
                raise ValueError(f"event {seq} has no stored chain hashes")
            bound = _bound(conn, seq)
            fits = [p for p in pairs if chain_hash(p[0], content, bound) == p[1]]
            linked = [p for p in pairs if p[0] == prev_chain]
            prev, link = (fits or linked or pairs)[0]
            if not fits:
                prev, link = _attested(ev, seq, content, bound, (prev, link), prev_chain)
        else:
            prev = prev_chain
            link = chain_hash(prev, content, _bound(conn, seq))
        prev_chain = link
        yield (*row, content, prev, link)


def _attested(
    ev: ChainEvidence,
    seq: int,
    content: bytes,
    bound: list[list[bytes]],
    pair: tuple[bytes, bytes],
    prev_chain: bytes,
) -> tuple[bytes, bytes]:
    """An event whose own chain does not recompute (a stored chain field damaged) keeps its
    stored pair unless two other stored hashes agree on the original field: the prev_hash is
    the event before's chain_hash when this event's stored chain_hash recomputes from it; the
    chain_hash is the one its stored prev_hash, content and rows give when the next event's
    stored prev_hash names it. Otherwise the walk records the break (``rows``/``link``)."""
    prev, link = pair
    if prev != prev_chain and chain_hash(prev_chain, content, bound) == link:
        return prev_chain, link
    own = chain_hash(prev, content, bound)
    if own in ev.prevs(seq + 1):
        return prev, own
    return prev, link


def _record_chain(conn: apsw.Connection, merged: Merged, chained: Chained) -> list[chain.Gap]:
    """Walk the replacement's rows (no head yet), record every break no carried gap row
    explains, write the head computed from the walk; the gaps recorded."""
    report = chainio.verify_full(conn, session_id=chained.session_id, heads=False, max_listed=None)
    highest = max(
        merged.sequences.get("events", 0),
        report.last_sequence,
        *(
            int(db.scalar(conn, f"SELECT coalesce(max({key}), 0) FROM {table}"))
            for table, key in REV3_BOUND
        ),
    )
    todo = chain.gaps_to_record(
        report,
        chained.old_head,
        highest_sequence=highest,
        original_revision=chained.original_revision,
    )
    records = chainio.record_gaps(conn, todo, chained.recovered_at)
    head = chain.rebuild_head(
        report,
        records,
        session_id=chained.session_id,
        origin="recovered",
        origin_revision=chained.original_revision,
        origin_at=chained.recovered_at,
    )
    chainio.write_head(conn, head)
    return todo


def check(path: Path, session_id: str, merged: Merged) -> tuple[list[str], int]:
    """(problems, rows whose event was lost) of the replacement at ``path``: judged once, by
    ``agentdb check``'s own full judge as a recovered file (integrity_check, identity, schema,
    session_meta, every content_hash; informational findings such as ``orphan_of_recovery``
    allowed), and holding exactly the merged row counts. A revision-3 replacement is also
    walked in full by the chain verifier: any break its gap rows do not explain, any row whose
    own hash fails, a head that is not the walk's, and it is never swapped in."""
    problems = chain_problems(path, session_id)
    if problems:
        return problems, 0
    result = check_path(path, session_id, recovered=True)
    if not policy.is_ok(result.verdict):
        bad = [f for f in result.findings if f.severity == "error"] or result.findings
        problems += [f"check: {result.verdict}: {f.code}: {f.message}" for f in bad[:3]]
        if not bad:
            problems.append(f"check: verdict {result.verdict}")
        return problems, 0
    try:
        counts = table_counts(path)
    except (apsw.Error, errors.AgentdbError) as e:
        return [f"reading the replacement fails: {e}"], 0
    for table in tables.TABLES:
        if counts[table] != len(merged.rows[table]):
            problems.append(
                f"{table} holds {counts[table]} rows, expected {len(merged.rows[table])}"
            )
    return problems, _orphans(merged)


def chain_problems(path: Path, session_id: str) -> list[str]:
    """Why a revision-3 file's chain does not verify in full with its recorded gaps (empty
    when it does, and below revision 3)."""
    try:
        conn = db.open_readonly(path)
        try:
            if int(db.scalar(conn, "PRAGMA user_version")) < REV3_REVISION:
                return []
            report = chainio.verify_full(conn, session_id=session_id)
        finally:
            conn.close()
    except (apsw.Error, errors.AgentdbError) as e:
        return [f"reading the replacement's chain fails: {e}"]
    if report.ok:
        return []
    out = [f"chain: {code}" for code in report.problems]
    out += [
        f"chain: unexplained {b.gap.kind} break {b.gap.from_seq}-{b.gap.to_seq}"
        for b in report.unexplained_breaks[:3]
    ]
    return out


def table_counts(path: Path) -> dict[str, int]:
    """Rows per table of a session file."""
    conn = db.open_readonly(path)
    try:
        return {
            t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0])  # type: ignore[arg-type]
            for t in tables.TABLES
        }
    finally:
        conn.close()


def _orphans(merged: Merged) -> int:
    """Kept rows whose event was lost (history: money was spent, a decision was made)."""
    events = merged.rows["events"]
    return sum(
        1
        for t in ("cost_ledger", "plan_items")
        for _, row in ordered(merged.rows[t])
        if row[1] not in events
    )
