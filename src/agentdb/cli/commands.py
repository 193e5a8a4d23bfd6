"""Every command the ``agentdb`` group has, one module each."""

from __future__ import annotations

import click

from agentdb.cli.backup import backup_cmd
from agentdb.cli.demo import demo_cmd
from agentdb.cli.migrate import migrate_cmd

ALL: list[click.Command] = [
    demo_cmd,
    migrate_cmd,
    backup_cmd,
]
