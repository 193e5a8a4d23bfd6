"""One policy: what ``check``'s verdict on a session file lets each job do, and the one next
step that makes progress on it.

Every job and view asks here; no verdict literal or verdict set lives outside ``checks/``
(``tests/test_policy.py`` parses ``src/`` for one). Two questions, two functions:

* :func:`fix_for`: the one next step for a file as check found it — a command that, run as
  printed, changes the verdict (``migrate``, ``recover``, ``chmod``, ``sessions end``), or an
  explicit final decision (set the file aside, remove it with ``prune --include-damaged``,
  keep it as it is until agentdb is upgraded). It never names a job that refuses the file:
  ``tests/test_no_dead_ends.py`` follows the printed steps over every kind of file the damage
  generators make and reaches a final state in at most three.
* :func:`decide`: job x result -> :class:`Act`, :class:`Refuse` (code, message, the fix) or
  :class:`Skip` (nothing to do).

The graph, by verdict (``ok`` has no step):

=================  ==============================================================
needs_migration    ``agentdb migrate ID``
corrupt            ``agentdb recover ID``; after a recovery that salvaged nothing,
unreadable         ``agentdb prune ID --include-damaged`` (final)
inconsistent       ``agentdb sessions end ID --status failed`` when only the
                   session_meta lifecycle disagrees (a status outside the spec's
                   seven, an ended_at that does not match it) or when it is
                   interrupted (prune never removes a running session); otherwise a final
                   decision: keep it (every row reads), put a backup back, or
                   ``agentdb prune ID --include-damaged``
insecure           the ``chmod`` that fixes the mode; a link, a sidecar that is no
                   regular file, another owner: by hand (set aside, or act as the
                   owner)
foreign            set it aside (``mv``): never modified, never removed by agentdb
unsafe_schema      set it aside (``mv``): agentdb never runs a file's own SQL
too_new            keep it as it is and upgrade agentdb (final, no command)
=================  ==============================================================

A step that runs a job rewriting the file in place (migrate, sessions end) is preceded by
breaking its hard links (``cp -p`` and ``mv``): both refuse a file with other names. A step
that runs a job writing the recovery log (recover, prune, sessions end, restore) is
preceded by moving the log aside while a symlink, FIFO or directory stands in its place: every
such job refuses until then. Setting aside never replaces an earlier file set aside, and takes
the file's SQLite sidecars with it; it is the final step instead of ``prune --include-damaged``
while an earlier recovery's ``.corrupt`` original lies beside the file (prune removes that
too). After a recovery that salvaged nothing, every command reads that from the recovery log
(not only ``check``), so all of them name the same step.

Size: over 500 lines because it is one table of next steps and the reads it needs (the recovery
log's last outcome, hard links, kept copies); split, the graph would be read in two places.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentdb import errors, fsutil, paths, recoverylog
from agentdb.checks.codes import CODES
from agentdb.results import OK, Fix, SessionCheck, Verdict
from agentdb.schema import enums

# ----------------------------------------------------------------------------- verdict sets

# Every row reads and the file is this session's: readers and writers use it as it is.
SOUND: frozenset[Verdict] = frozenset({OK, "needs_migration"})
# Damage SQLite or the spec's rules can see: what ``recover`` salvages.
DAMAGED: frozenset[Verdict] = frozenset({"unreadable", "corrupt"})
# Rows read, but some disagree with others or with the spec's enums.
INCONSISTENT: frozenset[Verdict] = frozenset({"inconsistent"})
# Not this build's to read or write at all: fixed by hand, never recovered.
REFUSED: frozenset[Verdict] = frozenset({"insecure", "foreign", "too_new", "unsafe_schema"})
# A listing shows an error for the file instead of its session_meta row.
READ_ERROR: frozenset[Verdict] = DAMAGED | {"foreign"}
# What a file's own bytes and modes decide (a derived record of only these may be believed
# while the file is unchanged).
FILE_PROBLEMS: frozenset[Verdict] = DAMAGED | REFUSED
# ...of which its contents alone (a non-regular entry is never taken from a derived record).
CONTENT_PROBLEMS: frozenset[Verdict] = DAMAGED | {"foreign", "too_new", "unsafe_schema"}
# What ``prune --include-damaged`` may remove besides sound files (a foreign file never).
REMOVABLE_DAMAGED: frozenset[Verdict] = DAMAGED | INCONSISTENT | {"too_new", "unsafe_schema"}

# session_meta codes ``sessions end --status failed`` repairs: it writes a spec status and
# the ended_at that goes with it.
_LIFECYCLE_CODES = frozenset({"bad_status", "ended_at_inconsistent"})
_ASIDE_SUFFIX = ".aside"  # no longer named <ULID>.sqlite: no command treats it as a session


def is_sound(verdict: str | None) -> bool:
    return verdict in SOUND


def is_damaged(verdict: str | None) -> bool:
    return verdict in DAMAGED


def is_refused(verdict: str | None) -> bool:
    return verdict in REFUSED


def is_ok(verdict: str | None) -> bool:
    return verdict == OK


def is_corrupt(verdict: str | None) -> bool:
    return verdict == "corrupt"


def is_foreign(verdict: str | None) -> bool:
    return verdict == "foreign"


def is_too_new(verdict: str | None) -> bool:
    return verdict == "too_new"


def is_inconsistent(verdict: str | None) -> bool:
    return verdict in INCONSISTENT


def is_insecure_or_too_new(verdict: str | None) -> bool:
    """A copy this build can neither trust (insecure) nor verify (too new)."""
    return verdict in ("insecure", "too_new")


def needs_migration(verdict: str | None) -> bool:
    return verdict == "needs_migration"


# ----------------------------------------------------------------------------- the next step


def _q(path: object) -> str:
    return shlex.quote(str(path))


def command_in(text: str | None) -> str | None:
    """The command inside "run `X`" (the fix text of errors and findings), else None."""
    if not text or "`" not in text:
        return None
    parts = text.split("`")
    return parts[1] if len(parts) >= 3 and parts[0].rstrip().endswith("run") else None


def _codes(result: SessionCheck) -> set[str]:
    return {f.code for f in result.findings}


def _error_codes(result: SessionCheck) -> set[str]:
    return {f.code for f in result.findings if f.severity == "error"}


_SIDECARS = ("-wal", "-journal", "-shm")


def aside_name(path: Path) -> Path:
    """The first free ``<name>.aside[.N]`` beside ``path`` (with no sidecar of that name
    either): a second file set aside never replaces the first."""
    base = path.with_name(path.name + _ASIDE_SUFFIX)
    candidate, n = base, 0
    while any(os.path.lexists(str(candidate) + s) for s in ("", *_SIDECARS)):
        n += 1
        candidate = base.with_name(f"{base.name}.{n}")
    return candidate


def move_aside(path: Path, *, sidecars: bool = True) -> str:
    """``mv -n`` the entry (a link, not its target) to a free name, and its SQLite sidecars
    with it (a WAL or hot journal left behind would be replayed into the next file of that
    name, and the file set aside would lose its last commits)."""
    dst = aside_name(path)
    moves = [(path, dst)]
    if sidecars:
        for s in _SIDECARS:
            if os.path.lexists(paths.sidecar(path, s)):
                moves.append((paths.sidecar(path, s), Path(str(dst) + s)))
    return " && ".join(f"mv -n {_q(a)} {_q(b)}" for a, b in moves)


def set_aside(result: SessionCheck, why: str) -> Fix:
    """Move the entry out of the session's name, with its sidecars."""
    return Fix(move_aside(result.path), True, why)


