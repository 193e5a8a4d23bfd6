"""Merge what the engines found: one row per primary key, the most trustworthy copy first.

Precedence for every key (the first source that has it wins):

1. rows SQLite itself read (engine b), then rows reached by walking the live b-trees (engine c's
   ``live`` tier, which also sees intact WAL commits after a checksum break; for
   ``session_meta``, updated in place, that newest copy comes first);
2. rows from SQLite's own recovery extension (only when it is available), each re-validated;
3. engine c's ``stray`` leaves (orphaned subtrees), then ``stale`` copies (older page versions,
   freelist pages).

Tiers 2 and 3 only fill gaps. ``session_meta`` is updated in place, so a copy from tier 2 or 3 is
used only when no live copy survived, and the report says so.

Then what can be derived is derived: a producer seen in a salvaged event but whose ``producers``
row is lost gets one (first_seen_sequence = its earliest salvaged event; reported as derived).
A lost ``session_meta`` is rebuilt from what is known, by one documented rule: session_id from the
file name, profile ``"unknown"``, parent NULL, depth 0, status ``failed`` (terminal: a session whose
summary was lost must not be resumed as if nothing happened), started_at from the id's ULID time,
ended_at the newest salvaged event's timestamp (else started_at). The report says it was rebuilt.
Salvaged ``cost_ledger``, ``plan_items`` and ``producers`` rows whose event is lost stay: they are
history (money was spent).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import ulid

from agentdb.salvage import freespace, tables
from agentdb.salvage.pages import _NO_HASH as NO_HASH
from agentdb.salvage.pages import LIVE, STALE, STRAY, PageSalvage, classify
from agentdb.salvage.rows import RowSalvage
from agentdb.salvage.tables import Row
from agentdb.schema import enums

REBUILT_PROFILE = "unknown"
REBUILT_STATUS = "failed"


@dataclass
class Merged:
    """The rows a replacement will hold, and how they were found."""

    rows: dict[str, dict[Any, Row]]  # table -> key -> row (revision-1 columns)
    sources: dict[str, Counter[str]]  # table -> source -> rows taken from it
    sequences: dict[str, int]  # AUTOINCREMENT counters to restore (at least)
    lost: dict[str, Any] = field(default_factory=dict)  # what is known lost
    notes: list[str] = field(default_factory=list)
    hashes: dict[int, bytes] = field(default_factory=dict)  # verified content_hash by sequence
    rebuilt_meta: bool = False  # session_meta was rebuilt from the file name
    # keys kept although no check vouches for their bytes (table -> keys)
    unverified: dict[str, set[Any]] = field(default_factory=dict)
    derived_producers: int = 0  # producers rows derived from events

    def count(self) -> int:
        return sum(len(v) for t, v in self.rows.items() if t != "session_meta")


def ranges(missing: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for n in missing:
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def merge(
    session_id: str,
    page: PageSalvage | None,
    rows: RowSalvage | None,
    shell_rows: dict[str, list[tuple[Any, ...]]] | None,
) -> Merged:
    merged: dict[str, dict[Any, Row]] = {t: {} for t in tables.TABLES}
    sources: dict[str, Counter[str]] = {t: Counter() for t in tables.TABLES}
    notes: list[str] = []

    drop, unverified = _structural_suspects(page, rows)
    gap_filled: set[Any] = set()  # events taken from a tier below the live b-tree
    dropped: dict[str, set[Any]] = {t: set() for t in tables.TABLES}

    def vouched(table: str, key: Any, row: Row) -> bool:
        """A revision-2 event whose stored content hash matches these very bytes."""
        if table != "events":
            return False
        if page is not None and key in page.verified and page.verified[key][0] == row:
            return True
        return rows is not None and key in rows.event_hashes and rows.rows["events"].get(key) == row

    def put(table: str, row: Row, source: str) -> None:
        key = tables.key_of(table, row)
        if key in merged[table]:
            return
        if (
            key in drop[table]
            and source in ("rows", "live", "sqlite-recover")
            and not vouched(table, key, row)
        ):
            # Read through the same damaged b-tree the page engine rejected: of the right
            # length and perhaps the wrong bytes. Only an older copy may fill the gap.
            dropped[table].add(key)
            return
        if table == "session_meta" and merged[table] and source not in ("live", "rows"):
            return
        merged[table][key] = row
        sources[table][source] += 1
        if table == "events" and source in ("stray", "stale", "free-space", "sqlite-recover"):
            gap_filled.add(key)

    cands = page.candidates if page else []
    # session_meta is updated in place: the page engine's live copy also sees intact WAL commits
    # after a checksum break, so it is the newest; for append-only tables SQLite's read leads.
    for c in cands:
        if c.tier == LIVE and c.table == "session_meta":
            put(c.table, c.row, "live")
    if rows is not None:
        for table, found in rows.rows.items():
            for row in found.values():
                put(table, row, "rows")
    for c in cands:
        if c.tier == LIVE:
            put(c.table, c.row, "live")
    live_meta = bool(merged["session_meta"])
    if shell_rows:
        hashes: dict[int, set[bytes]] = {}
        if page:
            for seq, hs in page.event_hashes.items():
                hashes.setdefault(seq, set()).update(hs)
        if rows:
            for seq, h in rows.event_hashes.items():
                hashes.setdefault(seq, set()).add(h)
        rejected = 0
        for table, found_rows in shell_rows.items():
            if table not in merged:
                continue
            for raw in found_rows:
                row = tables.normalise(table, raw)
                why = tables.problem(table, row, session_id)
                if why is None and table == "events" and row[0] in hashes:
                    from agentdb.hashing import event_hash

                    if event_hash(*row) not in hashes[row[0]]:
                        why = "content_hash does not match"
                if why is not None:
                    rejected += 1
                    continue
                put(table, row, "sqlite-recover")
        if rejected:
            notes.append(f"{rejected} rows from SQLite's recovery extension failed validation")
    for tier, name in ((STRAY, "stray"), (STALE, "stale")):
        for c in cands:
            if c.tier == tier:
                put(c.table, c.row, name)
    if page is not None and page.free:
        # Lowest tier: stale records in free space inside pages; they only fill gaps.
        for table, row in freespace.iter_rows(
            page.free,
            session_id,
            classify,
            NO_HASH,
            lambda: _missing(merged["events"], page.sequences.get("events", 0)),
        ):
            put(table, row, "free-space")
    if merged["session_meta"] and not live_meta:
        if sources["session_meta"].keys() & {"stale", "free-space"}:
            notes.append(
                "session_meta: no live copy survived; an older copy was used, so its status "
                "may be out of date"
            )
        else:
            src = next(iter(sources["session_meta"]))
            notes.append(f"session_meta: its b-tree was unreachable; found by {src}")

    sequences: dict[str, int] = {}
    for found_seqs in (page.sequences if page else {}, rows.sequences if rows else {}):
        for name, seq in found_seqs.items():
            if name in tables.AUTOINCREMENT_TABLES:
                sequences[name] = max(seq, sequences.get(name, 0))

    result = Merged(merged, sources, sequences, notes=notes)
    for table in tables.TABLES:
        kept = {
            k
            for k in unverified[table]
            if k in merged[table] and not vouched(table, k, merged[table][k])
        }
        if kept:
            result.unverified[table] = kept
        gone = dropped[table] - merged[table].keys()
        if gone:
            notes.append(
                f"{table}: {len(gone)} rows dropped: SQLite reads them through an overflow chain "
                "the page engine found broken or cross-linked (right length, wrong bytes)"
            )
    if result.unverified:
        n = sum(len(v) for v in result.unverified.values())
        notes.append(
            f"{n} rows kept unverified: their overflow chain shares pages with another row's; "
            "the layout says they own those pages, no hash can confirm it"
        )
    for seq, row in merged["events"].items():
        if page is not None and seq in page.verified and page.verified[seq][0] == row:
            result.hashes[seq] = page.verified[seq][1]
        elif rows is not None and seq in rows.event_hashes and rows.rows["events"].get(seq) == row:
            result.hashes[seq] = rows.event_hashes[seq]
    if page is not None and (page.revision or 0) >= 2:
        # A revision-2 file: an event from a lower tier with no content hash to vouch for it
        # (a revision-1 record left in free space by the migration, say) is kept unverified.
        loose = {k for k in gap_filled if k not in result.hashes}
        if loose:
            result.unverified.setdefault("events", set()).update(loose)
            notes.append(
                f"events: {len(loose)} rows from older copies carry no content hash (written "
                "before the file was migrated): kept, unverified"
            )
    _derive_producers(result)
    if not merged["session_meta"] and result.count():
        result.rebuilt_meta = True
        merged["session_meta"][session_id] = rebuilt_meta(session_id, merged["events"])
        sources["session_meta"]["rebuilt"] += 1
        result.lost["session_meta"] = "rebuilt from the file name (profile, status, depth unknown)"
        notes.append(
            f"session_meta lost: rebuilt with profile {REBUILT_PROFILE!r}, status "
            f"{REBUILT_STATUS!r}, depth 0, no parent (unknown); session_id from the file name"
        )
    for table in tables.AUTOINCREMENT_TABLES:
        keys = merged[table].keys()
        highest = max([sequences.get(table, 0), *keys]) if keys or table in sequences else 0
        missing = sorted(set(range(1, highest + 1)) - set(keys)) if highest < 10_000_000 else []
        if missing:
            name = "event_sequences" if table == "events" else f"{table}_sequences"
            result.lost[name] = ranges(missing)
            result.lost[f"{table}_missing"] = len(missing)
    return result


def _structural_suspects(
    page: PageSalvage | None, rows: RowSalvage | None
) -> tuple[dict[str, set[Any]], dict[str, set[Any]]]:
    """(keys no live read may supply, keys kept but unverified) from the page engine's
    structural rejections of live cells, translated from rowids to each table's key."""
    drop: dict[str, set[Any]] = {t: set() for t in tables.TABLES}
    unverified: dict[str, set[Any]] = {t: set() for t in tables.TABLES}
    if page is None:
        return drop, unverified
    for table in tables.TABLES:
        mapping = rows.rowid_keys.get(table, {}) if rows is not None else {}
        if table in tables.AUTOINCREMENT_TABLES:
            to_key: dict[Any, Any] | None = None  # the key is the rowid
        else:
            to_key = {
                c.rowid: tables.key_of(table, c.row)
                for c in page.candidates
                if c.tier == LIVE and c.table == table
            }
            to_key.update(mapping)
        for rowid in page.broken.get(table, set()) | page.crosslinked.get(table, set()):
            k = rowid if to_key is None else to_key.get(rowid)
            if k is not None:
                drop[table].add(k)
        for rowid in page.crosslink_owner.get(table, set()):
            k = rowid if to_key is None else to_key.get(rowid)
            if k is not None:
                unverified[table].add(k)
    return drop, unverified


