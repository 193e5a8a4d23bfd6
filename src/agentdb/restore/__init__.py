"""Restore sessions from backup copies: ``plan`` decides (read-only), ``execute`` swaps
(crash-safe). The current file is never lost: it is kept as ``<id>.sqlite.pre-restore[.N]``.
See ``docs/restore.md``.
"""

from agentdb.restore.execution import (
    OUTCOMES,
    VERSION,
    RestoreOutcome,
    RestoreResult,
    dry_run,
    execute,
)
from agentdb.restore.planning import Reason, RestoreDecision, RestorePlan, plan

__all__ = [
    "OUTCOMES",
    "VERSION",
    "Reason",
    "RestoreDecision",
    "RestoreOutcome",
    "RestorePlan",
    "RestoreResult",
    "dry_run",
    "execute",
    "plan",
]
