"""The one judge: whether a session file is damaged, asked by every command.

``check`` decides; every other job asks :func:`judge` and reads the answer through the sets
below, so a rule added to ``check`` (a new finding code and the verdict it implies) applies to
every command at once. What each command does with the verdict (docs/checks.md, "One judge"):

* :data:`HEALTHY`: ``recover`` leaves the file alone; ``prune`` never refuses it as unreadable;
* :data:`DAMAGED`: ``events`` exits 1 (after printing what it read); ``migrate`` refuses it;
* :data:`READ_ERROR`: ``sessions list`` / ``show`` carry an error;
* ``corrupt``: ``backup`` refuses it (outcome ``corrupt``).

Levels (:data:`Level`): ``full`` is ``check``; ``quick`` is ``check --quick`` (quick_check, no
cross-table references, no content hashes, no scan of ``events`` for invalid text); ``open``
is what opening the file and reading its ``session_meta`` row shows (``sessions list``), with
no integrity check at all. A verdict the verdict cache recorded for the file as it is now stands
in for running the check again (:mod:`agentdb.index.checked`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentdb.checks import policy
from agentdb.checks.file import check_path
from agentdb.checks.policy import first_problem
from agentdb.results import Fix, SessionCheck, Verdict

Level = Literal["open", "quick", "full"]
# From the cheapest to the most thorough: a verdict given at a level stands in for the lower ones.
LEVELS: tuple[Level, ...] = ("open", "quick", "full")

HEALTHY = policy.SOUND
DAMAGED = policy.DAMAGED
READ_ERROR = policy.READ_ERROR


@dataclass(frozen=True)
class Judgement:
    """The judge's answer about one session file, in the shape every command uses."""

    session_id: str  # the ULID in the file name
    verdict: Verdict  # check's verdict
    level: Level  # how deep the file was judged ("full": integrity, hashes, every table)
    problem: str | None  # the first error check found, one line without the file name
    checked_at: str | None = None  # set when the verdict came from the verdict cache
    fix: Fix | None = None  # the one next step (checks.policy), None when ok or not judged now

    @property
    def healthy(self) -> bool:
        return self.verdict in HEALTHY

    @property
    def damaged(self) -> bool:
        return self.verdict in DAMAGED

    @property
    def read_error(self) -> bool:
        return self.verdict in READ_ERROR

    def describe(self) -> str:
        """One line: the verdict and why, when that verdict was recorded if it was, and the
        one next step."""
        why = f": {self.problem}" if self.problem else ""
        when = f" (recorded by `agentdb check` at {self.checked_at})" if self.checked_at else ""
        step = policy.describe(self.fix)
        then = f"; {step}" if step and step not in why else ""
        return f"check says {self.verdict}{why}{when}{then}"


def judgement_of(result: SessionCheck, level: Level) -> Judgement:
    problem = None if policy.is_ok(result.verdict) else first_problem(result)
    fix = result.fix if result.fix is not None else policy.fix_for(result)
    return Judgement(result.session_id, result.verdict, level, problem, fix=fix)


def judge(
    path: Path, session_id: str, *, level: Level = "full", recovered: bool = False
) -> SessionCheck:
    """``check``'s findings and verdict for the session file at ``path`` (named
    ``session_id``), at ``level`` ("open" is judged as "quick": there is no cheaper check).
    ``recovered``: the recovery log records a salvage of it (its orphan rows are expected)."""
    return check_path(path, session_id, quick=level != "full", recovered=recovered)
