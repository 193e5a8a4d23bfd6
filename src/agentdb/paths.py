"""Where things live (CONTRACT.md) and session-id validation.

No path is ever built from an id that has not been through :func:`validate_id`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentdb.errors import InvalidSessionId, UsageError

# 26 characters of Crockford base32, upper case; the first character is at most 7 (48-bit time).
ULID_RE = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
SESSION_SUFFIX = ".sqlite"
CORRUPT_RE = re.compile(r"(?P<id>[0-7][0-9A-HJKMNP-TV-Z]{25})\.sqlite\.corrupt(?:\.(?P<n>[0-9]+))?")
# Names under which a job keeps a session's previous file (its -wal/-journal beside it): recover
# keeps a damaged original as ".corrupt[.N]", restore keeps the file it replaced as
# ".pre-restore[.N]".
KEPT_RE = re.compile(
    r"(?P<id>[0-7][0-9A-HJKMNP-TV-Z]{25})\.sqlite\.(?P<kind>corrupt|pre-restore)(?:\.(?P<n>[0-9]+))?"
)
DIR_MODE = 0o700
FILE_MODE = 0o600


def is_valid_id(text: str) -> bool:
    """True when ``text`` is a ULID exactly as session ids are written."""
    return bool(ULID_RE.fullmatch(text))


def validate_id(text: str) -> str:
    """Return ``text`` if it is a session id, else raise :class:`InvalidSessionId`."""
    if not isinstance(text, str) or not is_valid_id(text):
        shown = repr(text)[:60]
        raise InvalidSessionId(
            f"{shown}: not a session id (26 upper-case Crockford base32 characters, a ULID); "
            "pass the id as `agentdb sessions list` shows it"
        )
    return text


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var, "")
    # The XDG spec says relative paths are invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def ignored_xdg(var: str) -> str | None:
    """Why ``$var`` (XDG_STATE_HOME, XDG_CACHE_HOME) is not used, when it is set but relative."""
    value = os.environ.get(var, "")
    if value and not os.path.isabs(value):
        return (
            f"{var}={value!r} is ignored: the XDG rules accept only absolute paths; "
            f"set it to an absolute path"
        )
    return None


def state_home() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state")


def cache_home() -> Path:
    return _xdg("XDG_CACHE_HOME", ".cache")


def default_sessions_dir() -> Path:
    return state_home() / "agent" / "sessions"


def default_plugin_cache() -> Path:
    return cache_home() / "agent" / "plugins"


def agentdb_cache_dir() -> Path:
    """agentdb's own derived data: deletable at any time without changing any answer."""
    return cache_home() / "agentdb"


def recovery_log_path(sessions_dir: Path) -> Path:
    """The recovery log sits in the sessions directory's parent (``.../agent/recovery.log``)."""
    return sessions_dir.parent / "recovery.log"


def session_filename(session_id: str) -> str:
    """``<ULID>.sqlite``: the one place a session file's name is built."""
    return validate_id(session_id) + SESSION_SUFFIX


def session_path(sessions_dir: Path, session_id: str) -> Path:
    return sessions_dir / session_filename(session_id)


def sidecar(path: Path, suffix: str) -> Path:
    """``<path>-wal`` / ``<path>-shm`` (SQLite appends, it does not replace the suffix)."""
    return path.with_name(path.name + suffix)


def session_id_of(name: str) -> str | None:
    """The id in a session file name ``<ULID>.sqlite``, or None for any other name."""
    if name.endswith(SESSION_SUFFIX):
        stem = name[: -len(SESSION_SUFFIX)]
        if is_valid_id(stem):
            return stem
    return None


