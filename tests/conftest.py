from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from agentdb import fsutil
from tests.runner import Agentdb


@pytest.fixture(autouse=True, scope="session")
def _private_xdg_homes(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the suite out of the real home: agentdb's scratch space and anything that follows
    the XDG defaults lands in a temporary tree (subprocesses inherit it)."""
    root = tmp_path_factory.mktemp("xdg")
    os.environ["XDG_CACHE_HOME"] = str(root / "cache")
    os.environ["XDG_STATE_HOME"] = str(root / "state")


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_reaches_children() -> None:
    """A suite started in the background of a non-interactive shell (``cmd &``) inherits SIGINT
    ignored, and an ignored signal stays ignored across exec: every agentdb process a test
    starts would then shrug off the Ctrl-C tests/cli/test_interrupts.py sends (exit 0 where 130
    is expected). Handled here, it is back to the default in every child."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    d = tmp_path / "state" / "agent" / "sessions"
    fsutil.ensure_dir(d)
    return d


@pytest.fixture
def plugin_cache(tmp_path: Path) -> Path:
    d = tmp_path / "cache" / "agent" / "plugins"
    d.mkdir(parents=True)
    return d


@pytest.fixture
def agentdb() -> Agentdb:
    """Run the CLI in-process: ``code, out, err = agentdb(*argv)`` (see tests/runner.py)."""
    return Agentdb()
