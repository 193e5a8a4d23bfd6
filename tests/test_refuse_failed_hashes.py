"""``backup`` and ``migrate`` refuse a file whose hashes fail, as ``check`` judges it: a backup
is never a copy of rows whose content hash fails (and never replaces a good copy with one), and a
migration never gives damaged rows fresh hashes. Real files; the damage is what a flipped byte
inside a payload, or bad bytes in a TEXT value, does — what ``integrity_check`` cannot see."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from agentdb import checks
from agentdb.jobs import backup, migrate
from tests.rows import invalid_text, payload_without_hash
from tests.runner import Agentdb
from tests.support import make_session


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_backup_refuses_a_session_whose_content_hash_fails(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=3)
    payload_without_hash(path)
    assert checks.judge(path, sid).verdict == "corrupt"
    dest = tmp_path / "backup"
    out = backup.backup_session(path, dest)
    assert out.outcome == "corrupt", out
    assert "content hash" in out.message
    assert sorted(p.name for p in dest.iterdir()) == []  # nothing placed, no temp left


def test_backup_keeps_a_good_copy_when_the_session_later_fails_its_hashes(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=3)
    dest = tmp_path / "backup"
    assert backup.backup_session(path, dest).outcome == "copied"
    good = _digest(dest / path.name)
    payload_without_hash(path)
    out = backup.backup_session(path, dest)
    assert out.outcome == "corrupt", out
    assert _digest(dest / path.name) == good
    assert sorted(p.name for p in dest.iterdir()) == [path.name]


def test_backup_cli_exits_1_on_a_hash_failure(
    sessions_dir: Path, tmp_path: Path, agentdb: Agentdb
) -> None:
    sid, path = make_session(sessions_dir, turns=3)
    payload_without_hash(path)
    code, out, _ = agentdb.at(sessions_dir)("backup", sid, "--to", str(tmp_path / "b"), "--json")
    doc = json.loads(out)
    assert code == 1
    assert doc["sessions"][0]["outcome"] == "corrupt"


def test_migrate_refuses_a_revision_1_file_whose_text_fails(
    sessions_dir: Path, agentdb: Agentdb
) -> None:
    sid, path = make_session(sessions_dir, turns=3, revision=1)
    invalid_text(path)
    assert checks.judge(path, sid).verdict == "corrupt"
    before = _digest(path)
    (item,) = migrate.plan(sessions_dir, [sid])
    assert (item.action, item.outcome) == (migrate.NONE, "corrupt")
    code, out, _ = agentdb.at(sessions_dir)("migrate", sid, "--json")
    doc = json.loads(out)
    assert code == 1
    assert doc["sessions"][0]["outcome"] == "corrupt"
    assert f"agentdb recover {sid}" in doc["sessions"][0]["message"]
    assert _digest(path) == before  # never migrated: no fresh hashes over damaged rows
    assert sorted(p.name for p in sessions_dir.iterdir()) == [path.name]  # no backup left


@pytest.mark.slow
def test_migrate_migrates_the_same_file_undamaged(sessions_dir: Path) -> None:
    """The control: the refusal above is the damage's, not the file's."""
    sid, path = make_session(sessions_dir, turns=3, revision=1)
    report = migrate.execute(migrate.plan(sessions_dir, [sid]))
    assert [s.outcome for s in report.sessions] == ["migrated"]
    assert checks.judge(path, sid).verdict == "ok"
