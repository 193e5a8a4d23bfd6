"""``agentdb check``: verify session files, safely beside a live kernel."""

from __future__ import annotations

from collections.abc import Iterator

import click

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
from agentdb.index.checked import RecordedStream, changed_ids
from agentdb.results import Finding, SessionCheck

_RANK = ("error", "warning", "info")
# Informational findings shown without -v: they tell of history lost, not of normal states.
_SHOWN_INFO = frozenset({"chain_gap_recorded", "recovered_earlier"})


def is_note(f: Finding) -> bool:
    """A finding shown only with -v: informational, and about nothing lost or to be done (a
    torn WAL tail, rows an earlier recovery lost: expected, a session open right now)."""
    return f.severity == "info" and f.code not in _SHOWN_INFO


def findings(s: SessionCheck, *, notes: bool) -> tuple[list[str], int]:
    """Every finding of ``s`` as the table shows it, most serious first, each with its fix
    (the file name left out: the row names the session); and how many notes were left out."""
    ranked = sorted(s.findings, key=lambda f: _RANK.index(f.severity) if f.severity in _RANK else 3)
    shown = [f for f in ranked if notes or not is_note(f)]
    prefix = s.path.name + ": "
    out = []
    step_shown = False
    for f in shown:
        text = f.message.removeprefix(prefix)
        if s.fix is not None:
            # a file that is not ok has one next step, the policy's (as --json's "fix"), shown
            # once, on the most serious finding: a finding's own advice would name a second
            text = policy.without_steps(text)
            if not step_shown:
                text += "; " + (f"run `{s.fix.command}`" if s.fix.command else s.fix.why)
                step_shown = True
        elif f.fix and f.fix not in text:
            text += f"; fix: {f.fix}"
        out.append(text)
    return out, len(ranked) - len(shown)


def _size(n: int | None) -> str:
    return "" if n is None else output.human_bytes(n)


def render(run: RecordedStream, fmt: str, *, problems: bool = False) -> None:
    """The sessions table, drawn while the results stream in, then the directory findings and
    the summary line."""
    notes = output.verbose()
    hidden = 0

    def rows() -> Iterator[tuple[object, ...]]:
        nonlocal hidden
        for s in run:
            if problems and s.ok:
                continue
            texts, left_out = findings(s, notes=notes)
            hidden += left_out
            yield (
                s.session_id,
                s.status or "",
                "" if s.revision is None else s.revision,
                _size(s.size),
                s.verdict + (" (live)" if s.live is not None else ""),
                texts[0] if texts else "",
            )
            for text in texts[1:]:  # one row per finding, the session named once
                yield ("", "", "", "", "", text)

    output.emit_table(
        rows(),
        ["session", "status", "rev", "size", "verdict", "finding"],
        fmt,
        optional=("rev", "size"),
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
        + (f"; {hidden} notes not shown (-v shows them)" if hidden else "")
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
