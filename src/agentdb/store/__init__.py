"""The kernel's writer and reader API over one session file.

:class:`SessionWriter` is what the kernel uses: create a session, emit events (one at a time or
as a batch in one transaction), move its status. Every write validates first and then runs in
one ``BEGIN IMMEDIATE`` transaction, so invalid input raises and writes nothing.

:class:`SessionReader` is what tools use: a read-only open that never creates or migrates and
reads through bounded pages (rows per page, bytes per value).
"""

from agentdb.schema.migrations import create_schema
from agentdb.store.model import (
    KERNEL_PRODUCER_NAME,
    Event,
    EventRow,
    JudgeHook,
    Page,
    PlanItem,
    PlanItemRow,
    Producer,
    ProducerRow,
    RecoverHook,
    SessionInfo,
    Usage,
    new_session_id,
    now_timestamp,
    validate_event,
    validate_transition,
)
from agentdb.store.reader import DEFAULT_PAGE_ROWS, DEFAULT_PAYLOAD_CAP, MAX_TEXT, SessionReader
from agentdb.store.writer import SessionWriter

__all__ = [
    "DEFAULT_PAGE_ROWS",
    "DEFAULT_PAYLOAD_CAP",
    "KERNEL_PRODUCER_NAME",
    "MAX_TEXT",
    "Event",
    "EventRow",
    "JudgeHook",
    "Page",
    "PlanItem",
    "PlanItemRow",
    "Producer",
    "ProducerRow",
    "RecoverHook",
    "SessionInfo",
    "SessionReader",
    "SessionWriter",
    "Usage",
    "create_schema",
    "new_session_id",
    "now_timestamp",
    "validate_event",
    "validate_transition",
]
