"""Look at the demo's report as a person would: render it in headless Chromium to a PNG.

Builds the demo state in a temporary folder (``agentdb demo DIR``), records verdicts
(``agentdb check``), writes ``agentdb report --html``, then has Debian's ``chromium`` take a
full-page screenshot with its console logged to stderr. Any console message (a script error, a
Content-Security-Policy violation — the page has no script and must fetch nothing) fails the
run. Writes the picture to docs/report.png (or --out) and a line to bench/results/.

Usage: .venv/bin/python bench/report_screenshot.py [--out docs/report.png]
Needs: ``chromium`` on PATH (Debian: ``apt-get install chromium``).
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
ROOT = HERE.parent


def agentdb(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=2000)
    args = ap.parse_args()
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
        shot = root / "report.png"
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
                f"--window-size={args.width},{args.height}",
                f"--screenshot={shot}",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        seconds = time.monotonic() - t0
        console = [ln for ln in run.stderr.splitlines() if ":CONSOLE" in ln]
        if run.returncode != 0 or not shot.exists():
            print(run.stderr[-2000:])
            return 1
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, args.out)
        size = page.stat().st_size
    version = subprocess.run([browser, "--version"], capture_output=True, text=True).stdout.strip()
    shown = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    table = (
        "| what | figure |\n|---|---|\n"
        f"| browser | {version} |\n"
        f"| report size | {size:,} bytes |\n"
        f"| render + screenshot | {seconds:.1f} s |\n"
        f"| console messages | {len(console)} |\n"
        f"| picture | {shown} |\n"
    )
    print(table)
    for line in console:
        print("console:", line)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "report_screenshot.md").write_text(table)
    return 1 if console else 0


if __name__ == "__main__":
    sys.exit(main())
