"""The state backend's types: what the kernel writes, what a read returns, and the rules
every write is validated against first."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ulid

from agentdb import db, errors
from agentdb.schema import enums
from agentdb.schema.identity import Identity

# ------------------------------------------------------------------------------ input types


_MAX_INT = (1 << 63) - 1  # SQLite's INTEGER range


@dataclass(frozen=True)
class Producer:
    """A plugin (or the reserved kernel producer) that writes events."""

    category: enums.ProducerCategory  # one of the seven plugin categories, or "kernel"
    name: str
    version: str


KERNEL_PRODUCER_NAME = "kernel"


@dataclass(frozen=True)
class Usage:
    """A completed model turn's spend, which the kernel has in hand when it writes a message."""

    provider_name: str
    model_id: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0


@dataclass(frozen=True)
class PlanItem:
    """One item of a built plan and the gate's decision on it."""

    turn_id: str
    tool_call_id: str
    provider_name: str
    tool_name: str
    decision: enums.Decision  # allow | ask | deny
    decided_by: str  # policy rule name, or the subscriber that decided


@dataclass(frozen=True)
class Event:
    """An event to emit. ``id`` and ``timestamp`` default to a fresh ULID and now (UTC)."""

    kind: enums.Kind
    producer: Producer
    payload: bytes  # opaque; never inspected
    schema_version: enums.SchemaVersion = "1"
    usage: Usage | None = None  # required for, and only for, kind "message"
    plan_items: Sequence[PlanItem] = ()  # only for kind "plan"
    id: str | None = None
    timestamp: str | None = None


# The kernel's automatic recovery attempt: called with the session's path and id.
RecoverHook = Callable[[Path, str], None]
# The kernel's judge of damage, asked before the writer opens the file: called with the
# session's path and id, returns None when the file is not damaged, else one line saying how
# (then the recovery hook runs). Never called while this process has the file open.
JudgeHook = Callable[[Path, str], str | None]

# ------------------------------------------------------------------------------ read models


@dataclass(frozen=True)
class SessionInfo:
    """session.v1.SessionInfo: the session_meta row plus cost_usd summed from cost_ledger."""

    session_id: str
    parent_session_id: str | None
    profile: str
    status: str
    depth: int
    started_at: str
    ended_at: str | None
    cost_usd: float  # SUM(cost_ledger.cost_usd), computed at read time


@dataclass(frozen=True)
class EventRow:
    """One stored event as a bounded read returns it."""

    sequence: int
    id: str
    timestamp: str
    kind: str
    producer_category: str
    producer_name: str
    producer_version: str
    schema_version: str
    payload: bytes | str  # at most the page's payload cap; str when stored as TEXT
    payload_length: int  # the full stored length in bytes
    truncated: bool  # True when payload holds only the first bytes


@dataclass(frozen=True)
class ProducerRow:
    category: str
    name: str
    version: str
    first_seen_sequence: int


@dataclass(frozen=True)
class PlanItemRow:
    sequence: int
    event_sequence: int
    turn_id: str
    tool_call_id: str
    provider_name: str
    tool_name: str
    decision: str
    decided_by: str


@dataclass(frozen=True)
class Page:
    """A bounded read: the rows, and whether more follow."""

    rows: list[Any] = field(default_factory=list)
    more: bool = False  # True when the page was cut at its row limit


def now_timestamp() -> str:
    """Wall-clock time for display: ISO 8601, UTC, milliseconds. Never used for ordering."""
    global _stamp_cache
    now = time.time()
    whole = int(now)
    cached = _stamp_cache  # one read: another thread may replace it meanwhile
    if whole != cached[0]:  # format the seconds once per second, not once per event
        cached = (whole, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(whole)))
        _stamp_cache = cached
    return f"{cached[1]}{int((now - whole) * 1000):03d}Z"


_stamp_cache: tuple[int | None, str] = (None, "")


def new_session_id() -> str:
    return str(ulid.ULID())


# ------------------------------------------------------------------------------ validation


