"""The damage generator of issue 10: seeded, replayable damage of real session files.

A :class:`Case` is a printable description — revision, WAL or not, session length, layout and a
list of ``kind/subseed`` damages — and everything it does is a pure function of that text and of
the base files, which agentdb's own writer builds (:mod:`tests.fuzz.bases`). ``Case.from_seed``
draws a case from one integer; ``Case.parse(str(case))`` gives it back, so a failure is replayed
from one line::

    python -m tests.fuzz.generator --case 'rev=1 wal=1 size=short layout=plain \
        damages=truncate_main/7'

Each damage kind draws from its own ``random.Random(subseed)`` and finds its targets in the
undamaged file's page map, so dropping one damage of a combination leaves the others exactly as
they were: :func:`shrink` removes damages one at a time while the failure stays.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import apsw

from tests.fuzz.bases import Base, Bases
from tests.fuzz.damage import SECTOR
from tests.rows import read_at, write_at

KILL_MID_TRANSACTION = r"""
import os, sys, apsw
c = apsw.Connection(sys.argv[1])
c.execute("PRAGMA cache_size=2")
c.execute("PRAGMA ignore_check_constraints=ON")
c.execute("BEGIN")
c.execute(sys.argv[2])
os.kill(os.getpid(), 9)
"""

HOT_STATEMENTS = (
    "UPDATE events SET payload = randomblob(length(payload) + 500) WHERE sequence % {m} = 0",
    "DELETE FROM events WHERE sequence > {n}",
    "UPDATE cost_ledger SET model_id = hex(randomblob(700))",
    "INSERT INTO events(sequence, id, timestamp, kind, producer_category, producer_name, "
    "producer_version, schema_version, payload) SELECT sequence + 100000, id || 'x', timestamp, "
    "kind, producer_category, producer_name, producer_version, schema_version, payload "
    "FROM events",
    "UPDATE session_meta SET profile = hex(randomblob(3000))",
)
# Revision 3 (its events carry prev_hash and chain_hash, NOT NULL): the same statements, the
# killed INSERT copying every column, so it writes as much as it does at revisions 1 and 2.
HOT_STATEMENTS_REV3 = (
    *HOT_STATEMENTS[:3],
    "INSERT INTO events(sequence, id, timestamp, kind, producer_category, producer_name, "
    "producer_version, schema_version, payload, content_hash, prev_hash, chain_hash) SELECT "
    "sequence + 100000, id || 'x', timestamp, kind, producer_category, producer_name, "
    "producer_version, schema_version, payload, content_hash, prev_hash, chain_hash FROM events",
    *HOT_STATEMENTS[4:],
)


class NotApplicable(Exception):
    """This kind has nothing to damage in this base (e.g. no overflow chain long enough)."""


@dataclass
class Target:
    """The files one case damages, and what is known about them undamaged."""

    path: Path  # the session file (a copy)
    base: Base
    foreign_wal: Callable[[int], bytes]  # another database's WAL, same (0) or other (1) page size
    bases: Bases | None = None  # for another session's file (the FOREIGN kinds)

    @property
    def wal(self) -> Path:
        return self.path.with_name(self.path.name + "-wal")

    @property
    def ps(self) -> int:
        return self.base.page_size

    def npages(self) -> int:
        return max(1, os.stat(self.path).st_size // self.ps)

    def page(self, rng: random.Random, *, btree: float = 0.75) -> int:
        """A page number: mostly a b-tree page of the undamaged layout, sometimes any page."""
        pages = [p for p in self.base.btree_pages() if p <= self.npages()]
        if pages and rng.random() < btree:
            return rng.choice(pages)
        return rng.randrange(1, self.npages() + 1)


Kind = Callable[[Target, random.Random], str]


def _flip(path: Path, offset: int, mask: int) -> None:
    b = read_at(path, offset, 1)
    if b:
        write_at(path, offset, bytes([b[0] ^ mask]))


def byte_flip(t: Target, rng: random.Random) -> str:
    path = t.wal if t.wal.exists() and rng.random() < 0.3 else t.path
    size = os.stat(path).st_size
    n = rng.choice((1, 1, 2, 4, 16))
    offs = sorted(rng.randrange(size) for _ in range(n))
    for o in offs:
        _flip(path, o, rng.randrange(1, 256))
    return f"{path.name[-4:]} flips at {offs[:4]}{'...' if n > 4 else ''}"


def _sector(t: Target, rng: random.Random, data: Callable[[], bytes]) -> str:
    pg = t.page(rng)
    sector = rng.randrange(t.ps // SECTOR)
    write_at(t.path, (pg - 1) * t.ps + sector * SECTOR, data())
    return f"page {pg} sector {sector}"


def zero_sector(t: Target, rng: random.Random) -> str:
    return _sector(t, rng, lambda: bytes(SECTOR))


def random_sector(t: Target, rng: random.Random) -> str:
    return _sector(t, rng, lambda: rng.randbytes(SECTOR))


def zero_page(t: Target, rng: random.Random) -> str:
    pg = t.page(rng)
    write_at(t.path, (pg - 1) * t.ps, bytes(t.ps))
    return f"page {pg}"


def random_page(t: Target, rng: random.Random) -> str:
    pg = t.page(rng)
    write_at(t.path, (pg - 1) * t.ps, rng.randbytes(t.ps))
    return f"page {pg}"


def page_swap(t: Target, rng: random.Random) -> str:
    a, b = t.page(rng), t.page(rng)
    if a == b:
        raise NotApplicable("one page")
    da, db = read_at(t.path, (a - 1) * t.ps, t.ps), read_at(t.path, (b - 1) * t.ps, t.ps)
    write_at(t.path, (a - 1) * t.ps, db)
    write_at(t.path, (b - 1) * t.ps, da)
    return f"pages {a}<->{b}"


def stale_page(t: Target, rng: random.Random) -> str:
    """Lost writes: 1-3 pages go back to their content in an earlier snapshot of the file."""
    old = t.base.snapshot.read_bytes()
    changed = [
        p
        for p in range(1, len(old) // t.ps + 1)
        if p <= t.npages()
        and old[(p - 1) * t.ps : p * t.ps] != read_at(t.path, (p - 1) * t.ps, t.ps)
    ]
    if not changed:
        raise NotApplicable("no page changed since the snapshot")
    pages = sorted(rng.sample(changed, min(len(changed), rng.choice((1, 1, 2, 3)))))
    for p in pages:
        write_at(t.path, (p - 1) * t.ps, old[(p - 1) * t.ps : p * t.ps])
    return f"pages {pages} from the earlier snapshot"


def truncate_main(t: Target, rng: random.Random) -> str:
    size = os.stat(t.path).st_size
    at = rng.randrange(size)
    if rng.random() < 0.3:
        at -= at % t.ps
    os.truncate(t.path, at)
    return f"at {at} of {size}"


def truncate_wal(t: Target, rng: random.Random) -> str:
    size = os.stat(t.wal).st_size
    at = rng.randrange(size)
    os.truncate(t.wal, at)
    return f"-wal at {at} of {size}"


def foreign_wal(t: Target, rng: random.Random) -> str:
    which = 0 if rng.random() < 0.7 else 1
    t.wal.write_bytes(t.foreign_wal(which))
    os.chmod(t.wal, 0o600)
    return "another session's -wal" if which == 0 else "-wal of a 1024-byte-page database"


def _wal_frames(t: Target) -> list[tuple[int, bool]]:
    """(offset, is commit) of every whole frame of the -wal."""
    data = t.wal.read_bytes()
    if len(data) < 32:
        return []
    ps = int.from_bytes(data[8:12], "big") or t.ps
    out, off = [], 32
    while off + 24 + ps <= len(data):
        out.append((off, int.from_bytes(data[off + 4 : off + 8], "big") != 0))
        off += 24 + ps
    return out


def wal_checksum(t: Target, rng: random.Random) -> str:
    commits = [o for o, c in _wal_frames(t) if c]
    if not commits:
        raise NotApplicable("no commit frame")
    o = rng.choice(commits)
    where = o + rng.choice((16, 20, 24 + rng.randrange(t.ps)))
    _flip(t.wal, where, rng.randrange(1, 256))
    return f"commit frame at {o}, byte {where - o}"


def _chains(t: Target, n: int) -> list[list[int]]:
    chains = [c for c in t.base.chains if len(c) >= 3]
    if len(chains) < n:
        raise NotApplicable("no overflow chain")
    return chains


def overflow_loop(t: Target, rng: random.Random) -> str:
    chain = rng.choice(_chains(t, 1))
    at = rng.randrange(1, len(chain))
    back = rng.randrange(0, at + 1)
    write_at(t.path, (chain[at] - 1) * t.ps, chain[back].to_bytes(4, "big"))
    return f"{chain[at]} -> {chain[back]}"


def overflow_cross(t: Target, rng: random.Random) -> str:
    a, b = rng.sample(_chains(t, 2), 2)
    at, into = rng.randrange(0, len(a) - 1), rng.randrange(1, len(b))
    write_at(t.path, (a[at] - 1) * t.ps, b[into].to_bytes(4, "big"))
    return f"{a[at]} -> {b[into]}"


def overflow_out(t: Target, rng: random.Random) -> str:
    chain = rng.choice(_chains(t, 1))
    at = rng.randrange(0, len(chain) - 1)
    to = rng.choice((t.npages() + 1 + rng.randrange(50), 2**32 - 1, 0))
    write_at(t.path, (chain[at] - 1) * t.ps, to.to_bytes(4, "big"))
    return f"{chain[at]} -> {to}"


def freelist_trunk(t: Target, rng: random.Random) -> str:
    live = t.base.btree_pages()
    trunk = int.from_bytes(read_at(t.path, 32, 4), "big")
    listed = sorted(rng.sample(live, min(len(live), rng.randrange(1, 6))))
    nxt = rng.choice((0, rng.choice(live), 999_999))
    body = nxt.to_bytes(4, "big") + len(listed).to_bytes(4, "big")
    body += b"".join(p.to_bytes(4, "big") for p in listed)
    if 1 < trunk <= t.npages():
        write_at(t.path, (trunk - 1) * t.ps, body)
        return f"trunk {trunk} lists live {listed}, next {nxt}"
    target = rng.choice(live)  # no freelist: the header names a live page as the trunk
    write_at(t.path, 32, target.to_bytes(4, "big") + rng.randrange(1, 50).to_bytes(4, "big"))
    return f"header trunk -> live page {target}"


HEADER_FIELDS = {  # name: (offset, length)
    "page_size": (16, 2),
    "reserved": (20, 1),
    "page_count": (28, 4),
    "freelist": (32, 8),
    "schema_cookie": (40, 4),
    "schema_format": (44, 4),
    "text_encoding": (56, 4),
    "vacuum_fields": (52, 4),
    "user_version": (60, 4),
    "application_id": (68, 4),
    "version_valid_for": (92, 8),
}


def header_garbage(t: Target, rng: random.Random) -> str:
    names = rng.sample(sorted(HEADER_FIELDS), rng.choice((1, 1, 2)))
    for name in names:
        off, n = HEADER_FIELDS[name]
        write_at(t.path, off, rng.randbytes(n))
    return "+".join(names)


def _btree_header(t: Target, pg: int) -> int:
    return 100 if pg == 1 else 0


def cell_pointers(t: Target, rng: random.Random) -> str:
    pg = t.page(rng, btree=1.0)
    base = (pg - 1) * t.ps + _btree_header(t, pg)
    kind = read_at(t.path, base, 1)
    hdr = 12 if kind in (b"\x02", b"\x05") else 8
    n = rng.randrange(2, 65)
    write_at(t.path, base + hdr + rng.randrange(0, 16) * 2, rng.randbytes(n))
    return f"page {pg}, {n} bytes"


def index_and_table(t: Target, rng: random.Random) -> str:
    idx = t.base.index_pages()
    tab = t.base.pages.get("events", [])
    if not idx or not tab:
        raise NotApplicable("no index page")
    out = []
    for pg in (rng.choice(idx), rng.choice(tab)):
        sector = rng.randrange(t.ps // SECTOR)
        data = bytes(SECTOR) if rng.random() < 0.5 else rng.randbytes(SECTOR)
        write_at(t.path, (pg - 1) * t.ps + sector * SECTOR, data)
        out.append(f"{pg}/{sector}")
    return "index+table sectors " + ",".join(out)


def ptrmap(t: Target, rng: random.Random) -> str:
    if int.from_bytes(read_at(t.path, 52, 4), "big") == 0:
        raise NotApplicable("not auto_vacuum")
    per = t.ps // 5
    maps = [p for p in range(2, t.npages() + 1, per + 1)]
    pg = rng.choice(maps)
    if rng.random() < 0.3:
        write_at(t.path, (pg - 1) * t.ps, bytes(t.ps))
        return f"ptrmap page {pg} zeroed"
    n = rng.randrange(1, 8)
    for _ in range(n):
        e = rng.randrange(per)
        write_at(t.path, (pg - 1) * t.ps + e * 5, rng.randbytes(5))
    return f"ptrmap page {pg}, {n} entries"


def hot_journal(t: Target, rng: random.Random) -> str:
    """The file goes to DELETE mode, then a writer is killed -9 inside a transaction."""
    conn = apsw.Connection(str(t.path))
    try:
        conn.execute("PRAGMA journal_mode=DELETE").fetchall()
    finally:
        conn.close()
    statements = HOT_STATEMENTS_REV3 if t.base.state is not None else HOT_STATEMENTS
    sql = rng.choice(statements).format(m=rng.randrange(2, 6), n=rng.randrange(1, 60))
    p = subprocess.run(
        [sys.executable, "-c", KILL_MID_TRANSACTION, str(t.path), sql],
        capture_output=True,
        timeout=60,
    )
    journal = t.path.with_name(t.path.name + "-journal")
    if p.returncode != -9 or not journal.exists() or journal.stat().st_size == 0:
        raise NotApplicable(f"no hot journal ({p.returncode}: {p.stderr[-200:]!r})")
    return sql.split(" WHERE")[0][:40]


def hot_journal_torn(t: Target, rng: random.Random) -> str:
    """A hot journal (:func:`hot_journal`) then cut short after the killed write, its header
    kept (a journal whose header is gone is no hot journal: nothing could tell its file's
    uncommitted pages): the storage lost the journal's tail though the database's overwritten
    pages reached the disk (an ordering the disk did not keep)."""
    done = hot_journal(t, rng)
    journal = t.path.with_name(t.path.name + "-journal")
    n = journal.stat().st_size
    at = min(rng.choice((28, 512, rng.randrange(28, n))), n - 1)
    os.truncate(journal, at)
    return f"{done}; journal cut at {at} of {n}"


INVALID = (b"\xc3\x28", b"\xff", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80", b"\x80")


def invalid_utf8(t: Target, rng: random.Random) -> str:
    """One TEXT value of one row becomes invalid UTF-8 (written through SQLite, constraints
    off; a WAL stays a WAL: the change is one more commit in it)."""
    table, column = rng.choice(t.base.text_columns)
    conn = apsw.Connection(str(t.path))
    try:
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.execute("PRAGMA ignore_check_constraints=ON").fetchall()
        rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM {table}")]
        if not rowids:
            raise NotApplicable(f"{table} is empty")
        rowid = rng.choice(rowids)
        raw = b"ok" + rng.choice(INVALID) + b"tail"
        conn.execute(
            f"UPDATE {table} SET {column} = CAST(? AS TEXT) WHERE rowid = ?", (raw, rowid)
        ).fetchall()
    finally:
        conn.close()
    shm = t.path.with_name(t.path.name + "-shm")
    if shm.exists():
        shm.unlink()
    return f"{table}.{column} rowid {rowid}"


def _changed(v: object, rng: random.Random) -> object:
    """Another value of the same type, as a hand edit would write it."""
    if isinstance(v, bool) or v is None:
        return 0
    if isinstance(v, int):
        return v + rng.choice((1, -1, 1000))
    if isinstance(v, float):
        return v * 2 + 0.25
    if isinstance(v, str):
        if not v:
            return "x"
        i = rng.randrange(len(v))
        return v[:i] + ("y" if v[i] != "y" else "z") + v[i + 1 :]
    if isinstance(v, bytes):
        if not v:
            return b"x"
        i = rng.randrange(len(v))
        return v[:i] + bytes([v[i] ^ rng.randrange(1, 256)]) + v[i + 1 :]
    return 0


EDITED = ("events", "session_meta", "cost_ledger", "plan_items", "producers", "session_chain")


def sql_edit(t: Target, rng: random.Random) -> str:
    """A naive edit through SQLite that recomputes no hash, what revision 3 promises to show
    (design §1): one value changed in a row of any table, a row deleted, the last events cut
    with the head left (their bound rows with them, or not), the head row deleted, two events'
    payloads swapped. Constraints off; a WAL stays a WAL (the edit is one more commit in it).
    Revision 3 only (drawn for it alone)."""
    conn = apsw.Connection(str(t.path))
    try:
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.execute("PRAGMA ignore_check_constraints=ON").fetchall()
        what = rng.choice(("value", "value", "value", "delete", "cut_tail", "head", "swap"))
        seqs = [int(r[0]) for r in conn.execute("SELECT sequence FROM events ORDER BY sequence")]
        if what == "value":
            tables = [x for x in EDITED if conn.execute(f"SELECT 1 FROM {x} LIMIT 1").fetchall()]
            table = rng.choice(tables)
            cols = [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]
            column = rng.choice(cols[1:])  # not the key: a changed key is another row
            rowids = [int(r[0]) for r in conn.execute(f"SELECT rowid FROM {table}")]
            rowid = rng.choice(rowids)
            (v,) = conn.execute(f'SELECT "{column}" FROM {table} WHERE rowid = ?', (rowid,))
            new = _changed(v[0], rng)
            conn.execute(f'UPDATE {table} SET "{column}" = ? WHERE rowid = ?', (new, rowid))
            done = f"{table}.{column} rowid {rowid} changed"
        elif what == "delete":
            tables = [
                x for x in EDITED[:5] if conn.execute(f"SELECT 1 FROM {x} LIMIT 1").fetchall()
            ]
            table = rng.choice([x for x in tables if x != "session_meta"] or tables)
            rowids = [int(r[0]) for r in conn.execute(f"SELECT rowid FROM {table}")]
            rowid = rng.choice(rowids)
            conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
            done = f"{table} rowid {rowid} deleted"
        elif what == "cut_tail":
            if len(seqs) < 2:
                raise NotApplicable("fewer than two events")
            k = rng.randrange(1, min(10, len(seqs) - 1) + 1)
            cut = seqs[-k - 1]
            conn.execute("DELETE FROM events WHERE sequence > ?", (cut,))
            bound = rng.random() < 0.5
            if bound:
                for table, col in (
                    ("cost_ledger", "event_sequence"),
                    ("plan_items", "event_sequence"),
                    ("producers", "first_seen_sequence"),
                ):
                    conn.execute(f"DELETE FROM {table} WHERE {col} > ?", (cut,))
            done = f"last {k} events cut{' with their bound rows' if bound else ''}, head left"
        elif what == "head":
            conn.execute("DELETE FROM session_chain")
            done = "the head row deleted"
        else:
            if len(seqs) < 2:
                raise NotApplicable("fewer than two events")
            a, b = sorted(rng.sample(seqs, 2))
            conn.execute(
                "UPDATE events SET payload = CASE sequence WHEN ?1 THEN "
                "(SELECT payload FROM events WHERE sequence = ?2) ELSE "
                "(SELECT payload FROM events WHERE sequence = ?1) END "
                "WHERE sequence IN (?1, ?2)",
                (a, b),
            )
            done = f"payloads of events {a} and {b} swapped"
    finally:
        conn.close()
    shm = t.path.with_name(t.path.name + "-shm")
    if shm.exists():
        shm.unlink()
    return done


def _leaf_pages(path: Path, pages: list[int], ps: int) -> list[int]:
    """The table-leaf pages (type byte 13) among ``pages`` of the file at ``path``."""
    out = []
    for pg in pages:
        b = read_at(path, (pg - 1) * ps + (100 if pg == 1 else 0), 1)
        if b == b"\x0d":
            out.append(pg)
    return out


def _other(t: Target) -> tuple[Path, dict[str, list[int]]]:
    if t.bases is None:
        raise NotApplicable("no other session's file at hand")
    # the base's directory names it: r<revision>-<wal|nowal>-<size>-<layout>
    rev, _wal, size, layout = t.base.path.parent.name.split("-")
    return t.bases.other_session(int(rev[1:]), size, layout)


def _copy_leaf(t: Target, rng: random.Random, table: str) -> str:
    other, pages = _other(t)
    mine = _leaf_pages(t.path, [p for p in t.base.pages.get(table, []) if p <= t.npages()], t.ps)
    theirs = _leaf_pages(other, pages.get(table, []), t.ps)
    if not mine or not theirs:
        raise NotApplicable(f"no {table} leaf")
    i = rng.randrange(len(mine))
    dst = mine[i]
    src = theirs[min(i, len(theirs) - 1)] if rng.random() < 0.7 else rng.choice(theirs)
    data = read_at(other, (src - 1) * t.ps, t.ps)
    if data == read_at(t.path, (dst - 1) * t.ps, t.ps):
        # rows without ids or hashes (a revision-1 or -2 ledger) built from the same seeds
        raise NotApplicable(f"another session's {table} leaf {src} is this file's page {dst}")
    write_at(t.path, (dst - 1) * t.ps, data)
    return f"another session's {table} leaf {src} over page {dst}"


def foreign_leaf(t: Target, rng: random.Random) -> str:
    """A table leaf of another session's file (same schema and layout) copied over one of
    this file's leaves of the same table."""
    return _copy_leaf(t, rng, rng.choice(("events", "events", "cost_ledger", "plan_items")))


