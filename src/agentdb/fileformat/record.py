"""SQLite record format: a varint header of serial types followed by the column values."""

from __future__ import annotations

import struct

from .errors import FormatError
from .varint import Buffer, encode_varint, read_varint

Value = None | int | float | bytes | str

#: Text encodings by the database header's code (offset 56).
ENCODINGS: dict[int, str] = {1: "utf-8", 2: "utf-16le", 3: "utf-16be"}

_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}
_FLOAT = struct.Struct(">d")


def serial_type_size(serial_type: int) -> int:
    """Number of body bytes a value of ``serial_type`` occupies; FormatError for 10 and 11."""
    if serial_type in (0, 8, 9):
        return 0
    if serial_type in _INT_SIZES:
        return _INT_SIZES[serial_type]
    if serial_type == 7:
        return 8
    if serial_type in (10, 11) or serial_type < 0:
        raise FormatError(f"reserved serial type {serial_type}")
    return (serial_type - 12) // 2 if serial_type % 2 == 0 else (serial_type - 13) // 2


def _read_header(payload: Buffer) -> tuple[list[int], int]:
    """Parse the record header; return the serial types and the offset of the body."""
    if len(payload) and payload[0] < 0x80:  # a one-byte varint (every header under 128 bytes)
        header_size, pos = payload[0], 1
    else:
        header_size, pos = read_varint(payload, 0)
    if header_size < pos or header_size > len(payload):
        raise FormatError(
            f"record header size {header_size} outside the payload (length {len(payload)})"
        )
    types: list[int] = []
    add = types.append
    while pos < header_size:
        b = payload[pos]
        if b < 0x80:  # a one-byte serial type: the common case, without the general decoder
            add(b)
            pos += 1
        else:
            serial_type, pos = read_varint(payload, pos)
            add(serial_type)
    if pos != header_size:
        raise FormatError(f"record header overruns its declared size {header_size}")
    return types, header_size


def record_shape(payload: Buffer) -> list[int]:
    """Return only the serial types of a record (cheap shape matching).

    Validates that the header fits inside the payload; does not check the body length (so it also
    works on the local prefix of a spilled payload, as long as the header is local).
    """
    return _read_header(payload)[0]


def decode_record(
    payload: Buffer, encoding: str = "utf-8", *, text_errors: str = "strict"
) -> list[Value]:
    """Decode a complete record payload into Python values.

    Strict: the header must lie within the payload and the values must consume exactly the rest
    of it; reserved serial types 10/11 and text that does not decode with ``encoding`` (one of
    ``utf-8``, ``utf-16le``, ``utf-16be``) raise :class:`FormatError`. Pass
    ``text_errors="replace"`` (any codec error handler) to keep undecodable text instead.
    """
    types, pos = _read_header(payload)
    data = bytes(payload)
    end = len(data)
    values: list[Value] = []
    add = values.append
    for serial_type in types:
        if serial_type >= 12:  # BLOB (even) or TEXT (odd), the most common: inline
            stop = pos + ((serial_type - 12) >> 1)
            if stop > end:
                raise FormatError(
                    f"record value of serial type {serial_type} runs past the payload end"
                )
            chunk = data[pos:stop]
            pos = stop
            if serial_type & 1:
                try:
                    add(chunk.decode(encoding, errors=text_errors))
                except (UnicodeDecodeError, LookupError) as e:
                    raise FormatError(f"record text is not valid {encoding}: {e}") from e
            else:
                add(chunk)
            continue
        size = serial_type_size(serial_type)
        if pos + size > end:
            raise FormatError(
                f"record value of serial type {serial_type} runs past the payload end"
            )
        chunk = data[pos : pos + size]
        pos += size
        if serial_type == 0:
            add(None)
        elif serial_type in _INT_SIZES:
            add(int.from_bytes(chunk, "big", signed=True))
        elif serial_type == 7:
            add(_FLOAT.unpack(chunk)[0])
        elif serial_type == 8:
            add(0)
        else:  # 9 (10 and 11 raised in serial_type_size)
            add(1)
    if pos != end:
        raise FormatError(f"record values end at {pos} but the payload has {end} bytes")
    return values


def _int_serial(value: int) -> tuple[int, bytes]:
    if value == 0:
        return 8, b""
    if value == 1:
        return 9, b""
    for serial_type, size in _INT_SIZES.items():
        lo, hi = -(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1
        if lo <= value <= hi:
            return serial_type, value.to_bytes(size, "big", signed=True)
    raise ValueError(f"integer does not fit in 64 bits: {value}")


def encode_record(values: list[Value], encoding: str = "utf-8") -> bytes:
    """Encode values as a record (the inverse of :func:`decode_record`; used in tests)."""
    types: list[int] = []
    body: list[bytes] = []
    for value in values:
        if value is None:
            types.append(0)
            body.append(b"")
        elif isinstance(value, bool | int):
            serial_type, raw = _int_serial(int(value))
            types.append(serial_type)
            body.append(raw)
        elif isinstance(value, float):
            types.append(7)
            body.append(_FLOAT.pack(value))
        elif isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(value)
            types.append(12 + 2 * len(raw))
            body.append(raw)
        elif isinstance(value, str):
            raw = value.encode(encoding)
            types.append(13 + 2 * len(raw))
            body.append(raw)
        else:
            raise TypeError(f"cannot encode {type(value).__name__} in a record")
    type_bytes = b"".join(encode_varint(t) for t in types)
    # The header size varint counts itself; grow it until the length is stable.
    size = len(type_bytes) + 1
    while len(encode_varint(size)) + len(type_bytes) != size:
        size = len(encode_varint(size)) + len(type_bytes)
    return encode_varint(size) + type_bytes + b"".join(body)
