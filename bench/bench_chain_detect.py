"""Issue 14's detection measurement on the real revision-3 code, judged by the real ``check``.

Revision 3 is not released (``CURRENT_REVISION`` is 2); this drives its pieces explicitly.
Kinds of small closed session (demo turns, two payloads on overflow pages, cost rows and plan
items):

- ``rev2``: revision 2 as agentdb writes it today;
- ``rev3 writer``: written by ``SessionWriter.create(revision=3)``;
- ``rev3 from rev2`` / ``rev3 from rev1``: written at revision 2 / 1, migrated by
  ``migrations.apply_steps(target=3, steps=REV3_LADDER)``;
- ``rev3 recovered (mid)`` / ``rev3 recovered (tail)``: a revision-3 session whose middle
  events leaf page / rightmost events leaf page (the head surviving) was zeroed, recovered by
  ``salvage.recover_session`` (the replacement takes the session's path: its stored hashes
  kept, its gaps in ``chain_gaps``);
- ``rev3 recovered + emits``: ``rev3 recovered (mid)`` then reopened by
  ``SessionWriter.open`` and extended by two more turns and an ending;
- ``rev3 from rev2 with holes`` / ``rev3 from rev1 with holes``: a revision-2 / -1 session that
  lost a middle (or, in half the extra shapes, the last) events leaf page, recovered while
  revision 2 is current (its replacement is revision 2, with holes in its sequence), then
  migrated to revision 3 (step 3 records the holes as gaps).

Each kind is damaged the ways ``bench_chain_design.py`` damages the prototype: single-byte flips
inside live rows' records of every table (``chain_gaps`` too, in the recovered and holed
kinds), one row dropped from a table b-tree by a page edit (its index entries written back: a
lost cell), one row removed by a naive ``DELETE``, events 3 and 4 swapped, and the last N events
cut with their derived rows (the head left in place). A damaged copy whose every value SQLite
returns is unchanged carried no information and is counted apart (the issue: "the bench reports
them as such, not as misses"). Judged by:

- full: ``checks.judge(path, sid, level="full")`` — ``agentdb check`` (for the recovered and
  holed kinds with ``recovered=True``, as ``check`` passes it when the recovery log records a
  salvage);
  detected = a verdict other than ``ok`` / ``needs_migration``;
- quick: ``checks.judge(..., level="quick")`` — ``agentdb check --quick``;
- beside them ``PRAGMA integrity_check`` alone, and for revision 3 the walk alone
  (``chainio.verify_full`` / ``verify_quick``): counted only where it finds damage ``check``
  does not.

False alarms: before damaging, every undamaged file of each kind, and ``--shapes N`` more
sessions of random lengths per kind (the recovered and holed kinds: damaged by the lost page, or
a flipped byte where the shape is too small for it, then recovered), must be judged ``ok`` by
``check`` full and quick (a revision-2 file also ``needs_migration``; info and warning findings
such as ``chain_gap_recorded`` allowed); the recovered and holed ones also without
``recovered=True`` (at revision 3 the gap records, not the log, explain the holes). Any false
alarm is listed, not asserted, so the table is still written.

    .venv/bin/python bench/bench_chain_detect.py [--flips N] [--shapes N] [--seed S]
        [--keep DIR] [--out FILE]

Writes bench/results/chain_detect.md (``--out``; about a minute and a half at load 4 on a
shared 2-core machine); damaged copies that ``check`` missed and healthy files it called
damaged are kept in ``--keep`` (default: a new temporary directory), for reproduction.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import apsw  # noqa: E402

import bench_chain_design as D  # noqa: E402
from agentdb import db, salvage  # noqa: E402
from agentdb.checks.judge import HEALTHY, LEVELS, judge  # noqa: E402
from agentdb.jobs import demo  # noqa: E402
from agentdb.schema import chainio, migrations  # noqa: E402
from agentdb.store import Event, SessionWriter  # noqa: E402

RESULTS = HERE / "results" / "chain_detect.md"
RECOVERED = ("rev3 recovered (mid)", "rev3 recovered (tail)", "rev3 recovered + emits")
HOLED = ("rev3 from rev2 with holes", "rev3 from rev1 with holes")
KINDS = ("rev2", "rev3 writer", "rev3 from rev2", "rev3 from rev1", *RECOVERED, *HOLED)
TABLES_R = (*D.TABLES3, "chain_gaps")
Fill = Callable[[SessionWriter], None]


# ------------------------------------------------------------------------------ files


def _migrate(path: Path) -> None:
    conn = db.open_writer(path)
    try:
        migrations.apply_steps(conn, path, target=3, steps=migrations.REV3_LADDER)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def _ro(path: Path) -> apsw.Connection:
    return apsw.Connection(
        f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )


def leaves(path: Path, table: str) -> list[int]:
    """The table's leaf pages in key order (a one-page table: its root)."""
    conn = _ro(path)
    try:
        sql = "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path"
        out = [int(r[0]) for r in conn.execute(sql, (table,))]
        if not out:
            sql = "SELECT rootpage FROM sqlite_schema WHERE name = ?"
            out = [int(r[0]) for r in conn.execute(sql, (table,))]
        return out
    finally:
        conn.close()


