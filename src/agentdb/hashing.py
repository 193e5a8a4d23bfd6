"""The per-event content hash of revision 2 and later.

BLAKE2b with a 16-byte digest over every column of the row, ``sequence`` included, each value
framed by a type tag and its length, so no two different rows hash alike by concatenation.
Released: changing this function changes what every stored hash means.
"""

from __future__ import annotations

import struct

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
