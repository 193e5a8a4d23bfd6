"""``agentdb completion SHELL``: print the shell completion script (click's own machinery)."""

from __future__ import annotations

import click

from agentdb.cli import output

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_AGENTDB_COMPLETE"  # what the script sets when the shell asks agentdb


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion_cmd(shell: str) -> int:
    """Print the shell completion script for SHELL: commands, options and session ids.

    Load it in the shell's start-up file, e.g. for bash in ~/.bashrc:
    eval "$(agentdb completion bash)"; for zsh in ~/.zshrc: eval "$(agentdb completion zsh)";
    for fish: agentdb completion fish > ~/.config/fish/completions/agentdb.fish. The same as
    _AGENTDB_COMPLETE=bash_source agentdb (zsh_source, fish_source).
    """
    from click.shell_completion import get_completion_class

    from agentdb.cli.main import cli

    cls = get_completion_class(shell)
    assert cls is not None  # click ships all three
    output.emit_text(cls(cli, {}, "agentdb", COMPLETE_VAR).source().rstrip("\n"))
    return 0