def prune_damaged(result: SessionCheck, why: str) -> Fix:
    """Remove it, unless an earlier recovery's ``.corrupt`` original lies beside it: prune
    --include-damaged removes those too, and they hold the history that recovery salvaged
    (they can be recovered again); setting the file aside keeps them."""
    if "recovered_earlier" in _codes(result) or os.path.lexists(f"{result.path}.corrupt"):
        return set_aside(
            result,
            f"{why.split(':')[0]}; its .corrupt original of an earlier recovery stays beside "
            "it (prune --include-damaged would remove that too)",
        )
    return Fix(f"agentdb prune {result.session_id} --include-damaged", True, why)


def recover(result: SessionCheck) -> Fix:
    return Fix(
        f"agentdb recover {result.session_id}",
        False,
        "salvage what reads into a replacement; the damaged original is kept as .corrupt",
    )


# agentdb jobs that rewrite a session file in place: each refuses one with other names
_IN_PLACE_JOBS = ("agentdb migrate ", "agentdb sessions end ")
# agentdb jobs that write the recovery log: each refuses while a symlink, FIFO or directory
# stands in its place (recovery is never silent)
_LOGGING_JOBS = ("agentdb recover ", "agentdb prune ", "agentdb sessions end ", "agentdb restore ")


def fix_for(result: SessionCheck) -> Fix | None:
    """The one next step for the file as ``result`` found it; None when it is ok."""
    fix = _fix_for(result)
    in_place = fix is not None and f"{fix.command} ".startswith(_IN_PLACE_JOBS)
    if in_place and fsutil.hard_link_problem(result.path) is not None:  # the job refuses it
        return Fix(
            fsutil.break_link_command(result.path),
            False,
            "it has other names (hard links) that rewriting it in place would change too: "
            "give it a file of its own first",
        )
    if not log_blocks(fix):
        return fix
    log = paths.recovery_log_path(result.path.parent)
    try:
        regular = stat.S_ISREG(os.lstat(log).st_mode)
    except OSError:
        regular = True  # absent (the job creates it), or not ours to judge here
    if regular:
        return fix
    return Fix(
        move_aside(log, sidecars=False),
        False,
        "the recovery log is not a regular file and the next step writes it: move it away "
        "first (nothing in it is lost)",
    )


