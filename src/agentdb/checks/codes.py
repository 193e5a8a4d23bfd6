"""Every finding code, the severity it carries and the verdict it implies, in one table.

A code whose verdict is None is informational or a warning: it never makes a file non-ok.
"""

from __future__ import annotations

from agentdb.results import OK, VERDICTS, Finding, Problem, Severity, Verdict

# code: (severity, verdict implied or None)
CODES: dict[str, tuple[Severity, Problem | None]] = {
    # the entry itself
    "missing": ("error", "unreadable"),  # an id asked for has no file
    "symlink": ("error", "insecure"),  # a symbolic link where a session file should be
    "not_regular": ("error", "unreadable"),  # a directory, FIFO or device
    "insecure_mode": ("error", "insecure"),  # group/other can write the db or a sidecar
    "insecure_owner": ("error", "insecure"),  # another user owns the db or a sidecar
    "insecure_sidecar": ("error", "insecure"),  # a sidecar that is not a regular file
    "not_opened": ("info", None),  # the file was not opened (it is insecure), so not checked
    "readable_by_others": ("warning", None),  # group/other can read the db or a sidecar
    "hard_linked": ("warning", None),  # the db has another name (st_nlink > 1)
    # identity
    "not_a_database": ("error", "unreadable"),  # SQLite cannot read it as a database
    "empty_database": ("error", "unreadable"),  # a database with no tables at all
    "unreadable": ("error", "unreadable"),  # an I/O or other SQLite error while opening
    "foreign": ("error", "foreign"),  # another application id, or user_version 0 with tables
    "too_new": ("error", "too_new"),  # user_version newer than this build knows
    "needs_migration": ("warning", "needs_migration"),  # an older revision
    "application_id_zero": ("info", None),  # written by another conforming writer
    "unsafe_schema": ("error", "unsafe_schema"),  # triggers or views
    # integrity
    "integrity": ("error", "corrupt"),  # integrity_check / quick_check lines
    "read_error": ("error", "corrupt"),  # SQLite reported corruption while reading
    "content_hash_mismatch": ("error", "corrupt"),  # stored hash does not match the row
    "invalid_text": ("error", "corrupt"),  # a TEXT value that is not valid UTF-8
    "text_encoding": ("error", "corrupt"),  # a UTF-16 database: TEXT is not stored as UTF-8
    "wal_bad_header": ("error", "corrupt"),
    "wal_checksum_break": ("error", "corrupt"),
    "wal_frames_after_break": ("error", "corrupt"),
    "wal_unreadable": ("error", "unreadable"),
    "foreign_wal": ("error", "corrupt"),  # the WAL is another database's (on evidence)
    "hot_journal": ("info", None),  # a hot rollback journal: judged as rolled back
    "foreign_journal": ("error", "corrupt"),  # a hot journal that is not this database's
    "wal_torn_tail": ("info", None),  # normal after a crash: SQLite ignores the torn frames
    "wal_stale_frames": ("info", None),  # left over from before a WAL restart
    "wal_not_judged": ("info", None),  # the session is open: its WAL is being written
    # revision 3: the chain walk (docs/design/damage-evident-revision.md §7; checks/chainproof.py)
    "row_hash_mismatch": ("error", "corrupt"),  # a cost_ledger/plan_items/producers row's hash
    "chain_break": ("error", "corrupt"),  # a break in the chain no gap record explains
    "chain_gap_recorded": ("info", None),  # a break an earlier recovery recorded: history lost
    "head_mismatch": ("error", "corrupt"),  # tail cut, head damaged, missing or passed
    "count_mismatch": ("error", "corrupt"),  # a table's row count is not the head's
    "meta_hash_mismatch": ("error", "corrupt"),  # session_meta is not the row the head hashed
    "gap_record_damaged": ("error", "corrupt"),  # a chain_gaps row altered, deleted or added
    "unbound_rows": ("error", "corrupt"),  # derived rows of no event, outside recorded gaps
    # schema and consistency
    "schema_mismatch": ("error", "inconsistent"),
    # a table or column the revision names is not in the schema: damaged CREATE text (a conforming
    # writer never drops one), so no reader finds the rows where the revision puts them
    "schema_columns_missing": ("error", "corrupt"),
    "meta_missing": ("error", "inconsistent"),
    "meta_multiple": ("error", "inconsistent"),
    "meta_id_mismatch": ("error", "foreign"),  # session_meta names another session: its file
    #                                           under this name (copied or renamed), not damage
    "meta_id_invalid": ("error", "inconsistent"),  # session_meta.session_id is no session id
    "bad_status": ("error", "inconsistent"),
    "ended_at_inconsistent": ("error", "inconsistent"),
    "bad_parent_id": ("error", "inconsistent"),
    "bad_depth": ("error", "inconsistent"),
    "depth_mismatch": ("warning", None),  # depth is not the (readable) parent's depth + 1
    "bad_kind": ("error", "inconsistent"),
    "bad_producer_category": ("error", "inconsistent"),
    "bad_decision": ("error", "inconsistent"),
    "missing_event": ("error", "inconsistent"),  # a row points at an event that does not exist
    "orphan_of_recovery": ("info", None),  # same, in a file the recovery log says was salvaged
    #                                        (revision 3: inside a recorded events/tail gap)
    "ledger_not_message": ("error", "inconsistent"),
    "plan_item_not_plan": ("error", "inconsistent"),
    "producer_mismatch": ("error", "inconsistent"),  # first-seen event has another producer
    "producer_unlisted": ("error", "inconsistent"),  # events by a producer not in producers
    # what agentdb's writer refuses to write, found in another writer's file
    "kernel_kind_mismatch": ("warning", None),  # plan/apply not by the kernel producer, or
    #                                             another kind by it
    "message_without_cost": ("warning", None),  # a message event with no cost_ledger row
    # liveness and history
    "live": ("info", None),  # another process has the file open
    "interrupted": ("warning", None),  # status running, and no process has it open
    "unstable": ("info", None),  # the file changed while it was checked; checked again
    "recovered_earlier": ("info", None),  # a .corrupt sibling: recovered before
    "recovery_unreadable": ("warning", None),  # the last recovery attempt salvaged nothing
    "job_leftover": ("warning", None),  # a file an interrupted agentdb job left
    "orphan_sidecar": ("warning", None),  # a -wal/-shm/-journal with no database
    "recovery_log_unreadable": ("error", None),  # a symlink, FIFO, ... in the log's place
}

_RANK = {v: i for i, v in enumerate(VERDICTS)}


def finding(code: str, message: str, fix: str | None = None) -> Finding:
    severity, _ = CODES[code]
    return Finding(code, message, severity, fix)


def verdict_of(findings: list[Finding]) -> Verdict:
    """The first verdict in the contract's order that any finding implies; "ok" if none."""
    implied = [CODES[f.code][1] for f in findings if f.code in CODES]
    ranked = sorted((_RANK[v], v) for v in implied if v is not None)
    return ranked[0][1] if ranked else OK