def foreign_meta(t: Target, rng: random.Random) -> str:
    """Another session's session_meta page copied over this file's."""
    return _copy_leaf(t, rng, "session_meta")


def foreign_journal(t: Target, rng: random.Random) -> str:
    """A hot journal of another session's file (same page size: a writer killed -9 inside a
    transaction on a copy of it) put beside this file."""
    other, _ = _other(t)
    work = t.path.parent.parent / f"{t.path.parent.name}-other-journal"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    copy = work / other.name
    shutil.copyfile(other, copy)
    conn = apsw.Connection(str(copy))
    try:
        conn.execute("PRAGMA journal_mode=DELETE").fetchall()
    finally:
        conn.close()
    statements = HOT_STATEMENTS_REV3 if t.base.state is not None else HOT_STATEMENTS
    sql = rng.choice(statements).format(m=rng.randrange(2, 6), n=rng.randrange(1, 60))
    p = subprocess.run(
        [sys.executable, "-c", KILL_MID_TRANSACTION, str(copy), sql],
        capture_output=True,
        timeout=60,
    )
    journal = copy.with_name(copy.name + "-journal")
    try:
        if p.returncode != -9 or not journal.exists() or journal.stat().st_size == 0:
            raise NotApplicable(f"no hot journal ({p.returncode}: {p.stderr[-200:]!r})")
        mine = t.path.with_name(t.path.name + "-journal")
        shutil.copyfile(journal, mine)
        os.chmod(mine, 0o600)
    finally:
        shutil.rmtree(work)
    return f"another session's hot journal ({sql.split(' WHERE')[0][:40]})"


