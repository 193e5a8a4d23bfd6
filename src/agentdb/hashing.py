"""The per-event content hash of revision 2 and later, and the hashes of revision 3.

BLAKE2b with a 16-byte digest over every column of the row, ``sequence`` included, each value
framed by a type tag and its length, so no two different rows hash alike by concatenation.
Released: changing this function changes what every stored hash means.

Revision 3 (docs/design/damage-evident-revision.md §3-§6; released, so as fixed as revision 2's
hash) reuses the same framing for :func:`row_hash` (every table but ``events``), and adds
:func:`chain_hash`, :func:`genesis` and :func:`gaps_hash`, each with its own BLAKE2b
personalisation so that no hash of one kind can be taken for another. This module imports only
the standard library: ``db`` registers its SQL functions, every layer above uses it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence

try:  # CPython's own BLAKE2b, which hashlib re-exports; hashlib itself loads OpenSSL (4 ms of
    # every command's start-up) for algorithms this module never uses
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - another Python: the same function through hashlib
    from hashlib import blake2b

HASH_SIZE = 16
_PERSON = b"agentdb-event-v1"
Value = None | int | float | str | bytes


def _frame(value: Value) -> bytes:
    if value is None:
        return b"n"
    if isinstance(value, bool):  # not a SQLite type; refuse rather than guess
        raise TypeError("bool is not a SQLite value")
    if isinstance(value, int):
        data, tag = str(value).encode(), b"i"
    elif isinstance(value, float):
        data, tag = _DOUBLE.pack(value), b"r"
    elif isinstance(value, str):
        data, tag = value.encode("utf-8", "surrogatepass"), b"t"
    else:
        data, tag = bytes(value), b"b"
    return tag + _LEN.pack(len(data)) + data


_DOUBLE = struct.Struct(">d")
_LEN = struct.Struct(">Q")
_pack_len = _LEN.pack


def event_hash(
    sequence: int,
    event_id: Value,
    timestamp: Value,
    kind: Value,
    producer_category: Value,
    producer_name: Value,
    producer_version: Value,
    schema_version: Value,
    payload: Value,
) -> bytes:
    """The content hash stored in ``events.content_hash``."""
    parts: list[bytes] = []
    add = parts.append
    for v in (
        sequence,
        event_id,
        timestamp,
        kind,
        producer_category,
        producer_name,
        producer_version,
        schema_version,
        payload,
    ):
        # The common types inline (the writer's hot path); everything else through _frame.
        if type(v) is str:
            data = v.encode("utf-8", "surrogatepass")
            add(b"t" + _pack_len(len(data)) + data)
        elif type(v) is bytes:
            add(b"b" + _pack_len(len(v)) + v)
        else:
            add(_frame(v))
    return blake2b(b"".join(parts), digest_size=HASH_SIZE, person=_PERSON).digest()


SQL_FUNCTION = "agentdb_event_hash"


HASHED_COLUMNS = (
    "sequence",
    "id",
    "timestamp",
    "kind",
    "producer_category",
    "producer_name",
    "producer_version",
    "schema_version",
    "payload",
)

RAW_SQL_FUNCTION = "agentdb_event_hash_raw"


def event_hash_raw(text_mask: int, *values: Value) -> bytes | None:
    """:func:`event_hash` of a row read with its TEXT values as bytes.

    Bit ``i`` of ``text_mask`` says value ``i`` is TEXT, passed as its stored bytes
    (``CAST(col AS BLOB)``): framed with the text tag, valid UTF-8 gives exactly the hash of the
    decoded string. Invalid UTF-8 gives None, which matches no stored hash (a damaged row is a
    mismatch, never an exception).
    """
    parts: list[bytes] = []
    add = parts.append
    for i, v in enumerate(values):
        if text_mask >> i & 1 and type(v) is bytes:
            try:
                v.decode("utf-8")
            except UnicodeDecodeError:
                return None
            add(b"t" + _pack_len(len(v)) + v)
        elif type(v) is bytes:
            add(b"b" + _pack_len(len(v)) + v)
        else:
            add(_frame(v))
    return blake2b(b"".join(parts), digest_size=HASH_SIZE, person=_PERSON).digest()


def text_mask_sql(columns: tuple[str, ...]) -> str:
    """SQL for the bitmask of which of ``columns`` hold TEXT in the current row."""
    return " | ".join(f"((typeof({c}) = 'text') << {i})" for i, c in enumerate(columns))


def as_bytes_sql(column: str) -> str:
    """SQL giving ``column``'s value, TEXT as its stored bytes (so no decoding can fail)."""
    return f"iif(typeof({column}) = 'text', CAST({column} AS BLOB), {column})"


