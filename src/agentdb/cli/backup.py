"""``agentdb backup``: consistent online copies; ``--verify`` checks a backup folder."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from agentdb import errors
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
)
from agentdb.cli.params import DIRECTORY, OUTPUT_DIR
from agentdb.jobs import backup


@click.command("backup")
@session_selection()
@click.option(
    "--to",
    "dest",
    type=OUTPUT_DIR,
    metavar="DIR",
    help="Write DIR/<id>.sqlite (DIR created 0700 if missing); rerun to bring it up to date.",
)
@click.option(
    "--verify",
    "verify",
    type=DIRECTORY,
    metavar="DIR",
    help="Check the copies in DIR (timestamped ones too) with the rules of `agentdb check`.",
)
@jobs_option("Copy sessions")
@json_option
@fmt_option
@click.pass_obj
def backup_cmd(
    app: App,
    ids: tuple[str, ...],
    all_: bool,
    dest: Path | None,
    verify: Path | None,
    jobs: int | None,
    as_json: bool,
    fmt: str,
) -> int:
    """Copy sessions consistently, even while the kernel is writing them; run it again and
    again into the same folder.

    Each session is snapshotted through SQLite's backup API in one pass (the writer goes on
    meanwhile) into a temporary file, verified with `agentdb check`'s rules, fsynced, then:
    `copied` (DIR/<id>.sqlite is new), `unchanged` (the copy already holds the same rows),
    `updated` (the session grew: the copy is replaced atomically by the verified superset;
    never by one that holds less), or `kept` (the session lost rows the copy has, e.g. it was
    recovered with losses: the copy stays and the current state goes beside it as
    DIR/<id>.sqlite.<UTC timestamp>; a revision-3 session whose chain is a proper prefix of the
    copy's lost its last events consistently: the copy stays, nothing is written beside it, and
    the message names the events and `agentdb restore`). Revision-3 files are compared by their
    chain heads once both prove, else row by row. A copy that fails verification is renamed
    DIR/<id>.sqlite.corrupt[.N], never deleted, and a fresh one written. A damaged session is
    `corrupt` and changes nothing in DIR. Copies are single files in rollback-journal mode.
    Concurrent runs into one DIR take turns per session.

    The table leaves out `unchanged` sessions (-v lists them); the summary counts them.
    Exit status 1 when any session was not backed up (corrupt, foreign, failed) or, with
    --verify, any copy is not ok; 130 after Ctrl-C, with the sessions done before it reported.
    """
    if verify is not None:
        if ids or all_ or dest is not None:
            raise click.UsageError("--verify DIR takes no session ids, --all or --to")
        vreport = backup.verify_dir(verify, app.recovery_log)
        if as_json:
            output.emit_json(vreport.to_json())
        else:
            output.emit_table(
                [
                    (s.path.name, s.verdict, "; ".join(f.message for f in s.findings))
                    for s in vreport.sessions
                ],
                ["copy", "verdict", "findings"],
                fmt,
            )
            if not vreport.sessions:
                output.note(f"{verify}: no backups (<id>.sqlite files) in it")
        return 0 if vreport.ok else 1
    if dest is None:
        raise click.UsageError("give --to DIR (or --verify DIR)")
    selection = make_selection(ids, all_)
    sessions_dir = app.require_sessions_dir()
    if _inside(dest, sessions_dir):
        raise errors.UsageError(
            f"{dest}: inside the sessions directory {sessions_dir}; give a --to outside it"
        )
    bar = output.ProgressLine("backup")
    began = time.monotonic()
    try:
        report = backup.backup_sessions(
            sessions_dir,
            None if selection.all else list(selection.ids),
            dest,
            recovery_log=app.recovery_log,
            progress=bar.session,
            jobs=jobs or default_jobs(),
        )
    finally:
        bar.close()
    wall = time.monotonic() - began  # workers copy in parallel: their times overlap
    if as_json:
        output.emit_json(
            {**report.to_json(), "interrupted": report.interrupted, "wall_seconds": round(wall, 6)}
        )
    else:
        output.emit_table(
            [
                (
                    s.session_id,
                    s.outcome,
                    output.human_bytes(s.bytes) if s.bytes else "",
                    f"{s.seconds:.3f}s",
                    s.message,
                )
                for s in report.sessions
                if s.outcome != "unchanged" or s.message or output.verbose()
            ],
            ["session", "outcome", "written", "time", "detail"],
            fmt,
        )
        sm = report.summary()
        secs = wall
        rate = sm["bytes"] / secs / 1e6 if secs > 0 else 0.0
        output.note(
            f"{sm['copied']} copied, {sm['updated']} updated, {sm['unchanged']} unchanged, "
            f"{sm['kept']} kept, {sm['corrupt'] + sm['foreign'] + sm['failed']} not backed up "
            f"({output.human_bytes(sm['bytes'])} written in {secs:.2f}s, {rate:.1f} MB/s), "
            f"into {dest}"
        )
        for s in report.sessions:
            if s.outcome == "kept" and s.lost:
                output.note(
                    f"{s.session_id}: the session no longer has {s.lost} that {s.path} holds; "
                    "that copy is kept"
                )
    return finish(report.ok, report.interrupted, len(report.sessions), "copied or judged")


def _inside(dest: Path, sessions_dir: Path) -> bool:
    """True when ``dest`` is the sessions directory or lies under it (symlinks resolved)."""
    try:
        d, s = dest.resolve(), sessions_dir.resolve()
    except (OSError, RuntimeError):  # a loop or an unreadable component: compare as written
        d, s = Path(os.path.abspath(dest)), Path(os.path.abspath(sessions_dir))
    return d == s or s in d.parents
