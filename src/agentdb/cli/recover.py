"""``agentdb recover``: salvage damaged sessions into replacements, keep the originals."""

from __future__ import annotations

import click

from agentdb import salvage
from agentdb.cli import output
from agentdb.cli.common import (
    App,
    finish,
    fmt_option,
    json_option,
    make_selection,
    session_selection,
    wait_option,
)


@click.command("recover")
@session_selection()
@click.option(
    "--dry-run", is_flag=True, help="Salvage into a temporary file, report, change nothing."
)
@wait_option(
    "Wait at most SECONDS for each session another process has open to be closed, "
    "instead of skipping it at once (skipped_live)."
)
@json_option
@fmt_option
@click.pass_obj
def recover_cmd(
    app: App,
    ids: tuple[str, ...],
    all_: bool,
    dry_run: bool,
    wait: float | None,
    as_json: bool,
    fmt: str,
) -> int:
    """Salvage damaged sessions into replacements, keeping each original as
    <id>.sqlite.corrupt (then .corrupt.1, ...) with its WAL beside it.

    A session is damaged when PRAGMA integrity_check fails, SQLite cannot read it, an event's
    content_hash does not match, or its WAL holds intact commits after a broken frame. Healthy
    sessions are left alone; sessions another process has open are skipped. Every recovery is
    logged to the recovery log and warned about on stderr. Exit 1 when any session was
    unreadable, skipped, refused or failed (the system refused a write: the session is left as
    it was); 130 after Ctrl-C, with the sessions done before it reported.
    """
    sel = make_selection(ids, all_)
    sessions_dir = app.require_sessions_dir()
    bar = output.ProgressLine("recover")
    try:
        report = salvage.recover_sessions(
            sessions_dir,
            None if sel.all else sel.ids,
            dry_run=dry_run,
            recovery_log=app.recovery_log,
            wait=wait,
            progress=bar.update,
        )
    finally:
        bar.close()
    for s in report.sessions if not output.setting(output.QUIET) else ():
        if s.outcome == "recovered":  # -q: the table (or JSON) and the recovery log say it
            where = "would keep the original" if dry_run else f"original kept as {s.corrupt_path}"
            lost = s.lost.get("events_missing", 0)
            salvaged = s.tables.get("events", {}).get("salvaged", 0)
            output.warn(
                f"{s.path}: damaged; {'would recover' if dry_run else 'recovered'} "
                f"{salvaged} events ({lost} known lost); {where}"
            )
        elif s.outcome in ("unreadable", "refused", "skipped_live", "failed"):
            note = s.notes[-1] if s.notes else ""
            note = note.removeprefix(f"{s.path}: ")
            output.warn(f"{s.path}: {s.outcome}: {note}")
    if as_json:
        output.emit_json(
            {
                "version": 1,
                "dry_run": dry_run,
                "interrupted": report.interrupted,
                "sessions": [s.to_json() for s in report.sessions],
                "summary": _summary(report),
            }
        )
    else:
        output.emit_table(
            [
                (
                    s.session_id,
                    _WOULD.get(s.outcome, s.outcome) if dry_run else s.outcome,
                    " ".join(
                        f"{t}={v['salvaged']}" for t, v in s.tables.items() if v.get("salvaged")
                    ),
                    _lost(s),
                    _sources(s),
                    s.corrupt_path or "",
                )
                for s in report.sessions
            ],
            ["session", "outcome", "rows salvaged", "lost", "read by", "original kept as"],
            fmt,
        )
    return finish(report.ok, report.interrupted, len(report.sessions), "done")


_WOULD = {"recovered": "would recover"}  # a dry run's table says what it would do

# What each salvage engine is, in words an operator knows.
ENGINE_WORDS = {
    "rows": "SQLite",
    "pages": "page scan",
    "sqlite-recover": "sqlite3 .recover",
    "free-space": "free space",
    "index-rebuild": "index rebuild",
    "derived": "derived",
}


def _sources(s: salvage.RecoveryOutcome) -> str:
    """Where the replacement's rows came from: "SQLite 235 rows, page scan 16 rows"."""
    parts = []
    for name, got in s.found_by.items():
        used = sum(got.get("used", {}).values())
        word = ENGINE_WORDS.get(name, name)
        parts.append(f"{word} {used} rows" if used else f"{word} nothing new")
    return ", ".join(parts) or ", ".join(ENGINE_WORDS.get(e, e) for e in s.engines)


def _ranges(ranges: object) -> str:
    if not isinstance(ranges, list):
        return ""
    shown = [
        f"{r[0]}" if r[0] == r[1] else f"{r[0]}-{r[1]}"
        for r in ranges[:3]
        if isinstance(r, list) and len(r) == 2
    ]
    return ", ".join(shown) + (", ..." if len(ranges) > 3 else "")


def _lost(s: salvage.RecoveryOutcome) -> str:
    """Events known lost, with their sequence ranges: "19 events (22-40)"."""
    if s.outcome != "recovered":
        return ""
    n = s.lost.get("events_missing", 0)
    parts = [f"{n} events ({_ranges(s.lost.get('event_sequences'))})"] if n else []
    for table in ("cost_ledger", "plan_items"):
        m = s.lost.get(f"{table}_missing", 0)
        if m:
            parts.append(f"{m} {table}")
    if "session_meta" in s.lost:
        parts.append("session_meta rebuilt")
    return "; ".join(parts) or "none"


def _summary(report: salvage.RecoveryReport) -> dict[str, object]:
    counts: dict[str, int] = dict.fromkeys(salvage.OUTCOMES, 0)
    for s in report.sessions:
        counts[s.outcome] = counts.get(s.outcome, 0) + 1
    return {
        "sessions": len(report.sessions),
        "outcomes": counts,
        "events_lost": sum(
            int(s.lost.get("events_missing", 0) or 0)
            for s in report.sessions
            if s.outcome == "recovered"
        ),
    }
