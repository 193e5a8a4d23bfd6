"""Salvage engine 2: SQLite's own recovery extension (``.recover``), where the machine has it.

APSW's SQLite has no ``sqlite_dbpage``, and Debian bookworm's ``sqlite3`` 3.40.1 has a
``.recover`` that fails on damaged files for the same reason. So a shell is used only when it
proves itself: :func:`find_capable_shell` tries ``$AGENTDB_SQLITE3``, then ``sqlite3`` on
``PATH``, then the shell the test suite builds (``$AGENTDB_TOOLS_DIR`` or ``<repo>/.tools``), and
keeps the first that passes a self-test: a tiny events table with one leaf page zeroed must come
back with the other leaf's rows.

:func:`shell_salvage` runs ``.recover`` on a private copy of the file and its WAL (run on the
original it would checkpoint the WAL into it and delete the ``-wal``), with a time limit and a
cap on the output, loads the output into a scratch database under an authorizer
(:mod:`.shell_load`), and keeps only the rows that pass validation (:mod:`.shell_rows`).

Size: over 500 lines because it is one engine: finding a capable shell, proving it, running it
on a private copy and reading its output back; each step guards the next.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, fsutil
from agentdb.hashing import event_hash
from agentdb.salvage import shell_load, shell_rows
from agentdb.salvage.chainrows import ChainEvidence
from agentdb.salvage.scratch import Scratch
from agentdb.salvage.tables import AUTOINCREMENT_TABLES
from agentdb.schema.revisions import KNOWN_REVISION, TABLES

ENGINE = "sqlite-recover"
ENV_SHELL = "AGENTDB_SQLITE3"  # path of a capable sqlite3 shell; "none" turns engine 2 off
ENV_TOOLS = "AGENTDB_TOOLS_DIR"  # where the test suite builds its shell
TOOL_NAME = "sqlite3-dbpage"  # the built shell's file name inside the tools dir
RECOVER_COMMAND = ".recover --ignore-freelist"
_OFF = {"none", "off", "0", "no"}
_SELFTEST_TIMEOUT = 30.0
KNOWN = tuple(range(1, KNOWN_REVISION + 1))  # the revisions whose rows are read


@dataclass
class ShellSalvage:
    """What SQLite's ``.recover`` salvaged from one session file."""

    engine: str  # "sqlite-recover"
    # per table, revision-1 column order, validated, in key order: a list, or (given a store)
    # a mapping in the job's scratch database
    rows: dict[str, Any]
    lost_and_found_mapped: int  # rows taken from lost_and_found and mapped to a table by shape
    rejected: int  # rows that failed validation (not returned), index records included
    notes: list[str] = field(default_factory=list)  # what happened, one line each
    seconds: float = 0.0  # wall time of the whole salvage
    # events whose stored content_hash matched (as keys), each event's content hash
    hashed: MutableMapping[int, bool] = field(default_factory=dict)
    hashes: MutableMapping[int, bytes] = field(default_factory=dict)


# ---------------------------------------------------------------------------- detection


def default_tools_dir() -> Path | None:
    """``$AGENTDB_TOOLS_DIR``, else ``<repo>/.tools`` when running from a source checkout."""
    env = os.environ.get(ENV_TOOLS)
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[3]
    if (repo / "pyproject.toml").is_file() and (repo / "src" / "agentdb").is_dir():
        return repo / ".tools"
    return None


def _candidates(env_value: str | None, path_env: str, tools_dir: str | None) -> list[Path]:
    out: list[Path] = []
    if env_value:
        out.append(Path(env_value))
    found = shutil.which("sqlite3", path=path_env)
    if found:
        out.append(Path(found))
    if tools_dir:
        out.append(Path(tools_dir) / TOOL_NAME)
    return out


