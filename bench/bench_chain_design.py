"""Measurements that decide the damage-evident revision (docs/design/damage-evident-revision.md).

Three tables, from one run:

1. **Detection.** Small closed sessions (demo turns plus two payloads that overflow), written
   (a) at revision 2 by agentdb's writer and (b) in the prototype revision-3 schema by
   ``chain_proto.ProtoWriter``. Per table: single-byte flips inside live rows' records,
   single rows dropped from the table b-tree by SQLite's own page edits (its indexes left as
   they were: a lost cell) or deleted with their index entries (a naive ``DELETE``), two events
   swapped, and the last N events cut with their derived rows. Each damaged copy is classified
   by re-reading every row (a flip that leaves every value SQLite returns identical carries no
   information and is counted apart, not as a miss) and judged by today's ``check`` (full),
   ``PRAGMA integrity_check``, and for (b) the prototype verifier plus integrity_check.
2. **Emit cost.** µs per event, revision 2's ``SessionWriter`` against the prototype writer,
   ``synchronous=FULL`` and ``OFF``, single events and batches of 100, alternating rounds.
3. **Migration.** A revision-2 session of 25 MB and of 100 MB rebuilt by the prototype step
   (recursive-CTE fold, and a Python streaming fold), beside ``integrity_check``, today's full
   ``check``, the prototype's full and quick verification and ``count(*)``.

    /work/venv/bin/python bench/bench_chain_design.py [--flips N] [--mb 25,100] [--emit-scale K]

Writes bench/results/chain_design.md. About two minutes on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import ulid

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # chain_proto's hashing is tests/hash_reference.py
sys.path.insert(0, str(HERE.parent / "src"))

import chain_proto as P  # noqa: E402
from agentdb import checks, db  # noqa: E402
from agentdb.fileformat.btree import parse_page  # noqa: E402
from agentdb.fileformat.varint import read_varint  # noqa: E402
from agentdb.hashing import event_hash  # noqa: E402
from agentdb.jobs import demo  # noqa: E402
from agentdb.schema.revisions import REV2_DDL  # noqa: E402
from agentdb.store import Event, Producer, SessionWriter, Usage  # noqa: E402
from bench_emit import timed_emits  # noqa: E402

RESULTS = HERE / "results" / "chain_design.md"
TOOL = Producer("tool", "shell", "2.0.0")
PAYLOAD = b'{"cmd": "ls -la", "output": "' + b"x" * 400 + b'"}'
TABLES2 = ("events", "session_meta", "cost_ledger", "plan_items", "producers")
TABLES3 = (*TABLES2, "session_chain")

# ------------------------------------------------------------------------------ files


def fill(w: SessionWriter) -> None:
    demo._turns(w, demo.MODEL_OLD, 8, seed=1)
    w.emit(Event("tool_result", TOOL, b"A" * 9000))  # two payloads on overflow pages
    demo._turns(w, demo.MODEL_CACHED, 4, seed=2)
    w.emit(Event("tool_result", TOOL, b"B" * 6000))
    w.emit(Event("tool_call", TOOL, PAYLOAD))
    w.set_status("completed")
    w.close()


def build_rev2(root: Path) -> tuple[Path, str]:
    w = SessionWriter.create(root, profile="coder")
    fill(w)
    return w.path, w.session_id


def build_proto(root: Path) -> tuple[Path, str]:
    sid = str(ulid.ULID())
    path = root / f"{sid}.sqlite"
    fill(P.ProtoWriter.create_scratch(path, sid, "coder"))
    return path, sid


def raw_conn(path: Path) -> apsw.Connection:
    """A plain connection (no agentdb hardening): the damage is made with it."""
    conn = apsw.Connection(str(path))
    P.register(conn)
    return conn


def snapshot(path: Path, tables: tuple[str, ...]) -> dict[str, Any] | None:
    """Every value SQLite returns, typed, per table; None when reading fails."""
    try:
        conn = apsw.Connection(
            f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        )
        try:
            out = {}
            for t in tables:
                cols = [r[1] for r in conn.execute(f"PRAGMA table_info({t})")]
                expr = " || '|' || ".join(
                    f"typeof({c}) || ':' || coalesce(hex({c}), '')" for c in cols
                )
                out[t] = conn.execute(f"SELECT rowid, {expr} FROM {t} ORDER BY rowid").fetchall()
            return out
        finally:
            conn.close()
    except apsw.Error:
        return None


def integrity_fails(path: Path, pragma: str = "integrity_check") -> bool:
    try:
        conn = apsw.Connection(
            f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        )
        try:
            return [r[0] for r in conn.execute(f"PRAGMA {pragma}")] != ["ok"]
        finally:
            conn.close()
    except apsw.Error:
        return True


def check_fails(path: Path, sid: str, quick: bool = False) -> bool:
    return checks.check_path(path, sid, quick=quick).verdict != "ok"


def proto_fails(path: Path) -> bool:
    if integrity_fails(path):
        return True
    try:
        conn = db.open_private(path, readonly=True)
        P.register(conn)
        try:
            return bool(P.verify_full(conn))
        finally:
            conn.close()
    except (apsw.Error, Exception):  # a row that does not read is found
        return True


def quick_fails(path: Path) -> bool:
    """What ``check --quick`` of revision 3 would run: quick_check, then the head."""
    if integrity_fails(path, "quick_check"):
        return True
    try:
        conn = db.open_private(path, readonly=True)
        try:
            return bool(P.verify_quick(conn))
        finally:
            conn.close()
    except Exception:
        return True


# ------------------------------------------------------------------------------ damage


def leaf_cells(path: Path, table: str) -> list[tuple[int, int, int]]:
    """(page, record offset in file, record local length) of every row of ``table``."""
    conn = apsw.Connection(
        f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        ps = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
        pages = [
            int(r[0])
            for r in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno",
                (table,),
            )
        ]
        if not pages:  # a one-page table: its root is its leaf
            pages = [
                int(r[0])
                for r in conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,))
            ]
    finally:
        conn.close()
    data = path.read_bytes()
    out = []
    for pg in pages:
        page = parse_page(data[(pg - 1) * ps : pg * ps], pg, ps)
        for cell in page.table_leaf_cells():
            _, pos = read_varint(page.data, cell.offset)  # payload size
            _, pos = read_varint(page.data, pos)  # rowid
            out.append((pg, (pg - 1) * ps + pos, len(cell.local)))
    return out


def flip(path: Path, offset: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ mask]))


def _pages(path: Path, names: list[str]) -> set[int]:
    conn = apsw.Connection(
        f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        out: set[int] = set()
        for n in names:
            out |= {
                int(r[0]) for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (n,))
            }
        return out
    finally:
        conn.close()


def drop_cell(path: Path, table: str, rowid: Any) -> bool:
    """Remove one row from the table b-tree only, leaving its indexes as they were: what a
    lost cell or a reverted page leaves. SQLite deletes the row; every index page it changed
    is then written back as it was. False (nothing counted) when the delete rebalanced pages."""
    conn = apsw.Connection(
        f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        ps = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
        names = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?", (table,)
            )
        ]
    finally:
        conn.close()
    index_pages = _pages(path, names)
    table_pages = _pages(path, [table])
    before = path.read_bytes()
    sql_edit(path, (f"DELETE FROM {table} WHERE rowid = ?", (rowid,)))
    after = path.read_bytes()
    if len(after) != len(before):
        return False
    changed = {
        pg
        for pg in range(1, len(before) // ps + 1)
        if before[(pg - 1) * ps : pg * ps] != after[(pg - 1) * ps : pg * ps]
    }
    if not changed <= index_pages | table_pages | {1} or len(changed & table_pages) != 1:
        return False
    with open(path, "r+b") as f:
        for pg in changed & index_pages:
            f.seek((pg - 1) * ps)
            f.write(before[(pg - 1) * ps : pg * ps])
    return True


def sql_edit(path: Path, *sql: str | tuple[str, tuple[Any, ...]]) -> None:
    conn = raw_conn(path)
    conn.execute("PRAGMA foreign_keys=OFF")
    with conn:
        for s in sql:
            if isinstance(s, tuple):
                conn.execute(*s)
            else:
                conn.execute(s)
    conn.close()


def tail_cut(n: int) -> tuple[str, ...]:
    cut = f"(SELECT max(sequence) - {n} FROM events)"
    return (
        f"DELETE FROM cost_ledger WHERE event_sequence > {cut}",
        f"DELETE FROM plan_items WHERE event_sequence > {cut}",
        f"DELETE FROM producers WHERE first_seen_sequence > {cut}",
        f"DELETE FROM events WHERE sequence > {cut}",
    )


SWAP = (
    "UPDATE events SET sequence = -1 WHERE sequence = 3",
    "UPDATE events SET sequence = 3 WHERE sequence = 4",
    "UPDATE events SET sequence = 4 WHERE sequence = -1",
)


class Tally:
    """Per (file kind, damage, table): trials, trials with no information, detections."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], Counter[str]] = {}

    def add(self, kind: str, damage: str, table: str, **hits: bool) -> None:
        c = self.rows.setdefault((kind, damage, table), Counter())
        c["n"] += 1
        for k, v in hits.items():
            c[k] += int(v)


