"""The dataclasses jobs return (CONTRACT.md shapes); rendered by ``cli/output.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeGuard, get_args

# The contract's verdicts, most serious first; "ok" when none applies.
Problem = Literal[
    "insecure",
    "foreign",
    "too_new",
    "unsafe_schema",
    "unreadable",
    "corrupt",
    "inconsistent",
    "needs_migration",
]
VERDICTS: tuple[Problem, ...] = get_args(Problem)
OK: Final = "ok"
Verdict = Literal["ok", Problem]  # what check says of one file


def is_verdict(value: object) -> TypeGuard[Verdict]:
    """A value read back from a file (the verdict cache) is one of this build's verdicts."""
    return value == OK or value in VERDICTS


Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)

# What each job says it did to one session (CONTRACT.md); each job module keeps the tuple.
RecoverOutcomeName = Literal[
    "recovered", "healthy", "unreadable", "skipped_live", "refused", "failed"
]
MigrateOutcomeName = Literal[
    "migrated", "current", "too_new", "corrupt", "skipped_live", "failed", "foreign"
]
BackupOutcomeName = Literal[
    "copied", "updated", "unchanged", "kept", "corrupt", "foreign", "failed"
]
RestoreOutcomeName = Literal["restored", "unchanged", "refused", "failed"]
EndOutcomeName = Literal["ended", "unchanged", "refused", "failed"]
# Why prune keeps a selected session (every one that applies is listed).
PruneReasonCode = Literal[
    "running",
    "live",
    "pinned",
    "has_children",
    "unreadable",
    "foreign",
    "has_corrupt_copies",
    "not_found",
    "changed",
    "failed",
]
# Why a job will not act on a session file as it is (checks.refusal).
RefusalCode = Literal["unsafe", "foreign", "too_new", "damaged", "needs_migration"]


@dataclass(frozen=True)
class Finding:
    """One thing a check found. Tests assert ``code``, never the wording."""

    code: str  # stable machine-readable code (see checks.codes.CODES)
    message: str  # one line: the file, the problem and, where there is one, the fix
    severity: Severity  # "error" (sets a non-ok verdict), "warning" or "info"
    fix: str | None = None  # the command (or action) that repairs it, if any


@dataclass(frozen=True)
class Fix:
    """The one next step for a session file (``checks.policy.fix_for``)."""

    command: str | None  # exactly what to type; None: nothing to run (e.g. upgrade agentdb)
    final: bool  # an explicit final decision (set aside, remove, keep), not a repair
    why: str  # one line: what the step does


@dataclass(frozen=True)
class Origin:
    """Since when a revision-3 file's rows are proven (its ``session_chain`` head, design §10)."""

    how: str  # "created", "migrated" or "recovered"
    revision: int | None  # the revision the file had then (origin_revision)
    at: str  # UTC ISO time of that moment (origin_at)


@dataclass(frozen=True)
class TableProof:
    """One table of a revision-3 file, as a check verified it."""

    rows: int  # rows the table holds (--quick: its count(*))
    proven: int  # of those, rows whose own hash this check recomputed and found to hold


@dataclass(frozen=True)
class LinkProof:
    """The links between events a check looked at (--quick looks at none)."""

    checked: int  # links looked at, one per event (the first: to the session's genesis hash)
    broken: int  # of those, broken (a hash that does not link, or a sequence jump)


@dataclass(frozen=True)
class GapSeen:
    """A break in the chain, or a gap an earlier recovery recorded (design §6)."""

    kind: str  # events, tail, rows, link or meta
    from_seq: int  # first sequence of the break (0 for meta)
    to_seq: int  # last sequence of the break
    recorded: bool  # a chain_gaps row (its own hash holding) records it: informational


@dataclass(frozen=True)
class Verified:
    """What a check proved of a revision-3 ("damage-evident") file: the ``verified`` field of
    ``check --json`` (design §7). None for a file below revision 3 or one that could not be
    read as one."""

    level: str  # "full" (every row, link and gap) or "quick" (the head, the last event, counts)
    origin: Origin | None  # from the head; None when there is no single session_chain row
    rows: dict[str, TableProof]  # per table: rows held, rows proven
    links: LinkProof  # links between events checked and broken
    gaps: list[GapSeen]  # breaks found, and recorded gaps (full: every one; quick: what it saw)
    tail: str  # matches, cut, head_damaged (the head fails its own hash) or head_missing


@dataclass
class SessionCheck:
    """Everything ``check`` found about one ``<id>.sqlite`` entry."""

    session_id: str  # the ULID in the file name
    path: Path  # the entry checked
    verdict: Verdict  # "ok" or the first of VERDICTS that applies
    status: str | None = None  # session_meta.status, when readable
    revision: int | None = None  # PRAGMA user_version, when readable
    size: int | None = None  # bytes of the database file plus its -wal
    live: int | None = None  # pid of a process that has the file open (0: pid unknown)
    findings: list[Finding] = field(default_factory=list)  # everything found, whatever the verdict
    verified: Verified | None = None  # revision 3: what the chain walk proved (else None)
    fix: Fix | None = None  # the one next step (checks.policy.fix_for), set once findings are in

    @property
    def ok(self) -> bool:
        return self.verdict == OK


@dataclass(frozen=True)
class DirectoryFinding:
    """A finding about the sessions directory rather than one session file."""

    path: Path  # the entry the finding is about
    session_id: str | None  # the session it belongs to, when its name says so
    finding: Finding


@dataclass
class CheckReport:
    """The result of checking many sessions."""

    sessions: list[SessionCheck]  # in session-id order
    directory: list[DirectoryFinding] = field(default_factory=list)  # orphans and leftovers
    interrupted: bool = False  # True when Ctrl-C stopped the run: the report is partial
    quick: bool = False  # True when quick_check ran instead of integrity_check

    @property
    def summary(self) -> dict[str, Any]:
        by: dict[str, int] = {}
        for s in self.sessions:
            by[s.verdict] = by.get(s.verdict, 0) + 1
        return {
            "checked": len(self.sessions),
            "ok": by.get(OK, 0),
            "problems": len(self.sessions) - by.get(OK, 0),
            "verdicts": dict(sorted(by.items())),
            "live": sum(1 for s in self.sessions if s.live is not None),
            "directory_findings": len(self.directory),
            "interrupted": self.interrupted,
            "quick": self.quick,
        }

    @property
    def ok(self) -> bool:
        """Nothing wrong: every verdict ok, no error-level directory finding, not interrupted."""
        return (
            not self.interrupted
            and all(s.ok for s in self.sessions)
            and not any(d.finding.severity == "error" for d in self.directory)
        )
