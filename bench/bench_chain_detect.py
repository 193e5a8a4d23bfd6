"""Issue 14's detection measurement on the real revision-3 code (not the design prototype).

Revision 3 is not released; this drives its pieces explicitly. Four kinds of small closed
session (demo turns, two payloads on overflow pages, a cost row and plan items): revision 2 as
agentdb writes it today, and revision 3 written by ``SessionWriter.create(revision=3)``,
migrated by ``STEP_3`` from revision 2, and migrated by ``STEP_3`` from revision 1. Each kind is
damaged the ways ``bench_chain_design.py`` damages the prototype: single-byte flips inside live
rows' records of every table, one row dropped from a table b-tree by a page edit (its index
entries written back: a lost cell), one row removed by a naive ``DELETE``, events 3 and 4
swapped, and the last N events cut with their derived rows (the head left in place). A damaged
copy whose every value SQLite returns is unchanged carried no information and is counted apart
(the issue: "the bench reports them as such, not as misses"). Judged by:

- revision 2: today's ``check`` (full and ``--quick``) and ``PRAGMA integrity_check``;
- revision 3: what its ``check`` will run — full: ``integrity_check`` and
  ``chainio.verify_full`` (the walk); quick: ``quick_check`` and ``chainio.verify_quick``.

Before damaging, every undamaged file of each kind must pass (no false alarm), and a
hypothesis-free sweep of extra shapes (``--shapes N`` sessions of random lengths per kind) must
pass too. The issue's aim: 100 % of flips that change a value, 100 % of single-row removals,
100 % of tail cuts that leave the head in place, zero false alarms.

    .venv/bin/python bench/bench_chain_detect.py [--flips N] [--shapes N] [--seed S]

Writes bench/results/chain_detect.md (about a minute on an idle 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import bench_chain_design as D  # noqa: E402
from agentdb import db, demo  # noqa: E402
from agentdb.schema import chainio, migrations  # noqa: E402
from agentdb.store import Event, SessionWriter  # noqa: E402

RESULTS = HERE / "results" / "chain_detect.md"
KINDS = ("rev2", "rev3 writer", "rev3 from rev2", "rev3 from rev1")


def _migrate(path: Path) -> None:
    conn = db.open_writer(path)
    try:
        migrations.apply_steps(conn, path, target=3, steps=migrations.REV3_LADDER)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def build(kind: str, root: Path, fill: Any = D.fill) -> tuple[Path, str]:
    revision = {"rev2": 2, "rev3 writer": 3, "rev3 from rev2": 2, "rev3 from rev1": 1}[kind]
    w = SessionWriter.create(root, profile="coder", revision=revision)
    path, sid = w.path, w.session_id
    fill(w)
    if kind.startswith("rev3 from"):
        _migrate(path)
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{path}{suffix}").exists(), f"{kind}: {suffix} left after close"
    return path, sid


def walk_fails(path: Path, quick: bool = False) -> bool:
    """Revision 3's check: the page-level pragma, then the walk (full) or the head (quick)."""
    if D.integrity_fails(path, "quick_check" if quick else "integrity_check"):
        return True
    try:
        conn = db.open_private(path, readonly=True)
        try:
            report = chainio.verify_quick(conn) if quick else chainio.verify_full(conn)
            return not report.ok
        finally:
            conn.close()
    except Exception:  # a row that does not read is found
        return True


def verdicts(kind: str, copy: Path, sid: str) -> tuple[bool, bool]:
    """(full, quick) damage found: revision 2 by today's check, revision 3 by the walk."""
    if kind == "rev2":
        return D.check_fails(copy, sid), D.check_fails(copy, sid, quick=True)
    return walk_fails(copy), walk_fails(copy, quick=True)


