"""Scaling of the commands that gained worker processes: ``--jobs 1`` vs ``--jobs 2`` vs the
default (the usable cores), side by side in one run, each a real ``agentdb`` process.

Builds one small session (3 model turns, 18 events) at revision 2 and one at revision 1, and
copies each under N new ULIDs (the 26 bytes of the id are replaced in place, so every copy is
a valid session file). Then times, per command and per ``--jobs``:

* ``prune --older-than 0s --dry-run --json`` (every session selected: read, then judged);
* ``plugins refs --json``;
* ``migrate --all --json`` on a fresh copy of the revision-1 tree (every file migrated);
* ``backup --all --to DIR --json`` into a fresh DIR.

The load average (1 min) is taken before and after each run: the machine may be shared, and
the ratios mean little when it was busy. Every run must give the same report as ``--jobs 1``
(wall times aside); the script checks that too.

Usage: .venv/bin/python bench/bench_workers.py [N]   (default 2000)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import apsw
import ulid

from agentdb import cores, fsutil
from agentdb.jobs import demo
from agentdb.store import SessionWriter

HERE = Path(__file__).parent


def build(sessions_dir: Path, n: int, revision: int) -> None:
    fsutil.ensure_dir(sessions_dir)
    t0 = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=400)
    w = SessionWriter.create(
        sessions_dir,
        profile="coder",
        session_id=str(ulid.ULID.from_datetime(t0)),
        revision=revision,
    )
    demo._turns(w, demo.MODEL_OLD, 3, seed=1)
    w.set_status("completed", at=(t0 + dt.timedelta(hours=1)).isoformat())
    w.close()
    template = w.path.read_bytes()
    old = w.session_id.encode()
    w.path.unlink()
    for i in range(n):
        sid = str(ulid.ULID.from_datetime(t0 + dt.timedelta(minutes=40 * i)))
        fd = os.open(sessions_dir / f"{sid}.sqlite", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.write(fd, template.replace(old, sid.encode()))
        os.close(fd)


def _drop_times(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _drop_times(x) for k, x in v.items() if k != "seconds"}
    if isinstance(v, list):
        return [_drop_times(x) for x in v]
    return v


def run(argv: list[str], root: Path) -> tuple[float, float, float, Any]:
    """(seconds, load before, load after, the report with wall times and ``root`` dropped)."""
    before = os.getloadavg()[0]
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", *argv],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    took = time.perf_counter() - t
    assert r.returncode == 0, r.stderr[-800:]
    doc = _drop_times(json.loads(r.stdout.replace(str(root), "<root>")))
    return took, before, os.getloadavg()[0], doc


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    default = cores.usable_cores()
    jobs = [("1", "-j 1"), ("2", "-j 2"), (str(default), f"default ({default})")]
    rows: list[tuple[str, str, float, float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        base = Path(tmp)
        cache = base / "plugins"
        (cache / "model" / "anthropic" / "1.4.0").mkdir(parents=True)
        t_build = time.perf_counter()
        build(base / "rev2", n, 2)
        build(base / "rev1", n, 1)
        t_build = time.perf_counter() - t_build
        size = sum(os.path.getsize(p) for p in (base / "rev2").iterdir()) // n
        common = ["--plugin-cache", str(cache)]

        def side_by_side(what: str, make: Any) -> None:
            first: Any = None
            t1 = 0.0
            for j, label in jobs:
                root = base / f"run-{j}-{len(rows)}"
                root.mkdir()
                argv = make(root)
                took, la0, la1, doc = run([*common, *argv, "--jobs", j], root)
                if first is None:
                    first, t1 = doc, took
                assert doc == first, f"{what}: --jobs {j} gave another report"
                rows.append((what, label, took, t1 / took, la0, la1))
                shutil.rmtree(root)

        rev2 = ["--sessions-dir", str(base / "rev2")]
        side_by_side(
            "prune --older-than 0s --dry-run",
            lambda root: [*rev2, "prune", "--older-than", "0s", "--dry-run", "--json"],
        )
        side_by_side("plugins refs", lambda root: [*rev2, "plugins", "refs", "--json"])

        def migrate(root: Path) -> list[str]:
            shutil.copytree(base / "rev1", root / "s")
            return ["--sessions-dir", str(root / "s"), "migrate", "--all", "--json"]

        side_by_side("migrate --all (every file at revision 1)", migrate)
        side_by_side(
            "backup --all --to DIR (fresh DIR)",
            lambda root: [*rev2, "backup", "--all", "--to", str(root / "b"), "--json"],
        )
    lines = [
        f"# bench_workers: --jobs scaling over {n:,} sessions",
        "",
        f"{n:,} session files of {size:,} bytes each (built in {t_build:.1f} s); "
        f"{len(os.sched_getaffinity(0))} CPUs in the affinity mask, usable cores "
        f"(cgroup quota applied) {default}; python {sys.version.split()[0]}, "
        f"SQLite {apsw.sqlite_lib_version()}. Each row is one run of a real process; "
        "every run gave the same report as --jobs 1.",
        "",
        "| command | --jobs | seconds | speed-up vs -j 1 | load avg before | after |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for what, label, took, ratio, la0, la1 in rows:
        lines.append(f"| {what} | {label} | {took:.2f} | {ratio:.2f}× | {la0:.1f} | {la1:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "bench_workers.md").write_text(text)


if __name__ == "__main__":
    main()
