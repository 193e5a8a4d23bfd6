"""Dry-run prune plan over many sessions: total time and cost per file.

Builds one small session (3 model turns, 18 events) and copies it under N new ULIDs (the 26
bytes of the id are replaced in place, so every copy is a valid session file), then measures,
side by side in one run:

* baseline: open each file read-only with bare APSW and read its session_meta row;
* plan, nothing selected (``--older-than 1000d``): scan, lock probe, read meta and producers;
* plan, everything selected (``--older-than 0s``): the same plus ``PRAGMA quick_check`` each;
* the real CLI, ``agentdb prune --older-than 0s --dry-run --json``, in a subprocess.

Usage: .venv/bin/python bench/bench_prune.py [N]   (default 10000)
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import apsw
import ulid

from agentdb import demo, fsutil, prune
from agentdb.store import SessionWriter

HERE = Path(__file__).parent


def build(sessions_dir: Path, plugin_cache: Path, n: int) -> None:
    fsutil.ensure_dir(sessions_dir)
    plugin_cache.mkdir(parents=True)
    (plugin_cache / "model" / "anthropic" / "1.4.0").mkdir(parents=True)
    now = dt.datetime.now(dt.timezone.utc)
    t0 = now - dt.timedelta(days=400)
    w = SessionWriter.create(
        sessions_dir, profile="coder", session_id=str(ulid.ULID.from_datetime(t0))
    )
    demo._turns(w, demo.MODEL_OLD, 3, seed=1)
    w.set_status("completed", at=(t0 + dt.timedelta(hours=1)).isoformat())
    w.close()
    template = w.path.read_bytes()
    old = w.session_id.encode()
    w.path.unlink()
    for i in range(n):
        sid = str(ulid.ULID.from_datetime(t0 + dt.timedelta(minutes=40 * i)))
        path = sessions_dir / f"{sid}.sqlite"
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.write(fd, template.replace(old, sid.encode()))
        os.close(fd)


def baseline(sessions_dir: Path) -> int:
    n = 0
    for name in sorted(os.listdir(sessions_dir)):
        c = apsw.Connection(
            f"file:{sessions_dir / name}?mode=ro&immutable=1",
            flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
        )
        c.execute("SELECT * FROM session_meta").fetchall()
        c.close()
        n += 1
    return n


def timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    with tempfile.TemporaryDirectory(prefix="bench-prune-") as tmp:
        sessions_dir = Path(tmp) / "sessions"
        plugin_cache = Path(tmp) / "plugins"
        t_build, _ = timed(lambda: build(sessions_dir, plugin_cache, n))
        size = sum(os.path.getsize(sessions_dir / f) for f in os.listdir(sessions_dir))
        t_base, count = timed(lambda: baseline(sessions_dir))
        assert count == n
        t_none, p_none = timed(
            lambda: prune.plan(
                sessions_dir, plugin_cache, prune.Selectors(older_than=dt.timedelta(days=1000))
            )
        )
        assert p_none.candidates == []
        t_all, p_all = timed(
            lambda: prune.plan(
                sessions_dir, plugin_cache, prune.Selectors(older_than=dt.timedelta(0))
            )
        )
        assert len(p_all.removals) == n, (len(p_all.removals), p_all.refusals[:1])
        cmd = [
            sys.executable,
            "-m",
            "agentdb.cli.main",
            "--sessions-dir",
            str(sessions_dir),
            "--plugin-cache",
            str(plugin_cache),
            "prune",
            "--older-than",
            "0s",
            "--dry-run",
            "--json",
        ]
        t_cli, r = timed(lambda: subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL))
        assert r.returncode == 0, r.stderr[-500:]
    rows = [
        ("baseline: bare APSW open + read session_meta", t_base),
        ("plan, nothing selected (probe + meta + producers)", t_none),
        ("plan, all selected (+ quick_check each)", t_all),
        ("CLI `prune --older-than 0s --dry-run --json` (process)", t_cli),
    ]
    lines = [
        f"# bench_prune: dry-run plan over {n:,} sessions",
        "",
        f"{n:,} session files of {size // n:,} bytes each (built in {t_build:.1f} s); "
        f"python {sys.version.split()[0]}, SQLite {apsw.sqlite_lib_version()}.",
        "",
        "| what | total (s) | per file (ms) | × baseline |",
        "|---|---:|---:|---:|",
    ]
    for what, t in rows:
        lines.append(f"| {what} | {t:.2f} | {1000 * t / n:.3f} | {t / t_base:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "bench_prune.md").write_text(text)


if __name__ == "__main__":
    main()
