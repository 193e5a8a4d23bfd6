"""Every command the ``agentdb`` group has, one module each, imported only when it runs.

``agentdb check`` should not pay for importing the salvage engines, nor ``agentdb --help`` for
importing every command: the group resolves a command's module the first time the command is
looked up to run it or show its own help (man pages too). The group's command list and shell
completion of command names read :data:`SUMMARY` instead, a static copy of each command's short
help that ``tests/cli/test_lazy.py`` compares with the real commands.
"""

from __future__ import annotations

import difflib
import importlib
import types
from typing import TYPE_CHECKING, Any

import click

from agentdb.cli import examples, output

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

# command name -> "module:attribute"
LAZY: dict[str, str] = {
    "backup": "agentdb.cli.backup:backup_cmd",
    "check": "agentdb.cli.check:check_cmd",
    "completion": "agentdb.cli.completion:completion_cmd",
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

# command name -> its short help as ``agentdb --help`` lists it (``get_short_help_str(1000)``);
# a test fails when a command's docstring and this line part
SUMMARY: dict[str, str] = {
    "backup": "Copy sessions consistently, even while the kernel is writing them; run it again "
    "and again into the same folder.",
    "check": "Verify session files: type, owner and mode, identity, integrity, schema, "
    "consistency, content hashes and WAL, and report each session's verdict.",
    "completion": "Print the shell completion script for SHELL: commands, options and session ids.",
    "demo": "Build a realistic sample state in DIRECTORY (default: a new temporary directory) "
    "and run check, recover, migrate and prune on it.",
    "events": "Print a session's events in sequence order (the only ordering authority).",
    "migrate": "Bring sessions to the current schema revision, ahead of the kernel's first open.",
    "plugins": "The plugin cache as retained sessions see it (agentdb never deletes from it).",
    "preflight": "List the producers the session used that the plugin cache lacks: what you "
    "would need to install to replay it.",
    "prune": "Remove the sessions you select, refusing those that must stay.",
    "recover": "Salvage damaged sessions into replacements, keeping each original as "
    "<id>.sqlite.corrupt (then .corrupt.1, ...) with its WAL beside it.",
    "report": "One self-contained HTML page (inline SVG, no script, no network): health "
    "overview, cost per day and per model, the session tree, the cached plugin versions "
    "sessions pin, and the recovery history with the event sequences each recovery lost.",
    "restore": "Put verified backup copies back in place of the session files.",
    "sessions": "Cross-session queries: list sessions, show one, draw the parent/child tree; "
    "end sessions whose kernel died.",
    "status": "One screen: sessions by status and by verdict, interrupted sessions, sessions "
    "needing migration, damaged ones, total size, recoveries logged, cached plugin versions "
    "sessions pin, and the next commands to run.",
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


def _resolve_command(
    self: click.Group, ctx: click.Context, args: list[str]
) -> tuple[str | None, click.Command | None, list[str]]:
    """click's lookup; an unknown command is told the close names ("did you mean 'check'?")
    from every command, loaded or not (click's own suggestions see only loaded ones)."""
    try:
        return click.Group.resolve_command(self, ctx, args)
    except click.UsageError as e:
        name = args[0] if args else ""
        if not name or name.startswith("-") or self.get_command(ctx, name) is not None:
            raise
        raise click.UsageError(
            f"No such command {name!r}.{did_you_mean(name, self.list_commands(ctx))}", e.ctx
        ) from None


def did_you_mean(name: str, names: list[str]) -> str:
    """`` Did you mean 'check'?`` for the commands ``name`` may have meant, or ``""``."""
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:  # the best match, and those nearly as close (not every word that shares letters)
        score = {c: difflib.SequenceMatcher(None, name, c).ratio() for c in close}
        close = [c for c in close if score[c] >= score[close[0]] - 0.1]
    if not close and len(name) >= 3:  # a prefix: `agentdb sess` for sessions
        close = [n for n in names if n.startswith(name)][:3]
    if not close:
        return ""
    return " Did you mean " + " or ".join(f"'{c}'" for c in close) + "?"


def common_options(cmd: click.Command, path: str = "") -> click.Command:
    """Give a command the options every command shares, unless it defines them itself:
    ``-q/--quiet``, ``-v/--verbose``, ``--no-progress``; ``--csv``, ``--nl`` and ``--wide``
    where the command draws tables (it has ``--fmt``). They set the click context's shared ``meta``,
    which :mod:`agentdb.cli.output` reads, so no command needs a parameter for them. A
    command's ``--json`` also marks errors to be printed as JSON."""
    path = path or (cmd.name or "")
    if cmd.epilog is None:
        cmd.epilog = examples.epilog(path)
    if isinstance(cmd, click.Group):
        cmd.format_commands = types.MethodType(_format_commands, cmd)  # type: ignore[method-assign]
        cmd.resolve_command = types.MethodType(_resolve_command, cmd)  # type: ignore[method-assign]
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
        add(
            "--wide",
            key=output.WIDE,
            help="On a terminal too, every column and whole ids, cells not wrapped (as -v does).",
        )
        add(
            "--local",
            key=output.LOCAL,
            help="Times in tables as local time with its UTC offset (also when $TZ is set); "
            "default RFC 3339 UTC with Z.",
        )
    for p in cmd.params:
        if p.name == "as_json" and p.callback is None:
            p.callback = _json_errors
    return cmd


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use; each gets
    :func:`common_options`. Listing them (help, completion) imports none."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY:
            module, attr = LAZY[cmd_name].split(":")
            cmd: Any = getattr(importlib.import_module(module), attr)
            self.add_command(common_options(cmd, cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        return _resolve_command(self, ctx, args)

    def summary(self, ctx: click.Context, cmd_name: str, limit: int = 1000) -> str | None:
        """A command's short help, without importing it when :data:`SUMMARY` has it; None for
        a hidden or unknown command."""
        if cmd_name not in self.commands and cmd_name in SUMMARY:  # click's own shortening
            return click.Command(cmd_name, help=SUMMARY[cmd_name]).get_short_help_str(limit)
        sub = self.get_command(ctx, cmd_name)
        return None if sub is None or sub.hidden else sub.get_short_help_str(limit=limit)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list with whole summaries, wrapped rather than cut at the terminal width."""
        rows = []
        for name in self.list_commands(ctx):
            text = self.summary(ctx, name)
            if text is not None:
                rows.append((name, text))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Command names (with click's 45-character summaries) and the group's options."""
        from click.shell_completion import CompletionItem

        results = []
        for name in self.list_commands(ctx):
            if name.startswith(incomplete):
                text = self.summary(ctx, name, limit=45)
                if text is not None:
                    results.append(CompletionItem(name, help=text))
        results.extend(click.Command.shell_complete(self, ctx, incomplete))
        return results