def _missing(events: dict[Any, Row], counter: int) -> set[int]:
    """Event sequences below the highest one known that no tier has."""
    highest = max([counter, *events.keys()]) if events or counter else 0
    if highest > 10_000_000:
        return set()
    return set(range(1, highest + 1)) - set(events)


def _derive_producers(m: Merged) -> None:
    seen: dict[tuple[str, str, str], int] = {}
    for row in m.rows["events"].values():
        key = (row[4], row[5], row[6])
        seen[key] = min(row[0], seen.get(key, row[0]))
    for key, first in sorted(seen.items(), key=lambda kv: kv[1]):
        if key not in m.rows["producers"]:
            m.rows["producers"][key] = (*key, first)
            m.sources["producers"]["derived"] += 1
            m.derived_producers += 1
    if m.derived_producers:
        m.notes.append(
            f"producers: {m.derived_producers} rows derived from salvaged events "
            "(first_seen_sequence is the earliest salvaged event, perhaps not the first)"
        )


def rebuilt_meta(session_id: str, events: dict[Any, Row]) -> Row:
    started = _iso(ulid.ULID.from_str(session_id).datetime)
    ended = started
    if events:
        ended = str(events[max(events)][2])
    return (session_id, None, REBUILT_PROFILE, REBUILT_STATUS, 0, started, ended)


def _iso(t: dt.datetime) -> str:
    t = t.astimezone(dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


assert REBUILT_STATUS in enums.TERMINAL_STATUSES
