"""Fault injection for crash and race tests, at named points.

``AGENTDB_FAULT=<point>`` kills the process at that point: tests run a real ``agentdb`` process
with the variable set and check what the file looks like after ``kill -9``.

``AGENTDB_PAUSE=<point>:<dir>`` stops the process there instead: it creates ``<dir>/reached``
and waits (at most :data:`PAUSE_MAX` seconds) until ``<dir>/go`` exists, so a test can run
another real job in exactly that window (a race made deterministic).
"""

from __future__ import annotations

import os
import signal
import time

ENV = "AGENTDB_FAULT"
PAUSE_ENV = "AGENTDB_PAUSE"
PAUSE_MAX = 60.0


def point(name: str) -> None:
    """SIGKILL this process if ``$AGENTDB_FAULT`` names this point; pause if
    ``$AGENTDB_PAUSE`` does; otherwise do nothing."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    spec = os.environ.get(PAUSE_ENV)
    if spec:
        where, _, gate = spec.partition(":")
        if where == name and gate:
            _pause(gate)


def _pause(gate: str) -> None:
    with open(os.path.join(gate, "reached"), "w"):
        pass
    deadline = time.monotonic() + PAUSE_MAX
    while not os.path.exists(os.path.join(gate, "go")) and time.monotonic() < deadline:
        time.sleep(0.01)