def validate_event(ev: Event) -> None:
    """Raise a specific :class:`~agentdb.errors.InvalidInput` for anything the spec forbids."""
    if ev.kind == enums.KIND_UNSPECIFIED:
        raise errors.InvalidKind("kind KIND_UNSPECIFIED is never valid on a persisted event")
    if ev.kind not in enums.KINDS:
        raise errors.InvalidKind(f"unknown event kind {ev.kind!r}; one of {', '.join(enums.KINDS)}")
    p = ev.producer
    if p.category not in enums.PRODUCER_CATEGORIES:
        raise errors.InvalidProducer(
            f"unknown producer category {p.category!r}; one of "
            f"{', '.join(enums.PRODUCER_CATEGORIES)}"
        )
    for what, value in (("name", p.name), ("version", p.version)):
        if not isinstance(value, str) or not value:
            raise errors.InvalidProducer(f"producer {what} must be a non-empty string")
    kernel_kind = ev.kind in ("plan", "apply")
    if (p.category == enums.KERNEL) != kernel_kind:
        raise errors.InvalidProducer(
            f"kind {ev.kind!r} with producer category {p.category!r}: plan and apply are written "
            "by the reserved kernel producer, every other kind by a plugin"
        )
    if not isinstance(ev.payload, bytes | bytearray | memoryview):
        raise errors.InvalidInput("payload must be bytes (it is stored opaque)")
    size = memoryview(ev.payload).nbytes
    if size > db.MAX_VALUE:
        raise errors.ValueTooLarge(
            f"payload of {size} bytes exceeds the {db.MAX_VALUE}-byte limit "
            "(agentdb.db.MAX_VALUE): readers would refuse the whole file; store it elsewhere and "
            "emit a reference"
        )
    for what, text in (
        ("id", ev.id),
        ("timestamp", ev.timestamp),
        ("producer name", p.name),
        ("producer version", p.version),
        ("schema_version", ev.schema_version),
    ):
        require_text_size(what, text)
    if not isinstance(ev.schema_version, str) or not ev.schema_version:
        raise errors.InvalidInput("schema_version must be a non-empty string such as '1'")
    if ev.kind == "message":
        if ev.usage is None:
            raise errors.InvalidInput("a message event needs usage: it drives cost_ledger")
        u = ev.usage
        for name in ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens"):
            v = getattr(u, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= _MAX_INT:
                raise errors.InvalidInput(
                    f"usage.{name} must be an integer from 0 to {_MAX_INT} (SQLite's largest)"
                )
        cost = u.cost_usd
        if (
            not isinstance(cost, int | float)
            or isinstance(cost, bool)
            or not math.isfinite(cost)
            or cost < 0
            or cost > _MAX_INT
        ):
            # NaN and infinity would make every SUM(cost_usd) and every JSON report unusable.
            raise errors.InvalidInput("usage.cost_usd must be a finite, non-negative number")
        require_text_size("usage.provider_name", u.provider_name)
        require_text_size("usage.model_id", u.model_id)
    elif ev.usage is not None:
        raise errors.InvalidInput(f"usage belongs to message events, not {ev.kind!r}")
    if ev.plan_items and ev.kind != "plan":
        raise errors.InvalidInput(f"plan items belong to plan events, not {ev.kind!r}")
    for item in ev.plan_items:
        if item.decision not in enums.DECISIONS:
            raise errors.InvalidInput(
                f"plan item decision {item.decision!r}; one of allow, ask, deny"
            )
        for what in ("turn_id", "tool_call_id", "provider_name", "tool_name", "decided_by"):
            require_text_size(f"plan item {what}", getattr(item, what))


def require_text_size(what: str, text: object) -> None:
    """Refuse a text value whose UTF-8 form exceeds ``db.MAX_VALUE`` (readers refuse those)."""
    # A character is at most 4 bytes: only a very long string needs encoding to be measured.
    if isinstance(text, str) and len(text) > db.MAX_VALUE // 4:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > db.MAX_VALUE:
            raise errors.ValueTooLarge(
                f"{what} of {size} bytes exceeds the {db.MAX_VALUE}-byte limit "
                "(agentdb.db.MAX_VALUE); readers would refuse the whole file"
            )


def validate_transition(current: str, new: str) -> None:
    if new not in enums.STATUSES:
        raise errors.InvalidStatus(f"unknown status {new!r}; one of {', '.join(enums.STATUSES)}")
    if current == enums.RUNNING and new != enums.RUNNING:
        return
    if current not in enums.STATUSES and new != enums.RUNNING:
        return  # another writer's status outside the spec's seven: ending it repairs the row
    if current in enums.REOPENABLE_STATUSES and new == enums.RUNNING:
        return
    if current in enums.TERMINAL_STATUSES:
        raise errors.InvalidTransition(
            f"status {current!r} is terminal and replay-only; it never changes"
        )
    raise errors.InvalidTransition(f"status cannot go from {current!r} to {new!r}")


def require_session(ident: Identity, path: Path) -> None:
    if ident.kind == "session":
        return
    if ident.kind == "too_new":
        raise errors.TooNew(f"{path}: {ident.problem}; upgrade agentdb to open it", path=path)
    if ident.kind == "empty":
        raise errors.Unreadable(
            f"{path}: an empty database with no session in it; remove it if nothing uses it",
            path=path,
        )
    raise errors.ForeignFile(
        f"{path}: {ident.problem}; it is not a session file — move it out of the sessions "
        "directory",
        path=path,
    )
