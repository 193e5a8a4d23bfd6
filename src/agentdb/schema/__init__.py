"""Schema revisions, file identity and the migration ladder."""

from agentdb.schema.revisions import APPLICATION_ID, COLUMNS, CURRENT_REVISION, DDL, TABLES

__all__ = ["APPLICATION_ID", "COLUMNS", "CURRENT_REVISION", "DDL", "TABLES"]
