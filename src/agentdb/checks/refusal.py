"""What ``check``'s verdict on a session file means for a job about to change that file.

Jobs that write a session (restore, ``sessions end``) judge it with :func:`check_path` first and
refuse by this one table, so a file gets the same answer from every command.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentdb.checks.codes import CODES
from agentdb.results import RefusalCode, SessionCheck

_UNSAFE_CODES = frozenset({"symlink", "not_regular", "insecure_sidecar"})


@dataclass(frozen=True)
class Refusal:
    """Why a job will not act on a session file as it is."""

    code: RefusalCode
    message: str  # one line: what check found, and what to do about it
    forceable: bool  # True for "damaged": a job may act with --force (keeping the file)


def refusal(result: SessionCheck) -> Refusal | None:
    """The refusal ``check``'s result implies, or None when the file is ok to act on.

    A file that is merely at an older revision gives ``needs_migration``; a job that can work
    with older revisions ignores that code.
    """
    sid = result.session_id
    why = [f for f in result.findings if CODES.get(f.code, ("", None))[1] == result.verdict]
    why = why or [f for f in result.findings if f.severity == "error"]
    first = why[0].message if why else result.verdict
    codes = {f.code for f in result.findings}
    if result.verdict in ("insecure", "unsafe_schema") or codes & _UNSAFE_CODES:
        return Refusal("unsafe", f"{first}; never written by agentdb until that is fixed", False)
    if result.verdict == "foreign":
        return Refusal("foreign", f"{first}; not a session file, never written by agentdb", False)
    if result.verdict == "too_new":
        return Refusal("too_new", f"{first}", False)
    if result.verdict in ("unreadable", "corrupt", "inconsistent"):
        fix = f"agentdb recover {sid}"
        return Refusal("damaged", first if fix in first else f"{first}; run `{fix}` first", True)
    if result.verdict == "needs_migration":
        return Refusal("needs_migration", f"{first}", False)
    return None
