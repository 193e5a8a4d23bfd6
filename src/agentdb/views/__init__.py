"""Read-only views across sessions: list/show/tree, the event log, status, the report."""
