"""The measured prototype's hashing (revision 3, docs/design/damage-evident-revision.md §3-§6):
an implementation written apart from :mod:`agentdb.hashing`, against which tests/test_hashing.py
checks the product's golden vectors and, by hypothesis, values of every SQLite type.

It was ``bench/chain_proto.py``'s; the prototype imports it from here, so the benchmark and the
tests compare against one copy and no test imports ``bench/``. Only ``_frame`` (the fallback for
a value of no SQLite type) is borrowed from the product."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from agentdb.hashing import _frame

HASH = 16
_ROW = b"agentdb-row-v1"
_CHAIN = b"agentdb-chain-v1"
_GENESIS = b"agentdb-genesis1"
_GAPS = b"agentdb-gaps-v1"
_LEN = struct.Struct(">Q")
_COUNT = struct.Struct(">I")


_DOUBLE = struct.Struct(">d")


def _frames(values: Iterable[Any]) -> bytes:
    out: list[bytes] = []
    add = out.append
    pack = _LEN.pack
    for v in values:
        t = type(v)
        if t is str:
            data = v.encode("utf-8")
            add(b"t" + pack(len(data)) + data)
        elif t is bytes:
            add(b"b" + pack(len(v)) + v)
        elif t is int:
            data = str(v).encode()
            add(b"i" + pack(len(data)) + data)
        elif v is None:
            add(b"n")
        elif t is float:
            add(b"r" + pack(8) + _DOUBLE.pack(v))
        else:
            add(_frame(v))
    return b"".join(out)


_TABLE_FRAME: dict[str, bytes] = {}


def row_hash(table: str, values: Sequence[Any]) -> bytes:
    """The content hash of one row of ``table`` (not events), from the writer's values."""
    prefix = _TABLE_FRAME.get(table)
    if prefix is None:
        prefix = _TABLE_FRAME[table] = _frames((table,))
    return hashlib.blake2b(prefix + _frames(values), digest_size=HASH, person=_ROW).digest()


def row_hash_raw(table: str, text_mask: int, *values: Any) -> bytes:
    """:func:`row_hash` of a row read with TEXT as its stored bytes (bit i of ``text_mask``:
    value i is TEXT). Never decodes: invalid UTF-8 hashes as the bytes it is."""
    parts = [_frames((table,))]
    for i, v in enumerate(values):
        if text_mask >> i & 1 and type(v) is bytes:
            parts.append(b"t" + _LEN.pack(len(v)) + v)
        else:
            parts.append(_frames((v,)))
    return hashlib.blake2b(b"".join(parts), digest_size=HASH, person=_ROW).digest()


def genesis(session_id: str | bytes) -> bytes:
    """``prev_hash`` of a session's first event: binds the chain to its session."""
    sid = session_id.encode() if isinstance(session_id, str) else session_id
    return hashlib.blake2b(_frames((sid,)), digest_size=HASH, person=_GENESIS).digest()


_NO_DERIVED = _COUNT.pack(0) * 3


def chain_hash(prev: bytes, content: bytes, derived: Sequence[Sequence[bytes]]) -> bytes:
    """H(prev ‖ content ‖ per derived table: count ‖ its rows' hashes, sorted)."""
    if not any(derived):  # most events: no derived row
        data = prev + content + _NO_DERIVED
    else:
        parts = [prev, content]
        for hashes in derived:
            parts.append(_COUNT.pack(len(hashes)))
            parts.extend(sorted(hashes))
        data = b"".join(parts)
    return hashlib.blake2b(data, digest_size=HASH, person=_CHAIN).digest()


def gaps_hash(hashes: Sequence[bytes]) -> bytes:
    return hashlib.blake2b(
        _COUNT.pack(len(hashes)) + b"".join(hashes), digest_size=HASH, person=_GAPS
    ).digest()