def stale_wal(t: Target, rng: random.Random) -> str:
    """A -wal that would move the file behind what it holds (an earlier generation's): the
    main file's copy with its last events deleted, committed into a -wal of its own (valid
    salts and checksums) that replaces the file's."""
    work = t.path.parent.parent / f"{t.path.parent.name}-stale-wal"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    copy = work / t.path.name
    shutil.copyfile(t.path, copy)
    n = rng.randrange(1, 12)
    conn = apsw.Connection(str(copy))
    try:
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.execute("PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0").fetchall()
        top = conn.execute("SELECT max(sequence) FROM events").fetchone()[0]
        if top is None or top <= n:
            raise NotApplicable("too few events")
        conn.execute("DELETE FROM events WHERE sequence > ?", (top - n,)).fetchall()
    except apsw.Error as e:
        shutil.rmtree(work)
        raise NotApplicable(f"the file alone does not read ({e})") from e
    finally:
        conn.close()
    wal = copy.with_name(copy.name + "-wal")
    try:
        if not wal.exists() or wal.stat().st_size <= 32:
            raise NotApplicable("no frames written")
        shutil.copyfile(wal, t.wal)
        os.chmod(t.wal, 0o600)
        shm = t.path.with_name(t.path.name + "-shm")
        if shm.exists():
            shm.unlink()
    finally:
        shutil.rmtree(work)
    return f"an earlier generation's -wal ({n} events behind)"


