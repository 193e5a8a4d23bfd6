"""The derived session index: cross-session answers without opening every file, exactly as
true as a scan.

One SQLite file under ``$XDG_CACHE_HOME/agentdb/`` (shared with the verdict cache, see
:mod:`agentdb.index.verdicts`) keeps, per sessions directory and file name, what one open of the
file read (:mod:`agentdb.index.record`) and the file's identity when it was read. Every query
walks the directory first (``scandir`` + ``lstat``, :mod:`agentdb.index.stat`), believes a
stored row only when the identity is unchanged and settled, reads every other file (new,
changed, racily clean, unreadable for a passing reason), and writes what it read back in one
transaction. A process that cannot write it (busy, read-only home, damaged) answers from the
files it read and says so; a damaged or foreign index is removed and rebuilt. No answer
depends on the index being there: ``--no-index`` runs the plain scans, and
``tests/test_index_equivalence.py`` compares the two.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentdb.index.walk import *  # noqa: F403


def __getattr__(name: str) -> Any:
    # The walk (records, snapshot, stream, ...) is loaded on first use: the verdict cache
    # (index.verdicts) and a one-file check need none of its worker pool.
    if name.startswith("__") or (Path(__file__).parent / f"{name}.py").exists():
        raise AttributeError(f"module 'agentdb.index' has no attribute {name!r}")
    from agentdb.index import walk

    return getattr(walk, name)
