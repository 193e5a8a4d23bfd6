"""Varints: known encodings, the 9-byte rule, bounds, and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentdb.fileformat.errors import FormatError
from agentdb.fileformat.varint import encode_varint, read_varint, to_signed64


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"\x00", 0),
        (b"\x7f", 127),
        (b"\x81\x00", 128),
        (b"\xff\x7f", 16383),
        (b"\x81\x80\x00", 16384),
        (b"\xff" * 8 + b"\xff", (1 << 64) - 1),
        (b"\x80" * 8 + b"\x01", 1),
    ],
)
def test_known_values(raw: bytes, value: int) -> None:
    assert read_varint(raw + b"junk", 0) == (value, len(raw))
    assert read_varint(b"ab" + raw, 2) == (value, 2 + len(raw))


def test_nine_byte_varint_uses_all_bits_of_last_byte() -> None:
    value, pos = read_varint(b"\xff" * 9, 0)
    assert pos == 9
    assert to_signed64(value) == -1


@pytest.mark.parametrize("raw", [b"", b"\x80", b"\xff\xff", b"\x80" * 8])
def test_runs_past_buffer(raw: bytes) -> None:
    with pytest.raises(FormatError):
        read_varint(raw, 0)


def test_position_out_of_range() -> None:
    with pytest.raises(FormatError):
        read_varint(b"\x01", 1)
    with pytest.raises(FormatError):
        read_varint(b"\x01", -1)


@pytest.mark.slow
@given(st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1))
def test_round_trip(value: int) -> None:
    raw = encode_varint(value)
    assert 1 <= len(raw) <= 9
    decoded, pos = read_varint(raw, 0)
    assert pos == len(raw)
    assert decoded == value % (1 << 64)


@given(st.binary(max_size=20), st.integers(min_value=-2, max_value=25))
def test_garbage_raises_only_format_error(data: bytes, pos: int) -> None:
    try:
        value, end = read_varint(data, pos)
    except FormatError:
        return
    assert pos < end <= len(data) and 0 <= value < 1 << 64
