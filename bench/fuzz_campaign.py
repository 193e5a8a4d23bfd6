"""Bench: the damage generator's campaign (issue 10) — `bench/fuzz --minutes N --revision R`.

Draws cases from consecutive seeds (``--seed S``, S+1, …) of one schema revision, runs every
invariant of :mod:`tests.fuzz.invariants` on each (each command killed after the guard), and
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
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fuzz import oracle  # noqa: E402
from tests.fuzz.bases import Bases  # noqa: E402
from tests.fuzz.generator import Case  # noqa: E402
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

    def add(self, case: Case, r: object, old: dict[str, int] | None, has_old: bool) -> None:
        from tests.fuzz.invariants import CaseResult

        assert isinstance(r, CaseResult)
        wal = "WAL" if case.wal else "no WAL"
        kinds = sorted({k for k, _ in case.damages if k in r.applied.kinds_applied})
        if len(case.damages) > 1:
            kinds.append("(combination)")
        kinds.append("(all cases)")
        self.outcomes[r.outcome or "none"] += 1
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
            row[3] += sum(r.applied.base.rows.count(t) for t in oracle.TABLES)


def report(t: Tally, args: argparse.Namespace, n: int, secs: float, shell: Path | None) -> str:
    lines = [
        f"Damage campaign, revision {args.revision}: {n} cases in {secs / 60:.1f} min "
        f"(seeds {args.seed}..{args.seed + n - 1}); {_load()} at the end. "
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
    lines += ["", "| invariant | failures | first case (replay with --case) |", "|---|---:|---|"]
    for inv, c in t.invariants.most_common():
        lines.append(f"| {inv} | {c} | `{t.first[inv]}` |")
    if not t.invariants:
        lines.append("| (none) | 0 | |")
    lines += ["", "Outcomes of recover: " + ", ".join(f"{k} {v}" for k, v in t.outcomes.items())]
    lines.append(
        "Rows count only when byte-identical to the undamaged copy (any table; "
        ".recover's lost_and_found does not count); a healthy outcome keeps the file as it is."
    )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--revision", type=int, choices=(1, 2), required=True)
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: from the clock)")
    ap.add_argument("--old", default="dd60f0c", help="agentdb commit to compare, or 'none'")
    ap.add_argument("--guard", type=float, default=60.0, help="seconds per command")
    ap.add_argument("--kind", default=None, help="only cases of this one damage kind")
    ap.add_argument("--wal", choices=("0", "1"), default=None, help="only without/with a WAL")
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
    out = args.out or REPO / "bench" / "results" / f"fuzz-rev{args.revision}.md"
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
            bases = Bases(root / "bases")
            t, n, t0 = Tally(), 0, time.monotonic()
            while time.monotonic() - t0 < args.minutes * 60:
                wal = None if args.wal is None else args.wal == "1"
                case = Case.from_seed(
                    args.seed + n, revision=args.revision, wal=wal, kind=args.kind
                )
                r = run_case(
                    case,
                    bases,
                    root / "case",
                    agentdb_src=under_test,
                    shell=shell,
                    guard=args.guard,
                )
                old = old_recover(case, bases, root / "oldcase", old_src) if old_src else None
                t.add(case, r, old, old_src is not None)
                status = "ok" if not r.failures else "; ".join(f"{i}: {d}" for i, d in r.failures)
                print(f"{args.seed + n} {case} [{r.verdict}/{r.outcome}] {status}", flush=True)
                n += 1
            text = report(t, args, n, time.monotonic() - t0, shell)
        finally:
            if commit:
                subprocess.run([*wt, "remove", "--force", str(root / "old")], check=False)
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
