"""Bench: the damage generator's campaign (issue 10) — `bench/fuzz --minutes N [--revision R]`.

``--revision`` is 1, 2 or 3 (the damage-evident revision, whose cells add ``sql_edit``);
without it the campaign alternates revisions 1 and 2 exactly as before revision 3 existed, so
a campaign seed names the same cases it always did.

Draws cases from consecutive seeds (``--seed S``, S+1, …) of one schema revision, each one
including the damage kind of the (kind × WAL/no-WAL) cell with the fewest cases so far, runs
``--jobs`` of them at once (default: the usable cores), checks every invariant of
:mod:`tests.fuzz.invariants` on each (each command killed after max(``--guard``, 30 × the
case's ``.recover | sqlite3``) seconds), and
recovers the same damaged file with agentdb at ``--old`` (default dd60f0c, run from a temporary
``git worktree`` that is removed at the end). Prints, and writes to
``bench/results/fuzz-rev<R>.md``:

- cases per damage kind × WAL/no-WAL (a combination counts under each of its kinds, and
  every case once under "(all cases)"),
- failing cases per cell and failures by invariant (with the first case, replayable),
- rows kept byte-identical to the undamaged copy: agentdb, SQLite's ``.recover`` (when a
  capable shell exists), agentdb at ``--old``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fuzz import oracle  # noqa: E402
from tests.fuzz.bases import Bases  # noqa: E402
from tests.fuzz.generator import REVISIONS, Case, foreign_kinds_for, kinds_for  # noqa: E402
from tests.fuzz.invariants import old_recover, run_case  # noqa: E402


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} (1 / 5 min) on {os.cpu_count()} CPUs"


class Tally:
    def __init__(self) -> None:
        self.cases: Counter[tuple[str, str]] = Counter()
        self.failing: Counter[tuple[str, str]] = Counter()
        self.rows: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        self.dot_cases: Counter[tuple[str, str]] = Counter()
        self.old_cases: Counter[tuple[str, str]] = Counter()
        self.invariants: Counter[str] = Counter()
        self.first: dict[str, str] = {}
        self.outcomes: Counter[str] = Counter()
        self.harness_errors = 0  # cases the campaign itself failed to run (not agentdb's)
        self.in_place = [0, 0]  # unhashed rows altered inside a value, cases with any
        # revision 3: damaged files that present an earlier committed state whole (a consistent
        # rollback, out of scope: design §1), by that state's kind
        self.rollbacks: Counter[str] = Counter()
        self.rollback_first = ""
        # per cell and table, over the cases the old agentdb ran on: [agentdb kept, old kept]
        self.vs_old: dict[tuple[tuple[str, str], str], list[int]] = defaultdict(lambda: [0, 0])
        self.behind_old = 0  # cases in which agentdb kept fewer rows of a table than the old
        self.behind_old_first: list[str] = []

    def add(self, case: Case, r: object, old: dict[str, int] | None, has_old: bool) -> None:
        from tests.fuzz.invariants import CaseResult

        assert isinstance(r, CaseResult)
        wal = "WAL" if case.wal else "no WAL"
        kinds = sorted({k for k, _ in case.damages if k in r.applied.kinds_applied})
        if len(case.damages) > 1:
            kinds.append("(combination)")
        kinds.append("(all cases)")
        self.outcomes[r.outcome or "none"] += 1
        self.in_place[0] += r.altered_in_place
        self.in_place[1] += bool(r.altered_in_place)
        if r.rollback:
            self.rollbacks["commit of the -wal" if "commit" in r.rollback else r.rollback] += 1
            self.rollback_first = self.rollback_first or f"{case} -> {r.rollback}"
        if has_old:
            behind = [
                f"{t} {r.kept.get(t, 0)} < {(old or {}).get(t, 0)}"
                for t in oracle.TABLES
                if r.kept.get(t, 0) < (old or {}).get(t, 0)
            ]
            if behind:
                self.behind_old += 1
                if len(self.behind_old_first) < 5:
                    self.behind_old_first.append(f"{case} [{r.outcome}] -> {', '.join(behind)}")
        for inv, detail in r.failures:
            self.invariants[inv] += 1
            self.first.setdefault(inv, f"{case} -> {detail}")
        for k in kinds:
            cell = (k, wal)
            self.cases[cell] += 1
            self.failing[cell] += bool(r.failures)
            row = self.rows[cell]
            row[0] += sum(r.kept.values())
            if r.dot_recover is not None:
                row[1] += sum(r.dot_recover.values())
                self.dot_cases[cell] += 1
            if has_old:
                row[2] += sum(old.values()) if old else 0
                self.old_cases[cell] += 1
                for tb in oracle.TABLES:
                    pair = self.vs_old[(cell, tb)]
                    pair[0] += r.kept.get(tb, 0)
                    pair[1] += (old or {}).get(tb, 0)
            row[3] += sum(r.applied.base.rows.count(t) for t in oracle.TABLES)


def report(
    t: Tally,
    args: argparse.Namespace,
    n: int,
    secs: float,
    shell: Path | None,
    jobs: int,
    last_seed: int,
) -> str:
    filled = [c for c in t.cases if not c[0].startswith("(")]
    least = min((t.cases[c] for c in filled), default=0)
    lines = [
        f"Damage campaign, revision {args.revision or '1 and 2'}: {n} cases in "
        f"{secs / 60:.1f} min, "
        f"{jobs} at once (seeds {args.seed}..{last_seed}; each case includes the damage kind of "
        f"the least-covered cell, the fewest cases in a cell: {least}); {_load()} at the end. "
        f"`.recover`: {shell if shell else 'no capable shell: not compared'}. "
        f"Old agentdb: {args.old if args.old != 'none' else 'not run'}."
        + (f" Invariants checked on agentdb at {args.agentdb}." if args.agentdb else ""),
        "",
        "| damage kind | WAL | cases | failing cases | rows in undamaged copies | "
        "agentdb kept | .recover kept | old agentdb kept |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for cell in sorted(t.cases):
        kept, dot, old, total = t.rows[cell]
        dot_s = f"{dot}" if t.dot_cases[cell] else "n/a"
        old_s = f"{old}" if t.old_cases[cell] else "n/a"
        lines.append(
            f"| {cell[0]} | {cell[1]} | {t.cases[cell]} | {t.failing[cell]} | {total} | "
            f"{kept} | {dot_s} | {old_s} |"
        )
    if t.old_cases:
        behind = [(c, tb, k, o) for (c, tb), (k, o) in sorted(t.vs_old.items()) if k < o]
        lines += [
            "",
            "Per table, summed over each cell's cases: cells where agentdb kept fewer "
            "byte-identical rows of a table than the old agentdb: "
            + (
                "; ".join(f"{c[0]} / {c[1]} / {tb}: {k} < {o}" for c, tb, k, o in behind)
                if behind
                else "none"
            )
            + f". Single cases with fewer rows of some table than the old agentdb: "
            f"{t.behind_old}"
            + (" (first: " + "; ".join(f"`{x}`" for x in t.behind_old_first) + ")")
            * bool(t.behind_old_first)
            + ".",
        ]
    lines += ["", "| invariant | failures | first case (replay with --case) |", "|---|---:|---|"]
    for inv, c in t.invariants.most_common():
        lines.append(f"| {inv} | {c} | `{t.first[inv]}` |")
    if not t.invariants:
        lines.append("| (none) | 0 | |")
    lines += ["", "Outcomes of recover: " + ", ".join(f"{k} {v}" for k, v in t.outcomes.items())]
    if t.harness_errors:
        lines.append(f"Cases the harness itself failed to run (not counted): {t.harness_errors}.")
    if t.rollbacks:
        lines.append(
            "Consistent rollbacks (revision 3: the damaged file presents an earlier committed "
            "state whole; out of scope, design §1; not failures): "
            + ", ".join(f"{k} {v}" for k, v in t.rollbacks.most_common())
            + f" (first: `{t.rollback_first}`)."
        )
    if t.in_place[0]:
        lines.append(
            f"Rows of tables without a row hash (revision 1: all; revision 2: all but events) "
            f"kept with bytes changed inside a value (same length: no structure can show it; "
            f"reported structural_only, not a failure): {t.in_place[0]} in {t.in_place[1]} cases."
        )
    lines.append(
        "Rows count only when byte-identical to the undamaged copy (any table; "
        ".recover's lost_and_found does not count); a healthy outcome keeps the file as it is."
    )
    return "\n".join(lines) + "\n"


def _cells(
    revision: int | None, wal: bool | None, kind: str | None, foreign: bool = False
) -> list[tuple[int, str, bool]]:
    """The (revision, damage kind, WAL) cells the campaign fills, least-covered first
    (``foreign``: issue 29's kinds alone, :data:`tests.fuzz.generator.FOREIGN`)."""
    out = []
    for rev in (1, 2) if revision is None else (revision,):
        for w in (False, True) if wal is None else (wal,):
            for k in foreign_kinds_for(w) if foreign else kinds_for(w, rev):
                if kind is None or k == kind:
                    out.append((rev, k, w))
    return out


_WORKER: dict[str, Any] = {}
# The old agentdb's recover is only compared (rows kept), not judged: it hangs on the damage
# issue 10 was filed for (its reader loops), and one minute per such case would take a third of
# a campaign. Killed after this long, it kept nothing.
OLD_GUARD_S = 10.0


def _init_worker(root: str, under_test: str | None, old_src: str | None, shell: str | None) -> None:
    """Each worker process builds its own undamaged bases and works in its own directory."""
    work = Path(tempfile.mkdtemp(prefix="worker-", dir=root))
    _WORKER.update(
        work=work,
        bases=Bases(work / "bases"),
        under_test=Path(under_test) if under_test else None,
        old_src=Path(old_src) if old_src else None,
        shell=Path(shell) if shell else None,
    )


def _run_one(case: Case, guard: float) -> tuple[Case, Any, dict[str, int] | None]:
    w = _WORKER
    try:
        r = run_case(
            case,
            w["bases"],
            w["work"] / "case",
            agentdb_src=w["under_test"],
            shell=w["shell"],
            guard=guard,
            guard_per_dot=30.0,
        )
    except Exception as e:  # the harness's own failure: said with its case, so it can be replayed
        raise RuntimeError(f"{case}: {traceback.format_exc(limit=-3)}") from e
    old = None
    if w["old_src"] is not None:
        old = old_recover(case, w["bases"], w["work"] / "oldcase", w["old_src"], OLD_GUARD_S)
    return case, r, old


def _next_case(args: argparse.Namespace, seed: int, drawn: Counter[tuple[int, str, bool]]) -> Case:
    """A case that includes the damage kind of the least-covered cell (cases drawn so far,
    a combination counting under each of its kinds), so every cell fills at the same pace."""
    wal = None if args.wal is None else args.wal == "1"
    cells = _cells(args.revision, wal, args.kind, args.foreign)
    rev, kind, w = min(cells, key=lambda c: (drawn[c], cells.index(c)))
    if args.kind is not None:
        case = Case.from_seed(seed, revision=rev, wal=w, kind=kind)
    else:
        case = Case.from_seed(seed, revision=rev, wal=w, include=kind)
    for k in {k for k, _ in case.damages}:
        drawn[(case.revision, k, case.wal)] += 1
    return case


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument(
        "--revision",
        type=int,
        choices=REVISIONS,
        default=None,
        help="default: 1 and 2, alternately (revision 3 only when asked)",
    )
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: from the clock)")
    ap.add_argument("--old", default="dd60f0c", help="agentdb commit to compare, or 'none'")
    ap.add_argument(
        "--guard",
        type=float,
        default=60.0,
        help="seconds per command at least (a case whose .recover | sqlite3 takes longer gets "
        "30 times that)",
    )
    ap.add_argument("--kind", default=None, help="only cases of this one damage kind")
    ap.add_argument(
        "--foreign",
        action="store_true",
        help="cells of issue 29's kinds only (another session's leaf, session_meta page or hot "
        "journal, an earlier generation's -wal, header fields); writes fuzz-foreign-rev<R>.md",
    )
    ap.add_argument("--wal", choices=("0", "1"), default=None, help="only without/with a WAL")
    ap.add_argument("--jobs", type=int, default=None, help="cases at once (default: usable cores)")
    ap.add_argument(
        "--agentdb",
        default=None,
        metavar="COMMIT",
        help="check the invariants of agentdb at COMMIT instead of this tree (implies --old none)",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time()) % 1_000_000 * 1000
    from agentdb.workers import usable_cores

    jobs = args.jobs or usable_cores()
    name = f"fuzz-rev{args.revision}.md" if args.revision else "fuzz-both.md"
    if args.foreign:
        name = f"fuzz-foreign-rev{args.revision}.md" if args.revision else "fuzz-foreign.md"
    out = args.out or REPO / "bench" / "results" / name
    shell = oracle.capable_shell()
    if shell is None:
        print("bench/fuzz: no capable sqlite3 shell; .recover is not compared", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-fuzz-") as tmp:
        root = Path(tmp)
        old_src = under_test = None
        if args.agentdb:
            args.old = "none"
        commit = args.agentdb or (args.old if args.old != "none" else None)
        if commit:
            wt = ["git", "-C", str(REPO), "worktree"]
            subprocess.run([*wt, "add", "--detach", str(root / "old"), commit], check=True)
            if args.agentdb:
                under_test = root / "old" / "src"
            else:
                old_src = root / "old" / "src"
        try:
            t, n, t0 = Tally(), 0, time.monotonic()
            drawn: Counter[tuple[int, str, bool]] = Counter()
            seed = args.seed
            init = (str(root), str(under_test or ""), str(old_src or ""), str(shell or ""))
            with ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=init) as pool:
                running: set[Future[Any]] = set()
                while True:
                    while time.monotonic() - t0 < args.minutes * 60 and len(running) < 2 * jobs:
                        case = _next_case(args, seed, drawn)
                        seed += 1
                        running.add(pool.submit(_run_one, case, args.guard))
                    if not running:
                        break
                    done, running = wait(running, return_when=FIRST_COMPLETED)
                    for f in done:
                        try:
                            case, r, old = f.result()
                        except Exception as e:  # the harness's own failure: said, not fatal
                            print(f"harness error: {type(e).__name__}: {e}", flush=True)
                            t.harness_errors += 1
                            continue
                        t.add(case, r, old, old_src is not None)
                        # a kind drawn but not applied (a writer that finished before its
                        # kill point, a combination the file could not take) filled no cell
                        for k in {k for k, _ in case.damages} - set(r.applied.kinds_applied):
                            drawn[(case.revision, k, case.wal)] -= 1
                        failures = "; ".join(f"{i}: {d}" for i, d in r.failures)
                        status = failures or "ok"
                        print(f"{case.seed} {case} [{r.verdict}/{r.outcome}] {status}", flush=True)
                        n += 1
            text = report(t, args, n, time.monotonic() - t0, shell, jobs, seed - 1)
        finally:
            if commit:
                subprocess.run([*wt, "remove", "--force", str(root / "old")], check=False)
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
