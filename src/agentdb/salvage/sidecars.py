"""The sidecars beside a session file, judged for recovery: a WAL that belongs to another
database (foreign only on evidence), and a hot rollback journal."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

from agentdb import db, errors, fsutil, paths
from agentdb.fileformat import journal_problem, journal_restores, parse_journal_header
from agentdb.fileformat.btree import FormatError, PageKind, TableLeafCell, parse_page
from agentdb.fileformat.record import decode_record
from agentdb.fileformat.wal import WalScan
from agentdb.salvage import rows, tables


def open_copy(copy: Path) -> tuple[Any, BaseException | None]:
    """(connection, None) to a private copy, or (None, the error opening it)."""
    try:
        return rows.open_copy(copy), None
    except errors.AgentdbError as e:
        return None, e


def meta_elsewhere(conn: Any, db_copy: Path, session_id: str, work: Path) -> str | None:
    """Evidence that the WAL is another session's: applied, it gives a session_meta row
    naming another valid session id, while the file alone names this one. None otherwise (an
    id that is no session id — invalid UTF-8, garbage — is damage, not another session)."""
    if conn is None:
        return None
    try:
        ids = [
            r[0]
            for r in conn.execute("SELECT CAST(session_id AS BLOB) FROM session_meta NOT INDEXED")
        ]
    except db.READ_ERRORS:
        return None
    if len(ids) != 1 or not isinstance(ids[0], bytes) or ids[0] == session_id.encode():
        return None  # a NULL id (a damaged cell read as NULL) is damage, not another session
    try:
        other_id = ids[0].decode("utf-8")
    except UnicodeDecodeError:
        return None  # no session id at all (damage, e.g. invalid UTF-8): not another session's
    if not paths.is_valid_id(other_id):
        return None
    alone = work / "alone"
    fsutil.ensure_dir(alone)
    copy = alone / f"{session_id}.sqlite"
    fsutil.copy_regular(db_copy, copy, fsync=False)
    try:
        other = db.open_readonly(copy)
    except errors.AgentdbError:
        return None
    try:
        mine = [
            r[0]
            for r in other.execute("SELECT CAST(session_id AS BLOB) FROM session_meta NOT INDEXED")
        ]
    except db.READ_ERRORS:
        return None
    finally:
        other.close()
        copy.unlink()
    if mine != [session_id.encode()]:
        return None
    theirs = ids[0][:40].decode("utf-8", "backslashreplace")
    return f"applied, it gives session_meta {theirs!r}; the file alone names {session_id}"


def meta_in_frames(scan: WalScan, session_id: str) -> str | None:
    """Page-level evidence that the WAL is another session's, for a file SQLite cannot read
    with it: a committed frame holds a session_meta record (whole on its page) naming another
    valid session id. None otherwise (a record that does not decode, or an id that is no
    session id, is damage, not another session)."""
    size = scan.page_size
    if size is None:
        return None
    resumed = [f for group in scan.resumed_commits for f in group]
    newest = {f.pgno: f for f in [*scan.valid_frames, *resumed]}
    for frame in newest.values():
        try:
            page = parse_page(scan.frame_page(frame), frame.pgno, size)
        except FormatError:
            continue
        if page.kind is not PageKind.LEAF_TABLE:
            continue
        for i in range(page.cell_count):
            try:
                cell = page.cell(i)
                if not isinstance(cell, TableLeafCell) or cell.overflow_pgno is not None:
                    continue
                rec = decode_record(cell.local)
            except (FormatError, UnicodeDecodeError):
                continue
            got = tables.classify(rec, cell.rowid)
            if got is None or got[0] != "session_meta":
                continue
            other = got[1][0]
            if (
                isinstance(other, str)
                and other != session_id
                and paths.is_valid_id(other)
                and tables.problem("session_meta", got[1], other) is None
            ):
                return (
                    f"frame for page {frame.pgno} holds session_meta naming {other}; "
                    f"the file is {session_id}"
                )
    return None


def is_hot_journal(journal: Path) -> bool:
    """Whether the (private copy of a) journal is hot: its header says it rolls pages back."""
    with open(journal, "rb") as f:
        return parse_journal_header(f.read(28)) is not None


def journal_playback(journal: Path) -> tuple[frozenset[int], bool] | None:
    """The pages a hot journal's rollback restores, and whether it is torn: cut short, or a
    record's checksum fails, so it cannot roll its whole transaction back. None when it
    promises nothing (see :func:`agentdb.fileformat.journal_restores`)."""
    with open(journal, "rb") as f:
        if os.fstat(f.fileno()).st_size < 28:
            return None  # not hot
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m, memoryview(m) as view:
            got = journal_restores(view)
    return None if got is None else (got[0], bool(got[1]))


def roll_back(copy: Path, journal: Path, work: Path) -> tuple[str | None, bool]:
    """Roll the hot journal back into ``copy`` (a private copy of the database): (None, False)
    when done, else (why the journal is not this database's, whether its content names another
    session): its header disagrees with the file, the rollback fails, or the rolled-back state
    is another session's (:func:`agentdb.db.journal_rollback_foreign`); ``copy`` is then
    unchanged, and the journal is treated like another database's WAL. A journal whose rollback
    gives another session's rows was written by another session's writer: nothing says this
    file's own writer died mid-transaction."""
    with open(copy, "rb") as f:
        header = f.read(100)
    with open(journal, "rb") as f:
        problem = journal_problem(header, f.read(28), os.fstat(f.fileno()).st_size)
    other = False
    if problem is None:
        where = work / "rollback"
        fsutil.ensure_dir(where)
        rolled = where / copy.name
        fsutil.copy_regular(copy, rolled, fsync=False)
        os.link(journal, rolled.with_name(copy.name + "-journal"))  # both private: one file
        try:
            problem = db.roll_back_checked(rolled)
            other = problem is not None
        except errors.AgentdbError as e:
            problem = f"rolling it back fails: {str(e).split(': ', 1)[-1]}"
        if problem is None:
            os.replace(rolled, copy)
            return None, False
    return (
        f"its rollback journal is not this database's ({problem}); salvaged from the file as "
        "it is, the journal is kept with the original"
    ), other
