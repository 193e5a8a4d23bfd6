"""What the sessions directory holds, per session id: the files agentdb knows, and the facts
prune judges by (read-only: one ``scandir``, a lock probe, then a read-only open).

Size: over 500 lines because it is the facts prune decides by, from the index or from the files,
and the identity rules that let a recorded verdict stand in; one set of facts, two ways in.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import stat
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import ulid

from agentdb import db, errors, faults, fsutil, index, locks, paths, workers
from agentdb.checks import policy
from agentdb.index import plugins, verdicts
from agentdb.paths import ULID_RE
from agentdb.store import SessionInfo, SessionReader
from agentdb.store.reader import read_info

INTENT = ".agentdb-prune-intent"  # paths.job_file(db, "prune", "intent")
MAX_INTENT_BYTES = 64 * 1024
JUDGE_THRESHOLD = 50  # fewer files than this are judged in this process (as check does)
_T = TypeVar("_T")

# Every name prune may ever touch: the session file and what SQLite and agentdb keep beside it.
NAME_RE = re.compile(rf"(?P<id>{ULID_RE.pattern})\.sqlite(?P<rest>.*)", re.DOTALL)
SIDECAR_RE = re.compile(r"-(?:wal|shm|journal)")
CORRUPT_RE = re.compile(r"\.corrupt(?:\.[0-9]+)?(?:-(?:wal|shm|journal))?")


@dataclass(slots=True)
class Files:
    """The agentdb-known names for one session id, as found in the directory. Never changed
    once :func:`group_names` returns it (sessions with only their file share :data:`PLAIN`)."""

    main: bool = False  # the session file <id>.sqlite exists (whatever it is)
    sidecars: list[str] = field(default_factory=list)  # "<id>.sqlite-wal", "-shm", "-journal"
    corrupt: list[str] = field(default_factory=list)  # ".corrupt[.N]" copies and their WAL/shm
    intent: bool = False  # an interrupted prune left "<id>.sqlite.agentdb-prune-intent"


PLAIN = Files(main=True)  # the common case, a closed session: its file and nothing beside it
NONE = Files()  # an explicit id with no file at all


def group_names(sessions_dir: Path) -> dict[str, Files]:
    """One ``scandir``: each session id and its known files. Other names are not looked at.
    Ids are interned (every table of a plan shares one string per session)."""
    out: dict[str, Files] = {}
    with os.scandir(sessions_dir) as it:
        for de in it:
            m = NAME_RE.fullmatch(de.name)
            if m is None:
                continue
            f = out.setdefault(sys.intern(m.group("id")), Files())
            rest = m.group("rest")
            if rest == "":
                f.main = True
            elif SIDECAR_RE.fullmatch(rest):
                f.sidecars.append(de.name)
            elif CORRUPT_RE.fullmatch(rest):
                f.corrupt.append(de.name)
            elif rest == INTENT:
                f.intent = True
    for sid, f in out.items():
        f.sidecars.sort()
        f.corrupt.sort()
        if f == PLAIN:
            out[sid] = PLAIN
    return dict(sorted(out.items()))


@dataclass(frozen=True, slots=True)
class Stamp:
    """Who the main file and its WAL are: if either changed since the plan, nothing is removed."""

    main: tuple[int, int, int] | None  # (inode, size, mtime_ns) of the session file, or None
    wal: tuple[int, int, int] | None  # the same for "<id>.sqlite-wal"

    def to_json(self) -> dict[str, list[int] | None]:
        return {"main": _lst(self.main), "wal": _lst(self.wal)}

    @classmethod
    def from_json(cls, doc: object) -> Stamp | None:
        if not isinstance(doc, dict):
            return None
        try:
            return cls(_tup(doc.get("main")), _tup(doc.get("wal")))
        except (TypeError, ValueError):
            return None


def _lst(t: tuple[int, int, int] | None) -> list[int] | None:
    return None if t is None else list(t)


def _tup(v: object) -> tuple[int, int, int] | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != 3 or not all(type(x) is int for x in v):
        raise ValueError("bad stamp")
    return (v[0], v[1], v[2])


def stat_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def stamp_of(main: Path) -> Stamp:
    def one(p: Path) -> tuple[int, int, int] | None:
        try:
            return stat_key(os.lstat(p))
        except FileNotFoundError:
            return None

    return Stamp(one(main), one(main.with_name(main.name + "-wal")))


class Meta(NamedTuple):
    """What a plan needs of a session's session_meta row (a tuple: one per session is kept)."""

    parent_session_id: str | None
    profile: str
    status: str
    ended_at: str | None

    @classmethod
    def of(cls, info: SessionInfo) -> Meta:
        parent = info.parent_session_id
        return cls(
            None if parent is None else sys.intern(parent),
            sys.intern(info.profile),
            sys.intern(info.status),
            info.ended_at,
        )


