"""The evidence file's record framing (design §3.1): round trips, torn tails, damage in the
middle, records moved or spliced from another file, and any bytes at all — generated."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from agentdb.fileformat import evidence as ev

heads = st.builds(
    ev.Head,
    head_sequence=st.integers(0, 2**63 - 1),
    head_hash=st.binary(min_size=16, max_size=16),
    event_count=st.integers(0, 2**40),
    meta_hash=st.binary(min_size=16, max_size=16),
    gap_count=st.integers(0, 2**32 - 1),
    lost_max=st.integers(-(2**63), 2**63 - 1),
)
records = st.lists(
    st.tuples(st.sampled_from("HEMGX"), st.binary(max_size=300), heads), min_size=1, max_size=8
)


def build(recs: list[tuple[str, bytes, ev.Head]]) -> tuple[bytes, list[int]]:
    data, prev, starts = b"", ev.ZERO, []
    for kind, body, head in recs:
        starts.append(len(data))
        one = ev.encode(kind, body, head, offset=len(data), prev=prev)
        prev = one[-ev.HASH :]
        data += one
    return data, starts


def _reader(data: bytes):  # type: ignore[no-untyped-def]
    return lambda off, n: data[off : off + n]


@given(records)
def test_round_trip(recs: list[tuple[str, bytes, ev.Head]]) -> None:
    data, _ = build(recs)
    got = ev.scan(data)
    assert [(r.type, r.body, r.head) for r in got.records] == recs
    assert got.intact_end == len(data) and got.torn_tail == 0 and got.damaged_at is None
    last = ev.last_record(_reader(data), len(data), window=64)
    assert last is not None and (last.type, last.body, last.head) == recs[-1]


@given(records, st.data())
def test_a_cut_anywhere_is_a_torn_tail_of_an_intact_prefix(
    recs: list[tuple[str, bytes, ev.Head]], data_: st.DataObject
) -> None:
    data, _ = build(recs)
    cut = data_.draw(st.integers(0, len(data) - 1))
    got = ev.scan(data[:cut])
    whole = [r for r in ev.scan(data).records if r.end <= cut]
    assert got.records == whole
    assert got.damaged_at is None
    assert got.intact_end + got.torn_tail == cut


@given(records.filter(lambda r: len(r) >= 2), st.data())
def test_a_flip_in_the_middle_is_damage_never_a_torn_tail(
    recs: list[tuple[str, bytes, ev.Head]], data_: st.DataObject
) -> None:
    data, starts = build(recs)
    i = data_.draw(st.integers(0, len(recs) - 2))  # not the last record
    end = starts[i + 1]
    pos = data_.draw(st.integers(starts[i], end - 1))
    bad = bytearray(data)
    bad[pos] ^= 1 << data_.draw(st.integers(0, 7))
    got = ev.scan(bytes(bad))
    assert len(got.records) == i
    assert got.damaged_at == starts[i] and got.later_valid >= 1 and got.torn_tail == 0


def test_a_record_moved_or_spliced_in_is_not_believed() -> None:
    a, _ = build([("H", b"one", ev.Head()), ("E", b"two", ev.Head(head_sequence=1))])
    other, _ = build([("H", b"other", ev.Head()), ("E", b"x", ev.Head(head_sequence=9))])
    # another file's second record in place of this one's: its prev is not this file's check
    first = ev.scan(a).records[0]
    spliced = a[: first.end] + other[ev.scan(other).records[0].end :]
    got = ev.scan(spliced)
    assert len(got.records) == 1
    # a record copied to another offset fails its offset binding
    shifted = b"\x00" + a
    assert ev.scan(shifted).records == [] and ev.decode_at(shifted, 1) is None


@settings(max_examples=300)
@given(st.binary(max_size=2000))
def test_any_bytes_get_an_answer(data: bytes) -> None:
    got = ev.scan(data)
    assert got.intact_end + got.torn_tail <= len(data)
    ev.last_record(_reader(data), len(data), window=16)


def test_garbage_with_sync_bytes_never_raises() -> None:
    rng = random.Random(5)
    for _ in range(200):
        parts = [rng.randbytes(rng.randint(0, 40)) + ev.SYNC for _ in range(rng.randint(0, 6))]
        data = b"".join(parts)
        ev.scan(data)
        ev.last_record(_reader(data), len(data), window=8)


def test_last_record_finds_a_record_longer_than_its_window() -> None:
    data, _ = build([("H", b"h", ev.Head()), ("E", b"y" * 5000, ev.Head(head_sequence=3))])
    last = ev.last_record(_reader(data), len(data), window=32)
    assert last is not None and last.head.head_sequence == 3