def find_capable_shell() -> Path | None:
    """The first sqlite3 shell whose ``.recover`` passes the self-test, or None.

    Order: ``$AGENTDB_SQLITE3`` (``none`` disables engine 2), ``sqlite3`` on ``PATH``, the
    test-built tool. Each candidate's self-test result is memoised per process (keyed by the
    file's path, mtime and size), so repeated calls cost a few ``stat`` calls.
    """
    env_value = os.environ.get(ENV_SHELL)
    if env_value is not None and env_value.strip().lower() in _OFF:
        return None
    tools = default_tools_dir()
    return _find(env_value, os.environ.get("PATH", os.defpath), str(tools) if tools else None)


def _find(env_value: str | None, path_env: str, tools_dir: str | None) -> Path | None:
    for cand in _candidates(env_value, path_env, tools_dir):
        if is_capable(cand):
            return cand
    return None


def is_capable(shell: Path) -> bool:
    """Whether ``shell`` runs and its ``.recover`` salvages a damaged file (memoised)."""
    shell = shell.absolute()
    try:
        st = os.stat(shell)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or not os.access(shell, os.X_OK):
        return False
    return _selftest(str(shell), st.st_ino, st.st_mtime_ns, st.st_size)


def selftest_problem(shell: Path) -> str | None:
    """Why ``shell`` fails the self-test, or None when it passes (not memoised)."""
    with fsutil.private_workdir("agentdb-selftest-") as tmp:
        return _run_selftest(shell.absolute(), tmp)


@functools.lru_cache(maxsize=32)
def _selftest(shell: str, _ino: int, _mtime_ns: int, _size: int) -> bool:
    return selftest_problem(Path(shell)) is None


_SELFTEST_ROWS = 40
_SELFTEST_DDL = (
    "CREATE TABLE events (sequence INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,"
    " timestamp TEXT NOT NULL, kind TEXT NOT NULL, producer_category TEXT NOT NULL,"
    " producer_name TEXT NOT NULL, producer_version TEXT NOT NULL,"
    " schema_version TEXT NOT NULL, payload BLOB NOT NULL)"
)


def _build_selftest_db(path: Path) -> int:
    """A small events table over several leaf pages; zero one leaf; return rows left intact."""
    conn = db.open_private(path)
    try:
        conn.execute("PRAGMA page_size=1024")
        conn.execute(_SELFTEST_DDL)
        with conn:
            for i in range(1, _SELFTEST_ROWS + 1):
                conn.execute(
                    "INSERT INTO events VALUES (?, ?, '2024-01-01T00:00:00.000Z', 'message',"
                    " 'model', 'selftest', '1.0.0', '1', ?)",
                    (i, f"selftest-{i:04d}", bytes([i % 256]) * 100),
                )
        leaves = [
            int(r[0])
            for r in conn.execute(
                "SELECT pageno FROM dbstat WHERE name='events' AND pagetype='leaf' ORDER BY pageno"
            )
        ]
        lost = conn.execute(
            "SELECT ncell FROM dbstat WHERE name='events' AND pageno=?", (leaves[0],)
        ).get
    finally:
        conn.close()
    with open(path, "r+b") as f:
        f.seek((leaves[0] - 1) * 1024)
        f.write(b"\0" * 1024)
    return _SELFTEST_ROWS - int(lost)


def _run_selftest(shell: Path, tmp: Path) -> str | None:
    db_path = tmp / "selftest.sqlite"
    expected = _build_selftest_db(db_path)
    out_path = tmp / "out.sql"
    try:
        rc, timed_out, _ = _run_recover(shell, db_path, out_path, tmp, _SELFTEST_TIMEOUT, 1 << 24)
    except OSError as e:
        return f"cannot run {shell}: {e}"
    if timed_out:
        return f"{shell}: .recover did not finish within {_SELFTEST_TIMEOUT:.0f}s"
    if rc != 0:
        return f"{shell}: .recover exited with status {rc} on a damaged file"
    conn = shell_load.open_scratch(tmp / "scratch.sqlite")
    try:
        shell_load.load(conn, out_path.read_text("utf-8", "surrogateescape"))
        got = conn.execute("SELECT count(*) FROM events WHERE id LIKE 'selftest-%'").get
    finally:
        conn.close()
    if got != expected:
        return f"{shell}: .recover returned {got} of the {expected} intact rows"
    return None


