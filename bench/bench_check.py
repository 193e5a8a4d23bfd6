"""Benchmark: ``agentdb check --all --quick`` and ``sessions list`` over many small sessions.

Compared side by side in one run with (a) a shell loop calling ``sqlite3 FILE 'PRAGMA
quick_check'`` per file and (b) a bare in-process APSW loop that only opens each file, runs the
pragma and closes it. Run: ``.venv/bin/python bench/bench_check.py [--n N] [--repeat R]``
(default 10,000 sessions, best of 3; ``AGENTDB_BENCH_N`` also sets N). Writes
``bench/results/bench_check.md``.

Build: one real session, copied under N new ULID names with the session id patched in place
(it is stored twice: the session_meta row and its primary-key index, both as the same 26
bytes), so every copy is a healthy, consistent session. ``--writer agentdb`` writes that session
with agentdb's writer; ``--writer other`` writes it as another conforming writer would (the
revision-1 schema in its own formatting, application_id 0, plain INSERTs) and lets agentdb's
kernel open migrate it, so it keeps the other writer's text for the tables the migration does
not rebuild — the files an operator who switched to agentdb actually has.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import ulid

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "src"))

from agentdb import demo  # noqa: E402
from agentdb.schema.revisions import REV1_DDL  # noqa: E402
from agentdb.store import SessionWriter  # noqa: E402


def _other_writer_session(sessions_dir: Path) -> tuple[Path, str]:
    """A revision-1 session as another writer makes it, then migrated by agentdb's open."""
    sid = str(ulid.ULID())
    path = sessions_dir / f"{sid}.sqlite"
    # The same tables, in another writer's formatting: its own comments, one line per table.
    bare = " ".join(line.split("--")[0].strip() for line in REV1_DDL.splitlines())
    ddl = "\n".join(stmt.strip() + ";  -- other" for stmt in bare.split(";") if stmt.strip())
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(ddl)
    conn.execute("PRAGMA user_version=1")
    with conn:
        conn.execute(
            "INSERT INTO session_meta VALUES (?, NULL, 'bench', 'completed', 0, "
            "'2026-01-01T00:00:00Z', '2026-01-01T00:10:00Z')",
            (sid,),
        )
        for i in range(1, 7):
            conn.execute(
                "INSERT INTO events VALUES (?, ?, '2026-01-01T00:00:00Z', 'message', 'model', "
                "'anthropic', '1.4.0', '1', ?)",
                (i, f"ev-{i}", b'{"role":"assistant"}' * 20),
            )
            conn.execute(
                "INSERT INTO cost_ledger (event_sequence, provider_name, model_id, "
                "input_tokens, output_tokens, cost_usd) VALUES (?, 'anthropic', 'm', 10, 5, 0.01)",
                (i,),
            )
        conn.execute("INSERT INTO producers VALUES ('model', 'anthropic', '1.4.0', 1)")
    conn.close()
    os.chmod(path, 0o600)
    SessionWriter.open(sessions_dir, sid).close()  # the kernel's migrate-on-open
    return path, sid


def build(sessions_dir: Path, n: int, writer: str = "agentdb") -> None:
    if writer == "other":
        path, sid = _other_writer_session(sessions_dir)
    else:
        w = SessionWriter.create(sessions_dir, profile="bench")
        demo._turns(w, demo.MODEL_CACHED, 1, seed=1)
        w.set_status("completed")
        w.close()
        path, sid = w.path, w.session_id
    for side in ("-wal", "-shm"):
        if Path(f"{path}{side}").exists():
            c = apsw.Connection(str(path))
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            c.execute("PRAGMA journal_mode=DELETE")
            c.execute("PRAGMA journal_mode=WAL")
            c.close()
            for s in ("-wal", "-shm"):
                Path(f"{path}{s}").unlink(missing_ok=True)
            break
    template = path.read_bytes()
    old = sid.encode()
    assert template.count(old) >= 2, template.count(old)  # + stale copies in freed pages
    path.unlink()
    base = int(time.time() * 1000) - n * 1000
    for i in range(n):
        sid = str(ulid.ULID.from_timestamp((base + i * 1000) / 1000))
        p = sessions_dir / f"{sid}.sqlite"
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(template.replace(old, sid.encode()))