def hash_sql(prefix: str = "") -> str:
    """SQL computing the content hash of the current ``events`` row from its stored bytes
    (``prefix`` qualifies the columns, e.g. ``"e."``)."""
    cols = tuple(prefix + c for c in HASHED_COLUMNS)
    args = ", ".join(as_bytes_sql(c) for c in cols)
    return f"{RAW_SQL_FUNCTION}({text_mask_sql(cols)}, {args})"


def mismatch_sql(select: str = "sequence") -> str:
    """The one query for events whose stored ``content_hash`` is not the hash of the row as
    stored: ``SELECT <select> FROM events ... WHERE content_hash IS NOT <hash>`` (in rowid
    order, no index: a damaged index must not hide a row). Every judge of hashes uses it."""
    return f"SELECT {select} FROM events NOT INDEXED WHERE content_hash IS NOT {hash_sql()}"


# ------------------------------------------------------------------------------ revision 3
# docs/design/damage-evident-revision.md §3. Golden vectors: tests/test_hashing.py.

_ROW_PERSON = b"agentdb-row-v1"
_CHAIN_PERSON = b"agentdb-chain-v1"
_GENESIS_PERSON = b"agentdb-genesis1"
_GAPS_PERSON = b"agentdb-gaps-v1"
_COUNT = struct.Struct(">I")
_NO_DERIVED = _COUNT.pack(0) * 3  # most events bind no derived row
_COUNT_0, _COUNT_1 = _COUNT.pack(0), _COUNT.pack(1)
_TABLE_FRAMES: dict[str, bytes] = {}
# Per table, a BLAKE2b state that has absorbed the table's frame: a row hash copies it (cheaper
# than a new personalised hasher; the digest is the same). Never updated once made.
_TABLE_STATES: dict[str, blake2b] = {}
_CHAIN_STATE = blake2b(digest_size=HASH_SIZE, person=_CHAIN_PERSON)


def _table_frame(table: str) -> bytes:
    frame = _TABLE_FRAMES.get(table)
    if frame is None:
        frame = _TABLE_FRAMES[table] = _frame(table)
    return frame


def _table_state(table: str) -> blake2b:
    state = _TABLE_STATES.get(table)
    if state is None:
        state = blake2b(_table_frame(table), digest_size=HASH_SIZE, person=_ROW_PERSON)
        _TABLE_STATES[table] = state
    return state.copy()


# An INTEGER's frame head by the length of its decimal digits: an int64 has at most 20 ("-" and
# 19 digits), so the writer's integers never build their length frame
_INT_HEADS = tuple(b"i" + _pack_len(n) for n in range(21))
_BLOB_HEAD_16 = b"b" + _pack_len(HASH_SIZE)
_REAL_HEAD = b"r" + _pack_len(_DOUBLE.size)


def _add_frames(add: Callable[[bytes], object], values: Iterable[Value]) -> None:
    # _frame's framing, the writer's common types inline (its hot path): byte-identical
    for v in values:
        if type(v) is int:
            data = b"%d" % v  # str(int)'s digits: the canonical decimal
            n = len(data)
            add((_INT_HEADS[n] if n <= 20 else b"i" + _pack_len(n)) + data)
        elif type(v) is str:
            data = v.encode("utf-8", "surrogatepass")
            add(b"t" + _pack_len(len(data)) + data)
        elif type(v) is bytes:
            n = len(v)
            add((_BLOB_HEAD_16 if n == HASH_SIZE else b"b" + _pack_len(n)) + v)
        elif type(v) is float:
            add(_REAL_HEAD + _DOUBLE.pack(v))
        else:
            add(_frame(v))