STAMPLESS = Stamp(None, None)
_NO_PINS: tuple[plugins.PluginVersion, ...] = ()


@dataclass(slots=True)
class Facts:
    """What prune knows about one session id: kept for every session of the directory while
    a plan is made, so only what the plan needs (slots; shared files, meta strings, pins)."""

    session_id: str
    files: Files
    entry_kind: str  # "regular" | "symlink" | "directory" | "other" | "absent"
    stamp: Stamp
    holder: locks.Holder | None = None  # someone has it open (probed before our own open)
    info: Meta | None = None  # session_meta, when the file could be read
    # the cached plugin versions its producers reference (plugins.pinning), when readable
    producers: tuple[plugins.PluginVersion, ...] = _NO_PINS
    problem: str | None = None  # why it cannot be read (foreign, corrupt, ...), one line
    foreign: bool = False  # another application's file: reported, never removed
    bytes: int = 0  # size of the main file and its sidecars

    @property
    def started(self) -> dt.datetime:
        """The ULID's time (computed when asked: only an age filter needs it)."""
        return ulid_time(self.session_id)

    @property
    def readable(self) -> bool:
        return self.info is not None and self.problem is None


class Pins:
    """The cached plugin versions, each kept once: what a session's producers reference in
    the cache is a tuple of these very objects (one per version, not one per session)."""

    def __init__(self, cached: Collection[plugins.PluginVersion]) -> None:
        self.cached = {v: v for v in cached}
        self.set = set(self.cached)
        self.seen: dict[tuple[plugins.PluginVersion, ...], tuple[plugins.PluginVersion, ...]] = {}

    def of(self, producers: Sequence[plugins.PluginVersion]) -> tuple[plugins.PluginVersion, ...]:
        if not producers:
            return _NO_PINS
        got = tuple(self.cached[v] for v in plugins.pinning(producers, self.set))
        return self.seen.setdefault(got, got)


def ulid_time(session_id: str) -> dt.datetime:
    return ulid.ULID.from_str(session_id).datetime


def _entry_kind(path: Path) -> tuple[str, int]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent", 0
    if stat.S_ISLNK(st.st_mode):
        return "symlink", 0
    if stat.S_ISDIR(st.st_mode):
        return "directory", 0
    if stat.S_ISREG(st.st_mode):
        return "regular", st.st_size
    return "other", 0


def _size(path: Path) -> int:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def read_facts(
    sessions_dir: Path, session_id: str, files: Files, pins: Pins | None = None
) -> Facts:
    """Probe for a holder first, then read session_meta and producers read-only. ``pins``:
    the plugin cache (default: none cached, so no producer pins it)."""
    faults.point("prune_read_facts")
    main = paths.session_path(sessions_dir, session_id)
    kind, size = _entry_kind(main)
    facts = Facts(session_id, files, kind, stamp_of(main))
    facts.bytes = size + sum(_size(sessions_dir / n) for n in files.sidecars)
    if kind == "absent":
        if files.sidecars:  # orphan -wal/-shm (an interrupted prune): is the -shm in use?
            facts.holder = locks.probe(main)
        return facts
    if kind != "regular":
        facts.problem = f"{main.name} is a {kind}, not a session file"
        return facts
    facts.holder = locks.probe(main)
    try:
        with SessionReader(main, session_id=session_id) as reader:
            facts.info = Meta.of(reader.info())
            facts.producers = (pins or _NOTHING_CACHED).of(plugins.session_producers(reader))
    except errors.ForeignFile as e:
        facts.problem, facts.foreign = _short(e, main), True
    except errors.UnsafeSchema as e:
        facts.problem = _short(e, main)
        facts.foreign = _foreign_behind_triggers(main)
    except errors.AgentdbError as e:
        facts.problem = _short(e, main)
    return facts