# SQLite's unix VFS opens no database whose full path — absolute, symlinks resolved (SQLite
# resolves them itself, so a short symlink to a long directory does not help) — is over 504
# bytes: its mxPathname is 512 and it keeps room for the "-journal" suffix (8 bytes).
# Measured with apsw/SQLite 3.54.1 on Linux: a 504-byte path opens and writes (WAL and
# rollback journal); at 505 bytes every open is SQLITE_CANTOPEN "unable to open database file".
SQLITE_MAX_PATH = 504
# The longest name agentdb opens with SQLite inside the sessions directory:
# "<ULID>.sqlite.agentdb-migrate-backup" (56 bytes; recover's and restore's "-tmp" are shorter).
LONGEST_NAME = 26 + len(".sqlite.agentdb-migrate-backup")
# The longest sessions directory (bytes, resolved) in which every file agentdb opens fits: 447.
MAX_SESSIONS_DIR = SQLITE_MAX_PATH - 1 - LONGEST_NAME


def require_short_path(sessions_dir: str | os.PathLike[str]) -> None:
    """Raise :class:`UsageError` when the sessions directory's resolved path is too long for
    SQLite to open the files in it (:data:`MAX_SESSIONS_DIR`): one clear error up front, not a
    healthy session called unreadable and a 0-byte file left by a failed create."""
    real = os.path.realpath(os.fspath(sessions_dir))
    size = len(os.fsencode(real))
    if size <= MAX_SESSIONS_DIR:
        return
    shown = os.fspath(sessions_dir)
    resolved = "" if real == os.path.abspath(shown) else f" (resolved: {real})"
    raise UsageError(
        f"{shown}: the sessions directory's path is {size} bytes{resolved}, longer than the "
        f"{MAX_SESSIONS_DIR} bytes agentdb can use (SQLite opens no file whose full path is "
        f"over {SQLITE_MAX_PATH} bytes); use a shorter directory (--sessions-dir or "
        "XDG_STATE_HOME, or a bind mount at a short path — a symlink does not help: SQLite "
        "resolves it); nothing was changed"
    )


def require_sessions_dir(path: Path) -> Path:
    """The sessions directory must exist for every command but the writer and demo, and its
    path must be short enough for SQLite (:func:`require_short_path`)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        ignored = ignored_xdg("XDG_STATE_HOME") if path == default_sessions_dir() else None
        if ignored is not None:
            raise UsageError(
                f"{path}: sessions directory does not exist, and {ignored} (or pass --sessions-dir)"
            ) from None
        raise UsageError(
            f"{path}: sessions directory does not exist; pass --sessions-dir or set XDG_STATE_HOME"
        ) from None
    except OSError as e:
        raise UsageError(
            f"{path}: cannot use it as the sessions directory ({e.strerror}); pass --sessions-dir"
        ) from None
    if not os.path.isdir(path):
        raise UsageError(f"{path}: not a directory (mode {oct(st.st_mode)}); pass --sessions-dir")
    require_short_path(path)
    return path


@dataclass(frozen=True)
class Entry:
    """One directory entry named like a session file (it may be anything: file, link, FIFO)."""

    session_id: str  # the ULID in the name
    path: Path  # sessions_dir / "<id>.sqlite"


def iter_session_entries(sessions_dir: Path) -> Iterator[Entry]:
    """Every entry named ``<ULID>.sqlite``, in id (= chronological) order.

    Uses ``os.scandir`` only: no entry is opened or followed.
    """
    names = []
    with os.scandir(sessions_dir) as it:
        for de in it:
            sid = session_id_of(de.name)
            if sid is not None:
                names.append(sid)
    for sid in sorted(names):
        yield Entry(sid, sessions_dir / (sid + SESSION_SUFFIX))


# Files agentdb's own jobs leave beside a session while they work (crash leftovers if a job was
# killed): "<id>.sqlite.agentdb-<job>-<what>", e.g. "<id>.sqlite.agentdb-recover-tmp".
JOB_FILE_RE = re.compile(
    r"(?P<id>[0-7][0-9A-HJKMNP-TV-Z]{25})\.sqlite\.agentdb-(?P<job>[a-z]+)-(?P<what>[a-z0-9.-]+)"
)


def job_file(db_path: Path, job: str, what: str) -> Path:
    """The name a job gives a file it keeps beside ``db_path`` while it works."""
    return db_path.with_name(f"{db_path.name}.agentdb-{job}-{what}")
