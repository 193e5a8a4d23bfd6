"""``agentdb demo``: build a sample state and walk through the operator commands on it."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

import agentdb
from agentdb.cli import output, tables
from agentdb.cli.params import OUTPUT_DIR
from agentdb.jobs import demo

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
    ("one screen: what needs doing, and the next commands", ["status"]),
]


@click.command("demo")
@click.argument("directory", required=False, type=OUTPUT_DIR)
@click.option("--no-walkthrough", is_flag=True, help="Only build the sample state.")
def demo_cmd(directory: Path | None, no_walkthrough: bool) -> int:
    """Build a realistic sample state in DIRECTORY (default: a new temporary directory) and run
    check, recover, migrate and prune on it.

    The sample has a parent session with children, a running (interrupted) session, completed
    sessions with costs and plan decisions, a revision-1 session, a session pinned by a cached
    plugin version, and a damaged session.
    """
    from agentdb.cli.main import main  # the walk-through runs the real commands

    temporary = directory is None
    root = (directory or Path(tempfile.mkdtemp(prefix="agentdb-demo-"))).absolute()
    if directory is not None and directory.exists() and any(directory.iterdir()):
        raise click.UsageError(f"{directory}: not empty; give a new or empty directory")
    state = demo.build(root)
    output.emit_text(f"Sample state in {root}")
    if temporary:
        output.emit_text(f"(a temporary folder: remove it with `rm -rf {root}` when done)")
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
    # The walk-through runs as the "try it yourself" lines below do: with the demo's own XDG
    # homes, so what check records there is what `agentdb status` shows afterwards.
    homes = {"XDG_STATE_HOME": str(root / "state"), "XDG_CACHE_HOME": str(root / "cache")}
    if not no_walkthrough:
        saved = {k: os.environ.get(k) for k in homes}
        os.environ.update(homes)
        try:
            for title, template in WALKTHROUGH:
                argv = [_fill(a, root, state) for a in template]
                shown = " ".join([how_to_run().agentdb, *map(shlex.quote, argv)])
                line = f"$ {shown}    # {title}"
                if sys.stdout.isatty() and len(line) > tables.terminal_width(1):
                    line = f"# {title}\n$ {shown}"  # the comment above: each line fits
                output.emit_text("\n" + line)
                code = main([*globals_, *argv])
                output.emit_text(f"(exit {code})")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    cmd = how_to_run()
    lines = [
        f"export XDG_STATE_HOME={shlex.quote(homes['XDG_STATE_HOME'])} "
        f"XDG_CACHE_HOME={shlex.quote(homes['XDG_CACHE_HOME'])}",
        f"{cmd.agentdb} sessions list",
        f"{cmd.agentdb} check --problems",
        f"{cmd.agentdb} status",
        f"{cmd.agentdb} report --html {shlex.quote(str(root / 'report.html'))}",
        f"{cmd.agentdb} prune --older-than 90d --dry-run",
        cmd.man,
    ]
    output.emit_text(
        "\nTry it yourself (copy these lines as they are):\n"
        + "".join(f"  {line}\n" for line in lines)
        + "".join(f"{note}\n" for note in cmd.notes)
        + (f"Remove the demo with: rm -rf {shlex.quote(str(root))}\n" if temporary else "")
    )
    return 0


def _fill(arg: str, root: Path, state: demo.DemoState) -> str:
    arg = arg.replace("{root}", str(root))
    if arg.startswith("{id:") and arg.endswith("}"):
        return state.by_role(arg[4:-1]).session_id
    return arg


@dataclass(frozen=True)
class HowToRun:
    """How a shell on this machine reaches this installation's ``agentdb`` and its man pages."""

    agentdb: str  # the command to type: ``agentdb`` when PATH finds this one, else its full path
    man: str  # a ``man`` command line that opens agentdb-check(1) as printed
    notes: tuple[str, ...]  # lines saying how to shorten those (activate the venv)


def how_to_run() -> HowToRun:
    """The ``agentdb`` command and ``man`` line that work as printed in the shell the demo was
    started from: a venv is usually not on PATH right after ``pip install``, so then the
    console script's full path (the one beside this interpreter), and ``MANPATH=`` pointing at
    the pages pip installed in ``<prefix>/share/man`` (man-db finds them through PATH once the
    venv's ``bin`` is on it)."""
    bindir = Path(sys.executable).parent  # not resolved: a venv's python is a symlink
    script = bindir / "agentdb"
    found = shutil.which("agentdb")
    on_path = found is not None and script.exists() and os.path.samefile(found, script)
    installed = Path(sys.prefix) / "share" / "man"
    pages = (installed / "man1" / "agentdb-check.1").exists()  # pip install, not editable
    if pages:
        man = (
            "man agentdb-check"
            if on_path and not os.environ.get("MANPATH")  # a set MANPATH turns PATH's off
            else f"MANPATH={shlex.quote(str(installed))} man agentdb-check"
        )
    else:  # an editable install carries the pages only inside the package
        page = Path(agentdb.__file__).parent / "man" / "agentdb-check.1"
        man = f"man {shlex.quote(str(page))}"
    notes: list[str] = []
    if on_path:
        agentdb_cmd = "agentdb"
    elif script.exists():
        agentdb_cmd = shlex.quote(str(script))
        if (bindir / "activate").exists():
            also = " and `man agentdb-check`" if pages else ""
            notes.append(
                f"(or put the venv on PATH first: `. {shlex.quote(str(bindir / 'activate'))}`; "
                f"then `agentdb ...`{also} work as they are)"
            )
    else:  # no console script beside the interpreter (run as `python -m agentdb.cli.main`)
        agentdb_cmd = f"{shlex.quote(sys.executable)} -m agentdb.cli.main"
    return HowToRun(agentdb_cmd, man, tuple(notes))
