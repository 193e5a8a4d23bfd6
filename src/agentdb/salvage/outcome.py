"""What recovering a session did: one typed outcome, and one to/from pair for the recovery log.

A recovery log line is :meth:`RecoveryOutcome.to_log` (``event`` ``intent`` before a swap,
``outcome`` after it); :meth:`RecoveryOutcome.from_log` reads one back (an interrupted swap is
finished from its intent line). :meth:`RecoveryOutcome.to_json` is the ``recover --json``
entry: the log line's fields, keyed the same way.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from agentdb import errors
from agentdb.results import RecoverOutcomeName

Outcome = RecoverOutcomeName  # recovered | healthy | unreadable | skipped_live | refused | failed
OUTCOMES: tuple[Outcome, ...] = get_args(RecoverOutcomeName)
LogEvent = Literal["intent", "outcome"]


def _str_or_none(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _dict(v: object) -> dict[str, Any]:
    return dict(v) if isinstance(v, dict) else {}


def _gaps(v: object) -> list[dict[str, Any]]:
    """A log line's ``gaps``: the well-formed entries (see :attr:`RecoveryOutcome.gaps`)."""
    if not isinstance(v, list):
        return []
    out = []
    for g in v:
        if (
            isinstance(g, dict)
            and isinstance(g.get("kind"), str)
            and type(g.get("from_seq")) is int
            and type(g.get("to_seq")) is int
            and (g.get("expected_hash") is None or isinstance(g.get("expected_hash"), str))
        ):
            keys = ("kind", "from_seq", "to_seq", "expected_hash")
            out.append({k: g.get(k) for k in keys})
    return out


def _strs(v: object) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


@dataclass
class RecoveryOutcome:
    """What recovering one session did (or, in a dry run, would do)."""

    session_id: str
    outcome: Outcome
    path: str  # the session file
    corrupt_path: str | None = None  # where the original bytes are kept (None if untouched)
    # table -> {"salvaged": N, "verified": N, "structural_only": N, "unverified": N,
    #           "sources": {source: N}, "restarts": N, "damaged_regions": N}
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    engines: list[str] = field(default_factory=list)  # engines whose rows are in the replacement
    lost: dict[str, Any] = field(default_factory=dict)  # what is known lost (and unverified)
    notes: list[str] = field(default_factory=list)  # reasons, warnings, rebuilt rows
    replacement_check: list[str] = field(default_factory=list)  # verification problems
    dry_run: bool = False  # True: nothing was changed
    corrupt_wal: str | None = None  # where the original's WAL is kept, if it had one
    corrupt_journal: str | None = None  # where the original's hot rollback journal is kept
    # every engine that ran: {"found": {table: rows it found}, "used": {table: rows it gave}}
    found_by: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    swap_started: bool = False  # the intent line is logged: an interrupted swap is resumable
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per stage of the job
    error: errors.AgentdbError | None = field(default=None, repr=False)  # why "failed"
    # revision 3: the gap rows this recovery recorded in the replacement, as the file holds
    # them: {"kind", "from_seq", "to_seq", "expected_hash" (hex, or None)} (design §6)
    gaps: list[dict[str, Any]] = field(default_factory=list)
    # table -> rows of another session found in the file and not kept ("foreign rows ignored")
    foreign_ignored: dict[str, int] = field(default_factory=dict)

    def to_log(self, event: LogEvent) -> dict[str, Any]:
        """The recovery-log line for this outcome."""
        return {"session_id": self.session_id, "event": event, **self._fields()}

    def to_json(self) -> dict[str, Any]:
        """The ``recover --json`` entry for this session (the log line's fields, and the wall
        time of each stage)."""
        seconds = {k: round(v, 4) for k, v in self.seconds.items()}
        return {"session_id": self.session_id, **self._fields(), "seconds": seconds}

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to ``seconds[stage]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - t0

    def _fields(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "path": self.path,
            "corrupt_path": self.corrupt_path,
            "corrupt_wal": self.corrupt_wal,
            "corrupt_journal": self.corrupt_journal,
            "engines": self.engines,
            "found_by": self.found_by,
            "tables": self.tables,
            "lost": self.lost,
            "notes": self.notes,
            "gaps": self.gaps,
            "foreign_ignored": self.foreign_ignored,
        }

    @classmethod
    def from_log(cls, entry: dict[str, Any]) -> RecoveryOutcome:
        """A log line read back (fields of the wrong type are taken as absent)."""
        outcome = entry.get("outcome")
        return cls(
            session_id=str(entry.get("session_id", "")),
            outcome=outcome if outcome in OUTCOMES else "failed",
            path=str(entry.get("path", "")),
            corrupt_path=_str_or_none(entry.get("corrupt_path")),
            corrupt_wal=_str_or_none(entry.get("corrupt_wal")),
            corrupt_journal=_str_or_none(entry.get("corrupt_journal")),
            tables=_dict(entry.get("tables")),
            engines=_strs(entry.get("engines")),
            found_by=_dict(entry.get("found_by")),
            lost=_dict(entry.get("lost")),
            notes=_strs(entry.get("notes")),
            gaps=_gaps(entry.get("gaps")),
            foreign_ignored={
                k: v
                for k, v in _dict(entry.get("foreign_ignored")).items()
                if type(v) is int and v >= 0
            },
        )


@dataclass
class RecoveryReport:
    """Outcomes of one recover run, in the order the sessions were given."""

    sessions: list[RecoveryOutcome] = field(default_factory=list)
    dry_run: bool = False
    interrupted: bool = False  # Ctrl-C stopped the run: only the sessions before it are here

    @property
    def ok(self) -> bool:
        return all(s.outcome in ("recovered", "healthy") for s in self.sessions)
