"""``agentdb check``: findings for session files, one file or a whole directory. No printing.

* :func:`check_path` / :func:`check_file`: one file, pure (returns a :class:`SessionCheck`).
* :func:`check_directory_extras`: orphan sidecars, job leftovers, ``.corrupt`` siblings.
* :func:`check_sessions`: many files, in parallel processes, results in session-id order.
"""

from agentdb.checks.codes import CODES, verdict_of
from agentdb.checks.file import check_path
from agentdb.checks.run import check_directory_extras, check_file, check_sessions

__all__ = [
    "CODES",
    "check_directory_extras",
    "check_file",
    "check_path",
    "check_sessions",
    "verdict_of",
]
