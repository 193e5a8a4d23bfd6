"""``agentdb demo``: build a sample state and walk through the operator commands on it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from agentdb import demo
from agentdb.cli import output

# The walk-through: (what it shows, argv after the global options). Each command adds its step.
# "{root}" in an argument stands for the demo's root directory, "{id:ROLE}" for the id of the
# sample session with that role.
WALKTHROUGH: list[tuple[str, list[str]]] = [
    ("every session, in chronological order, read from the files", ["sessions", "list"]),
    ("the parent/child tree, found by scanning the files", ["sessions", "tree"]),
    ("one session: costs by model, plan decisions by rule", ["sessions", "show", "{id:parent}"]),
    ("the event log in sequence order", ["events", "{id:child}", "--kind", "plan"]),
    ("what replaying the pinned session needs from the plugin cache", ["preflight", "{id:pinned}"]),
    ("see every session's health", ["check", "--all"]),
    ("salvage the damaged session", ["recover", "--all"]),
    ("bring old sessions to the current revision", ["migrate", "--all"]),
    ("take consistent copies", ["backup", "--all", "--to", "{root}/backups"]),
    ("healthy again: only the interrupted session is flagged", ["check", "--all"]),
    ("what an operator could prune (dry run)", ["prune", "--older-than", "90d", "--dry-run"]),
    ("cached plugin versions retained sessions still use", ["plugins", "refs"]),
]


@click.command("demo")
@click.argument("directory", required=False, type=click.Path(path_type=Path, file_okay=False))
@click.option("--no-walkthrough", is_flag=True, help="Only build the sample state.")
def demo_cmd(directory: Path | None, no_walkthrough: bool) -> int:
    """Build a realistic sample state in DIRECTORY (default: a new temporary directory) and run
    check, recover, migrate and prune on it.

    The sample has a parent session with children, a running (interrupted) session, completed
    sessions with costs and plan decisions, a revision-1 session, a session pinned by a cached
    plugin version, and a damaged session.
    """
    from agentdb.cli.main import main  # the walk-through runs the real commands

    root = directory or Path(tempfile.mkdtemp(prefix="agentdb-demo-"))
    if directory is not None and directory.exists() and any(directory.iterdir()):
        raise click.UsageError(f"{directory}: not empty; give a new or empty directory")
    state = demo.build(root)
    output.emit_text(f"Sample state in {root}")
    output.emit_table(
        [(s.session_id, s.role, s.path.name) for s in state.sessions],
        ["session", "what it shows", "file"],
    )
    globals_ = [
        "--sessions-dir",
        str(state.sessions_dir),
        "--plugin-cache",
        str(state.plugin_cache),
    ]
    if not no_walkthrough:
        for title, template in WALKTHROUGH:
            argv = [_fill(a, root, state) for a in template]
            shown = " ".join(["agentdb", *argv])
            output.emit_text(f"\n$ {shown}    # {title}")
            code = main([*globals_, *argv])
            output.emit_text(f"(exit {code})")
    output.emit_text(
        "\nTry it yourself:\n"
        f"  export XDG_STATE_HOME={root / 'state'} XDG_CACHE_HOME={root / 'cache'}\n"
        "  agentdb sessions list\n  agentdb check --all --json\n"
        "  agentdb prune --older-than 90d          # asks before removing anything\n"
        "  man -l man/agentdb-check.1               # from a checkout: every command has a page\n"
    )
    return 0


def _fill(arg: str, root: Path, state: demo.DemoState) -> str:
    arg = arg.replace("{root}", str(root))
    if arg.startswith("{id:") and arg.endswith("}"):
        return state.by_role(arg[4:-1]).session_id
    return arg
