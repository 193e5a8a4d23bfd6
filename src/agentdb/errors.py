"""One exception tree. Every error knows its exit code and says what to do about it.

Messages follow one shape, on one line: ``<file>: <problem>; <fix>``.
"""

from __future__ import annotations

from pathlib import Path


def one_line(text: str) -> str:
    """Any message (SQLite's multi-line integrity_check, click's wrapped usage) on one line."""
    return " ".join(text.split())


# Unicode's invisible characters that act on the text around them: format characters (bidi
# embeddings, overrides and isolates such as U+202E, zero-width spaces and joiners, the BOM,
# tag characters) and the line and paragraph separators.
_INVISIBLE = frozenset({"Cf", "Zl", "Zp"})


def visible(text: str) -> str:
    """``text`` with every invisible character that can reorder or hide what a reader sees
    (U+202E RIGHT-TO-LEFT OVERRIDE, U+200B, U+2066, ...) shown as an escape (``\\u202e``); ASCII
    text is returned as it is (its control characters are the callers' to escape)."""
    if text.isascii():
        return text
    import unicodedata

    return "".join(
        (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
        if c > "\x7f" and unicodedata.category(c) in _INVISIBLE
        else c
        for c in text
    )


# Exit codes from CONTRACT.md.
EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


class AgentdbError(Exception):
    """Base of every error agentdb raises on purpose.

    It carries the parts of its message as fields: ``path`` (the file), ``problem`` and ``fix``
    (None when there is nothing to do); ``str(e)`` is the one line ``<path>: <problem>; <fix>``.
    Raise it with the parts (``problem=…, fix=…, path=…``) — or, the older way, with the line
    already written (``message``), which is then read once, here, in that shape.
    """

    exit_code: int = EXIT_PROBLEMS
    code: str = "error"  # stable machine-readable code, used as a finding/reason code

    def __init__(
        self,
        message: str | None = None,
        *,
        path: str | Path | None = None,
        problem: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        if problem is None:
            file, problem, fix = _parts(message or "", self.path)
            line = message or ""
        else:
            file, line = self.path, compose(self.path, problem, fix)
        self.file: str | None = file  # the file the message names (a sidecar, a copy, the path)
        self.problem: str = problem  # what is wrong, without the file name
        self.fix: str | None = fix  # what to do about it, if anything
        super().__init__(line)

    @property
    def detail(self) -> str:
        """The message without the file name: ``<problem>; <fix>``."""
        return f"{self.problem}; {self.fix}" if self.fix else self.problem


def compose(path: str | Path | None, problem: str, fix: str | None = None) -> str:
    """The one-line shape of every message: ``<path>: <problem>; <fix>``."""
    text = f"{path}: {problem}" if path is not None else problem
    return f"{text}; {fix}" if fix else text


def _parts(message: str, path: str | None) -> tuple[str | None, str, str | None]:
    """(file, problem, fix) of a message written as ``<file>: <problem>; <fix>``."""
    first, sep, after = message.partition(": ")
    if path is not None and message.startswith(f"{path}: "):
        file, rest = path, message[len(path) + 2 :]
    elif sep and (path is not None or " " not in first):
        file, rest = first, after  # another file named first (a sidecar, a copy)
    else:
        file, rest = None, message  # no file named (a usage error)
    problem, sep, fix = rest.partition("; ")
    return file, problem, (fix if sep else None)


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


class SessionUnusable(AgentdbError):
    """This session cannot be used as it is: skip it (the spec's "flagged and skipped").

    Catch this to move on to the next session; the operator's ``agentdb check`` / ``recover``
    says what is wrong. Its subclasses are the reasons.
    """

    code = "unusable"


class Retryable(AgentdbError):
    """Nothing is wrong with the session; the same call may succeed later (busy, full disk)."""

    code = "retryable"


class ForeignFile(SessionUnusable):
    """A SQLite file that is not a session file (another application id or unknown tables)."""

    code = "foreign"


class TooNew(SessionUnusable):
    """A session file whose user_version is newer than this build understands."""

    code = "too_new"


class UnsafeSchema(SessionUnusable):
    """A file with triggers or views: opening it would run its author's SQL."""

    code = "unsafe_schema"


class Unreadable(SessionUnusable):
    """SQLite cannot read the file at all (not a database, truncated header, cannot open it)."""

    code = "unreadable"


class Corrupt(SessionUnusable):
    """PRAGMA integrity_check failed, or SQLite found the file malformed."""

    code = "corrupt"


class MigrationFailed(SessionUnusable):
    """A migration step failed; the transaction was rolled back and the file is unchanged.
    This build cannot bring the file to its revision: the kernel skips the session."""

    code = "migration_failed"


class SessionLive(AgentdbError):
    """Another process has the session open, so agentdb will not act on it."""

    code = "live"


class HardLinked(AgentdbError):
    """A session file with more than one name: rewriting it in place would change them all."""

    code = "hard_linked"


class Busy(Retryable):
    """The database stayed locked longer than the busy timeout."""

    code = "busy"


class SessionBusy(Retryable):
    """Another writer holds the session's sole-writer lease; it keeps working, this one may not.

    ``pid`` is the holder's process id when it could be read (None: unknown, e.g. an agentdb
    job holds the session)."""

    code = "session_busy"

    def __init__(
        self,
        message: str | None = None,
        *,
        path: str | Path | None = None,
        pid: int | None = None,
        problem: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, path=path, problem=problem, fix=fix)
        self.pid = pid


class Full(Retryable):
    """The disk (or a quota, or SQLite's page limit) is full; nothing was written."""

    code = "full"


class DiskIOError(AgentdbError):
    """The operating system reported an I/O error reading or writing the file."""

    code = "io_error"


class ReadOnly(AgentdbError):
    """The file, its directory or its filesystem cannot be written (permissions, read-only
    mount)."""

    code = "read_only"


class FileSystemError(AgentdbError):
    """The operating system refused a file operation: no space, file too large, permission
    denied, read-only file system, I/O error. The message names the file and the errno."""

    code = "os_error"

    def __init__(
        self,
        message: str | None = None,
        *,
        path: str | Path | None = None,
        errno: int = 0,
        problem: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, path=path, problem=problem, fix=fix)
        self.errno = errno  # the OSError's errno (0 when SQLite reported it without one)


class FileSystemFull(FileSystemError, Full):
    """No space, quota or file size left (ENOSPC, EDQUOT, EFBIG)."""

    code = "full"


class FileSystemIOError(FileSystemError, DiskIOError):
    """The device reported an I/O error (EIO)."""

    code = "io_error"


class FileSystemReadOnly(FileSystemError, ReadOnly):
    """Permission denied or a read-only file system (EACCES, EPERM, EROFS)."""

    code = "read_only"


class ConstraintViolation(AgentdbError):
    """A write broke one of the file's constraints (a duplicate key, a CHECK); nothing was
    written. A writer bug or a file another writer filled, not damage."""

    code = "constraint"


class Misuse(AgentdbError):
    """The SQLite API was used wrongly (a transaction inside a transaction, a closed
    connection): a bug in the caller, not a problem with the file."""

    code = "misuse"


class ThreadingViolation(Misuse):
    """One connection was used from two threads at once: a bug in the caller."""

    code = "threading_violation"


class InvalidInput(AgentdbError, ValueError):
    """The writer API was given something the spec forbids; nothing was written."""

    code = "invalid_input"


class ValueTooLarge(InvalidInput):
    """A payload or text larger than ``agentdb.db.MAX_VALUE``: readers would refuse the file."""

    code = "too_large"


class InvalidKind(InvalidInput):
    code = "invalid_kind"


class InvalidProducer(InvalidInput):
    code = "invalid_producer"


class InvalidStatus(InvalidInput):
    code = "invalid_status"


class InvalidTransition(InvalidInput):
    code = "invalid_transition"


class SessionEnded(InvalidInput):
    """An event for a session that has ended: terminal statuses take none, and a completed or
    cancelled session takes them only after it is re-opened (``set_status("running")``)."""

    code = "session_ended"


class InvalidLineage(InvalidInput):
    """A session that is its own parent, or a child whose depth is not its parent's + 1."""

    code = "invalid_lineage"
