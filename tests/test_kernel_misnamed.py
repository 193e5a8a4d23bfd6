"""The kernel's open of a file whose session_meta names another session (a session copied or
renamed under another id): nothing is damaged, so no recovery is attempted and no "damaged and
unsalvageable (healthy)" is reported; the file is refused as another session's, unchanged."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from agentdb import errors, kernel, paths
from agentdb.store import new_session_id
from tests.rows import all_rows
from tests.support import make_session


@pytest.mark.slow
def test_a_session_under_another_id_is_refused_without_recovery(
    sessions_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid, path = make_session(sessions_dir)
    other = new_session_id()
    copy = paths.session_path(sessions_dir, other)
    shutil.copy2(path, copy)
    before = all_rows(copy)
    with caplog.at_level(logging.WARNING), pytest.raises(errors.ForeignFile) as exc:
        kernel.open_session(sessions_dir, other)
    assert sid in str(exc.value) and str(copy) in str(exc.value)
    assert isinstance(exc.value, errors.SessionUnusable)
    assert not any("damaged" in r.getMessage() for r in caplog.records)
    # Left as it was: no .corrupt, no recovery log entry, the same rows.
    assert sorted(p.name for p in sessions_dir.iterdir()) == sorted([path.name, copy.name])
    assert not paths.recovery_log_path(sessions_dir).exists()
    assert all_rows(copy) == before


def test_the_recovery_hook_never_calls_a_healthy_file_damaged(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir)
    with pytest.raises(errors.Corrupt) as exc:
        kernel.recover_hook(sessions_dir, sid)
    assert "no damage" in str(exc.value) and "unsalvageable" not in str(exc.value)
    assert sorted(p.name for p in sessions_dir.iterdir()) == [path.name]
