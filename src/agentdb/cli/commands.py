"""Every command the ``agentdb`` group has, one module each."""

from __future__ import annotations

import click

from agentdb.cli.demo import demo_cmd
from agentdb.cli.plugins import plugins_cmd
from agentdb.cli.prune import prune_cmd
from agentdb.cli.recover import recover_cmd

ALL: list[click.Command] = [
    demo_cmd,
    plugins_cmd,
    prune_cmd,
    recover_cmd,
]
