"""Examples shown at the end of every command's ``--help`` (and in its man page's EXAMPLES).

Keyed by the command's path after ``agentdb``. Each example is a command line and what it does;
every command must have at least one (``tests/cli/test_common_options.py`` checks).
"""

from __future__ import annotations

# ``agentdb --help`` and man agentdb(1): a newcomer's first commands, then an operator's day
TOP: list[tuple[str, str]] = [
    ("agentdb demo", "build a sample state in a temporary folder and walk through it"),
    ("agentdb status", "what needs doing, on one screen, with the next commands"),
    ("agentdb check --changed --problems", "verify what changed; show only what is not ok"),
    ("agentdb recover --all --dry-run", "what salvaging the damaged sessions would do"),
    ("agentdb backup --all --to /srv/backup/agent", "copy every session; rerun daily"),
    ("agentdb prune --older-than 90d --dry-run", "what removing old sessions would do"),
    ("agentdb events --follow 01HZX3V5P3R6M9T4Q8K2W7Y1BC", "watch a live session's events"),
    ('eval "$(agentdb completion bash)"', "tab completion in this shell (~/.bashrc)"),
]

EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "backup": [
        ("agentdb backup --all --to /srv/backup/agent", "copy every session; rerun to update"),
        ("agentdb backup --verify /srv/backup/agent", "check every copy in a backup directory"),
    ],
    "check": [
        ("agentdb check", "verify every session (exit 1 if any is not ok)"),
        ("agentdb check --problems", "only the sessions that are not ok"),
        ("agentdb check --quick --json", "a faster pass, as one JSON document"),
        ("agentdb check 01HZX3V5P3R6M9T4Q8K2W7Y1BC", "verify one session"),
    ],
    "completion": [
        ('eval "$(agentdb completion bash)"', "complete commands and ids in bash (~/.bashrc)"),
        ('eval "$(agentdb completion zsh)"', "the same for zsh (~/.zshrc)"),
        (
            "agentdb completion fish > ~/.config/fish/completions/agentdb.fish",
            "the same for fish",
        ),
    ],
    "demo": [
        ("agentdb demo", "build a sample state in a new temporary folder and walk through it"),
        ("agentdb demo ~/agentdb-demo", "the same, in a folder you keep"),
    ],
    "events": [
        ("agentdb events 01HZX3V5P3R6M9T4Q8K2W7Y1BC", "the event log in sequence order"),
        (
            "agentdb events 01HZX3V5P3R6M9T4Q8K2W7Y1BC --kind message --after 100 --json",
            "message events after sequence 100, as JSON Lines",
        ),
        (
            "agentdb events --follow 01HZX3V5P3R6M9T4Q8K2W7Y1BC",
            "new events as the kernel writes them, until the session ends (Ctrl-C stops)",
        ),
    ],
    "migrate": [
        ("agentdb migrate --all --dry-run", "which sessions would be migrated"),
        ("agentdb migrate --all", "bring every session to the current revision"),
    ],
    "plugins": [("agentdb plugins refs", "cached plugin versions and the sessions using them")],
    "plugins users": [
        ("agentdb plugins users model/anthropic", "sessions that used any anthropic version"),
        (
            "agentdb plugins users anthropic --version 1.4.0 --json",
            "sessions that used version 1.4.0, as JSON",
        ),
    ],
    "plugins refs": [
        ("agentdb plugins refs", "cached plugin versions and the sessions using them"),
        ("agentdb plugins refs --json", "the same as one JSON document"),
    ],
    "preflight": [
        ("agentdb preflight 01HZX3V5P3R6M9T4Q8K2W7Y1BC", "what the cache lacks to replay it"),
    ],
    "prune": [
        ("agentdb prune --older-than 90d --dry-run", "what removing 90-day-old sessions would do"),
        ("agentdb prune --keep-last 100 --status completed", "keep the newest 100; asks first"),
        (
            "agentdb prune --older-than 1y --include-pinned --dry-run",
            "pinned sessions too; lists the plugin versions left unreferenced",
        ),
    ],
    "restore": [
        (
            "agentdb restore --all --from /srv/backup/agent --dry-run",
            "which missing or damaged sessions would be restored",
        ),
        (
            "agentdb restore 01HZX3V5P3R6M9T4Q8K2W7Y1BC --from /srv/backup/agent",
            "put one session's newest good copy back; the current file is kept",
        ),
    ],
    "recover": [
        ("agentdb recover --all --dry-run", "what would be salvaged, changing nothing"),
        ("agentdb recover 01HZX3V5P3R6M9T4Q8K2W7Y1BC", "salvage one damaged session"),
    ],
    "report": [
        ("agentdb report --html ~/agentdb-report.html", "the page: health, costs, tree, history"),
        ("agentdb report --html ~/agentdb-report.html --force", "replace yesterday's page"),
        ("agentdb report --json", "the numbers the page is made of"),
    ],
    "sessions": [("agentdb sessions list", "every session, oldest first")],
    "sessions end": [
        ("agentdb sessions end 01HZX3V5P3R6M9T4Q8K2W7Y1BC", "cancel a session whose kernel died"),
        (
            "agentdb sessions end 01HZX3V5P3R6M9T4Q8K2W7Y1BC --dry-run --json",
            "what would be ended, as JSON",
        ),
    ],
    "sessions list": [
        ("agentdb sessions list", "every session, oldest first"),
        ("agentdb sessions list --json", "the same as one JSON document"),
        (
            "agentdb sessions list --status completed --since 7d --sort cost --limit 10",
            "the ten most expensive sessions that ended in the last week",
        ),
        ("agentdb sessions list --parent 01HZX3V5P3R6M9T4Q8K2W7Y1BC", "one session's children"),
    ],
    "sessions costs": [
        ("agentdb sessions costs", "cost per day across every session"),
        ("agentdb sessions costs --by model --since 30d", "cost per model over the last 30 days"),
    ],
    "sessions show": [
        ("agentdb sessions show 01HZX3V5P3R6M9T4Q8K2W7Y1BC", "one session's row, cost, producers"),
    ],
    "sessions tree": [
        ("agentdb sessions tree", "the parent/child tree of every session"),
        ("agentdb sessions tree 01HZX3V5P3R6M9T4Q8K2W7Y1BC", "the tree around one session"),
    ],
    "status": [
        ("agentdb status", "counts, verdicts from the last check, and the next commands"),
        ("agentdb status --json", "the same as one JSON document"),
    ],
}


def epilog(path: str) -> str | None:
    """The examples of the command at ``path`` (``""``: the top level) as a help epilog (click
    keeps ``\\b`` blocks)."""
    examples = EXAMPLES.get(path) if path else TOP
    if not examples:
        return None
    lines = ["\b", "Examples:"]
    for command, what in examples:
        lines += [f"  $ {command}", f"      {what}"]
    return "\n".join(lines)
