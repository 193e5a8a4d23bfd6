"""The man-page sections that are not in ``--help``: EXAMPLES, ENVIRONMENT, FILES, SEE ALSO.

A command's examples come from an ``Examples:`` block in its help text when it has one, else
from :data:`EXAMPLES` here (the drift test regenerates the pages from both).
"""

from __future__ import annotations

ID = "01J9Z8Q4N5X7W3V2T6R8Y0P1KM"

EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "agentdb": [
        ("agentdb demo", "build a sample state in a temporary folder and walk through it"),
        ("agentdb status", "what needs doing, on one screen"),
        ("agentdb check --problems", "verify every session; show only what is not ok"),
    ],
    "agentdb check": [
        ("agentdb check", "every session, in parallel"),
        ("agentdb check --problems", "only the sessions that are not ok"),
        (f"agentdb check {ID} --json", "one session, as JSON"),
        ("agentdb check --quick --jobs 2", "quick_check instead of integrity_check"),
    ],
    "agentdb recover": [
        ("agentdb recover --all --dry-run", "what recovery would salvage, changing nothing"),
        (f"agentdb recover {ID}", "salvage one session; the original is kept as .corrupt"),
    ],
    "agentdb migrate": [
        ("agentdb migrate --all --dry-run", "which sessions would be migrated"),
        ("agentdb migrate --all", "bring every session to the current revision"),
    ],
    "agentdb prune": [
        ("agentdb prune --older-than 90d --dry-run", "what would be removed, and why not"),
        ("agentdb prune --older-than 90d", "remove them, after a confirmation"),
    ],
    "agentdb backup": [
        ("agentdb backup --all --to /srv/agentdb-backup", "consistent copies of every session"),
    ],
    "agentdb sessions": [("agentdb sessions list --status running", "sessions still running")],
    "agentdb sessions list": [
        ("agentdb sessions list --status running", "sessions still running"),
        ("agentdb sessions list --json | jq '.summary'", "counts and total cost"),
    ],
    "agentdb sessions show": [(f"agentdb sessions show {ID}", "one session in detail")],
    "agentdb sessions tree": [("agentdb sessions tree", "every session under its parent")],
    "agentdb events": [
        (f"agentdb events {ID} --kind message", "the model's messages, in order"),
        (f"agentdb events {ID} --after 100 --json", "events after sequence 100, JSON Lines"),
    ],
    "agentdb preflight": [(f"agentdb preflight {ID}", "plugins to install before replaying")],
    "agentdb plugins": [("agentdb plugins refs", "which cached plugin versions sessions use")],
    "agentdb plugins refs": [("agentdb plugins refs --json", "the same, as JSON")],
    "agentdb status": [
        ("agentdb status", "counts, verdicts from the last check, the next commands"),
        ("agentdb status --json | jq '.next'", "just the next commands"),
    ],
    "agentdb demo": [
        ("agentdb demo", "in a temporary folder (the output says where, and how to remove it)"),
        ("agentdb demo ~/agentdb-demo", "in a folder of your choice"),
    ],
}

ENVIRONMENT = [
    (
        "XDG_STATE_HOME",
        "session files live in $XDG_STATE_HOME/agent/sessions (default "
        "~/.local/state); the recovery log beside them",
    ),
    (
        "XDG_CACHE_HOME",
        "the plugin cache is $XDG_CACHE_HOME/agent/plugins (default ~/.cache); "
        "agentdb's own derived data is under $XDG_CACHE_HOME/agentdb",
    ),
    ("AGENTDB_FAULT", "for tests only: kill the job at the named fault point"),
]

FILES = [
    ("$XDG_STATE_HOME/agent/sessions/<ULID>.sqlite", "one session (with its -wal and -shm)"),
    ("<ULID>.sqlite.corrupt[.N]", "the damaged original of a recovered session"),
    ("$XDG_STATE_HOME/agent/recovery.log", "every recovery, one JSON object per line"),
    ("$XDG_CACHE_HOME/agent/plugins/<category>/<name>/<version>/", "the plugin cache"),
    (
        "$XDG_CACHE_HOME/agentdb/verdicts.sqlite",
        "the last verdict check gave each session (derived: delete it any time)",
    ),
]


def examples_from_help(help_text: str) -> list[tuple[str, str]]:
    """``command   # what it does`` lines of an ``Examples:`` block in a help text."""
    out: list[tuple[str, str]] = []
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Examples:":
            for ex in lines[i + 1 :]:
                if not ex.strip():
                    break
                cmd, _, why = ex.strip().partition("#")
                out.append((cmd.strip(), why.strip()))
    return out


def without_examples(help_text: str) -> str:
    """The help text without its ``Examples:`` block (the page has a section for it)."""
    paras = help_text.split("\n\n")
    return "\n\n".join(p for p in paras if "Examples:" not in [ln.strip() for ln in p.splitlines()])
