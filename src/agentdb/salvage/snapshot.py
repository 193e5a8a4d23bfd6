"""Steps 1 and 2 of a recovery plan: snapshot the session, then judge the snapshot.

:func:`take` runs while the caller holds :func:`agentdb.locks.hold` on the session. It records
what the file and its sidecars are (device, inode, size, mtime: :class:`Stamp`), and copies
them into the job's private work directory: the database as a hot rollback journal's rollback
leaves it (rolled back on the copy, never on the original), and its WAL. Nothing in the sessions
directory is written. :func:`judge` opens that copy read-only and diagnoses it; a WAL that is
another database's (on evidence only) is set aside and the file judged alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdb import db, errors, fsutil, swap
from agentdb.checks import walevidence
from agentdb.fileformat import FileBytes, WalScan, foreign_evidence, scan_wal
from agentdb.paths import sidecar
from agentdb.salvage import rows, sidecars
from agentdb.schema.revisions import APPLICATION_ID


@dataclass(frozen=True)
class Stamp:
    """What a file was when it was read: a later :func:`stamp` that differs means it changed."""

    dev: int
    ino: int
    size: int
    mtime_ns: int


def stamp(path: Path) -> Stamp | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return Stamp(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class Snapshot:
    """The session as the plan read it, and the private copy the engines work on."""

    path: Path  # the session file
    stamps: tuple[Stamp | None, ...]  # the file, its -wal and -journal when the plan read them
    interrupted: Path | None  # a .corrupt name an interrupted recovery already gave this file
    copy: Path  # private copy of the database (a hot journal rolled back)
    wal: Path | None  # the WAL the copy is read with (None: none, or another database's)
    had_wal: bool  # a WAL was beside the file (it goes with the original)
    had_journal: bool  # a hot rollback journal was beside the file (it goes with the original)
    journal_note: str | None = None  # why the journal was not applied (not this database's)
    # A hot journal of this database cut short or torn (its records do not all read whole):
    # the pages its intact records restored, the only ones known to hold committed content;
    # every other page may hold the killed transaction's writes. None: no such journal.
    journal_torn: frozenset[int] | None = None
    # The pages a hot journal applied to the copy restored, torn or whole; None: none applied.
    journal_restored: frozenset[int] | None = None
    header: bytes = field(default=b"", repr=False)  # the copy's first 100 bytes
    # the private WAL copy's frames, scanned once (pages read from it on demand), None: no WAL
    wal_scan: WalScan | None = field(default=None, repr=False)
    _wal_fd: int | None = field(default=None, repr=False)  # the open private WAL copy

    def current_stamps(self) -> tuple[Stamp | None, ...]:
        return _stamps(self.path)

    def drop_wal(self) -> None:
        """Read the copy without its WAL from now on (another database's WAL)."""
        self.release()
        if self.wal is not None:
            for suffix in ("-wal", "-shm"):
                sidecar(self.copy, suffix).unlink(missing_ok=True)
        self.wal = None

    def release(self) -> None:
        """Close the WAL scan kept for the engines (the plan keeps only paths and counts)."""
        self.wal_scan = None
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None


def _stamps(path: Path) -> tuple[Stamp | None, ...]:
    return (stamp(path), stamp(sidecar(path, "-wal")), stamp(sidecar(path, "-journal")))


def take(path: Path, fd: int, work: Path) -> Snapshot | None:
    """Copy the held session into ``work``; None when the file was replaced while locking.
    The database, its WAL and a hot journal are copied in chunks, never held whole; the WAL
    copy is scanned once, frame by frame, and its pages are read from it as the engines ask.
    The caller calls :meth:`Snapshot.release` when done."""
    st = os.fstat(fd)
    now = os.lstat(path)
    if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
        return None
    stamps = _stamps(path)
    interrupted = swap.existing_corrupt_of(path, st)
    wal_path = sidecar(path, "-wal")
    if not wal_path.exists() and interrupted is not None:
        wal_path = sidecar(interrupted, "-wal")  # an interrupted swap already moved it
    copy = work / path.name
    wal: Path | None = sidecar(copy, "-wal")
    if not _copy_regular(wal_path, sidecar(copy, "-wal")):
        wal = None
    journal_path = sidecar(path, "-journal")
    if not journal_path.exists() and interrupted is not None:
        journal_path = sidecar(interrupted, "-journal")
    journal = work / "hot-journal"
    try:
        had_journal = _copy_regular(journal_path, journal) and sidecars.is_hot_journal(journal)
    except (OSError, errors.AgentdbError):
        had_journal = False  # no journal a rollback would read
    _copy_fd(fd, st.st_size, copy)
    journal_note, torn, restored, other = None, None, None, False
    if had_journal:
        playback = sidecars.journal_playback(journal)
        if playback is not None:
            restored = playback[0]
            torn = restored if playback[1] else None
        journal_note, other = sidecars.roll_back(copy, journal, work)
    journal.unlink(missing_ok=True)
    with open(copy, "rb") as f:
        header = f.read(100)
    snap = Snapshot(
        path,
        stamps,
        interrupted,
        copy,
        wal,
        had_wal=wal is not None,
        had_journal=had_journal,
        journal_note=journal_note,
        # a hot journal left unapplied: the dead writer may have changed any page, and none
        # was restored, so every row no hash vouches for is in doubt — unless its rollback
        # gives another session's rows: then another session's writer wrote it, not this
        # file's (rows of this file it changed would be this session's, judged as any damage)
        journal_torn=torn if journal_note is None else None if other else frozenset(),
        journal_restored=restored if journal_note is None else None,
        header=header,
    )
    if wal is not None:
        snap._wal_fd = fsutil.open_regular(wal)
        snap.wal_scan = scan_wal(FileBytes(snap._wal_fd))
    return snap


def _copy_regular(src: Path, dst: Path) -> bool:
    """Copy the regular file ``src`` (its size when opened) into the new private file ``dst``;
    False, writing nothing, when ``src`` is absent or empty. Never follows a symlink."""
    try:
        fd = fsutil.open_regular(src)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        if not size:
            return False
        _copy_fd(fd, size, dst)
        return True
    finally:
        os.close(fd)


def _copy_fd(fd: int, size: int, dst: Path) -> None:
    """The first ``size`` bytes of the open file ``fd`` into the new private file ``dst``."""
    out = fsutil.open_regular(dst, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with fsutil.naming(dst):
            pos = 0
            while pos < size:
                try:  # in the kernel: no copy of the file passes through this process
                    n = os.copy_file_range(fd, out, min(_CHUNK, size - pos), pos)
                except OSError:
                    chunk = os.pread(fd, min(_CHUNK, size - pos), pos)
                    fsutil.write_all(out, chunk)
                    n = len(chunk)
                if not n:
                    break
                pos += n
    finally:
        os.close(out)


_CHUNK = 1 << 20


def judge(snap: Snapshot, session_id: str, work: Path) -> tuple[Any, rows.Diagnosis]:
    """(connection to the copy or None, diagnosis). A WAL that is another database's is set
    aside (``snap.wal`` becomes None) and the file judged alone."""
    conn, open_error = sidecars.open_copy(snap.copy)
    diag = rows.diagnose(conn, open_error, session_id)
    if snap.wal_scan is not None:
        scan = snap.wal_scan
        foreign = (
            foreign_evidence(snap.header, scan, (APPLICATION_ID,))
            or sidecars.meta_elsewhere(conn, snap.copy, session_id, work)
            or sidecars.meta_in_frames(scan, session_id)
            or _rewritten(scan, snap.copy, conn, session_id)
            or _wal_behind(conn, snap.copy)
        )
        if foreign is not None:
            # Another database's WAL: salvage this session from its file alone; the WAL goes
            # with the original as <corrupt>-wal.
            if conn is not None:
                conn.close()
            snap.drop_wal()
            conn, open_error = sidecars.open_copy(snap.copy)
            diag = rows.diagnose(conn, open_error, session_id)
            _damaged(diag, f"WAL is another database's ({foreign}); salvaged from the file alone")
        elif "wal_frames_after_break" in scan.codes:
            _damaged(diag, "WAL: intact commits after a checksum break")
        elif "wal_bad_header" in scan.codes:
            # SQLite ignores the whole WAL, so its commits would be lost on the next open:
            # check calls it corrupt; its frames are salvaged as older page copies.
            n = len(scan.frames)
            _damaged(diag, f"WAL: the header is damaged, so SQLite ignores its {n} frames")
        elif diag.refused == "empty" and any(f.pgno == 1 for f in scan.valid_frames):
            # An empty file (lost its bytes in a crash, say) whose WAL holds this session's
            # commits: SQLite ignores a WAL beside an empty file (and its next write deletes
            # it), but the frames are the session's pages: salvage them.
            diag.refused = None
            n = len(scan.valid_frames)
            _damaged(diag, f"the file is empty, but its WAL holds {n} frames: salvaged from them")
    if snap.journal_note is not None:  # a journal that is not this database's
        _damaged(diag, snap.journal_note)
    # Messages about the private copy name the session file the operator knows.
    diag.reasons = [r.replace(str(snap.copy), str(snap.path)) for r in diag.reasons]
    return conn, diag


def _rewritten(scan: WalScan, copy: Path, conn: Any, session_id: str) -> str | None:
    """check's evidence from the events (:func:`walevidence.events_rewritten`), unless the
    state read through the WAL is this session's whole chain (:func:`agentdb.db.chain_whole`):
    then the file alone holds another session's page, not the WAL."""
    why = walevidence.events_rewritten(scan, copy)
    if why is not None and conn is not None and db.chain_whole(conn, session_id):
        return None
    return why


def _wal_behind(conn: Any, copy: Path) -> str | None:
    """check's evidence (:func:`agentdb.db.wal_behind`): read through the WAL (``conn``), the
    private ``copy`` loses events it holds alone."""
    if conn is None:
        return None
    try:
        alone = db.open_readonly_alone(copy)
    except errors.AgentdbError:
        return None
    try:
        mine = db.event_ids(alone)
    finally:
        alone.close()
    return db.wal_behind(db.event_ids(conn), mine) if mine else None


def _damaged(diag: rows.Diagnosis, reason: str) -> None:
    diag.damaged = True
    diag.integrity_only = False
    diag.reasons.append(reason)