def log_blocks(fix: Fix | None) -> bool:
    """Whether ``fix`` runs a job that writes the recovery log."""
    return fix is not None and f"{fix.command} ".startswith(_LOGGING_JOBS)


def _fix_for(result: SessionCheck) -> Fix | None:
    v, sid = result.verdict, result.session_id
    codes = _codes(result)
    if v == OK:
        return None
    if v == "needs_migration":
        return Fix(f"agentdb migrate {sid}", False, "bring it to the current revision")
    if v == "insecure":
        return _insecure(result, codes)
    if v == "foreign":
        if "meta_id_mismatch" in codes:
            why = "it holds another session's rows under this name: set it aside, never merged"
        else:
            why = "another application's file: agentdb never modifies or removes it"
        return set_aside(result, why)
    if v == "unsafe_schema" or "unsafe_schema" in codes:  # a newer agentdb would refuse it too
        return set_aside(result, "it carries triggers or views, which agentdb never runs")
    if v == "too_new":
        return Fix(
            None,
            True,
            "written by a newer agentdb: keep it as it is and upgrade agentdb to read it",
        )
    if v == "unreadable":
        if "missing" in codes:
            return Fix(None, True, "there is no such session file")
        if "not_regular" in codes:
            return set_aside(result, "a directory, FIFO or device is never opened as a session")
    if v in DAMAGED:
        if "empty_database" in codes or _salvaged_nothing(result):
            return prune_damaged(
                result,
                "nothing in it can be salvaged: remove it (or restore it from a backup with "
                f"`agentdb restore {sid} --from DIR --force`)",
            )
        return recover(result)
    # inconsistent
    endable = result.status == enums.RUNNING or result.status not in enums.STATUSES
    if _error_codes(result) <= _LIFECYCLE_CODES and endable and "live" not in codes:
        return Fix(
            f"agentdb sessions end {sid} --status failed",
            False,
            "its lifecycle row holds what the spec does not allow: end it with a spec status",
        )
    if result.status == enums.RUNNING and "live" not in codes:
        # prune never removes a running session (a kernel may resume it): end it first
        return Fix(
            f"agentdb sessions end {sid} --status failed",
            False,
            "interrupted, and some rows disagree: end it (failed: it can never be resumed), "
            "then decide whether to keep or remove it",
        )
    return prune_damaged(
        result,
        "every row reads but some disagree and no engine can tell which is wrong: keep it as "
        f"it is (agentdb events reads it), put a backup back (`agentdb restore {sid} "
        "--from DIR --force`), or remove it",
    )