# ---------------------------------------------------------------------------- running


def _run_recover(
    shell: Path, db_path: Path, out_path: Path, home: Path, timeout: float, cap: int
) -> tuple[int | None, bool, bool]:
    """Run ``.recover`` on ``db_path`` writing to ``out_path``: (exit status, timed out, capped).

    The shell runs in ``-safe`` mode with no init file, with ``HOME`` pointing at our private
    directory (so no ``~/.sqliterc``), in its own process group, killed on timeout or when its
    output passes ``cap`` bytes.
    """
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "LC_ALL": "C"}
    cmd = [str(shell), "-safe", "-batch", "-init", os.devnull, str(db_path), RECOVER_COMMAND]
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=str(home),
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        step = 0.005
        try:
            while True:
                try:
                    rc = proc.wait(timeout=step)
                    return rc, False, os.fstat(out.fileno()).st_size > cap
                except subprocess.TimeoutExpired:
                    pass
                step = min(step * 2, 0.2)
                if os.fstat(out.fileno()).st_size > cap:
                    _kill(proc)
                    return None, False, True
                if time.monotonic() > deadline:
                    _kill(proc)
                    return None, True, False
        except BaseException:
            _kill(proc)
            raise


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)  # the group we started (start_new_session), by its id
    proc.wait()


def _copy(src: Path, dst: Path) -> int:
    """Copy a regular file (no symlink followed, no FIFO waited on); the copy is 0600 and new.
    Returns bytes copied."""
    fsutil.copy_regular(src, dst, fsync=False)
    return os.stat(dst).st_size


def _header_user_version(path: Path) -> int | None:
    fd = fsutil.open_regular(path)
    try:
        head = os.pread(fd, 100, 0)
    finally:
        os.close(fd)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\0"):
        return None
    return int.from_bytes(head[60:64], "big")


def default_output_cap(input_bytes: int) -> int:
    """Bytes of ``.recover`` output read at most: blobs print as hex, index records repeat."""
    return 8 * input_bytes + (16 << 20)


def shell_salvage(
    db_path: Path,
    wal_path: Path | None,
    session_id: str,
    workdir: Path,
    *,
    shell: Path | None = None,
    timeout: float = 600,
    output_cap: int | None = None,
    keep: Keep | None = None,
    store: Scratch | None = None,
    chain: ChainEvidence | None = None,
) -> ShellSalvage:
    """Run SQLite's ``.recover`` on a copy of ``db_path`` (and its WAL) and validate its rows.
    ``chain``: where a revision-3 record's stored hashes go (see :mod:`.chainrows`).

    Never touches ``db_path`` or ``wal_path``; everything it writes goes into a private
    directory under ``workdir``, removed before returning. A timeout or the output cap gives a
    note and whatever complete statements were printed until then.
    """
    t0 = time.monotonic()
    notes: list[str] = []
    empty: dict[str, list[tuple[object, ...]]] = {t: [] for t in TABLES}
    if shell is None:
        shell = find_capable_shell()
    if shell is None:
        notes.append("no sqlite3 shell with a working .recover (set $AGENTDB_SQLITE3)")
        return ShellSalvage(ENGINE, empty, 0, 0, notes, time.monotonic() - t0)
    shell = shell.absolute()
    priv = Path(tempfile.mkdtemp(prefix="agentdb-shell-", dir=workdir))  # 0700
    try:
        copy = priv / "copy.sqlite"
        size = _copy(db_path, copy)
        if wal_path is not None and os.path.lexists(wal_path):
            size += _copy(wal_path, priv / "copy.sqlite-wal")
        header_version = _header_user_version(copy)
        out_path = priv / "recover.sql"
        cap = output_cap if output_cap is not None else default_output_cap(size)
        rc, timed_out, capped = _run_recover(shell, copy, out_path, priv, timeout, cap)
        if timed_out:
            notes.append(f".recover did not finish within {timeout:g}s; partial output used")
        elif capped:
            notes.append(f".recover printed more than {cap} bytes; stopped, partial output used")
        elif rc != 0:
            notes.append(f".recover exited with status {rc}; its complete statements used")
        fd = fsutil.open_regular(out_path)
        try:
            conn = shell_load.open_scratch(priv / "scratch.sqlite")
            try:
                loaded = shell_load.load(conn, _pieces(fd, cap))
                taken = _Taken(keep, store, chain)
                result = _collect(conn, loaded, header_version, session_id, notes, taken)
            finally:
                conn.close()
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(priv, ignore_errors=True)
    result.seconds = time.monotonic() - t0
    return result


