"""Emit throughput: SessionWriter.emit / emit_batch against a bare APSW insert loop, and
revision 3's writer against revision 2's.

Default: both sides use the same durability settings (WAL, synchronous=FULL, one transaction
per event for the single case) and the same revision-2 schema; the bare loop inserts only the
events row, while emit also keeps producers, computes the content hash and validates. Run side
by side in one process, alternating rounds, and report ratios.

    .venv/bin/python bench/bench_emit.py [--events N] [--rounds R]

``--revisions`` (issue 14: revision 3's emit ≤ 1.15× revision 2's with synchronous=FULL, the
CPU-only difference with OFF beside it, batches unchanged within noise): a writer at revision 2
and one at revision 3, each in its own worker process, emit blocks of events in turn (the
order rotated every round, so all see the same disk and CPU contention); per row the median
over rounds of wall µs/event and CPU µs/event (the worker's user + system time, which another
process's load moves much less than wall time), the median of the per-round wall ratios with
its quartiles, and the CPU difference. ``--old-tree DIR`` adds a third worker running revision 3
from another checkout's ``src`` (e.g. main's, to compare a change to the writer with what it
replaces, in the same run). Each worker's file is proven afterwards (revision 3: the walk).
The files go to ``$TMPDIR`` or ``--tmp DIR``, whose file system the table names (on tmpfs an
fsync is free: FULL would measure OFF). Writes bench/results/emit_rev3.md (``--out``).

    .venv/bin/python bench/bench_emit.py --revisions [--sync FULL,OFF] [--rounds R]
        [--scale K] [--old-tree DIR] [--tmp DIR]

``--head-page`` (a bench-only prototype of a DDL question, design §5/§12: what does the head's
own page cost a single emit?): the statements of one plain single emit with no Python around
them (hashes are constants), synchronous=FULL, in one process, blocks alternating, medians:
revision 2's insert; revision 3's insert and head UPDATE as written (REV3_DDL: the head on its
own page, one more WAL frame per commit); the same head kept as one BLOB in a row of
``sqlite_sequence`` (a page every AUTOINCREMENT insert already writes: a measuring device, not a
proposal); and REV3_DDL with ``events.sequence`` without AUTOINCREMENT (the head's
``head_sequence`` as the high-water mark instead of ``sqlite_sequence``: a plain emit then
writes as many pages as revision 2's). Nothing of it is written by the writer.

    .venv/bin/python bench/bench_emit.py --head-page [--rounds R] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import apsw
import ulid

from agentdb import db, hashing
from agentdb.schema.revisions import REV2_DDL
from agentdb.store import Event, Producer, SessionWriter, Usage

TOOL = Producer("tool", "shell", "2.0.0")
MODEL = Producer("model", "claude", "1.0.0")
USAGE = Usage("anthropic", "claude-sonnet", 1200, 300, 0.0042)
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


# ------------------------------------------------------------------------ --revisions

# (synchronous, events per transaction, event kind, events per block at --scale 1)
CONFIGS = (
    ("FULL", 1, "tool_call", 20),
    ("FULL", 1, "message", 20),
    ("FULL", 100, "tool_call", 200),
    ("OFF", 1, "tool_call", 100),
    ("OFF", 1, "message", 100),
    ("OFF", 100, "tool_call", 1000),
)
KINDS = {"tool_call": "tool_call", "message": "message + cost row"}
# one table row: sync, batch, kind, events per block, wall and CPU per side per round, verdicts
Row = tuple[str, int, str, int, list[list[float]], list[list[float]], list[str]]


def timed_emits(w: SessionWriter, events: list[Event], batch: int) -> tuple[float, float]:
    """(wall, CPU seconds) of emitting ``events``: one by one, or in transactions of ``batch``."""
    t, c = time.perf_counter(), time.process_time()
    if batch == 1:
        for e in events:
            w.emit(e)
    else:
        for i in range(0, len(events), batch):
            w.emit_batch(events[i : i + batch])
    return time.perf_counter() - t, time.process_time() - c


def worker(sessions: Path, revision: int, sync: str, batch: int, kind: str) -> None:
    """A worker process: one writer; each line ``N`` on stdin emits N events (in transactions
    of ``batch``) and answers ``wall_us cpu_us`` per event; ``q`` closes the writer, proves the
    file and answers ``ok`` (or what is wrong)."""
    w = SessionWriter.create(sessions, profile="bench", revision=revision)
    w.conn.execute(f"PRAGMA synchronous={sync}")

    def event() -> Event:
        if kind == "message":
            return Event("message", MODEL, PAYLOAD, usage=USAGE)
        return Event("tool_call", TOOL, PAYLOAD)

    for _ in range(3):
        w.emit(event())  # warm: caches read, statements prepared
    for line in sys.stdin:
        if line.strip() == "q":
            break
        n = int(line)
        wall, cpu = timed_emits(w, [event() for _ in range(n)], batch)
        print(f"{wall / n * 1e6:.3f} {cpu / n * 1e6:.3f}", flush=True)
    path = w.path
    w.close()
    print(_proven(path, revision), flush=True)


def _proven(path: Path, revision: int) -> str:
    conn = db.open_writer(path)
    try:
        problems = db.integrity_problems(conn)
        if not problems and revision >= 3:
            from agentdb.schema import chainio

            problems = chainio.verify_full(conn).problems
        elif not problems:
            n = db.scalar(conn, "SELECT count(*) FROM (" + hashing.mismatch_sql() + ")")
            problems = [f"{n} event hash mismatches"] if n else []
    finally:
        conn.close()
    return "ok" if not problems else "FAILED " + ",".join(problems)


class Worker:
    def __init__(self, tree: Path, tmp: Path, revision: int, config: tuple[str, int, str]):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(tree / "src"), str(tree)])
        tmp.mkdir(parents=True)
        sync, batch, kind = config
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(tmp), str(revision), sync, str(batch), kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def run(self, n: int) -> tuple[float, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        wall, cpu = self.proc.stdout.readline().split()
        return float(wall), float(cpu)

    def finish(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("q\n")
        self.proc.stdin.close()
        verdict = self.proc.stdout.read().strip()
        self.proc.wait()
        return verdict


def _commit(tree: Path) -> str:
    """`` at <commit>`` (``+`` when the work tree has changes), or nothing outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(tree), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f" at {head}{'+' if dirty else ''}"


