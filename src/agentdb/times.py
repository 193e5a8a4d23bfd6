"""Times as agentdb shows them: one format, RFC 3339 with an explicit zone. Pure.

UTC with ``Z`` everywhere by default (tables, JSON, the recovery log, the verdict cache); with
``--local`` (or ``$TZ`` set) tables show the local time with its UTC offset
(``2026-05-18T13:13:52-04:00``). Stored times are UTC; one without a zone is read as UTC.
"""

from __future__ import annotations

import datetime as dt

UTC = dt.timezone.utc


def parse(value: str) -> dt.datetime | None:
    """An ISO 8601 / RFC 3339 time (``Z`` or an offset; none: UTC), or None when ``value`` is
    not one (a session file may hold anything)."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    text = value.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def rfc3339(t: dt.datetime, *, local: bool = False, ms: bool = False) -> str:
    """``t`` in RFC 3339: UTC with ``Z``, or (``local``) this machine's local time with its
    offset; to the second, or (``ms``) the millisecond."""
    t = t.astimezone() if local else t.astimezone(UTC)
    text = t.isoformat(timespec="milliseconds" if ms else "seconds")
    return text if local else text.replace("+00:00", "Z")


def show(value: str | None, *, local: bool = False, ms: bool = False) -> str:
    """A stored time as a table shows it (:func:`rfc3339`); empty for None; a value that is not
    a time is shown as it is."""
    if value is None:
        return ""
    t = parse(value)
    return value if t is None else rfc3339(t, local=local, ms=ms)


def now(*, ms: bool = False) -> str:
    """The current UTC time in RFC 3339 with ``Z``."""
    return rfc3339(dt.datetime.now(UTC), ms=ms)