def read_all_facts(
    sessions_dir: Path,
    wanted: Sequence[tuple[str, Files]],
    jobs: int = 1,
    pins: Pins | None = None,
) -> list[Facts]:
    """:func:`read_facts` for each of ``wanted``, in its order; with ``jobs`` > 1 and many
    files, in that many worker processes. Ctrl-C raises ``KeyboardInterrupt``."""
    if jobs <= 1 or len(wanted) < workers.POOL_THRESHOLD:
        return [read_facts(sessions_dir, sid, files, pins) for sid, files in wanted]

    def chunk(part: Sequence[tuple[str, Files]]) -> list[Facts]:
        return [read_facts(sessions_dir, sid, files, pins) for sid, files in part]

    def died(part: Sequence[tuple[str, Files]], why: str) -> list[Facts]:
        return [_unread(sessions_dir, sid, files, f"not read: {why}") for sid, files in part]

    parts = _chunks(wanted, jobs)
    ran = workers.run_each(chunk, parts, jobs, died=died, drain=False)
    if ran.interrupted:
        raise KeyboardInterrupt
    out = []
    for part, got in zip(parts, ran.results, strict=True):
        for (sid, files), f in zip(part, got, strict=True):
            # a worker's answer is a copy: share the parent's id, files and pins again
            f.session_id, f.files = sid, files
            if pins is not None:
                f.producers = pins.of(f.producers)
            out.append(f)
    return out


def facts_from_index(
    sessions_dir: Path, session_id: str, files: Files, rec: index.Record, pins: Pins | None = None
) -> Facts | None:
    """What a session that is *not* selected contributes to a plan (its session_meta, parent
    link and producers), from the index record the walk validated; None when the record holds
    anything but the file's own contents (then :func:`read_facts` reads it). No lock probe and
    no stamp: a session that gets selected is read afresh by :func:`read_facts`."""
    if not rec.stable or (rec.meta_error is not None and rec.meta_error[1] not in _FILE_CODES):
        return None
    main = paths.session_path(sessions_dir, session_id)
    facts = Facts(session_id, files, "regular", STAMPLESS)
    facts.bytes = rec.size
    if rec.meta_error is not None:
        facts.problem = _short_text(rec.meta_error[0], main)
        facts.foreign = rec.meta_error[1] == "foreign"
        return facts
    facts.info = None if rec.info is None else Meta.of(rec.info)
    if rec.producers is None:
        facts.problem = "its producers cannot be read; run `agentdb check` on it"
    else:
        facts.producers = (pins or _NOTHING_CACHED).of(rec.producers)
    return facts


def confirm(sessions_dir: Path, facts: Facts, planned: str | None) -> verdicts.Identity | None:
    """For a selected session whose facts came from the index: probe it and take its stamp and
    size now, as :func:`read_facts` would. Its identity now (what the verdict cache keys on)
    when nobody has it open and it is still the very entry the plan began with (``planned``:
    its identity then, :mod:`agentdb.index.stat`), so the index's record is of these bytes and
    check's judge, which reads the whole file, is its one open; None when it must be read
    afresh (:func:`read_facts`). One ``lstat`` each of the file and its three sidecars."""
    sid = facts.session_id
    main = sessions_dir / (sid + paths.SESSION_SUFFIX)
    if planned is None or facts.problem is not None:
        return None
    holder = locks.probe(main)
    if holder is not None:  # live: what its WAL holds now is read afresh, as before
        return None
    stats = db.file_stats(main)
    if stats.db is None or index.stat.seen_of(paths.Entry(sid, main), stats).key != planned:
        return None
    ident = verdicts.identity_from(stats)
    if ident is None:
        return None
    facts.stamp = Stamp(stat_key(stats.db), None if stats.wal is None else stat_key(stats.wal))
    by_suffix = {"-wal": stats.wal, "-shm": stats.shm, "-journal": stats.journal}
    facts.bytes = stats.db.st_size + sum(
        _size_of(by_suffix.get(n[len(main.name) :])) for n in facts.files.sidecars
    )
    return ident


def _size_of(st: os.stat_result | None) -> int:
    return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0


# Errors of a regular file's contents (a non-regular entry is never taken from the index).
_FILE_CODES = policy.CONTENT_PROBLEMS


def _short_text(msg: str, main: Path) -> str:
    msg = msg.split("; ")[0]
    prefix = f"{main}: "
    return msg[len(prefix) :] if msg.startswith(prefix) else msg


Judged = tuple[str | None, str | None]  # (problem, session_meta's status as the judge read it)
_Verdict = tuple[Judged, verdicts.Entry | None]  # and the verdict to record, if any


