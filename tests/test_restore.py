"""``agentdb restore`` through the real CLI: real files, real copies, a real writer process."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from agentdb import recoverylog
from agentdb.store import Event, Producer, SessionWriter
from tests.rows import all_rows
from tests.runner import run_cli
from tests.salvage import corpus
from tests.support import WriterProcess, make_session

TOOL = Producer("tool", "shell", "2.0.0")


def cli(sessions_dir: Path, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_cli("--sessions-dir", str(sessions_dir), *args, env=env)


def restore_json(sessions_dir: Path, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = cli(sessions_dir, "restore", *args, "--json")
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def backed_up(sessions_dir: Path, tmp_path: Path, turns: int = 3) -> tuple[str, Path, Path]:
    """A session and its backup copy in ``tmp_path/b``."""
    sid, path = make_session(sessions_dir, turns=turns)
    dest = tmp_path / "b"
    r = cli(sessions_dir, "backup", sid, "--to", str(dest))
    assert r.returncode == 0, r.stderr
    return sid, path, dest


def grow(sessions_dir: Path, sid: str, n: int = 4) -> None:
    w = SessionWriter.open(sessions_dir, sid)
    try:
        if w.info().status != "running":
            w.set_status("running")  # an ended session takes events after re-opening
        for i in range(n):
            w.emit(Event("tool_result", TOOL, json.dumps({"i": i}).encode()))
    finally:
        w.close()


def event_count(path: Path) -> int:
    return len(all_rows(path)["events"])


def verdict(sessions_dir: Path, sid: str) -> str:
    r = cli(sessions_dir, "check", sid, "--json")
    return str(json.loads(r.stdout)["sessions"][0]["verdict"])


@pytest.mark.slow
def test_restore_missing_session_then_check_ok(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path)
    before = all_rows(path)
    path.unlink()
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest))
    assert rc == 0
    assert doc["version"] == 1 and doc["summary"]["restored"] == 1
    s = doc["sessions"][0]
    assert s["outcome"] == "restored" and s["pre_restore_path"] is None
    assert s["copy"] == str(dest / path.name)
    assert all_rows(path) == before
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert path.read_bytes()[18:20] == b"\x02\x02"  # WAL mode, like every session file
    assert sorted(os.listdir(sessions_dir)) == [path.name]  # no temp file, no sidecar
    assert verdict(sessions_dir, sid) == "ok"
    log = [e for e in recoverylog.read(sessions_dir.parent / "recovery.log")]
    assert [(e["event"], e["outcome"]) for e in log] == [
        ("intent", "restored"),
        ("outcome", "restored"),
    ]
    # A second run finds nothing to do.
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest))
    assert rc == 0 and doc["sessions"][0]["outcome"] == "unchanged"


@pytest.mark.slow
def test_restore_refused_when_it_would_lose_events(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path)
    n = event_count(path)
    grow(sessions_dir, sid, 4)
    before = all_rows(path)
    names = sorted(os.listdir(sessions_dir))
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest))
    assert rc == 1
    s = doc["sessions"][0]
    assert s["outcome"] == "refused" and s["reason"] == "would_lose_events"
    assert f"{n + 1}-{n + 4}" in s["reasons"][0]["message"]
    assert s["lost_events"] == [[n + 1, n + 4]]
    assert all_rows(path) == before  # events unchanged
    assert sorted(os.listdir(sessions_dir)) == names
    assert doc["summary"]["refused"] == 1 and doc["summary"]["reasons"] == {"would_lose_events": 1}


def test_force_lists_lost_ranges_and_keeps_the_old_file(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path)
    copy_rows = all_rows(dest / path.name)
    n = event_count(path)
    grow(sessions_dir, sid, 3)
    before = all_rows(path)
    r = cli(sessions_dir, "restore", sid, "--from", str(dest), "--force", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["sessions"][0]
    assert s["outcome"] == "restored" and s["forced"]
    assert s["lost_events"] == [[n + 1, n + 3]] and s["lost_rows"]["events"] == 3
    assert f"{n + 1}-{n + 3}" in r.stderr  # warned about on stderr too
    pre = Path(s["pre_restore_path"])
    assert pre.name == path.name + ".pre-restore"
    assert all_rows(pre) == before  # the old file, every event of it, under its kept name
    assert all_rows(path) == copy_rows
    log = [e for e in recoverylog.read(sessions_dir.parent / "recovery.log")]
    assert [e["event"] for e in log] == ["intent", "outcome"]
    assert all(e["lost_events"] == [[n + 1, n + 3]] for e in log)
    assert log[-1]["pre_restore_path"] == str(pre)


@pytest.mark.slow
def test_live_session_refused_even_with_force(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path)
    w = WriterProcess(sessions_dir, sid)
    try:
        w.wait_for_commits(3)
        rc, doc = restore_json(sessions_dir, sid, "--from", str(dest), "--force")
        assert rc == 1
        assert doc["sessions"][0]["reason"] == "live"
        w.wait_for_commits(3)  # the writer was never disturbed
    finally:
        seqs, _ = w.stop()
    assert not [n for n in os.listdir(sessions_dir) if "pre-restore" in n or "agentdb-" in n]
    assert {r[0] for r in all_rows(path)["events"]} >= set(seqs)


@pytest.mark.slow
def test_pre_restore_names_count_up_and_keep_the_wal(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path)
    w = WriterProcess(sessions_dir, sid)  # killed: its WAL stays beside the file
    w.wait_for_commits(5)
    w.stop()
    wal = path.with_name(path.name + "-wal")
    assert wal.exists()
    old_wal = wal.read_bytes()
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest), "--force")
    assert rc == 0, doc
    s = doc["sessions"][0]
    pre = path.with_name(path.name + ".pre-restore")
    assert s["pre_restore_path"] == str(pre)
    assert s["pre_restore_sidecars"] == [str(pre) + "-wal"]
    assert Path(str(pre) + "-wal").read_bytes() == old_wal
    for side in ("-wal", "-shm", "-journal"):
        assert not path.with_name(path.name + side).exists()
    grow(sessions_dir, sid, 2)
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest), "--force")
    assert rc == 0
    assert doc["sessions"][0]["pre_restore_path"] == str(pre) + ".1"
    assert pre.exists() and Path(str(pre) + "-wal").exists()  # never overwritten
    assert verdict(sessions_dir, sid) == "ok"


@pytest.mark.slow
def test_newest_copy_that_verifies_is_chosen(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path, turns=30)
    good = all_rows(path)
    # Timestamped copies (backup writes them after a lossy recovery) are newer than the plain
    # copy, the latest timestamp first.
    older = dest / f"{path.name}.20200101T000000Z"
    newest = dest / f"{path.name}.20210101T000000Z"
    for c in (older, newest):
        shutil.copyfile(dest / path.name, c)
        os.chmod(c, 0o600)
    corpus.d_flipped_bytes(newest)  # the newest copy is damaged
    path.unlink()
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest))
    assert rc == 0, doc
    s = doc["sessions"][0]
    assert s["copy"] == str(older)
    assert [c["path"] for c in s["rejected_copies"]] == [str(newest)]
    assert all_rows(path) == good
    # --copy names one: the damaged copy is refused, never restored.
    path.unlink()
    rc, doc = restore_json(sessions_dir, sid, "--copy", str(newest))
    assert rc == 1 and doc["sessions"][0]["reason"] == "bad_copy"
    assert not path.exists()
    rc, doc = restore_json(sessions_dir, "--all", "--from", str(dest))
    assert rc == 0 and doc["sessions"][0]["copy"] == str(older)


@pytest.mark.slow
def test_a_copy_of_another_session_is_refused(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path)
    other, other_path = make_session(sessions_dir, turns=1)
    other_path.unlink()
    shutil.copyfile(dest / path.name, dest / other_path.name)
    os.chmod(dest / other_path.name, 0o600)
    rc, doc = restore_json(sessions_dir, other, "--from", str(dest))
    assert rc == 1
    s = doc["sessions"][0]
    assert s["reason"] == "bad_copy" and "meta" in s["reasons"][0]["message"].lower()
    assert not other_path.exists()


@pytest.mark.slow
def test_damaged_current_needs_force_and_is_kept(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path, turns=30)
    corpus.d_flipped_bytes(path)
    damaged = path.read_bytes()
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest))
    assert rc == 1
    s = doc["sessions"][0]
    assert s["reason"] == "damaged" and f"agentdb recover {sid}" in s["reasons"][0]["message"]
    assert path.read_bytes() == damaged
    rc, doc = restore_json(sessions_dir, "--all", "--from", str(dest))
    # --all restores a damaged file only when every row it holds is in the copy: not this one
    assert rc == 1 and doc["sessions"][0]["reason"] == "damaged", doc
    assert path.read_bytes() == damaged
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest), "--force")
    assert rc == 0, doc
    assert Path(doc["sessions"][0]["pre_restore_path"]).read_bytes() == damaged
    assert verdict(sessions_dir, sid) == "ok"


@pytest.mark.slow
def test_foreign_current_refused_even_with_force(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path)
    path.unlink()
    import apsw

    c = apsw.Connection(str(path))
    c.execute("PRAGMA application_id=1234; CREATE TABLE t(x)")
    c.close()
    os.chmod(path, 0o600)
    foreign = path.read_bytes()
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest), "--force")
    assert rc == 1 and doc["sessions"][0]["reason"] == "foreign"
    assert path.read_bytes() == foreign
    os.symlink(dest / path.name, tmp_path / "link")
    path.unlink()
    os.symlink(tmp_path / "link", path)
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest), "--force")
    assert rc == 1 and doc["sessions"][0]["reason"] == "unsafe"
    assert path.is_symlink()


@pytest.mark.slow
def test_all_skips_pruned_sessions_unless_asked(
    sessions_dir: Path, tmp_path: Path, plugin_cache: Path
) -> None:
    a, pa = make_session(sessions_dir, turns=1)
    b, pb = make_session(sessions_dir, turns=1)
    c, pc = make_session(sessions_dir, turns=1)
    dest = tmp_path / "b"
    assert cli(sessions_dir, "backup", "--all", "--to", str(dest)).returncode == 0
    r = cli(sessions_dir, "--plugin-cache", str(plugin_cache), "prune", a, "--yes")
    assert r.returncode == 0, r.stderr
    pb.unlink()  # lost by accident
    rc, doc = restore_json(sessions_dir, "--all", "--from", str(dest))
    assert rc == 1
    got = {s["session_id"]: (s["outcome"], s["reason"]) for s in doc["sessions"]}
    assert got == {
        a: ("refused", "pruned"),
        b: ("restored", None),
        c: ("unchanged", None),
    }
    assert not pa.exists() and pb.exists()
    rc, doc = restore_json(sessions_dir, "--all", "--from", str(dest), "--include-pruned")
    assert rc == 0, doc
    assert pa.exists() and verdict(sessions_dir, a) == "ok"
    rc, doc = restore_json(sessions_dir, "--all", "--from", str(dest))
    assert rc == 0  # restored since: no longer "pruned"


@pytest.mark.slow
def test_usage_errors(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path)
    other, _ = make_session(sessions_dir, turns=1)
    for args in (
        ("--all", "--from", str(dest), "--force"),
        (sid, other, "--copy", str(dest / path.name)),
        (sid,),
        (sid, "--from", str(tmp_path / "nope")),
        (sid, "--from", str(sessions_dir)),
        ("--from", str(dest)),
        ("not-an-id", "--from", str(dest)),
    ):
        r = cli(sessions_dir, "restore", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert sorted(os.listdir(sessions_dir)) == sorted([path.name, other + ".sqlite"])


@pytest.mark.slow
def test_dry_run_changes_nothing(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path)
    grow(sessions_dir, sid, 1)
    names = sorted(os.listdir(sessions_dir))
    before = path.read_bytes()
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest), "--force", "--dry-run")
    assert rc == 0 and doc["dry_run"] is True
    s = doc["sessions"][0]
    assert s["outcome"] == "restored" and s["pre_restore_path"].endswith(".pre-restore")
    assert path.read_bytes() == before and sorted(os.listdir(sessions_dir)) == names
    assert not (sessions_dir.parent / "recovery.log").exists()


@pytest.mark.slow
@pytest.mark.parametrize("turns", [1])
def test_older_revision_copy_restores_and_compares(
    sessions_dir: Path, tmp_path: Path, turns: int
) -> None:
    sid, path = make_session(sessions_dir, turns=turns, revision=1)
    dest = tmp_path / "b"
    assert cli(sessions_dir, "backup", sid, "--to", str(dest)).returncode == 0
    assert cli(sessions_dir, "migrate", sid).returncode == 0  # current at rev 2, copy at rev 1
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest))
    # Same rows on the spec's columns: nothing to restore.
    assert rc == 0 and doc["sessions"][0]["outcome"] == "unchanged", doc


@pytest.mark.slow
def test_all_restores_a_damaged_file_whose_rows_are_all_in_the_copy(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path, dest = backed_up(sessions_dir, tmp_path, turns=30)
    good = all_rows(path)
    corpus.d_index_only(path)  # an index page zeroed: every table row still reads
    damaged = path.read_bytes()
    assert verdict(sessions_dir, sid) == "corrupt"
    rc, doc = restore_json(sessions_dir, sid, "--from", str(dest))
    assert rc == 1 and doc["sessions"][0]["reason"] == "damaged"  # explicit: needs --force
    rc, doc = restore_json(sessions_dir, "--all", "--from", str(dest))
    assert rc == 0, doc
    s = doc["sessions"][0]
    assert s["outcome"] == "restored" and not s["forced"]
    assert Path(s["pre_restore_path"]).read_bytes() == damaged
    assert all_rows(path) == good and verdict(sessions_dir, sid) == "ok"
