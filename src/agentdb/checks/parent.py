"""What ``check`` reads from a session's parent file: its depth (for ``depth_mismatch``).

The parent is opened like any untrusted file (the hardened read-only open: no symlink, no
insecure mode, no triggers or views, nothing created beside it) and only when it is a
readable session file whose ``session_meta`` names it; otherwise there is nothing to compare.
"""

from __future__ import annotations

from pathlib import Path

from agentdb import db, errors
from agentdb.schema.identity import identify


def parent_depth(path: Path, parent_id: str) -> int | None:
    """The ``depth`` of session ``parent_id`` stored at ``path``; None when it cannot be read."""
    if not db.file_stats(path).db:
        return None
    try:
        conn = db.open_readonly(path)
    except errors.AgentdbError:
        return None
    try:
        with db.translated(path):
            if identify(conn).kind != "session":
                return None
            rows = db.rows(
                conn, "SELECT session_id, typeof(depth), depth FROM session_meta LIMIT 2"
            )
    except errors.AgentdbError:
        return None
    finally:
        conn.close()
    if len(rows) != 1 or rows[0][0] != parent_id or rows[0][1] != "integer":
        return None
    return int(rows[0][2])