def _fs_type(path: Path) -> str:
    """The file system ``path`` is on (Linux, from /proc/self/mounts; "?" elsewhere): on tmpfs
    an fsync costs nothing, and synchronous=FULL measures what OFF does."""
    best, kind = "", "?"
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                point = fields[1].replace("\\040", " ")
                inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
                if inside and len(point) > len(best):
                    best, kind = point, fields[2]
    except OSError:
        pass
    return kind


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def revisions(args: argparse.Namespace) -> None:
    here = Path(__file__).resolve().parents[1]
    sides: list[tuple[str, Path, int]] = [("rev 2", here, 2), ("rev 3", here, 3)]
    if args.old_tree:
        sides.append(("rev 3 old", Path(args.old_tree).resolve(), 3))
    syncs = [x.strip().upper() for x in args.sync.split(",")]
    configs = [c for c in CONFIGS if c[0] in syncs]
    load = [os.getloadavg()]
    started = datetime.now(timezone.utc)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for ci, (sync, batch, kind, per_block) in enumerate(configs):
            n = max(batch, per_block * args.scale // batch * batch)
            workers = [
                Worker(tree, Path(tmp) / f"c{ci}-{i}", rev, (sync, batch, kind))
                for i, (_label, tree, rev) in enumerate(sides)
            ]
            wall: list[list[float]] = [[] for _ in sides]
            cpu: list[list[float]] = [[] for _ in sides]
            for r in range(args.rounds):
                order = list(range(len(sides)))
                order = order[r % len(order) :] + order[: r % len(order)]
                if r // len(order) % 2:
                    order.reverse()
                for i in order:
                    a, b = workers[i].run(n)
                    wall[i].append(a)
                    cpu[i].append(b)
            verdicts = [w.finish() for w in workers]
            rows.append((sync, batch, kind, n, wall, cpu, verdicts))
            load.append(os.getloadavg())
            print(_row(sides, rows[-1]), flush=True)
        fs = _fs_type(Path(tmp).resolve())
    ended = datetime.now(timezone.utc)
    loads = sorted(x[0] for x in load)
    header = (
        "| synchronous | events per transaction | event | "
        + " | ".join(f"{label} µs/event" for label, _t, _r in sides)
        + " | "
        + " | ".join(f"{label} / rev 2 (wall) [quartiles]" for label, _t, _r in sides[1:])
        + " | "
        + " | ".join(f"{label} CPU µs/event" for label, _t, _r in sides)
        + " | "
        + " | ".join(f"{label} CPU difference" for label, _t, _r in sides[1:])
        + " | files |"
    )
    cols = header.count("|") - 1
    lines = [
        "Revision 3's emit against revision 2's (`bench/bench_emit.py --revisions`), "
        f"{started:%Y-%m-%d %H:%M}–{ended:%H:%M} UTC, load average (1 min) "
        f"{loads[0]:.1f}–{loads[-1]:.1f}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, SQLite {apsw.sqlite_lib_version()}; "
        f"{args.rounds} rounds, each worker one block per round, order rotated; "
        f"medians over rounds. Payload 430 bytes; WAL; files on {fs}.",
        "",
        "    " + shlex.join([Path(sys.executable).name, *sys.argv]),
        "",
        "Sides: "
        + "; ".join(
            f"{label}: `{tree}`{_commit(tree)}, revision {rev}" for label, tree, rev in sides
        )
        + ".",
        "",
        header,
        "|" + "---|" * 3 + "---:|" * (cols - 4) + "---|",
        *(_row(sides, r) for r in rows),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / "emit_rev3.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    if any(v != "ok" for r in rows for v in r[6]):
        sys.exit("a worker's file is not proven: " + repr([r[6] for r in rows]))


def _row(sides: list[tuple[str, Path, int]], row: Row) -> str:
    sync, batch, kind, _n, wall, cpu, verdicts = row
    walls = [statistics.median(w) for w in wall]
    cpus = [statistics.median(c) for c in cpu]
    ratios = []
    for i in range(1, len(sides)):
        q1, q2, q3 = _quartiles([a / b for a, b in zip(wall[i], wall[0], strict=True)])
        ratios.append(f"{q2:.2f} [{q1:.2f}–{q3:.2f}]")
    # the CPU difference: the median of per-round differences (paired), not of the medians
    diffs = [
        f"{statistics.median(a - b for a, b in zip(cpu[i], cpu[0], strict=True)):+.1f}"
        for i in range(1, len(sides))
    ]
    return (
        f"| {sync} | {batch} | {KINDS[kind]} | "
        + " | ".join(f"{x:.1f}" for x in walls)
        + " | "
        + " | ".join(ratios)
        + " | "
        + " | ".join(f"{x:.1f}" for x in cpus)
        + " | "
        + " | ".join(diffs)
        + f" | {'proven' if all(v == 'ok' for v in verdicts) else ' '.join(verdicts)} |"
    )


# ------------------------------------------------------------------------ --head-page

_HEAD_BLOB = b"h" * 200  # about the size of the head's columns
_H16 = b"0123456789abcdef"


def _head_page_file(path: Path, variant: str) -> apsw.Connection:
    from agentdb.schema.revisions import REV3_DDL

    ddl = REV2_DDL if variant == "rev 2" else REV3_DDL
    if variant == "rev 3, no AUTOINCREMENT on events":
        auto = "sequence          INTEGER PRIMARY KEY AUTOINCREMENT,"
        assert ddl.count(auto) == 1  # events' (the derived tables align theirs differently)
        ddl = ddl.replace(auto, "sequence          INTEGER PRIMARY KEY,")
    conn = apsw.Connection(str(path))
    db.exec_script(conn, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;" + ddl)
    if variant != "rev 2":
        conn.execute(
            "INSERT INTO session_chain VALUES (1, 0, 0, 0, 0, 0, ?, ?, 0, ?, 'created', 3, "
            "'2026-12-02T00:00:00.000Z', ?)",
            (_H16, _H16, _H16, _H16),
        )
    if variant == "rev 3, head in a sqlite_sequence row":
        conn.execute(
            "INSERT INTO sqlite_sequence (name, seq) VALUES ('agentdb_head', ?)", (_HEAD_BLOB,)
        )
    return conn


def _head_page_block(
    conn: apsw.Connection, variant: str, first: int, n: int
) -> tuple[float, float]:
    from agentdb.store import chained

    rev2 = variant == "rev 2"
    insert = (
        "INSERT INTO events (sequence, id, timestamp, kind, producer_category, producer_name, "
        "producer_version, schema_version, payload, content_hash) VALUES (?,?,?,?,?,?,?,?,?,?)"
        if rev2
        else chained._INSERT_EVENT
    )
    in_seq = variant == "rev 3, head in a sqlite_sequence row"
    head = (
        "UPDATE sqlite_sequence SET seq = ? WHERE name = 'agentdb_head'"
        if in_seq
        else chained._UPDATE_HEAD_PLAIN
    )
    cur = conn.cursor()
    t, c = time.perf_counter(), time.process_time()
    for seq in range(first, first + n):
        row = (seq, str(ulid.ULID()), "2026-12-02T00:00:00.000Z", "tool_call", "tool", "shell")
        row += ("2.0.0", "1", PAYLOAD, _H16)
        conn.execute("BEGIN IMMEDIATE")
        if rev2:
            conn.execute(insert, row)
        else:
            conn.execute(insert, (*row, _H16, _H16))
            cur.execute(head, (_HEAD_BLOB,) if in_seq else (seq, seq, _H16, _H16))
        conn.execute("COMMIT")
    return (time.perf_counter() - t) / n * 1e6, (time.process_time() - c) / n * 1e6


def head_page(args: argparse.Namespace) -> None:
    variants = [
        "rev 2",
        "rev 3 (REV3_DDL: the head on its own page)",
        "rev 3, head in a sqlite_sequence row",
        "rev 3, no AUTOINCREMENT on events",
    ]
    n = 160
    load = [os.getloadavg()]
    started = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        conns = [_head_page_file(Path(tmp) / f"v{i}.sqlite", v) for i, v in enumerate(variants)]
        wall: list[list[float]] = [[] for _ in variants]
        cpu: list[list[float]] = [[] for _ in variants]
        nxt = [1] * len(variants)
        for r in range(args.rounds):
            order = list(range(len(variants)))
            order = order[r % len(order) :] + order[: r % len(order)]
            for i in order:
                a, b = _head_page_block(conns[i], variants[i], nxt[i], n)
                nxt[i] += n
                wall[i].append(a)
                cpu[i].append(b)
        for c in conns:
            c.close()
        fs = _fs_type(Path(tmp).resolve())
    load.append(os.getloadavg())
    ended = datetime.now(timezone.utc)
    loads = sorted(x[0] for x in load)
    lines = [
        "Bench-only prototype (`bench/bench_emit.py --head-page`): one plain single emit's "
        "statements, no Python hashing, synchronous=FULL, WAL, "
        f"{started:%Y-%m-%d %H:%M}–{ended:%H:%M} UTC, load average (1 min) "
        f"{loads[0]:.1f}–{loads[-1]:.1f}, files on {fs}; {args.rounds} rounds of {n} "
        "transactions per variant, order rotated; medians over rounds (ratio: median of "
        "per-round ratios to rev 2, with quartiles).",
        "",
        "| variant | wall µs/emit | / rev 2 (wall) [quartiles] | CPU µs/emit | CPU difference |",
        "|---|---:|---:|---:|---:|",
    ]
    for i, v in enumerate(variants):
        q1, q2, q3 = _quartiles([a / b for a, b in zip(wall[i], wall[0], strict=True)])
        diff = statistics.median(a - b for a, b in zip(cpu[i], cpu[0], strict=True))
        lines.append(
            f"| {v} | {statistics.median(wall[i]):.1f} | {q2:.2f} [{q1:.2f}–{q3:.2f}] | "
            f"{statistics.median(cpu[i]):.1f} | {diff:+.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        where, rev, sync, batch, kind = sys.argv[2:7]
        worker(Path(where), int(rev), sync, int(batch), kind)
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--revisions", action="store_true", help="revision 3's writer against 2's")
    ap.add_argument("--sync", default="FULL,OFF", help="--revisions: FULL, OFF or both")
    ap.add_argument("--scale", type=int, default=1, help="--revisions: events per block × K")
    ap.add_argument("--old-tree", help="--revisions: also revision 3 from this checkout")
    ap.add_argument("--tmp", help="--revisions: where the files are written (default $TMPDIR)")
    ap.add_argument("--out", help="--revisions: the results file")
    ap.add_argument("--head-page", action="store_true", help="bench-only: the head's page")
    args = ap.parse_args()
    if args.head_page:
        args.rounds = args.rounds or 40
        head_page(args)
        return
    if args.revisions:
        args.rounds = args.rounds or 30
        revisions(args)
        return
    args.rounds = args.rounds or 3
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
