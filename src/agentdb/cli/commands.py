"""Every command the ``agentdb`` group has, one module each, imported only when it runs.

``agentdb check`` should not pay for importing the salvage engines; the group resolves a
command's module the first time the command is looked up (help and man pages included).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

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
    "sessions": "agentdb.cli.sessions:sessions_cmd",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY:
            module, attr = LAZY[cmd_name].split(":")
            cmd: Any = getattr(importlib.import_module(module), attr)
            self.add_command(cmd, cmd_name)
        return super().get_command(ctx, cmd_name)
