"""Durations as operators write them: ``90d``, ``12h``, ``30m``, ``45s``, ``2w``, ``0s``."""

from __future__ import annotations

import datetime as dt
import re

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_DURATION_RE = re.compile(r"([0-9]{1,9})([smhdw])")


def parse_duration(text: str) -> dt.timedelta:
    """``<N><unit>`` with unit s, m, h, d or w as a timedelta; ValueError on anything else."""
    m = _DURATION_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(
            f"{text!r} is not a duration; write a whole number and a unit: 45s, 30m, 12h, 90d, 2w"
        )
    return dt.timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