def judge_all(
    sessions_dir: Path,
    wanted: Sequence[tuple[str, bool]],
    jobs: int = 1,
    record: list[verdicts.Entry] | None = None,
) -> dict[str, Judged]:
    """:func:`judge` for each ``(session_id, recovered)``; with ``jobs`` > 1 and enough files,
    in that many worker processes. Ctrl-C raises ``KeyboardInterrupt``. ``record``: each
    verdict the judge gave a file nobody had open is appended there, stamped with the file's
    identity taken before it was read (what ``check`` records in the verdict cache)."""
    if jobs <= 1 or len(wanted) < JUDGE_THRESHOLD:
        got = [judge_verdict(sessions_dir, sid, recovered=r) for sid, r in wanted]
        return _judged(wanted, got, record)

    def chunk(part: Sequence[tuple[str, bool]]) -> list[_Verdict]:
        return [judge_verdict(sessions_dir, sid, recovered=r) for sid, r in part]

    def died(part: Sequence[tuple[str, bool]], why: str) -> list[_Verdict]:
        return [((f"not judged: {why}", None), None) for _ in part]

    parts = _chunks(wanted, jobs, most=32)  # a full check per file: small pieces
    ran = workers.run_each(chunk, parts, jobs, died=died, drain=False)
    if ran.interrupted:
        raise KeyboardInterrupt
    return _judged(wanted, [v for got in ran.results for v in got], record)


def _judged(
    wanted: Sequence[tuple[str, bool]],
    got: Sequence[_Verdict],
    record: list[verdicts.Entry] | None,
) -> dict[str, Judged]:
    if record is not None:
        record.extend(e for _, e in got if e is not None)
    return {sid: j for (sid, _), (j, _) in zip(wanted, got, strict=True)}


def recorded_healthy(entry: verdicts.Recorded | None, now: verdicts.Identity) -> Judged | None:
    """The judge's answer from the verdict cache: a *full* ``check`` verdict (``check``'s or
    a previous prune's judge) of ``ok`` or ``needs_migration``, recorded for the file as it
    is ``now`` (its identity, just taken, is the recorded one, which was settled when it was
    recorded: the racily-clean rule); None when it must be judged. A damaged verdict is never
    taken (the judge words its first problem). Bit rot changes no identity: ``execute`` still
    runs ``quick_check`` on each file it removes, under the lock."""
    if entry is None or entry.quick or entry.verdict not in _HEALTHY or not entry.matches(now):
        return None
    return None, entry.status


_HEALTHY = policy.SOUND


