"""Named fault-injection points for crash tests: ``AGENTDB_FAULT=<name>`` kills us there."""

from __future__ import annotations

import os
import signal


def point(name: str) -> None:
    """SIGKILL this process if ``AGENTDB_FAULT`` names this point (as a power cut would stop it)."""
    if os.environ.get("AGENTDB_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
