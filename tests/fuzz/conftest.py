from __future__ import annotations

import pytest

from tests.tools.build_sqlite_shell import ensure_shell


@pytest.fixture(autouse=True, scope="session")
def _dot_recover_shell() -> None:
    """Build the sqlite3 shell with a working ``.recover`` before the first case, so every case
    of the run is compared with it (tests/salvage would build it later, after these ran); when
    it cannot be built, the cases run without that comparison and test_generator says so."""
    ensure_shell()
