"""An independent recomputation of a revision-3 file's hashes (design §3-§5), for tests.

Reads every row as Python values (no SQL hash function, no recursive query) and recomputes with
:mod:`agentdb.hashing`'s Python functions, whose golden vectors equal the measured prototype's
(tests/test_hashing.py). Returns what does not hold; empty means every row hash, every link and
the head are what the design defines."""

from __future__ import annotations

from typing import Any

import apsw

from agentdb.hashing import chain_hash, event_hash, gaps_hash, genesis, row_hash
from agentdb.schema.revisions import COLUMNS, REV3_BOUND, REV3_HASHED


def rows(conn: apsw.Connection, table: str, order: str = "rowid") -> list[tuple[Any, ...]]:
    cols = ", ".join(COLUMNS[3][table])
    return [tuple(r) for r in conn.execute(f"SELECT {cols} FROM {table} ORDER BY {order}")]


def problems(conn: apsw.Connection) -> list[str]:
    out: list[str] = []
    metas = rows(conn, "session_meta")
    heads = rows(conn, "session_chain")
    if len(metas) != 1 or len(heads) != 1:
        return [f"{len(metas)} session_meta, {len(heads)} session_chain rows"]
    sid = metas[0][0]
    bound: dict[int, list[list[bytes]]] = {}
    counts: dict[str, int] = {}
    for i, (table, key) in enumerate(REV3_BOUND):
        table_rows = rows(conn, table)
        counts[table] = len(table_rows)
        at = COLUMNS[3][table].index(key)
        for r in table_rows:
            *values, stored = r
            if row_hash(table, values) != stored:
                out.append(f"{table} {r[0]}: content_hash")
            bound.setdefault(r[at], [[], [], []])[i].append(stored)
    prev, last_seq = genesis(sid), 0
    events = rows(conn, "events", "sequence")
    for r in events:
        seq = r[0]
        if event_hash(*r[:9]) != r[9]:
            out.append(f"event {seq}: content_hash")
        if r[10] != prev:
            out.append(f"event {seq}: prev_hash is not the previous chain_hash")
        if seq != last_seq + 1:
            out.append(f"event {seq}: sequence after {last_seq}")
        if chain_hash(prev, r[9], bound.pop(seq, [[], [], []])) != r[11]:
            out.append(f"event {seq}: chain_hash")
        prev, last_seq = r[11], seq
    if bound:
        out.append(f"rows bound to no event: {sorted(bound)}")
    head = heads[0]
    want = list(head)
    want[1:5] = [len(events), counts["cost_ledger"], counts["plan_items"], counts["producers"]]
    want[5] = last_seq
    want[6] = prev
    want[7] = row_hash("session_meta", metas[0])
    gaps = rows(conn, "chain_gaps")
    for g in gaps:
        if row_hash("chain_gaps", g[:-1]) != g[-1]:
            out.append(f"chain_gaps {g[0]}: content_hash")
    want[8] = len(gaps)
    want[9] = gaps_hash([g[-1] for g in gaps])
    want[13] = row_hash("session_chain", want[: len(REV3_HASHED["session_chain"])])
    names = COLUMNS[3]["session_chain"]
    out += [f"session_chain.{n}" for n, a, b in zip(names, head, want, strict=True) if a != b]
    return out
