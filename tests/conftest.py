from __future__ import annotations

from pathlib import Path

import pytest

from agentdb import fsutil


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
