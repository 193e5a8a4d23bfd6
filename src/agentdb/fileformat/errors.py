"""The one exception the fileformat readers raise on bad bytes."""

from __future__ import annotations


class FormatError(ValueError):
    """Bytes that do not follow SQLite's documented on-disk format.

    Every parser in :mod:`agentdb.fileformat` raises only this exception on garbage input, so
    callers (checks, salvage) can catch one class and keep going.
    """
