from __future__ import annotations

import os
from pathlib import Path

import pytest
import ulid

from agentdb import errors, paths


def test_ulid_from_python_ulid_is_valid() -> None:
    for _ in range(100):
        assert paths.is_valid_id(str(ulid.ULID()))


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "../../etc/passwd",
        "01ARZ3NDEKTSV4RRFFQ69G5FA",  # 25 chars
        "01ARZ3NDEKTSV4RRFFQ69G5FAVV",  # 27 chars
        "01arz3ndektsv4rrffq69g5fav",  # lower case
        "01ARZ3NDEKTSV4RRFFQ69G5FAI",  # I is not Crockford
        "81ARZ3NDEKTSV4RRFFQ69G5FAV",  # overflows 48-bit time
        "01ARZ3NDEKTSV4RRFFQ69G5F*V",
        "01ARZ3NDEKTSV4RRFFQ69G5FA/",
    ],
)
def test_bad_ids_are_rejected_before_any_path(bad: str, tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidSessionId) as e:
        paths.session_path(tmp_path, bad)
    assert e.value.exit_code == 2


def test_xdg_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "st"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "ca"))
    assert paths.default_sessions_dir() == tmp_path / "st" / "agent" / "sessions"
    assert paths.default_plugin_cache() == tmp_path / "ca" / "agent" / "plugins"
    assert paths.recovery_log_path(paths.default_sessions_dir()) == (
        tmp_path / "st" / "agent" / "recovery.log"
    )
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.default_sessions_dir() == tmp_path / "home" / ".local/state/agent/sessions"


def test_entries_are_sorted_and_only_ulid_names(tmp_path: Path) -> None:
    ids = sorted(str(ulid.ULID()) for _ in range(5))
    for sid in reversed(ids):
        (tmp_path / f"{sid}.sqlite").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / f"{ids[0]}.sqlite-wal").write_bytes(b"")
    (tmp_path / f"{ids[0].lower()}.sqlite").write_bytes(b"")
    os.mkfifo(tmp_path / "01ARZ3NDEKTSV4RRFFQ69G5FAV.sqlite")
    got = [e.session_id for e in paths.iter_session_entries(tmp_path)]
    assert got == sorted([*ids, "01ARZ3NDEKTSV4RRFFQ69G5FAV"])


def test_missing_sessions_dir_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(errors.UsageError) as e:
        paths.require_sessions_dir(tmp_path / "nope")
    assert e.value.exit_code == 2
    assert "does not exist" in str(e.value)
