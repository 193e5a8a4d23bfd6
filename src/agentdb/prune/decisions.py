"""What a prune plan decided: one :class:`PruneDecision` per candidate, kept as a row of the
plan's scratch database (:mod:`agentdb.prune.scratch`, with what the plan knows of every other
session of the directory) and read back in session id order (:class:`Rows`), and the
:class:`PrunePlan` that holds that database."""

from __future__ import annotations

import marshal
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

from agentdb.index import plugins
from agentdb.prune.scan import STAMPLESS, Pins, Stamp
from agentdb.prune.scratch import GONE, PlanStore
from agentdb.results import PruneReasonCode

_T = TypeVar("_T")


@dataclass(frozen=True)
class Reason:
    """Why a selected session stays."""

    code: PruneReasonCode
    message: str  # one line


@dataclass(slots=True)
class PruneDecision:
    """One selected session (or an interrupted prune to finish) and what happens to it."""

    session_id: str
    remove: bool  # True: this run removes it; False: refused (see reasons)
    reasons: list[Reason] = field(default_factory=list)  # every reason it stays; empty if removed
    bytes: int = 0  # bytes its files take (what removing it frees)
    files: list[str] = field(default_factory=list)  # names in the sessions dir it would remove
    damaged: bool = False  # its .corrupt copies are removed too (--include-damaged, explicit id)
    resume: bool = False  # an interrupted prune left an intent for it: this finishes that prune
    stamp: Stamp | None = None  # the main file and WAL as planned; execute re-checks under lock
    pins: Sequence[plugins.PluginVersion] = ()  # cached versions it uses


# The columns of a ``decision`` row that make a PruneDecision (after its id).
DECISION_COLUMNS = "remove, reasons, bytes, files, damaged, resume, stamp, pins"


def encode_decision(d: PruneDecision, status: str | None, odd: bool) -> tuple[Any, ...]:
    """A ``decision`` row (:mod:`agentdb.prune.scratch`): plain values, marshalled."""
    return (
        d.session_id,
        not d.reasons,
        encode_reasons(d.reasons),
        d.bytes,
        marshal.dumps(tuple(d.files)),
        d.damaged,
        d.resume,
        None if d.stamp is None else marshal.dumps((d.stamp.main, d.stamp.wal)),
        marshal.dumps(tuple(tuple(v) for v in d.pins)),
        len(d.pins),
        status,
        odd,
    )


def encode_reasons(reasons: Sequence[Reason]) -> bytes:
    return marshal.dumps(tuple((r.code, r.message) for r in reasons))


def decode_decision(store: PlanStore, sid: str, row: Sequence[Any]) -> PruneDecision:
    """The PruneDecision of ``sid`` from its row's :data:`DECISION_COLUMNS`."""
    remove, reasons, nbytes, files, damaged, resume, stamp, pins = row
    st: Stamp | None = None
    if stamp is not None:
        main, wal = marshal.loads(stamp)
        st = Stamp(main, wal) if main is not None or wal is not None else STAMPLESS
    return PruneDecision(
        sid,
        bool(remove),
        [Reason(c, m) for c, m in marshal.loads(reasons)],
        nbytes,
        list(marshal.loads(files)),
        bool(damaged),
        bool(resume),
        st,
        store.shared_pins(pins),
    )


class Rows(Sequence[_T]):
    """A list of what a plan decided, read from its scratch database when asked (in key
    order, a page at a time): iterating it holds one page, ``len`` is a ``COUNT``, an index or
    a slice reads only those rows. It reads the database as it is then (a plan's decisions do
    not change once it is made). ``flat``: each row decodes to a sequence, and this is their
    concatenation (``len`` and indexing then iterate)."""

    def __init__(
        self,
        store: PlanStore,
        table: str,
        columns: str,
        where: str,
        decode: Callable[[str, Sequence[Any]], Any],
        *,
        flat: bool = False,
    ) -> None:
        self._store = store
        self._from = f"FROM {table} WHERE ({where})"
        self._columns = columns
        self._decode = decode
        self._flat = flat

    def __iter__(self) -> Iterator[_T]:
        decode = self._decode
        for page in self._store.keyed_pages(
            f"SELECT id, {self._columns} {self._from} AND id > ? ORDER BY id LIMIT ?"
        ):
            for r in page:
                if self._flat:
                    yield from decode(r[0], r[1:])
                else:
                    yield decode(r[0], r[1:])

    def __len__(self) -> int:
        if self._flat:
            return sum(1 for _ in self)
        return int(next(self._store.rows(f"SELECT COUNT(*) {self._from}"))[0])

    @overload
    def __getitem__(self, i: int) -> _T: ...

    @overload
    def __getitem__(self, i: slice) -> list[_T]: ...

    def __getitem__(self, i: int | slice) -> _T | list[_T]:
        if self._flat:
            return list(self)[i]
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return list(self)[i]
            return list(self._range(start, max(0, stop - start)))
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(i)
        (got,) = self._range(j, 1)
        return got

    def _range(self, offset: int, count: int) -> Iterator[_T]:
        if count <= 0:
            return
        for r in self._store.rows(
            f"SELECT id, {self._columns} {self._from} ORDER BY id LIMIT ? OFFSET ?",
            (count, offset),
        ):
            yield self._decode(r[0], r[1:])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rows):
            return list(self) == list(other)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))


