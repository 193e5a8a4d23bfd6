from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.build_sqlite_shell import ensure_shell, last_error


@pytest.fixture(scope="session")
def capable_shell() -> Path:
    """A sqlite3 shell whose .recover works, built once per run; skips when it cannot be."""
    path = ensure_shell()
    if path is None:
        pytest.skip(last_error() or "cannot build a sqlite3 shell with .recover")
    return path
