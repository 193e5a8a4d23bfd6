"""The evidence file's record framing (docs/design/spec-exact-evidence.md §3.1 and §3.3): pure
encoding and decoding, no I/O policy, no SQLite.

An evidence file is an append-only log of records. Each record is::

    sync(4) type(1) length(4) offset(8) prev(16) body(length) head(120) check(16)

``check`` is BLAKE2b-128 (personalisation ``agentdb-evrec-v1``) over every byte before it;
``offset`` is where the record starts (a record copied to another offset fails); ``prev`` is the
previous record's ``check`` (zeros for the first). A reader believes records up to the first
that fails (:func:`scan`): bytes after it are a *torn tail* when no valid record follows them
(a crash mid-append), and *damage* when one does (a record removed, altered or reordered in the
middle). :func:`last_record` finds the newest valid record from the end without reading the
whole file (the O(1) quick path), scanning back for ``sync``.

Integers are big-endian. Everything here is total: any bytes give an answer, never an exception
other than :class:`EvidenceFormatError` from the encoders (a caller's bug).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

SYNC = b"\xaeEVR"
TYPES = frozenset(b"HEMGX")  # header, rows, session_meta, gap, closed
HASH = 16  # bytes of every hash and check
MAX_RECORD = 64 * 1024 * 1024  # a body longer than this is garbage, never allocated
_PERSON = b"agentdb-evrec-v1"
_PREFIX = struct.Struct(">4sBIq16s")  # sync, type, length, offset, prev
# head: head_sequence, head_hash, event/cost/plan/producer counts, cost_max, plan_max,
# meta_hash, gap_count, gaps_hash, lost_max, 4 reserved (zero) bytes
_HEAD = struct.Struct(">q16s6q16sI16sq4x")
HEAD_SIZE = _HEAD.size
MIN_RECORD = _PREFIX.size + HEAD_SIZE + HASH
ZERO = bytes(HASH)


class EvidenceFormatError(ValueError):
    """A record that cannot be encoded (a field out of range)."""


@dataclass(frozen=True)
class Head:
    """The attested head after a record: revision 3's ``session_chain`` row, appended."""

    head_sequence: int = 0  # the last attested event's sequence (0: none)
    head_hash: bytes = ZERO  # the last link (the genesis when there is no event)
    event_count: int = 0
    cost_count: int = 0
    plan_count: int = 0
    producer_count: int = 0
    cost_max: int = 0  # the highest attested cost_ledger.sequence
    plan_max: int = 0  # the highest attested plan_items.sequence
    meta_hash: bytes = ZERO  # the attested session_meta row's hash
    gap_count: int = 0
    gaps_hash: bytes = ZERO
    lost_max: int = 0  # the highest sequence a gap says was issued and lost

    def pack(self) -> bytes:
        try:
            return _HEAD.pack(
                self.head_sequence,
                self.head_hash,
                self.event_count,
                self.cost_count,
                self.plan_count,
                self.producer_count,
                self.cost_max,
                self.plan_max,
                self.meta_hash,
                self.gap_count,
                self.gaps_hash,
                self.lost_max,
            )
        except struct.error as e:
            raise EvidenceFormatError(f"head out of range: {e}") from None

    @classmethod
    def unpack(cls, data: bytes) -> Head:
        v = _HEAD.unpack(data)
        return cls(*v)


@dataclass(frozen=True)
class Record:
    """One valid record as read."""

    type: str  # "H", "E", "M", "G" or "X"
    offset: int  # where it starts in the file
    prev: bytes  # the previous record's check
    body: bytes
    head: Head
    check: bytes

    @property
    def end(self) -> int:
        return self.offset + MIN_RECORD + len(self.body)


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=HASH, person=_PERSON).digest()


def encode(kind: str, body: bytes, head: Head, *, offset: int, prev: bytes) -> bytes:
    """One record's bytes, to be appended at ``offset`` after the record whose check is
    ``prev`` (:data:`ZERO` for the first)."""
    if len(kind) != 1 or ord(kind) not in TYPES:
        raise EvidenceFormatError(f"record type {kind!r}")
    if len(body) > MAX_RECORD or offset < 0 or len(prev) != HASH:
        raise EvidenceFormatError("record body, offset or prev out of range")
    data = _PREFIX.pack(SYNC, ord(kind), len(body), offset, prev) + body + head.pack()
    return data + _digest(data)


def decode_at(data: bytes, offset: int, base: int = 0) -> Record | None:
    """The valid record starting at ``data[offset]`` (``base``: the file offset of
    ``data[0]``), or None."""
    if offset < 0 or len(data) - offset < MIN_RECORD:
        return None
    sync, kind, length, at, prev = _PREFIX.unpack_from(data, offset)
    if sync != SYNC or kind not in TYPES or length > MAX_RECORD or at != base + offset:
        return None
    end = offset + MIN_RECORD + length
    if end > len(data):
        return None
    body_end = offset + _PREFIX.size + length
    check = data[end - HASH : end]
    if _digest(data[offset : end - HASH]) != check:
        return None
    head = Head.unpack(data[body_end : body_end + HEAD_SIZE])
    return Record(
        chr(kind), base + offset, prev, data[offset + _PREFIX.size : body_end], head, check
    )


@dataclass
class Scan:
    """What a forward read of a whole evidence file found."""

    records: list[Record] = field(default_factory=list)  # the intact prefix, in order
    intact_end: int = 0  # bytes of the intact prefix
    torn_tail: int = 0  # bytes after it in which no valid record starts (a crash mid-append)
    damaged_at: int | None = None  # offset of the first break a valid record follows
    later_valid: int = 0  # valid records found after that break (not believed)


def scan(data: bytes) -> Scan:
    """Read ``data`` (a whole evidence file) forward: the intact prefix, then what follows."""
    out = Scan()
    pos, prev = 0, ZERO
    while pos < len(data):
        rec = decode_at(data, pos)
        if rec is None or rec.prev != prev:
            break
        out.records.append(rec)
        pos, prev = rec.end, rec.check
    out.intact_end = pos
    if pos == len(data):
        return out
    # past the break: any valid record later on means the middle was damaged, not torn
    found = _find_forward(data, pos + 1, lambda r: True)
    if found:
        out.damaged_at = pos
        out.later_valid = len(found)
    else:
        out.torn_tail = len(data) - pos
    return out


def _find_forward(data: bytes, start: int, keep: Callable[[Record], bool]) -> list[Record]:
    found: list[Record] = []
    i = data.find(SYNC, start)
    while i != -1:
        rec = decode_at(data, i)
        if rec is not None and keep(rec):
            found.append(rec)
            i = data.find(SYNC, rec.end)
        else:
            i = data.find(SYNC, i + 1)
    return found


def last_record(read: Callable[[int, int], bytes], size: int, window: int = 65536) -> Record | None:
    """The newest valid record of a file of ``size`` bytes, reading backwards in windows
    (``read(offset, length)``); None when there is none. It proves the record itself, not the
    chain before it (:func:`scan` does that)."""
    end = size
    while end > 0:
        start = max(0, end - window)
        chunk = read(start, size - start)
        i = chunk.rfind(SYNC, 0, end - start)
        while i != -1:
            rec = decode_at(chunk, i, base=start)
            if rec is not None:
                return rec
            i = chunk.rfind(SYNC, 0, i)
        if start == 0:
            return None
        end = start + len(SYNC) - 1  # a sync split across the window edge is seen next time
        window *= 2
    return None
