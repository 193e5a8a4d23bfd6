"""Every command the ``agentdb`` group has, one module each, imported only when it runs.

``agentdb check`` should not pay for importing the salvage engines; the group resolves a
command's module the first time the command is looked up (help and man pages included).
"""

from __future__ import annotations

import importlib
import types
from typing import Any

import click

from agentdb.cli import examples, output

# command name -> "module:attribute"
LAZY: dict[str, str] = {
    "backup": "agentdb.cli.backup:backup_cmd",
    "check": "agentdb.cli.check:check_cmd",
    "demo": "agentdb.cli.demo:demo_cmd",
    "events": "agentdb.cli.events:events_cmd",
    "migrate": "agentdb.cli.migrate:migrate_cmd",
    "plugins": "agentdb.cli.plugins:plugins_cmd",
    "preflight": "agentdb.cli.preflight:preflight_cmd",
    "prune": "agentdb.cli.prune:prune_cmd",
    "recover": "agentdb.cli.recover:recover_cmd",
    "report": "agentdb.cli.report:report_cmd",
    "restore": "agentdb.cli.restore:restore_cmd",
    "sessions": "agentdb.cli.sessions:sessions_cmd",
    "status": "agentdb.cli.status:status_cmd",
}


def _store(key: str) -> Any:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value:
            ctx.meta[key] = value
        return value

    return callback


def _table_style(style: str) -> Any:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value:
            if ctx.meta.get(output.TABLE_STYLE) not in (None, style):
                raise click.UsageError("give --csv or --nl, not both")
            ctx.meta[output.TABLE_STYLE] = style
        return value

    return callback


def _json_errors(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value:
        ctx.meta["agentdb.json_errors"] = True
    return value


def _format_commands(self: click.Group, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    """The command list with whole summaries, wrapped rather than cut at the terminal width."""
    rows = []
    for name in self.list_commands(ctx):
        sub = self.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            rows.append((name, sub.get_short_help_str(limit=1000)))
    if rows:
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def common_options(cmd: click.Command, path: str = "") -> click.Command:
    """Give a command the options every command shares, unless it defines them itself:
    ``-q/--quiet``, ``-v/--verbose``, ``--no-progress``; ``--csv`` and ``--nl`` where the
    command draws tables (it has ``--fmt``). They set the click context's shared ``meta``,
    which :mod:`agentdb.cli.output` reads, so no command needs a parameter for them. A
    command's ``--json`` also marks errors to be printed as JSON."""
    path = path or (cmd.name or "")
    if cmd.epilog is None:
        cmd.epilog = examples.epilog(path)
    if isinstance(cmd, click.Group):
        cmd.format_commands = types.MethodType(_format_commands, cmd)  # type: ignore[method-assign]
        for name, sub in cmd.commands.items():
            common_options(sub, f"{path} {name}")
        return cmd
    taken = {o for p in cmd.params for o in getattr(p, "opts", [])}

    def add(*decls: str, key: str, help: str, callback: Any = None) -> None:
        if taken.isdisjoint(decls):
            cmd.params.append(
                click.Option(
                    decls,
                    is_flag=True,
                    expose_value=False,
                    callback=callback or _store(key),
                    help=help,
                )
            )

    add(
        "-q", "--quiet", key=output.QUIET, help="Only the report and errors: no notes, no progress."
    )
    add("-v", "--verbose", key=output.VERBOSE, help="More detail: full table cells, extra notes.")
    add("--no-progress", key=output.NO_PROGRESS, help="No progress line on stderr.")
    if any(p.name == "fmt" for p in cmd.params):
        add("--csv", key="", callback=_table_style("csv"), help="Tables as CSV.")
        add("--nl", key="", callback=_table_style("nl"), help="Tables as one JSON object per row.")
    for p in cmd.params:
        if p.name == "as_json" and p.callback is None:
            p.callback = _json_errors
    return cmd


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use; each gets
    :func:`common_options`."""

    format_commands = _format_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY:
            module, attr = LAZY[cmd_name].split(":")
            cmd: Any = getattr(importlib.import_module(module), attr)
            self.add_command(common_options(cmd, cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)
