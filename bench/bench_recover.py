"""agentdb recover against SQLite's own ``.recover``, per corruption class, on the same files.

For each class of the test corpus (tests/salvage/corpus.py) the same damaged file is given to
``agentdb.salvage.recover_session`` (the whole job: engines, replacement, verification, swap)
and, when ``agentdb.salvage.shell`` is importable and finds a capable sqlite3 shell, to SQLite's
``.recover`` (through that module). Rows count only when they are one of the original rows *of
that table*; ``.recover`` rows it could only file in ``lost_and_found`` are shown apart.
Then the cost table: sessions of ``--sizes`` MB (default 1,25,100,500) of 20 KB events (and,
with ``--small N``, one of N events of ~100 bytes: what grows with rows), each damaged three
ways (a zeroed interior page of ``events``, a zeroed 512-byte sector inside an ``events`` leaf,
the file's tail cut off inside a page; or, with ``--kinds gen:NAME/SUBSEED,...``, the damage
generator's kinds drawn on the file's own page map), side by side in one run: ``agentdb
recover`` as a process (start-up included) against ``sqlite3 damaged.db .recover | sqlite3
new.db`` (the shell from ``tests/tools/build_sqlite_shell.py``) on copies of the same damaged
bytes. Wall time and peak RSS (``wait4``; the pipeline's is the sum of its two processes), rows
kept byte-identical to the undamaged file (in ``events``: ``.recover``'s ``lost_and_found`` does
not count), and agentdb's own time per stage (``--json``'s ``seconds``).

Run: ``.venv/bin/python bench/bench_recover.py [--big-mb N] [--sizes 1,25] [--small 100000]
[--no-corpus]``; writes bench/results/bench_recover.md. One pass each: the machine is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests import peak_rss  # noqa: E402
from tests.rows import row_sets, write_at, zero_page  # noqa: E402
from tests.salvage import corpus  # noqa: E402

from agentdb import salvage  # noqa: E402
from agentdb.paths import sidecar  # noqa: E402
from agentdb.store import Event, SessionWriter  # noqa: E402

try:
    from agentdb.salvage import shell  # type: ignore[attr-defined]
except ImportError:
    shell = None


def install(src: Path, sessions_dir: Path) -> Path:
    sessions_dir.mkdir(parents=True, exist_ok=True)
    dst = sessions_dir / src.name
    shutil.copyfile(src, dst)
    if sidecar(src, "-wal").exists():
        shutil.copyfile(sidecar(src, "-wal"), sidecar(dst, "-wal"))
    return dst


def right_rows(got: dict[str, Any], original: dict[str, set[tuple[Any, ...]]]) -> int:
    n = 0
    for table, rows in got.items():
        want = original.get(table, set())
        want9 = {r[:9] for r in want} if table == "events" else want
        for r in rows:
            r = tuple(r)
            if (r[:9] if table == "events" else r) in want9:
                n += 1
    return n


def run_agentdb(
    path: Path, sid: str, original: dict[str, set[tuple[Any, ...]]]
) -> tuple[int, float, str]:
    t0 = time.perf_counter()
    out = salvage.recover_session(path.parent, sid)
    dt = time.perf_counter() - t0
    if out.outcome != "recovered":
        return 0, dt, out.outcome
    got = row_sets(path)
    return right_rows(got, original), dt, out.outcome


def run_native(path: Path, sid: str) -> float:
    """The whole job with SQLite's recovery extension turned off (engines b and c only)."""
    saved = os.environ.get("AGENTDB_SQLITE3")
    os.environ["AGENTDB_SQLITE3"] = "none"
    try:
        t0 = time.perf_counter()
        salvage.recover_session(path.parent, sid)
        return time.perf_counter() - t0
    finally:
        if saved is None:
            del os.environ["AGENTDB_SQLITE3"]
        else:
            os.environ["AGENTDB_SQLITE3"] = saved


def run_shell(
    path: Path, sid: str, original: dict[str, set[tuple[Any, ...]]], work: Path
) -> tuple[str, str, str]:
    if shell is None or shell.find_capable_shell() is None:
        return "n/a", "n/a", "n/a"
    wal = sidecar(path, "-wal")
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    res = shell.shell_salvage(path, wal if wal.exists() else None, sid, work)
    dt = time.perf_counter() - t0
    lf = int(getattr(res, "lost_and_found_mapped", 0))
    right = right_rows(res.rows, original) - lf
    return str(max(right, 0)), str(lf), f"{dt * 1000:.0f}"


