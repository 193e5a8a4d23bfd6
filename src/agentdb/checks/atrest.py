"""The check of a healthy file at rest, on this process's shared reader.

Most files ``check --all`` meets are healthy and closed: no ``-wal``, ``-shm`` or
``-journal``, nobody has them open, agentdb's revision. For those, :func:`ok_at_rest` proves
the file healthy with the same checks as :func:`agentdb.checks.file.check_path` — the same
stat pass and refusals, the lock probe before and after, the same hardened settings, the
trigger/view refusal, identity and schema, ``quick_check`` (or ``integrity_check``, foreign
keys, consistency, content hashes and the parent's depth for a full check), the UTF-8 scan of
the small tables, the ``session_meta`` row, at revision 3 the chain walk (``--quick``: its O(1)
part; a full check: every row, link and gap — the same ``_Run.rows``), the before/after
comparison — but reads the file
ATTACHed to one hardened connection per process (:func:`agentdb.db.attached_immutable`)
instead of a connection made, hardened and closed for it. It never reports a problem itself:
anything that is not plainly healthy (a finding of any kind, a sidecar, a live holder, an
error, a schema text not yet decided in this process, a file that changed meanwhile) answers
None, and the caller checks the file the ordinary way, which finds and words every problem.
So a verdict other than ``ok`` always comes from ``check_path``, and this path can only save
time.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentdb import db, locks
from agentdb.checks.file import META_SQL, _Run, _snapshot
from agentdb.results import SessionCheck
from agentdb.schema import enums
from agentdb.schema.identity import decided_same
from agentdb.schema.revisions import APPLICATION_ID, CURRENT_REVISION, KNOWN_REVISION
from agentdb.schema.text import small_tables_columns

_S = db.ATTACHED
_ROWS = f"SELECT type, name, tbl_name, sql FROM {_S}.sqlite_schema"
_INTEGRITY = {True: f"PRAGMA {_S}.quick_check(20)", False: f"PRAGMA {_S}.integrity_check(20)"}


def ok_at_rest(
    path: str, session_id: str, stats: db.FileStats, *, quick: bool
) -> SessionCheck | None:
    """The ``ok`` result of a check (``quick`` or full) of the file at ``path`` (named
    ``session_id``), whose :func:`agentdb.db.file_stats` (with its journal) the caller took just
    now; None when the file is not plainly healthy and at rest: check it with ``check_path``
    (see the module)."""
    if stats.wal is not None or stats.shm is not None or stats.journal is not None:
        return None  # read through the WAL or a rolled-back copy: check_path's ways
    run = _Run(Path(path), session_id, quick, False)
    if not run.entry(stats) or run.findings:
        return None
    assert stats.db is not None  # entry() said so
    if locks.leased_here(path):
        return None  # this process writes it: no descriptor of it may be opened and closed
    try:
        fd = os.open(path, locks.OPEN_FLAGS)  # one descriptor: probe before, header, probe after
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (stats.db.st_dev, stats.db.st_ino):
            return None  # replaced since its stat pass
        if locks.probe_open(fd, path) is not None:
            return None  # live (check_path says so and leaves its WAL unjudged)
        # application_id and user_version from the header: with no WAL beside it the file
        # is all there is, and what SQLite reads for the pragmas (a change shows below)
        header = os.pread(fd, 100, 0)
        if len(header) < 100:
            return None
        app = int.from_bytes(header[68:72], "big", signed=True)
        ver = int.from_bytes(header[60:64], "big", signed=True)
        if app != APPLICATION_ID or not CURRENT_REVISION <= ver <= KNOWN_REVISION:
            return None  # foreign, too_new, application_id_zero, needs_migration
        if header[56:60] != b"\x00\x00\x00\x01":
            return None  # text_encoding: not a UTF-8 database
        before = _snapshot(stats)
        try:
            with db.attached_immutable(path) as conn:
                x = conn.execute
                rows = tuple(x(_ROWS))
                for t, n, tb, _ in rows:
                    if t in ("trigger", "view") or type(n) is not str or type(tb) is not str:
                        return None  # unsafe_schema, or a hostile sqlite_schema
                if not decided_same(ver, rows):
                    return None  # differs, or not decided yet in this process
                if x(_INTEGRITY[quick]).fetchall() != [("ok",)]:
                    return None
                got = x(_META_TEXT).fetchall()
                if len(got) != 1 or got[0][7] != 1 or any(got[0][8:]):
                    return None  # meta_missing, invalid_text
                run.judge_meta(tuple(got[0]))
                # revision 2 on: events are covered by their content hashes; revision 3: the
                # chain walk (full, or --quick's O(1) part), as check_path runs it
                run.rows(conn, ver, _S)
        except db.READ_ERRORS:
            return None  # damaged, unreadable, invalid text: check_path words it
        run.revision = ver
        if not quick:  # the parent's file, opened after this one is detached
            run.parent_depth()
        if run.findings or run.status == enums.RUNNING:  # interrupted, unless someone has it
            return None
        # Read without locks (immutable): a writer that started meanwhile shows here.
        if _snapshot(db.file_stats(path, journal=False)) != before:
            return None
        if locks.probe_open(fd, path) is not None:
            return None
    finally:
        os.close(fd)
    return run.result()


# The session_meta row a check judges, then every value of the small tables read whole.
_META_TEXT = f"{META_SQL}, {small_tables_columns()} FROM session_meta LIMIT 1"
