from __future__ import annotations

import pytest

from agentdb.jobs import demo


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory: pytest.TempPathFactory) -> demo.DemoState:
    """One demo state shared by a module's read-only tests (they must leave it as it is)."""
    return demo.build(tmp_path_factory.mktemp("demo") / "d")
