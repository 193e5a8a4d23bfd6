"""Benchmark: `migrate --all` over 1,000 revision-1 sessions, and backup throughput against a
plain `cp` of the same files (the copy limit). Figures from one run, side by side.

Run: .venv/bin/python bench/bench_migrate.py [--sessions N] [--large N]
Writes the table to bench/results/bench_migrate.md.
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
import ulid

from agentdb import fsutil
from agentdb.jobs import backup, demo, migrate
from agentdb.store import Event, Producer, SessionWriter

RESULTS = Path(__file__).parent / "results" / "bench_migrate.md"
TOOL = Producer("tool", "shell", "2.0.0")


def template(root: Path, *, turns: int, big: int = 0) -> Path:
    """One closed revision-1 session: `turns` model turns (6 events each), `big` 100 KB events."""
    w = SessionWriter.create(root, profile="coder", revision=1)
    try:
        demo._turns(w, demo.MODEL_OLD, turns, seed=1)
        for i in range(big):
            w.emit(Event("tool_result", TOOL, bytes([65 + i % 26]) * (100 * 1024)))
        w.set_status("completed")
    finally:
        w.close()
    return w.path


def clone(tpl: Path, sessions_dir: Path, n: int) -> list[Path]:
    """n copies of the template under fresh ULIDs, each with its session_meta id patched."""
    out = []
    for _ in range(n):
        sid = str(ulid.ULID())
        dst = sessions_dir / f"{sid}.sqlite"
        shutil.copyfile(tpl, dst)
        os.chmod(dst, 0o600)
        conn = apsw.Connection(str(dst))
        conn.execute("UPDATE session_meta SET session_id = ?", (sid,))
        conn.close()
        out.append(dst)
    return out


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def cp_all(files: list[Path], dest: Path) -> None:
    dest.mkdir(mode=0o700)
    subprocess.run(["cp", *map(str, files), str(dest)], check=True)
    for p in files:  # the backup fsyncs every copy and the directory: give cp the same
        fsutil.fsync_file(dest / p.name)
    fsutil.fsync_dir(dest)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--large", type=int, default=20, help="sessions of ~5 MB for throughput")
    args = ap.parse_args()
    n = args.sessions
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="agentdb-bench-") as tmp:
        root = Path(tmp)
        tpl_dir = root / "tpl"
        fsutil.ensure_dir(tpl_dir)
        small = template(tpl_dir, turns=4)
        large = template(tpl_dir, turns=4, big=50)

        # migrate --all vs the kernel's own migrate-on-open (same files, same ladder)
        job_dir, open_dir = root / "job", root / "open"
        for d in (job_dir, open_dir):
            fsutil.ensure_dir(d)
        clone(small, job_dir, n)
        opened = clone(small, open_dir, n)
        t_job = timed(lambda: migrate.migrate_sessions(job_dir))
        report = migrate.migrate_sessions(job_dir)
        assert report.summary()["current"] == n, report.summary()

        def open_each() -> None:
            for p in opened:
                SessionWriter.open(open_dir, p.name[:26]).close()

        t_open = timed(open_each)
        rows.append(
            ("migrate --all, 1 file = 1 small rev-1 session", f"{n / t_job:,.0f} files/s", "")
        )
        rows.append(
            (
                "kernel migrate-on-open, same files",
                f"{n / t_open:,.0f} files/s",
                f"migrate --all at {t_open / t_job:.2f}x of it (backup + verify included)",
            )
        )

        # backup vs cp: the small migrated sessions, then a few large ones
        for label, src_dir, files in (
            (f"{n} small sessions", job_dir, sorted(job_dir.glob("*.sqlite"))),
            (f"{args.large} sessions of ~5 MB", root / "large", None),
        ):
            if files is None:
                fsutil.ensure_dir(src_dir)
                files = clone(large, src_dir, args.large)
                migrate.migrate_sessions(src_dir)  # back up current sessions, as above
            size = sum(p.stat().st_size for p in files)
            t_bk = timed(
                lambda src_dir=src_dir, label=label: backup.backup_sessions(
                    src_dir, None, root / f"bk-{label[:3]}"
                )
            )
            t_cp = timed(lambda files=files, label=label: cp_all(files, root / f"cp-{label[:3]}"))
            vr = backup.verify_dir(root / f"bk-{label[:3]}")
            assert vr.ok, [s for s in vr.sessions if s.verdict != "ok"][:2]
            mb = size / 1e6
            rows.append(
                (
                    f"backup --all, {label} ({mb:,.1f} MB)",
                    f"{mb / t_bk:,.1f} MB/s",
                    f"{(mb / t_bk) / (mb / t_cp):.2f}x of cp",
                )
            )
            rows.append(
                ("cp + fsync of the same files", f"{mb / t_cp:,.1f} MB/s", "the copy limit")
            )

    table = ["| measure | figure | ratio |", "|---|---|---|"]
    table += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    text = (
        f"# bench_migrate\n\nOne run, {time.strftime('%Y-%m-%d')}, "
        f"Python {sys.version.split()[0]}, SQLite {apsw.sqlite_lib_version()}.\n\n"
        + "\n".join(table)
        + "\n"
    )
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