Judge = Callable[[Tally, str, str, str, Path, str, dict[str, Any], tuple[str, ...]], None]


Verdicts = Callable[[str, Path, str], tuple[bool, bool]]  # (kind, copy, sid) -> (full, quick)


def judge_by(verdicts: Verdicts) -> Judge:
    """A judge: a copy whose every value SQLite returns is unchanged carried no information;
    any other is judged by ``verdicts`` (full, quick) and by integrity_check."""

    def judge(
        tally: Tally,
        kind: str,
        damage: str,
        table: str,
        copy: Path,
        sid: str,
        pristine: dict[str, Any],
        tables: tuple[str, ...],
    ) -> None:
        if snapshot(copy, tables) == pristine:
            tally.add(kind, damage, table, noinfo=True)
            return
        full, quick = verdicts(kind, copy, sid)
        tally.add(kind, damage, table, check=full, quick=quick, integrity=integrity_fails(copy))

    return judge


def _design_verdicts(kind: str, copy: Path, sid: str) -> tuple[bool, bool]:
    if kind == "rev2":
        return check_fails(copy, sid), check_fails(copy, sid, quick=True)
    return proto_fails(copy), quick_fails(copy)


def damage_all(
    tally: Tally,
    kind: str,
    src: Path,
    sid: str,
    tables: tuple[str, ...],
    pristine: dict[str, Any],
    rng: random.Random,
    flips: int,
    judge: Judge,
    work: Path,
) -> Path:
    """Every damage of the detection table, each on a fresh copy of ``src`` in ``work``, each
    judged by ``judge``; returns the copy's path (for further damages)."""
    work.mkdir()
    copy = work / src.name

    def fresh() -> Path:
        shutil.copyfile(src, copy)
        return copy

    for table in tables:
        cells = leaf_cells(src, table)
        for _ in range(flips):
            _pg, off, length = rng.choice(cells)
            flip(fresh(), off + rng.randrange(length), rng.randrange(1, 256))
            judge(tally, kind, "flip", table, copy, sid, pristine, tables)
        rowids = [r[0] for r in pristine[table]]
        for rowid in rng.sample(rowids, min(len(rowids), max(3, flips // 4), 25)):
            if drop_cell(fresh(), table, rowid):
                judge(tally, kind, "drop cell", table, copy, sid, pristine, tables)
            sql_edit(fresh(), (f"DELETE FROM {table} WHERE rowid = ?", (rowid,)))
            judge(tally, kind, "DELETE row", table, copy, sid, pristine, tables)
    sql_edit(fresh(), *SWAP)
    judge(tally, kind, "swap events 3,4", "events", copy, sid, pristine, tables)
    for n in (1, 2, 3, 5, 10):
        sql_edit(fresh(), *tail_cut(n))
        judge(tally, kind, f"cut last {n}", "events", copy, sid, pristine, tables)
    return copy


def campaign(root: Path, flips: int, seed: int = 7) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    judge = judge_by(_design_verdicts)
    for kind, build, tables in (("rev2", build_rev2, TABLES2), ("rev3", build_proto, TABLES3)):
        d = root / kind
        d.mkdir(parents=True)
        src, sid = build(d)
        assert not Path(str(src) + "-wal").exists()
        pristine = snapshot(src, tables)
        assert pristine is not None
        if kind == "rev2":
            assert not check_fails(src, sid), "false alarm on a healthy file"
        else:
            assert not proto_fails(src) and not quick_fails(src), "false alarm on a healthy file"
        copy = damage_all(tally, kind, src, sid, tables, pristine, rng, flips, judge, d / "work")
        # the consistent rollback the threat model leaves out: tail and head cut together
        if kind == "rev3":
            shutil.copyfile(src, copy)
            sql_edit(copy, *tail_cut(1), "DELETE FROM session_chain")
            judge(
                tally, kind, "cut last 1 + delete head row", "events", copy, sid, pristine, tables
            )
    return tally


def pct(a: int, b: int) -> str:
    return "–" if b == 0 else f"{100 * a / b:.0f} %"


def detection_table(t: Tally) -> list[str]:
    lines = [
        "| damage | table | trials rev 2 / rev 3 | no information | rev 2 `check` "
        "| rev 2 `check --quick` | rev 2 integrity_check | rev 3 proto full | rev 3 proto quick "
        "| rev 3 integrity_check |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = sorted(
        {(d, tb) for _k, d, tb in t.rows},
        key=lambda x: (x[0].startswith("cut"), len(x[0]), x[0], TABLES3.index(x[1])),
    )
    for damage, table in keys:
        r2 = t.rows.get(("rev2", damage, table), Counter())
        r3 = t.rows.get(("rev3", damage, table), Counter())
        i2, i3 = r2["n"] - r2["noinfo"], r3["n"] - r3["noinfo"]
        lines.append(
            f"| {damage} | {table} | {r2['n']} / {r3['n']} | {r2['noinfo']} / {r3['noinfo']} "
            f"| {pct(r2['check'], i2)} | {pct(r2['quick'], i2)} | {pct(r2['integrity'], i2)} "
            f"| {pct(r3['check'], i3)} "
            f"| {pct(r3['quick'], i3)} | {pct(r3['integrity'], i3)} |"
        )
    return lines


# ------------------------------------------------------------------------------ emit


def _writer(kind: str, root: Path) -> SessionWriter:
    if kind == "rev2":
        return SessionWriter.create(root, profile="bench")
    sid = str(ulid.ULID())
    return P.ProtoWriter.create_scratch(root / f"{sid}.sqlite", sid)


def emit_paired(
    root: Path, sync: str, batch: int, message: bool, blocks: int, per_block: int
) -> dict[str, tuple[float, float]]:
    """Both writers open side by side; blocks of events alternate between them (order swapped
    every block), so both see the same disk and CPU contention. Returns per kind the median
    over blocks of (wall µs/event, CPU µs/event)."""
    usage = Usage("anthropic", "claude-sonnet", 1200, 300, 0.0042) if message else None

    def ev() -> Event:
        if message:
            return Event("message", demo.MODEL_OLD, PAYLOAD, usage=usage)
        return Event("tool_call", TOOL, PAYLOAD)

    writers = {}
    for kind in ("rev2", "rev3"):
        d = root / kind
        d.mkdir(parents=True)
        w = writers[kind] = _writer(kind, d)
        w.conn.execute(f"PRAGMA synchronous={sync}")
        for _ in range(3):
            w.emit(ev())  # warm: caches read, statements prepared
    wall: dict[str, list[float]] = {"rev2": [], "rev3": []}
    cpu: dict[str, list[float]] = {"rev2": [], "rev3": []}
    n = per_block // batch * batch
    for b in range(blocks):
        for kind in ("rev2", "rev3") if b % 2 == 0 else ("rev3", "rev2"):
            w = writers[kind]
            dt, dc = timed_emits(w, [ev() for _ in range(n)], batch)
            wall[kind].append(dt / n * 1e6)
            cpu[kind].append(dc / n * 1e6)
    for w in writers.values():
        w.close()
    shutil.rmtree(root)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in wall}


def emit_table(root: Path, scale: int) -> list[str]:
    configs = [
        ("FULL", 1, False, 40, 10),
        ("FULL", 1, True, 40, 10),
        ("OFF", 1, False, 40, 50),
        ("OFF", 1, True, 40, 50),
        ("FULL", 100, False, 20, 200),
        ("OFF", 100, False, 20, 500),
    ]
    lines = [
        "| synchronous | events per transaction | event | rev 2 µs/event | rev 3 proto µs/event "
        "| ratio | rev 2 CPU µs/event | rev 3 proto CPU µs/event | CPU difference |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for i, (sync, batch, message, blocks, per_block) in enumerate(configs):
        r = emit_paired(root / f"c{i}", sync, batch, message, blocks * scale, per_block)
        (a, ca), (b, cb) = r["rev2"], r["rev3"]
        what = "message + cost row" if message else "tool_call"
        lines.append(
            f"| {sync} | {batch} | {what} | {a:.1f} | {b:.1f} | {b / a:.2f} "
            f"| {ca:.1f} | {cb:.1f} | {cb - ca:+.1f} |"
        )
    return lines


# ------------------------------------------------------------------------------ migration


def build_big(path: Path, mb: int, seed: int = 3) -> int:
    """A revision-2 session of about ``mb`` MB (agentdb's schema and hashes, direct inserts):
    per 5 events one message with a cost row and one plan with two plan items."""
    rng = random.Random(seed)
    sid = path.stem
    conn = apsw.Connection(str(path))
    db.exec_script(conn, "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;" + REV2_DDL)
    conn.execute(
        "INSERT INTO session_meta VALUES (?, NULL, 'coder', 'completed', 0, "
        "'2026-11-30T00:00:00Z', '2026-11-30T01:00:00Z')",
        (sid,),
    )
    conn.execute(f"PRAGMA user_version=2; PRAGMA application_id={0x41474442}")
    target, size, seq, cost, plan = mb * 1_000_000, 0, 0, 0, 0
    producers = {}
    with conn:
        while size < target:
            events, costs, plans = [], [], []
            for _ in range(1000):
                seq += 1
                k = seq % 5
                kind, cat, name = [
                    ("context_contribution", "context", "repo-map"),
                    ("message", "model", "anthropic"),
                    ("plan", "kernel", "kernel"),
                    ("tool_call", "tool", "shell"),
                    ("tool_result", "tool", "shell"),
                ][k]
                ver = f"1.{seq // 20000}.0"
                payload = rng.randbytes(rng.choice((300, 600, 900, 3000)))
                row = (
                    seq,
                    str(ulid.ULID()),
                    "2026-11-30T00:00:00.000Z",
                    kind,
                    cat,
                    name,
                    ver,
                    "1",
                    payload,
                )
                events.append((*row, event_hash(*row)))
                size += int((len(payload) + 120) * 1.6)
                if (cat, name, ver) not in producers:
                    producers[(cat, name, ver)] = seq
                if kind == "message":
                    cost += 1
                    costs.append(
                        (cost, seq, "anthropic", "claude-sonnet", 1200, 300, 0, 800, 0.0042)
                    )
                if kind == "plan":
                    for j in range(2):
                        plan += 1
                        plans.append(
                            (plan, seq, f"t{seq}", f"c{seq}-{j}", "tool", "bash", "allow", "rule")
                        )
            conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)", events)
            conn.executemany("INSERT INTO cost_ledger VALUES (?,?,?,?,?,?,?,?,?)", costs)
            conn.executemany("INSERT INTO plan_items VALUES (?,?,?,?,?,?,?,?)", plans)
        conn.executemany(
            "INSERT INTO producers VALUES (?,?,?,?)", [(*k, v) for k, v in producers.items()]
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    conn.close()  # left in WAL mode, as the kernel's files are
    return seq


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def copy_floor(conn: apsw.Connection) -> None:
    """The rebuild's floor: events copied into a new table and renamed, no hashing."""
    conn.execute("PRAGMA foreign_keys=OFF")
    new = P.EVENTS.replace("CREATE TABLE events (", "CREATE TABLE events_agentdb_new (", 1)
    cols = P._EV
    with conn:
        db.exec_script(
            conn,
            f"{new}; INSERT INTO events_agentdb_new SELECT {cols}, content_hash, content_hash, "
            "content_hash FROM events ORDER BY rowid; DROP TABLE events; "
            "ALTER TABLE events_agentdb_new RENAME TO events;",
        )


def migration_table(root: Path, sizes: list[int]) -> list[str]:
    head = (
        "| size | events | copy floor (no hashing) | rebuild, CTE fold | rebuild, streaming fold "
        "| integrity_check | today's full `check` (rev 2) | proto full verify | quick_check "
        "| proto quick (head, last event, counts) | events count(*) NOT INDEXED |"
    )
    lines = [head, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    last: tuple[float, list[float]] | None = None
    for mb in sizes:
        d = root / f"mig{mb}"
        d.mkdir()
        sid = str(ulid.ULID())
        src = d / f"{sid}.sqlite"
        n = build_big(src, mb)
        real_mb = src.stat().st_size / 1e6
        t_check, res = timed(lambda: checks.check_path(src, sid))  # noqa: B023
        assert res.verdict == "ok", res.findings
        times = {}
        for how in ("floor", "cte", "stream"):
            copy = d / f"copy-{how}.sqlite"
            shutil.copyfile(src, copy)
            conn = raw_conn(copy)

            def run(how: str = how, conn: apsw.Connection = conn) -> None:
                if how == "floor":
                    copy_floor(conn)
                else:
                    P.migrate(conn, events_by_cte=how == "cte")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

            times[how], _ = timed(run)
            conn.close()
        copy = d / "copy-cte.sqlite"
        conn = db.open_private(copy, readonly=True)
        P.register(conn)
        t_int, _ = timed(lambda: conn.execute("PRAGMA integrity_check").fetchall())  # noqa: B023
        t_full, probs = timed(lambda: P.verify_full(conn))  # noqa: B023
        assert probs == [], probs
        t_quick, probs = timed(lambda: P.verify_quick(conn))  # noqa: B023
        assert probs == [], probs
        t_qc, _ = timed(lambda: conn.execute("PRAGMA quick_check").fetchall())  # noqa: B023
        t_count, _ = timed(
            lambda: conn.execute("SELECT count(*) FROM events NOT INDEXED").fetchall()  # noqa: B023
        )
        conn.close()
        secs = [times["floor"], times["cte"], times["stream"], t_int, t_check, t_full]
        lines.append(
            f"| {real_mb:.0f} MB | {n:,} | "
            + " | ".join(f"{x:.2f} s" for x in secs)
            + f" | {t_qc:.2f} s | {t_quick * 1000:.1f} ms | {t_count * 1000:.0f} ms |"
        )
        last = (real_mb, secs)
        shutil.rmtree(d)
    if last is not None:
        real_mb, secs = last
        k = 1000 / real_mb
        lines.append(
            f"| 1 GB (×{k:.1f}, linear) | | "
            + " | ".join(f"{x * k:.0f} s" for x in secs)
            + " | | | |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flips", type=int, default=100, help="byte flips per table and file kind")
    ap.add_argument("--mb", default="25,100", help="sizes of the migration files, MB")
    ap.add_argument("--emit-scale", type=int, default=1, help="multiply the emit blocks")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: detect,emit,migrate")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    out = [
        "# Damage-evident revision: measurements",
        "",
        f"`bench/bench_chain_design.py`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores,"
        f" load average at start {load} (the machine is shared: absolute times are inflated,"
        " ratios of side-by-side runs are what to read).",
        "",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "detect" not in skip:
            t = campaign(root / "detect", args.flips)
            out += [
                "## Detection (share of damages that carry information)",
                "",
                *detection_table(t),
                "",
            ]
            print("\n".join(out), flush=True)
        if "emit" not in skip:
            (root / "emit").mkdir()
            out += [
                "## Emit cost (two writers side by side, alternating blocks; medians over blocks)",
                "",
                *emit_table(root / "emit", args.emit_scale),
                "",
            ]
            print("\n".join(out[-10:]), flush=True)
        if "migrate" not in skip:
            (root / "migrate").mkdir()
            sizes = [int(x) for x in args.mb.split(",")]
            out += [
                "## Migration rebuild and verification",
                "",
                *migration_table(root / "migrate", sizes),
                "",
            ]
    text = "\n".join(out) + "\n"
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