def header_reserved(t: Target, rng: random.Random) -> str:
    """The header's reserved-bytes field (offset 20) set to a wrong value."""
    v = rng.choice((1, 1, 4, 8, 32, rng.randrange(1, 33)))
    write_at(t.path, 20, bytes([v]))
    return f"reserved bytes {v}"


def header_page_size(t: Target, rng: random.Random) -> str:
    """The header's page size (offset 16) garbled to another legal size."""
    size = rng.choice([s for s in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536) if s != t.ps])
    write_at(t.path, 16, (1 if size == 65536 else size).to_bytes(2, "big"))
    return f"page size {size} over {t.ps}"


KINDS: dict[str, Kind] = {
    "byte_flip": byte_flip,
    "zero_sector": zero_sector,
    "random_sector": random_sector,
    "zero_page": zero_page,
    "random_page": random_page,
    "page_swap": page_swap,
    "stale_page": stale_page,
    "truncate_main": truncate_main,
    "truncate_wal": truncate_wal,
    "foreign_wal": foreign_wal,
    "wal_checksum": wal_checksum,
    "overflow_loop": overflow_loop,
    "overflow_cross": overflow_cross,
    "overflow_out": overflow_out,
    "freelist_trunk": freelist_trunk,
    "header_garbage": header_garbage,
    "cell_pointers": cell_pointers,
    "index_and_table": index_and_table,
    "ptrmap": ptrmap,
    "hot_journal": hot_journal,
    "hot_journal_torn": hot_journal_torn,
    "invalid_utf8": invalid_utf8,
    "sql_edit": sql_edit,
    "foreign_leaf": foreign_leaf,
    "foreign_meta": foreign_meta,
    "foreign_journal": foreign_journal,
    "stale_wal": stale_wal,
    "header_reserved": header_reserved,
    "header_page_size": header_page_size,
}
# Another session's bytes inside a session, an earlier generation's -wal, header fields SQLite's
# recovery tolerates (issue 29): drawn only when asked (``Case.from_seed(foreign=True)``,
# ``bench/fuzz --foreign``), so every seed drawn without it keeps its case.
FOREIGN = {
    "foreign_leaf",
    "foreign_meta",
    "foreign_journal",
    "stale_wal",
    "header_reserved",
    "header_page_size",
}
WAL_ONLY = {"truncate_wal", "wal_checksum"}
NO_WAL_ONLY = {"hot_journal", "hot_journal_torn", "ptrmap", "foreign_journal"}
# Kinds drawn for revision 3 alone (what only that revision promises to show). Revisions 1 and
# 2 draw from exactly the kinds they drew before revision 3 was generated, so every seed of
# theirs still draws the same case.
REV3_ONLY = {"sql_edit"}
REVISIONS = (1, 2, 3)
# through SQLite: before any byte-level damage, in this order. A torn journal comes last and
# once: any later open through SQLite (another killed writer, the UTF-8 write) would roll it back
# as far as it reaches and delete it, making the killed write's partial pages SQLite's committed
# state, which no reader (and no oracle built from the undamaged copy) could tell apart.
# (sql_edit first: sorting by this order keeps every earlier kind's relative order.)
FIRST = ("sql_edit", "invalid_utf8", "hot_journal", "hot_journal_torn")


