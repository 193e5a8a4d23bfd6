"""The ``agentdb`` console script: a click group; each command lives in its own module."""

from __future__ import annotations

import os
import sys
from typing import Any

try:  # Ctrl-C while Python is still loading agentdb: nothing has started, so nothing to report
    from pathlib import Path

    import click

    from agentdb import __version__, errors, paths
    from agentdb.cli import commands, examples, output
    from agentdb.cli.common import EXIT_INTERRUPTED, App
    from agentdb.cli.params import DIRECTORY
except KeyboardInterrupt:
    sys.stderr.write("agentdb: interrupted\n")
    sys.exit(130)


@click.group(
    cls=commands.LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=examples.epilog(""),
)
@click.option(
    "--sessions-dir",
    type=DIRECTORY,
    default=None,
    metavar="PATH",
    envvar="AGENTDB_SESSIONS_DIR",
    show_envvar=True,
    help="Session files directory [default: $XDG_STATE_HOME/agent/sessions].",
)
@click.option(
    "--plugin-cache",
    type=DIRECTORY,
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
        plugin_cache_given=plugin_cache is not None,
    )


RECURSION_LIMIT = 20_000


def _wants_json(argv: list[str]) -> bool:
    """``--json`` among the options (not after ``--``): errors are then JSON too."""
    return "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv


def _usage_error(e: click.ClickException) -> str:
    """A click error as one line: the command, the problem, where to read more."""
    message = errors.one_line(e.format_message())
    ctx = getattr(e, "ctx", None)
    if ctx is None:
        return message
    command = ctx.command_path.removeprefix("agentdb").strip()
    return f"{command + ': ' if command else ''}{message} (see '{ctx.command_path} --help')"


def _fresh_line(as_json: bool) -> None:
    """End the terminal's echo of ^C, so the message starts a line of its own."""
    if output.is_terminal() and not as_json:
        click.echo(err=True)


def _stdout_gone() -> int:
    """The reader of our output went away while click wrote it (``agentdb --help | head -1``)."""
    output.discard_stdout()
    return errors.EXIT_OK


def _run(args: list[str]) -> Any:
    """Parse and run one command line. Not click's ``main``: that turns Ctrl-C into Abort and a
    closed stdout into exit 1; here each reaches :func:`main` as what it is."""
    if "_AGENTDB_COMPLETE" in os.environ:  # the shell asks for completions: click answers, exits
        return cli.main(args=list(args), prog_name="agentdb", complete_var="_AGENTDB_COMPLETE")
    with cli.make_context("agentdb", list(args)) as ctx:
        return cli.invoke(ctx)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map our errors to their exit codes with a one-line message on stderr (one
    JSON object on stderr when the command was given ``--json``)."""
    args = sys.argv[1:] if argv is None else argv
    as_json = _wants_json(args)
    # a parent chain is as deep as there are sessions, and `sessions tree --json` nests one
    # level per generation: room for thousands of levels, then one line instead of a traceback
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))

    def fail(message: str, code: str, exit_code: int, path: str | None = None) -> int:
        output.error(message, code=code, exit_code=exit_code, path=path, as_json=as_json)
        return exit_code

    if sys.stdout is None:  # started with stdout closed (`agentdb check >&-`)
        return fail(
            "stdout: closed; nothing was done — give the command an output (`>/dev/null` to "
            "drop it)",
            "usage",
            errors.EXIT_USAGE,
            "stdout",
        )
    try:
        try:
            rv = _run(args)
        except click.exceptions.Exit as e:  # --help, --version
            rv = e.exit_code
        except click.exceptions.Abort:  # Ctrl-C or end of input at a confirmation prompt
            _fresh_line(as_json)
            return fail("aborted, nothing changed", "interrupted", EXIT_INTERRUPTED)
        except click.exceptions.NoArgsIsHelpError as e:  # `agentdb`, `agentdb sessions`: help
            e.show()
            return e.exit_code
        except click.ClickException as e:
            return fail(_usage_error(e), "usage", e.exit_code)
        except errors.AgentdbError as e:
            return fail(errors.one_line(str(e)), e.code, e.exit_code, e.path)
        except KeyboardInterrupt:
            _fresh_line(as_json)
            return fail("interrupted", "interrupted", EXIT_INTERRUPTED)
        except RecursionError:
            return fail(
                "a parent chain too deep to draw (thousands of generations of sessions); "
                "`agentdb sessions list --json` lists every session with its parent",
                "too_deep",
                errors.EXIT_PROBLEMS,
            )
        except BrokenPipeError:
            return _stdout_gone()
        except OSError as e:  # an environment failure no job turned into a report
            where = e.filename if e.filename is not None else "agentdb"
            return fail(f"{where}: {e.strerror or e}", "os_error", errors.EXIT_PROBLEMS, where)
        try:
            sys.stdout.flush()  # a closed pipe shows here when the output fit in the buffer
        except BrokenPipeError:
            raise
        except OSError as e:  # /dev/full: the write that failed was stdout's
            output.discard_stdout()
            e = output.stdout_error(e)
            return fail(f"stdout: {e.strerror}", "os_error", errors.EXIT_PROBLEMS, "stdout")
    except BrokenPipeError:
        return _stdout_gone()
    except KeyboardInterrupt:  # a second Ctrl-C while the first was being reported
        return EXIT_INTERRUPTED
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
