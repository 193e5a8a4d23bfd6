"""``agentdb preflight ID``: what you would need to install to replay a session."""

from __future__ import annotations

import click

from agentdb.cli import output
from agentdb.cli.common import SESSION_ID, App, fmt_option, json_option
from agentdb.views import sessions


@click.command("preflight")
@click.argument("session_id", type=SESSION_ID)
@json_option
@fmt_option
@click.pass_obj
def preflight_cmd(app: App, session_id: str, as_json: bool, fmt: str) -> int:
    """List the producers the session used that the plugin cache lacks: what you would need to
    install to replay it. The reserved kernel producer is never looked up.

    A plugin version is in the cache iff <plugin-cache>/<category>/<name>/<version>/ exists.
    Exit 1 when anything is missing.
    """
    report = sessions.preflight(app.require_sessions_dir(), session_id, app.use_plugin_cache())
    missing = report.missing
    if as_json:
        output.emit_json(
            {
                "version": 1,
                "session_id": report.session_id,
                "plugin_cache": report.plugin_cache,
                "producers": report.items,
                "missing": missing,
                "summary": {"producers": len(report.items), "missing": len(missing)},
            }
        )
    else:
        output.emit_table(
            [(i.category, i.name, i.version, i.first_seen_sequence, i.state) for i in report.items],
            ["category", "name", "version", "first seen", "in cache"],
            fmt,
        )
        if missing:
            output.note(
                f"{len(missing)} producers missing from {report.plugin_cache}: install "
                + ", ".join(f"{i.category}/{i.name}@{i.version}" for i in missing)
            )
        else:
            output.note("every producer this session used is in the plugin cache")
    return 1 if missing else 0
