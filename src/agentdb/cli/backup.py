"""``agentdb backup``: consistent online copies; ``--verify`` checks a backup folder."""

from __future__ import annotations

from pathlib import Path

import click

from agentdb import backup
from agentdb.cli import output
from agentdb.cli.common import App, fmt_option, json_option, make_selection, session_selection


@click.command("backup")
@session_selection()
@click.option(
    "--to",
    "dest",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="Write DIR/<id>.sqlite (DIR is created 0700 if missing; existing files are kept).",
)
@click.option(
    "--verify",
    "verify",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="Check the backups in DIR with the rules of `agentdb check` instead of copying.",
)
@json_option
@fmt_option
@click.pass_obj
def backup_cmd(
    app: App,
    ids: tuple[str, ...],
    all_: bool,
    dest: Path | None,
    verify: Path | None,
    as_json: bool,
    fmt: str,
) -> int:
    """Copy sessions consistently, even while the kernel is writing them.

    Each copy is a transaction-consistent snapshot taken through SQLite's backup API in one
    pass (the writer goes on meanwhile), written 0600 under a temporary name, checked with
    integrity_check, fsynced and renamed to DIR/<id>.sqlite. An existing DIR/<id>.sqlite is
    never overwritten (outcome `exists`). Copies are single files in rollback-journal mode.

    Exit status 1 when any session was not copied (or, with --verify, any backup is not ok).
    """
    if verify is not None:
        if ids or all_ or dest is not None:
            raise click.UsageError("--verify DIR takes no session ids, --all or --to")
        vreport = backup.verify_dir(verify, app.recovery_log)
        if as_json:
            output.emit_json(vreport.as_json())
        else:
            output.emit_table(
                [
                    (s.session_id, s.verdict, "; ".join(f.message for f in s.findings))
                    for s in vreport.sessions
                ],
                ["backup", "verdict", "findings"],
                fmt,
            )
            if not vreport.sessions:
                output.note(f"{verify}: no backups (<id>.sqlite files) in it")
        return 0 if vreport.ok else 1
    if dest is None:
        raise click.UsageError("give --to DIR (or --verify DIR)")
    selection = make_selection(ids, all_)
    sessions_dir = app.require_sessions_dir()
    bar = output.ProgressLine("backup")
    try:
        report = backup.backup_sessions(
            sessions_dir,
            None if selection.all else list(selection.ids),
            dest,
            progress=bar.session,
        )
    finally:
        bar.close()
    if as_json:
        output.emit_json(report.as_json())
    else:
        output.emit_table(
            [
                (
                    s.session_id,
                    s.outcome,
                    output.human_bytes(s.bytes) if s.outcome == "copied" else "",
                    f"{s.seconds:.3f}s",
                    s.message,
                )
                for s in report.sessions
            ],
            ["session", "outcome", "size", "time", "detail"],
            fmt,
        )
        sm = report.summary()
        secs = sm["seconds"]
        rate = sm["bytes"] / secs / 1e6 if secs > 0 else 0.0
        output.note(
            f"{sm['copied']} copied ({output.human_bytes(sm['bytes'])} in {secs:.2f}s, "
            f"{rate:.1f} MB/s), {sm['exists']} already there, "
            f"{sm['corrupt'] + sm['foreign'] + sm['failed']} not copied, into {dest}"
        )
    return 0 if report.ok else 1
