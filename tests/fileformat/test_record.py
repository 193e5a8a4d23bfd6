"""Records: serial types, strictness, encodings, round trips and fuzzing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentdb.fileformat.errors import FormatError
from agentdb.fileformat.record import decode_record, encode_record, record_shape

values = st.one_of(
    st.none(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.floats(allow_nan=False),
    st.binary(max_size=300),
    st.text(max_size=200),
)


@pytest.mark.slow
@given(st.lists(values, max_size=70), st.sampled_from(["utf-8", "utf-16le", "utf-16be"]))
def test_round_trip(row: list, encoding: str) -> None:
    assert decode_record(encode_record(row, encoding), encoding) == row


def test_serial_types_by_hand() -> None:
    # header: size 9; types NULL, int8, int16, int24, int32, int48, int64, float, 0, 1 ...
    body_types = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12 + 2 * 3, 13 + 2 * 2]
    header = bytes([len(body_types) + 1, *body_types])
    body = (
        b"\xff"
        + (-2).to_bytes(2, "big", signed=True)
        + (0x7FFFFF).to_bytes(3, "big")
        + (-(1 << 31)).to_bytes(4, "big", signed=True)
        + (1 << 40).to_bytes(6, "big")
        + (-(1 << 63)).to_bytes(8, "big", signed=True)
        + bytes.fromhex("400921fb54442d18")
        + b"abc"
        + b"hi"
    )
    out = decode_record(header + body)
    assert out == [None, -1, -2, 0x7FFFFF, -(1 << 31), 1 << 40, -(1 << 63), math.pi, 0, 1,
                   b"abc", "hi"]  # fmt: skip
    assert record_shape(header + body) == body_types


def test_utf16_text() -> None:
    le = "é✓x".encode("utf-16le")
    rec = bytes([2, 13 + 2 * len(le)]) + le
    assert decode_record(rec, "utf-16le") == ["é✓x"]
    with pytest.raises(FormatError):
        decode_record(bytes([2, 13 + 2]) + b"\x00", "utf-16le")  # odd byte count


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # no header size
        b"\x05\x00",  # header size beyond payload
        b"\x00",  # header size smaller than its own varint
        b"\x02\x0a",  # reserved serial type 10
        b"\x02\x0b",  # reserved serial type 11
        b"\x02\x01",  # int8 missing
        b"\x02\x01\x05\x06",  # trailing bytes
        b"\x02\x0f\xff",  # invalid utf-8
        b"\x03\x81",  # header ends inside a varint
        b"\x02\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # enormous blob size
    ],
)
def test_strict_errors(payload: bytes) -> None:
    with pytest.raises(FormatError):
        decode_record(payload)


def test_text_errors_can_be_relaxed() -> None:
    assert decode_record(b"\x02\x0f\xff", text_errors="replace") == ["\ufffd"]


def test_shape_ignores_body_but_checks_header() -> None:
    assert record_shape(b"\x03\x01\x0f") == [1, 15]  # body missing: shape only
    with pytest.raises(FormatError):
        record_shape(b"\x09\x01")


@given(st.binary(max_size=200), st.sampled_from(["utf-8", "utf-16le", "utf-16be"]))
def test_garbage_raises_only_format_error(data: bytes, encoding: str) -> None:
    for fn in (lambda: decode_record(data, encoding), lambda: record_shape(data)):
        try:
            fn()
        except FormatError:
            pass
