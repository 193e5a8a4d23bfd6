"""Every command the ``agentdb`` group has, one module each."""

from __future__ import annotations

import click

from agentdb.cli.backup import backup_cmd
from agentdb.cli.check import check_cmd
from agentdb.cli.demo import demo_cmd
from agentdb.cli.events import events_cmd
from agentdb.cli.migrate import migrate_cmd
from agentdb.cli.plugins import plugins_cmd
from agentdb.cli.preflight import preflight_cmd
from agentdb.cli.prune import prune_cmd
from agentdb.cli.recover import recover_cmd
from agentdb.cli.sessions import sessions_cmd

ALL: list[click.Command] = [
    check_cmd,
    demo_cmd,
    backup_cmd,
    events_cmd,
    migrate_cmd,
    plugins_cmd,
    preflight_cmd,
    prune_cmd,
    recover_cmd,
    sessions_cmd,
]
