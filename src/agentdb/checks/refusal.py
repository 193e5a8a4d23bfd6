"""What ``check``'s verdict on a session file means for a job about to change that file.

Jobs that write a session (restore, ``sessions end``) judge it with :func:`check_path` first and
refuse by this one table, so a file gets the same answer from every command.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentdb.checks import policy
from agentdb.checks.codes import CODES
from agentdb.results import RefusalCode, SessionCheck

_UNSAFE_CODES = frozenset({"symlink", "not_regular", "insecure_sidecar"})


@dataclass(frozen=True)
class Refusal:
    """Why a job will not act on a session file as it is."""

    code: RefusalCode
    message: str  # one line: what check found, and what to do about it
    forceable: bool  # True for "damaged": a job may act with --force (keeping the file)
    retry: bool = False  # the message names a step after which the job is run again


def refusal(result: SessionCheck) -> Refusal | None:
    """The refusal ``check``'s result implies, or None when the file is ok to act on.

    A file that is merely at an older revision gives ``needs_migration``; a job that can work
    with older revisions ignores that code.
    """
    why = [f for f in result.findings if CODES.get(f.code, ("", None))[1] == result.verdict]
    why = why or [f for f in result.findings if f.severity == "error"]
    first = policy.without_step(why[0].message) if why else result.verdict
    codes = {f.code for f in result.findings}
    if result.verdict in ("insecure", "unsafe_schema") or codes & _UNSAFE_CODES:
        return Refusal("unsafe", f"{first}; never written by agentdb until that is fixed", False)
    if result.verdict == "foreign":
        return Refusal("foreign", f"{first}; not a session file, never written by agentdb", False)
    if result.verdict == "too_new":
        return Refusal("too_new", f"{first}", False)
    if policy.is_damaged(result.verdict) or policy.is_inconsistent(result.verdict):
        # the policy's step (recover, sessions end, ...), never one that refuses the file; a
        # final decision (remove it, keep it) is no step before this job: --force is the choice
        fix = policy.fix_for(result)
        if fix is None or fix.final or not fix.command:
            return Refusal("damaged", first, True)
        step = fix.command
        message = first if step in first else f"{first}; run `{step}` first"
        return Refusal("damaged", message, True, retry=True)
    if result.verdict == "needs_migration":
        return Refusal("needs_migration", f"{first}", False)
    return None
