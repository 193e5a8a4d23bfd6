"""Durations (``90d``, ``12h``, ``30m``, ``0s``) and timestamps for age selectors. Pure."""

from __future__ import annotations

import datetime as dt
import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"([0-9]{1,9})([smhdw])")


def parse_duration(text: str) -> dt.timedelta:
    """``<n><unit>`` with unit s, m, h, d or w, e.g. ``90d``; raises ValueError otherwise."""
    m = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(
            f"{text!r} is not a duration; write a number and a unit: 30s, 15m, 12h, 90d, 2w"
        )
    return dt.timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])


def parse_timestamp(text: str | None) -> dt.datetime | None:
    """An ISO 8601 timestamp as an aware UTC datetime, or None when absent or unparseable."""
    if not isinstance(text, str) or not text or len(text) > 64:
        return None
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        t = dt.datetime.fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.astimezone(dt.timezone.utc)


def older_than(when: dt.datetime, age: dt.timedelta, now: dt.datetime) -> bool:
    """True when ``when`` lies at least ``age`` before ``now`` (``0s``: anything up to now)."""
    return when <= now - age
