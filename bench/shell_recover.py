"""Bench: salvage engine 2 (SQLite's `.recover` through a capable shell) on session files.

For sessions of growing size, side by side in one run:
- a plain APSW read of every row (the healthy baseline),
- the shell's `.recover` alone (one process, output to a file),
- `shell_salvage` end to end (private copy, `.recover`, authorized load, validation),
- `shell_salvage` on the same file with one events leaf zeroed, and with the events root page
  zeroed (every event comes back through lost_and_found and is mapped by shape).

Run: `.venv/bin/python bench/shell_recover.py`; writes `bench/results/shell_recover.md`.
`time_shell_recover(db_path, wal_path)` is importable by the recover bench.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import apsw  # noqa: E402
from tests.support import make_session  # noqa: E402

from agentdb.jobs import demo  # noqa: E402
from agentdb.salvage.shell import (  # noqa: E402
    RECOVER_COMMAND,
    find_capable_shell,
    shell_salvage,
)

TURNS = (50, 200, 800)  # 6 events per turn
RESULTS = REPO / "bench" / "results" / "shell_recover.md"


def time_shell_recover(
    db_path: Path, wal_path: Path | None, session_id: str | None = None
) -> tuple[dict[str, int], float]:
    """(rows salvaged per table, seconds) for `shell_salvage` on one file; needs a capable shell."""
    shell = find_capable_shell()
    if shell is None:
        raise RuntimeError(
            "no capable sqlite3 shell: build one with tests/tools/build_sqlite_shell.py"
        )
    sid = session_id or db_path.name.split(".")[0]
    with tempfile.TemporaryDirectory(prefix="bench-shell-") as work:
        t0 = time.perf_counter()
        res = shell_salvage(db_path, wal_path, sid, Path(work), shell=shell)
        dt = time.perf_counter() - t0
    return {t: len(r) for t, r in res.rows.items()}, dt


def _read_all(path: Path) -> float:
    t0 = time.perf_counter()
    conn = apsw.Connection(
        f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    for t in ("events", "session_meta", "cost_ledger", "plan_items", "producers"):
        for _ in conn.execute(f"SELECT * FROM {t}"):
            pass
    conn.close()
    return time.perf_counter() - t0


def _raw_recover(shell: Path, path: Path, tmp: Path) -> float:
    copy = tmp / "raw-copy.sqlite"
    copy.write_bytes(path.read_bytes())
    t0 = time.perf_counter()
    with open(tmp / "raw.sql", "wb") as out:
        subprocess.run(
            [str(shell), "-safe", "-batch", "-init", os.devnull, str(copy), RECOVER_COMMAND],
            stdout=out,
            stdin=subprocess.DEVNULL,
            check=True,
        )
    dt = time.perf_counter() - t0
    copy.unlink()
    return dt


def _zero_root(path: Path) -> None:
    conn = apsw.Connection(
        f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name='events'").get
    size = conn.execute("PRAGMA page_size").get
    conn.close()
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, b"\0" * size, (root - 1) * size)
    os.close(fd)


def main() -> int:
    shell = find_capable_shell()
    if shell is None:
        from tests.tools.build_sqlite_shell import ensure_shell, last_error

        if ensure_shell() is None:
            print(last_error(), file=sys.stderr)
            return 1
        shell = find_capable_shell()
        assert shell is not None
    lines = [
        f"Engine 2 with `{shell.name}`; times in ms (best of 3).",
        "",
        "| events | file KiB | APSW read all | `.recover` alone | shell_salvage"
        " | ratio salvage/read"
        " | leaf zeroed: events kept | root zeroed: mapped from lost_and_found | root zeroed ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-shell-") as tmp_s:
        tmp = Path(tmp_s)
        for turns in TURNS:
            sdir = tmp / f"s{turns}"
            sdir.mkdir(mode=0o700)
            sid, path = make_session(sdir, turns=turns)
            read = min(_read_all(path) for _ in range(3))
            raw = min(_raw_recover(shell, path, tmp) for _ in range(3))
            rows, _ = time_shell_recover(path, None, sid)
            full = min(time_shell_recover(path, None, sid)[1] for _ in range(3))
            leaf = sdir / "leaf.sqlite"
            leaf.write_bytes(path.read_bytes())
            demo.damage_page(leaf, table="events", nth_leaf=1)
            kept, _ = time_shell_recover(leaf, None, sid)
            rootz = sdir / "root.sqlite"
            rootz.write_bytes(path.read_bytes())
            _zero_root(rootz)
            with tempfile.TemporaryDirectory() as work:
                t0 = time.perf_counter()
                res = shell_salvage(rootz, None, sid, Path(work), shell=shell)
                root_dt = time.perf_counter() - t0
            lines.append(
                f"| {rows['events']} | {path.stat().st_size // 1024} | {read * 1e3:.1f}"
                f" | {raw * 1e3:.1f} | {full * 1e3:.1f} | {full / read:.0f}x"
                f" | {kept['events']} of {rows['events']}"
                f" | {res.lost_and_found_mapped} | {root_dt * 1e3:.1f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
