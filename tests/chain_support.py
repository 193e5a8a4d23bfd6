"""Revision-3 session files for the chain walk's tests, written by direct inserts with the
released DDL and hashes from ``agentdb.hashing`` (until the revision-3 writer is on main).

A *shape* is a list of events, each a tuple (costs, plans, new producer): how many
cost_ledger and plan_items rows it binds and whether it is the first event of a producer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import apsw

from agentdb import db
from agentdb.hashing import chain_hash, event_hash, gaps_hash, genesis, row_hash
from agentdb.schema import chain, chainio
from agentdb.schema.revisions import REV3_BOUND, REV3_DDL, REV3_HASHED

SID = "01JCHAINWALK00000000000000"
Shape = Sequence[tuple[int, int, bool]]


def _cols(table: str) -> str:
    return ", ".join((*REV3_HASHED[table], "content_hash"))


def build(path: Path, shape: Shape, *, status: str = "running") -> None:
    """A healthy revision-3 file at ``path`` holding ``shape``."""
    conn = db.open_private(path)
    try:
        with conn:
            db.exec_script(conn, REV3_DDL)
            meta = (SID, None, "test", status, 0, "2026-12-01T00:00:00Z", None)
            conn.execute("INSERT INTO session_meta VALUES (?,?,?,?,?,?,?)", meta)
            prev = genesis(SID)
            cseq = pseq = 0
            counts = [0, 0, 0, 0]
            for i, (nc, np_, prod) in enumerate(shape, 1):
                name = f"p{i}" if prod or i == 1 else "p1"
                ev = (
                    i,
                    f"ev-{i}",
                    f"2026-12-01T00:00:{i % 60:02d}Z",
                    "message",
                    "model",
                    name,
                    "1",
                    "1",
                    b"payload %d" % i,
                )
                bound: list[list[bytes]] = [[], [], []]
                for _ in range(nc):
                    cseq += 1
                    r = (cseq, i, "prov", "m", 10, 20, 0, 0, 0.25 * cseq)
                    h = row_hash("cost_ledger", r)
                    conn.execute(
                        f"INSERT INTO cost_ledger ({_cols('cost_ledger')}) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (*r, h),
                    )
                    bound[0].append(h)
                for _ in range(np_):
                    pseq += 1
                    r = (pseq, i, f"turn{i}", f"call{pseq}", "prov", "tool", "allow", "rule")
                    h = row_hash("plan_items", r)
                    conn.execute(
                        f"INSERT INTO plan_items ({_cols('plan_items')}) "
                        "VALUES (?,?,?,?,?,?,?,?,?)",
                        (*r, h),
                    )
                    bound[1].append(h)
                if prod or i == 1:
                    r = ("model", name, "1", i)
                    h = row_hash("producers", r)
                    conn.execute(
                        f"INSERT INTO producers ({_cols('producers')}) VALUES (?,?,?,?,?)", (*r, h)
                    )
                    bound[2].append(h)
                    counts[3] += 1
                content = event_hash(*ev)
                link = chain_hash(prev, content, bound)
                conn.execute(
                    "INSERT INTO events (sequence, id, timestamp, kind, producer_category,"
                    " producer_name, producer_version, schema_version, payload,"
                    " content_hash, prev_hash, chain_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (*ev, content, prev, link),
                )
                prev = link
            counts[0], counts[1], counts[2] = len(shape), cseq, pseq
            head = (
                1,
                *counts,
                len(shape),
                prev,
                row_hash("session_meta", meta),
                0,
                gaps_hash([]),
                "created",
                3,
                "2026-12-01T00:00:00Z",
            )
            conn.execute(
                f"INSERT INTO session_chain ({_cols('session_chain')}) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (*head, row_hash("session_chain", head)),
            )
    finally:
        conn.close()


def edit(path: Path, *sql: str) -> None:
    """Naive edits: plain SQL that recomputes no hash (foreign keys off, like a hand edit)."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        with conn:
            for s in sql:
                conn.execute(s)
    finally:
        conn.close()


def opened(path: Path) -> apsw.Connection:
    return db.open_private(path, readonly=True)


def append(
    path: Path,
    sequence: int | None = None,
    producer: tuple[str, str, str] = ("tool", "t", "1"),
    payload: bytes = b"x",
) -> int:
    """One more event as the revision-3 writer would write it: chained from the head, at
    ``sequence`` (default: the writer's next), by ``producer`` (category, name, version),
    the head rewritten. Returns its sequence."""
    conn = apsw.Connection(str(path))
    try:
        with conn:
            head = list(
                conn.execute(
                    f"SELECT {', '.join(REV3_HASHED['session_chain'])} FROM session_chain"
                ).fetchall()[0]
            )
            # the writer's next sequence (design A8): past sqlite_sequence, max and the head
            top = conn.execute(
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),"
                " coalesce((SELECT max(sequence) FROM events), 0))"
            ).fetchall()[0][0]
            seq = sequence if sequence is not None else max(top, head[5]) + 1
            ev = (
                seq,
                f"ev-{seq}",
                "2026-12-01T01:00:00Z",
                "tool_call",
                *producer,
                "1",
                payload,
            )
            content = event_hash(*ev)
            link = chain_hash(head[6], content, [[], [], []])
            conn.execute(
                "INSERT INTO events (sequence, id, timestamp, kind, producer_category,"
                " producer_name, producer_version, schema_version, payload,"
                " content_hash, prev_hash, chain_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (*ev, content, head[6], link),
            )
            head[1] += 1
            head[5], head[6] = seq, link
            conn.execute(
                "UPDATE session_chain SET event_count = ?, head_sequence = ?, "
                "head_hash = ?, content_hash = ?",
                (head[1], seq, link, row_hash("session_chain", head)),
            )
    finally:
        conn.close()
    return seq


