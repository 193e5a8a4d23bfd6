"""Roff man pages generated from the click tree; ``man/`` holds them, a test checks for drift.

Regenerate after changing a command: ``python -m agentdb.cli.manpages man``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentdb import __version__
from agentdb.cli import examples as examples_of
from agentdb.cli import mansections

DATE = "2026-11-30"


def _esc(text: str) -> str:
    out = text.replace("\\", "\\\\").replace("-", "\\-")
    return "\n".join(("\\&" + ln if ln.startswith((".", "'")) else ln) for ln in out.splitlines())


def page_name(path: list[str]) -> str:
    return "-".join(path)


def iter_commands(cmd: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None:
                out.extend(iter_commands(sub, [*path, name]))
    return out


def render(path: list[str], cmd: click.Command, ctx: click.Context) -> str:
    name = page_name(path)
    help_text = (cmd.help or "").strip()
    summary = cmd.get_short_help_str(200).rstrip(".")
    lines = [
        f'.TH {name.upper()} 1 "{DATE}" "agentdb {__version__}" "agentdb manual"',
        ".SH NAME",
        f"{_esc(name)} \\- {_esc(summary)}",
        ".SH SYNOPSIS",
        f".B {_esc(' '.join(path))}",
        _esc(" ".join(cmd.collect_usage_pieces(ctx))),
        ".SH DESCRIPTION",
    ]
    for para in help_text.split("\n\n"):
        lines.append(_esc(" ".join(para.split())))
        lines.append(".PP")
    if isinstance(cmd, click.Group):
        lines.append(".SH COMMANDS")
        for sub in cmd.list_commands(ctx):
            sc = cmd.get_command(ctx, sub)
            if sc is None:
                continue
            lines += [".TP", f".B {_esc(sub)}", _esc(sc.get_short_help_str(1000))]
    opts = [p for p in cmd.get_params(ctx) if isinstance(p, click.Option)]
    if opts:
        lines.append(".SH OPTIONS")
        for p in opts:
            rec = p.get_help_record(ctx)
            if rec is None:
                continue
            lines += [".TP", f".B {_esc(rec[0])}", _esc(rec[1] or "")]
    examples = (
        examples_of.EXAMPLES.get(" ".join(path[1:]), [])
        if len(path) > 1
        else mansections.TOP_EXAMPLES
    )
    if examples:
        lines.append(".SH EXAMPLES")
        for command, why in examples:
            lines += [".TP", f".B {_esc(command)}", _esc(why or "")]
    lines += [
        ".SH EXIT STATUS",
        "0: nothing wrong, or everything asked was done.",
        ".br",
        "1: problems found, or part of the job refused or not done.",
        ".br",
        "2: usage error (bad option, bad id, missing sessions directory).",
        ".br",
        "130: interrupted (Ctrl\\-C); what was finished before is reported.",
        ".SH ENVIRONMENT",
    ]
    for var, what in mansections.ENVIRONMENT:
        lines += [".TP", f".B {_esc(var)}", _esc(what)]
    lines.append(".SH FILES")
    for name, what in mansections.FILES:
        lines += [".TP", f".I {_esc(name)}", _esc(what)]
    lines += [".SH SEE ALSO", _see_also(path, cmd, ctx)]
    return "\n".join(lines) + "\n"


def _see_also(path: list[str], cmd: click.Command, ctx: click.Context) -> str:
    """The parent page, the pages of subcommands, and sqlite3(1)."""
    refs = []
    if len(path) > 1:
        refs.append(page_name(path[:-1]))
    if isinstance(cmd, click.Group):
        refs += [page_name([*path, sub]) for sub in cmd.list_commands(ctx)]
    return ", ".join(f"\\fB{_esc(r)}\\fR(1)" for r in [*refs, "sqlite3"])


def all_pages() -> dict[str, str]:
    from agentdb.cli.main import cli

    pages = {}
    # Contexts chained as a real invocation chains them, so every command sees the group's
    # context settings (``-h`` as well as ``--help``) however click cached its help option.
    contexts: dict[tuple[str, ...], click.Context] = {}
    for path, cmd in iter_commands(cli, ["agentdb"]):
        parent = contexts.get(tuple(path[:-1]))
        ctx = cmd.make_context(" ".join(path), [], parent=parent, resilient_parsing=True)
        contexts[tuple(path)] = ctx
        pages[page_name(path) + ".1"] = render(path, cmd, ctx)
    return pages


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, text in all_pages().items():
        p = directory / fname
        p.write_text(text)
        written.append(p)
    for stale in directory.glob("agentdb*.1"):
        if stale.name not in all_pages():
            stale.unlink()
    return written


if __name__ == "__main__":
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else "man")):
        print(p)
