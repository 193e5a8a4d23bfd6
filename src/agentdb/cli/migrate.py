"""``agentdb migrate``: bring sessions to the current schema revision."""

from __future__ import annotations

import click

from agentdb.cli import output
from agentdb.cli.common import (
    App,
    default_jobs,
    finish,
    fmt_option,
    jobs_option,
    json_option,
    make_selection,
    session_selection,
    wait_option,
)
from agentdb.jobs import migrate

_SUMMARY = (
    ("migrated", "migrated"),
    ("current", "current"),
    ("too_new", "too new"),
    ("corrupt", "corrupt"),
    ("skipped_live", "skipped"),
    ("failed", "failed"),
    ("foreign", "foreign"),
)


@click.command("migrate")
@session_selection()
@click.option(
    "--dry-run", is_flag=True, help="Probe and report what would be done; change nothing."
)
@wait_option(
    "Also migrate sessions another process has open, waiting at most SECONDS for the "
    "write lock (without it they are skipped as skipped_live)."
)
@click.option(
    "--keep-backups",
    is_flag=True,
    help="Keep each pre-migration copy beside its session as <id>.sqlite.rev<N>.bak.",
)
@jobs_option("Migrate sessions")
@json_option
@fmt_option
@click.pass_obj
def migrate_cmd(
    app: App,
    ids: tuple[str, ...],
    all_: bool,
    dry_run: bool,
    wait: float | None,
    keep_backups: bool,
    jobs: int | None,
    as_json: bool,
    fmt: str,
) -> int:
    """Bring sessions to the current schema revision, ahead of the kernel's first open.

    Per file: a read-only probe (identity, revision, integrity_check); an online backup beside
    it (<id>.sqlite.agentdb-migrate-backup); every migration step in one transaction with
    foreign_key_check and integrity_check before COMMIT; a check of the committed file; then
    the backup is removed (or kept with --keep-backups). Corrupt files are reported with the
    `agentdb recover` hint, newer and foreign files are left untouched, sessions another process
    has open are skipped unless --wait. Killed at any point, a file is at the old revision or the
    new one; run the command again to finish.

    Exit status 1 when any session is not migrated or current; 130 after Ctrl-C, with the
    sessions done before it reported.
    """
    selection = make_selection(ids, all_)
    sessions_dir = app.require_sessions_dir()
    bar = output.ProgressLine("migrate")
    try:
        report = migrate.migrate_sessions(
            sessions_dir,
            None if selection.all else list(selection.ids),
            dry_run=dry_run,
            wait=wait,
            keep_backups=keep_backups,
            progress=bar.session,
            jobs=jobs or default_jobs(),
        )
    finally:
        bar.close()
    if as_json:
        output.emit_json({**report.to_json(), "interrupted": report.interrupted})
    else:
        verb = "would migrate" if dry_run else "migrated"
        output.emit_table(
            [
                (
                    s.session_id,
                    "" if s.from_ is None else s.from_,
                    "" if s.to is None else s.to,
                    verb if s.outcome == "migrated" else s.outcome,
                    s.message,
                )
                for s in report.sessions
            ],
            ["session", "from", "to", "outcome", "detail"],
            fmt,
        )
        counts = report.summary()
        output.emit_text("")
        output.emit_table(
            [[counts[k] for k, _ in _SUMMARY]],
            [verb if k == "migrated" else label for k, label in _SUMMARY],
            fmt,
        )
        if not report.sessions and not report.interrupted:
            output.note("no sessions")
    return finish(report.ok, report.interrupted, len(report.sessions), "done")
