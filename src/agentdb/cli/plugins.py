"""``agentdb plugins``: the plugin cache as retained sessions see it."""

from __future__ import annotations

import click

from agentdb import errors, plugins
from agentdb.cli import output
from agentdb.cli.common import App, default_jobs, finish, fmt_option, jobs_option, json_option


@click.group("plugins")
def plugins_cmd() -> None:
    """The plugin cache as retained sessions see it (agentdb never deletes from it)."""


@plugins_cmd.command("refs")
@jobs_option("Read files")
@json_option
@fmt_option
@click.pass_obj
def refs_cmd(app: App, jobs: int | None, as_json: bool, fmt: str) -> int:
    """Each cached plugin version with the number of retained sessions that reference it, and
    the versions no retained session references (the ones a cache manager may evict).

    Exit 1 when some session could not be read: its references are unknown, so "unreferenced"
    is not final until it is recovered or removed. Exit 130 after Ctrl-C: the counts cover the
    sessions read before it, and no version is called unreferenced.
    """
    refs = plugins.refs(
        app.require_sessions_dir(), app.use_plugin_cache(), jobs=jobs or default_jobs()
    )
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
        shown = ", ".join(refs.unreadable[:3])
        output.warn(
            f"{len(refs.unreadable)} session(s) could not be read ({shown}); "
            "their references are unknown — run `agentdb check` on them"
        )
        return errors.EXIT_PROBLEMS
    return errors.EXIT_OK
