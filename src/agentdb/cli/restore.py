"""``agentdb restore``: put verified backup copies back; the current file is kept."""

from __future__ import annotations

from pathlib import Path

import click

from agentdb import errors, restore
from agentdb.cli import output
from agentdb.cli.common import App, fmt_option, json_option, make_selection, session_selection
from agentdb.cli.params import DIRECTORY


def _not_empty(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    if value is not None and str(value) in ("", "."):
        raise click.BadParameter("an empty path; give the copy's file", ctx, param)
    return value


@click.command("restore")
@session_selection()
@click.option(
    "--from",
    "from_dir",
    type=DIRECTORY,
    metavar="DIR",
    help="The backup folder (written by `agentdb backup --to DIR`).",
)
@click.option(
    "--copy",
    "copy_path",
    type=click.Path(path_type=Path),
    callback=_not_empty,
    metavar="PATH",
    help="Restore this copy (one session id) instead of the newest that passes verification.",
)
@click.option("--include-pruned", is_flag=True, help="Also restore sessions that prune removed.")
@click.option("--dry-run", is_flag=True, help="Report what would be restored; change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="With explicit ids: restore over a damaged current file, or one holding events the "
    "copy lacks (they are listed; the file is kept). Never past a live session, a copy that "
    "fails verification, or a foreign or unsafe file.",
)
@json_option
@fmt_option
@click.pass_obj
def restore_cmd(
    app: App,
    ids: tuple[str, ...],
    all_: bool,
    from_dir: Path | None,
    copy_path: Path | None,
    include_pruned: bool,
    dry_run: bool,
    force: bool,
    as_json: bool,
    fmt: str,
) -> int:
    """Put verified backup copies back in place of the session files.

    Each copy is judged by check's own rules and must name the session it claims; the newest
    copy in DIR that passes (DIR/<id>.sqlite, or DIR/<id>.sqlite.<UTC timestamp>) is used,
    unless --copy names one. Refused: a live session; a current file holding events the copy
    lacks (restoring would lose them; --force restores anyway and lists them); a damaged current
    file (run recover first, or --force); a foreign or unsafe file; a session that prune removed
    (unless --include-pruned). --all restores the sessions whose file is missing, or damaged
    when every row the damaged file holds is in the copy. The current file is kept as
    <id>.sqlite.pre-restore[.N] with its -wal/-journal beside it. Every restore is logged to the
    recovery log. Exit 0: all restored or unchanged; 1: some refused or failed; 2: usage error.
    """
    sel = make_selection(ids, all_)
    bar = output.ProgressLine("restore: judging copies")
    try:
        plan = restore.plan(
            app.require_sessions_dir(),
            from_dir,
            None if sel.all else sel.ids,
            copy_path=copy_path,
            include_pruned=include_pruned,
            force=force,
            recovery_log=app.recovery_log,
            progress=bar.update,
        )
    except errors.UsageError as e:
        raise click.UsageError(str(e)) from None
    finally:
        bar.close()
    if dry_run:
        result = restore.dry_run(plan)
    else:
        bar = output.ProgressLine("restore")
        try:
            result = restore.execute(plan, progress=bar.update)
        finally:
            bar.close()
    for s in result.sessions:
        if s.outcome == "restored" and s.lost_events:
            ranges = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in s.lost_events[:5])
            output.warn(
                f"{s.path}: events only in the old file ({ranges}) are not in the restored "
                f"one; the old file is kept as {s.pre_restore_path}"
            )
    if as_json:
        output.emit_json(result.to_json())
    else:
        _show(result, fmt)
    return errors.EXIT_OK if result.ok else errors.EXIT_PROBLEMS


def _show(result: restore.RestoreResult, fmt: str) -> None:
    rows = []
    for s in result.sessions:
        if s.outcome in ("refused", "failed"):
            detail = "; ".join(f"{r['code']}: {r['message']}" for r in s.reasons)
        elif s.outcome == "restored":
            detail = f"from {s.copy}"
            if s.pre_restore_path:
                detail += f"; previous file kept as {s.pre_restore_path}"
        else:
            detail = s.notes[-1] if s.notes else ""
        rows.append((s.session_id, s.outcome, detail))
    output.emit_table(
        rows, ["session", "outcome" if not result.dry_run else "would be", "detail"], fmt
    )
    sm = result.summary()
    verb = "would be restored" if result.dry_run else "restored"
    output.note(
        f"{sm['restored']} {verb}, {sm['unchanged']} unchanged, {sm['refused']} refused, "
        f"{sm['failed']} failed"
    )
