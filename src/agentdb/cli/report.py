"""``agentdb report --html FILE``: one self-contained page about the whole sessions directory."""

from __future__ import annotations

from pathlib import Path

import click

from agentdb import errors
from agentdb.cli import output
from agentdb.cli.common import App, default_jobs, jobs_option, json_option, no_index_option
from agentdb.cli.params import OUTPUT_FILE
from agentdb.views import report


def document(r: report.Report) -> dict[str, object]:
    """The JSON document every number on the page comes from."""
    return {
        "version": report.VERSION,
        "generated_at": r.generated_at,
        "sessions_dir": r.sessions_dir,
        "summary": r.summary,
        "by_status": r.by_status,
        "by_verdict": r.by_verdict,
        "cost_by_day": r.cost_by_day,
        "cost_by_model": r.cost_by_model,
        "sessions": r.sessions,
        "sessions_complete": r.sessions_complete,
        "pinned": r.pinned,
        "recoveries": r.recoveries,
        "next": r.next,
        "leftovers": [x.to_json() for x in r.leftovers],
    }


@click.command("report")
@click.option(
    "--html",
    "html_file",
    type=OUTPUT_FILE,
    default=None,
    metavar="FILE",
    help="Write the page to FILE (created 0600; never over an existing file without --force; "
    "refused inside the sessions directory); `-` writes it to stdout.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace FILE if it exists (written beside, renamed): a file or a symlink, never a "
    "device, FIFO, directory, the recovery log or a SQLite database.",
)
@no_index_option
@jobs_option("Read files")
@json_option
@click.pass_obj
def report_cmd(
    app: App,
    html_file: Path | None,
    force: bool,
    no_index: bool,
    jobs: int | None,
    as_json: bool,
) -> int:
    """One self-contained HTML page (inline SVG, no script, no network): health overview, cost
    per day and per model, the session tree, the cached plugin versions sessions pin, and the
    recovery history with the event sequences each recovery lost.

    Verdicts are the last recorded `agentdb check` of each unchanged file, as in `agentdb
    status`. Beyond 500 sessions the page keeps the summaries and the 100 sessions most in
    need of attention. --json prints the document the page's numbers come from.

    Exit 0 when the report was written (what needs doing is on the page's "Next" list; `agentdb
    status` exits 1 for it), 2 on a usage error.
    """
    if html_file is None and not as_json:
        raise click.UsageError("give --html FILE, --json, or both")
    to_stdout = html_file is not None and str(html_file) == "-"
    if to_stdout and as_json:
        raise click.UsageError(
            "--html - and --json both write to stdout; give --html a file name, or drop one"
        )
    sessions_dir = app.require_sessions_dir()
    r = report.collect(
        sessions_dir,
        app.plugin_cache,
        recovery_log=app.recovery_log,
        jobs=jobs or default_jobs(),
        use_index=not no_index,
    )
    for n in r.notes:
        output.note(n)
    if to_stdout:
        from agentdb.views.report import html

        output.emit_text(html.render(r))
    elif html_file is not None:
        from agentdb.views.report import html

        report.write_report(
            html_file,
            html.render(r),
            sessions_dir=sessions_dir,
            force=force,
            recovery_log=app.recovery_log,
        )
        output.note(f"wrote {html_file} ({r.summary.sessions} sessions)")
    if as_json:
        output.emit_json(document(r))
    return errors.EXIT_OK  # a report that was written is success, whatever it says
