"""The merged rows of a salvage (:class:`Merged`) and what is derived from them: the producers
a salvaged event names, a lost ``session_meta`` rebuilt (the rule is in :mod:`.merge`), and the
sequence ranges no engine found, computed in key order over the scratch database (no set of
every sequence is ever built).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from agentdb.salvage import tables
from agentdb.salvage.diskrows import DiskMap, highest, ordered
from agentdb.salvage.tables import Row
from agentdb.schema import enums

REBUILT_PROFILE = "unknown"
REBUILT_STATUS = "failed"


@dataclass
class ShellRows:
    """What SQLite's ``.recover`` gave, validated (see :mod:`.shell_rows`)."""

    # table -> rows in revision-1 column order, in key order: a list, or a mapping in the job's
    # scratch database (read with :func:`shell_rows`)
    rows: dict[str, Any]
    # events whose stored content_hash matched (as keys), each event's content hash
    hashed: MutableMapping[int, Any] = field(default_factory=dict)
    hashes: MutableMapping[int, bytes] = field(default_factory=dict)


@dataclass
class Merged:
    """The rows a replacement will hold, and how they were found."""

    # table -> key -> row (revision-1 columns; the AUTOINCREMENT tables' in the scratch database)
    rows: dict[str, MutableMapping[Any, Row]]
    sources: dict[str, Counter[str]]  # table -> source -> rows taken from it
    sequences: dict[str, int]  # AUTOINCREMENT counters to restore (at least)
    lost: dict[str, Any] = field(default_factory=dict)  # what is known lost
    notes: list[str] = field(default_factory=list)
    # verified content_hash by sequence (in the scratch database)
    hashes: MutableMapping[int, bytes] = field(default_factory=dict)
    rebuilt_meta: bool = False  # session_meta was rebuilt from the file name
    # keys kept although no check vouches for their bytes (table -> keys)
    unverified: dict[str, set[Any]] = field(default_factory=dict)
    derived_producers: int = 0  # producers rows derived from events
    # table -> rows of another session found in the file and not kept (merge.drop_foreign)
    foreign_ignored: dict[str, int] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(v) for t, v in self.rows.items() if t != "session_meta")

    def levels(self, table: str) -> dict[str, int]:
        """How far each kept row of ``table`` is vouched for: ``verified`` (its stored content
        hash matches these bytes: revision-2 events), ``unverified`` (kept although nothing
        vouches for its bytes: listed under ``lost``), ``structural_only`` (the rest: a valid
        record, complete non-looping overflow chain, valid UTF-8, every column validated)."""
        n = len(self.rows[table])
        verified = len(self.hashes) if table == "events" else 0
        unverified = len(self.unverified.get(table, ()))
        return {
            "verified": verified,
            "structural_only": n - verified - unverified,
            "unverified": unverified,
        }


def shell_rows(found: Any) -> Iterator[Row]:
    """The rows of one table of :class:`ShellRows`, in key order."""
    if isinstance(found, DiskMap):
        return (row for _, row in found.ordered())
    return iter(found)


