"""``agentdb sessions costs``: cost totals per day and per model across sessions."""

from __future__ import annotations

import datetime as dt

import click

from agentdb import errors
from agentdb.cli import output
from agentdb.cli.common import (
    App,
    default_jobs,
    fmt_option,
    json_option,
    no_index_option,
    unreadable_files,
)
from agentdb.cli.params import AGE
from agentdb.views import queries


def _day(age: dt.timedelta | None) -> str | None:
    if age is None:
        return None
    return (dt.datetime.now(dt.timezone.utc) - age).date().isoformat()


@click.command("costs")
@click.option(
    "--since",
    type=AGE,
    default=None,
    metavar="WHEN",
    help="Only days from this UTC date (2026-01-31) or this long ago (30d) on.",
)
@click.option(
    "--until",
    type=AGE,
    default=None,
    metavar="WHEN",
    help="Only days up to this UTC date, or this long ago.",
)
@click.option(
    "--by",
    type=click.Choice(["day", "model", "day-model"]),
    default="day",
    show_default=True,
    help="The table to print (--json has all three).",
)
@no_index_option
@json_option
@fmt_option
@click.pass_obj
def costs_cmd(
    app: App,
    since: dt.timedelta | None,
    until: dt.timedelta | None,
    by: str,
    no_index: bool,
    as_json: bool,
    fmt: str,
) -> int:
    """Cost totals across every session: per UTC day of the event, per model, or per day and
    model, with turns and the number of sessions.

    Answered from the session index (files changed since are read again; --no-index reads
    every file). Exit 1 when some session's costs could not be read (they are left out and
    listed).
    """
    t = queries.cost_totals(
        app.require_sessions_dir(),
        since=_day(since),
        until=_day(until),
        use_index=not no_index,
        jobs=default_jobs(),
    )
    for n in t.notes:
        output.note(n)
    if as_json:
        output.emit_json(
            {
                "version": 1,
                "since": _day(since),
                "until": _day(until),
                "total_usd": t.total_usd,
                "by_day": t.by_day,
                "by_model": t.by_model,
                "by_day_model": t.by_day_model,
                "unreadable": t.unknown,
                "summary": {
                    "total_usd": t.total_usd,
                    "days": len(t.by_day),
                    "models": len(t.by_model),
                    "unreadable": len(t.unknown),
                },
            }
        )
    elif by == "day":
        output.emit_table(
            [(d["day"], f"${d['cost_usd']:.4f}", d["turns"], d["sessions"]) for d in t.by_day],
            ["day", "cost", "turns", "sessions"],
            fmt,
        )
    elif by == "model":
        output.emit_table(
            [
                (m["provider"], m["model"], f"${m['cost_usd']:.4f}", m["turns"], m["sessions"])
                for m in t.by_model
            ],
            ["provider", "model", "cost", "turns", "sessions"],
            fmt,
        )
    else:
        output.emit_table(
            [
                (x["day"], x["provider"], x["model"], f"${x['cost_usd']:.4f}", x["turns"])
                for x in t.by_day_model
            ],
            ["day", "provider", "model", "cost", "turns"],
            fmt,
        )
    if not as_json:
        output.note(f"total ${t.total_usd:.4f}")
    if t.unknown:
        unreadable_files(app, list(t.unknown), "their costs are left out")
        return errors.EXIT_PROBLEMS
    return errors.EXIT_OK