@dataclass(frozen=True)
class VersionUse:
    """One cached plugin version that selected sessions reference, and who else does."""

    version: plugins.PluginVersion  # (category, name, version)
    selected: int  # selected sessions that reference it (the sessions it pins)
    removed: int  # of those, how many the run removes (or would remove)
    outside: int  # sessions outside the selection that reference it: they keep it cached
    staying: int  # every session that stays and references it (outside + selected but refused)

    @property
    def unreferenced_after(self) -> bool:
        """Removed sessions referenced it and no session that stays does: a cache manager may
        evict it (what ``agentdb plugins refs`` then lists as unreferenced)."""
        return self.removed > 0 and self.staying == 0

    def to_json(self) -> dict[str, object]:
        category, name, version = self.version
        return {
            "category": category,
            "name": name,
            "version": version,
            "selected": self.selected,
            "removed": self.removed,
            "outside": self.outside,
            "staying": self.staying,
            "unreferenced_after": self.unreferenced_after,
        }


@dataclass(eq=False)
class PrunePlan:
    """What a prune run would do. Nothing has been changed when this exists.

    What the plan knows of the sessions it did not pick (identities, parent links, references)
    and what it decided of each candidate are in its scratch database, open until
    :meth:`close` (``with plan:``; a plan never closed drops it when collected or at exit);
    ``execute``, and reading :attr:`candidates` and what ``dry_run`` returns, need it open.
    """

    sessions_dir: Path
    notes: list[str] = field(default_factory=list)  # things the operator should know (stderr)
    include_pinned: bool = False  # --include-pinned: pinned sessions are removable
    wait: float = 0.0  # --wait: seconds execute may wait for a session someone opened meanwhile
    notes_index: list[str] = field(default_factory=list)  # why the index was not used (stderr)
    store: PlanStore | None = field(default=None, repr=False)  # the scratch database

    def open_store(self, pins: Pins, *, memory: bool = False) -> PlanStore:
        self.store = PlanStore(pins, memory=memory)
        return self.store

    def close(self) -> None:
        """Drop the scratch database (idempotent)."""
        if self.store is not None:
            self.store.close()

    def __enter__(self) -> PrunePlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _store(self) -> PlanStore:
        if self.store is None:
            raise RuntimeError("a prune plan made by prune.plan is needed")
        return self.store

    # ---------------------------------------------------------------- per session, for execute

    def planned_identity(self, sid: str) -> tuple[bool, str | None]:
        """(the plan's stat walk listed it, its identity then: None if not a regular file)."""
        listed, key, *_ = self._store().planned(sid)
        return listed, key

    def planned_parent(self, sid: str) -> tuple[bool, str | None]:
        """(the plan read its parent link, that link) for one session id."""
        _, _, known, parent, _ = self._store().planned(sid)
        return known, parent

    def is_racy(self, sid: str) -> bool:
        """Its identity was not settled when the plan began (execute reads its status again)."""
        return self._store().planned(sid)[4]

    def planned_status(self, sid: str) -> tuple[bool, str | None]:
        """(a candidate of the plan, its status as planned) for one session id."""
        row = next(self._store().rows("SELECT status FROM decision WHERE id=?", (sid,)), None)
        return (False, None) if row is None else (True, row[0])

    # ---------------------------------------------------------------- the decisions, in id order

    def _decisions(self, where: str) -> Rows[PruneDecision]:
        store = self._store()
        return Rows(
            store,
            "decision",
            DECISION_COLUMNS,
            where,
            lambda sid, row: decode_decision(store, sid, row),
        )

    @property
    def candidates(self) -> Rows[PruneDecision]:
        """Every candidate's decision, in session id order (read as iterated: never all)."""
        return self._decisions("1")

    @property
    def removals(self) -> Rows[PruneDecision]:
        return self._decisions("remove")

    @property
    def refusals(self) -> Rows[PruneDecision]:
        return self._decisions("NOT remove")

    @property
    def removal_ids(self) -> Rows[str]:
        return Rows(self._store(), "decision", "1", "remove", lambda sid, _: sid)

    @property
    def removal_files(self) -> Rows[str]:
        """The names the removals would remove, one session after another (their ``files``)."""
        return Rows(
            self._store(),
            "decision",
            "files",
            "remove",
            lambda _, row: marshal.loads(row[0]),
            flat=True,
        )

    @property
    def pinned_removals(self) -> int:
        """How many removals use a cached plugin version (--include-pinned)."""
        return int(
            next(self._store().rows("SELECT COUNT(*) FROM decision WHERE remove AND npins"))[0]
        )

    @property
    def statuses(self) -> dict[str, str | None]:
        """Each candidate's status as planned (materialised: for tests and tools; execute asks
        :meth:`planned_status`)."""
        return dict(self._store().rows("SELECT id, status FROM decision ORDER BY id"))

    # ---------------------------------------------------------------- whole-plan views (tests)

    @property
    def seen(self) -> dict[str, str | None]:
        """Every entry's identity when the plan began (materialised: for tests and tools)."""
        return dict(self._store().rows("SELECT id, key FROM entry WHERE inseen ORDER BY id"))

    @property
    def racy(self) -> set[str]:
        return {r[0] for r in self._store().rows("SELECT id FROM entry WHERE racy")}

    @property
    def parents(self) -> dict[str, str | None]:
        """Each session's parent link as planned (materialised: for tests and tools)."""
        return dict(self._store().rows("SELECT id, parent FROM facts ORDER BY id"))

    @property
    def references(self) -> dict[str, tuple[plugins.PluginVersion, ...]]:
        out: dict[str, list[plugins.PluginVersion]] = {}
        for sid, c, n, v in self._store().rows("SELECT * FROM refs ORDER BY id"):
            out.setdefault(sid, []).append((c, n, v))
        return {sid: tuple(vs) for sid, vs in out.items()}

    @property
    def unknown_references(self) -> list[str]:
        """Sessions with a file whose references could not be read."""
        return [
            r[0]
            for r in self._store().rows(
                "SELECT id FROM facts WHERE NOT absent AND NOT readable ORDER BY id"
            )
        ]

    def unknown_count(self, removed: Iterable[str] | None = None) -> int:
        """Of :attr:`unknown_references`, those not in ``removed`` (default: the plan's
        removals)."""
        store = self._store()
        if removed is not None:
            store.set_gone(removed)
        return store.unknown_count_gone("plan" if removed is None else "listed")

    def version_uses(self, removed: Iterable[str] | None = None) -> list[VersionUse]:
        """Each cached version a selected session references, counted; ``removed`` are the
        sessions actually removed (default: the plan's removals)."""
        store = self._store()
        if removed is not None:
            store.set_gone(removed)
        gone = "plan" if removed is None else "listed"
        counts: dict[plugins.PluginVersion, list[int]] = {}
        for page in store.keyed_pages(
            f"SELECT id, pins, EXISTS ({GONE[gone]} AND g.id = d.id) FROM decision d "
            "WHERE id > ? AND npins ORDER BY id LIMIT ?"
        ):
            for _, pins, is_gone in page:
                for v in marshal.loads(pins):
                    c = counts.setdefault(tuple(v), [0, 0, 0, 0])
                    c[0] += 1
                    c[1] += bool(is_gone)
        if counts:
            for v, (outside, staying) in store.version_counts_gone(gone).items():
                if v in counts:
                    counts[v][2] += outside
                    counts[v][3] += staying
        return [VersionUse(v, *counts[v]) for v in sorted(counts)]

    @property
    def bytes(self) -> int:
        """What the removals would free."""
        return int(
            next(self._store().rows("SELECT COALESCE(SUM(bytes), 0) FROM decision WHERE remove"))[0]
        )
