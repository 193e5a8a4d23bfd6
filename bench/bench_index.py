"""Benchmark: the derived session index against the scan it replaces.

At each N (default 1,000 and 10,000; ``--n 100000`` for the big row, run once), N small
healthy sessions (bench_check's template copied under N ULIDs) are timed, each row a real CLI
process (Python start-up included) unless it says otherwise:

* ``sessions list --json --no-index`` — the scan (files read by the default worker processes);
* a bare APSW loop in this process: open each file immutable, read the session_meta row, the
  event count and the total cost, close (what the scan does with none of agentdb's care);
* ``sessions list --json`` with no index: the first build (every file read, index written);
* ``sessions list --json`` warm: nothing changed (stat walk + index read + JSON);
* ``sessions list --json`` after 1 % of the files changed (their mtime moved);
* ``status --json`` warm, ``plugins refs --json`` warm, ``prune --status failed --dry-run``
  warm (selects nothing: the planning overhead over every session);
* index bytes per session, and each row's peak RSS (``wait4``).

Usage: .venv/bin/python bench/bench_index.py [--n N ...] [--repeat R] [--reuse DIR]
(``--reuse DIR``: the sessions are generated once in DIR/sessions and kept there for the next
run, e.g. ``--n 100000 --reuse /tmp/agentdb-bench-index-100k``; delete DIR when done.)
Writes bench/results/bench_index.md (rows of every N run, appended per N).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import apsw

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from bench_check import build  # noqa: E402


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, its workers included) and peak RSS (MiB) of
    one CLI process. The RSS is GNU time's (``%M``): a child forked from this process would
    count this process's own pages, which are many at 100,000 sessions."""
    t = time.perf_counter()
    argv = ["/usr/bin/time", "-f", f"{_RSS} %M", *argv]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t
    if p.returncode not in (0, 1):  # status: 1 = something needs doing (never checked)
        raise SystemExit(f"{argv!r} exited {p.returncode}: {err.decode()[-500:]}")
    rss = [int(line.split()[-1]) for line in err.decode().splitlines() if line.startswith(_RSS)]
    # wait4 reports the child with the processes it reaped (agentdb and its workers)
    return dt, usage.ru_utime + usage.ru_stime, rss[-1] / 1024


_RSS = "agentdb-bench-peak-rss-kib"


def bare(files: list[Path]) -> tuple[float, float]:
    t, cpu = time.perf_counter(), time.process_time()
    for f in files:
        c = apsw.Connection(
            f"file:{f}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        )
        c.execute(
            "SELECT *, (SELECT count(*) FROM events), (SELECT total(cost_usd) FROM cost_ledger) "
            "FROM session_meta"
        ).fetchall()
        c.close()
    return time.perf_counter() - t, time.process_time() - cpu


def bench(n: int, repeat: int, reuse: Path | None = None) -> list[str]:
    root = reuse or Path(tempfile.mkdtemp(prefix="agentdb-bench-index-"))
    try:
        sessions_dir = root / "sessions"
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        if not (sessions_dir.is_dir() and len(os.listdir(sessions_dir)) == n):
            shutil.rmtree(sessions_dir, ignore_errors=True)
            sessions_dir.mkdir(mode=0o700, parents=True)
            build(sessions_dir, n)
        built = time.perf_counter() - t0
        shutil.rmtree(root / "cache", ignore_errors=True)  # no index yet
        files = sorted(sessions_dir.glob("*.sqlite"))
        time.sleep(0.1)  # settled: older than the timestamp granularity
        cache = root / "cache"
        env = {
            **os.environ,
            "XDG_CACHE_HOME": str(cache),
            "PYTHONPATH": str(HERE.parent / "src"),
        }
        py = [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions_dir)]
        rows: list[tuple[str, float, float, float | None]] = []

        def best(name: str, argv: list[str], times: int = repeat) -> None:
            got = [run([*py, *argv], env) for _ in range(times)]
            rows.append(
                (name, min(g[0] for g in got), min(g[1] for g in got), max(g[2] for g in got))
            )

        best("start-up alone: `agentdb --version`", ["--version"])
        best(
            "scan: `sessions list --json --no-index`", ["sessions", "list", "--json", "--no-index"]
        )
        got = [bare(files) for _ in range(repeat)]
        rows.append(
            ("bare APSW loop (in process)", min(g[0] for g in got), min(g[1] for g in got), None)
        )
        best("first build: `sessions list --json`, no index yet", ["sessions", "list", "--json"], 1)
        index_file = cache / "agentdb" / "index.sqlite"
        size = index_file.stat().st_size + sum(
            p.stat().st_size for p in index_file.parent.glob("index.sqlite-wal")
        )
        best("warm: `sessions list --json`", ["sessions", "list", "--json"])
        best(
            "warm: `sessions list --status failed --json` (filtered)",
            ["sessions", "list", "--status", "failed", "--json"],
        )
        best("warm: `status --json`", ["status", "--json"])
        best("warm: `plugins refs --json`", ["plugins", "refs", "--json"])
        best(
            "warm: `prune --status failed --dry-run --json` (selects none)",
            ["prune", "--status", "failed", "--dry-run", "--json"],
        )
        changed = files[:: max(1, len(files) // max(1, n // 100))][: max(1, n // 100)]
        times = []
        for _ in range(repeat):
            now = time.time()
            for f in changed:
                os.utime(f, (now - 10, now - 10 + (len(times) + 1) * 1e-3))
            time.sleep(0.1)
            times.append(run([*py, "sessions", "list", "--json"], env))
        rows.append(
            (
                f"refresh after 1 % changed ({len(changed)} files): `sessions list --json`",
                min(t[0] for t in times),
                min(t[1] for t in times),
                max(t[2] for t in times),
            )
        )
        scan, scan_cpu = next((r[1], r[2]) for r in rows if r[0].startswith("scan"))
        out = [
            f"### {n:,} sessions ({files[0].stat().st_size // 1024} KiB each; built in "
            f"{built:.0f} s; load average {load0:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end; {len(os.sched_getaffinity(0))} cores)",
            "",
            "| what | wall s | ÷ scan | CPU s | ÷ scan | peak RSS MiB |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, s, cpu, rss in rows:
            out.append(
                f"| {name} | {s:.2f} | {s / scan:.2f} | {cpu:.2f} | {cpu / scan_cpu:.2f} | "
                f"{'' if rss is None else f'{rss:.0f}'} |"
            )
        out += ["", f"Index: {size / n:.0f} bytes per session ({size / 2**20:.1f} MiB).", ""]
        return out
    finally:
        if reuse is None:
            shutil.rmtree(root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, action="append", help="sessions (repeatable)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the best is shown")
    ap.add_argument("--reuse", type=Path, help="generate the sessions once here and keep them")
    args = ap.parse_args()
    lines = [
        "# bench_index: the session index against the scan",
        "",
        "Whole CLI processes (Python start-up included), best of "
        f"{args.repeat} (the first build runs once). Wall seconds, and CPU seconds (user + "
        "system, worker processes included): on a shared, overloaded 2-core machine the CPU "
        "column is the comparable one.",
        "",
    ]
    for n in args.n or [1000, 10_000]:
        part = bench(n, args.repeat if n < 50_000 else 1, args.reuse)
        print("\n".join(part), flush=True)
        lines += part
    (HERE / "results").mkdir(exist_ok=True)
    out = (
        HERE
        / "results"
        / f"bench_index{'' if args.n is None else '-' + '-'.join(map(str, args.n))}.md"
    )
    out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
