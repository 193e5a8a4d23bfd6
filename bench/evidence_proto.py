"""Prototype for docs/design/spec-exact-evidence.md §12: what a companion evidence append costs.

A scratch measurement, not agentdb's writer: a bare APSW write of spec-exact rows (revision 1
DDL, WAL, ``synchronous=FULL``) against the same write followed by one evidence record appended
to a companion file, in four variants:

* ``bare``: the spec-exact write alone (the yardstick);
* ``append``: + the record's hashes and one ``write()`` to an ``O_APPEND`` descriptor, no sync;
* ``append+fdatasync``: + ``fdatasync`` of the companion after every record;
* ``append+group``: + a flusher thread that ``fdatasync``s the companion whenever records are
  pending (coalescing them), never inside the emit.

Each variant has its own file and connection; blocks of emits alternate between them so all see
the same contention; medians over rounds. Run: ``python bench/evidence_proto.py [--rounds N]
[--block N] [--tmp DIR]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import tempfile
import threading
import time
from hashlib import blake2b
from pathlib import Path

import apsw

from agentdb.hashing import chain_hash, event_hash, row_hash
from agentdb.schema.revisions import REV1_DDL

PAYLOAD = b"x" * 430
_LEN = struct.Struct(">Q")
_EV = struct.Struct(">q16s16sHHH")  # sequence, content_hash, chain_hash, bound counts
_COST = struct.Struct(">q16s")  # a bound cost row: its sequence and row hash
# head: head_sequence, head_hash, 4 counts, cost_max, plan_max, meta_hash, gap_count,
# gaps_hash, lost_max
_HEADREC = struct.Struct(">q16sqqqqqq16sI16sq")
_FRAME = struct.Struct(">4scIq16s")  # sync, type, length, offset, prev check
_ZERO = bytes(16)


class Side:
    def __init__(self, path: Path, mode: str, sync: str = "FULL") -> None:
        self.mode = mode
        self.conn = apsw.Connection(str(path))
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={sync}")
        self.conn.execute(REV1_DDL)
        self.conn.execute("PRAGMA user_version=1")
        self.conn.execute(
            "INSERT INTO session_meta VALUES ('01J00000000000000000000000', NULL, 'p', "
            "'running', 0, '2026-12-04T00:00:00Z', NULL)"
        )
        self.seq = 0
        self.cseq = 0
        self.prev = bytes(16)
        self.off = 0
        self.check = bytes(16)
        self.fd = -1
        self.pending = threading.Event()
        self.stop = False
        if mode != "bare":
            ev = Path(str(path) + ".evidence")
            self.fd = os.open(ev, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(self.fd, b"agentdb-evidence 1\n")
            os.fsync(self.fd)
        if mode == "append+group":
            self.flusher = threading.Thread(target=self._flush, daemon=True)
            self.flusher.start()

    def _flush(self) -> None:
        while not self.stop:
            if self.pending.wait(0.05):
                self.pending.clear()
                os.fdatasync(self.fd)

    def emit(self, n: int, cost: bool) -> None:
        conn = self.conn
        rows = []
        costs = []
        for _ in range(n):
            self.seq += 1
            ev = (
                self.seq,
                f"ev-{self.seq:020d}",
                "2026-12-04T00:00:00.000000Z",
                "message" if cost else "tool_call",
                "model" if cost else "tool",
                "prov",
                "1.0.0",
                "1",
                PAYLOAD,
            )
            rows.append(ev)
            if cost:
                self.cseq += 1
                costs.append((self.cseq, self.seq, "prov", "m", 100, 50, 0, 0, 0.0123))
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?)", rows)
        if costs:
            conn.executemany("INSERT INTO cost_ledger VALUES (?,?,?,?,?,?,?,?,?)", costs)
        conn.execute("COMMIT")
        if self.mode == "bare":
            return
        # the evidence record (design §3): per event its hashes and bound rows, the head after
        # the record (120 bytes), the framing and a checksum; agentdb's hashing.py
        parts = []
        ci = 0
        for ev in rows:
            content = event_hash(*ev)
            if costs:
                h = row_hash("cost_ledger", costs[ci])
                ci += 1
                link = chain_hash(self.prev, content, ((h,),))
                parts.append(
                    _EV.pack(ev[0], content, link, 1, 0, 0) + _COST.pack(costs[ci - 1][0], h)
                )
            else:
                link = chain_hash(self.prev, content)
                parts.append(_EV.pack(ev[0], content, link, 0, 0, 0))
            self.prev = link
        body = b"".join(parts)
        head = _HEADREC.pack(
            self.seq, self.prev, self.seq, self.cseq, 0, 0, self.cseq, 0, _ZERO, 0, _ZERO, 0
        )
        rec = _FRAME.pack(b"\xaeEVR", b"E", len(body), self.off, self.check) + body + head
        self.check = blake2b(rec, digest_size=16, person=b"agentdb-evrec-v1").digest()
        rec += self.check
        self.off += len(rec)
        os.write(self.fd, rec)
        if self.mode == "append+fdatasync":
            os.fdatasync(self.fd)
        elif self.mode == "append+group":
            self.pending.set()

    def close(self) -> None:
        self.stop = True
        self.conn.close()
        if self.fd >= 0:
            os.close(self.fd)


MODES = ("bare", "append", "append+fdatasync", "append+group")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--sync", default="FULL", choices=("FULL", "OFF"))
    args = ap.parse_args()
    print(f"synchronous={args.sync}; load before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        for k, (label, n, cost, block) in enumerate(
            (
                ("single tool_call", 1, False, args.block),
                ("single message + cost row", 1, True, args.block),
                ("batches of 100 tool_call", 100, False, max(2, args.block // 10)),
            )
        ):
            sides = {
                m: Side(Path(d) / f"{k}-{i}.sqlite", m, args.sync) for i, m in enumerate(MODES)
            }
            for m in MODES:  # warm up: first pages, first WAL frames
                for _ in range(block):
                    sides[m].emit(n, cost)
            per: dict[str, list[float]] = {m: [] for m in MODES}
            for r in range(args.rounds):
                order = MODES if r % 2 == 0 else tuple(reversed(MODES))
                for m in order:
                    t = time.perf_counter()
                    for _ in range(block):
                        sides[m].emit(n, cost)
                    per[m].append((time.perf_counter() - t) / (block * n) * 1e6)
            base = statistics.median(per["bare"])
            print(
                f"\n{label}: µs per event, median of {args.rounds} rounds of {block} transactions"
            )
            for m in MODES:
                med = statistics.median(per[m])
                ratios = [a / b for a, b in zip(per[m], per["bare"], strict=True)]
                q = statistics.quantiles(ratios, n=4)
                print(
                    f"  {m:18s} {med:9.1f}  ratio {med / base:5.2f}  "
                    f"(per-round quartiles {q[0]:.2f}-{q[2]:.2f})"
                )
            for s in sides.values():
                s.close()
    print(f"\nload after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
