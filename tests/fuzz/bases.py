"""Undamaged session files for the damage generator, written by agentdb's own writer.

One base per (revision, WAL or not, short or long, plain or auto_vacuum layout), built on first
use and cached in a directory. Each holds 20 KB payloads (overflow chains), a freelist (a scratch
table created and dropped between the two halves of the session), and an earlier snapshot of the
main file taken between the halves (for lost writes). A WAL base is copied while its writer
still has the second half only in its ``-wal``. Revision 1 is the pre-migration layout, written
by ``SessionWriter.create(revision=1)`` and reopened without migrating; revision 3 (the
damage-evident revision) by ``SessionWriter.create(revision=3)``, with every committed state a
damage can bring back whole recorded as a digest (:attr:`Base.earlier`).
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from agentdb.jobs import demo
from agentdb.store import Event, Producer, SessionWriter
from tests.fuzz import oracle

BIG = Producer("tool", "fetch", "1.0.0")
SIZES = {"short": (3, 3), "long": (40, 6)}  # (model turns per half, 20 KB payloads)


@dataclass
class Base:
    """One undamaged session file and what the generator needs to know about it."""

    session_id: str
    path: Path  # the session file; its -wal beside it for a WAL base
    snapshot: Path  # the main file as it was between the two halves
    page_size: int
    pages: dict[str, list[int]]  # b-tree (table or index) name -> its pages (all types)
    chains: list[list[int]]  # the overflow chains of events, each in chain order
    text_columns: list[tuple[str, str]]  # (table, column) of every TEXT column
    rows: oracle.Rows  # every row of every table, committed state
    history: oracle.Rows  # every version of every row any earlier commit held (rows included)
    indexes: set[str] = field(default_factory=set)
    # revision 3: every table as committed last (TABLES and CHAIN_TABLES), and the digest of
    # each earlier committed state a damage can bring back whole (the snapshot, the file between
    # the halves, each commit of a WAL base's -wal) -> its name: a file presenting one of those
    # is a consistent rollback (design §1: out of scope)
    state: oracle.Rows | None = None
    earlier: dict[str, str] = field(default_factory=dict)

    def btree_pages(self) -> list[int]:
        return sorted({p for ps in self.pages.values() for p in ps})

    def index_pages(self) -> list[int]:
        return sorted({p for n in self.indexes for p in self.pages.get(n, [])})


def _payload(i: int) -> bytes:
    return random.Random(i).randbytes(20_000)


def _half(w: SessionWriter, turns: int, bigs: int, seed: int) -> None:
    demo._turns(w, demo.MODEL_OLD, turns, seed=seed)
    for i in range(bigs):
        w.emit(Event("tool_result", BIG, _payload(seed * 100 + i)))


def _freelist(path: Path) -> None:
    conn = apsw.Connection(str(path))
    try:
        conn.execute(
            "CREATE TABLE scratch(x); INSERT INTO scratch VALUES (randomblob(30000)); "
            "INSERT INTO scratch VALUES (randomblob(30000)); DROP TABLE scratch;"
        ).fetchall()
    finally:
        conn.close()


def _build(into: Path, revision: int, wal: bool, size: str) -> tuple[str, Path, Path, list[Path]]:
    """The session in three parts: part 1a, a snapshot (for lost writes), part 1b and a
    freelist, then part 2 (only in the -wal for a WAL base). Returns the states each part
    committed, for the history of every row."""
    turns, bigs = SIZES[size]
    work = into / "writer"
    w = SessionWriter.create(work, profile="coder", revision=revision)
    _half(w, turns // 2, bigs // 3 or 1, seed=1)
    sid, path = w.session_id, w.path
    w.close()
    snapshot = into / "snapshot.sqlite"
    shutil.copyfile(path, snapshot)
    w = SessionWriter.open(work, sid, migrate=False)
    _half(w, turns - turns // 2, bigs // 3, seed=3)
    w.close()
    _freelist(path)
    first = into / "first.sqlite"
    shutil.copyfile(path, first)
    w = SessionWriter.open(work, sid, migrate=False)
    dst = into / path.name
    rest = bigs - bigs // 3 - (bigs // 3 or 1)
    if wal:
        w.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        w.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
        _half(w, turns, rest, seed=2)
        w.set_status("completed")
        shutil.copyfile(path, dst)
        shutil.copyfile(path.with_name(path.name + "-wal"), dst.with_name(dst.name + "-wal"))
        w.close()
    else:
        _half(w, turns, rest, seed=2)
        w.set_status("completed")
        w.close()
        shutil.copyfile(path, dst)
    shutil.rmtree(work)
    return sid, dst, snapshot, [snapshot, first]


def _wal_states(path: Path, into: Path) -> dict[str, str]:
    """The digest of each state the main file and a prefix of its -wal ending at a commit frame
    present (the main file alone included) -> its name."""
    wal = path.with_name(path.name + "-wal")
    out: dict[str, str] = {}
    alone = oracle.read_state(path, ())
    if alone is not None:
        out[oracle.state_digest(alone)] = "the main file without its -wal"
    if not wal.is_file():
        return out
    data = wal.read_bytes()
    if len(data) < 32:
        return out
    ps = int.from_bytes(data[8:12], "big")
    work = into / "walstates"
    work.mkdir()
    off, n = 32, 0
    while off + 24 + ps <= len(data):
        end = off + 24 + ps
        if int.from_bytes(data[off + 4 : off + 8], "big"):
            n += 1
            shutil.copyfile(path, work / path.name)
            (work / (path.name + "-wal")).write_bytes(data[:end])
            st = oracle.read_state(work / path.name, ("-wal",))
            if st is not None:
                out.setdefault(oracle.state_digest(st), f"commit {n} of the -wal")
        off = end
    shutil.rmtree(work)
    return out


def _autovacuum(path: Path) -> None:
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA journal_mode=DELETE").fetchall()
        conn.execute("PRAGMA auto_vacuum=FULL").fetchall()
        conn.execute("VACUUM").fetchall()
        conn.execute("PRAGMA journal_mode=WAL").fetchall()
    finally:
        conn.close()


def _layout(path: Path) -> tuple[int, dict[str, list[int]], set[str], list[tuple[str, str]]]:
    conn = apsw.Connection(
        f"file:{path.absolute()}?immutable=1",
        flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
    )
    try:
        ps = int(conn.execute("PRAGMA page_size").fetchone()[0])
        pages: dict[str, list[int]] = {}
        for name, pg in conn.execute(
            "SELECT name, pageno FROM dbstat WHERE pagetype IN ('leaf', 'internal') ORDER BY pageno"
        ):
            pages.setdefault(name, []).append(int(pg))
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='index'")}
        texts = [
            (t, c)
            # revisions 1 and 2 have no session_chain; chain_gaps is empty in every base
            for t in (*oracle.TABLES, "session_chain")
            for _, c, typ, *_ in conn.execute(f"PRAGMA table_info({t})")
            if str(typ).upper() == "TEXT"
        ]
        return ps, pages, indexes, texts
    finally:
        conn.close()


def _chains(path: Path, ps: int) -> list[list[int]]:
    conn = apsw.Connection(
        f"file:{path.absolute()}?immutable=1",
        flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
    )
    try:
        ovf = [
            int(r[0])
            for r in conn.execute(
                "SELECT pageno FROM dbstat WHERE name='events' AND pagetype='overflow'"
            )
        ]
    finally:
        conn.close()
    with open(path, "rb") as f:  # each page's first 4 bytes, not the file whole (it may be large)
        nxt = {p: int.from_bytes(os.pread(f.fileno(), 4, (p - 1) * ps), "big") for p in ovf}
    out = []
    for head in sorted(set(ovf) - set(nxt.values())):
        chain, p = [], head
        while p and p in nxt and p not in chain:
            chain.append(p)
            p = nxt[p]
        out.append(chain)
    return out


def describe(path: Path, session_id: str) -> Base:
    """What the generator's damage kinds need to know of any undamaged session file (its page
    map, overflow chains and TEXT columns), for damaging files it did not build (the cost
    benchmark's large sessions). No rows are read and the snapshot is the file itself, so
    ``stale_page`` has nothing to apply there."""
    ps, pages, indexes, texts = _layout(path)
    empty = oracle.Rows({}, {t: set() for t in oracle.TABLES})
    return Base(session_id, path, path, ps, pages, _chains(path, ps), texts, empty, empty, indexes)


class Bases:
    """Builds each base once, in ``root``, and the foreign WALs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[tuple[int, bool, str, str], Base] = {}
        self._foreign: dict[int, bytes] = {}
        self._others: dict[tuple[str, int, str, str], tuple[Path, dict[str, list[int]]]] = {}

    def get(self, revision: int, wal: bool, size: str, layout: str) -> Base:
        key = (revision, wal, size, layout)
        if key not in self._cache:
            d = self.root / f"r{revision}-{'wal' if wal else 'nowal'}-{size}-{layout}"
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
            sid, path, snapshot, states = _build(d, revision, wal, size)
            if layout == "autovacuum":
                _autovacuum(path)
            ps, pages, indexes, texts = _layout(path)
            rows = oracle.read_rows(path)
            history = oracle.Rows(rows.columns, {t: set(r) for t, r in rows.rows.items()})
            for state in states:
                older = oracle.read_rows(state, rows.columns)
                for t in oracle.TABLES:
                    history.rows[t] |= older.rows[t]
            state, earlier = None, {}
            if revision >= 3:
                state = oracle.read_state(path)
                if state is None:
                    raise RuntimeError(
                        f"{path}: the undamaged revision-{revision} base is unreadable"
                    )
                for name, p in zip(
                    ("the snapshot", "the file between the halves"), states, strict=True
                ):
                    older = oracle.read_state(p, ())
                    if older is not None:
                        earlier.setdefault(oracle.state_digest(older), name)
                earlier.update(_wal_states(path, d))
                earlier.pop(oracle.state_digest(state), None)
            self._cache[key] = Base(
                sid,
                path,
                snapshot,
                ps,
                pages,
                _chains(path, ps),
                texts,
                rows,
                history,
                indexes,
                state,
                earlier,
            )
        return self._cache[key]

    def other_session(
        self, revision: int, size: str, layout: str
    ) -> tuple[Path, dict[str, list[int]]]:
        """Another session's file built as the bases are (same schema, revision, size and
        layout: the same tables on pages in the same places, other ids and chain), and its
        b-tree pages by name; for the damage kinds that put another session's bytes inside a
        session (a leaf, the session_meta page, a hot journal)."""
        key = ("other", revision, size, layout)
        if key not in self._others:
            d = self.root / f"other-r{revision}-{size}-{layout}"
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
            _, path, _, _ = _build(d, revision, False, size)
            if layout == "autovacuum":
                _autovacuum(path)
            self._others[key] = (path, _layout(path)[1])
        return self._others[key]

    def foreign_wal(self, which: int) -> bytes:
        """0: another session's -wal holding commits; 1: the -wal of a 1024-byte-page db."""
        if which not in self._foreign:
            d = self.root / f"foreign{which}"
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
            if which == 0:
                w = SessionWriter.create(d, profile="coder")
                demo._turns(w, demo.MODEL_OLD, 2, seed=5)
                w.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                w.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
                demo._turns(w, demo.MODEL_CACHED, 4, seed=6)
                w.set_status("completed")
                data = w.path.with_name(w.path.name + "-wal").read_bytes()
                w.close()
            else:
                p = d / "small.db"
                conn = apsw.Connection(str(p))
                conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
                conn.execute(
                    "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
                    " CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(5000))"
                ).fetchall()
                data = p.with_name(p.name + "-wal").read_bytes()
                conn.close()
            self._foreign[which] = data
        return self._foreign[which]
