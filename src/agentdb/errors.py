"""One exception tree. Every error knows its exit code and says what to do about it.

Messages follow one shape, on one line: ``<file>: <problem>; <fix>``.
"""

from __future__ import annotations

from pathlib import Path

# Exit codes from CONTRACT.md.
EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


class AgentdbError(Exception):
    """Base of every error agentdb raises on purpose."""

    exit_code: int = EXIT_PROBLEMS
    code: str = "error"  # stable machine-readable code, used as a finding/reason code

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.path = str(path) if path is not None else None


class UsageError(AgentdbError):
    """A bad option, a bad id, or a sessions directory that does not exist."""

    exit_code = EXIT_USAGE
    code = "usage"


class InvalidSessionId(UsageError):
    """Something given as a session id is not a ULID."""

    code = "invalid_id"


class SessionNotFound(AgentdbError):
    """No file for that session id."""

    code = "not_found"


class SessionExists(AgentdbError):
    """Refusing to create a session whose file already exists."""

    code = "exists"


class NotRegularFile(AgentdbError):
    """A symlink, directory, FIFO or device where a session file should be."""

    code = "not_regular"


class InsecureFile(AgentdbError):
    """A database or sidecar that group/others can write, or that another user owns."""

    code = "insecure"


class ForeignFile(AgentdbError):
    """A SQLite file that is not a session file (another application id or unknown tables)."""

    code = "foreign"


class TooNew(AgentdbError):
    """A session file whose user_version is newer than this build understands."""

    code = "too_new"


class UnsafeSchema(AgentdbError):
    """A file with triggers or views: opening it would run its author's SQL."""

    code = "unsafe_schema"


class Unreadable(AgentdbError):
    """SQLite cannot read the file at all (not a database, truncated header, I/O error)."""

    code = "unreadable"


class Corrupt(AgentdbError):
    """PRAGMA integrity_check failed."""

    code = "corrupt"


class MigrationFailed(AgentdbError):
    """A migration step failed; the transaction was rolled back and the file is unchanged."""

    code = "migration_failed"


class SessionLive(AgentdbError):
    """Another process has the session open, so agentdb will not act on it."""

    code = "live"


class Busy(AgentdbError):
    """The database stayed locked longer than the busy timeout."""

    code = "busy"


class InvalidInput(AgentdbError, ValueError):
    """The writer API was given something the spec forbids; nothing was written."""

    code = "invalid_input"


class InvalidKind(InvalidInput):
    code = "invalid_kind"


class InvalidProducer(InvalidInput):
    code = "invalid_producer"


class InvalidStatus(InvalidInput):
    code = "invalid_status"


class InvalidTransition(InvalidInput):
    code = "invalid_transition"
