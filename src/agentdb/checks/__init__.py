"""``agentdb check``: findings for session files, one file or a whole directory. No printing.

* :func:`judge`: the one judge every command asks (:mod:`agentdb.checks.judge`: levels, and the
  verdict sets that say what a verdict means for each command).
* :func:`check_path` / :func:`check_file`: one file, pure (returns a :class:`SessionCheck`).
* :func:`check_directory_extras`: orphan sidecars, job leftovers, ``.corrupt`` siblings.
* :func:`check_sessions`: many files, in parallel processes, results in session-id order.
"""

from agentdb.checks.codes import CODES, verdict_of
from agentdb.checks.file import check_path
from agentdb.checks.judge import (
    DAMAGED,
    HEALTHY,
    READ_ERROR,
    Judgement,
    Level,
    first_problem,
    judge,
    judgement_of,
)
from agentdb.checks.run import check_directory_extras, check_file, check_sessions, was_recovered

__all__ = [
    "CODES",
    "DAMAGED",
    "HEALTHY",
    "READ_ERROR",
    "Judgement",
    "Level",
    "check_directory_extras",
    "check_file",
    "check_path",
    "check_sessions",
    "first_problem",
    "judge",
    "judgement_of",
    "verdict_of",
    "was_recovered",
]
