"""What every command shares: the app object, id parsing, selection and output options."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agentdb import errors, paths
from agentdb.cli import output
from agentdb.cli.params import TABLE_FORMAT

if TYPE_CHECKING:  # imported by completion itself, not by every command
    from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])

EXIT_INTERRUPTED = 130  # Ctrl-C: what was finished before it is reported


@dataclass
class App:
    """Global options, resolved once."""

    sessions_dir: Path  # --sessions-dir or $XDG_STATE_HOME/agent/sessions
    plugin_cache: Path  # --plugin-cache or $XDG_CACHE_HOME/agent/plugins
    plugin_cache_given: bool = False  # --plugin-cache was given

    @property
    def recovery_log(self) -> Path:
        return paths.recovery_log_path(self.sessions_dir)

    def require_sessions_dir(self) -> Path:
        return paths.require_sessions_dir(self.sessions_dir)

    def use_plugin_cache(self) -> Path:
        """The plugin cache, with a warning when it is missing because a relative
        $XDG_CACHE_HOME was ignored (every producer would otherwise just look missing)."""
        if not self.plugin_cache_given and not os.path.lexists(self.plugin_cache):
            ignored = paths.ignored_xdg("XDG_CACHE_HOME")
            if ignored is not None:
                output.warn(
                    f"{self.plugin_cache}: plugin cache does not exist, and {ignored} "
                    "(or pass --plugin-cache)"
                )
        return self.plugin_cache


def finish(ok: bool, interrupted: bool, done: int, what: str) -> int:
    """A job's exit code; after Ctrl-C, a warning that the report covers only ``done`` sessions
    (the one in hand when it came is as an interrupted run leaves it: run the job again)."""
    if interrupted:
        output.warn(
            f"interrupted: the report covers the {done} session(s) {what} before Ctrl-C; "
            "run the command again to finish"
        )
        return EXIT_INTERRUPTED
    return errors.EXIT_OK if ok else errors.EXIT_PROBLEMS


def unreadable_files(app: App, ids: list[str], what: str) -> None:
    """The one warning for sessions a query could not read (exit 1 follows: a problem was
    found): each file named, and the command that says what is wrong with them."""
    shown = ", ".join(str(paths.session_path(app.sessions_dir, s)) for s in ids[:3])
    more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
    which = " ".join(ids[:3]) if len(ids) <= 3 else "--problems"
    output.warn(
        f"{len(ids)} session file(s) could not be read: {shown}{more}; {what} — run "
        f"`agentdb check {which}`"
    )


class SessionIdType(click.ParamType):
    """A ULID session id; anything else is a usage error before any file is touched."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if isinstance(value, str) and paths.is_valid_id(value):
            return value
        if isinstance(value, str) and paths.is_valid_id(value.upper()):
            self.fail(
                f"{value!r} is not a session id: ids are upper case; did you mean {value.upper()}?",
                param,
                ctx,
            )
        self.fail(
            f"{value!r} is not a session id (a ULID: 26 upper-case Crockford base32 characters)",
            param,
            ctx,
        )

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        """The session ids in the sessions directory that start with what was typed (file names
        only: completion never opens a session file)."""
        from click.shell_completion import CompletionItem

        root = ctx.find_root()
        given = root.params.get("sessions_dir")
        sessions_dir = Path(given) if given else paths.default_sessions_dir()
        prefix = incomplete.upper()
        try:
            entries = paths.iter_session_entries(sessions_dir)
            return [
                CompletionItem(e.session_id) for e in entries if e.session_id.startswith(prefix)
            ]
        except OSError:
            return []


SESSION_ID = SessionIdType()


@dataclass(frozen=True)
class Selection:
    """Which sessions a command acts on."""

    ids: tuple[str, ...]  # explicit ids, in the order given, de-duplicated
    all: bool  # --all (or no ids where the command allows that)


def session_selection(*, required: bool = True) -> Callable[[F], F]:
    """``ID...`` and ``--all``, the one way every command that acts on sessions by id selects
    them (read back with :func:`make_selection`). With ``required``, one of them must be given;
    without, no ids means every session."""
    help_all = (
        "Every session in the directory."
        if required
        else "Every session (the default when no ID is given)."
    )

    def deco(f: F) -> F:
        def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
            return value

        f = click.option("--all", "all_", is_flag=True, help=help_all)(f)
        f = click.argument("ids", nargs=-1, type=SESSION_ID, callback=callback)(f)
        return f

    deco.required = required  # type: ignore[attr-defined]
    return deco


def make_selection(ids: tuple[str, ...], all_: bool, *, required: bool = True) -> Selection:
    if ids and all_:
        raise click.UsageError("give session ids or --all, not both")
    if required and not ids and not all_:
        raise click.UsageError("give one or more session ids, or --all")
    return Selection(tuple(dict.fromkeys(ids)), all_ or not ids)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")(f)


def fmt_option(f: F) -> F:
    return click.option(
        "--fmt",
        type=TABLE_FORMAT,
        default="simple",
        show_default=True,
        metavar="FORMAT",
        help="tabulate table format for text output (simple, github, plain, grid, ...).",
    )(f)


def default_jobs() -> int:
    """The CPUs this process may use: its affinity, capped by its cgroup's CPU quota."""
    from agentdb import cores  # not workers: multiprocessing only when a pool starts

    return cores.usable_cores()


def jobs_option(what: str) -> Callable[[F], F]:
    """``--jobs/-j N``: parallel worker processes (default: the usable cores)."""

    def deco(f: F) -> F:
        return click.option(
            "--jobs",
            "-j",
            type=click.IntRange(1, 256),
            default=None,
            metavar="N",
            help=f"{what} in N parallel processes [default: the CPUs this process may use: its "
            "affinity, capped by its cgroup's CPU quota].",
        )(f)

    return deco


def wait_option(help: str) -> Callable[[F], F]:
    """``--wait SECONDS`` (finite, 0 to a day) for the jobs that act on a session someone may
    have open: migrate, recover, prune."""
    from agentdb.cli.params import SecondsType

    def deco(f: F) -> F:
        return click.option(
            "--wait",
            type=SecondsType(maximum=86400),
            default=None,
            metavar="SECONDS",
            help=help,
        )(f)

    return deco


def no_index_option(f: F) -> F:
    """``--no-index``: read every session file instead of the derived index."""
    return click.option(
        "--no-index",
        "no_index",
        is_flag=True,
        help="Read every session file instead of using the derived index in "
        "$XDG_CACHE_HOME/agentdb/ (the answer is the same; this is slower).",
    )(f)