def frame(value: Value) -> bytes:
    """One value's frame (:func:`_frame`, the writer's common types first)."""
    if type(value) is int:
        data = b"%d" % value
        n = len(data)
        return (_INT_HEADS[n] if n <= 20 else b"i" + _pack_len(n)) + data
    if type(value) is bytes and len(value) == HASH_SIZE:
        return _BLOB_HEAD_16 + value
    return _frame(value)


def frames(values: Iterable[Value]) -> bytes:
    """The frames of ``values``, concatenated: what :func:`row_hash` hashes after the table's
    frame. A writer that hashes a row again and again with some of its columns unchanged frames
    those once (:func:`row_hash_framed`)."""
    parts: list[bytes] = []
    _add_frames(parts.append, values)
    return b"".join(parts)


def row_hash_framed(table: str, framed: bytes) -> bytes:
    """:func:`row_hash` of ``table``'s row whose :func:`frames` (every hashed column, in
    declared order) are ``framed``: ``row_hash(t, a + b) == row_hash_framed(t, frames(a) +
    frames(b))``."""
    state = _table_state(table)
    state.update(framed)
    return state.digest()


def row_hash(table: str, values: Iterable[Value]) -> bytes:
    """The ``content_hash`` of one row of ``table`` (any table but ``events``), from the values
    the writer stores: frame(table name as TEXT) then every column in declared order, the row's
    own ``content_hash`` excluded. ``str`` is framed as its UTF-8 bytes, what SQLite stores."""
    parts: list[bytes] = []
    _add_frames(parts.append, values)
    state = _table_state(table)
    state.update(b"".join(parts))
    return state.digest()


def row_hash_raw(table: str, text_mask: int, *values: Value) -> bytes:
    """:func:`row_hash` of a row read with its TEXT values as their stored bytes (bit ``i`` of
    ``text_mask``: value ``i`` is TEXT, passed as ``CAST(col AS BLOB)``). Never decodes: invalid
    UTF-8 hashes as the bytes it is (unlike :func:`event_hash_raw`, design §3)."""
    parts = [_table_frame(table)]
    add = parts.append
    for i, v in enumerate(values):
        if type(v) is bytes:
            add((b"t" if text_mask >> i & 1 else b"b") + _pack_len(len(v)) + v)
        else:
            add(_frame(v))
    return blake2b(b"".join(parts), digest_size=HASH_SIZE, person=_ROW_PERSON).digest()


def genesis(session_id: str | bytes) -> bytes:
    """The first event's ``prev_hash`` and an empty session's ``head_hash``: binds the chain to
    its session (frame of the id's bytes, as a BLOB)."""
    sid = session_id.encode("utf-8", "surrogatepass") if isinstance(session_id, str) else session_id
    return blake2b(
        b"b" + _pack_len(len(sid)) + sid, digest_size=HASH_SIZE, person=_GENESIS_PERSON
    ).digest()


def chain_hash(prev: bytes, content: bytes, derived: Sequence[Sequence[bytes]] = ()) -> bytes:
    """An event's ``chain_hash``: H(prev ‖ content ‖ for ``cost_ledger``, ``plan_items``,
    ``producers`` in that order: a 4-byte count ‖ the row hashes bound to the event, sorted).

    ``derived`` holds those three lists (fewer: the rest are empty). Every hash must be
    :data:`HASH_SIZE` bytes (ValueError otherwise: a verifier compares a damaged stored hash
    before it chains it)."""
    if len(prev) != HASH_SIZE or len(content) != HASH_SIZE:
        raise ValueError("prev and content must be 16-byte hashes")
    if len(derived) > 3:
        raise ValueError("at most three derived tables: cost_ledger, plan_items, producers")
    state = _CHAIN_STATE.copy()
    if not any(derived):
        state.update(prev + content + _NO_DERIVED)
    else:
        parts = [prev, content]
        add = parts.append
        for hashes in derived:
            n = len(hashes)
            if n == 0:
                add(_COUNT_0)
            elif n == 1:  # the writer's common case: one cost row, or one new producer
                h = hashes[0]
                if len(h) != HASH_SIZE:
                    raise ValueError("derived row hashes must be 16 bytes")
                add(_COUNT_1)
                add(h)
            else:
                for h in hashes:
                    if len(h) != HASH_SIZE:
                        raise ValueError("derived row hashes must be 16 bytes")
                add(_COUNT.pack(n))
                parts.extend(sorted(hashes))
        add(_NO_DERIVED[: _COUNT.size * (3 - len(derived))])  # the tables not given
        state.update(b"".join(parts))
    return state.digest()


