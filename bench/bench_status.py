"""``agentdb status`` and ``agentdb report --html`` over many sessions, beside ``sessions list``.

Builds N small sessions (bench_prune's template copied under N ULIDs), records verdicts with
``agentdb check --quick``, then times, each as a real CLI process:

* ``sessions list --json`` (the scan status shares),
* ``status --json`` with every verdict recorded, and again after 1 % of the files changed,
* ``report --html`` (status + one more pass for costs per day and model),

and checks the page stays bounded (its size at N against the size at the tree limit).

Usage: .venv/bin/python bench/bench_status.py [N]   (default 5000)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from bench_prune import build  # noqa: E402


def cli(*args: str, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    return time.perf_counter() - t, r


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with tempfile.TemporaryDirectory(prefix="agentdb-bench-status-") as tmp:
        root = Path(tmp)
        sessions, cache = (
            root / "state" / "agent" / "sessions",
            root / "cache" / "agent" / "plugins",
        )
        t0 = time.perf_counter()
        build(sessions, cache, n)
        built = time.perf_counter() - t0
        env = {
            **os.environ,
            "XDG_CACHE_HOME": str(root / "cache"),
            "XDG_STATE_HOME": str(root / "state"),
            "PYTHONPATH": os.pathsep.join(
                [str(HERE.parent / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        g = ["--sessions-dir", str(sessions), "--plugin-cache", str(cache)]
        time.sleep(0.2)  # past the timestamp granularity the verdict cache allows for
        t_check, r = cli(*g, "check", "--quick", "--json", env=env)
        rows = []
        t_list, _ = cli(*g, "sessions", "list", "--json", env=env)
        rows.append(("sessions list --json", t_list))
        t_status, r = cli(*g, "status", "--json", env=env)
        rows.append(("status --json, every verdict recorded", t_status))
        for name in sorted(os.listdir(sessions))[: max(1, n // 100)]:
            os.utime(sessions / name)  # a new mtime/ctime: "changed since last check"
        t_changed, r2 = cli(*g, "status", "--json", env=env)
        rows.append(("status --json, 1 % changed since", t_changed))
        page = root / "report.html"
        t_report, _ = cli(*g, "report", "--html", str(page), env=env)
        rows.append(("report --html", t_report))
        size = page.stat().st_size
    import json

    doc, doc2 = json.loads(r.stdout), json.loads(r2.stdout)
    lines = [
        f"{n:,} sessions (built in {built:.1f} s; `check --quick` to record verdicts: "
        f"{t_check:.1f} s). Wall-clock for the whole CLI process, one run each.",
        "",
        "| what | seconds | ms per session | × sessions list |",
        "|---|---:|---:|---:|",
    ]
    for what, secs in rows:
        lines.append(f"| {what} | {secs:.2f} | {1000 * secs / n:.3f} | {secs / t_list:.2f} |")
    lines += [
        "",
        f"status saw {doc['summary']['checked']:,} checked, then "
        f"{doc2['summary']['changed_since_check']:,} changed since; "
        f"report page: {size:,} bytes.",
    ]
    text = "\n".join(lines)
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "bench_status.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
