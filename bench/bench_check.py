"""Benchmark: ``check``, ``sessions list`` and ``prune --dry-run`` against bare APSW loops.

Side by side in one run, on files from agentdb's writer and from another conforming writer
(migrated by agentdb's kernel open, and not migrated), each command runs as a process (Python
start-up included) beside a bare loop that runs as a process too:

* quick: ``check --all --quick`` vs open read-only, ``PRAGMA quick_check``, read ``session_meta``;
* full: ``check --all`` vs ``PRAGMA integrity_check`` plus one ``SELECT`` per table, the
  ``events`` one applying the same registered content-hash function (``hashing.hash_sql``);
* list: ``sessions list --json`` vs reading ``session_meta``, the event count and the cost sum;
* prune: ``prune --older-than 0s --dry-run --json`` (every session selected) vs reading
  ``session_meta`` and ``producers`` and running ``quick_check`` on each;
* ``--jobs 2`` against ``--jobs 1``; peak RSS (``wait4``, the main process, ``--jobs 1``) at
  every size; ``agentdb check ID`` on one file (best of 15) against ``agentdb --version`` and the
  ``sqlite3`` shell.

Run: ``.venv/bin/python bench/bench_check.py [--sizes 1000,10000] [--rss-n 100000]``; writes
``bench/results/bench_check.md``. ``--in-process N`` prints instead the CPU per file measured
inside one process over N warm files (bare loop, ``check_path`` on every file, the stream's
own per-file check), alternating, best of 3 passes: finer than whole runs on a busy machine.
``--floor N`` prints what a quick check of a healthy file at rest costs before agentdb's own
Python runs (the shared reader's SQL alone, its system calls alone) beside the bare loop and the
whole check. ``--keep DIR`` keeps (and reuses) the generated trees there;
``--only quick,prune`` runs only the rows naming one of those words (and their bare loops).
Each row has its wall time and its CPU time (user + system, workers included).

Build: one real session, copied under N new ULID names with the session id patched in place
(it is stored twice: the session_meta row and its primary-key index, both as the same 26
bytes), so every copy is a healthy, consistent session. ``other`` writes that session as
another conforming writer would (the revision-1 schema in its own formatting, application_id 0,
plain INSERTs) and lets agentdb's kernel open migrate it, so it keeps the other writer's text
for the tables the migration does not rebuild — the files an operator who switched to agentdb
actually has; ``other-rev1`` leaves it at revision 1 (``check`` says ``needs_migration``).
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
from pathlib import Path

import apsw
import ulid

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "src"))

from tests import peak_rss  # noqa: E402

from agentdb.jobs import demo  # noqa: E402
from agentdb.schema.revisions import REV1_DDL  # noqa: E402
from agentdb.store import SessionWriter  # noqa: E402


def _other_writer_session(sessions_dir: Path, migrate: bool = True) -> tuple[Path, str]:
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
    if migrate:
        SessionWriter.open(sessions_dir, sid).close()  # the kernel's migrate-on-open
    return path, sid


def build(sessions_dir: Path, n: int, writer: str = "agentdb") -> None:
    if writer.startswith("other"):
        path, sid = _other_writer_session(sessions_dir, migrate=writer == "other")
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


WRITERS = {
    "agentdb": "agentdb's writer",
    "other": "another writer, migrated by agentdb",
    "other-rev1": "another writer, revision 1 (not migrated)",
}


# ------------------------------------------------------------------------------ bare loops
# Each runs in its own process (``--bare KIND DIR``), like the agentdb commands it is set beside.


def _bare_open(f: str) -> apsw.Connection:
    return apsw.Connection(
        f"file:{f}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )


def bare(kind: str, sessions_dir: Path) -> None:
    from agentdb import hashing

    files = sorted(str(p) for p in sessions_dir.glob("*.sqlite"))
    for f in files:
        c = _bare_open(f)
        if kind == "quick":
            assert c.execute("PRAGMA quick_check").fetchall() == [("ok",)]
            assert len(c.execute("SELECT * FROM session_meta").fetchall()) == 1
        elif kind == "full":
            c.create_scalar_function(
                hashing.RAW_SQL_FUNCTION, hashing.event_hash_raw, -1, deterministic=True
            )
            assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            hashed = c.execute(
                "SELECT 1 FROM pragma_table_info('events') WHERE name = ?", ("content_hash",)
            ).fetchall()
            for table in ("session_meta", "cost_ledger", "plan_items", "producers"):
                c.execute(f"SELECT * FROM {table}").fetchall()
            if hashed:
                bad = c.execute(
                    f"SELECT count(*) FROM events WHERE content_hash IS NOT {hashing.hash_sql()}"
                ).fetchall()
                assert bad == [(0,)], bad
            else:
                c.execute("SELECT * FROM events").fetchall()
        elif kind == "list":
            c.execute("SELECT * FROM session_meta").fetchall()
            c.execute("SELECT count(*) FROM events").fetchall()
            c.execute("SELECT sum(cost_usd) FROM cost_ledger").fetchall()
        elif kind == "prune":
            c.execute("SELECT * FROM session_meta").fetchall()
            c.execute("SELECT * FROM producers").fetchall()
            assert c.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        c.close()


# ------------------------------------------------------------------------------ measuring


def run(argv: list[str]) -> tuple[float, int, float]:
    """(wall seconds, peak RSS of that process in KB, its CPU seconds: user + system, workers
    included) of one process; exit 0 or 1 only."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed agentdb runs from bytecode
    t = time.perf_counter()
    # through tests.peak_rss: a child spawned from this process would report this process's
    # own peak (the trees it built) as its RSS
    m = peak_rss.Measured(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert m.proc.stderr is not None
    err = m.proc.stderr.read()
    usage = m.wait()
    dt = time.perf_counter() - t
    if usage.returncode not in (0, 1):
        raise SystemExit(f"{argv!r} exited {usage.returncode}: {err.decode()[-500:]}")
    return dt, usage.maxrss_kib, usage.cpu_s


def best(repeat: int, argv: list[str]) -> tuple[float, int, float]:
    runs = [run(argv) for _ in range(repeat)]
    return min(r[0] for r in runs), max(r[1] for r in runs), min(r[2] for r in runs)


def tree(root: Path, writer: str, n: int) -> Path:
    """The sessions directory of ``n`` files from ``writer`` under ``root`` (reused if built)."""
    d = root / f"{writer}-{n}"
    if d.is_dir() and len(os.listdir(d)) == n:
        return d
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(mode=0o700, parents=True)
    build(d, n, writer)
    return d


def commands(d: Path, cache: Path) -> dict[str, list[str]]:
    py = [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(d)]
    me = [sys.executable, str(Path(__file__).resolve()), "--bare"]
    prune = ["--plugin-cache", str(cache), "prune", "--older-than", "0s", "--dry-run", "--json"]
    return {
        "check --all --quick -j1": [*py, "check", "--quick", "-j1"],
        "check --all --quick -j2": [*py, "check", "--quick", "-j2"],
        "bare: quick_check + session_meta": [*me, "quick", str(d)],
        "check --all -j1 (full)": [*py, "check", "-j1"],
        "check --all -j2 (full)": [*py, "check", "-j2"],
        "bare: integrity_check + SELECT per table + hashes": [*me, "full", str(d)],
        "sessions list --json -j1": [*py, "sessions", "list", "--json", "-j1"],
        "sessions list --json -j2": [*py, "sessions", "list", "--json", "-j2"],
        "bare: session_meta + event count + cost": [*me, "list", str(d)],
        "prune --older-than 0s --dry-run --json": [*py[:3], *py[3:], *prune],
        "bare: session_meta + producers + quick_check": [*me, "prune", str(d)],
    }


PAIRS = {  # agentdb row -> the bare row it is measured against
    "check --all --quick -j1": "bare: quick_check + session_meta",
    "check --all --quick -j2": "bare: quick_check + session_meta",
    "check --all -j1 (full)": "bare: integrity_check + SELECT per table + hashes",
    "check --all -j2 (full)": "bare: integrity_check + SELECT per table + hashes",
    "sessions list --json -j1": "bare: session_meta + event count + cost",
    "sessions list --json -j2": "bare: session_meta + event count + cost",
    "prune --older-than 0s --dry-run --json": "bare: session_meta + producers + quick_check",
}
RSS_ROWS = (
    "check --all --quick -j1",
    "sessions list --json -j1",
    "prune --older-than 0s --dry-run --json",
)


def single_file(d: Path, repeat: int) -> list[tuple[str, float, float]]:
    sid = sorted(os.listdir(d))[0][:26]
    py = [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(d)]
    sqlite3 = shutil.which("sqlite3") or "/usr/bin/sqlite3"
    rows = [
        ("agentdb check ID", [*py, "check", sid]),
        ("agentdb check ID --quick", [*py, "check", "--quick", sid]),
        ("agentdb --version", [*py[:3], "--version"]),
        ("python -c 'import apsw'", [sys.executable, "-c", "import apsw"]),
        (
            "sqlite3 FILE 'PRAGMA integrity_check'",
            [sqlite3, str(d / f"{sid}.sqlite"), "PRAGMA integrity_check"],
        ),
    ]
    return [(name, *_best_cpu(repeat, argv)) for name, argv in rows]


def _best_cpu(repeat: int, argv: list[str]) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds: user + system) of ``repeat`` runs."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    walls, cpus = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, _, usage = os.wait4(p.pid, 0)
        walls.append(time.perf_counter() - t)
        cpus.append(usage.ru_utime + usage.ru_stime)
    return min(walls), min(cpus)


