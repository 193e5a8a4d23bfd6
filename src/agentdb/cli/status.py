"""``agentdb status``: one screen — counts, what needs doing, and the next commands to run."""

from __future__ import annotations

import click

from agentdb import errors
from agentdb.cli import output
from agentdb.cli.common import App, default_jobs, jobs_option, json_option, no_index_option
from agentdb.cli.params import TABLE_FORMAT
from agentdb.views import status as status_job


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "never"
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds // n}{unit} ago"
    return f"{seconds}s ago"


def _known(n: int, s: status_job.StatusSummary) -> str:
    """A count of what check finds, honest about the sessions no check has judged as they are
    (only files that cannot be opened at all are counted without one)."""
    pending = s.changed_since_check + s.never_checked
    if not pending:
        return str(n)
    if not s.checked:
        return f"not yet checked ({n} found unreadable; run `agentdb check`)"
    return f"{n} known; {pending} not yet checked"


def document(report: status_job.StatusReport) -> dict[str, object]:
    """The JSON document (``"version"`` counts changes of meaning, not added fields)."""
    return {
        "version": status_job.VERSION,
        "sessions_dir": report.sessions_dir,
        "generated_at": report.generated_at,
        "summary": report.summary,
        "by_status": report.by_status,
        "by_verdict": report.by_verdict,
        "interrupted": report.interrupted,
        "needs_migration": report.needs_migration,
        "damaged": report.damaged,
        "refused": report.refused,
        "unchecked": report.unchecked,
        "pinned": report.pinned,
        "recoveries": report.recoveries,
        "next": report.next,
    }


def render(report: status_job.StatusReport, fmt: str) -> None:
    s = report.summary
    rows: list[tuple[str, str]] = [
        (
            "sessions",
            f"{s.sessions} ({output.human_bytes(s.size_bytes)}"
            + (
                f"; {output.human_bytes(s.disk_bytes)} on disk with the kept copies)"
                if s.leftover_copies
                else ")"
            ),
        ),
        ("by status", ", ".join(f"{n} {k}" for k, n in report.by_status.items()) or "-"),
        (
            "verdicts",
            (", ".join(f"{n} {k}" for k, n in report.by_verdict.items()) or "none recorded")
            + (f", {s.checked_quick} by --quick" if s.checked_quick else "")
            + f" (last check {_age(s.newest_check_age_seconds)}"
            + (
                f", oldest {_age(s.oldest_check_age_seconds)})"
                if s.oldest_check_age_seconds != s.newest_check_age_seconds
                else ")"
            ),
        ),
        (
            "not judged",
            f"{s.changed_since_check} changed since last check, {s.never_checked} never checked",
        ),
        ("open right now", str(s.live)),
        ("interrupted", str(s.interrupted)),
        ("needs migration", str(s.needs_migration)),
        ("damaged", _known(s.damaged, s)),
        ("refused", _known(s.refused, s)),
        (
            "recoveries logged",
            "log unreadable (see next)"
            if report.recoveries.problem
            else ", ".join(f"{n} {k}" for k, n in report.recoveries.outcomes.items()) or "none",
        ),
        *(
            [
                (
                    "other jobs logged",
                    ", ".join(f"{n} {k}" for k, n in report.recoveries.other_jobs.items()),
                )
            ]
            if report.recoveries.other_jobs
            else []
        ),
        *(
            [
                (
                    "kept copies",
                    f"{s.leftover_copies} .corrupt/.pre-restore "
                    f"({output.human_bytes(s.leftover_bytes)}); "
                    "once you need none: agentdb prune --leftovers --dry-run",
                )
            ]
            if s.leftover_copies
            else []
        ),
        (
            "plugin versions",
            f"{s.cached_plugin_versions} cached, {s.pinned_plugin_versions} pinned by sessions",
        ),
    ]
    output.emit_table(rows, [], fmt)
    if report.next:
        output.emit_text("\nnext:")
        for n in report.next:
            output.emit_wrapped(n.command, "  ", command=True)
            output.emit_wrapped(n.why, "      ")
    else:
        output.emit_text("\nnothing needs doing")


@click.command("status")
@no_index_option
@jobs_option("Read files")
@json_option
@click.option(
    "--fmt",
    type=TABLE_FORMAT,
    default="plain",
    show_default=True,
    metavar="FORMAT",
    help="tabulate table format for text output (plain, simple, github, grid, ...).",
)
@click.pass_obj
def status_cmd(app: App, no_index: bool, jobs: int | None, as_json: bool, fmt: str) -> int:
    """One screen: sessions by status and by verdict, interrupted sessions, sessions needing
    migration, damaged ones, total size, recoveries logged, cached plugin versions sessions
    pin, and the next commands to run.

    Status and revision come from the session index (files whose identity changed since are
    read again; --no-index reads every file); verdicts come from the last recorded `agentdb
    check` of each file (kept in $XDG_CACHE_HOME/agentdb/), shown only while the file is the
    one that was checked — a file changed since, or never checked, is counted as such. Read-only.
    Destructive commands are suggested only in their --dry-run form.

    Exit 0 when nothing needs doing, 1 otherwise.
    """
    report = status_job.status(
        app.require_sessions_dir(),
        app.plugin_cache,
        recovery_log=app.recovery_log,
        jobs=jobs or default_jobs(),
        use_index=not no_index,
    )
    for n in report.notes:
        output.note(n)
    if as_json:
        output.emit_json(document(report))
    else:
        render(report, fmt)
    return errors.EXIT_PROBLEMS if report.needs_attention else errors.EXIT_OK
