"""Shared test helpers: real session files, real processes. Nothing here mocks SQLite."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentdb import db
from agentdb.jobs import demo
from agentdb.schema.migrations import apply_steps
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.store import Producer, SessionWriter

HERE = Path(__file__).parent
SRC = HERE.parent / "src"


def make_session(
    sessions_dir: Path,
    *,
    turns: int = 3,
    revision: int = CURRENT_REVISION,
    status: str | None = "completed",
    parent: str | None = None,
    depth: int = 0,
    model: Producer = demo.MODEL_OLD,
    profile: str = "coder",
    session_id: str | None = None,
    started_at: str | None = None,
    ended_at: str | None = None,
) -> tuple[str, Path]:
    """A real session file with ``turns`` model turns (6 events each), closed."""
    w = SessionWriter.create(
        sessions_dir,
        profile=profile,
        parent_session_id=parent,
        depth=depth,
        revision=revision,
        session_id=session_id,
        started_at=started_at,
    )
    try:
        demo._turns(w, model, turns, seed=turns)
        if status is not None and status != "running":
            w.set_status(status, at=ended_at)
    finally:
        w.close()
    return w.session_id, w.path


def clone_session(
    template: Path, sessions_dir: Path, sid: str, *, revision: int = CURRENT_REVISION
) -> Path:
    """A real session under the id ``sid``, fast: ``template`` (a revision-1 or -2 file, whose
    id no hash binds) copied, its session_meta row rewritten to match the file name, then
    migrated to ``revision`` (from revision 3 the id is inside the chain's genesis and
    session_meta's hash: a byte-patched copy of a revision-3 file is damage, never a session)."""
    dst = sessions_dir / f"{sid}.sqlite"
    shutil.copyfile(template, dst)
    os.chmod(dst, 0o600)
    conn = db.open_writer(dst)
    try:
        conn.execute("UPDATE session_meta SET session_id = ?", (sid,))
        if int(db.scalar(conn, "PRAGMA user_version")) < revision:
            apply_steps(conn, dst, target=revision)
    finally:
        conn.close()
    return dst


def tree_snapshot(root: Path) -> dict[str, tuple[int, str | None]]:
    """Every entry under ``root``: mode and, for regular files, a hash of the bytes."""
    out: dict[str, tuple[int, str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out[str(p.relative_to(root))] = (st.st_mode, digest)
    return out


def _python() -> list[str]:
    return [sys.executable, "-c"]


_HOLDER = """
import sys, time, apsw
c = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)
c.execute("SELECT count(*) FROM sqlite_schema").fetchall()
print("ready", flush=True)
time.sleep(600)
"""


@contextmanager
def held_open(path: Path) -> Iterator[int]:
    """Another process with the session open (idle, read-only), as a live kernel would be."""
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        yield p.pid
    finally:
        p.kill()
        p.wait()


_WRITER = """
import sys, json
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from agentdb.store import SessionWriter, Event, Producer
w = SessionWriter.open(Path(sys.argv[1]), sys.argv[2])
if w.info().status != "running":
    w.set_status("running")  # ResumeSession: an ended session takes events after re-opening
p = Producer("tool", "shell", "2.0.0")
n = 0
print("ready", flush=True)
while True:
    n += 1
    seq = w.emit(Event("tool_result", p, json.dumps({"n": n}).encode() * 20))
    print(seq, flush=True)
"""


class WriterProcess:
    """A kernel-like writer appending events continuously in a subprocess."""

    def __init__(self, sessions_dir: Path, session_id: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(sessions_dir), session_id, str(SRC)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == "ready", (line, self.proc.stderr.read() if self.proc.stderr else "")
        self.seen: list[int] = []  # sequences read by wait_for_commits

    def wait_for_commits(self, n: int) -> None:
        """Block until the writer has reported ``n`` more committed events (no timing guess)."""
        assert self.proc.stdout is not None
        for _ in range(n):
            line = self.proc.stdout.readline()
            assert line, "the writer stopped"
            self.seen.append(int(line))

    def stop(self) -> tuple[list[int], str]:
        """SIGKILL the writer; return the sequences it reported committed and its stderr."""
        self.proc.send_signal(signal.SIGKILL)
        out, err = self.proc.communicate(timeout=30)
        seqs = self.seen + [int(x) for x in out.split() if x.isdigit()]
        return seqs, err


def wait_for(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


GOOD_ID = "01KRJ2J16Z66Y18RC6X1RVCXA6"


def hostile_extras(sessions_dir: Path, model_id: str) -> dict[str, str]:
    """Files that are not sessions (never touched) and <ULID>.sqlite entries that cannot be
    opened; returns {name: kind}."""
    base = GOOD_ID[:25]
    src = sessions_dir / f"{model_id}.sqlite"
    (sessions_dir / "notes.txt").write_text("operator notes\n")
    (sessions_dir / "foo.sqlite").write_bytes(src.read_bytes())
    (sessions_dir / f"{model_id.lower()}.sqlite").write_bytes(src.read_bytes())
    (sessions_dir / "random").mkdir()
    (sessions_dir / "random" / "inside.sqlite").write_bytes(src.read_bytes())
    (sessions_dir / f"{model_id}.sqlite.bak").write_bytes(src.read_bytes())
    (sessions_dir / f"{base}9.sqlite.corrupt.notes").write_text("not a corrupt copy\n")
    os.mkdir(sessions_dir / f"{base}0.sqlite")
    os.mkfifo(sessions_dir / f"{base}1.sqlite")
    os.symlink(src.name, sessions_dir / f"{base}2.sqlite")
    return {f"{base}0": "directory", f"{base}1": "fifo", f"{base}2": "symlink"}


def ulids(n: int) -> list[str]:
    """``n`` distinct valid session ids, in order."""
    alpha = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    out = []
    for i in range(n):
        tail = ""
        for _ in range(6):
            tail = alpha[i % 32] + tail
            i //= 32
        out.append("01M8" + "0" * 16 + tail)
    return out
