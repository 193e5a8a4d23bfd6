"""Operator-triggered pruning: ``plan`` decides (read-only), ``execute`` removes (crash-safe).

Sessions are kept forever by default; nothing is deleted on a timer. A prune run removes only
sessions the operator selects, and refuses those that must stay: running, live, pinned by a
cached plugin version, parent of a session that stays, or unreadable. See ``docs/prune.md``.
"""

from agentdb.prune.decisions import PruneDecision, PrunePlan, Reason, VersionUse
from agentdb.prune.execution import PruneResult, dry_run, execute
from agentdb.prune.planning import plan
from agentdb.prune.selection import Selectors

__all__ = [
    "PruneDecision",
    "PrunePlan",
    "PruneResult",
    "Reason",
    "Selectors",
    "VersionUse",
    "dry_run",
    "execute",
    "plan",
]
