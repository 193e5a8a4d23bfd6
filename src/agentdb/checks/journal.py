"""A hot rollback journal beside a session file is not damage in itself.

A writer killed mid-transaction in DELETE mode leaves ``<id>.sqlite-journal`` holding the
committed pages the file's uncommitted ones overwrote; the first read-write open rolls them
back. ``check`` judges the state that rollback gives: the file and its journal are copied into a
private directory, the copy is rolled back there (the original is never touched) and checked
with the file's ``-wal`` beside it, if it has one (SQLite applies it after the rollback),
with an informational ``hot_journal`` finding. A journal whose header disagrees with the file
(page size, a restored size of 0 pages), whose rollback fails, or whose rollback gives another
session's content (:func:`agentdb.db.journal_rollback_foreign`: another session_meta id, an
event whose id changes) is treated like a WAL of another database: ``foreign_journal``
(corrupt), and the file is judged as it is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from agentdb import db, errors, fsutil, locks
from agentdb.checks.codes import finding, verdict_of
from agentdb.paths import sidecar
from agentdb.results import SessionCheck

Check = Callable[[Path], SessionCheck]


def hot_journal(path: Path) -> bytes | None:
    """The bytes of a hot journal beside ``path`` nobody is writing, else None."""
    from agentdb.fileformat import parse_journal_header  # only beside a journal (start-up)

    journal = sidecar(path, "-journal")
    try:
        data = fsutil.read_regular(journal)
    except (FileNotFoundError, errors.AgentdbError, OSError):
        return None
    if parse_journal_header(data) is None or locks.probe(path) is not None:
        return None
    return data


def read_header(path: Path) -> bytes:
    """The database header (first 100 bytes), or b"" when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.pread(fd, 100, 0)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _copy_wal(path: Path, copy: Path) -> bool:
    """Put a private copy of ``path``'s -wal, if it has one, beside ``copy``; False when it
    could not be copied as it was."""
    wal = sidecar(path, "-wal")
    try:
        st = os.lstat(wal)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return bool(fsutil.copy_private(wal, sidecar(copy, "-wal"), st))


def check_with_journal(path: Path, check: Check) -> SessionCheck | None:
    """``check`` of the rolled-back state when a hot journal lies beside ``path``; None when
    there is none (the caller checks the file itself)."""
    data = hot_journal(path)
    if data is None:
        return None
    from agentdb.fileformat import journal_problem

    name = path.name
    problem = journal_problem(read_header(path), data, len(data))
    if problem is None:
        with fsutil.private_workdir("agentdb-journal-") as work:
            copy = work / name
            try:
                st = os.lstat(path)
            except OSError:
                return None
            if fsutil.copy_private(path, copy, st):
                sidecar(copy, "-journal").write_bytes(data)
                try:
                    problem = db.roll_back_checked(copy)
                except errors.AgentdbError as e:
                    problem = f"rolling it back fails ({e.detail})"
                if problem is None:
                    # SQLite rolls a hot journal back and then opens a -wal beside the file,
                    # whatever the header says: judge exactly that state.
                    if not _copy_wal(path, copy):
                        return None  # the -wal changed meanwhile: check the file as it is
                    result = check(copy)
                    result.path = path
                    result.findings.append(
                        finding(
                            "hot_journal",
                            f"{name}: a hot journal (a writer died mid-transaction); judged as "
                            "rolled back — it will be rolled back on the next open",
                        )
                    )
                    result.verdict = verdict_of(result.findings)
                    return result
            else:
                return None  # the file changed meanwhile: check it as it is
    result = check(path)
    result.findings.append(
        finding(
            "foreign_journal",
            f"{name}: its rollback journal is not this database's ({problem}); run "
            f"`agentdb recover {result.session_id}` (it keeps the journal with the original)",
            f"agentdb recover {result.session_id}",
        )
    )
    result.verdict = verdict_of(result.findings)
    return result
