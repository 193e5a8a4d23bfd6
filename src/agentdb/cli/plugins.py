"""``agentdb plugins``: the plugin cache as retained sessions see it."""

from __future__ import annotations

import click

from agentdb import errors
from agentdb.cli import output
from agentdb.cli.common import (
    App,
    default_jobs,
    finish,
    fmt_option,
    jobs_option,
    json_option,
    no_index_option,
    unreadable_files,
)
from agentdb.index import plugins
from agentdb.views import queries


@click.group("plugins")
def plugins_cmd() -> None:
    """The plugin cache as retained sessions see it (agentdb never deletes from it)."""


@plugins_cmd.command("refs")
@no_index_option
@jobs_option("Read files")
@json_option
@fmt_option
@click.pass_obj
def refs_cmd(app: App, no_index: bool, jobs: int | None, as_json: bool, fmt: str) -> int:
    """Each cached plugin version with the number of retained sessions that reference it, and
    the versions no retained session references (the ones a cache manager may evict).

    Exit 1 when some session could not be read: its references are unknown, so "unreferenced"
    is not final until it is recovered or removed. Exit 130 after Ctrl-C: the counts cover the
    sessions read before it, and no version is called unreferenced.
    """
    refs, notes = queries.refs(
        app.require_sessions_dir(),
        app.use_plugin_cache(),
        use_index=not no_index,
        jobs=jobs or default_jobs(),
    )
    for n in notes:
        output.note(n)
    referenced = sum(1 for v in refs.versions if v.sessions)
    if as_json:
        output.emit_json(
            {
                "version": 1,
                **output.jsonable(refs),
                "summary": {
                    "cached_versions": len(refs.versions),
                    "referenced": referenced,
                    "unreferenced": len(refs.unreferenced),
                    "unreadable_sessions": len(refs.unreadable),
                },
            }
        )
    else:
        output.emit_table(
            [(v.category, v.name, v.version, v.sessions) for v in refs.versions],
            ["category", "name", "version", "sessions"],
            fmt,
        )
        unreferenced = ", ".join(
            plugins.label((v.category, v.name, v.version)) for v in refs.unreferenced
        )
        if refs.interrupted:
            unreferenced = "not known (interrupted)"
        output.note(
            f"{len(refs.versions)} cached version(s); unreferenced: {unreferenced or 'none'}"
        )
    if refs.interrupted:
        return finish(False, True, refs.sessions_read, "read")
    if refs.unreadable:
        unreadable_files(app, list(refs.unreadable), "their references are unknown")
        return errors.EXIT_PROBLEMS
    return errors.EXIT_OK


@plugins_cmd.command("users")
@click.argument("plugin", metavar="[CATEGORY/]NAME")
@click.option("--version", "version", default=None, metavar="V", help="Only this version.")
@no_index_option
@json_option
@fmt_option
@click.pass_obj
def users_cmd(
    app: App, plugin: str, version: str | None, no_index: bool, as_json: bool, fmt: str
) -> int:
    """The sessions whose producers name the plugin NAME (any category, or CATEGORY/NAME),
    at any version or at --version V, whether or not that version is in the plugin cache.

    Answered from the session index (files changed since are read again; --no-index reads
    every file). Exit 1 when some session could not be read: whether it used the plugin is
    unknown.
    """
    if not plugin or plugin.count("/") > 1 or plugin.endswith("/"):
        raise click.UsageError(f"{plugin!r}: give NAME or CATEGORY/NAME, e.g. model/anthropic")
    found = queries.plugin_users(
        app.require_sessions_dir(), plugin, version, use_index=not no_index
    )
    for n in found.notes:
        output.note(n)
    if as_json:
        output.emit_json(
            {
                "version": 1,
                "plugin": plugin,
                "plugin_version": version,
                "sessions": found.sessions,
                "by_version": found.versions,
                "unreadable": found.unknown,
                "summary": {"sessions": len(found.sessions), "unreadable": len(found.unknown)},
            }
        )
    else:
        output.emit_table(
            [(v, sid) for v, ids in found.versions.items() for sid in ids],
            ["plugin version", "session"],
            fmt,
        )
        output.note(
            f"{len(found.sessions)} session(s) used {plugin}" + (f" {version}" if version else "")
        )
    if found.unknown:
        unreadable_files(app, list(found.unknown), "whether they used it is unknown")
        return errors.EXIT_PROBLEMS
    return errors.EXIT_OK
