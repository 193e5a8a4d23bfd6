"""What the operator asked to prune (:class:`Selectors`) and which sessions the filters match."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from agentdb import errors, paths
from agentdb.durations import parse_timestamp
from agentdb.prune.scan import Meta, ulid_time
from agentdb.schema.enums import STATUSES


@dataclass(frozen=True)
class Selectors:
    """What the operator asked to prune. Selected = ``ids`` ∪ (sessions matching every filter)."""

    ids: tuple[str, ...] = ()  # explicit session ids
    older_than: dt.timedelta | None = None  # filter: ended (or, never ended, started) this long ago
    newer_than: dt.timedelta | None = None  # filter: ended (or started) less than this long ago
    keep_last: int | None = None  # filter: keep the N newest matching sessions out of the selection
    statuses: tuple[str, ...] = ()  # filter: status is one of these
    profile: str | None = None  # filter: profile is exactly this
    with_descendants: bool = False  # the subtree of each selected session joins, judged as a whole
    include_damaged: bool = False  # explicit ids may be unreadable; their .corrupt copies go too
    include_pinned: bool = False  # sessions referencing cached plugin versions may go too

    @property
    def has_filter(self) -> bool:
        return (
            self.older_than is not None
            or self.newer_than is not None
            or self.keep_last is not None
            or bool(self.statuses)
            or self.profile is not None
        )

    def validate(self) -> None:
        if not self.ids and not self.has_filter:
            raise errors.UsageError(
                "prune needs a selector: session ids, --until (--older-than), --since, "
                "--keep-last, --status or --profile (nothing is pruned by default)"
            )
        for sid in self.ids:
            paths.validate_id(sid)
        for s in self.statuses:
            if s not in STATUSES:
                raise errors.UsageError(f"unknown status {s!r}; one of {', '.join(STATUSES)}")
        if self.keep_last is not None and self.keep_last < 0:
            raise errors.UsageError("--keep-last must be 0 or more")
        if self.older_than is not None and self.older_than < dt.timedelta(0):
            raise errors.UsageError("--until/--older-than must not be negative")
        if self.newer_than is not None and self.newer_than < dt.timedelta(0):
            raise errors.UsageError("--since must not be negative")


def age_time(session_id: str, info: Meta | None, notes: list[str]) -> dt.datetime:
    """When a session ended, or started if it never ended: from its own data, never mtimes."""
    if info is None or info.ended_at is None:
        return ulid_time(session_id)
    t = parse_timestamp(info.ended_at)
    if t is None:
        notes.append(
            f"{session_id}: ended_at {info.ended_at[:40]!r} is not an ISO 8601 time; "
            "its age is taken from its id (start time)"
        )
        return ulid_time(session_id)
    return t


def matches(
    session_id: str, info: Meta | None, sel: Selectors, now: dt.datetime, notes: list[str]
) -> bool:
    """All given filters hold. A filter that cannot be judged (unreadable file) counts as a
    match, so the file is reported as refused rather than silently skipped."""
    if sel.older_than is not None and age_time(session_id, info, notes) > now - sel.older_than:
        return False
    if sel.newer_than is not None and age_time(session_id, info, notes) <= now - sel.newer_than:
        return False
    if info is None:
        return True
    if sel.statuses and info.status not in sel.statuses:
        return False
    return not (sel.profile is not None and info.profile != sel.profile)
