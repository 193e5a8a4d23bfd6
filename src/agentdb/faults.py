"""Fault injection for crash tests: ``AGENTDB_FAULT=<point>`` kills the process at that point.

Jobs call :func:`point` at each step a crash could interrupt; tests run a real ``agentdb``
process with the variable set and check what the file looks like after ``kill -9``.
"""

from __future__ import annotations

import os
import signal

ENV = "AGENTDB_FAULT"


def point(name: str) -> None:
    """SIGKILL this process if ``$AGENTDB_FAULT`` names this point; otherwise do nothing."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
