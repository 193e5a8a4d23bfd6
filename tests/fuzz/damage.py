"""Small deterministic damage helpers: the seed of a damage generator.

Every helper damages a real session file in place (call it on a copy), is deterministic for a
given ``seed`` and finds the pages it damages with ``dbstat`` on the file itself, so the same
seed damages the same structure of the same file. :func:`sector_damage` is the generator's
first kind: a seed picks an ``events`` leaf and one of three damages inside it (a zeroed
512-byte sector, random bytes over a sector, random bytes over the cell-pointer array).

Grow this into the full generator of issue 10 (kinds, combinations, shrinking); keep each kind
a pure function of (file, seed).
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import apsw

from agentdb.paths import sidecar
from tests.rows import page_size, read_at, write_at
from tests.salvage.corpus import pages_of

SECTOR = 512


@dataclass(frozen=True)
class Damage:
    """What a seeded helper did (for messages and for the README's seed list)."""

    kind: str
    seed: int
    page: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} seed={self.seed} page={self.page} {self.detail}".strip()


SECTOR_MODES = ("zero_sector", "random_sector", "cell_pointers")


def sector_damage(path: Path, seed: int, *, table: str = "events") -> Damage:
    """Damage one leaf of ``table``: a zeroed sector, a random sector or random bytes over
    the cell-pointer array (64 bytes right after the leaf's 8-byte header)."""
    rng = random.Random(seed)
    ps = page_size(path)
    leaves = pages_of(path, table, "leaf")
    pg = rng.choice(leaves)
    sector = rng.randrange(ps // SECTOR)
    mode = rng.choice(SECTOR_MODES)
    base = (pg - 1) * ps
    if mode == "zero_sector":
        write_at(path, base + sector * SECTOR, bytes(SECTOR))
        detail = f"sector {sector}"
    elif mode == "random_sector":
        write_at(path, base + sector * SECTOR, rng.randbytes(SECTOR))
        detail = f"sector {sector}"
    else:
        write_at(path, base + (100 if pg == 1 else 0) + 8, rng.randbytes(64))
        detail = "cell pointer array"
    return Damage(mode, seed, pg, detail)


def zero_sector(path: Path, pgno: int, sector: int) -> None:
    ps = page_size(path)
    write_at(path, (pgno - 1) * ps + sector * SECTOR, bytes(SECTOR))


def set_text(path: Path, table: str, column: str, where: str, raw: bytes) -> None:
    """Store ``raw`` (any bytes, e.g. invalid UTF-8) as a TEXT value, through SQLite (CHECK
    constraints off: damage does not ask them)."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA ignore_check_constraints=ON").fetchall()
        conn.execute(
            f"UPDATE {table} SET {column} = CAST(? AS TEXT) WHERE {where}", (raw,)
        ).fetchall()
    finally:
        conn.close()


INVALID_UTF8_TIMESTAMP = bytes.fromhex("32303236c328")  # "2026" + a broken two-byte sequence


def overflow_chain(path: Path, first: int) -> list[int]:
    """The overflow pages of the chain starting at ``first``, following the file as it is."""
    ps = page_size(path)
    chain: list[int] = []
    pg = first
    while pg and pg not in chain and len(chain) < 10_000:
        chain.append(pg)
        pg = int.from_bytes(read_at(path, (pg - 1) * ps, 4), "big")
    return chain


def overflow_chains(path: Path, table: str = "events") -> list[list[int]]:
    """Every overflow chain of ``table`` (in page order of their first page), from dbstat's
    page list and the next-page pointers of the file."""
    pages = pages_of(path, table, "overflow")
    ps = page_size(path)
    nexts = {p: int.from_bytes(read_at(path, (p - 1) * ps, 4), "big") for p in pages}
    heads = sorted(set(pages) - set(nexts.values()))
    return [overflow_chain(path, h) for h in heads]


def loop_overflow(path: Path, seed: int) -> Damage:
    """Make one overflow chain loop: a later page of it points back at an earlier one."""
    rng = random.Random(seed)
    chains = [c for c in overflow_chains(path) if len(c) >= 3]
    chain = rng.choice(chains)
    at = rng.randrange(1, len(chain))
    back = rng.randrange(0, at)
    ps = page_size(path)
    write_at(path, (chain[at] - 1) * ps, chain[back].to_bytes(4, "big"))
    return Damage("overflow_loop", seed, chain[at], f"-> {chain[back]}")


def cross_link_overflow(path: Path, seed: int) -> Damage:
    """Make two overflow chains cross-link: a page of one points into the middle of another."""
    rng = random.Random(seed)
    chains = [c for c in overflow_chains(path) if len(c) >= 3]
    a, b = rng.sample(chains, 2)
    at = rng.randrange(0, len(a) - 1)
    into = rng.randrange(1, len(b))
    ps = page_size(path)
    write_at(path, (a[at] - 1) * ps, b[into].to_bytes(4, "big"))
    return Damage("overflow_cross_link", seed, a[at], f"-> {b[into]}")


def copy_session(src: Path, dst_dir: Path) -> Path:
    """Copy a session file with its -wal / -journal into ``dst_dir`` (0600)."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / src.name
    for suffix in ("", "-wal", "-journal"):
        s = sidecar(src, suffix) if suffix else src
        if s.exists():
            d = sidecar(dst, suffix) if suffix else dst
            shutil.copyfile(s, d)
            os.chmod(d, 0o600)
    return dst
