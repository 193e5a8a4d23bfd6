"""Fixtures for migrate and backup tests: session files at every revision, in every shape."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import apsw

from agentdb import paths
from agentdb.hashing import chain_hash, event_hash, genesis, row_hash
from agentdb.schema.revisions import COLUMNS, DDL, REV3_BOUND
from agentdb.store import Event, Producer, SessionWriter
from tests.rows import all_rows
from tests.support import make_session

REVISIONS = sorted(DDL)  # every released revision
TOOL = Producer("tool", "shell", "2.0.0")
BIG = 100 * 1024  # a payload this size spills onto overflow pages


def rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table, committed WAL frames included, read from a private copy."""
    return all_rows(path, private_copy=True)


def user_version(path: Path) -> int:
    conn = apsw.Connection(str(path))
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def assert_same_rows(before: dict, after: dict) -> None:  # type: ignore[type-arg]
    """Every row survived, whatever revision each side is at: each row of ``before`` is the
    prefix of the same row of ``after`` (a revision only ever appends columns), and each column
    ``after`` adds holds what its revision defines: events' content_hash is the hash of the
    revision-1 columns; at revision 3 every other row's content_hash is its row hash, and the
    events are chained from the session's genesis over the rows bound to them."""
    assert before.keys() == after.keys()
    for table in before:
        b, a = before[table], after[table]
        assert len(a) == len(b), table
        for old, new in zip(b, a, strict=True):
            assert new[: len(old)] == old, table
    for new in after["events"]:
        if len(new) > 9:
            assert new[9] == event_hash(*new[:9])
    if any(len(new) > 10 for new in after["events"]):  # revision 3 (derived rows need events)
        _assert_chained(after)


def _assert_chained(after: dict) -> None:  # type: ignore[type-arg]
    """Revision 3's row hashes and chain, recomputed from the rows alone (design §3-§4)."""
    bound: dict[int, list[list[bytes]]] = {}
    for i, (table, key) in enumerate(REV3_BOUND):
        at = COLUMNS[3][table].index(key)
        for r in after[table]:
            assert len(r) == len(COLUMNS[3][table]), table
            assert r[-1] == row_hash(table, r[:-1]), (table, r)
            bound.setdefault(r[at], [[], [], []])[i].append(r[-1])
    (meta,) = after["session_meta"]
    prev, last = genesis(meta[0]), 0
    for r in sorted(after["events"]):
        assert r[0] == last + 1 and r[10] == prev, r[0]
        assert r[11] == chain_hash(prev, r[9], bound.pop(r[0], [[], [], []])), r[0]
        prev, last = r[11], r[0]
    assert not bound, sorted(bound)  # every derived row bound to an event


def large_session(sessions_dir: Path, revision: int) -> tuple[str, Path]:
    """A session whose events carry 100 KB payloads (overflow chains)."""
    sid, path = make_session(sessions_dir, turns=2, revision=revision, status=None)
    w = SessionWriter.open(sessions_dir, sid, migrate=False)
    try:
        for i in range(4):
            w.emit(Event("tool_result", TOOL, bytes([65 + i]) * BIG))
        w.set_status("completed")
    finally:
        w.close()
    return sid, path


def wal_only_session(sessions_dir: Path, scratch: Path, revision: int) -> tuple[str, Path]:
    """A session whose committed rows are still only in its -wal (as after a kernel crash).

    Written with checkpoints off, then the file and its WAL are copied while the writer still
    has them open, the way a crash leaves them.
    """
    fsdir = scratch / "wal-src"
    fsdir.mkdir(mode=0o700, exist_ok=True)
    w = SessionWriter.create(fsdir, profile="coder", revision=revision)
    try:
        w.conn.execute("PRAGMA wal_autocheckpoint=0")
        for i in range(30):
            w.emit(Event("tool_result", TOOL, f"result {i} ".encode() * (50 + 40 * i)))
        w.emit(Event("tool_result", TOOL, b"Z" * BIG))
        for suffix in ("", "-wal"):
            src = paths.sidecar(w.path, suffix)
            dst = paths.sidecar(sessions_dir / w.path.name, suffix)
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o600)
    finally:
        w.close()
    return w.session_id, sessions_dir / w.path.name


def all_shapes(sessions_dir: Path, scratch: Path) -> dict[str, tuple[str, Path, int]]:
    """name -> (id, path, revision) for small, large and WAL-only files at every revision."""
    out = {}
    for rev in REVISIONS:
        sid, p = make_session(sessions_dir, turns=4, revision=rev)
        out[f"small-r{rev}"] = (sid, p, rev)
        sid, p = large_session(sessions_dir, rev)
        out[f"large-r{rev}"] = (sid, p, rev)
        sid, p = wal_only_session(sessions_dir, scratch, rev)
        out[f"wal-r{rev}"] = (sid, p, rev)
    return out


def set_pragma(path: Path, name: str, value: int) -> None:
    conn = apsw.Connection(str(path))
    try:
        conn.execute(f"PRAGMA {name}={int(value)}")
    finally:
        conn.close()


def foreign_file(sessions_dir: Path, session_id: str) -> Path:
    path = sessions_dir / f"{session_id}.sqlite"
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA application_id=305419896")
        conn.execute("PRAGMA user_version=1")
        conn.execute("CREATE TABLE notes(x)")
        conn.execute("INSERT INTO notes VALUES ('not a session')")
    finally:
        conn.close()
    os.chmod(path, 0o600)
    return path


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mode of every file in a directory."""
    return {p.name: (p.read_bytes(), os.stat(p).st_mode) for p in sorted(directory.iterdir())}


def job_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if paths.JOB_FILE_RE.fullmatch(p.name))
