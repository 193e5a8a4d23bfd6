"""The spec's enumerations (state-backend spec, CONTRACT.md "File identity and revisions")."""

from __future__ import annotations

from typing import Final, Literal, get_args

# Each enumeration is a ``Literal`` type (so ``Event("mesage", ...)`` or
# ``set_status("complete")`` fails type checking) and the tuple of its values, in the spec's
# order (the writer still checks at run time: callers need not be type-checked).

Kind = Literal[
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
]
KINDS: tuple[Kind, ...] = get_args(Kind)
KIND_UNSPECIFIED = "KIND_UNSPECIFIED"  # the zero value: never valid on a persisted event

PluginCategory = Literal[
    "model",
    "tool",
    "context",
    "memory",
    "frontend",
    "widget",
    "slashcommand",
]
PLUGIN_CATEGORIES: tuple[PluginCategory, ...] = get_args(PluginCategory)
# The reserved kernel producer (writes plan and apply); never a plugin.
KERNEL: Final = "kernel"
ProducerCategory = Literal[PluginCategory, "kernel"]
PRODUCER_CATEGORIES: tuple[ProducerCategory, ...] = (*PLUGIN_CATEGORIES, KERNEL)

Status = Literal[
    "running",
    "completed",
    "error_max_turns",
    "error_max_budget_usd",
    "error_max_wall_clock",
    "cancelled",
    "failed",
]
STATUSES: tuple[Status, ...] = get_args(Status)
RUNNING: Final = "running"
# Terminal and replay-only: never re-opened to running.
TERMINAL_STATUSES: frozenset[Status] = frozenset(
    {"error_max_turns", "error_max_budget_usd", "error_max_wall_clock", "failed"}
)
# May transition back to running (ResumeSession).
REOPENABLE_STATUSES: frozenset[Status] = frozenset({"completed", "cancelled"})

Decision = Literal["allow", "ask", "deny"]
DECISIONS: tuple[Decision, ...] = get_args(Decision)
SchemaVersion = Literal["1", "v1"]
EVENT_V1_SCHEMA_VERSIONS: tuple[SchemaVersion, ...] = get_args(SchemaVersion)


def sql_in(values: tuple[str, ...]) -> str:
    """``'a','b','c'`` for an IN list (the values are our own constants, never user input)."""
    return ",".join(f"'{v}'" for v in values)