def kinds_for(wal: bool, revision: int | None = None) -> list[str]:
    """The kinds a case of ``revision`` draws from (None or 1/2: the kinds of revisions 1 and 2,
    in their order; 3 adds REV3_ONLY at the end)."""
    out = [k for k in KINDS if k not in (NO_WAL_ONLY if wal else WAL_ONLY) and k not in FOREIGN]
    return out if revision is not None and revision >= 3 else [k for k in out if k not in REV3_ONLY]


def foreign_kinds_for(wal: bool) -> list[str]:
    """The kinds of :data:`FOREIGN` a case with or without a WAL draws from."""
    return [k for k in KINDS if k in FOREIGN and k not in (NO_WAL_ONLY if wal else WAL_ONLY)]


@dataclass(frozen=True)
class Case:
    """One generated case; ``str`` and :meth:`parse` round-trip."""

    revision: int
    wal: bool
    size: str  # short | long
    layout: str  # plain | autovacuum
    damages: tuple[tuple[str, int], ...]  # (kind, subseed), applied in this order
    seed: int | None = None  # the seed it was drawn from (for messages only)

    def __str__(self) -> str:
        d = "+".join(f"{k}/{s}" for k, s in self.damages)
        return (
            f"rev={self.revision} wal={int(self.wal)} size={self.size} "
            f"layout={self.layout} damages={d}"
        )

    @property
    def kind(self) -> str:
        """The damage kind this case counts under (combinations joined by '+')."""
        return "+".join(k for k, _ in self.damages)

    @classmethod
    def parse(cls, text: str) -> Case:
        f = dict(part.split("=", 1) for part in text.split())
        damages = tuple((k, int(s)) for k, s in (d.split("/") for d in f["damages"].split("+")))
        for k, _ in damages:
            if k not in KINDS:
                raise ValueError(f"unknown damage kind {k!r}")
        return cls(int(f["rev"]), f["wal"] == "1", f["size"], f["layout"], damages)

    @classmethod
    def from_seed(
        cls,
        seed: int,
        *,
        revision: int | None = None,
        wal: bool | None = None,
        kind: str | None = None,
        include: str | None = None,
        revisions: tuple[int, ...] = (1, 2),
        foreign: bool = False,
    ) -> Case:
        """The case seed ``seed`` draws; ``kind`` draws a case of that one kind alone,
        ``include`` a case whose damages include that kind (alone or with one or two others).

        Without ``revision``, the seed picks one of ``revisions``. The default, (1, 2), is the
        draw every seed made before revision 3 existed (the first number of the seed's stream),
        so each seed named anywhere keeps its case. Any other tuple (``REVISIONS``: 1, 2 and 3)
        picks from a stream of its own (``"revision/<seed>"``) and then draws the case exactly
        as ``from_seed(seed, revision=picked)`` does: a seed that picks 1 or 2 there gives the
        case that seed gives with that revision asked for."""
        if revision is None and tuple(revisions) != (1, 2):
            picked = random.Random(f"revision/{seed}").choice(tuple(revisions))
            return cls.from_seed(
                seed, revision=picked, wal=wal, kind=kind, include=include, foreign=foreign
            )
        rng = random.Random(seed)
        rev = revision if revision is not None else rng.choice((1, 2))
        w = wal if wal is not None else rng.random() < 0.5
        forced = kind or include
        if forced in WAL_ONLY or forced in NO_WAL_ONLY:
            w = forced in WAL_ONLY
        size = "long" if rng.random() < 0.35 else "short"
        n = rng.choices((1, 2, 3), weights=(6, 3, 1))[0]
        pool = kinds_for(w, rev)
        kinds = [rng.choice(pool) for _ in range(n)]
        if foreign:  # one of the FOREIGN kinds first, from a stream of its own
            kinds[0] = random.Random(f"foreign/{seed}").choice(foreign_kinds_for(w))
        if kind is not None:
            kinds = [kind]
        elif include is not None:
            kinds[0] = include
        if "ptrmap" in kinds:
            kinds = [k for k in kinds if k != "stale_page"] or ["ptrmap"]
        layout = "plain"
        if not w and "stale_page" not in kinds and ("ptrmap" in kinds or rng.random() < 0.15):
            layout = "autovacuum"
        if kinds.count("hot_journal_torn") > 1:
            kinds = [k for k in kinds if k != "hot_journal_torn"] + ["hot_journal_torn"]
        kinds.sort(key=lambda k: FIRST.index(k) if k in FIRST else len(FIRST))
        damages = tuple((k, rng.randrange(1 << 30)) for k in kinds)
        return cls(rev, w, size, layout, damages, seed)

    def without(self, i: int) -> Case:
        return replace(self, damages=self.damages[:i] + self.damages[i + 1 :])