def lossy_recovery(
    path: Path, *deletions: str, at: str = "2026-12-01T02:00:00Z"
) -> list[chain.Gap]:
    """What a recovery that lost rows leaves, with SQL standing in for salvage (the gaps it
    recorded are returned): ``deletions``
    applied; from revision 3 also as design §6 says — the stored hashes kept, the walk's breaks
    recorded as gap rows, the head rebuilt from the walk, the events counter kept. (Below
    revision 3 a lost row leaves nothing behind: the deletions are the whole of it.)"""
    conn = db.open_private(path, readonly=True)
    try:
        revision = int(db.scalar(conn, "PRAGMA user_version"))
        old = chainio.verify_full(conn) if revision >= 3 else None
    finally:
        conn.close()
    if old is None:
        edit(path, *deletions)
        return []
    sid = path.name[:26]
    edit(path, "DELETE FROM session_chain", *deletions)
    conn = apsw.Connection(str(path))
    try:
        report = chainio.verify_full(conn, session_id=sid, heads=False, max_listed=None)
        todo = chain.gaps_to_record(report, old.head, highest_sequence=old.last_sequence)
        with conn:
            records = chainio.record_gaps(conn, todo, at)
            head = chain.rebuild_head(
                report,
                records,
                session_id=sid,
                origin="recovered",
                origin_revision=revision,
                origin_at=at,
            )
            chainio.write_head(conn, head)
            conn.execute(
                "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'events'",
                (old.head.sequence if old.head else 0,),
            )
    finally:
        conn.close()
    return todo


def reseal(path: Path) -> None:
    """What a conforming writer (another one: its rows are not the ones agentdb writes) leaves
    after writing the rows ``path`` holds now: every derived row's and every event's
    ``content_hash``, every ``prev_hash``/``chain_hash`` and the head recomputed from the rows
    as they stand (``origin`` and the gap records as they are). A revision-3 file edited with
    plain SQL and then resealed is a valid file with that content, not damage."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        with conn:
            bound: dict[int, list[list[bytes]]] = {}
            counts: list[int] = []
            for i, (table, key) in enumerate(REV3_BOUND):
                cols = REV3_HASHED[table]
                at = cols.index(key)
                table_rows = conn.execute(f"SELECT rowid, {', '.join(cols)} FROM {table}")
                counts.append(0)
                for rowid, *values in list(table_rows):
                    h = row_hash(table, values)
                    conn.execute(f"UPDATE {table} SET content_hash = ? WHERE rowid = ?", (h, rowid))
                    bound.setdefault(values[at], [[], [], []])[i].append(h)
                    counts[i] += 1
            meta_cols = ", ".join(REV3_HASHED["session_meta"])
            meta = conn.execute(f"SELECT {meta_cols} FROM session_meta").fetchall()
            prev, last, n = genesis(meta[0][0]), 0, 0
            spec = ", ".join(REV3_HASHED["events"])
            for values in list(conn.execute(f"SELECT {spec} FROM events ORDER BY sequence")):
                content = event_hash(*values)
                link = chain_hash(prev, content, bound.get(values[0], [[], [], []]))
                conn.execute(
                    "UPDATE events SET content_hash = ?, prev_hash = ?, chain_hash = ? "
                    "WHERE sequence = ?",
                    (content, prev, link, values[0]),
                )
                prev, last, n = link, values[0], n + 1
            gaps = [
                g for (g,) in conn.execute("SELECT content_hash FROM chain_gaps ORDER BY sequence")
            ]
            head = list(
                conn.execute(
                    f"SELECT {', '.join(REV3_HASHED['session_chain'])} FROM session_chain"
                ).fetchone()
            )
            head[1:10] = [
                n,
                *counts,
                last,
                prev,
                row_hash("session_meta", meta[0]),
                len(gaps),
                gaps_hash(gaps),
            ]
            conn.execute(
                "UPDATE session_chain SET "
                + ", ".join(f"{c} = ?" for c in REV3_HASHED["session_chain"][1:])
                + ", content_hash = ?",
                (*head[1:], row_hash("session_chain", head)),
            )
    finally:
        conn.close()
