from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from agentdb import fsutil
from tests import quick_tier
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


def _quick_tier_run(config: pytest.Config) -> bool:
    """``-m "not slow"`` exactly (the quick tier, over whichever paths)."""
    return str(config.getoption("markexpr", "") or "").strip() == "not slow"


def _whole_quick_tier(config: pytest.Config) -> bool:
    """The quick tier of the whole suite: ``-m "not slow"`` over tests/ with no other filter."""
    if not _quick_tier_run(config) or config.getoption("keyword", ""):
        return False
    if config.getoption("collectonly", False) or config.getoption("lf", False):
        return False
    if config.getoption("deselect", None) or config.getoption("ignore", None):
        return False
    here = config.invocation_params.dir
    return [(here / a.split("::")[0]).resolve() for a in config.args] == [quick_tier.TESTS]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A quick-tier run does not even import the files marked slow as a whole: it saves their
    imports' time, and their imports do not count towards the check below."""
    if (
        _quick_tier_run(config)
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and quick_tier.slow_file(collection_path)
    ):
        return True
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A passing quick-tier run of the whole suite fails if some module of src/agentdb was not
    imported by it (tests/quick_tier.py says what this checks and what it does not)."""
    if exitstatus != 0 or not _whole_quick_tier(session.config):
        return
    loaded = {m for m in sys.modules if m == "agentdb" or m.startswith("agentdb.")}
    gone = quick_tier.missing(loaded)
    if not gone:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = (
        f"quick tier: {len(gone)} module(s) of src/agentdb imported by no test that "
        f'`-m "not slow"` runs: {", ".join(gone)}; give each a quick test (or unmark one)'
    )
    if reporter is not None:
        reporter.write_line(message, red=True, bold=True)
    else:
        sys.stderr.write(message + "\n")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
