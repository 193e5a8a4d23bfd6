"""Another session's ``session_meta`` page copied over this file's: the kernel's open refuses
it as :class:`~agentdb.errors.ForeignFile` (a ``SessionUnusable`` kind) at revisions 1 and 2 —
never ``MigrationFailed`` (revision 2 migrated it and failed its integrity check) nor
``Unreadable`` after running the recovery hook (revision 3's chain break took it for damage)
— and neither recovers nor migrates it. So does the writer's own open, without the kernel's
judge. Issue 29, item 4."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw
import pytest

from agentdb import errors, kernel, paths
from agentdb.store import SessionWriter
from tests.support import make_session


def _root(path: Path, name: str) -> tuple[int, int]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (name,))
        page = int(root.fetchall()[0][0])
        size = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
    finally:
        conn.close()
    return page, size


def _plant_meta_page(tmp_path: Path, revision: int) -> tuple[Path, str, Path, str]:
    """A session whose session_meta root page is another session's (same revision)."""
    sessions, elsewhere = tmp_path / "s", tmp_path / "o"
    sessions.mkdir(mode=0o700)
    elsewhere.mkdir(mode=0o700)
    sid, path = make_session(sessions, revision=revision)
    other, other_path = make_session(elsewhere, revision=revision)
    page, size = _root(path, "session_meta")
    theirs, _ = _root(other_path, "session_meta")
    data = bytearray(path.read_bytes())
    data[(page - 1) * size : page * size] = other_path.read_bytes()[
        (theirs - 1) * size : theirs * size
    ]
    path.write_bytes(bytes(data))
    return sessions, sid, path, other


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("revision", [1, 2])
def test_kernel_refuses_another_sessions_meta_page_as_foreign(
    tmp_path: Path, revision: int
) -> None:
    sessions, sid, path, other = _plant_meta_page(tmp_path, revision)
    before, names = _digest(path), sorted(p.name for p in sessions.iterdir())
    ran: list[str] = []

    def hook(p: Path, s: str) -> None:  # the kernel's hook, recording that it ran
        ran.append(s)
        kernel.recover_hook(sessions, s)

    with pytest.raises(errors.AgentdbError) as exc:
        SessionWriter.open(sessions, sid, recover=hook, judge=kernel.judge_hook)
    assert isinstance(exc.value, errors.ForeignFile), repr(exc.value)
    assert other in str(exc.value) and str(path) in str(exc.value)
    assert ran == []
    with pytest.raises(errors.ForeignFile):
        kernel.open_session(sessions, sid)
    assert sorted(p.name for p in sessions.iterdir()) == names  # no .corrupt, no replacement
    assert not paths.recovery_log_path(sessions).exists()
    assert _digest(path) == before


def test_at_revision_3_the_chain_outvotes_a_foreign_meta_page_and_the_kernel_recovers(
    tmp_path: Path,
) -> None:
    """Revision 3's chain starts at this session's genesis: the file is this session's with one
    foreign page (issue 29: "a foreign page never makes the whole file foreign"), so the
    kernel's open recovers it once, keeps the original as .corrupt and opens the session."""
    sessions, sid, path, other = _plant_meta_page(tmp_path, 3)
    ran: list[str] = []

    def hook(p: Path, s: str) -> None:
        ran.append(s)
        kernel.recover_hook(sessions, s)

    w = SessionWriter.open(sessions, sid, recover=hook, judge=kernel.judge_hook)
    try:
        assert w.info().session_id == sid
    finally:
        w.close()
    assert ran == [sid]
    assert (sessions / f"{sid}.sqlite.corrupt").exists()
    assert paths.recovery_log_path(sessions).exists()


@pytest.mark.parametrize("revision", [1, 2, 3])
def test_writer_without_a_judge_refuses_it_before_migrating(tmp_path: Path, revision: int) -> None:
    sessions, sid, path, other = _plant_meta_page(tmp_path, revision)
    before = _digest(path)
    with pytest.raises(errors.ForeignFile) as exc:
        SessionWriter.open(sessions, sid)
    assert other in str(exc.value)
    assert _digest(path) == before


def test_a_failed_migration_is_a_kind_the_kernel_skips() -> None:
    assert issubclass(errors.MigrationFailed, errors.SessionUnusable)