def shapes_fill(rng: random.Random) -> Any:
    """A writer fill of random length and mix (costs, plan items, overflow, an ending)."""

    def fill(w: SessionWriter) -> None:
        for _ in range(rng.randrange(0, 6)):
            demo._turns(
                w, rng.choice((demo.MODEL_OLD, demo.MODEL_CACHED)), 1, seed=rng.randrange(99)
            )
            if rng.random() < 0.3:
                w.emit(Event("tool_result", D.TOOL, rng.randbytes(rng.choice((10, 5000, 9000)))))
        if rng.random() < 0.7:
            w.set_status(rng.choice(("completed", "failed", "cancelled")))
        w.close()

    return fill


def campaign(root: Path, flips: int, shapes: int, seed: int) -> tuple[D.Tally, Counter[str]]:
    rng = random.Random(seed)
    tally = D.Tally()
    healthy: Counter[str] = Counter()
    for kind in KINDS:
        d = root / kind.replace(" ", "-")
        d.mkdir(parents=True)
        tables = D.TABLES2 if kind == "rev2" else D.TABLES3
        for i in range(shapes):
            p, sid = build(kind, d / f"shape{i}", shapes_fill(rng))
            bad = D.check_fails(p, sid) if kind == "rev2" else walk_fails(p) or walk_fails(p, True)
            assert not bad, f"false alarm on a healthy {kind} file (shape {i})"
            healthy[kind] += 1
        src, sid = build(kind, d)
        pristine = D.snapshot(src, tables)
        assert pristine is not None
        if kind == "rev2":
            assert not D.check_fails(src, sid), "false alarm on a healthy file"
        else:
            assert not walk_fails(src) and not walk_fails(src, quick=True), "false alarm"
        healthy[kind] += 1
        D.damage_all(
            tally, kind, src, sid, tables, pristine, rng, flips, D.judge_by(verdicts), d / "work"
        )
    return tally, healthy


def table_lines(t: D.Tally) -> list[str]:
    head = ["damage", "table"]
    for k in KINDS:
        head += [f"{k}: trials (no info)", f"{k} full", f"{k} quick"]
    head += ["rev2 integrity_check", "rev3 writer integrity_check"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    keys = sorted(
        {(dm, tb) for _k, dm, tb in t.rows},
        key=lambda x: (x[0].startswith("cut"), len(x[0]), x[0], D.TABLES3.index(x[1])),
    )
    for damage, table in keys:
        cells = [damage, table]
        for k in KINDS:
            c = t.rows.get((k, damage, table), Counter())
            info = c["n"] - c["noinfo"]
            if not c["n"]:
                cells += ["–", "–", "–"]
                continue
            cells += [f"{c['n']} ({c['noinfo']})", D.pct(c["check"], info), D.pct(c["quick"], info)]
        for k in ("rev2", "rev3 writer"):
            c = t.rows.get((k, damage, table), Counter())
            cells.append(D.pct(c["integrity"], c["n"] - c["noinfo"]))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


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
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-chain-detect-") as tmp:
        tally, healthy = campaign(Path(tmp), args.flips, args.shapes, args.seed)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    missed = misses(tally)
    out = [
        "# Revision 3 detection on the real code (`bench/bench_chain_detect.py`)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')}, seed {args.seed}, {args.flips} flips per table "
        f"and kind, {time.perf_counter() - t0:.0f} s, load average {load} on {os.cpu_count()} "
        "cores. Percentages are of the damages that carry information (trials less those after "
        "which every value SQLite returns is unchanged). Full: rev 2 `check`; rev 3 "
        "`integrity_check` + the walk (`chainio.verify_full`). Quick: rev 2 `check --quick`; "
        "rev 3 `quick_check` + `chainio.verify_quick`.",
        "",
        *table_lines(tally),
        "",
        "Healthy files judged before any damage, none called damaged (full and quick): "
        + ", ".join(f"{k} {n}" for k, n in healthy.items())
        + ".",
        "",
        "Revision 3 full-check misses of informative damage: "
        + ("; ".join(missed) if missed else "none")
        + ".",
    ]
    text = "\n".join(out) + "\n"
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