def _salvaged_nothing(result: SessionCheck) -> bool:
    """The recovery log says the last recovery of the session salvaged nothing. ``check``
    reads the log once per run and says so as a finding (``recovery_unreadable``); a job that
    judges one file on its own (migrate, backup, restore, sessions end, recover) asks here, so
    that it names the same step."""
    if "recovery_unreadable" in _codes(result):
        return True
    log = paths.recovery_log_path(result.path.parent)
    return _last_outcomes(log).get(result.session_id) == "unreadable"


# (log, inode, mtime, size) -> each session's last outcome line: read once per change of the log
_LAST_OUTCOMES: tuple[tuple[str, int, int, int], dict[str, str]] | None = None


def _last_outcomes(log: Path) -> dict[str, str]:
    global _LAST_OUTCOMES
    try:
        st = os.lstat(log)
        key = (str(log), st.st_ino, st.st_mtime_ns, st.st_size)
        if _LAST_OUTCOMES is None or _LAST_OUTCOMES[0] != key:
            last: dict[str, str] = {}
            for e in recoverylog.read(log):
                sid, outcome = e.get("session_id"), e.get("outcome")
                if e.get("event") == "outcome" and isinstance(sid, str):
                    last[sid] = str(outcome)
            _LAST_OUTCOMES = (key, last)
    except (OSError, errors.AgentdbError):
        return {}  # absent, or check says why the log cannot be read
    return _LAST_OUTCOMES[1]


def _insecure(result: SessionCheck, codes: set[str]) -> Fix:
    if "symlink" in codes:
        return set_aside(result, "a symbolic link is never followed")
    chmods = [f.fix for f in result.findings if f.code == "insecure_mode" and f.fix]
    if chmods and not codes & {"insecure_owner", "insecure_sidecar"}:
        paths = [c.split(" ", 2)[2] for c in chmods if c.startswith("chmod 600 ")]
        return Fix("chmod 600 " + " ".join(paths), False, "take group and other write bits away")
    by_hand = [f.fix for f in result.findings if f.severity == "error" and f.fix]
    what = by_hand[0] if by_hand else "fix its owner and mode by hand"
    return Fix(None, True, f"by hand: {what}")


def describe(fix: Fix | None) -> str:
    """``run `X``` for a command, else the step in words; "" for no step."""
    if fix is None:
        return ""
    if fix.command is None:
        return fix.why
    return f"run `{fix.command}` ({fix.why})"


def advise(results: Iterable[SessionCheck]) -> None:
    """Set each result's ``fix`` from its findings (after every finding is in)."""
    for r in results:
        r.fix = fix_for(r)


# ----------------------------------------------------------------------------- job x verdict

Job = Literal[
    "recover",
    "migrate",
    "backup",
    "restore",
    "prune",
    "end",
    "read",  # events, sessions show, preflight: read what reads
]


@dataclass(frozen=True)
class Act:
    """The job goes ahead."""


@dataclass(frozen=True)
class Skip:
    """Nothing for this job to do (a healthy file for recover, a current one for migrate)."""

    why: str


@dataclass(frozen=True)
class Refuse:
    """The job leaves the file alone; ``fix`` is the one next step that makes progress."""

    code: str  # unsafe, foreign, too_new, damaged, inconsistent, needs_migration
    message: str  # one line: the problem and the fix
    fix: Fix | None


Decision = Act | Skip | Refuse

