"""The plan's scratch database: what a prune plan knows of every session of the directory, as
rows, not objects, so a plan's memory does not grow with the sessions it does not select.

It lives in a private 0700 work directory (:func:`agentdb.fsutil.private_workdir`: under
agentdb's own cache, never in the sessions directory), is written by the plan and read by
``execute``, and goes with its directory when the plan is closed (or collected, or the process
exits; a directory a killed job left is swept by the next job that makes one). When it cannot
be written (a full disk, a file size limit, a read-only cache) the plan is made with it in
memory instead (:attr:`PlanStore.why_memory`, a note on stderr).

Tables (one row per session id; ``facts`` rows only for the ids a plan looks at):

* ``entry``: the names the directory holds for the id (``<id>.sqlite``, its sidecars, its
  ``.corrupt`` copies, an interrupted prune's intent), its identity when the plan began
  (:mod:`agentdb.index.stat`) and whether that identity was settled;
* ``facts``: what the plan read of it (:class:`~agentdb.prune.scan.Facts`, pickled whole, and
  the columns the plan selects by: parent link, status, profile, ``ended_at``), then what the
  plan decided of it (matched by the filters, confirmed from the index, check's judgement,
  a candidate);
* ``refs``: the cached plugin versions it references (readable sessions only);
* ``grp``: the selected sessions and, with ``--with-descendants``, the members of their
  subtrees, each with the selected session whose group it is in;
* ``decision``: what the plan decided of each candidate (:class:`~.decisions.PruneDecision`:
  its reasons, files, stamp, pins, status), read back in id order by ``dry_run``, ``execute``
  and the renderers.

Size: over 500 lines because it is one scratch database: its DDL, and the row reads and writes
of a plan that must stay flat in memory.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import pickle
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors, fsutil, locks, paths
from agentdb.index import plugins, stat
from agentdb.prune.scan import (
    CORRUPT_RE,
    INTENT,
    NAME_RE,
    NONE,
    PLAIN,
    SIDECAR_RE,
    STAMPLESS,
    Facts,
    Files,
    Judged,
    Meta,
    Pins,
    Stamp,
    read_intent,
)

PAGE = 4096  # rows fetched at a time when a pass walks a table
# The sessions a count takes as removed, as a correlated subquery (``g.id`` is a session id):
# those listed in ``temp.gone``, or the plan's removals (looked up one at a time: never a copy
# of them all).
GONE = {
    "listed": "SELECT 1 FROM temp.gone g WHERE 1",
    "plan": "SELECT 1 FROM decision g WHERE g.remove",
}
# What the scratch database raises when it cannot be written (a full disk, a file size limit):
# the plan is then made again with the database in memory.
FAILURES: tuple[type[BaseException], ...] = (apsw.Error,)

_SCHEMA = """
CREATE TABLE entry(
  id TEXT PRIMARY KEY,
  listed INTEGER NOT NULL DEFAULT 0,    -- the scan found a name for it
  main INTEGER NOT NULL DEFAULT 0,      -- <id>.sqlite exists (whatever it is)
  files BLOB,                           -- pickled Files when not just the main file
  intent INTEGER NOT NULL DEFAULT 0,    -- an interrupted prune left its intent file
  explicit INTEGER NOT NULL DEFAULT 0,  -- named by the operator
  wanted INTEGER NOT NULL DEFAULT 0,    -- the plan reads its facts
  inseen INTEGER NOT NULL DEFAULT 0,    -- the stat walk listed it
  key TEXT,                             -- its identity then (NULL: not a regular file)
  racy INTEGER NOT NULL DEFAULT 0       -- that identity was not settled when the plan began
) WITHOUT ROWID;
CREATE TABLE facts(
  id TEXT PRIMARY KEY,
  blob BLOB NOT NULL,                   -- the pickled Facts
  absent INTEGER NOT NULL,
  readable INTEGER NOT NULL,
  has_info INTEGER NOT NULL,
  parent TEXT, profile TEXT, status TEXT, ended_at TEXT,
  holder INTEGER NOT NULL,              -- someone had it open when read
  fresh INTEGER NOT NULL DEFAULT 0,     -- read from its file by this plan (not the index)
  matched INTEGER NOT NULL DEFAULT 0,   -- the filters select it
  confirmed INTEGER NOT NULL DEFAULT 0, -- facts from the index, entry unchanged, judge agrees
  judged INTEGER NOT NULL DEFAULT 0,    -- check's judge has read it
  jproblem TEXT, jstatus TEXT,          -- what the judge said
  cand INTEGER NOT NULL DEFAULT 0       -- a candidate of the plan (selected, joined, resumed)
) WITHOUT ROWID;
CREATE INDEX facts_parent ON facts(parent, id) WHERE parent IS NOT NULL;
CREATE TABLE refs(
  id TEXT NOT NULL, category TEXT NOT NULL, name TEXT NOT NULL, version TEXT NOT NULL,
  PRIMARY KEY (id, category, name, version)
) WITHOUT ROWID;
CREATE TABLE grp(
  id TEXT PRIMARY KEY,                  -- a selected session, or one that joined its subtree
  root TEXT NOT NULL,                   -- the selected session whose group it is in
  seq INTEGER NOT NULL UNIQUE           -- the order it joined (the selected first, in id order)
) WITHOUT ROWID;
CREATE INDEX grp_root ON grp(root);
CREATE TABLE decision(
  id TEXT PRIMARY KEY,                  -- a candidate (grp, or an interrupted prune to finish)
  remove INTEGER NOT NULL,              -- no reason keeps it
  reasons BLOB NOT NULL,                -- marshal: ((code, message), ...), every reason it stays
  bytes INTEGER NOT NULL,
  files BLOB NOT NULL,                  -- marshal: the names removing it deletes, in order
  damaged INTEGER NOT NULL,
  resume INTEGER NOT NULL,
  stamp BLOB,                           -- marshal: (main, wal), or NULL for no stamp
  pins BLOB NOT NULL,                   -- marshal: the cached versions it uses
  npins INTEGER NOT NULL,
  status TEXT,                          -- its status as planned
  odd INTEGER NOT NULL,                 -- a reason of its own reads as one a subtree passed on
  comp INTEGER NOT NULL DEFAULT 0       -- the fixed point has run over its connected set
) WITHOUT ROWID;
CREATE TEMP TABLE gone(id TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TEMP TABLE load(id TEXT PRIMARY KEY) WITHOUT ROWID;
"""


class PlanStore:
    """One plan's scratch database (see the module's docstring). Not shared between
    processes: worker processes never touch it."""

    def __init__(self, pins: Pins, *, memory: bool = False) -> None:
        """On disk in a private work directory; in memory with ``memory``, or when that
        directory or its database cannot be written (a full disk, a file size limit, a
        read-only cache): then :attr:`why_memory` says why."""
        self.pins = pins
        self.why_memory: str | None = "asked" if memory else None
        self._stack = contextlib.ExitStack()
        if not memory:
            try:
                workdir = self._stack.enter_context(fsutil.private_workdir("agentdb-prune-"))
                self._open(db.open_private(workdir / "plan.sqlite"))
            except (OSError, apsw.Error, errors.AgentdbError) as e:
                self._stack.close()
                self._stack = contextlib.ExitStack()
                self.why_memory = str(e).split("\n")[0][:200]
                memory = True
        if memory:
            self._open(db.open_memory())
        self._pid = os.getpid()
        self._closer = weakref.finalize(self, _close, self._stack, self._pid)

    @property
    def on_disk(self) -> bool:
        return self.why_memory is None

    def _open(self, conn: Any) -> None:
        self.conn = conn
        self._stack.callback(conn.close)
        db.exec_script(
            conn,
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA locking_mode=EXCLUSIVE;"
            "PRAGMA temp_store=MEMORY; PRAGMA cache_size=-4096;" + _SCHEMA + "BEGIN;",
        )

    def close(self) -> None:
        """Drop the database and its directory (idempotent)."""
        self._closer()

    # ------------------------------------------------------------------ the directory's names

    def add_names(self, sessions_dir: Path, ids: Sequence[str], began: int) -> None:
        """One ``scandir``: each id's agentdb-known names (as :func:`.scan.group_names`); only
        ids with more than their main file keep a :class:`Files` in memory meanwhile. Then each
        ``<id>.sqlite`` entry's identity (:func:`agentdb.index.stat.seen`, as
        :func:`~agentdb.index.stat.seen_all` takes it; racy when not settled at ``began``), the
        explicit ``ids`` and which ids the plan reads (``wanted``)."""
        extra: dict[str, Files] = {}
        mains: list[tuple[str]] = []
        with os.scandir(sessions_dir) as it:
            for de in it:
                m = NAME_RE.fullmatch(de.name)
                if m is None:
                    continue
                sid, rest = m.group("id"), m.group("rest")
                if rest == "":
                    mains.append((sid,))
                    if len(mains) >= PAGE:
                        self._add_mains(mains)
                    continue
                f = extra.get(sid)
                if f is None:
                    f = extra[sid] = Files()
                if SIDECAR_RE.fullmatch(rest):
                    f.sidecars.append(de.name)
                elif CORRUPT_RE.fullmatch(rest):
                    f.corrupt.append(de.name)
                elif rest == INTENT:
                    f.intent = True
        self._add_mains(mains)
        for sid, f in extra.items():
            f.sidecars.sort()
            f.corrupt.sort()
            self.conn.execute(
                "INSERT INTO entry(id, listed) VALUES (?, 1) "
                "ON CONFLICT(id) DO UPDATE SET listed=1",
                (sid,),
            )
            f.main = bool(db.scalar(self.conn, "SELECT main FROM entry WHERE id=?", (sid,)))
            if f == PLAIN:  # only its main file and names prune ignores
                continue
            # An intent cut short beside its session removed nothing: the session is judged as
            # this run judges any (removing it replaces that intent, under the session's lock).
            resume = f.intent and not (f.main and read_intent(sessions_dir, sid).cut)
            self.conn.execute(
                "UPDATE entry SET files=?, intent=? WHERE id=?",
                (pickle.dumps(f), int(resume), sid),
            )
        self.conn.executemany(
            "INSERT INTO entry(id, explicit) VALUES (?, 1) "
            "ON CONFLICT(id) DO UPDATE SET explicit=1",
            ((sid,) for sid in ids),
        )
        self.conn.execute("UPDATE entry SET wanted=1 WHERE main OR explicit OR intent")
        sidecars = {n for f in extra.values() for n in f.sidecars}
        where = os.path.join(os.fspath(sessions_dir), "")
        for page in self._main_ids():
            keys = []
            for sid in page:
                s = stat.seen(paths.Entry(sid, sessions_dir), sidecars, where)
                keys.append((s.key, not s.settled(began), sid))
            self.conn.executemany("UPDATE entry SET inseen=1, key=?, racy=? WHERE id=?", keys)

    def _main_ids(self) -> Iterator[list[str]]:
        last = ""
        while True:
            rows = db.rows(
                self.conn,
                "SELECT id FROM entry WHERE main AND id > ? ORDER BY id LIMIT ?",
                (last, PAGE),
            )
            if not rows:
                return
            last = rows[-1][0]
            yield [r[0] for r in rows]

    def _add_mains(self, mains: list[tuple[str]]) -> None:
        self.conn.executemany(
            "INSERT INTO entry(id, listed, main) VALUES (?, 1, 1) "
            "ON CONFLICT(id) DO UPDATE SET listed=1, main=1",
            mains,
        )
        mains.clear()

    def entry(self, sid: str) -> tuple[Files, str | None, bool] | None:
        """(its files, its identity when the plan began, wanted) for an id the scan listed."""
        row = self.conn.execute(
            "SELECT main, files, key, wanted FROM entry WHERE id=? AND listed", (sid,)
        ).fetchone()
        if row is None:
            return None
        return _files(row[0], row[1]), row[2], bool(row[3])

    def identity(self, sid: str) -> str | None:
        """Its identity when the plan began (None: not listed, or not a regular file)."""
        row = self.conn.execute("SELECT key FROM entry WHERE id=?", (sid,)).fetchone()
        return None if row is None else str(row[0]) if row[0] is not None else None

    def files(self, sid: str) -> Files:
        """Its files as the scan found them (:data:`.scan.NONE` when it found none)."""
        row = self.conn.execute(
            "SELECT main, files FROM entry WHERE id=? AND listed", (sid,)
        ).fetchone()
        return NONE if row is None else _files(row[0], row[1])

    def unread(self) -> Iterator[list[tuple[str, Files]]]:
        """The wanted ids with no facts yet, in id order, a page at a time."""
        last = ""
        while True:
            rows: list[Any] = self.conn.execute(
                "SELECT id, main, files FROM entry e WHERE wanted AND id > ? AND NOT EXISTS "
                "(SELECT 1 FROM facts f WHERE f.id = e.id) ORDER BY id LIMIT ?",
                (last, PAGE),
            ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(sid, _files(main, files)) for sid, main, files in rows]

    # ------------------------------------------------------------------ facts

    def put(self, f: Facts, *, fresh: bool, first: bool = False) -> None:
        """Record (or replace) what the plan knows of one session; what it decided stays.
        ``first``: the plan has recorded nothing of it yet, or not other references."""
        self.put_all([f], fresh=fresh, first=first)

    def put_all(self, facts: Sequence[Facts], *, fresh: bool, first: bool = False) -> None:
        """:meth:`put` of each of ``facts`` (one statement each for the batch)."""
        self.conn.executemany(
            "INSERT INTO facts(id, blob, absent, readable, has_info, parent, profile, status, "
            "ended_at, holder, fresh) VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE "
            "SET blob=excluded.blob, absent=excluded.absent, readable=excluded.readable, "
            "has_info=excluded.has_info, parent=excluded.parent, profile=excluded.profile, "
            "status=excluded.status, ended_at=excluded.ended_at, holder=excluded.holder, "
            "fresh=fresh OR excluded.fresh",
            [
                (
                    f.session_id,
                    _encode(f),
                    f.entry_kind == "absent",
                    f.readable,
                    f.info is not None,
                    *(f.info if f.info is not None else (None, None, None, None)),
                    f.holder is not None,
                    fresh,
                )
                for f in facts
            ],
        )
        if not first:
            self.conn.executemany("DELETE FROM refs WHERE id=?", [(f.session_id,) for f in facts])
        refs = [
            (f.session_id, *v)
            for f in facts
            if f.entry_kind != "absent" and f.readable and f.producers
            for v in f.producers
        ]
        if refs:
            self.conn.executemany("INSERT OR IGNORE INTO refs VALUES (?,?,?,?)", refs)

    def get(self, sid: str) -> Facts:
        """The facts of one session the plan read (its files and pins shared again)."""
        row = db.row(
            self.conn,
            "SELECT f.blob, e.main, e.files, e.listed FROM facts f "
            "LEFT JOIN entry e ON e.id = f.id WHERE f.id=?",
            (sid,),
        )
        assert row is not None, sid
        files = _files(row[1], row[2]) if row[3] else NONE
        kind, main, wal, holder, info, producers, problem, foreign, size = marshal.loads(row[0])
        if producers:
            producers = self.pins.seen.setdefault(producers, producers)
        return Facts(
            sid,
            files,
            kind,
            Stamp(main, wal) if main is not None or wal is not None else STAMPLESS,
            None if holder is None else locks.Holder(*holder),
            None if info is None else Meta(*info),
            producers,
            problem,
            foreign,
            size,
        )

    def has(self, sid: str) -> bool:
        return self.conn.execute("SELECT 1 FROM facts WHERE id=?", (sid,)).fetchone() is not None

    def pages(self, where: str, params: Sequence[Any] = ()) -> Iterator[list[tuple[Any, ...]]]:
        """``(id, Meta or None, absent)`` of the facts rows ``where`` holds (SQL over
        ``facts f`` joined with ``entry e``), in id order, a page at a time."""
        last = ""
        while True:
            rows: list[Any] = self.conn.execute(
                "SELECT f.id, f.has_info, f.parent, f.profile, f.status, f.ended_at, f.absent "
                f"FROM facts f JOIN entry e ON e.id = f.id WHERE f.id > ? AND ({where}) "
                "ORDER BY f.id LIMIT ?",
                (last, *params, PAGE),
            ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(r[0], Meta(r[2], r[3], r[4], r[5]) if r[1] else None, bool(r[6])) for r in rows]

    def ids(self, where: str, params: Sequence[Any] = ()) -> Iterator[list[str]]:
        """The ids of :meth:`pages`, a page at a time."""
        for page in self.pages(where, params):
            yield [str(r[0]) for r in page]

    def set_flag(self, column: str, ids: Iterable[str], value: int = 1) -> None:
        self.conn.executemany(f"UPDATE facts SET {column}=? WHERE id=?", ((value, s) for s in ids))

    def keep_newest(self, n: int) -> None:
        """--keep-last: the ``n`` newest readable matches leave the selection."""
        self.conn.execute(
            "UPDATE facts SET matched=0 WHERE id IN (SELECT id FROM facts WHERE matched AND "
            "readable ORDER BY id DESC LIMIT ?)",
            (min(n, 2**63 - 1),),  # any larger count keeps every match, as this does
        )

    def judged_as(self, judged: dict[str, Judged]) -> None:
        """What check's judge said of each of these sessions."""
        self.conn.executemany(
            "UPDATE facts SET judged=1, jproblem=?, jstatus=? WHERE id=?",
            ((j[0], j[1], sid) for sid, j in judged.items()),
        )

    def judgement(self, sid: str) -> Judged | None:
        row = self.conn.execute(
            "SELECT jproblem, jstatus FROM facts WHERE id=? AND judged", (sid,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def children(self, sid: str) -> list[str]:
        """The sessions (read by the plan) that name ``sid`` as parent, in id order."""
        return [
            r[0]
            for r in db.rows(self.conn, "SELECT id FROM facts WHERE parent=? ORDER BY id", (sid,))
        ]

    # ------------------------------------------------------------------ what execute asks

    def planned(self, sid: str) -> tuple[bool, str | None, bool, str | None, bool]:
        """(listed by the stat walk, its identity then, its parent link known, that parent,
        racy) for one id."""
        row = self.conn.execute(
            "SELECT e.inseen, e.key, f.id IS NOT NULL, f.parent, e.racy FROM entry e "
            "LEFT JOIN facts f ON f.id = e.id WHERE e.id=?",
            (sid,),
        ).fetchone()
        if row is None:
            return False, None, False, None, False
        return bool(row[0]), row[1], bool(row[2]), row[3], bool(row[4])

    def version_counts(
        self, versions: Iterable[plugins.PluginVersion], gone: Iterable[str]
    ) -> dict[plugins.PluginVersion, tuple[int, int]]:
        """For each of ``versions``: (sessions outside the candidates, every session) that
        reference it and are not in ``gone``."""
        wanted = set(versions)
        self.set_gone(gone)
        return {v: c for v, c in self.version_counts_gone("listed").items() if v in wanted}

    def unknown_count(self, removed: Iterable[str]) -> int:
        """Sessions with a file whose references could not be read, not in ``removed``."""
        self.set_gone(removed)
        return self.unknown_count_gone("listed")

    def rows(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        yield from self.conn.execute(sql, params)

    def keyed_pages(
        self, sql: str, params: Sequence[Any] = (), first: Any = ""
    ) -> Iterator[list[tuple[Any, ...]]]:
        """The rows of ``sql`` a page at a time, by key: ``sql`` takes the last key seen as
        its first parameter, then ``params``, then the page size (``... WHERE key > ? ...
        ORDER BY key LIMIT ?``), and each row's first column is its key. Each page is fetched
        whole, so the tables may change between pages."""
        last = first
        while True:
            rows = db.rows(self.conn, sql, (last, *params, PAGE))
            if not rows:
                return
            last = rows[-1][0]
            yield rows

    # ------------------------------------------------------------------ groups, candidates

    def select_groups(self) -> None:
        """The selection (explicit ids and the matches, each with facts) as groups of one, in
        id order."""
        self.conn.execute(
            "INSERT INTO grp(id, root, seq) SELECT f.id, f.id, ROW_NUMBER() OVER (ORDER BY f.id) "
            "FROM facts f JOIN entry e ON e.id = f.id WHERE f.matched OR e.explicit ORDER BY f.id"
        )

    def selected_ids(self) -> Iterator[list[str]]:
        """The selected sessions (groups' roots), in id order, a page at a time."""
        for page in self.keyed_pages(
            "SELECT id FROM grp WHERE id > ? AND root = id ORDER BY id LIMIT ?"
        ):
            yield [r[0] for r in page]

    def in_group(self, sid: str) -> bool:
        return self.conn.execute("SELECT 1 FROM grp WHERE id=?", (sid,)).fetchone() is not None

    def join_group(self, sid: str, root: str) -> None:
        self.conn.execute(
            "INSERT INTO grp(id, root, seq) VALUES (?, ?, (SELECT MAX(seq) + 1 FROM grp))",
            (sid, root),
        )

    def root_of(self, sid: str) -> str:
        return str(db.scalar(self.conn, "SELECT root FROM grp WHERE id=?", (sid,)))

    def set_root(self, sid: str, root: str) -> None:
        self.conn.execute("UPDATE grp SET root=? WHERE id=?", (root, sid))

    def nested_roots(self) -> int:
        """Groups whose root is itself in another group (none, as the plan builds them)."""
        return int(
            db.scalar(
                self.conn,
                "SELECT COUNT(*) FROM grp g JOIN grp r ON r.id = g.root WHERE r.root != r.id",
            )
        )

    def mark_candidates(self) -> None:
        """The candidates: every group member and every interrupted prune (with facts). A
        page of ids at a time (one ``UPDATE`` of them all would hold them all in memory)."""
        for sql in (
            "SELECT id FROM grp WHERE id > ? ORDER BY id LIMIT ?",
            "SELECT id FROM entry WHERE id > ? AND intent ORDER BY id LIMIT ?",
        ):
            for page in self.keyed_pages(sql):
                self.set_flag("cand", [r[0] for r in page])

    def groups_of(self, ids: Sequence[str]) -> dict[str, str]:
        """Each of ``ids`` in a group, with its group's root, in the order they joined."""
        self.conn.execute("DELETE FROM temp.load")
        self.conn.executemany("INSERT OR IGNORE INTO temp.load VALUES (?)", ((s,) for s in ids))
        return {
            sid: root
            for sid, root in self.conn.execute(
                "SELECT id, root FROM grp WHERE id IN (SELECT id FROM temp.load) ORDER BY seq"
            )
        }

    def in_component(self, sid: str) -> bool:
        return bool(db.scalar(self.conn, "SELECT comp FROM decision WHERE id=?", (sid,)))

    def set_component(self, ids: Iterable[str]) -> None:
        self.conn.executemany("UPDATE decision SET comp=1 WHERE id=?", ((s,) for s in ids))

    def put_decisions(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self.conn.executemany(
            "INSERT INTO decision(id, remove, reasons, bytes, files, damaged, resume, stamp, "
            "pins, npins, status, odd) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )

    def set_reasons(self, rows: Iterable[tuple[bytes, bool, bool, str]]) -> None:
        """(reasons, remove, odd, id) for decisions the fixed point changed."""
        self.conn.executemany("UPDATE decision SET reasons=?, remove=?, odd=? WHERE id=?", rows)

    def set_gone(self, ids: Iterable[str]) -> None:
        """``temp.gone``: the sessions a count takes as removed (:data:`GONE`)."""
        self.conn.execute("DELETE FROM temp.gone")
        self.conn.executemany("INSERT OR IGNORE INTO temp.gone VALUES (?)", ((s,) for s in ids))

    def version_counts_gone(self, gone: str) -> dict[plugins.PluginVersion, tuple[int, int]]:
        """For every version a session references: (sessions outside the candidates, every
        session) that reference it and are not ``gone`` (a key of :data:`GONE`)."""
        return {
            (cat, name, ver): (outside, staying)
            for cat, name, ver, outside, staying in self.conn.execute(
                "SELECT r.category, r.name, r.version, SUM(NOT f.cand), COUNT(*) FROM refs r "
                f"JOIN facts f ON f.id = r.id WHERE NOT EXISTS ({GONE[gone]} AND g.id = r.id) "
                "GROUP BY 1, 2, 3"
            )
        }

    def unknown_count_gone(self, gone: str) -> int:
        """Sessions with a file whose references could not be read, not ``gone``."""
        return int(
            db.scalar(
                self.conn,
                "SELECT COUNT(*) FROM facts f WHERE NOT absent AND NOT readable AND NOT EXISTS "
                f"({GONE[gone]} AND g.id = f.id)",
            )
        )

    def shared_pins(self, blob: bytes) -> tuple[plugins.PluginVersion, ...]:
        """A marshalled tuple of versions, the plan's own tuple of them again."""
        pins: tuple[plugins.PluginVersion, ...] = marshal.loads(blob)
        return self.pins.seen.setdefault(pins, pins) if pins else pins


def _encode(f: Facts) -> bytes:
    """A :class:`Facts` but its id and files, as plain values (``marshal``: no objects)."""
    h = f.holder
    return marshal.dumps(
        (
            f.entry_kind,
            f.stamp.main,
            f.stamp.wal,
            None if h is None else (h.file, h.pid, h.exclusive, h.lease),
            None if f.info is None else tuple(f.info),
            tuple(tuple(v) for v in f.producers),
            f.problem,
            f.foreign,
            f.bytes,
        )
    )


def _files(main: int, blob: bytes | None) -> Files:
    if blob is not None:
        f: Files = pickle.loads(blob)
        return f
    return PLAIN if main else NONE


def _close(stack: contextlib.ExitStack, pid: int) -> None:
    if os.getpid() == pid:  # never from a forked worker: the directory is the parent's
        stack.close()
