"""The ``agentdb`` console script: a click group; each command lives in its own module."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentdb import __version__, errors, paths
from agentdb.cli import commands
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
    help="Session files directory [default: $XDG_STATE_HOME/agent/sessions].",
)
@click.option(
    "--plugin-cache",
    type=click.Path(path_type=Path),
    default=None,
    metavar="PATH",
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


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map our errors to their exit codes with a one-line message on stderr."""
    try:
        rv = cli.main(args=argv, prog_name="agentdb", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("agentdb: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return errors.EXIT_USAGE
    except errors.AgentdbError as e:
        click.echo(f"agentdb: {e}", err=True)
        return e.exit_code
    except KeyboardInterrupt:
        click.echo("agentdb: interrupted", err=True)
        return 130
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