# verdict -> the refusal code jobs report
_REFUSAL_CODE: dict[str, str] = {
    "insecure": "unsafe",
    "unsafe_schema": "unsafe",
    "foreign": "foreign",
    "too_new": "too_new",
    "unreadable": "damaged",
    "corrupt": "damaged",
    "inconsistent": "damaged",
    "needs_migration": "needs_migration",
}

# job -> verdicts it acts on (everything else it refuses, naming fix_for's step)
ACTS: dict[Job, frozenset[Verdict]] = {
    "recover": DAMAGED,
    "migrate": frozenset({"needs_migration"}),
    "backup": SOUND | INCONSISTENT,
    "restore": SOUND,
    "prune": SOUND,
    "end": frozenset({OK}),  # never migrates: an older revision is migrated first
    "read": SOUND | DAMAGED | INCONSISTENT,
}


def first_problem(result: SessionCheck) -> str:
    """The first error finding behind the verdict, without the file name (or the verdict)."""
    why = [f for f in result.findings if CODES.get(f.code, ("", None))[1] == result.verdict]
    why = why or [f for f in result.findings if f.severity == "error"]
    if not why:
        return str(result.verdict)
    text = without_step(" ".join(why[0].message.split()))
    prefix = f"{result.path.name}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


# "; run `X`" (and what follows up to the next clause) inside a finding's message: the finding's
# own step, which the policy's may replace (a recovery log in the way, a recovery that
# salvaged nothing): a message names one step, the policy's
# (a pointer to ``agentdb check`` is no step: it stays)
_EMBEDDED_STEP = re.compile(r";\s*run `(?!agentdb check)[^`]*`[^;]*")


_ANY_STEP = re.compile(r";[^;`]*`(?!agentdb check)[^`]*`[^;]*")


def without_steps(message: str) -> str:
    """``message`` without any clause that names a command to run (a finding's own advice,
    which on a file that is not ok would be a second step beside the policy's)."""
    return _ANY_STEP.sub("", message)


def without_step(message: str) -> str:
    """``message`` without the "; run `X`" clause a finding carries its own fix in."""
    return _EMBEDDED_STEP.sub("", message)


def decide(job: Job, result: SessionCheck, *, include_damaged: bool = False) -> Decision:
    """What ``job`` may do with the file ``result`` describes."""
    v = result.verdict
    if job == "recover" and v in SOUND:
        return Skip("healthy: nothing to salvage")
    if job == "migrate" and v == OK:
        return Skip("already at the current revision")
    acts = ACTS[job]
    if job == "prune" and include_damaged:
        acts = acts | REMOVABLE_DAMAGED
    if job == "end" and v == "inconsistent":
        fix = fix_for(result)
        if fix is not None and fix.command is not None and " sessions end " in f" {fix.command}":
            return Act()
    if v in acts:
        return Act()
    fix = fix_for(result)
    problem = first_problem(result)
    step = describe(fix)
    message = problem if not step or step in problem else f"{problem}; {step}"
    return Refuse(_REFUSAL_CODE.get(v, "damaged"), message, fix)


# The job an agentdb command in a fix runs (``decide_for_command``).
_COMMAND_JOBS: dict[str, Job] = {
    "recover": "recover",
    "migrate": "migrate",
    "prune": "prune",
    "sessions end": "end",
    "restore": "restore",
}


def decide_for_command(command: str, result: SessionCheck) -> str:
    """ "act", "skip" or "refuse": what the agentdb job a fix names would do with the file
    ("act" for a shell command: agentdb does not judge it)."""
    words = command.split()
    if not words or words[0] != "agentdb":
        return "act"
    rest = " ".join(words[1:3])
    job = next((j for name, j in _COMMAND_JOBS.items() if rest.startswith(name)), None)
    if job is None:
        return "act"
    d = decide(job, result, include_damaged="--include-damaged" in words)
    return "act" if isinstance(d, Act) else "skip" if isinstance(d, Skip) else "refuse"