def gaps_hash(hashes: Sequence[bytes]) -> bytes:
    """``session_chain.gaps_hash``: H(4-byte count ‖ every ``chain_gaps.content_hash`` in
    ``chain_gaps.sequence`` order)."""
    return blake2b(
        _COUNT.pack(len(hashes)) + b"".join(hashes), digest_size=HASH_SIZE, person=_GAPS_PERSON
    ).digest()


def split_hashes(blob: bytes | None) -> list[bytes] | None:
    """A concatenation of 16-byte hashes (SQL's ``group_concat``) as a list; NULL is none.
    None when the length is not a multiple of 16."""
    if blob is None:
        return []
    if len(blob) % HASH_SIZE:
        return None
    return [blob[i : i + HASH_SIZE] for i in range(0, len(blob), HASH_SIZE)]


# The SQL functions ``db.harden`` registers (deterministic). Malformed input gives NULL, never an
# exception: in a verifier NULL matches no stored hash; in a migration it fails NOT NULL.
ROW_HASH_SQL_FUNCTION = "agentdb_row_hash"  # (table, text_mask, v1, ..., vn)
CHAIN_HASH_SQL_FUNCTION = "agentdb_chain_hash"  # (prev, content, costs, plans, producers)
GENESIS_SQL_FUNCTION = "agentdb_genesis"  # (session_id)
GAPS_HASH_SQL_FUNCTION = "agentdb_gaps_hash"  # (concatenated gap hashes, or NULL for none)


def sql_row_hash(*args: Value) -> bytes | None:
    """``agentdb_row_hash(table, text_mask, v1, ..., vn)``: :func:`row_hash_raw`."""
    if len(args) < 2:
        return None
    table, mask = args[0], args[1]
    if type(table) is bytes:
        try:
            table = table.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if type(table) is not str or type(mask) is not int:
        return None
    return row_hash_raw(table, mask, *args[2:])


def sql_chain_hash(*args: Value) -> bytes | None:
    """``agentdb_chain_hash(prev, content, costs, plans, producers)``: :func:`chain_hash`, the
    bound rows' hashes given as concatenations (any order; NULL: none)."""
    if len(args) != 5:
        return None
    prev, content = args[0], args[1]
    if type(prev) is not bytes or type(content) is not bytes:
        return None
    if len(prev) != HASH_SIZE or len(content) != HASH_SIZE:
        return None
    derived = []
    for blob in args[2:]:
        if blob is not None and type(blob) is not bytes:
            return None
        hashes = split_hashes(blob)
        if hashes is None:
            return None
        derived.append(hashes)
    return chain_hash(prev, content, derived)


def sql_genesis(*args: Value) -> bytes | None:
    """``agentdb_genesis(session_id)`` (TEXT or BLOB)."""
    sid = args[0] if len(args) == 1 else None
    if not isinstance(sid, (str, bytes)):
        return None
    return genesis(sid)


def sql_gaps_hash(*args: Value) -> bytes | None:
    """``agentdb_gaps_hash(concatenated gap hashes in sequence order, or NULL)``."""
    blob = args[0] if len(args) == 1 else b"x"
    if blob is not None and type(blob) is not bytes:
        return None
    hashes = split_hashes(blob)
    return None if hashes is None else gaps_hash(hashes)