def _warm(d: Path) -> None:
    """Read every file once before the rows are timed: the first row would otherwise pay the
    disk reads (this machine's kernel reclaims cold page cache) and warm the files for the
    rows after it."""
    for name in os.listdir(d):
        with open(d / name, "rb") as f:
            while f.read(1 << 20):
                pass


def _wanted(cmds: dict[str, list[str]], only: str) -> dict[str, list[str]]:
    words = [w for w in only.split(",") if w]
    if not words:
        return cmds
    keep = {k for k in cmds if any(w in k for w in words)}
    keep |= {PAIRS[k] for k in keep if k in PAIRS}
    return {k: v for k, v in cmds.items() if k in keep}


def _every_file(work: list[tuple[str, str]], quick: bool) -> None:
    from agentdb import db
    from agentdb.checks.file import check_path

    for sid, f in work:
        check_path(Path(f), sid, quick=quick, stats=db.file_stats(f))


def _stream(work: list[tuple[str, str]], quick: bool) -> None:
    from agentdb.checks import run as checks_run

    for sid, f in work:
        checks_run._check_one((sid, f, quick, False))


def _warm_files(root: Path, writer: str, n: int) -> tuple[Path, list[str], list[tuple[str, str]]]:
    """The tree of ``n`` files of ``writer``, read once; its files, and (id, file) pairs."""
    d = tree(root, writer, n)
    _warm(d)
    files = sorted(str(p) for p in d.glob("*.sqlite"))
    return d, files, [(os.path.basename(f)[:26], f) for f in files]