def timed(argv: list[str] | str, *, shell: bool = False) -> float:
    t = time.perf_counter()
    r = subprocess.run(
        argv,
        shell=shell,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(HERE.parent / "src")},
    )
    dt = time.perf_counter() - t
    if r.returncode not in (0,):
        raise SystemExit(f"{argv!r} exited {r.returncode}: {r.stderr.decode()[-500:]}")
    return dt


def bare_apsw(files: list[Path]) -> float:
    t = time.perf_counter()
    for f in files:
        c = apsw.Connection(
            f"file:{f}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        )
        assert c.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        assert len(c.execute("SELECT * FROM session_meta").fetchall()) == 1
        c.close()
    return time.perf_counter() - t


def best_of(repeat: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(repeat))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n_pos", nargs="?", type=int, help=argparse.SUPPRESS)
    ap.add_argument(
        "--n", type=int, default=int(os.environ.get("AGENTDB_BENCH_N", 10_000)), help="sessions"
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per row but (a); the best one is shown"
    )
    ap.add_argument(
        "--writer",
        choices=["agentdb", "other"],
        default="agentdb",
        help="who wrote the sessions: agentdb's writer, or another writer (migrated by agentdb)",
    )
    args = ap.parse_args()
    n = args.n_pos or args.n
    rep = max(1, args.repeat)
    root = Path(tempfile.mkdtemp(prefix="agentdb-bench-"))
    try:
        sessions_dir = root / "sessions"
        sessions_dir.mkdir(mode=0o700)
        t0 = time.perf_counter()
        build(sessions_dir, n, args.writer)
        build_s = time.perf_counter() - t0
        files = sorted(sessions_dir.glob("*.sqlite"))
        py = [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(sessions_dir)]
        cores = len(os.sched_getaffinity(0))
        agentdb_rows = [
            ("agentdb check --all --quick --jobs 1", ["check", "--quick", "-j1"]),
            ("agentdb check --all --quick --jobs 2", ["check", "--quick", "-j2"]),
            ("agentdb check --all --jobs 1 (full: integrity_check + hashes)", ["check", "-j1"]),
            ("agentdb check --all --jobs 2 (full)", ["check", "-j2"]),
            ("agentdb sessions list --json --jobs 1", ["sessions", "list", "--json", "-j1"]),
            ("agentdb sessions list --json --jobs 2", ["sessions", "list", "--json", "-j2"]),
        ]
        rows: list[tuple[str, float]] = []
        for name, argv in agentdb_rows:
            cmd = [*py, *argv]
            rows.append((name, best_of(rep, functools.partial(timed, cmd))))
        b_name = "(b) bare APSW loop: open, PRAGMA quick_check, read session_meta, close"
        rows.append((b_name, best_of(rep, lambda: bare_apsw(files))))
        sqlite3 = shutil.which("sqlite3") or "/usr/bin/sqlite3"
        loop = f'for f in {sessions_dir}/*.sqlite; do {sqlite3} "$f" "PRAGMA quick_check"; done'
        a_name = "(a) shell loop: sqlite3 FILE 'PRAGMA quick_check'"
        rows.append((a_name, timed(loop, shell=True)))
        left = sorted(p.name for p in sessions_dir.iterdir() if not p.name.endswith(".sqlite"))
        a, b = dict(rows)[a_name], dict(rows)[b_name]
        lines = [
            f"# bench_check: {n} small sessions ({files[0].stat().st_size // 1024} KiB each, "
            f"written by {args.writer if args.writer == 'agentdb' else 'another writer, migrated'}"
            f"), {cores} cores, load average {os.getloadavg()[0]:.1f} at the start",
            "",
            f"Built in {build_s:.1f} s. Times are wall-clock for the whole command, Python "
            f"start-up included for the agentdb rows; best of {rep} runs for every row but (a), "
            "which runs once (the machine is shared, so single runs vary).",
            "",
            "| what | seconds | ms per file | (a) ÷ this | this ÷ (b) |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, s in rows:
            lines.append(f"| {name} | {s:.2f} | {1000 * s / n:.3f} | {a / s:.1f}× | {s / b:.2f}× |")
        lines += ["", f"Entries other than session files left in the directory: {left or 'none'}"]
        text = "\n".join(lines) + "\n"
        print(text)
        (HERE / "results").mkdir(exist_ok=True)
        suffix = "" if args.writer == "agentdb" else f"_{args.writer}"
        (HERE / "results" / f"bench_check{suffix}.md").write_text(text)
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
