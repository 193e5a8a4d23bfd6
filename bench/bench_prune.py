"""Dry-run prune plan over many sessions: total time and cost per file.

Builds one small session (3 model turns, 18 events) and copies it under N new ULIDs (the 26
bytes of the id are replaced in place, so every copy is a valid session file), then measures,
side by side in one run:

* baseline (issue 12's bare loop): open each file read-only with bare APSW, read its
  ``session_meta`` and ``producers`` rows and run ``PRAGMA quick_check``;
* plan, nothing selected (``--older-than 1000d``): scan, lock probe, read meta and producers;
* plan, everything selected (``--older-than 0s``): the same plus check's full judge of each
  selected file (``integrity_check``, references, content hashes: prune never removes what
  ``check`` calls damaged);
* the real CLI, ``agentdb prune --older-than 0s --dry-run --json -j1``, in a subprocess, with
  its peak RSS (``wait4``).

The plans run in this process, single-process (``jobs=1``), after one untimed plan that
writes the session index (so the plans answer from a warm index, as an operator's second run
does). Each row has its wall time and its CPU time (user + system; the child's for the CLI):
on a shared machine the CPU ratio is the one to read. The load average is noted.

Usage: .venv/bin/python bench/bench_prune.py [N] [--keep DIR]   (default 10000; ``--keep``
builds the tree there once and reuses it)
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import peak_rss

from agentdb import fsutil, prune
from agentdb.jobs import demo
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
        c.execute("SELECT * FROM producers").fetchall()
        assert c.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        c.close()
        n += 1
    return n


def process(argv: list[str]) -> tuple[tuple[float, float], int]:
    """((wall, CPU seconds), peak RSS in KB) of one process, which must exit 0; measured
    through tests.peak_rss (a child spawned from this process would report this process's own
    peak, the trees it built, as its RSS)."""
    t = time.perf_counter()
    m = peak_rss.Measured(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert m.proc.stderr is not None
    err = m.proc.stderr.read()
    usage = m.wait()
    assert usage.returncode == 0, err[-500:]
    return (time.perf_counter() - t, usage.cpu_s), usage.maxrss_kib


def timed(fn):  # type: ignore[no-untyped-def]
    """((wall, CPU seconds of this process), what ``fn`` returned)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return (time.perf_counter() - t, time.process_time() - c), out


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--keep")]
    keep = next((Path(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--keep=")), None)
    n = int(args[0]) if args else 10_000
    with tempfile.TemporaryDirectory(prefix="bench-prune-") as tmp:
        root = keep / f"prune-{n}" if keep else Path(tmp)
        sessions_dir = root / "sessions"
        plugin_cache = root / "plugins"
        t_build = (0.0, 0.0)
        if not (sessions_dir.is_dir() and len(os.listdir(sessions_dir)) == n):
            t_build, _ = timed(lambda: build(sessions_dir, plugin_cache, n))
        size = sum(os.path.getsize(sessions_dir / f) for f in os.listdir(sessions_dir))
        prune.plan(sessions_dir, plugin_cache, prune.Selectors(older_than=dt.timedelta(0)))
        load0 = os.getloadavg()
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
        del p_none, p_all
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
            "-j1",
        ]
        t_cli, rss = process(cmd)
        load1 = os.getloadavg()
    rows = [
        ("baseline: bare APSW open + session_meta + producers + quick_check", t_base),
        ("plan, nothing selected (probe + meta + producers)", t_none),
        ("plan, all selected (+ check's full judge of each)", t_all),
        ("CLI `prune --older-than 0s --dry-run --json -j1` (process)", t_cli),
    ]
    lines = [
        f"# bench_prune: dry-run plan over {n:,} sessions",
        "",
        f"{n:,} session files of {size // n:,} bytes each (built in {t_build[0]:.1f} s); "
        f"python {sys.version.split()[0]}, SQLite {apsw.sqlite_lib_version()}; load average "
        f"{load0[0]:.1f} at the start, {load1[0]:.1f} at the end ({len(os.sched_getaffinity(0))} "
        f"cores). The CLI's peak RSS: {rss / 1024:.0f} MB.",
        "",
        "| what | wall (s) | CPU (s) | CPU per file (ms) | × baseline, CPU | × baseline, wall |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for what, (wall, cpu) in rows:
        lines.append(
            f"| {what} | {wall:.2f} | {cpu:.2f} | {1000 * cpu / n:.3f} | {cpu / t_base[1]:.2f} "
            f"| {wall / t_base[0]:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "bench_prune.md").write_text(text)


if __name__ == "__main__":
    main()