OLD_GUARD_S = 10.0  # the old agentdb hangs on some damage (issue 10's reader loop): killed


def run_old(
    src: Path, sid: str, original: dict[str, set[tuple[Any, ...]]], old_src: Path, work: Path
) -> str:
    """Rows of the original that agentdb at another commit (``old_src``: its ``src/``) keeps:
    its ``recover`` on a copy of the same damaged bytes, run by the damage campaign's driver."""
    from tests.fuzz.invariants import _json, drive

    sessions = work / "state" / "agent" / "sessions"
    path = install(src, sessions)
    argv = ["--sessions-dir", str(sessions), "recover", sid, "--json"]
    res = drive(sessions, [argv], work / "driver", old_src, OLD_GUARD_S)
    if res[0].get("hung"):
        return "0 (killed after 10 s)"
    doc = ((_json(res[0]) or {}).get("sessions") or [{}])[0]
    outcome = doc.get("outcome", "no JSON")
    if outcome not in ("recovered", "healthy"):
        return f"0 ({outcome})"
    return f"{right_rows(row_sets(path), original)} ({outcome})"


def corpus_table(root: Path, old_src: Path | None = None) -> list[list[str]]:
    (root / "p").mkdir()
    (root / "s").mkdir()
    (root / "w").mkdir()
    bases = {
        "plain": corpus.build_base(root / "p"),
        "wal": corpus.build_wal(root / "s", root / "w"),
    }
    rows = []
    for case in corpus.CASES:
        sid, src = bases["wal" if case.wal else "plain"]
        a = install(src, root / case.name / "a")
        original = row_sets(a)
        total = sum(len(v) for v in original.values())
        case.damage(a)
        b = install(a, root / case.name / "b")  # the same damaged bytes for .recover
        c = install(a, root / case.name / "c")
        old = run_old(a, sid, original, old_src, root / case.name / "old") if old_src else "n/a"
        native = run_native(c, sid)
        got, dt, outcome = run_agentdb(a, sid, original)
        if outcome == "healthy":
            got = right_rows(row_sets(a), original)  # left alone: what SQLite reads
        s_right, s_lf, s_ms = run_shell(b, sid, original, root / case.name / "shell")
        rows.append(
            [
                case.name,
                str(total),
                f"{got} ({outcome})",
                f"{dt * 1000:.0f}",
                f"{native * 1000:.0f}",
                s_right,
                s_lf,
                s_ms,
                old,
            ]
        )
    return rows