def _pieces(fd: int, cap: int, size: int = 1 << 18) -> Iterator[str]:
    """The first ``cap`` bytes of the output file as text, in pieces of about ``size`` bytes that
    each end at a line end (the last piece: wherever the output ends)."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    pos = 0
    rest = ""
    while pos < cap:
        data = os.pread(fd, min(size, cap - pos), pos)
        if not data:
            break
        pos += len(data)
        text = rest + decoder.decode(data)
        cut = text.rfind("\n") + 1
        if cut:
            yield text[:cut]
        rest = text[cut:]
    rest += decoder.decode(b"", final=True)
    if rest:
        yield rest


Keep = Callable[[tuple[object, ...]], tuple[object, ...]]


class _Taken:
    """The validated rows of one ``.recover`` run, by primary key: for an event, the content
    hash of its bytes is computed while they are in hand, then ``keep`` may move its long
    values into the job's scratch database."""

    def __init__(
        self, keep: Keep | None, store: Scratch | None = None, chain: ChainEvidence | None = None
    ) -> None:
        self.by_key = shell_rows.ByKey()
        self.keep = keep
        self.chain = chain  # a revision-3 record's stored hashes go here
        # events whose stored content_hash matched (seq -> True), each event's content hash
        self.hashed: MutableMapping[int, bool] = {}
        self.hashes: MutableMapping[int, bytes] = {}
        if store is not None:  # the rows go into the job's scratch database as they are taken
            self.keep = store.keep
            for t in AUTOINCREMENT_TABLES:
                self.by_key.rows[t] = store.map(f"shell_{t}")
            self.hashed, self.hashes = store.map("shell_hashed"), store.map("shell_hashes")

    def add_mapped(self, m: shell_rows.Mapped) -> bool:
        """Take a validated row whose stored hashes (if any) were checked against it: a
        revision-3 row's go to the chain evidence while its bytes are in hand."""
        assert m.table is not None and m.row is not None
        stored = m.stored if isinstance(m.stored, bytes) else None
        if self.chain is not None and stored is not None:
            if m.table == "events" and len(m.links) == 2 and None not in m.links:
                self.chain.see_event(m.row, stored, *m.links, checked=True)
            elif m.table != "events":
                self.chain.see_row(m.table, m.row, stored, checked=True)
        if m.table != "events":
            return self.add(m.table, m.row, False)
        return self.add(m.table, m.row, stored is not None, stored)

    def add(
        self, table: str, row: tuple[object, ...], stored_hash: bool, h: bytes | None = None
    ) -> bool:
        """Take ``row``; ``h``: its content hash when already known (a stored hash that was
        checked against these very bytes)."""
        if table == "events" and h is None:
            h = event_hash(*row)  # type: ignore[arg-type]
        kept = self.keep(row) if self.keep is not None else row
        if not self.by_key.add(table, kept):
            return False
        if h is not None:
            seq = int(row[0])  # type: ignore[call-overload]
            self.hashes[seq] = h
            if stored_hash:
                self.hashed[seq] = True
        return True