@dataclass
class Applied:
    """A damaged copy: where it is and what was done (``n/a`` for kinds with nothing to hit)."""

    path: Path
    session_id: str
    base: Base
    done: list[str]
    regions: int  # damages applied (the bound on reader restarts counts from this)
    kinds_applied: set[str]  # the kinds that found something to damage

    @property
    def applied(self) -> bool:
        return self.regions > 0


def apply(case: Case, bases: Bases, sessions_dir: Path) -> Applied:
    """Copy the case's base into ``sessions_dir`` and damage it as the case says."""
    base = bases.get(case.revision, case.wal, case.size, case.layout)
    sessions_dir.mkdir(parents=True, exist_ok=True)
    path = sessions_dir / base.path.name
    for suffix in ("", "-wal"):
        src = base.path.with_name(base.path.name + suffix)
        if src.exists():
            shutil.copyfile(src, path.with_name(path.name + suffix))
            os.chmod(path.with_name(path.name + suffix), 0o600)
    target = Target(path, base, bases.foreign_wal, bases)
    done, regions, kinds = [], 0, set()
    for kind, sub in case.damages:
        try:
            done.append(f"{kind}: {KINDS[kind](target, random.Random(sub))}")
            regions += 1
            kinds.add(kind)
        except NotApplicable as e:
            done.append(f"{kind}: n/a ({e})")
    return Applied(path, base.session_id, base, done, regions, kinds)


