"""``agentdb sessions list | show ID | tree [ID]``: cross-session queries by scanning files."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import click

from agentdb.cli import output
from agentdb.cli.common import (
    SESSION_ID,
    App,
    default_jobs,
    finish,
    fmt_option,
    jobs_option,
    json_option,
    no_index_option,
)
from agentdb.cli.params import AGE
from agentdb.cli.sessions_costs import costs_cmd
from agentdb.cli.sessions_end import end_cmd
from agentdb.schema import enums
from agentdb.views import queries, sessions


def _cost(v: float | None) -> str:
    return "" if v is None else f"${v:.4f}"


def _ts(v: str | None) -> str:
    return output.when(v)


@click.group("sessions")
def sessions_cmd() -> None:
    """Cross-session queries: list sessions, show one, draw the parent/child tree; end
    sessions whose kernel died.

    Answers come from a derived index in $XDG_CACHE_HOME/agentdb/, validated by stat against
    the files on every query (a file whose identity changed, or that is new, is read again;
    --no-index reads every file; the answer is the same). A file that cannot be read is listed
    with status "unreadable".
    """


@sessions_cmd.command("list")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([*enums.STATUSES, sessions.UNREADABLE]),
    help="Only sessions with this status (repeatable).",
)
@click.option(
    "--until",
    "--older-than",
    "older_than",
    type=AGE,
    default=None,
    metavar="WHEN",
    help="Only sessions that ended (or, still open, started) at least this long ago (90d, 12h) "
    "or before this UTC date (2026-01-31). --older-than is the same option.",
)
@click.option(
    "--since",
    "--newer-than",
    "newer_than",
    type=AGE,
    default=None,
    metavar="WHEN",
    help="Only sessions that ended (or started) less than this long ago, or after this date. "
    "--newer-than is the same option.",
)
@click.option("--profile", metavar="P", default=None, help="Only sessions of this profile.")
@click.option(
    "--parent",
    type=SESSION_ID,
    default=None,
    help="Only the children of this session (parent_session_id is ID).",
)
@click.option(
    "--sort",
    type=click.Choice(queries.SORTS),
    default="id",
    show_default=True,
    help="Order: id (= chronological), started (start time), cost (highest first), events "
    "(most first).",
)
@click.option(
    "--limit", type=click.IntRange(min=0), default=None, metavar="N", help="At most N rows."
)
@no_index_option
@jobs_option("Read files")
@json_option
@fmt_option
@click.pass_obj
def list_cmd(
    app: App,
    statuses: tuple[str, ...],
    older_than: dt.timedelta | None,
    newer_than: dt.timedelta | None,
    profile: str | None,
    parent: str | None,
    sort: str,
    limit: int | None,
    no_index: bool,
    jobs: int | None,
    as_json: bool,
    fmt: str,
) -> int:
    """List sessions in chronological order with status, profile, parent, depth, start and end,
    cost and event count."""
    sessions_dir = app.require_sessions_dir()
    listed = queries.stream_sessions(
        sessions_dir,
        queries.ListQuery(statuses, older_than, newer_than, profile, parent, sort, limit),
        use_index=not no_index,
        jobs=jobs or default_jobs(),
    )
    judged = (
        iter(listed.rows) if listed.verdicts else sessions.with_verdicts(sessions_dir, listed.rows)
    )
    listing = sessions.Listing(judged)
    if as_json:
        output.emit_json_stream(
            {
                "version": 1,
                "sessions": iter(listing),
                "summary": output.Later(lambda: listing.summary),
                "interrupted": output.Later(lambda: listing.interrupted or listed.interrupted),
            }
        )
        for n in listed.notes:  # known once the rows are out (the index streams)
            output.note(n)
        return finish(True, listing.interrupted or listed.interrupted, listing.count, "listed")
    unreadable = 0

    def rows() -> Iterator[tuple[object, ...]]:
        nonlocal unreadable
        for r in listing:
            unreadable += r.status == sessions.UNREADABLE
            yield (
                r.session_id,
                r.status,
                r.profile or "",
                r.parent_session_id or "",
                "" if r.depth is None else r.depth,
                _ts(r.started_at),
                _ts(r.ended_at),
                _cost(r.cost_usd),
                "" if r.events is None else r.events,
            )

    output.emit_table(
        rows(),
        ["session", "status", "profile", "parent", "depth", "started", "ended", "cost", "events"],
        fmt,
        optional=("depth", "parent", "events", "ended", "profile"),
    )
    for n in listed.notes:
        output.note(n)
    output.note(
        f"{listing.count} sessions"
        + (f", {unreadable} unreadable (see `agentdb check`)" if unreadable else "")
    )
    return finish(True, listing.interrupted or listed.interrupted, listing.count, "listed")


@sessions_cmd.command("show")
@click.argument("session_id", type=SESSION_ID)
@json_option
@fmt_option
@click.pass_obj
def show_cmd(app: App, session_id: str, as_json: bool, fmt: str) -> int:
    """Show one session: its row, cost by model, plan decisions by rule, and producers.

    The file is judged as `agentdb check --quick` judges it (or by a verdict check recorded
    for it as it is now); exit status 1 when that is unreadable, corrupt or foreign.
    """
    d = sessions.show_session(app.require_sessions_dir(), session_id)
    if as_json:
        output.emit_json({"version": 1, **output.jsonable(d)})
    else:
        _show_table(d, fmt)
    r = d.session
    if r.error is not None:
        output.error(r.error, code=r.error_code or "corrupt", exit_code=1, path=str(r.path))
        return 1
    return 0


def _show_table(d: sessions.SessionDetail, fmt: str) -> None:
    r = d.session
    output.emit_table(
        [
            ("session", r.session_id),
            ("status", r.status),
            ("profile", r.profile),
            ("parent", r.parent_session_id or "-"),
            ("depth", r.depth),
            ("started", output.when(r.started_at)),
            ("ended", output.when(r.ended_at) or "-"),
            ("cost", _cost(r.cost_usd)),
            ("events", r.events),
            ("revision", r.revision),
            ("verdict", r.verdict or "-"),
        ],
        ["field", "value"],
        fmt,
    )
    if d.cost_by_model:
        output.emit_text("\nCost by model")
        output.emit_table(
            [
                (
                    c["provider"],
                    c["model"],
                    c["turns"],
                    c["input_tokens"],
                    c["output_tokens"],
                    c["cache_tokens"],
                    _cost(c["cost_usd"]),  # type: ignore[arg-type]
                )
                for c in d.cost_by_model
            ],
            ["provider", "model", "turns", "input", "output", "cache", "cost"],
            fmt,
        )
    if d.plan_decisions:
        output.emit_text("\nPlan decisions by rule")
        output.emit_table(
            [(p["decided_by"], p["decision"], p["count"]) for p in d.plan_decisions],
            ["rule", "decision", "count"],
            fmt,
        )
    if d.producers:
        output.emit_text("\nProducers")
        output.emit_table(
            [(p.category, p.name, p.version, p.first_seen_sequence) for p in d.producers],
            ["category", "name", "version", "first seen"],
            fmt,
        )


def _label(n: sessions.TreeNode) -> str:
    r = n.row
    bits = [r.session_id, r.status]
    if r.profile:
        bits.append(r.profile)
    if r.cost_usd is not None:
        bits.append(_cost(r.cost_usd))
    if n.note:
        bits.append(f"({n.note})")
    return output.printable("  ".join(bits))


def tree_lines(roots: list[sessions.TreeNode]) -> list[str]:
    """The forest drawn with box characters, children in id order."""
    lines: list[str] = []
    # (node, prefix for its own line, prefix for its children's lines)
    stack: list[tuple[sessions.TreeNode, str, str]] = [(n, "", "") for n in reversed(roots)]
    while stack:
        node, own, below = stack.pop()
        lines.append(own + _label(node))
        kids = node.children
        for i in range(len(kids) - 1, -1, -1):
            last = i == len(kids) - 1
            stack.append(
                (
                    kids[i],
                    below + ("└── " if last else "├── "),
                    below + ("    " if last else "│   "),
                )
            )
    return lines


def _tree_json(n: sessions.TreeNode) -> dict[str, Any]:
    return {
        **output.jsonable(n.row),
        "note": n.note,
        "children": [_tree_json(c) for c in n.children],
    }


@sessions_cmd.command("tree")
@click.argument("session_id", type=SESSION_ID, required=False)
@no_index_option
@json_option
@click.pass_obj
def tree_cmd(app: App, session_id: str | None, no_index: bool, as_json: bool) -> int:
    """Draw the parent/child tree of every session, or of the session ID and its descendants,
    from every file's parent_session_id (through the index; --no-index reads every file)."""
    roots, notes = queries.session_tree(
        app.require_sessions_dir(), session_id, use_index=not no_index, jobs=default_jobs()
    )
    for n in notes:
        output.note(n)
    if as_json:
        output.emit_json({"version": 1, "roots": [_tree_json(n) for n in roots]})
    else:
        for line in tree_lines(roots):
            output.emit_text(line)
    return 0


sessions_cmd.add_command(end_cmd)
sessions_cmd.add_command(costs_cmd)
