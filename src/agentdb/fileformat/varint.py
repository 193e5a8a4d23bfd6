"""SQLite's variable-length integers (1 to 9 bytes, big-endian, high bit = "more follows")."""

from __future__ import annotations

from .errors import FormatError

Buffer = bytes | bytearray | memoryview


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode the varint at ``buf[pos]``; return ``(value, position after it)``.

    The first eight bytes contribute 7 bits each while their high bit is set; a ninth byte
    contributes all 8 bits. The value is an unsigned 64-bit integer (callers that need the signed
    interpretation, like rowids, use :func:`to_signed64`). Raises :class:`FormatError` when the
    varint runs past the end of ``buf`` or ``pos`` is out of range.
    """
    n = len(buf)
    if pos < 0 or pos >= n:
        raise FormatError(f"varint at offset {pos} is outside the buffer (length {n})")
    value = 0
    for i in range(8):
        if pos + i >= n:
            raise FormatError(f"varint at offset {pos} runs past the end of the buffer")
        byte = buf[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, pos + i + 1
    if pos + 8 >= n:
        raise FormatError(f"varint at offset {pos} runs past the end of the buffer")
    value = (value << 8) | buf[pos + 8]
    return value, pos + 9


def to_signed64(value: int) -> int:
    """Interpret an unsigned 64-bit value as two's-complement signed (rowids are signed)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def encode_varint(value: int) -> bytes:
    """Encode ``value`` (0 <= value < 2**64, or a negative signed 64-bit) as a SQLite varint."""
    if value < 0:
        value += 1 << 64
    if not 0 <= value < 1 << 64:
        raise ValueError(f"varint value out of range: {value}")
    if value < 1 << 56:
        out = [value & 0x7F]
        value >>= 7
        while value:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        return bytes(reversed(out))
    out = [value & 0xFF]
    value >>= 8
    for _ in range(8):
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(reversed(out))
