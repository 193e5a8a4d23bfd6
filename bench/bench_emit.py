"""Emit throughput: SessionWriter.emit / emit_batch against a bare APSW insert loop.

Both sides use the same durability settings (WAL, synchronous=FULL, one transaction per event
for the single case) and the same revision-2 schema; the bare loop inserts only the events row,
while emit also keeps producers, computes the content hash and validates. Run side by side in
one process, alternating rounds, and report ratios.

    .venv/bin/python bench/bench_emit.py [--events N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import apsw
import ulid

from agentdb import db
from agentdb.schema.revisions import REV2_DDL
from agentdb.store import Event, Producer, SessionWriter

TOOL = Producer("tool", "shell", "2.0.0")
PAYLOAD = b'{"cmd": "ls -la", "output": "' + b"x" * 400 + b'"}'


def bare_loop(path: Path, n: int) -> float:
    conn = apsw.Connection(str(path))
    db.exec_script(conn, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;" + REV2_DDL)
    t = time.perf_counter()
    for _i in range(n):
        with conn:
            conn.execute(
                "INSERT INTO events (id, timestamp, kind, producer_category, producer_name, "
                "producer_version, schema_version, payload, content_hash) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    str(ulid.ULID()),
                    "2026-11-30T00:00:00.000Z",
                    "tool_call",
                    "tool",
                    "shell",
                    "2.0.0",
                    "1",
                    PAYLOAD,
                    b"0123456789abcdef",
                ),
            )
    dt = time.perf_counter() - t
    conn.close()
    return n / dt


def emit_single(d: Path, n: int) -> float:
    w = SessionWriter.create(d, profile="bench")
    t = time.perf_counter()
    for _ in range(n):
        w.emit(Event("tool_call", TOOL, PAYLOAD))
    dt = time.perf_counter() - t
    w.close()
    return n / dt


def emit_batched(d: Path, n: int, batch: int) -> float:
    w = SessionWriter.create(d, profile="bench")
    t = time.perf_counter()
    for _ in range(n // batch):
        w.emit_batch([Event("tool_call", TOOL, PAYLOAD) for _ in range(batch)])
    dt = time.perf_counter() - t
    w.close()
    return (n // batch * batch) / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    bare, single, batched = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            d = Path(tmp) / f"r{r}"
            d.mkdir()
            bare.append(bare_loop(d / "bare.sqlite", args.events))
            single.append(emit_single(d, args.events))
            batched.append(emit_batched(d, args.events * 10, args.batch))
    b, s, m = (statistics.median(x) for x in (bare, single, batched))
    lines = [
        f"Emit throughput, median of {args.rounds} alternating rounds "
        f"({args.events} single events, {args.events * 10} batched in {args.batch}s; "
        "WAL, synchronous=FULL)",
        "",
        "| what | events/s | ratio |",
        "|---|---:|---:|",
        f"| bare APSW insert, one transaction per event | {b:,.0f} | 1.00 |",
        f"| `SessionWriter.emit` (single) | {s:,.0f} | {s / b:.2f} × bare |",
        f"| `SessionWriter.emit_batch` ({args.batch} per transaction) | {m:,.0f} | "
        f"{m / s:.1f} × single |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(__file__).parent / "results" / "emit.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    main()