def _best_of(fns: dict[str, functools.partial[None]], rounds: int, count: int) -> dict[str, float]:
    """Each function's best CPU time per item (µs) over ``rounds`` passes, run alternating."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.process_time()
            fn()
            best[name] = min(best[name], (time.process_time() - t) / count * 1e6)
    return best


def in_process(root: Path, n: int, rounds: int = 3) -> str:
    """CPU per file in this process (best pass of ``rounds``, alternating, over ``n`` warm
    files per writer): the bare loop, ``check_path`` on every file (how each file was checked
    before the shared reader), and the stream's own per-file check (a healthy file at rest on
    the shared reader, anything else by ``check_path``), ``--quick`` and full."""
    lines = [
        f"In-process, CPU per file (µs), best of {rounds} alternating passes over {n} warm files;"
        f" load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())} at the start",
        "",
        "| files | check | bare loop | `check_path` on every file | stream (shared reader) "
        "| ratio before | ratio now |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for writer in ("other", "agentdb"):
        d, files, work = _warm_files(root, writer, n)
        for quick in (True, False):
            kind = "quick" if quick else "full"

            fns = {
                "bare": functools.partial(bare, kind, d),
                "check_path": functools.partial(_every_file, work, quick),
                "stream": functools.partial(_stream, work, quick),
            }
            best = _best_of(fns, rounds, len(work))
            b = best["bare"]
            lines.append(
                f"| {WRITERS[writer]} | {kind} | {b:.0f} | {best['check_path']:.0f} | "
                f"{best['stream']:.0f} | {best['check_path'] / b:.2f}× | "
                f"{best['stream'] / b:.2f}× |"
            )
            print(lines[-1], file=sys.stderr)
    lines.append(f"\nload average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return "\n".join(lines)


def _batched_sql(files: list[str], k: int, *, statements: bool) -> None:
    """The SQL of the shared reader's quick check, ``k`` files ATTACHed at a time under
    distinct names: one schema read and one ``session_meta`` + small-tables statement for the
    whole batch (UNION ALL), ``quick_check`` per file. ``k`` = 0: one file at a time, the
    statements ``checks.atrest`` runs. ``statements`` False: ATTACH and DETACH alone."""
    import re

    from agentdb import db
    from agentdb.checks.atrest import _INTEGRITY, _META_TEXT, _ROWS

    conn = db.shared_reader()
    conn.limit(apsw.SQLITE_LIMIT_ATTACHED, max(k, 1))

    def uri(f: str) -> str:
        return f"file:{f}?mode=ro&immutable=1"

    if k == 0:
        for f in files:
            conn.execute(f"ATTACH ? AS {db.ATTACHED}", (uri(f),))
            if statements:
                tuple(conn.execute(_ROWS))
                conn.execute(_INTEGRITY[True]).fetchall()
                conn.execute(_META_TEXT).fetchall()
            conn.execute(f"DETACH {db.ATTACHED}")
        return

    def qualified(sql: str, name: str) -> str:
        return re.sub(
            r"FROM (session_meta|producers|cost_ledger|plan_items)\b", rf"FROM {name}.\1", sql
        )

    made: dict[int, tuple[str, str]] = {}
    for i in range(0, len(files), k):
        batch = files[i : i + k]
        names = [f"s{j}" for j in range(len(batch))]
        for name, f in zip(names, batch, strict=True):
            conn.execute(f"ATTACH ? AS {name}", (uri(f),))
        if statements:
            if len(batch) not in made:
                made[len(batch)] = (
                    " UNION ALL ".join(
                        f"SELECT {j}, type, name, tbl_name, sql FROM {n}.sqlite_schema"
                        for j, n in enumerate(names)
                    ),
                    " UNION ALL ".join(
                        f"SELECT * FROM ({qualified(_META_TEXT, n)})" for n in names
                    ),
                )
            schema, meta = made[len(batch)]
            tuple(conn.execute(schema))
            for n in names:
                conn.execute(f"PRAGMA {n}.quick_check(20)").fetchall()
            conn.execute(meta).fetchall()
        for name in names:
            conn.execute(f"DETACH {name}")
    conn.limit(apsw.SQLITE_LIMIT_ATTACHED, 2)


def _system_calls(files: list[str]) -> None:
    """The system calls of ``checks.atrest``'s quick check of a healthy file at rest, alone:
    the stat pass before (the file and three sidecar names) and after (three), one descriptor
    (open, fstat, the 100-byte header, close), the lock probes before and after (lease byte,
    SQLite's lock range, the ``-shm`` open that finds none)."""
    import fcntl
    import struct

    from agentdb import locks

    flags = locks.OPEN_FLAGS
    req = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, locks.LEASE_BYTE, 1, 0)
    rng = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, locks.PENDING_BYTE, 512, 0)

    def probe(fd: int, f: str) -> None:
        fcntl.fcntl(fd, fcntl.F_OFD_GETLK, req)
        fcntl.fcntl(fd, fcntl.F_OFD_GETLK, rng)
        try:
            os.close(os.open(f + "-shm", flags))
        except OSError:
            pass

    def lstat(p: str) -> None:
        try:
            os.lstat(p)
        except OSError:
            pass

    for f in files:
        for suffix in ("", "-wal", "-shm", "-journal"):
            lstat(f + suffix)
        fd = os.open(f, flags)
        os.fstat(fd)
        probe(fd, f)
        os.pread(fd, 100, 0)
        for suffix in ("", "-wal", "-shm"):
            lstat(f + suffix)
        probe(fd, f)
        os.close(fd)


