"""The producers row as the file's second record of an event's producer fields (merged.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentdb.salvage.merged import Merged, derive_producers

SHELL = ("tool", "shell", "2.0.0")
FETCH = ("tool", "fetch", "1.0.0")


def _event(seq: int, producer: tuple[str, str, str]) -> tuple[Any, ...]:
    return (seq, f"01ARZ3NDEK00000000000000{seq:02d}", "2026-01-01T00:00:00.000Z", "tool_call",
            *producer, 1, b"{}")  # fmt: skip


def _merged(events: list[tuple[Any, ...]], producers: list[tuple[Any, ...]]) -> Merged:
    rows: dict[str, Any] = {
        "events": {e[0]: e for e in events},
        "producers": {p[:3]: p for p in producers},
        "session_meta": {},
        "cost_ledger": {},
        "plan_items": {},
    }
    sources = {t: Counter({"rows": len(v)}) for t, v in rows.items()}
    return Merged(rows, sources, {})


def test_a_byte_slip_in_an_events_producer_is_taken_from_its_producers_row() -> None:
    """Seed 401823 of the revision-1 campaign: event 7's version read ``1.0#0``."""
    m = _merged(
        [_event(4, SHELL), _event(7, ("tool", "fetch", "1.0#0")), _event(20, FETCH)],
        [(*SHELL, 4), (*FETCH, 7)],
    )
    derive_producers(m)
    assert m.rows["events"][7] == _event(7, FETCH)
    assert m.rows["producers"] == {SHELL: (*SHELL, 4), FETCH: (*FETCH, 7)}
    assert m.unverified == {"events": {7}} and m.derived_producers == 0
    assert any("taken from that row" in n for n in m.notes)


def test_what_is_not_one_slip_is_left_to_the_repointing() -> None:
    cases = [
        ("tool", "fetch", "2.1#0"),  # three bytes of one field
        ("tool", "fetcx", "1.0#0"),  # two fields
        ("tool", "fetch", "1.0.0-rc1"),  # another length
        SHELL,  # a producer that has its own row: the producers row is the damaged one
    ]
    for theirs in cases:
        m = _merged(
            [_event(4, SHELL), _event(7, theirs), _event(20, FETCH)],
            [(*SHELL, 4), (*FETCH, 7)],
        )
        derive_producers(m)
        assert m.rows["events"][7] == _event(7, theirs), theirs
        assert m.rows["producers"][FETCH] == (*FETCH, 20), theirs  # its earliest own event
        assert "events" not in m.unverified, theirs


def test_an_event_a_content_hash_vouches_for_is_never_changed() -> None:
    slipped = ("tool", "fetch", "1.0#0")
    m = _merged([_event(7, slipped), _event(20, FETCH)], [(*FETCH, 7)])
    m.hashes = {7: b"\x01" * 32}  # keep_hashes found its stored hash matching these bytes
    derive_producers(m)
    assert m.rows["events"][7] == _event(7, slipped)
    assert m.rows["producers"][FETCH] == (*FETCH, 20)
