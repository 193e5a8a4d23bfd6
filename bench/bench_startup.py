"""Start-up of the ``agentdb`` command line: whole processes, one file, side by side.

Each command runs as the installed console script runs it (a script that imports
``agentdb.cli.main`` and calls ``main()``; bytecode compiled beforehand, as a package has it),
``--runs`` times, interleaved with the other source trees given with ``--tree LABEL=SRC`` (for
example a ``git archive`` of main's ``src``), so a before/after comparison shares the machine's
load. Commands: ``--version``, ``--help``, ``check ID`` on a healthy 1 MB session,
``recover ID --dry-run`` and ``recover ID`` on the same session damaged (a zeroed 512-byte sector
inside an ``events`` leaf; ``recover`` gets a fresh copy each run, copied outside the timing),
beside ``sqlite3 damaged.db .recover | sqlite3 new.db`` on a copy in a private temporary directory
(never in a sessions directory; the shell from ``tests/tools/build_sqlite_shell.py``).

Run: ``.venv/bin/python bench/bench_startup.py [--runs 20] [--tree before=/tmp/main/src]``;
prints best and median wall time per command and tree, with the load average before and after,
and writes bench/results/bench_startup.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_recover  # noqa: E402

SCRIPT = """import re
import sys
from agentdb.cli.main import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _env(src: Path, root: Path, label: str) -> dict[str, str]:
    env = dict(
        os.environ,
        PYTHONPATH=str(src),
        PYTHONPYCACHEPREFIX=str(root / f"pycache-{label}"),
        XDG_CACHE_HOME=str(root / f"cache-{label}"),
        XDG_STATE_HOME=str(root / f"state-{label}"),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("AGENTDB_TOOLS_DIR", str(ROOT / ".tools"))
    return env


def _timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _pipeline(shell: Path, path: Path, new_db: Path) -> float:
    new_db.unlink(missing_ok=True)
    t0 = time.perf_counter()
    p1 = subprocess.Popen([str(shell), str(path), ".recover"], stdout=subprocess.PIPE)
    p2 = subprocess.Popen([str(shell), str(new_db)], stdin=p1.stdout, stdout=subprocess.DEVNULL)
    if p1.stdout:
        p1.stdout.close()
    p1.wait()
    p2.wait()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20, help="runs of each command and tree")
    ap.add_argument("--mb", type=int, default=1, help="size of the session")
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=SRC",
        help="another source tree to time beside this one (repeatable)",
    )
    args = ap.parse_args()
    trees = [("this", ROOT / "src")]
    for t in args.tree:
        label, _, src = t.partition("=")
        trees.append((label, Path(src).resolve()))
    shell = bench_recover.shell.find_capable_shell() if bench_recover.shell else None

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as t:
        root = Path(t)
        script = root / "agentdb"
        script.write_text(SCRIPT)
        healthy, damaged = root / "healthy", root / "damaged-src"
        for d in (healthy, damaged):
            d.mkdir(mode=0o700)
        sid, path = bench_recover.build_session(healthy, args.mb)
        shutil.copyfile(path, damaged / path.name)
        bench_recover.damage(damaged / path.name, "leaf sector")
        envs = {label: _env(src, root, label) for label, src in trees}
        for label, _ in trees:  # bytecode for every module, as an installed package has it
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(dict(trees)[label])],
                env=envs[label],
                check=True,
                stdout=subprocess.DEVNULL,
            )

        def agentdb(label: str, sessions: Path, *rest: str) -> list[str]:
            return [sys.executable, str(script), "--sessions-dir", str(sessions), *rest]

        commands: list[tuple[str, list[str]]] = [
            ("--version", ["--version"]),
            ("--help", ["--help"]),
            (f"check ID ({args.mb} MB, healthy)", ["check", sid]),
            (f"recover ID --dry-run ({args.mb} MB, damaged)", ["recover", sid, "--dry-run"]),
            (f"recover ID ({args.mb} MB, damaged)", ["recover", sid]),
        ]
        times: dict[tuple[str, str], list[float]] = {}
        load_before = _load()
        for _ in range(args.runs + 1):  # the first round warms caches and is not counted
            for name, rest in commands:
                for label, _src in trees:
                    sessions = healthy
                    if rest[0] == "recover":
                        sessions = root / f"damaged-{label}"
                        shutil.rmtree(sessions, ignore_errors=True)
                        sessions.mkdir(mode=0o700)
                        shutil.copyfile(damaged / path.name, sessions / path.name)
                        os.chmod(sessions / path.name, 0o600)
                    argv = agentdb(label, sessions, *rest)
                    times.setdefault((name, label), []).append(_timed(argv, envs[label]))
            if shell is not None:
                private = root / "shell"
                shutil.rmtree(private, ignore_errors=True)
                private.mkdir(mode=0o700)
                copy = private / "damaged.db"
                shutil.copyfile(damaged / path.name, copy)
                name = f"`.recover \\| sqlite3 new.db` ({args.mb} MB, damaged)"
                times.setdefault((name, "sqlite3"), []).append(
                    _pipeline(shell, copy, private / "new.db")
                )
        load_after = _load()

    pipe = [v[1:] for (n, _), v in times.items() if n.startswith("`.recover")]
    pipe_med = statistics.median(pipe[0]) if pipe else None
    rows = []
    for (name, label), v in times.items():
        v = v[1:]
        best, med = min(v), statistics.median(v)
        ratio = ""
        if pipe_med and name.startswith("recover ID (") and pipe:
            ratio = f"{med / pipe_med:.1f}× (best {best / min(pipe[0]):.1f}×)"
        rows.append(f"| {name} | {label} | {best * 1000:.0f} | {med * 1000:.0f} | {ratio} |")
    text = (
        "| command | tree | best ms | median ms | median vs `.recover \\| sqlite3` |\n"
        "|---|---|---:|---:|---|\n" + "\n".join(rows) + "\n\n"
        f"{args.runs} runs each (after one warm-up), interleaved, "
        f"{time.strftime('%Y-%m-%d %H:%M')}; load average {load_before} before, "
        f"{load_after} after, {os.cpu_count()} cores; shell: {shell}.\n"
    )
    print(text)
    out = ROOT / "bench" / "results" / "bench_startup.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    main()