def _collect(
    conn: apsw.Connection,
    loaded: shell_load.LoadResult,
    header_version: int | None,
    session_id: str,
    notes: list[str],
    taken: _Taken,
) -> ShellSalvage:
    """Validate the scratch tables' rows, map lost_and_found, merge by primary key."""
    revision = loaded.user_version if loaded.user_version in KNOWN else header_version
    if revision not in KNOWN:
        revision = None
        notes.append("revision unknown (header unreadable): events accepted with or without hash")
    rejected = loaded.failed + loaded.denied
    for table in TABLES:
        for rowid, *values in shell_load.read_scratch(conn, table):
            rejected += not _take_scratch(table, rowid, values, revision, session_id, taken)
    mapped = 0
    reasons: dict[str, int] = {}
    for name in loaded.laf_tables:
        for _rowid, _root, _pgno, nfield, rid, *fields in shell_load.read_scratch(conn, name):
            m = shell_rows.map_lost_and_found(
                nfield, rid, fields, revision=revision, session_id=session_id
            )
            if m.table is None or m.row is None:
                rejected += 1
                reasons[m.reason] = reasons.get(m.reason, 0) + 1
            elif taken.add_mapped(m):
                mapped += 1
    rows = taken.by_key.as_lists()
    _describe(rows, loaded, mapped, reasons, taken.by_key.conflicts, notes)
    result = ShellSalvage(ENGINE, rows, mapped, rejected, notes, hashed=taken.hashed)
    result.hashes = taken.hashes
    return result


def _take_scratch(
    table: str,
    rowid: object,
    values: list[object],
    revision: int | None,
    session_id: str,
    taken: _Taken,
) -> bool:
    """Take one row of a scratch table (revision-3 columns); False when it fails validation.
    A stored hash was checked against the row's bytes, so it goes along as verified."""
    if table == "events":
        row = shell_rows.event_from_scratch(rowid, values, revision=revision, session_id=session_id)
        if row is None:
            return False
        stored, links = values[9], tuple(values[10:12])
        taken.add_mapped(shell_rows.Mapped(table, row, stored=stored, links=links))
        return True
    got: tuple[tuple[object, ...], object] | None
    if table == "session_meta":
        row = shell_rows.validate(table, values, session_id=session_id)
        got = None if row is None else (row, None)
    else:
        got = shell_rows.derived_from_scratch(table, values, session_id=session_id)
    if got is None:
        return False
    taken.add_mapped(shell_rows.Mapped(table, got[0], stored=got[1]))
    return True


def _describe(
    rows: dict[str, Any],
    loaded: shell_load.LoadResult,
    mapped: int,
    reasons: dict[str, int],
    conflicts: int,
    notes: list[str],
) -> None:
    found = ", ".join(f"{t} {len(r)}" for t, r in rows.items())
    notes.append(f"rows found: {found}")
    if loaded.laf_tables:
        extra = "".join(f", {k} {v}" for k, v in sorted(reasons.items()))
        notes.append(f"lost_and_found: {mapped} rows mapped by shape{extra}")
    if loaded.denied:
        notes.append(f"{loaded.denied} statements refused by the authorizer (never executed)")
    if loaded.failed:
        notes.append(f"{loaded.failed} INSERT statements failed (unknown columns or bad text)")
    if conflicts:
        notes.append(f"{conflicts} rows disagreed with another row of the same key")
    skipped_ddl = {k: v for k, v in loaded.skipped.items() if not k.startswith("PRAGMA")}
    if loaded.other_tables:
        listed = ", ".join(f"{k} {v}" for k, v in sorted(loaded.other_tables.items()))
        notes.append(f"rows of tables that are not ours, ignored: {listed}")
    if skipped_ddl:
        listed = ", ".join(f"{k} x{v}" for k, v in sorted(skipped_ddl.items()))
        notes.append(f"not executed from the file: {listed}")
