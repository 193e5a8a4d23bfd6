"""Durations (``90d``, ``1d12h``, ``1y``, ``0s``) and timestamps for age selectors. Pure."""

from __future__ import annotations

import datetime as dt
import re

# A year is 365 days: durations select by age, and an operator's "1y" means "about a year ago".
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_PART = re.compile(r"([0-9]{1,9})([smhdwy])")
_DURATION = re.compile(r"(?:[0-9]{1,9}[smhdwy]){1,7}")
# Far beyond any session's age, and well inside what datetime arithmetic can subtract from now.
_MAX_SECONDS = 1000 * _UNITS["y"]


def parse_duration(text: str) -> dt.timedelta:
    """``<n><unit>`` parts with units s, m, h, d, w, y (365 days), largest first and each once:
    ``90d``, ``1d12h``, ``1y6w``; raises ValueError otherwise."""
    s = text.strip() if isinstance(text, str) else ""
    parts = _PART.findall(s) if _DURATION.fullmatch(s) else []
    order = [list(_UNITS).index(u) for _, u in parts]
    if not parts or order != sorted(set(order), reverse=True):
        raise ValueError(
            f"{text!r} is not a duration; write numbers with units, largest first: "
            "30s, 15m, 12h, 90d, 1d12h, 2w, 1y"
        )
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds > _MAX_SECONDS:
        raise ValueError(f"{text!r} is longer than 1000 years; give a shorter duration")
    return dt.timedelta(seconds=seconds)


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
