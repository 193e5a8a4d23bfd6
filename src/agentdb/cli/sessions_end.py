"""``agentdb sessions end``: end sessions whose kernel died (only when nothing holds the file)."""

from __future__ import annotations

import click

from agentdb import errors
from agentdb.cli import output
from agentdb.cli.common import SESSION_ID, App, fmt_option, json_option
from agentdb.jobs import ending


@click.command("end")
@click.argument("ids", nargs=-1, required=True, type=SESSION_ID)
@click.option(
    "--status",
    type=click.Choice(ending.END_STATUSES),
    default="cancelled",
    show_default=True,
    help="cancelled: a kernel may resume the session later. failed: terminal, it can never be "
    "resumed.",
)
@click.option("--dry-run", is_flag=True, help="Report what would be ended; change nothing.")
@json_option
@fmt_option
@click.pass_obj
def end_cmd(
    app: App, ids: tuple[str, ...], status: str, dry_run: bool, as_json: bool, fmt: str
) -> int:
    """End running sessions whose kernel died: set the status (default cancelled) and ended_at.

    Acts only when no process has the file open (SQLite locks, the kernel's lease), while
    holding it so no kernel can open it meanwhile, and writes with the kernel's own status
    rules; each change is logged to the recovery log. Refused, with the fix: a live session, a
    damaged file (run recover), an older revision (run migrate), a foreign or unsafe file, a
    file with more than one name (hard link), a session that is not running. Nothing is ever
    migrated or recovered as a side effect. A cancelled session can be resumed by a kernel;
    a failed one never can. Exit 0: all ended (or already ended so); 1: some refused or failed.
    """
    try:
        plan = ending.plan(app.require_sessions_dir(), ids, status, recovery_log=app.recovery_log)
    except errors.UsageError as e:
        raise click.UsageError(str(e)) from None
    result = ending.dry_run(plan) if dry_run else ending.execute(plan)
    if as_json:
        output.emit_json(result.to_json())
    else:
        rows = [
            (
                s.session_id,
                s.outcome,
                s.status_before or "",
                s.status or "",
                f"{s.reason}: {s.message}" if s.reason else s.message,
            )
            for s in result.sessions
        ]
        head = "would be" if dry_run else "outcome"
        output.emit_table(rows, ["session", head, "was", "status", "detail"], fmt)
        sm = result.summary()
        output.note(
            f"{sm['ended']} {'would be ' if dry_run else ''}ended, {sm['unchanged']} unchanged, "
            f"{sm['refused']} refused, {sm['failed']} failed"
        )
    return errors.EXIT_OK if result.ok else errors.EXIT_PROBLEMS
