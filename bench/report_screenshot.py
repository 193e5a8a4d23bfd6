"""Look at the report as a person would: render it in headless Chromium to a PNG.

Builds the demo state in a temporary folder (``agentdb demo DIR``) — or, with ``--sessions N``,
N generated sessions over half a year with gaps, several models, damaged files (some
recovered, leaving ``.corrupt`` copies; some left unreadable) and a prune logged — records
verdicts (``agentdb check``), writes ``agentdb report --html``, then has Debian's ``chromium``
take a screenshot at each ``--width`` with its console logged to stderr. Any console message
(a script error, a Content-Security-Policy violation — the page has no script and must fetch
nothing) fails the run. Writes the pictures to docs/ (``--out``; with several widths, the
width is added to the name) and a table to bench/results/.

Usage: .venv/bin/python bench/report_screenshot.py [--out docs/report.png] [--width 600 ...]
       .venv/bin/python bench/report_screenshot.py --sessions 1500 --out docs/report-1500.png
Needs: ``chromium`` on PATH (Debian: ``apt-get install chromium``); ``pngquant``, when on PATH,
makes the pictures smaller.
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

HERE = Path(__file__).parent
PNGQUANT = ["pngquant", "--force", "--skip-if-larger", "--quality", "70-95"]
ROOT = HERE.parent


def agentdb(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def generate(root: Path, n: int, env: dict[str, str]) -> None:
    """``n`` sessions under ``root`` laid out as the demo's (state/agent/sessions, cache/...):
    spread over 180 days with a three-week gap, three models, 1 in 100 running, 1 in 150
    damaged (two thirds of those recovered, so kept copies and recoveries are logged), 1 in 500
    unreadable, and the oldest pruned (its lines in the recovery log)."""
    import datetime as dt
    import random

    sys.path.insert(0, str(ROOT / "src"))
    from agentdb.jobs import demo
    from agentdb.store import Producer, SessionWriter

    sessions = root / "state" / "agent" / "sessions"
    cache = root / "cache" / "agent" / "plugins"
    for cat, name, ver in demo.CACHED_PLUGINS:
        (cache / cat / name / ver).mkdir(parents=True, exist_ok=True)
    rng = random.Random(30)
    now = dt.datetime.now(dt.timezone.utc)
    models = [
        demo.MODEL_CACHED,
        Producer("model", "openai", "2.0.1"),
        Producer("model", "local-llama", "0.3.0"),
    ]
    damaged = []
    parents: list[str] = []
    for i in range(n):
        days_ago = rng.uniform(0, 180)
        while 40 < days_ago < 61:  # a three-week gap with no sessions: the chart must show it
            days_ago = rng.uniform(0, 180)
        t = now - dt.timedelta(days=days_ago, seconds=i)
        parent = rng.choice(parents) if parents and rng.random() < 0.2 else None
        w = SessionWriter.create(
            sessions,
            profile=rng.choice(["coder", "researcher", "tester"]),
            parent_session_id=parent,
            depth=1 if parent else 0,
            session_id=demo._sid(t),
            started_at=demo._iso(t),
        )
        turns = rng.randint(1, 4) if i % 150 else 40  # damage needs a file of several pages
        demo._turns(w, rng.choice(models), turns, seed=i, at=t)
        if i % 100 == 7:
            w.close()  # left running
        else:
            w.set_status(
                rng.choice(["completed"] * 8 + ["cancelled", "failed", "error_max_turns"]),
                at=demo._iso(t + dt.timedelta(minutes=5)),
            )
            w.close()
        if parent is None and len(parents) < 200:
            parents.append(w.session_id)
        if i % 150 == 0:
            damaged.append(w.path)
        elif i % 500 == 250:  # a header overwritten: unreadable, its status and cost unknown
            with open(w.path, "r+b") as f:
                f.write(b"not a database any more" * 4)
    for k, path in enumerate(damaged):
        demo.damage_page(path, table="events", nth_leaf=1)
        if k % 3:
            agentdb("--sessions-dir", str(sessions), "recover", path.stem, env=env)
    agentdb("--sessions-dir", str(sessions), "prune", "--older-than", "178d", "--yes", env=env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    ap.add_argument("--width", type=int, action="append", help="repeatable (default 1280)")
    ap.add_argument("--height", type=int, default=2000)
    ap.add_argument("--sessions", type=int, default=0, help="generated sessions, not the demo")
    args = ap.parse_args()
    widths = args.width or [1280]
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("report_screenshot: no chromium on PATH (Debian: apt-get install chromium)")
        return 2
    with tempfile.TemporaryDirectory(prefix="agentdb-report-") as tmp:
        root = Path(tmp)
        env = {
            **os.environ,
            "XDG_STATE_HOME": str(root / "demo" / "state"),
            "XDG_CACHE_HOME": str(root / "demo" / "cache"),
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        if args.sessions:
            generate(root / "demo", args.sessions, env)
        else:
            demo = agentdb("demo", str(root / "demo"), env=env)
            if demo.returncode not in (0, 1):
                print(demo.stderr)
                return 1
        time.sleep(0.2)  # past the timestamp granularity the verdict cache allows for
        agentdb("check", env=env)
        page = root / "report.html"
        rep = agentdb("report", "--html", str(page), env=env)
        if not page.exists():
            print(rep.stderr)
            return 1
        rows, console = [], []
        for width in widths:
            shot = root / f"report-{width}.png"
            t0 = time.monotonic()
            run = subprocess.run(
                [
                    browser,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    "--enable-logging=stderr",
                    "--v=0",
                    f"--window-size={width},{args.height}",
                    f"--screenshot={shot}",
                    page.as_uri(),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            seconds = time.monotonic() - t0
            console += [ln for ln in run.stderr.splitlines() if ":CONSOLE" in ln]
            if run.returncode != 0 or not shot.exists():
                print(run.stderr[-2000:])
                return 1
            out = args.out
            if len(widths) > 1:
                out = out.with_name(f"{out.stem}-{width}{out.suffix}")
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, out)
            if shutil.which("pngquant"):  # a palette PNG, a third of the size, text still sharp
                subprocess.run(
                    [*PNGQUANT, "--output", str(out), str(out)],
                    check=False,
                )
            shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
            rows.append(f"| {width} px | {seconds:.1f} s | {shown} |\n")
        size = page.stat().st_size
    version = subprocess.run([browser, "--version"], capture_output=True, text=True).stdout.strip()
    what = f"{args.sessions:,} generated sessions" if args.sessions else "the demo"
    table = (
        "| what | figure |\n|---|---|\n"
        f"| state | {what} |\n"
        f"| browser | {version} |\n"
        f"| report size | {size:,} bytes |\n"
        f"| console messages | {len(console)} |\n"
        "\n| width | render + screenshot | picture |\n|---|---|---|\n" + "".join(rows)
    )
    print(table)
    for line in console:
        print("console:", line)
    (HERE / "results").mkdir(exist_ok=True)
    name = f"report_screenshot_{args.sessions}" if args.sessions else "report_screenshot"
    (HERE / "results" / f"{name}.md").write_text(table)
    return 1 if console else 0


if __name__ == "__main__":
    sys.exit(main())