def floor(root: Path, n: int, rounds: int = 5) -> str:
    """What a quick check of a healthy file at rest costs before any of agentdb's Python runs:
    the shared reader's SQL alone and its system calls alone, beside the bare loop and the
    stream's whole per-file check (best of ``rounds`` alternating passes over ``n`` warm files
    of each writer)."""
    from agentdb import db

    lines = [
        f"The floor of `check --all --quick` per file, CPU µs, best of {rounds} alternating passes"
        f" over {n} warm files; load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}"
        " at the start",
        "",
        "| files | bare loop | SQL alone | system calls alone | SQL + system calls "
        "| whole check (stream) | floor / bare | check / bare |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for writer in ("other", "agentdb"):
        d, files, work = _warm_files(root, writer, n)
        db.shared_reader()  # made once per process, as in a check run
        fns = {
            "bare": functools.partial(bare, "quick", d),
            "sql": functools.partial(_batched_sql, files, 0, statements=True),
            "sys": functools.partial(_system_calls, files),
            "stream": functools.partial(_stream, work, True),
        }
        best = _best_of(fns, rounds, len(files))
        b, fl = best["bare"], best["sql"] + best["sys"]
        lines.append(
            f"| {WRITERS[writer]} | {b:.0f} | {best['sql']:.0f} | {best['sys']:.0f} | {fl:.0f} | "
            f"{best['stream']:.0f} | {fl / b:.2f}× | {best['stream'] / b:.2f}× |"
        )
        print(lines[-1], file=sys.stderr)
    lines.append(f"\nload average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return "\n".join(lines)


def attach_batches(root: Path, n: int, rounds: int = 3) -> str:
    """CPU per file of the shared reader's SQL (no stat pass, probe or Python around it), one
    file ATTACHed at a time against batches of 4, 8 and 16 (best of ``rounds`` alternating
    passes over ``n`` warm files of another writer, migrated), beside the bare loop."""
    d = tree(root, "other", n)
    _warm(d)
    files = sorted(str(p) for p in d.glob("*.sqlite"))
    fns = {"bare loop": functools.partial(bare, "quick", d)}
    for statements in (False, True):
        what = "quick-check SQL" if statements else "ATTACH + DETACH"
        for k in (0, 4, 8, 16):
            label = f"{what}, {'one at a time' if k == 0 else f'batches of {k}'}"
            fns[label] = functools.partial(_batched_sql, files, k, statements=statements)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    best = _best_of(fns, rounds, len(files))
    lines = [
        f"Shared reader's SQL, CPU per file (µs), best of {rounds} alternating passes over {n}"
        f" warm files (another writer, migrated); load average {load} at the start",
        "",
        "| what | µs per file |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {v:.0f} |" for name, v in best.items()]
    lines.append(f"\nload average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bare", nargs=2, metavar=("KIND", "DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1000,10000", help="sessions per tree, comma-separated")
    ap.add_argument(
        "--rss-n",
        type=int,
        default=0,
        help="one more size, for RSS and the quick ratio only (e.g. 100000)",
    )
    ap.add_argument("--writers", default="agentdb,other,other-rev1")
    ap.add_argument("--repeat", type=int, default=1, help="runs per row; the best one is shown")
    ap.add_argument("--keep", type=Path, help="build (and reuse) the trees here; not removed")
    ap.add_argument(
        "--only",
        default="",
        help="run only the rows whose name contains one of these comma-separated words "
        "(with the bare loops they are measured against)",
    )
    ap.add_argument(
        "--in-process",
        type=int,
        default=0,
        metavar="N",
        help="only the in-process CPU per file over N warm files (bare, check_path, stream)",
    )
    ap.add_argument(
        "--attach-batch",
        type=int,
        default=0,
        metavar="N",
        help="only the shared reader's SQL per file over N warm files, one file ATTACHed at a "
        "time against batches of 4, 8 and 16",
    )
    ap.add_argument(
        "--floor",
        type=int,
        default=0,
        metavar="N",
        help="only the quick check's floor per file over N warm files: the SQL alone and the "
        "system calls alone, beside the bare loop and the whole check",
    )
    args = ap.parse_args()
    if args.bare:
        bare(args.bare[0], Path(args.bare[1]))
        return
    for n, fn in (
        (args.floor, floor),
        (args.attach_batch, attach_batches),
        (args.in_process, in_process),
    ):
        if n:  # one in-process measurement alone, printed
            root = args.keep or Path(tempfile.mkdtemp(prefix="agentdb-bench-"))
            try:
                print(fn(root, n))
            finally:
                if args.keep is None:
                    shutil.rmtree(root)
            return
    sizes = [int(x) for x in args.sizes.split(",") if x]
    writers = [w for w in args.writers.split(",") if w]
    root = args.keep or Path(tempfile.mkdtemp(prefix="agentdb-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    cache = root / "plugins"
    cache.mkdir(exist_ok=True)
    load0 = os.getloadavg()
    results: dict[tuple[str, int], dict[str, tuple[float, int]]] = {}
    try:
        for writer in writers:
            for n in sizes:
                d = tree(root, writer, n)
                _warm(d)
                results[writer, n] = {}
                for name, argv in _wanted(commands(d, cache), args.only).items():
                    results[writer, n][name] = r = best(args.repeat, argv)
                    print(
                        f"{writer} {n} {name}: {r[0]:.2f} s, {r[1] // 1024} MB, CPU {r[2]:.2f} s",
                        file=sys.stderr,
                    )
        if args.rss_n:
            d = tree(root, "other", args.rss_n)
            cmds = commands(d, cache)
            wanted = [*RSS_ROWS[:2], "bare: quick_check + session_meta"]  # prune: see README
            results["other", args.rss_n] = {}
            for k in wanted:
                results["other", args.rss_n][k] = r = run(cmds[k])
                print(f"other {args.rss_n} {k}: {r[0]:.2f} s, {r[1] // 1024} MB", file=sys.stderr)
            if args.keep is None:
                shutil.rmtree(d)
        one = single_file(tree(root, "other", sizes[0]), 15)
    finally:
        if args.keep is None:
            shutil.rmtree(root)
    load1 = os.getloadavg()
    text = report(results, sizes, writers, args, one, load0, load1)
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "bench_check.md").write_text(text)


def report(results, sizes, writers, args, one, load0, load1) -> str:  # type: ignore[no-untyped-def]
    lines = [
        f"# bench_check: {', '.join(WRITERS[w] for w in writers)}",
        "",
        f"{len(os.sched_getaffinity(0))} cores; load average (1/5/15 min) "
        f"{load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f} at the start, "
        f"{load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} at the end; "
        f"Python {sys.version.split()[0]}, SQLite {apsw.sqlite_lib_version()}. Every row is one "
        f"process (start-up included), best of {args.repeat}; RSS is the peak of that process "
        "(with -j2, of the parent only); CPU is user + system of the process and its workers "
        "(less moved by other processes' load than wall time).",
        "",
    ]
    for (writer, n), rows in results.items():
        if n not in sizes:
            continue
        lines += [
            f"## {n:,} sessions, {WRITERS[writer]}",
            "",
            "| what | seconds | ms per file | × its bare loop | CPU s | CPU × bare | peak RSS MB |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, (s, rss, cpu) in rows.items():
            pair = rows.get(PAIRS.get(name, ""))
            ratio = f"{s / pair[0]:.2f}×" if pair else "1.00×"
            cratio = f"{cpu / pair[2]:.2f}×" if pair else "1.00×"
            lines.append(
                f"| {name} | {s:.2f} | {1000 * s / n:.3f} | {ratio} | {cpu:.2f} | {cratio} "
                f"| {rss / 1024:.0f} |"
            )
        scaling = [
            f"{what} {rows[a][0] / rows[b][0]:.2f}×"
            for what, a, b in (
                ("quick", "check --all --quick -j1", "check --all --quick -j2"),
                ("full", "check --all -j1 (full)", "check --all -j2 (full)"),
            )
            if a in rows and b in rows
        ]
        lines += ["", f"--jobs 2 scaling: {', '.join(scaling) or 'not measured'}.", ""]
    all_n = sorted({n for _, n in results})
    lines += [
        "## Peak RSS (MB) by number of sessions, another writer's files (migrated)",
        "",
        "| command | " + " | ".join(f"{n:,}" for n in all_n) + " |",
        "|---|" + "---:|" * len(all_n),
    ]
    for name in [*RSS_ROWS, "bare: quick_check + session_meta"]:
        cells = []
        for n in all_n:
            r = results.get(("other", n), {}).get(name)
            cells.append("" if r is None else f"{r[1] / 1024:.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if args.rss_n:
        rows = results["other", args.rss_n]
        q, b = rows["check --all --quick -j1"][0], rows["bare: quick_check + session_meta"][0]
        lines += [
            "",
            f"At {args.rss_n:,} (one run each): check --all --quick -j1 {q:.1f} s, its bare "
            f"loop {b:.1f} s ({q / b:.2f}×).",
        ]
    lines += [
        "",
        "## One file (best of 15 each: wall ms, and CPU ms, user + system)",
        "",
        "| what | wall ms | CPU ms |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {1000 * w:.0f} | {1000 * c:.0f} |" for name, w, c in one]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
