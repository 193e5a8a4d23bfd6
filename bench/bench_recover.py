"""agentdb recover against SQLite's own ``.recover``, per corruption class, on the same files.

For each class of the test corpus (tests/salvage/corpus.py) the same damaged file is given to
``agentdb.salvage.recover_session`` (the whole job: engines, replacement, verification, swap)
and, when ``agentdb.salvage.shell`` is importable and finds a capable sqlite3 shell, to SQLite's
``.recover`` (through that module). Rows count only when they are one of the original rows *of
that table*; ``.recover`` rows it could only file in ``lost_and_found`` are shown apart.
Then one large session (``--big-mb``, default 100) is timed the same way.

Run: ``.venv/bin/python bench/bench_recover.py [--big-mb N]``;
writes bench/results/bench_recover.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

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
    got = corpus.read_rows(path)
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


def corpus_table(root: Path) -> list[list[str]]:
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
        original = corpus.read_rows(a)
        total = sum(len(v) for v in original.values())
        case.damage(a)
        b = install(a, root / case.name / "b")  # the same damaged bytes for .recover
        c = install(a, root / case.name / "c")
        native = run_native(c, sid)
        got, dt, outcome = run_agentdb(a, sid, original)
        if outcome == "healthy":
            got = right_rows(corpus.read_rows(a), original)  # left alone: what SQLite reads
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
    original = corpus.read_rows(path)
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


def _shown(path: Path | None) -> str:
    if path is None:
        return "none capable (the .recover columns read n/a)"
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-mb", type=int, default=100, help="size of the large session (0: skip)")
    args = ap.parse_args()
    headers = [
        "class",
        "original rows",
        "agentdb rows (outcome)",
        "agentdb ms",
        "agentdb native-only ms",
        ".recover rows",
        ".recover lost_and_found",
        ".recover ms",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-recover-") as t:
        root = Path(t)
        rows = corpus_table(root)
        big = big_session(root, args.big_mb) if args.big_mb else None
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    if big:
        h2 = [*headers, "whole job / .recover time"]
        text += "\n| " + " | ".join(h2) + " |\n|" + "---|" * len(h2) + "\n"
        text += "| " + " | ".join(big) + " |\n"
    engine = (
        f"shell: {_shown(shell.find_capable_shell())}"
        if shell is not None
        else "salvage.shell not present"
    )
    text += (
        f"\nRows count only when they equal an original row of the same table. {engine}. "
        "agentdb ms is the whole job (engines, replacement, verification, swap; it runs "
        "`.recover` too when a page typed as a b-tree page did not parse); native-only is the "
        "same job with "
        "`AGENTDB_SQLITE3=none`. One run each.\n"
    )
    print(text)
    out = ROOT / "bench" / "results" / "bench_recover.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    main()