def _chunks(items: Sequence[_T], jobs: int, most: int = workers.CHUNK) -> list[Sequence[_T]]:
    """Pieces small enough that every worker gets several (an even finish), at most ``most``."""
    size = max(1, min(most, len(items) // (jobs * 8) or 1))
    return [items[i : i + size] for i in range(0, len(items), size)]


def _unread(sessions_dir: Path, session_id: str, files: Files, problem: str) -> Facts:
    """Facts of a file whose reader died: unreadable, so prune refuses it."""
    main = paths.session_path(sessions_dir, session_id)
    kind, size = _entry_kind(main)
    facts = Facts(session_id, files, kind, stamp_of(main), bytes=size)
    if kind != "absent":
        facts.problem = problem
    return facts


def _foreign_behind_triggers(main: Path) -> bool:
    """A file refused for its triggers or views may still be another application's (its
    application id says so): identify it without running its SQL (triggers and views stay
    disabled on every connection)."""
    from agentdb.schema.identity import identify

    try:
        conn = db.open_readonly(main, check_schema=False)
    except errors.AgentdbError:
        return False
    try:
        with db.translated(main):
            return identify(conn).kind == "foreign"
    except errors.AgentdbError:
        return False
    finally:
        conn.close()


def judge(sessions_dir: Path, session_id: str, *, recovered: bool = False) -> Judged:
    """:func:`judge_verdict`'s answer alone."""
    return judge_verdict(sessions_dir, session_id, recovered=recovered)[0]


def judge_verdict(sessions_dir: Path, session_id: str, *, recovered: bool = False) -> _Verdict:
    """(problem, status): problem None when ``check``'s own judge calls the file ``ok`` or
    ``needs_migration``, else one line with its verdict and first error; status is
    session_meta's as the judge read it. The same rules as ``agentdb check`` (integrity,
    schema, content hashes, invalid text, every row read), so prune never removes a file that
    check calls damaged without --include-damaged. ``recovered``: the recovery log records a
    salvage of it (its orphan rows are expected), as ``check`` is told."""
    from agentdb import checks  # only here: the one open of a selected session
    from agentdb.checks.atrest import ok_at_rest
    from agentdb.checks.file import check_path

    faults.point("prune_read_facts")  # the judge reads the file (its facts too, when confirmed)
    main = sessions_dir / (session_id + paths.SESSION_SUFFIX)
    # As `check --all` judges each file: a healthy file at rest is proved so on this process's
    # shared reader (the same checks, no connection of its own); anything else, whatever it
    # is, by check_path, which finds and words every problem.
    stamped_ns = time.time_ns()  # before the lstat: the verdict's identity is this old
    stats = db.file_stats(main)
    result = ok_at_rest(os.fspath(main), session_id, stats, quick=False)
    if result is None:
        result = check_path(main, session_id, recovered=recovered, stats=stats)
    j = checks.judgement_of(result, "full")
    ident = verdicts.identity_from(stats)
    entry = None
    if ident is not None and result.live is None:  # as check records: nobody had it open
        entry = verdicts.Entry(
            main.name,
            verdicts.Stamp(ident, stamped_ns),
            result.verdict,
            False,
            result.status,
            result.revision,
        )
    if j.healthy:
        return (None, result.status), entry
    return (f"check says {j.verdict}: {(j.problem or j.verdict)[:200]}", result.status), entry


_NOTHING_CACHED = Pins(())


def _short(e: errors.AgentdbError, main: Path) -> str:
    """The problem, naming the file only when it is not the session file itself."""
    return e.problem if e.file in (None, str(main)) else errors.compose(e.file, e.problem)


@dataclass(frozen=True)
class Intent:
    """What an interrupted prune meant to remove (read from its intent file)."""

    stamp: Stamp | None  # None: the intent file is unreadable (then it is only dropped)
    damaged: bool  # the prune included the session's .corrupt copies
    # Empty or not whole JSON: its write was cut short (a kill between creating and fsyncing
    # it). It is fsynced before anything is removed, so nothing was: it decides nothing.
    cut: bool = False


def read_intent(sessions_dir: Path, session_id: str) -> Intent:
    path = sessions_dir / (paths.session_filename(session_id) + INTENT)
    try:  # a regular file only (no symlink, FIFO or directory), and no more than the cap
        raw = fsutil.read_regular(path, MAX_INTENT_BYTES)
    except (OSError, errors.NotRegularFile):
        return Intent(None, False)
    try:
        doc = json.loads(raw)
    except ValueError:
        return Intent(None, False, cut=True)
    if not isinstance(doc, dict) or doc.get("session_id") != session_id:
        return Intent(None, False)
    return Intent(Stamp.from_json(doc.get("stamp")), doc.get("damaged") is True)


def intent_bytes(session_id: str, stamp: Stamp, damaged: bool) -> bytes:
    doc = {"session_id": session_id, "stamp": stamp.to_json(), "damaged": damaged}
    return json.dumps(doc).encode() + b"\n"


def quick_problem(main: Path, *, held: bool = False) -> str | None:
    """``PRAGMA quick_check`` of the file as it is now (read-only); one line when it fails or
    the file cannot be opened as a session, None when it passes. Without ``held``, a file that
    is merely busy passes (the lock that follows decides). With ``held`` (the caller holds the
    session, :func:`agentdb.locks.hold`, so no writer can change it): a database without a WAL
    is read in place (immutable: no lock), one with a WAL through a private copy (never
    through its ``-shm``, whose lock the hold denies), and a file that cannot be checked is a
    problem too."""

    try:
        conn = _open_checked(main, held)
    except errors.SessionUnusable as e:
        return _short(e, main)
    except errors.AgentdbError as e:
        return f"could not be checked: {_short(e, main)}" if held else None
    try:
        with db.translated(main):
            problems = db.integrity_problems(conn, quick=True, limit=3)
    except errors.SessionUnusable as e:
        return _short(e, main)
    except errors.AgentdbError as e:
        return f"could not be checked: {_short(e, main)}" if held else None
    finally:
        conn.close()
    return f"quick_check: {problems[0][:200]}" if problems else None


def status_held(main: Path) -> str | None:
    """session_meta's status, read while the caller holds the session (as
    :func:`quick_problem` with ``held``); None when it cannot be read."""

    try:
        conn = _open_checked(main, True)
    except errors.AgentdbError:
        return None
    try:
        with db.translated(main):
            return read_info(conn, main, main.name.removesuffix(paths.SESSION_SUFFIX)).status
    except errors.AgentdbError:
        return None
    finally:
        conn.close()


def parent_in_file(main: Path) -> str | None:
    """The parent session_meta names, read from the file itself (never from the index: a row
    may lie though the file's identity is the one it was read at); None when it names none or
    cannot be read (a file that cannot be read names no parent here, as in a plain scan)."""
    from agentdb import db

    try:
        conn = _open_checked(main, False)
    except errors.AgentdbError:
        return None
    try:
        with db.translated(main):
            parent = read_info(
                conn, main, main.name.removesuffix(paths.SESSION_SUFFIX)
            ).parent_session_id
    except errors.AgentdbError:
        return None
    finally:
        conn.close()
    return parent if isinstance(parent, str) else None


def _open_checked(main: Path, held: bool) -> Any:

    return db.open_readonly(main, held=held)
