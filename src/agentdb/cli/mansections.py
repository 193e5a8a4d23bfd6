"""The man-page sections that are not in the help text: EXAMPLES (a command's come from
:mod:`agentdb.cli.examples`, as in its ``--help``), ENVIRONMENT, FILES, SEE ALSO."""

from __future__ import annotations

from agentdb.cli import examples

# The top page's examples: the same as `agentdb --help`'s.
TOP_EXAMPLES: list[tuple[str, str]] = examples.TOP

ENVIRONMENT = [
    ("AGENTDB_SESSIONS_DIR", "the sessions directory, as --sessions-dir gives it"),
    ("AGENTDB_PLUGIN_CACHE", "the plugin cache, as --plugin-cache gives it"),
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
    (
        "<ULID>.sqlite.agentdb-<job>-<what>",
        "a file a job keeps beside a session while it works (a prune's intent, a recovery's "
        "temporary copy); a run cut short leaves it, check reports it, and the next run of that "
        "job finishes or removes it",
    ),
    ("$XDG_STATE_HOME/agent/recovery.log", "every recovery, one JSON object per line"),
    ("$XDG_CACHE_HOME/agent/plugins/<category>/<name>/<version>/", "the plugin cache"),
    (
        "$XDG_CACHE_HOME/agentdb/index.sqlite",
        "the session index and the last verdict check gave each session (derived: delete it "
        "any time; every answer is validated by stat against the files)",
    ),
]
