"""The writer's open asks a judge (the kernel passes ``agentdb check``'s) before it writes: a
revision-2 file whose event hash fails is damage on open (the recovery hook runs), and the
migration ladder never runs on a file the judge calls damaged. Real files, real damage."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import apsw
import pytest

from agentdb import checks, errors, kernel, paths
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.store import SessionReader, SessionWriter
from agentdb.store import opening as opening_module
from tests.rows import all_rows, invalid_text, payload_without_hash
from tests.support import make_session


def _user_version(path: Path) -> int:
    c = apsw.Connection(f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_URI | 1)
    try:
        return int(c.execute("PRAGMA user_version").fetchall()[0][0])
    finally:
        c.close()


@pytest.mark.slow
def test_a_hash_failure_is_damage_on_the_kernels_open(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=4)
    payload_without_hash(path)
    assert checks.judge(path, sid).verdict == "corrupt"  # integrity_check alone sees nothing
    w = kernel.open_session(sessions_dir, sid)
    try:
        assert w.revision == CURRENT_REVISION
    finally:
        w.close()
    corrupt = path.with_name(path.name + ".corrupt")
    assert corrupt.exists(), "the recovery hook ran and kept the original"
    assert checks.check_file(sessions_dir, sid).verdict == "ok"  # with the recovery log
    with SessionReader(path, session_id=sid) as r:
        seqs = [e.sequence for e in r.iter_events()]
    assert 3 not in seqs and seqs  # the altered event was not salvaged; the rest were


@pytest.mark.slow
def test_the_writers_own_judge_sees_a_hash_failure_without_a_kernel(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=2)
    payload_without_hash(path)
    before = all_rows(path)
    with pytest.raises(errors.Corrupt, match="content hash"):
        SessionWriter.open(sessions_dir, sid)
    calls: list[tuple[Path, str]] = []

    def hook(p: Path, s: str) -> None:
        calls.append((p, s))  # a recovery that salvages nothing leaves it damaged

    with pytest.raises(errors.Corrupt, match=f"agentdb recover {sid}"):
        SessionWriter.open(sessions_dir, sid, recover=hook)
    assert calls == [(path, sid)]  # called once, never again for the same damage
    assert all_rows(path) == before


def test_migration_never_runs_on_a_file_the_judge_calls_damaged(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=2, revision=1)
    invalid_text(path)
    assert checks.judge(path, sid).verdict == "corrupt"
    seen: list[int] = []

    def refuse(p: Path, s: str) -> None:
        seen.append(_user_version(p))
        raise errors.Unreadable(f"{p}: recovery refused by the test", path=p)

    with pytest.raises(errors.Unreadable):
        SessionWriter.open(sessions_dir, sid, recover=refuse, judge=kernel.judge_hook)
    assert seen == [1]  # the hook saw the file still at revision 1: nothing migrated it
    assert _user_version(path) == 1
    leftovers = [p.name for p in sessions_dir.iterdir() if p.name != path.name]
    assert leftovers == [], leftovers  # no migrate backup, no -wal left behind


@pytest.mark.slow
def test_the_kernel_recovers_invalid_text_before_migrating(sessions_dir: Path) -> None:
    sid, path = make_session(sessions_dir, turns=2, revision=1)
    invalid_text(path)
    w = kernel.open_session(sessions_dir, sid)
    try:
        assert w.revision == CURRENT_REVISION  # migrated: the replacement, not the damaged file
    finally:
        w.close()
    corrupt = path.with_name(path.name + ".corrupt")
    assert _user_version(corrupt) == 1  # the damaged original kept as it was
    assert checks.check_file(sessions_dir, sid).verdict == "ok"


@pytest.mark.slow
def test_the_judge_is_asked_before_the_writer_opens_and_once_more_after_recovery(
    sessions_dir: Path,
) -> None:
    sid, path = make_session(sessions_dir, turns=2)
    asked: list[str] = []

    def judge(p: Path, s: str) -> str | None:
        asked.append("judge")
        return "damaged, says the test" if len(asked) == 1 else None

    def hook(p: Path, s: str) -> None:
        asked.append("recover")

    w = SessionWriter.open(sessions_dir, sid, recover=hook, judge=judge)
    w.close()
    assert asked == ["judge", "recover", "judge"]


def test_a_missing_file_is_not_found_never_recovered(sessions_dir: Path) -> None:
    sid = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    called: list[str] = []
    with pytest.raises(errors.SessionNotFound):
        SessionWriter.open(
            sessions_dir,
            sid,
            recover=lambda p, s: called.append("recover"),
            judge=lambda p, s: called.append("judge") or "x",
        )
    assert called == []
    assert not paths.session_path(sessions_dir, sid).exists()


def test_the_open_has_no_private_arguments() -> None:
    for fn in (SessionWriter.open, opening_module.open_checked):
        params = inspect.signature(fn).parameters
        assert not [n for n in params if n.startswith("_")], fn
    src = inspect.getsource(opening_module)
    assert "open_checked(" not in src.split("def open_checked(", 1)[1]  # no recursion
    assert os.path.basename(opening_module.__file__ or "") == "opening.py"