def big_session(root: Path, mb: int) -> list[str]:
    d = root / "big"
    w = SessionWriter.create(d, profile="bench")
    payload_size = 20_000
    n = mb * 1_000_000 // payload_size
    batch = []
    for _ in range(n):
        batch.append(Event("tool_result", corpus.BIG, os.urandom(payload_size // 2) * 2))
        if len(batch) == 200:
            w.emit_batch(batch)
            batch = []
    if batch:
        w.emit_batch(batch)
    w.close()
    path = w.path
    original = row_sets(path)
    corpus.d_zeroed_page(path)
    b = install(path, root / "big-b")
    c = install(path, root / "big-c")
    native = run_native(c, w.session_id)
    got, dt, outcome = run_agentdb(path, w.session_id, original)
    s_right, s_lf, s_ms = run_shell(b, w.session_id, original, root / "big-shell")
    size = b.stat().st_size / 1e6
    ratio = "n/a" if s_ms == "n/a" else f"{dt * 1000 / max(float(s_ms), 1):.2f}"
    return [
        f"{size:.0f} MB session, zeroed leaf",
        str(sum(len(v) for v in original.values())),
        f"{got} ({outcome})",
        f"{dt * 1000:.0f}",
        f"{native * 1000:.0f}",
        s_right,
        s_lf,
        s_ms,
        ratio,
    ]


# ---------------------------------------------------------------------------- cost by size

KINDS = ("interior page", "leaf sector", "truncated tail")
STAGES = ("snapshot", "diagnose", "pages", "rows", "merge", "replacement", "check", "copy", "swap")


def build_session(d: Path, mb: int) -> tuple[str, Path]:
    """A closed session of about ``mb`` MB: 20 KB tool results with a model turn every ten."""
    from agentdb.jobs import demo

    w = SessionWriter.create(d, profile="bench")
    n = max(mb * 1_000_000 // 20_000, 20)
    batch: list[Event] = []
    for i in range(n):
        batch.append(Event("tool_result", corpus.BIG, os.urandom(10_000) * 2))
        if len(batch) == 200 or i == n - 1:
            w.emit_batch(batch)
            batch = []
        if i % 500 == 0:
            demo._turns(w, demo.MODEL_OLD, 1, seed=i)
    w.set_status("completed")
    w.close()
    return w.session_id, w.path


def _page_size(path: Path) -> int:
    with open(path, "rb") as f:
        head = f.read(100)
    size = int.from_bytes(head[16:18], "big")
    return 65536 if size == 1 else size


def damage(path: Path, kind: str, sid: str = "") -> str:
    """Damage ``path`` in place; returns what was done. A kind ``gen:NAME/SUBSEED`` is the
    damage generator's kind NAME (tests/fuzz/generator.py) drawn from SUBSEED, on this file's
    own page map."""
    ps = _page_size(path)
    if kind.startswith("gen:"):
        from tests.fuzz.bases import describe
        from tests.fuzz.generator import KINDS as GEN_KINDS
        from tests.fuzz.generator import Target

        name, _, sub = kind[4:].partition("/")
        target = Target(path, describe(path, sid), lambda _which: b"")
        return str(GEN_KINDS[name](target, random.Random(int(sub or 0))))
    if kind == "interior page":
        pages = corpus.pages_of(path, "events", "internal")
        zero_page(path, pages[len(pages) // 2])  # a child of the root when there is one
        return f"page {pages[len(pages) // 2]}"
    if kind == "leaf sector":
        leaves = corpus.pages_of(path, "events", "leaf")
        pg = leaves[len(leaves) // 2]
        write_at(path, (pg - 1) * ps + 512, bytes(512))
        return f"page {pg} sector 1"
    n = path.stat().st_size // ps
    os.truncate(path, (n - max(n // 50, 8)) * ps + ps // 3)
    return f"cut inside page {n - max(n // 50, 8) + 1}"


def fingerprints(path: Path, table: str = "events") -> set[bytes]:
    """One digest per row of ``table`` (the nine revision-1 columns), read row by row."""
    import apsw

    conn = apsw.Connection(f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_URI | 1)
    cols = "sequence, id, timestamp, kind, producer_category, producer_name, "
    cols += "producer_version, schema_version, payload"
    out: set[bytes] = set()
    try:
        for row in conn.execute(f"SELECT {cols} FROM {table}"):
            out.add(hashlib.blake2b(repr(row).encode(), digest_size=16).digest())
    except apsw.Error:
        pass
    finally:
        conn.close()
    return out


def _run(argv: list[str], env: dict[str, str] | None = None, **kw: Any) -> tuple[float, int, str]:
    """(seconds, peak RSS in MiB, stdout) of one process, measured through tests.peak_rss (a
    child spawned from this process would report this process's own peak as its RSS)."""
    t0 = time.perf_counter()
    usage, out = peak_rss.run(argv, env=env, **kw)
    return time.perf_counter() - t0, usage.maxrss_kib // 1024, out.decode(errors="replace")


def cli_env(root: Path) -> dict[str, str]:
    """agentdb's environment: this tree's sources, compiled once into ``PYCACHE`` (an installed
    package has its bytecode; PYTHONDONTWRITEBYTECODE would make every run compile ~90 modules,
    0.2 s, which no user pays)."""
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT / "src"),
        PYTHONPYCACHEPREFIX=str(PYCACHE),
        XDG_CACHE_HOME=str(root / "cache"),
        XDG_STATE_HOME=str(root / "state"),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("AGENTDB_TOOLS_DIR", str(ROOT / ".tools"))
    return env


PYCACHE = Path(tempfile.gettempdir()) / "agentdb-bench-pycache"


def compile_sources() -> None:
    """Bytecode for every module agentdb may import, before anything is timed."""
    env = cli_env(Path(tempfile.gettempdir()))
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], env=env, check=True
    )
    subprocess.run(
        [sys.executable, "-m", "agentdb.cli.main", "--help"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def run_agentdb_cli(path: Path, sid: str, root: Path) -> tuple[float, int, dict[str, Any]]:
    env = cli_env(root)
    argv = [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir", str(path.parent)]
    secs, rss, out = _run([*argv, "recover", sid, "--json"], env)
    try:
        doc = json.loads(out)["sessions"][0]
    except (ValueError, KeyError, IndexError):
        doc = {"outcome": "no JSON"}
    return secs, rss, doc


def run_shell_pipeline(path: Path, shell: Path, new_db: Path) -> tuple[float, int]:
    """``shell damaged .recover | shell new.db``: wall time and the sum of both peak RSS."""
    t0 = time.perf_counter()
    p1 = peak_rss.Measured([str(shell), str(path), ".recover"], stdout=subprocess.PIPE)
    p2 = peak_rss.Measured([str(shell), str(new_db)], stdin=p1.stdout, stdout=subprocess.DEVNULL)
    if p1.stdout:
        p1.stdout.close()
    u1, u2 = p1.wait(), p2.wait()
    return time.perf_counter() - t0, (u1.maxrss_kib + u2.maxrss_kib) // 1024


def small_session(d: Path, n: int) -> tuple[str, Path]:
    """A closed session of ``n`` events of about 100 bytes: what grows with rows, not bytes."""
    w = SessionWriter.create(d, profile="bench")
    batch: list[Event] = []
    for i in range(n):
        batch.append(Event("tool_result", corpus.BIG, b"x%d" % i * 10))
        if len(batch) == 1000 or i == n - 1:
            w.emit_batch(batch)
            batch = []
    w.set_status("completed")
    w.close()
    return w.session_id, w.path


def cost_rows(
    root: Path, mb: int, shell_path: Path | None, kinds: list[str], small: int = 0
) -> list[list[str]]:
    """One row per damage kind: a session of about ``mb`` MB of 20 KB events, or (``small``)
    one of that many small events."""
    base_dir = root / f"base-{mb}-{small}"
    base_dir.mkdir()
    sid, base = small_session(base_dir, small) if small else build_session(base_dir, mb)
    original = fingerprints(base)
    rows = []
    for kind in kinds:
        case = root / f"{mb}-{kind.replace(' ', '-').replace('/', '-').replace(':', '-')}"
        a = install(base, case / "a")
        try:
            what = damage(a, kind, sid)
        except Exception as e:  # a generator kind with nothing to damage in this file
            print(f"{kind}: not applied ({e})", flush=True)
            shutil.rmtree(case)
            continue
        b = install(a, case / "b")
        secs, rss, doc = run_agentdb_cli(a, sid, case)
        kept = len(fingerprints(a) & original) if doc.get("outcome") == "recovered" else 0
        s_secs, s_rss, s_kept = float("nan"), 0, 0
        if shell_path is not None:
            new_db = case / "new.db"
            s_secs, s_rss = run_shell_pipeline(b, shell_path, new_db)
            s_kept = len(fingerprints(new_db) & original)
        stages = doc.get("seconds", {})
        shown = ", ".join(f"{k} {stages[k]:.2f}" for k in STAGES if stages.get(k, 0) >= 0.05)
        rows.append(
            [
                f"{base.stat().st_size / 1e6:.0f} MB"
                + (f" ({small:,} small events)" if small else ""),
                f"{kind} ({what})" if kind.startswith("gen:") else kind,
                f"{len(original)}",
                f"{kept} ({doc.get('outcome')})",
                f"{secs:.2f}",
                f"{rss}",
                f"{s_kept}",
                f"{s_secs:.2f}",
                f"{s_rss}",
                f"{secs / s_secs:.2f}" if s_secs == s_secs and s_secs > 0 else "n/a",
                shown,
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
        shutil.rmtree(case)
    shutil.rmtree(base_dir)
    return rows


COST_HEADERS = [
    "session",
    "damage",
    "events",
    "agentdb kept (outcome)",
    "agentdb s",
    "agentdb MiB",
    ".recover kept",
    ".recover \\| sqlite3 s",
    ".recover MiB",
    "time ratio",
    "agentdb stages (s, >= 0.05)",
]


@contextlib.contextmanager
def old_tree(commit: str, root: Path) -> Iterator[Path | None]:
    """agentdb's ``src/`` at ``commit`` in a temporary git worktree (None for 'none')."""
    if commit == "none":
        yield None
        return
    wt = root / "old-tree"
    git = ["git", "-C", str(ROOT), "worktree"]
    subprocess.run([*git, "add", "--detach", str(wt), commit], check=True, capture_output=True)
    try:
        yield wt / "src"
    finally:
        subprocess.run([*git, "remove", "--force", str(wt)], check=False, capture_output=True)


def _shown(path: Path | None) -> str:
    if path is None:
        return "none capable (the .recover columns read n/a)"
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-mb", type=int, default=0, help="size of the corpus' large session")
    ap.add_argument("--sizes", default="1,25,100,500", help="MB of the cost table's sessions")
    ap.add_argument("--no-corpus", action="store_true", help="skip the per-class table")
    ap.add_argument(
        "--old",
        default="dd60f0c",
        help="agentdb commit whose recover the per-class table compares too, or 'none'",
    )
    ap.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help="damage kinds of the cost table: "
        + ", ".join(KINDS)
        + ", or gen:NAME/SUBSEED (the damage generator's kind NAME drawn from SUBSEED)",
    )
    ap.add_argument(
        "--small", type=int, default=0, help="also a session of this many ~100-byte events"
    )
    args = ap.parse_args()
    text = ""
    with tempfile.TemporaryDirectory(prefix="bench-recover-") as t:
        root = Path(t)
        if not args.no_corpus:
            text += corpus_text(root, args.big_mb, args.old)
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
        if sizes or args.small:
            compile_sources()
            shell_path = shell.find_capable_shell() if shell is not None else None
            cost: list[list[str]] = []
            for mb in sizes:
                cost += cost_rows(root, mb, shell_path, args.kinds.split(","))
            if args.small:
                cost += cost_rows(root, 0, shell_path, args.kinds.split(","), args.small)
            text += "\n| " + " | ".join(COST_HEADERS) + " |\n|" + "---|" * len(COST_HEADERS)
            text += "\n" + "\n".join("| " + " | ".join(r) + " |" for r in cost) + "\n"
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            text += (
                f"\nOne run each, {time.strftime('%Y-%m-%d %H:%M')}, load average {load} on "
                f"{os.cpu_count()} cores; shell: {_shown(shell_path)}. Kept: rows of `events` "
                "byte-identical to the undamaged file. MiB: peak RSS (wait4, each command forked "
                "from a small launcher, tests/peak_rss.py: the bench's own pages do not count).\n"
            )
    print(text)
    out = ROOT / "bench" / "results" / "bench_recover.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def corpus_text(root: Path, big_mb: int, old: str = "none") -> str:
    headers = [
        "class",
        "original rows",
        "agentdb rows (outcome)",
        "agentdb ms",
        "agentdb native-only ms",
        ".recover rows",
        ".recover lost_and_found",
        ".recover ms",
        f"agentdb at {old} rows (outcome)",
    ]
    with old_tree(old, root) as old_src:
        rows = corpus_table(root, old_src)
    big = big_session(root, big_mb) if big_mb else None
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    if big:
        h2 = [*headers[:-1], "whole job / .recover time"]
        text += "\n| " + " | ".join(h2) + " |\n|" + "---|" * len(h2) + "\n"
        text += "| " + " | ".join(big) + " |\n"
    engine = (
        f"shell: {_shown(shell.find_capable_shell())}"
        if shell is not None
        else "salvage.shell not present"
    )
    return text + (
        f"\nRows count only when they equal an original row of the same table. {engine}. "
        "agentdb ms is the whole job (engines, replacement, verification, swap; it runs "
        "`.recover` too when a page typed as a b-tree page did not parse); native-only is the "
        "same job with `AGENTDB_SQLITE3=none`. The last column is `recover` of agentdb at "
        f"{old} on a copy of the same damaged bytes (killed after {OLD_GUARD_S:.0f} s: it kept "
        "nothing). One run each.\n"
    )


if __name__ == "__main__":
    main()
