"""``agentdb backup`` run again and again into one folder, as real processes: unchanged,
updated, kept (after a lossy recover), corrupt copies renamed, concurrent runs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb.checks import prefix
from agentdb.jobs import backupdir, demo
from agentdb.store import Event, Producer, SessionWriter
from tests.chain_support import lossy_recovery
from tests.rows import all_rows
from tests.runner import run_cli, state_options
from tests.support import SRC, make_session

pytestmark = pytest.mark.slow

TOOL = Producer("tool", "shell", "2.0.0")
CLI = [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir"]


def backup(sessions_dir: Path, dest: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    r = run_cli("--sessions-dir", str(sessions_dir), "backup", *args, "--to", str(dest), "--json")
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout), r.stderr


def outcomes(doc: dict[str, Any]) -> dict[str, str]:
    return {s["session_id"]: s["outcome"] for s in doc["sessions"]}


def grow(sessions_dir: Path, sid: str, n: int = 3) -> None:
    with SessionWriter.open(sessions_dir, sid) as w:
        for i in range(n):
            w.emit(Event("tool_result", TOOL, b"later %d" % i))


def lose_event(path: Path, sequence: int) -> None:
    """The session loses one event nothing else refers to, as a lossy recovery would (from
    revision 3 with the gap it records: a bare DELETE there is damage, which backup refuses)."""
    lossy_recovery(path, f"DELETE FROM events WHERE sequence = {int(sequence)}")


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def journal_mode_delete(path: Path) -> bool:
    return path.read_bytes()[18:20] == b"\x01\x01"  # rollback journal: one file, no sidecars


def test_backup_twice_then_after_growth(sessions_dir: Path, tmp_path: Path) -> None:
    a, pa = make_session(sessions_dir, turns=3, status=None)
    b, pb = make_session(sessions_dir, turns=2)
    dest = tmp_path / "backups"
    code, doc, _ = backup(sessions_dir, dest, "--all")
    assert code == 0 and outcomes(doc) == {a: "copied", b: "copied"}
    assert doc["version"] == 1 and doc["summary"]["copied"] == 2
    inodes = {p.name: p.stat().st_ino for p in dest.iterdir()}

    # the second run: exit 0, nothing copied, nothing written
    code, doc, err = backup(sessions_dir, dest, "--all")
    assert code == 0, err
    assert outcomes(doc) == {a: "unchanged", b: "unchanged"}
    assert doc["summary"]["unchanged"] == 2 and doc["summary"]["copied"] == 0
    assert doc["summary"]["bytes"] == 0
    assert {p.name: p.stat().st_ino for p in dest.iterdir()} == inodes
    assert listing(dest) == sorted([f"{a}.sqlite", f"{b}.sqlite"])

    # the session grows: its copy is replaced by the verified superset
    old_rows = all_rows(dest / f"{a}.sqlite")
    grow(sessions_dir, a, 4)
    code, doc, _ = backup(sessions_dir, dest, "--all")
    assert code == 0 and outcomes(doc) == {a: "updated", b: "unchanged"}
    copy = dest / f"{a}.sqlite"
    assert all_rows(copy) == all_rows(pa)
    assert len(all_rows(copy)["events"]) == len(old_rows["events"]) + 4
    assert prefix.compare_paths(copy, pa).identical
    assert journal_mode_delete(copy) and os.stat(copy).st_mode & 0o777 == 0o600
    assert listing(dest) == sorted([f"{a}.sqlite", f"{b}.sqlite"])  # no sidecar, no temp

    # a status change alone (no new rows) updates the copy too
    with SessionWriter.open(sessions_dir, a) as w:
        w.set_status("completed")
    code, doc, _ = backup(sessions_dir, dest, a)
    assert code == 0 and outcomes(doc) == {a: "updated"}
    assert all_rows(copy)["session_meta"] == all_rows(pa)["session_meta"]

    # human output: unchanged rows are counted, not listed; the summary goes to stderr
    r = run_cli("--sessions-dir", str(sessions_dir), "backup", "--all", "--to", str(dest))
    assert r.returncode == 0 and a not in r.stdout
    assert "0 copied, 0 updated, 2 unchanged, 0 kept, 0 not backed up" in r.stderr
    assert pb.exists()


def test_kept_after_a_lossy_recover(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir, turns=40, status=None)
    dest = tmp_path / "backups"
    assert backup(sessions_dir, dest, sid)[0] == 0
    copy = dest / f"{sid}.sqlite"
    before = copy.read_bytes()

    demo.damage_page(path, table="events", nth_leaf=1)
    r = run_cli("--sessions-dir", str(sessions_dir), "recover", sid, "--json")
    assert r.returncode == 0, r.stderr
    lost = prefix.compare_paths(copy, path)
    assert not lost.is_prefix and lost.lost_event_ranges  # the recovery lost events
    grow(sessions_dir, sid, 2)  # ...and the kernel went on

    code, doc, err = backup(sessions_dir, dest, sid)
    assert code == 0, err
    (s,) = doc["sessions"]
    assert s["outcome"] == "kept" and s["lost"].startswith("events ")
    assert copy.read_bytes() == before  # the old copy stays, byte for byte
    stamped = Path(s["current_path"])
    assert backupdir.STAMPED_RE.fullmatch(stamped.name)
    assert stamped.parent == dest and all_rows(stamped) == all_rows(path)
    assert journal_mode_delete(stamped) and os.stat(stamped).st_mode & 0o777 == 0o600
    assert listing(dest) == sorted([copy.name, stamped.name])

    # again, nothing new: still kept, no second timestamped copy
    code, doc, _ = backup(sessions_dir, dest, sid)
    assert code == 0 and doc["sessions"][0]["outcome"] == "kept"
    assert doc["sessions"][0]["current_path"] == str(stamped) and doc["summary"]["bytes"] == 0
    assert listing(dest) == sorted([copy.name, stamped.name])

    # the session grows after the lossy recovery: the timestamped copy follows it
    grow(sessions_dir, sid, 3)
    code, doc, _ = backup(sessions_dir, dest, sid)
    assert code == 0 and doc["sessions"][0]["outcome"] == "kept"
    assert listing(dest) == sorted([copy.name, stamped.name])
    assert all_rows(stamped) == all_rows(path) and copy.read_bytes() == before

    # --verify knows timestamped copies
    r = run_cli("--sessions-dir", str(sessions_dir), "backup", "--verify", str(dest), "--json")
    vdoc = json.loads(r.stdout)
    assert {(v["path"], v["timestamped"]) for v in vdoc["sessions"]} == {
        (str(copy), False),
        (str(stamped), True),
    }
    assert backupdir.copies_of(dest, sid) == [stamped, copy]  # newest first, for restore


def test_second_loss_gets_a_second_timestamped_copy(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path = make_session(sessions_dir, turns=4, status=None)
    dest = tmp_path / "b"
    backup(sessions_dir, dest, sid)
    lose_event(path, 11)
    code, doc, _ = backup(sessions_dir, dest, sid)
    assert code == 0 and doc["sessions"][0]["outcome"] == "kept"
    assert doc["sessions"][0]["lost"] == "events 11"
    first = Path(doc["sessions"][0]["current_path"])
    lose_event(path, 17)  # not a superset of the timestamped copy either
    time.sleep(1.1)  # a new second for the new name (same-second names get .1 anyway)
    code, doc, _ = backup(sessions_dir, dest, sid)
    second = Path(doc["sessions"][0]["current_path"])
    assert code == 0 and second != first
    assert backupdir.copies_of(dest, sid) == [second, first, dest / f"{sid}.sqlite"]
    assert len(all_rows(first)["events"]) == len(all_rows(second)["events"]) + 1


def test_damaged_session_is_corrupt_and_its_copy_untouched(
    sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=3)
    dest = tmp_path / "b"
    backup(sessions_dir, dest, sid)
    before = (dest / f"{sid}.sqlite").read_bytes()
    # a flipped payload byte: integrity_check cannot see it, the content hash does
    c = apsw.Connection(str(path))
    c.execute("UPDATE events SET payload = CAST('tampered' AS BLOB) WHERE sequence = 5")
    c.close()
    code, doc, _ = backup(sessions_dir, dest, sid)
    (s,) = doc["sessions"]
    assert code == 1 and s["outcome"] == "corrupt" and s["verdict"] == "corrupt"
    assert f"agentdb recover {sid}" in s["message"]
    assert (dest / f"{sid}.sqlite").read_bytes() == before
    assert listing(dest) == [f"{sid}.sqlite"]
    # a fresh folder gets nothing either: a damaged session is never `copied`
    code, doc, _ = backup(sessions_dir, tmp_path / "fresh", sid)
    assert code == 1 and outcomes(doc) == {sid: "corrupt"}
    assert listing(tmp_path / "fresh") == []


def test_old_copy_that_is_not_a_file_is_left_alone(sessions_dir: Path, tmp_path: Path) -> None:
    sid, _ = make_session(sessions_dir)
    dest = tmp_path / "b"
    dest.mkdir(mode=0o700)
    (dest / "elsewhere").write_bytes(b"x")
    os.symlink(dest / "elsewhere", dest / f"{sid}.sqlite")
    code, doc, _ = backup(sessions_dir, dest, sid)
    assert code == 1 and outcomes(doc) == {sid: "failed"}
    assert os.path.islink(dest / f"{sid}.sqlite")
    assert listing(dest) == sorted(["elsewhere", f"{sid}.sqlite"])


_HOLD = """
import sys, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from agentdb.jobs import backupdir
with backupdir.locked_copy(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_run_waits_for_the_copy_another_run_holds(sessions_dir: Path, tmp_path: Path) -> None:
    sid, _ = make_session(sessions_dir, status=None)
    dest = tmp_path / "b"
    backup(sessions_dir, dest, sid)
    grow(sessions_dir, sid, 2)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(dest / f"{sid}.sqlite"), str(SRC)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        run = subprocess.Popen(
            [*CLI, str(sessions_dir), "backup", sid, "--to", str(dest), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(2.0)
        assert run.poll() is None  # waiting for the lock, not replacing the copy
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        out, err = run.communicate(timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 0, err
    assert outcomes(json.loads(out)) == {sid: "updated"}


@pytest.mark.parametrize("runs", [3])
def test_concurrent_runs_beside_a_live_writer(
    sessions_dir: Path, tmp_path: Path, runs: int
) -> None:
    """Several runs at once into one folder while the kernel keeps writing: every run exits 0,
    no copy ever holds less than an earlier one, none is wrongly `kept`."""
    from tests.support import WriterProcess

    quiet = [make_session(sessions_dir, turns=2)[0] for _ in range(3)]
    live, live_path = make_session(sessions_dir, turns=2, status="running")
    dest = tmp_path / "b"
    backup(sessions_dir, dest, "--all")
    writer = WriterProcess(sessions_dir, live)
    try:
        writer.wait_for_commits(5)
        procs = [
            subprocess.Popen(
                [*CLI, str(sessions_dir), "backup", "--all", "--to", str(dest), "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(runs)
        ]
        results = [p.communicate(timeout=120) for p in procs]
        writer.wait_for_commits(1)
    finally:
        writer.stop()
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        got = outcomes(json.loads(out))
        assert {got[q] for q in quiet} == {"unchanged"}
        assert got[live] in ("updated", "unchanged")
    assert listing(dest) == sorted(f"{s}.sqlite" for s in [*quiet, live])
    copy = dest / f"{live}.sqlite"
    assert prefix.compare_paths(copy, live_path).is_prefix
    assert len(all_rows(copy)["events"]) > 12
    assert backupdir.verify_dir(dest).ok


def test_json_validates_against_the_shipped_schemas(sessions_dir: Path, tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from agentdb import schemas

    sid, path = make_session(sessions_dir, turns=2, status=None)
    make_session(sessions_dir, turns=1)
    dest = tmp_path / "b"
    docs = [backup(sessions_dir, dest, "--all")[1]]
    grow(sessions_dir, sid, 1)
    docs.append(backup(sessions_dir, dest, "--all")[1])
    lose_event(path, 5)
    docs.append(backup(sessions_dir, dest, "--all")[1])
    seen = {s["outcome"] for d in docs for s in d["sessions"]}
    assert seen == {"copied", "updated", "unchanged", "kept"}
    for d in docs:
        jsonschema.validate(d, schemas.load("backup"), cls=jsonschema.Draft202012Validator)
    r = run_cli("--sessions-dir", str(sessions_dir), "backup", "--verify", str(dest), "--json")
    verify = json.loads(r.stdout)
    assert any(s["timestamped"] for s in verify["sessions"])
    jsonschema.validate(verify, schemas.load("backup-verify"), cls=jsonschema.Draft202012Validator)
    with pytest.raises(jsonschema.ValidationError):  # the schema can fail
        jsonschema.validate(dict(docs[0], version="1"), schemas.load("backup"))


def test_backup_contract(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    dest = tmp_path / "b" / "c"
    sid = state.by_role("recent").session_id
    r = run_cli(*state_options(state), "backup", sid, "--to", str(dest), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["sessions"][0]
    assert out["session_id"] == sid and (dest / f"{sid}.sqlite").is_file()
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o700
    r = run_cli(*state_options(state), "backup", sid, "--to", str(dest), "--json")
    assert r.returncode == 0  # a repeated backup is the normal case
    doc = json.loads(r.stdout)
    assert doc["version"] == 1 and doc["sessions"][0]["outcome"] == "unchanged"
    assert doc["summary"]["unchanged"] == 1
    (dest / f"{sid}.sqlite").write_bytes(b"someone else's file")
    r = run_cli(*state_options(state), "backup", sid, "--to", str(dest), "--json")
    out = json.loads(r.stdout)["sessions"][0]
    # a copy that fails verification is renamed, never overwritten, and a fresh copy written
    assert r.returncode == 0 and out["outcome"] == "copied"
    assert out["corrupt_path"] == str(dest / f"{sid}.sqlite.corrupt")
    assert (dest / f"{sid}.sqlite.corrupt").read_bytes() == b"someone else's file"


def test_backup_verify_judges_a_recovered_session_as_check_does(tmp_path: Path) -> None:
    """check says ok for a salvaged session (its lost events are in the recovery log); the
    backup of it must verify the same, not send the operator to recover a healthy file."""
    state = demo.build(tmp_path / "d")
    sid = state.by_role("damaged").session_id
    assert run_cli(*state_options(state), "recover", sid).returncode == 0
    r = run_cli(*state_options(state), "check", sid, "--json")
    assert r.returncode == 0, r.stdout
    dest = tmp_path / "b"
    assert run_cli(*state_options(state), "backup", sid, "--to", str(dest)).returncode == 0
    r = run_cli(*state_options(state), "backup", "--verify", str(dest), "--json")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["sessions"][0]["verdict"] == "ok"