def shrink(case: Case, fails: Callable[[Case], bool]) -> Case:
    """Drop damages one at a time while ``fails`` still holds."""
    i = 0
    while len(case.damages) > 1 and i < len(case.damages):
        smaller = case.without(i)
        if fails(smaller):
            case = smaller
        else:
            i += 1
    return case


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="replay one generated damage case")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--case", help="a case as printed by a failure")
    g.add_argument("--seed", type=int, help="draw the case from this seed")
    ap.add_argument("--revision", type=int, choices=REVISIONS)
    ap.add_argument(
        "--any-revision",
        action="store_true",
        help="with --seed and no --revision: the seed picks among revisions 1, 2 and 3 "
        "(without it, among 1 and 2, as every seed always did)",
    )
    ap.add_argument("--into", type=Path, default=Path("fuzz-case"), help="work directory")
    ap.add_argument("--agentdb-src", type=Path, help="src/ of the agentdb to run (default: this)")
    args = ap.parse_args(argv)
    from tests.fuzz.invariants import run_case

    revisions = REVISIONS if args.any_revision else (1, 2)
    case = (
        Case.parse(args.case)
        if args.case
        else Case.from_seed(args.seed, revision=args.revision, revisions=revisions)
    )
    args.into.mkdir(parents=True, exist_ok=True)
    bases = Bases(args.into / "bases")
    result = run_case(case, bases, args.into / "case", agentdb_src=args.agentdb_src)
    print(case)
    for line in result.applied.done:
        print("  damage", line)
    for inv, detail in result.failures:
        print(f"  FAIL {inv}: {detail}")
    if result.altered_in_place:
        n = result.altered_in_place
        print(f"  note: {n} unhashed row(s) kept with bytes changed inside a value")
    if result.rollback:
        print(f"  note: the damaged file is {result.rollback} (a consistent rollback)")
    print("  ok" if not result.failures else f"  {len(result.failures)} failure(s)")
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
