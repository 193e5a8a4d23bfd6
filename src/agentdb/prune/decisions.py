"""What a prune plan decided: one :class:`PruneDecision` per candidate, and the
:class:`PrunePlan` that holds them over the plan's scratch database (what it knows of every
other session of the directory, :mod:`agentdb.prune.scratch`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentdb import plugins
from agentdb.prune.scan import Pins, Stamp
from agentdb.prune.scratch import PlanStore
from agentdb.results import PruneReasonCode


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
    is in its scratch database, open until :meth:`close` (``with plan:``; a plan never closed
    drops it when collected or at exit); ``execute`` needs it open.
    """

    sessions_dir: Path
    candidates: list[PruneDecision] = field(default_factory=list)  # in session id order
    notes: list[str] = field(default_factory=list)  # things the operator should know (stderr)
    include_pinned: bool = False  # --include-pinned: pinned sessions are removable
    wait: float = 0.0  # --wait: seconds execute may wait for a session someone opened meanwhile
    statuses: dict[str, str | None] = field(default_factory=dict)  # each candidate's, as planned
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

    def unknown_count(self, removed: Iterable[str]) -> int:
        """Of :attr:`unknown_references`, those not in ``removed``."""
        return self._store().unknown_count(removed)

    def version_uses(self, removed: Iterable[str] | None = None) -> list[VersionUse]:
        """Each cached version a selected session references, counted; ``removed`` are the
        sessions actually removed (default: the plan's removals)."""
        gone = set(removed) if removed is not None else {d.session_id for d in self.removals}
        counts: dict[plugins.PluginVersion, list[int]] = {}
        for d in self.candidates:
            for v in d.pins:
                c = counts.setdefault(v, [0, 0, 0, 0])
                c[0] += 1
                c[1] += d.session_id in gone
        if counts:
            for v, (outside, staying) in self._store().version_counts(counts, gone).items():
                counts[v][2] += outside
                counts[v][3] += staying
        return [VersionUse(v, *counts[v]) for v in sorted(counts)]

    @property
    def removals(self) -> list[PruneDecision]:
        return [d for d in self.candidates if d.remove]

    @property
    def refusals(self) -> list[PruneDecision]:
        return [d for d in self.candidates if not d.remove]

    @property
    def bytes(self) -> int:
        return sum(d.bytes for d in self.removals)
