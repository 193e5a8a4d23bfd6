"""Every cross-session command at 20k, 50k, 100k sessions, beside the directory's own floor.

The sessions are written by the product's writer (``bench/scale_tree.py``: 1 to 33 model
turns, 7 to 199 events, costs and plan rows, every one ended more than a day ago); the smaller
trees are hard links to the first N files of the biggest, made before any index is built (a
link changes the shared inode's ctime, which every identity holds).

For each N, each command runs as a real CLI process (``python -m agentdb.cli.main``), warm:
after one untimed run that builds the index (and, for prune, records the judge's verdicts),
with its wall and CPU seconds and peak RSS (``tests.peak_rss``: the grandchild's ``wait4``).
With ``--baseline SRC`` (a ``src`` directory of another commit, e.g. ``git archive bcf0498
src | tar -x -C /tmp/base``) each command runs under both sources, side by side, each with its
own cache directory. The floor is a Python process doing ``os.scandir`` of the directory and
one ``lstat`` of each entry. A least-squares line ``t = a + b·N`` per command is extrapolated
to 1,000,000 sessions. Results go to ``bench/results/scale.md`` with the load average.

Usage: .venv/bin/python bench/bench_scale.py ROOT [N ...] [--baseline SRC] [--new SRC] [--out NAME]
    [--skip-base-prune-above N]   (default 20000: the baseline's prune takes minutes)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from tests import peak_rss  # noqa: E402

import scale_tree  # noqa: E402

FLOOR = (
    "import os, sys\n"
    "d = sys.argv[1]\n"
    "n = 0\n"
    "with os.scandir(d) as it:\n"
    "    for e in it:\n"
    "        os.lstat(os.path.join(d, e.name)); n += 1\n"
)

COMMANDS = {
    "sessions list --json": ["sessions", "list", "--json"],
    "status --json": ["status", "--json"],
    "report --html": ["report", "--html", "{out}/report.html"],
    "prune --dry-run --older-than 1d --json": [
        "prune",
        "--dry-run",
        "--older-than",
        "1d",
        "--json",
    ],
}


CHECKS = [
    "## What each command checks (nothing was dropped for speed)",
    "",
    "- every command: one `scandir` and an `lstat` of each session file and of each sidecar the",
    "  listing shows; a stored row is believed only for the identical identity, settled (the",
    "  racily-clean rule), with its row checksum; anything else is read from its file.",
    "- `sessions list`: a recorded `check` verdict is shown only when its identity is the one",
    "  the walk just took (the walk's own `lstat`, no second pass).",
    "- `status`: the same, plus a lock probe of each `running` session.",
    "- `prune --dry-run`: every selected session is lock-probed and re-`lstat`-ed (file and",
    "  three sidecars) and must still be the entry the plan began with; it is judged by",
    "  `check`'s full judge, or by a *full* healthy verdict recorded for that identity (by",
    "  `check` or an earlier plan's judge) whose status is the index row's. `prune --yes` still",
    "  re-takes the stamp and runs `quick_check` under the lock on each file it removes.",
    "",
]


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one process, which must exit 0 or 1."""
    t = time.perf_counter()
    m = peak_rss.Measured(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert m.proc.stderr is not None
    err = m.proc.stderr.read()
    u = m.wait()
    assert u.returncode in (0, 1), (argv, err[-800:])
    return time.perf_counter() - t, u.cpu_s, u.maxrss_kib / 1024


def env_for(src: Path, cache: Path, state: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(src),
        "XDG_CACHE_HOME": str(cache),
        "XDG_STATE_HOME": str(state),
    }


def main() -> int:
    args = sys.argv[1:]
    base = None
    skip_above = 20_000
    if "--baseline" in args:
        i = args.index("--baseline")
        base = Path(args[i + 1])
        del args[i : i + 2]
    if "--skip-base-prune-above" in args:
        i = args.index("--skip-base-prune-above")
        skip_above = int(args[i + 1])
        del args[i : i + 2]
    new = HERE.parent / "src"
    if "--new" in args:  # a snapshot of this tree's src: edits during a long run change nothing
        i = args.index("--new")
        new = Path(args[i + 1])
        del args[i : i + 2]
    out_name = "scale.md"
    if "--out" in args:
        i = args.index("--out")
        out_name = args[i + 1]
        del args[i : i + 2]
    root = Path(args[0])
    sizes = [int(a) for a in args[1:]] or [20_000, 50_000, 100_000]
    big = root / "big" / "sessions"
    plugins = root / "big" / "plugins"
    t0 = time.perf_counter()
    have = len(os.listdir(big)) if big.is_dir() else 0
    if have < max(sizes):
        scale_tree.build(big, plugins, max(sizes))
    built = time.perf_counter() - t0
    trees = {}
    for n in sizes:
        d = root / f"n{n}" / "sessions"
        scale_tree.link(big, d, n)  # all links first: a link moves the inode's ctime
        trees[n] = d
    srcs = {"new": new}
    if base is not None:
        srcs = {"base": base, **srcs}
    py = sys.executable
    load0 = os.getloadavg()
    results: dict[tuple[int, str, str], tuple[float, float, float] | None] = {}
    floors: dict[int, tuple[float, float, float]] = {}
    size_bytes: dict[int, int] = {}
    for n, d in trees.items():
        floors[n] = min(
            (run([py, "-c", FLOOR, str(d)], dict(os.environ)) for _ in range(3)),
            key=lambda r: r[1],
        )
        for label, src in srcs.items():
            cache = root / f"n{n}" / f"cache-{label}"
            env = env_for(src, cache, root / f"n{n}" / f"state-{label}")
            common = [py, "-m", "agentdb.cli.main", "--sessions-dir", str(d)]
            common += ["--plugin-cache", str(plugins)]
            for what, argv in COMMANDS.items():
                if label == "base" and what.startswith("prune") and n > skip_above:
                    results[(n, label, what)] = None
                    continue
                full = common + [a.replace("{out}", str(root)) for a in argv]
                slow = label == "base" and what.startswith("prune")  # minutes a run: once
                if what.startswith("sessions") or (what.startswith("prune") and not slow):
                    run(full, env)  # warm: the index built; prune's verdicts recorded
                times = 1 if slow else 2
                results[(n, label, what)] = min(
                    (run(full, env) for _ in range(times)), key=lambda r: r[1]
                )
                print(n, label, what, results[(n, label, what)], flush=True)
            idx = cache / "agentdb" / "index.sqlite"
            wal = Path(str(idx) + "-wal")
            size_bytes[n] = sum(p.stat().st_size for p in (idx, wal) if p.exists())
            results[(n, label, "index -wal left, bytes")] = (
                float(wal.stat().st_size) if wal.exists() else 0.0,
                0.0,
                0.0,
            )
    load1 = os.getloadavg()
    text = report(sizes, srcs, results, floors, size_bytes, built, load0, load1)
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / out_name).write_text(text)
    return 0


def fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least squares t = a + b·N."""
    if len(xs) < 2:
        return 0.0, ys[0] / xs[0]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - b * mx, b


def report(
    sizes: list[int],
    srcs: dict[str, Path],
    results: dict[tuple[int, str, str], tuple[float, float, float] | None],
    floors: dict[int, tuple[float, float, float]],
    size_bytes: dict[int, int],
    built: float,
    load0: tuple[float, float, float],
    load1: tuple[float, float, float],
) -> str:
    lines = [
        "# bench_scale: cross-session commands at scale",
        "",
        f"Load average {load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f} at the start, "
        f"{load1[0]:.1f} at the end; {len(os.sched_getaffinity(0))} cores shared with other "
        f"work; tree built in {built:.0f} s (0 when reused). Best of 2 warm runs by CPU "
        "(the baseline's prune: one run). "
        "Wall on this shared machine moves with the load: read the CPU columns.",
        "",
    ]
    for n in sizes:
        fw, fc, fr = floors[n]
        lines += [
            f"## {n:,} sessions",
            "",
            f"Floor (`scandir` + `lstat` of each entry, Python process): {fw:.2f} s wall, "
            f"{fc:.2f} s CPU, {fr:.0f} MB. Index and its -wal: "
            f"{size_bytes[n] / n:.0f} bytes per session.",
            "",
            "| command | "
            + " | ".join(
                f"{lab} wall s | {lab} CPU s | {lab} ÷ floor CPU | {lab} RSS MB" for lab in srcs
            )
            + " |",
            "|---|" + "---:|" * (4 * len(srcs)),
        ]
        for what in COMMANDS:
            cells = []
            for lab in srcs:
                r = results.get((n, lab, what))
                if r is None:
                    cells += ["not run"] * 4
                else:
                    cells += [f"{r[0]:.2f}", f"{r[1]:.2f}", f"{r[1] / fc:.1f}", f"{r[2]:.0f}"]
            lines.append(f"| `{what}` | " + " | ".join(cells) + " |")
        wal = " · ".join(
            f"{lab}: {int(results[(n, lab, 'index -wal left, bytes')][0]):,}"  # type: ignore[index]
            for lab in srcs
        )
        lines += ["", f"Index `-wal` left after the last command (bytes): {wal}", ""]
    lines += CHECKS
    lines += ["## Linear model (CPU seconds = a + b·N), extrapolated to 1,000,000", ""]
    lines += [
        "| command | source | a (s) | b (µs per session) | at 1M, CPU s |",
        "|---|---|---:|---:|---:|",
    ]
    a, b = fit(sizes, [floors[n][1] for n in sizes])
    lines.append(f"| floor | — | {a:.2f} | {b * 1e6:.1f} | {a + b * 1e6:.1f} |")
    for what in COMMANDS:
        for lab in srcs:
            pts = [(n, results.get((n, lab, what))) for n in sizes]
            got = [(n, r[1]) for n, r in pts if r is not None]
            if not got:
                continue
            a, b = fit([n for n, _ in got], [c for _, c in got])
            lines.append(f"| `{what}` | {lab} | {a:.2f} | {b * 1e6:.1f} | {a + b * 1e6:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
