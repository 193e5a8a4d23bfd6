"""The backup copies of a session in a backup folder, newest first, and their verification.

The names are ``backup``'s (:mod:`agentdb.jobs.backupdir`): ``DIR/<id>.sqlite``, the copy ``backup``
keeps up to date, and ``DIR/<id>.sqlite.<UTC timestamp>[.N]``, the states of a session written
after it stopped being a superset of that copy (a lossy recovery) — newer than it, newest
first, as :func:`agentdb.jobs.backupdir.copies_of` orders them. ``.corrupt`` names and temporary
files are not copies. Nothing here follows a symlink or opens a copy but through ``check``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentdb import checks, paths
from agentdb.checks import policy
from agentdb.fsutil import StatKey, stat_key
from agentdb.jobs import backupdir

ACCEPTED = policy.ACTS["restore"]  # check verdicts a copy may have to be restored


@dataclass(frozen=True)
class Copy:
    """One copy of a session in the backup folder."""

    path: Path  # the copy's file
    stamp: StatKey  # (inode, size, mtime_ns): a copy that changes is judged again


def copy_of(path: Path) -> Copy:
    return Copy(path, stat_key(os.lstat(path)))


def copies_of(from_dir: Path, session_id: str) -> list[Copy]:
    """One session's copies, newest first."""
    out = []
    for p in backupdir.copies_of(from_dir, session_id):
        try:
            out.append(copy_of(p))
        except FileNotFoundError:
            continue
    return out


def list_copies(from_dir: Path) -> dict[str, list[Copy]]:
    """Every session's copies in ``from_dir``, newest first (one ``scandir``, the order of
    :func:`agentdb.jobs.backupdir.copies_of`)."""
    found: dict[str, list[tuple[tuple[int, str, int], Path]]] = {}
    with os.scandir(from_dir) as it:
        for de in it:
            sid = paths.session_id_of(de.name)
            key = (0, "", 0)  # the plain copy: older than every timestamped one
            if sid is None:
                m = backupdir.STAMPED_RE.fullmatch(de.name)
                if m is None:
                    continue
                sid, key = m.group("id"), (1, m.group("stamp"), int(m.group("n") or 0))
            found.setdefault(sid, []).append((key, from_dir / de.name))
    out: dict[str, list[Copy]] = {}
    for sid in sorted(found):
        for _, p in sorted(found[sid], reverse=True):
            try:
                out.setdefault(sid, []).append(copy_of(p))
            except FileNotFoundError:
                continue
    return out


def verify(copy: Copy, session_id: str, *, recovered: bool) -> str | None:
    """None when ``check`` passes the copy as ``session_id`` (ok, or only an older revision);
    otherwise its verdict and first problem in one line. ``check`` also proves the copy's
    session_meta names ``session_id`` (``meta_id_mismatch`` otherwise)."""
    result = checks.check_path(copy.path, session_id, recovered=recovered)
    if result.verdict in ACCEPTED:
        return None
    bad = [f for f in result.findings if f.severity == "error"] or result.findings
    why = bad[0].message if bad else ""
    return f"{result.verdict}: {why}" if why else result.verdict
