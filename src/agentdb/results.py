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
