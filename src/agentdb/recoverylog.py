"""The recovery log: ``$XDG_STATE_HOME/agent/recovery.log``, one JSON object per line, append-only.

Every recovery outcome (and the intent before a swap) is a line. Lines are written with one
``write`` on an ``O_APPEND`` descriptor and fsynced, so concurrent jobs never interleave bytes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentdb import fsutil
from agentdb.paths import FILE_MODE

MAX_LINE = 1 << 20  # a line longer than this is skipped when reading (hostile or damaged log)


def now() -> str:
    return (
        dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def append(log_path: Path, entry: dict[str, Any]) -> None:
    """Append one entry (``time`` is added if missing) durably."""
    fsutil.ensure_dir(log_path.parent)
    doc = {"time": now(), **entry}
    line = (json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    fd = os.open(
        log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
    )
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(log_path: Path) -> Iterator[dict[str, Any]]:
    """Every well-formed entry, oldest first; damaged lines are skipped."""
    try:
        f = open(log_path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return
    with f:
        for raw in f:
            if len(raw) > MAX_LINE:
                continue
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if isinstance(doc, dict):
                yield doc


def entries_for(log_path: Path, session_id: str) -> list[dict[str, Any]]:
    return [e for e in read(log_path) if e.get("session_id") == session_id]
