"""The one way tests run the ``agentdb`` command line.

Two needs, one runner each:

- in-process (fast, the default): the ``agentdb`` fixture (``tests/conftest.py``) calls
  :func:`invoke`, which runs ``main()`` with stdout/stderr captured apart, an optional
  environment, and a hang guard (a run that takes longer than ``HANG`` seconds fails the test
  instead of stalling the suite);
- a real process, where the test needs one (exit status of the real console script, a kill,
  a umask, a fault point, another user): :func:`run_cli`.

Both answer with the exit code, stdout and stderr; nothing here mocks SQLite or agentdb.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from click.testing import CliRunner

from agentdb import demo
from agentdb.cli.main import main

HANG = 120  # seconds an in-process run may take before the test fails as a hang


class Ran(NamedTuple):
    """What one in-process run answered (unpacks as ``code, out, err``)."""

    code: int  # the exit code main() returned
    out: str  # everything written to stdout
    err: str  # everything written to stderr

    def json(self) -> Any:
        """stdout parsed as the one JSON document it must be."""
        return json.loads(self.out)


class Hang(Exception):
    """A run took longer than HANG seconds (not an OSError: main() must not swallow it)."""


def invoke(argv: Sequence[str], env: dict[str, str] | None = None, hang: int = HANG) -> Ran:
    """``agentdb argv`` in this process; ``env`` entries are set (``None`` unsets) for the run;
    :class:`Hang` is raised when it takes longer than ``hang`` seconds."""

    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {hang}s")

    runner = CliRunner(env=env)
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(hang)
    try:
        with runner.isolation() as (out, err, _):
            code = main(list(argv))
            o, e = out.getvalue(), err.getvalue()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return Ran(code, o.decode("utf-8", "replace"), e.decode("utf-8", "replace"))


def global_options(sessions_dir: Path, plugin_cache: Path | None = None) -> list[str]:
    """``--sessions-dir S [--plugin-cache C]``."""
    g = ["--sessions-dir", str(sessions_dir)]
    if plugin_cache is not None:
        g += ["--plugin-cache", str(plugin_cache)]
    return g


def state_options(state: demo.DemoState) -> list[str]:
    """The global options that point at a demo state's sessions and plugin cache."""
    return global_options(state.sessions_dir, state.plugin_cache)


class Agentdb:
    """The ``agentdb`` fixture: ``agentdb(*argv)`` runs in-process and returns a :class:`Ran`.

    ``agentdb.at(sessions_dir, plugin_cache)`` is a runner that puts those global options first.
    """

    def __init__(self, prefix: Sequence[str] = ()) -> None:
        self.prefix = list(prefix)

    def __call__(self, *argv: str, env: dict[str, str] | None = None) -> Ran:
        return invoke([*self.prefix, *argv], env=env)

    def at(self, sessions_dir: Path, plugin_cache: Path | None = None) -> Agentdb:
        return Agentdb([*self.prefix, *global_options(sessions_dir, plugin_cache)])


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    drop: Sequence[str] = (),
    fault: str | None = None,
    umask: int | None = None,
    prefix: Sequence[str] = (),
    preexec_fn: Callable[[], None] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a subprocess, stdin closed (prune never prompts).

    ``env`` adds to the inherited environment, ``drop`` removes names from it; ``fault`` sets
    ``AGENTDB_FAULT`` (which is never inherited otherwise); ``umask`` is set in the child;
    ``prefix`` goes before the interpreter (``setpriv …``); ``preexec_fn`` runs in the child.
    """
    full = {k: v for k, v in os.environ.items() if k not in drop and k != "AGENTDB_FAULT"}
    full.update(env or {})
    if fault:
        full["AGENTDB_FAULT"] = fault

    def child() -> None:
        if umask is not None:
            os.umask(umask)
        if preexec_fn is not None:
            preexec_fn()

    return subprocess.run(
        [*prefix, sys.executable, "-m", "agentdb.cli.main", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        preexec_fn=child if (umask is not None or preexec_fn is not None) else None,
    )