def zero_page(path: Path, pgno: int) -> None:
    conn = _ro(path)
    try:
        ps = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
    finally:
        conn.close()
    with open(path, "r+b") as f:
        f.seek((pgno - 1) * ps)
        f.write(bytes(ps))


def lose_rows(path: Path, where: str, rng: random.Random) -> str:
    """Real damage that loses rows: ``mid`` zeroes a middle events leaf, ``tail`` the rightmost
    one (the head's page survives). A shape too small for it gets a flipped byte inside a random
    live row instead (recovery drops the row that no longer proves). Returns what was done."""
    ev = leaves(path, "events")
    if where == "mid" and len(ev) >= 3:
        zero_page(path, ev[len(ev) // 2])
        return "mid"
    if where == "tail" and len(ev) >= 2:
        zero_page(path, ev[-1])
        return "tail"
    tables = [t for t in ("events", "cost_ledger", "plan_items") if D.leaf_cells(path, t)]
    if not tables:
        return "no rows to lose"
    table = rng.choice(tables)
    _pg, off, length = rng.choice(D.leaf_cells(path, table))
    D.flip(path, off + rng.randrange(length), rng.randrange(1, 256))
    return f"flip {table}"


def recover(root: Path, sid: str) -> str:
    """Recover the session; its outcome. ``refused`` (a revision-2 file that reads whole but is
    inconsistent: nothing to salvage) leaves the file out of the sweep, counted in the notes."""
    out = salvage.recover_session(root, sid)
    assert out.outcome in ("recovered", "healthy", "refused"), (out.outcome, out.notes)
    return out.outcome


def extend(root: Path, sid: str) -> None:
    """Reopen a recovered session with the writer and add two turns and an ending."""
    w = SessionWriter.open(root, sid)
    try:
        if w.conn.execute("SELECT status FROM session_meta").fetchall()[0][0] != "running":
            w.set_status("running")  # the base session was completed
        demo._turns(w, demo.MODEL_CACHED, 2, seed=9)
        w.emit(Event("tool_result", D.TOOL, b"C" * 7000))
        w.set_status("completed")
    finally:
        w.close()


def build(
    kind: str,
    root: Path,
    fill: Fill = D.fill,
    rng: random.Random | None = None,
    where: str = "mid",
) -> Any:
    """A closed session of ``kind`` in the sessions directory ``root``: (path, sid, note).
    ``where``: the page a holed kind loses (a recovered kind's is in its name)."""
    rng = rng or random.Random(0)
    revision = 1 if "from rev1" in kind else 2 if kind == "rev2" or "from rev2" in kind else 3
    root.mkdir(parents=True, exist_ok=True)
    w = SessionWriter.create(root, profile="coder", revision=revision)
    path, sid = w.path, w.session_id
    fill(w)
    note = ""
    if kind.startswith("rev3 recovered") or kind.endswith("with holes"):
        if kind in RECOVERED:
            where = "tail" if "(tail)" in kind else "mid"
        note = lose_rows(path, where, rng)
        if note != "no rows to lose":
            note += ": " + recover(root, sid)
        if note.endswith("refused"):
            return path, sid, note
        if "emits" in kind:
            extend(root, sid)
    if "from rev" in kind:
        if kind.endswith("with holes"):
            conn = _ro(path)
            try:
                rev = conn.execute("PRAGMA user_version").fetchall()[0][0]
            finally:
                conn.close()
            assert rev == 2 or note.endswith("healthy") or not note.count(":"), (kind, rev, note)
        _migrate(path)
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{path}{suffix}").exists(), f"{kind}: {suffix} left after close"
    return path, sid, note


# ------------------------------------------------------------------------------ judging


def check_verdicts(kind: str, path: Path, sid: str) -> tuple[Any, Any]:
    """``check`` full and quick on ``path``: the two SessionChecks."""
    rec = kind in RECOVERED or kind in HOLED
    return (
        judge(path, sid, level="full", recovered=rec),
        judge(path, sid, level="quick", recovered=rec),
    )


def walk_fails(path: Path, quick: bool = False) -> bool:
    """The chain walk alone (no pragma): a failure to read is a failure."""
    try:
        conn = db.open_private(path, readonly=True)
        try:
            report = chainio.verify_quick(conn) if quick else chainio.verify_full(conn)
            return not report.ok
        finally:
            conn.close()
    except Exception:  # a row that does not read is found
        return True


class Judge:
    """The bench's judge for ``D.damage_all``; counts the copies the walk alone calls damaged
    and ``check`` does not (check runs the walk, so none are expected), and keeps the first few
    misses (for reproduction)."""

    def __init__(self) -> None:
        self.disagree: Counter[str] = Counter()
        self.missed: list[tuple[str, str, str, Path]] = []
        self.keep: Path | None = None

    def __call__(
        self,
        tally: D.Tally,
        kind: str,
        damage: str,
        table: str,
        copy: Path,
        sid: str,
        pristine: dict[str, Any],
        tables: tuple[str, ...],
    ) -> None:
        if D.snapshot(copy, tables) == pristine:
            tally.add(kind, damage, table, noinfo=True)
            return
        full, quick = check_verdicts(kind, copy, sid)
        f_hit, q_hit = full.verdict not in HEALTHY, quick.verdict not in HEALTHY
        tally.add(kind, damage, table, check=f_hit, quick=q_hit, integrity=D.integrity_fails(copy))
        if kind != "rev2":
            wf, wq = walk_fails(copy), walk_fails(copy, quick=True)
            self.disagree[f"{kind}: full"] += wf and not f_hit
            self.disagree[f"{kind}: quick"] += wq and not q_hit
            if not f_hit and self.keep is not None and len(self.missed) < 20:
                kept = self.keep / f"miss{len(self.missed)}-{copy.name}"
                shutil.copyfile(copy, kept)
                self.missed.append((kind, damage, table, kept))


# ------------------------------------------------------------------------------ campaign


def shapes_fill(
    rng: random.Random,
    endings: tuple[str, ...] = ("completed", "failed", "cancelled"),
    turns: tuple[int, int] = (0, 6),
) -> Fill:
    """A writer fill of random length and mix (costs, plan items, overflow, an ending)."""

    def fill(w: SessionWriter) -> None:
        for _ in range(rng.randrange(*turns)):
            demo._turns(
                w, rng.choice((demo.MODEL_OLD, demo.MODEL_CACHED)), 1, seed=rng.randrange(99)
            )
            if rng.random() < 0.3:
                w.emit(Event("tool_result", D.TOOL, rng.randbytes(rng.choice((10, 5000, 9000)))))
        if rng.random() < 0.7:
            w.set_status(rng.choice(endings))
        w.close()

    return fill


class Sweep:
    """Healthy files judged: how many per kind, the false alarms, the finding codes seen."""

    def __init__(self) -> None:
        self.n: Counter[str] = Counter()
        self.alarms: list[str] = []
        self.codes: dict[str, Counter[str]] = {}
        self.notes: dict[str, Counter[str]] = {}

    def judge(self, kind: str, path: Path, sid: str, what: str, note: str = "") -> bool:
        full, quick = check_verdicts(kind, path, sid)
        self.n[kind] += 1
        if kind in RECOVERED or kind in HOLED:  # check without the recovery log's word
            for level in LEVELS[1:]:  # quick, full
                bare = judge(path, sid, level=level)
                if bare.verdict != "ok":
                    errs = [f.code for f in bare.findings if f.severity == "error"]
                    self.alarms.append(
                        f"{kind} {what} ({note}), {level} without recovered=True: "
                        f"{bare.verdict}, {errs}; kept as {path}"
                    )
        if note:
            self.notes.setdefault(kind, Counter())[note] += 1
        codes = self.codes.setdefault(kind, Counter())
        for f in (*full.findings, *quick.findings):
            codes[f"{f.code} ({f.severity})"] += 1
        ok = full.verdict in HEALTHY and quick.verdict in HEALTHY
        if kind != "rev2":
            ok = ok and full.verdict == "ok" and quick.verdict == "ok"
        if not ok:
            errs = [f.code for f in (*full.findings, *quick.findings) if f.severity == "error"]
            self.alarms.append(
                f"{kind} {what} ({note or 'undamaged'}): full {full.verdict}, "
                f"quick {quick.verdict}, {errs}; kept as {path}"
            )
        return ok


def campaign(
    root: Path, flips: int, shapes: int, seed: int, keep: Path
) -> tuple[D.Tally, Sweep, Judge]:
    rng = random.Random(seed)
    tally, sweep, judge_ = D.Tally(), Sweep(), Judge()
    judge_.keep = keep
    for kind in KINDS:
        t0 = time.perf_counter()
        d = root / kind.replace(" ", "-").replace("(", "").replace(")", "").replace("+", "")
        for i in range(shapes):
            sdir = d / f"shape{i}" / "sessions"
            ends = ("completed",) if "emits" in kind else ("completed", "failed", "cancelled")
            turns = (3, 12) if kind in RECOVERED or kind in HOLED else (0, 6)
            where = ("mid", "tail")[i % 2]
            p, sid, note = build(kind, sdir, shapes_fill(rng, ends, turns), rng, where)
            if note.endswith("refused"):
                sweep.notes.setdefault(kind, Counter())[note + " (left out)"] += 1
                continue
            if not sweep.judge(kind, p, sid, f"shape {i}", note):
                shutil.copyfile(p, keep / f"alarm-{sid}.sqlite")
        tables = (
            D.TABLES2
            if kind == "rev2"
            else TABLES_R
            if kind in RECOVERED or kind in HOLED
            else D.TABLES3
        )
        src, sid, note = build(kind, d / "main" / "sessions", rng=rng)
        assert not note.endswith("refused"), (kind, note)
        pristine = D.snapshot(src, tables)
        assert pristine is not None
        sweep.judge(kind, src, sid, "main file", note)
        D.damage_all(tally, kind, src, sid, tables, pristine, rng, flips, judge_, d / "work")
        print(f"{kind}: {time.perf_counter() - t0:.0f} s", flush=True)
    return tally, sweep, judge_


# ------------------------------------------------------------------------------ report


def _keys(t: D.Tally) -> list[tuple[str, str]]:
    return sorted(
        {(dm, tb) for _k, dm, tb in t.rows},
        key=lambda x: (x[0].startswith("cut"), len(x[0]), x[0], TABLES_R.index(x[1])),
    )


def table_lines(t: D.Tally) -> list[str]:
    """Detection: per kind ``full / quick`` (share of informative damages check found)."""
    head = ["damage", "table", *KINDS, "integrity_check (rev3 writer / recovered mid)"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for damage, table in _keys(t):
        cells = [damage, table]
        for k in KINDS:
            c = t.rows.get((k, damage, table), Counter())
            info = c["n"] - c["noinfo"]
            if not c["n"]:
                cells.append("–")
            elif not info:
                cells.append("no info")
            else:
                cells.append(f"{D.pct(c['check'], info)} / {D.pct(c['quick'], info)}")
        ic = []
        for k in ("rev3 writer", "rev3 recovered (mid)"):
            c = t.rows.get((k, damage, table), Counter())
            ic.append(D.pct(c["integrity"], c["n"] - c["noinfo"]))
        cells.append(" / ".join(ic))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def trials_lines(t: D.Tally) -> list[str]:
    head = ["damage", "table", *KINDS]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for damage, table in _keys(t):
        cells = [damage, table]
        for k in KINDS:
            c = t.rows.get((k, damage, table), Counter())
            cells.append(f"{c['n']} ({c['noinfo']})" if c["n"] else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def minima(t: D.Tally) -> dict[str, tuple[float, float]]:
    """Per kind: the lowest full-check share over cells, and the lowest over the removal and
    cut cells for quick (quick is not meant to see a flip in the middle, nor the swap)."""
    out: dict[str, tuple[float, float]] = {}
    for k in KINDS:
        full, quick = 1.0, 1.0
        for (kind, damage, _table), c in t.rows.items():
            info = c["n"] - c["noinfo"]
            if kind != k or not info:
                continue
            full = min(full, c["check"] / info)
            if damage in ("drop cell", "DELETE row") or damage.startswith("cut"):
                quick = min(quick, c["quick"] / info)
        out[k] = (full, quick)
    return out


def misses(t: D.Tally) -> list[str]:
    """Every (kind, damage, table) where revision 3's full check missed informative damage."""
    out = []
    for (kind, damage, table), c in sorted(t.rows.items()):
        if kind != "rev2" and c["check"] < c["n"] - c["noinfo"]:
            out.append(f"{kind} / {damage} / {table}: {c['n'] - c['noinfo'] - c['check']} missed")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flips", type=int, default=100, help="byte flips per table and file kind")
    ap.add_argument("--shapes", type=int, default=10, help="extra healthy shapes per kind")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", type=Path, help="where to keep missed and false-alarm files")
    ap.add_argument("--out", type=Path, default=RESULTS, help="the report (markdown)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    load0 = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    keep = args.keep or Path(tempfile.mkdtemp(prefix="bench-chain-detect-kept-"))
    keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-chain-detect-") as tmp:
        tally, sweep, judge_ = campaign(Path(tmp), args.flips, args.shapes, args.seed, keep)
    load1 = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    missed = misses(tally)
    mins = minima(tally)
    out = [
        "# Revision 3 detection judged by the real `check` (`bench/bench_chain_detect.py`)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')}, seed {args.seed}, {args.flips} flips per table "
        f"and kind, {args.shapes} extra healthy shapes per kind, "
        f"{time.perf_counter() - t0:.0f} s, load average {load0} at start and {load1} at the "
        f"end on {os.cpu_count()} shared cores. Each cell: `check` (full) / `check --quick` "
        "(`checks.judge(level='full' / 'quick')`; detected = a verdict other than ok and "
        "needs_migration), as shares of the damages that carry information (trials less those "
        "after which every value SQLite returns is unchanged). The last column: "
        "`PRAGMA integrity_check` alone on the same copies.",
        "",
        *table_lines(tally),
        "",
        "Trials (of them without information):",
        "",
        *trials_lines(tally),
        "",
        "Lowest share per kind, full `check` over every cell / `check --quick` over the "
        "removals and tail cuts: "
        + "; ".join(f"{k} {100 * f:.0f} % / {100 * q:.0f} %" for k, (f, q) in mins.items())
        + ".",
        "",
        "Revision 3 full-check misses of informative damage: "
        + ("; ".join(missed) if missed else "none")
        + ".",
        "",
        "Damaged copies the walk alone (`chainio.verify_full` / `verify_quick`, no pragma) "
        "calls damaged and `check` (full / quick) does not: "
        + ("; ".join(f"{k} {n}" for k, n in sorted(judge_.disagree.items()) if n) or "never")
        + ".",
        "",
        "Healthy files judged by `check` full and quick before any damage (the main file and "
        "the extra shapes): " + ", ".join(f"{k} {n}" for k, n in sweep.n.items()) + ".",
        "",
        "How the recovered and holed sweep files were damaged before recovery: "
        + "; ".join(
            f"{k}: " + ", ".join(f"{w} {n}" for w, n in sorted(c.items()))
            for k, c in sweep.notes.items()
        )
        + ".",
        "",
        "Findings on healthy files (full and quick together): "
        + "; ".join(
            f"{k}: " + (", ".join(f"{w} {n}" for w, n in sorted(c.items())) or "none")
            for k, c in sweep.codes.items()
        )
        + ".",
        "",
        "False alarms: " + ("; ".join(sweep.alarms) if sweep.alarms else "none") + ".",
    ]
    text = "\n".join(out) + "\n"
    print(text)
    if judge_.missed:
        print("kept misses:", *(f"{k} / {d} / {t}: {p}" for k, d, t, p in judge_.missed), sep="\n")
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