def ranges(missing: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for n in missing:
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def rebuild_meta(result: Merged, session_id: str) -> None:
    result.rebuilt_meta = True
    result.rows["session_meta"][session_id] = rebuilt_meta(session_id, result.rows["events"])
    result.sources["session_meta"]["rebuilt"] += 1
    result.unverified.setdefault("session_meta", set()).add(session_id)
    result.lost["session_meta"] = "rebuilt from the file name (profile, status, depth unknown)"
    result.notes.append(
        f"session_meta lost: rebuilt with profile {REBUILT_PROFILE!r}, status "
        f"{REBUILT_STATUS!r}, depth 0, no parent (unknown); session_id from the file name"
    )


def count_lost(result: Merged, in_doubt: dict[str, set[Any]] | None = None) -> None:
    """Sequence ranges no engine found, per AUTOINCREMENT table; unverified keys by table.
    ``in_doubt`` (after a torn hot journal's rollback): keys that may be the killed
    transaction's uncommitted rows. Only a sequence below the highest key not in doubt is
    known to have been issued (the counters the file holds may be the transaction's too)."""
    for table in tables.AUTOINCREMENT_TABLES:
        got = result.rows[table]
        seq = result.sequences
        if in_doubt is not None:
            doubt = in_doubt.get(table, set())
            top = max((k for k in _keys(got) if k not in doubt), default=0)
        else:
            top = highest(got)
            top = max(seq.get(table, 0), top or 0) if top is not None or table in seq else 0
        lost = _gaps(got, top) if top < 10_000_000 else []
        if lost:
            name = "event_sequences" if table == "events" else f"{table}_sequences"
            result.lost[name] = lost
            result.lost[f"{table}_missing"] = sum(b - a + 1 for a, b in lost)
    for table, doubtful in result.unverified.items():
        if table in tables.AUTOINCREMENT_TABLES:
            name = (
                "unverified_event_sequences"
                if table == "events"
                else f"unverified_{table}_sequences"
            )
            result.lost[name] = ranges(sorted(doubtful))
        elif table != "session_meta":  # a rebuilt session_meta is already listed above
            result.lost[f"unverified_{table}"] = len(doubtful)


def _gaps(got: MutableMapping[Any, Row], top: int) -> list[list[int]]:
    """The ranges of 1..top that are not keys of ``got``, streamed in key order."""
    out: list[list[int]] = []
    nxt = 1
    for k in _keys(got):
        if k > top:
            break
        if k > nxt:
            out.append([nxt, k - 1])
        nxt = max(nxt, k + 1)
    if nxt <= top:
        out.append([nxt, top])
    return out


def keys(m: MutableMapping[Any, Row]) -> Iterator[Any]:
    """The keys of a merged table, ascending."""
    return _keys(m)


def _keys(m: MutableMapping[Any, Row]) -> Iterator[Any]:
    return iter(m) if isinstance(m, DiskMap) else iter(sorted(m))


def missing(events: MutableMapping[Any, Row], counter: int, cap: int) -> set[int]:
    """Event sequences below the highest one known that no tier has; once more than ``cap``
    are found, no more are looked for (the caller then gives up)."""
    top = max(counter, highest(events) or 0)
    if top > 10_000_000:
        return set()
    out: set[int] = set()
    for a, b in _gaps(events, top):
        out.update(range(a, min(b, a + cap + 1) + 1))
        if len(out) > cap:
            break
    return out


def derive_producers(m: Merged) -> None:
    _restore_producer_fields(m)
    seen: dict[tuple[str, str, str], int] = {}
    for _, row in ordered(m.rows["events"]):
        key = (row[4], row[5], row[6])
        seen[key] = min(row[0], seen.get(key, row[0]))
    _repoint_producers(m, seen)
    for key, first in sorted(seen.items(), key=lambda kv: kv[1]):
        if key not in m.rows["producers"]:
            m.rows["producers"][key] = (*key, first)
            m.sources["producers"]["derived"] += 1
            m.unverified.setdefault("producers", set()).add(key)
            m.derived_producers += 1
    if m.derived_producers:
        m.notes.append(
            f"producers: {m.derived_producers} rows derived from salvaged events "
            "(first_seen_sequence is the earliest salvaged event, perhaps not the first)"
        )


def _restore_producer_fields(m: Merged) -> None:
    """An event whose producer fields differ by a byte or two, in one field, from those of the
    producers row naming it first-seen, while no producers row names its own, holds damaged
    producer fields (bit rot in the event's record): the producers row is the file's second
    record of them, and they are taken from it. Never for an event a content hash vouches for
    (its bytes are as written); the event is kept unverified and the note says so."""
    events, producers = m.rows["events"], m.rows["producers"]
    restored = []
    for key in list(producers):
        seq = producers[key][3]
        event = events.get(seq)
        if event is None or seq in m.hashes:
            continue
        theirs = (event[4], event[5], event[6])
        if theirs == tuple(key) or theirs in producers or not _one_slip(theirs, tuple(key)):
            continue
        events[seq] = (*event[:4], *key, *event[7:])
        m.unverified.setdefault("events", set()).add(seq)
        restored.append(seq)
    if restored:
        m.notes.append(
            f"events: {len(restored)} rows had producer fields a byte or two away from the "
            "producers row naming them first-seen, which no producers row names; taken from "
            f"that row (unverified): sequences {', '.join(map(str, restored[:10]))}"
        )


def _one_slip(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """``a`` and ``b`` differ in exactly one field, of the same length in UTF-8, in at most
    two bytes: what bit rot does, and a different producer does not."""
    diff = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    if len(diff) != 1 or not all(isinstance(v, str) for v in diff[0]):
        return False
    x, y = (str(v).encode("utf-8", "surrogatepass") for v in diff[0])
    return len(x) == len(y) and sum(i != j for i, j in zip(x, y, strict=True)) <= 2


def _repoint_producers(m: Merged, seen: dict[tuple[str, str, str], int]) -> None:
    """A kept producers row whose first-seen event was salvaged but written by another producer
    (a damaged name in the event, a stale producers page) fails check's ``producer_mismatch``,
    and with it the whole replacement. It is pointed at the earliest salvaged event of its own
    (unverified), or dropped when it has none, and the note says so."""
    events, producers = m.rows["events"], m.rows["producers"]
    repointed = dropped = 0
    for key in list(producers):
        event = events.get(producers[key][3])
        if event is None or (event[4], event[5], event[6]) == tuple(key):
            continue
        if key in seen:
            producers[key] = (*key, seen[key])
            m.unverified.setdefault("producers", set()).add(key)
            repointed += 1
        else:
            del producers[key]
            counts = m.sources["producers"]
            src = next((s for s in ("live", "rows") if counts[s]), None) or next(
                (s for s, n in counts.items() if n), None
            )
            if src is not None:
                counts[src] -= 1
            dropped += 1
    if repointed or dropped:
        m.notes.append(
            f"producers: {repointed + dropped} rows named a first-seen event another producer "
            f"wrote: {repointed} pointed at their earliest salvaged event (unverified), "
            f"{dropped} dropped (no salvaged event of theirs)"
        )


def rebuilt_meta(session_id: str, events: MutableMapping[Any, Row]) -> Row:
    import ulid  # only when session_meta is lost (its import costs a recover's start-up ~30 ms)

    started = _iso(ulid.ULID.from_str(session_id).datetime)
    ended = started
    if events:
        ended = str(events[highest(events)][2])
    return (session_id, None, REBUILT_PROFILE, REBUILT_STATUS, 0, started, ended)


def _iso(t: dt.datetime) -> str:
    t = t.astimezone(dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


assert REBUILT_STATUS in enums.TERMINAL_STATUSES
