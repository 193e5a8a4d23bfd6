"""``agentdb check``: verify session files, safely beside a live kernel."""

from __future__ import annotations

import click

from agentdb.checked import RecordedStream, changed_ids
from agentdb.checks import policy
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
from agentdb.results import SessionCheck


def _first(s: SessionCheck) -> str:
    ranked = sorted(s.findings, key=lambda f: ("error", "warning", "info").index(f.severity))
    if not ranked:
        return ""
    text = ranked[0].message
    prefix = s.path.name + ": "
    text = text[len(prefix) :] if text.startswith(prefix) else text
    fix = s.fix
    if fix is None or ranked[0].severity != "error" or (fix.command and fix.command in text):
        return text
    # the one next step is the policy's (as --json's "fix"), not the finding's own
    step = f"run `{fix.command}`" if fix.command else fix.why
    return f"{policy.without_step(text)}; {step}"


def _size(n: int | None) -> str:
    return "" if n is None else output.human_bytes(n)


def render(run: RecordedStream, fmt: str, *, problems: bool = False) -> None:
    """The sessions table, drawn while the results stream in, then the directory findings and
    the summary line."""
    output.emit_table(
        (
            (
                s.session_id,
                s.status or "",
                "" if s.revision is None else s.revision,
                _size(s.size),
                s.verdict + (" (live)" if s.live is not None else ""),
                _first(s),
            )
            for s in run
            if not (problems and s.ok)
        ),
        ["session", "status", "rev", "size", "verdict", "first finding"],
        fmt,
    )
    stream = run.stream
    if stream.directory:
        output.emit_text("")
        output.emit_table(
            [(d.path.name, d.finding.code, d.finding.message) for d in stream.directory],
            ["entry", "finding", "message"],
            fmt,
        )
    s = stream.summary
    verdicts = ", ".join(f"{n} {v}" for v, n in s["verdicts"].items() if v != "ok")
    output.note(
        f"{s['checked']} sessions checked{' (quick)' if stream.quick else ''}: {s['ok']} ok"
        + (f", {verdicts}" if verdicts else "")
        + (f"; {s['live']} open right now" if s["live"] else "")
        + (f"; {len(stream.directory)} directory findings" if stream.directory else "")
        + ("; INTERRUPTED, partial report" if stream.interrupted else "")
    )


@click.command("check")
@session_selection(required=False)
@click.option(
    "--quick",
    is_flag=True,
    help="PRAGMA quick_check instead of integrity_check; skip cross-table references and "
    "content hashes. A revision-3 file's chain is proven at its tail only (the head, the last "
    "event and its rows, the row counts, session_meta's hash).",
)
@click.option(
    "--problems",
    is_flag=True,
    help="Show only what is not ok (sessions whose verdict is not ok); the summary still "
    "counts every session checked.",
)
@click.option(
    "--changed",
    is_flag=True,
    help="Only sessions with no recorded ok verdict (from a full check, unless --quick), or "
    "whose file changed since it. Bit rot changes no file identity: run a full check too.",
)
@jobs_option("Check files")
@json_option
@fmt_option
@click.pass_obj
def check_cmd(
    app: App,
    ids: tuple[str, ...],
    all_: bool,
    quick: bool,
    problems: bool,
    changed: bool,
    jobs: int | None,
    as_json: bool,
    fmt: str,
) -> int:
    """Verify session files: type, owner and mode, identity, integrity, schema, consistency,
    content hashes and WAL, and report each session's verdict.

    With no ID (or with --all) every <ULID>.sqlite entry is checked, including ones that cannot
    be opened. Read-only: it never blocks or disturbs a live writer, never changes a byte or a
    mode, and a session open right now is shown as live with its WAL left unjudged.

    Verdicts, most serious first: insecure, foreign, too_new, unsafe_schema, unreadable,
    corrupt, inconsistent, needs_migration; ok otherwise. Each finding names the fix. Exit 0
    when every session is ok, 1 when any is not, 130 when Ctrl-C cut the run short (the
    report then covers the sessions checked before it).

    Each verdict is also recorded, with the file's identity, in the verdict cache under
    $XDG_CACHE_HOME/agentdb/ (derived data: delete it any time), which `agentdb status` and
    `check --changed` read.
    """
    if changed and (ids or all_):
        raise click.UsageError("--changed picks the sessions itself: give no ids and no --all")
    selection = make_selection(ids, all_, required=False)
    sessions_dir = app.require_sessions_dir()
    if changed:
        picked, total = changed_ids(sessions_dir, quick=quick)
        output.note(
            f"{len(picked)} of {total} sessions have no recorded ok or changed since; "
            "checking those"
        )
        chosen: tuple[str, ...] | None = tuple(picked)
    else:
        chosen = None if selection.all else selection.ids
    bar = output.ProgressLine("checking")
    run = RecordedStream(
        sessions_dir,
        chosen,
        quick=quick,
        jobs=jobs or default_jobs(),
        progress=bar,
        recovery_log=app.recovery_log,
    )
    try:
        if as_json:
            output.emit_json_stream(
                {
                    "version": 1,
                    "sessions": (s for s in run if not (problems and s.ok)),
                    "directory": [
                        {"path": d.path, "session_id": d.session_id, **output.jsonable(d.finding)}
                        for d in run.stream.directory
                    ],
                    "summary": output.Later(lambda: run.stream.summary),
                }
            )
        else:
            render(run, fmt, problems=problems)
    finally:
        bar.close()
    if not run.recorded:
        output.note(
            "note: the verdict cache could not be written; `agentdb status` will not see this run"
        )
    stream = run.stream
    return finish(stream.ok, stream.interrupted, stream.checked, "checked")
