"""The ``agentdb`` console script: a click group; each command lives in its own module."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentdb import __version__, errors, paths
from agentdb.cli import commands, output
from agentdb.cli.common import App


@click.group(
    cls=commands.LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--sessions-dir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="PATH",
    envvar="AGENTDB_SESSIONS_DIR",
    show_envvar=True,
    help="Session files directory [default: $XDG_STATE_HOME/agent/sessions].",
)
@click.option(
    "--plugin-cache",
    type=click.Path(path_type=Path),
    default=None,
    metavar="PATH",
    envvar="AGENTDB_PLUGIN_CACHE",
    show_envvar=True,
    help="Plugin cache [default: $XDG_CACHE_HOME/agent/plugins].",
)
@click.version_option(__version__, prog_name="agentdb")
@click.pass_context
def cli(ctx: click.Context, sessions_dir: Path | None, plugin_cache: Path | None) -> None:
    """Keep an agent harness's session history safe.

    One SQLite file per session, under $XDG_STATE_HOME/agent/sessions/<ULID>.sqlite. agentdb
    writes them as the state-backend spec says and checks, recovers, migrates, backs up and
    prunes them, safely beside a live kernel.
    """
    ctx.obj = App(
        sessions_dir=sessions_dir or paths.default_sessions_dir(),
        plugin_cache=plugin_cache or paths.default_plugin_cache(),
    )


RECURSION_LIMIT = 20_000


def _wants_json(argv: list[str]) -> bool:
    """``--json`` among the options (not after ``--``): errors are then JSON too."""
    return "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map our errors to their exit codes with a one-line message on stderr (one
    JSON object on stderr when the command was given ``--json``)."""
    args = sys.argv[1:] if argv is None else argv
    as_json = _wants_json(args)
    # a parent chain is as deep as there are sessions, and `sessions tree --json` nests one
    # level per generation: room for thousands of levels, then one line instead of a traceback
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    try:
        rv = cli.main(args=args, prog_name="agentdb", standalone_mode=False)
    except click.exceptions.Abort:
        output.error("aborted", code="interrupted", exit_code=130, as_json=as_json)
        return 130
    except click.ClickException as e:
        if not as_json:
            e.show()
        else:
            output.error(
                e.format_message(), code="usage", exit_code=errors.EXIT_USAGE, as_json=True
            )
        return errors.EXIT_USAGE
    except errors.AgentdbError as e:
        output.error(str(e), code=e.code, exit_code=e.exit_code, path=e.path, as_json=as_json)
        return e.exit_code
    except KeyboardInterrupt:
        output.error("interrupted", code="interrupted", exit_code=130, as_json=as_json)
        return 130
    except RecursionError:
        output.error(
            "a parent chain too deep to draw (thousands of generations of sessions); "
            "`agentdb sessions list --json` lists every session with its parent",
            code="too_deep",
            exit_code=errors.EXIT_PROBLEMS,
            as_json=as_json,
        )
        return errors.EXIT_PROBLEMS
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
