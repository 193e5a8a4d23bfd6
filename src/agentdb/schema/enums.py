"""The spec's enumerations (state-backend spec, CONTRACT.md "File identity and revisions")."""

from __future__ import annotations

KINDS: tuple[str, ...] = (
    "message",
    "tool_call",
    "tool_result",
    "plan",
    "apply",
    "context_contribution",
    "memory_write",
    "memory_update",
    "memory_delete",
    "hook_error",
)
KIND_UNSPECIFIED = "KIND_UNSPECIFIED"  # the zero value: never valid on a persisted event

PLUGIN_CATEGORIES: tuple[str, ...] = (
    "model",
    "tool",
    "context",
    "memory",
    "frontend",
    "widget",
    "slashcommand",
)
KERNEL = "kernel"  # the reserved kernel producer (writes plan and apply); never a plugin
PRODUCER_CATEGORIES: tuple[str, ...] = (*PLUGIN_CATEGORIES, KERNEL)

STATUSES: tuple[str, ...] = (
    "running",
    "completed",
    "error_max_turns",
    "error_max_budget_usd",
    "error_max_wall_clock",
    "cancelled",
    "failed",
)
RUNNING = "running"
# Terminal and replay-only: never re-opened to running.
TERMINAL_STATUSES: frozenset[str] = frozenset(
    {"error_max_turns", "error_max_budget_usd", "error_max_wall_clock", "failed"}
)
# May transition back to running (ResumeSession).
REOPENABLE_STATUSES: frozenset[str] = frozenset({"completed", "cancelled"})

DECISIONS: tuple[str, ...] = ("allow", "ask", "deny")
EVENT_V1_SCHEMA_VERSIONS: tuple[str, ...] = ("1", "v1")


def sql_in(values: tuple[str, ...]) -> str:
    """``'a','b','c'`` for an IN list (the values are our own constants, never user input)."""
    return ",".join(f"'{v}'" for v in values)
