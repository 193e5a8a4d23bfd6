"""agentdb check through the CLI: exit codes, JSON shape, tables, Ctrl-C, ``--changed``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from agentdb.jobs import demo
from agentdb.results import VERDICTS
from agentdb.store import SessionWriter
from tests.runner import Agentdb, Terminal, run_cli, state_options
from tests.salvage.corpus import d_flipped_bytes
from tests.support import GOOD_ID, hostile_extras, make_session


@pytest.mark.slow
def test_json_verdicts_and_exit_codes(tmp_path: Path, agentdb: Agentdb) -> None:
    state = demo.build(tmp_path / "demo")
    g = ["--sessions-dir", str(state.sessions_dir)]
    code, out, _ = agentdb(*g, "check", "--all", "--json", "--jobs", "2")
    assert code == 1
    doc = json.loads(out)
    verdicts = {s["session_id"]: s["verdict"] for s in doc["sessions"]}
    assert verdicts[state.by_role("damaged").session_id] == "corrupt"
    assert verdicts[state.by_role("old-revision").session_id] == "needs_migration"
    assert verdicts[state.by_role("parent").session_id] == "ok"
    for s in doc["sessions"]:
        assert {"session_id", "path", "verdict", "findings", "status", "revision"} <= set(s)
        for f in s["findings"]:
            assert {"code", "message", "severity", "fix"} <= set(f)
    assert doc["summary"]["checked"] == len(state.sessions)
    assert list(verdicts) == sorted(verdicts)

    ok_id = state.by_role("recent").session_id
    code, out, err = agentdb(*g, "check", ok_id)
    assert code == 0
    assert ok_id in out and "1 sessions checked: 1 ok" in err

    code, out, _ = agentdb(*g, "check", state.by_role("damaged").session_id, "--quick")
    assert code == 1 and "corrupt" in out


def test_usage_errors(tmp_path: Path, agentdb: Agentdb) -> None:
    assert agentdb("--sessions-dir", str(tmp_path / "nope"), "check")[0] == 2
    assert agentdb("--sessions-dir", str(tmp_path), "check", "../etc/passwd")[0] == 2
    assert agentdb("--sessions-dir", str(tmp_path), "check", "--jobs", "0")[0] == 2


def test_empty_directory_is_ok(sessions_dir: Path, agentdb: Agentdb) -> None:
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "check", "--json")
    assert code == 0
    assert json.loads(out)["sessions"] == []


@pytest.mark.slow
def test_ctrl_c_gives_a_partial_report(sessions_dir: Path) -> None:
    """SIGINT while checking thousands of files: a clean partial report, exit 130."""
    _, path = make_session(sessions_dir, turns=1)
    for i in range(3000):
        sid = f"01ARZ3NDEK{i:016d}"
        shutil.copyfile(path, sessions_dir / f"{sid}.sqlite")
        os.chmod(sessions_dir / f"{sid}.sqlite", 0o600)
    with Terminal("--sessions-dir", str(sessions_dir), "check", "--json", "--jobs", "2") as t:
        shown = len(t.read_until(b"checking"))  # the progress bar: the run is under way
        t.send_signal(signal.SIGINT)
        code, out, seen = t.finish()
    assert code == 130
    doc = json.loads(out)
    assert doc["summary"]["interrupted"] is True
    assert 0 < doc["summary"]["checked"] < 3001
    ids = [s["session_id"] for s in doc["sessions"]]
    assert ids == sorted(ids)
    assert b"interrupted" in t.seen[shown:]  # said after the interrupt


@pytest.mark.slow
def test_check_lists_every_session_entry_with_a_verdict(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "d")
    refused = hostile_extras(state.sessions_dir, state.sessions[0].session_id)
    r = run_cli(*state_options(state), "check", "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    got = {s["session_id"]: s for s in doc["sessions"]}
    assert set(got) == {s.session_id for s in state.sessions} | set(refused)
    for sid in refused:
        assert got[sid]["verdict"] in VERDICTS and got[sid]["findings"], got[sid]
    assert got[f"{GOOD_ID[:25]}2"]["verdict"] == "insecure"  # a symlink
    assert [s["session_id"] for s in doc["sessions"]] == sorted(got)


@pytest.mark.slow
def test_check_json_shape(demo_state: demo.DemoState) -> None:
    r = run_cli(*state_options(demo_state), "check", "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert isinstance(doc["summary"], dict)
    for s in doc["sessions"]:
        assert isinstance(s["session_id"], str) and isinstance(s["path"], str)
        assert s["verdict"] in ("ok", *VERDICTS)
        for f in s["findings"]:
            assert isinstance(f["code"], str) and isinstance(f["message"], str)
    verdicts = {s["session_id"]: s["verdict"] for s in doc["sessions"]}
    assert verdicts[demo_state.by_role("damaged").session_id] == "corrupt"
    assert verdicts[demo_state.by_role("old-revision").session_id] == "needs_migration"
    assert verdicts[demo_state.by_role("recent").session_id] == "ok"
    assert VERDICTS == (
        "insecure",
        "foreign",
        "too_new",
        "unsafe_schema",
        "unreadable",
        "corrupt",
        "inconsistent",
        "needs_migration",
    )


@pytest.mark.slow
def test_verdict_is_the_first_that_applies(tmp_path: Path, sessions_dir: Path) -> None:
    """An insecure (mode 0666) file that is also an old revision and damaged: insecure first;
    a damaged old-revision file: corrupt before needs_migration; findings list everything."""
    sid, p = make_session(sessions_dir, turns=30, revision=1)
    demo.damage_page(p, table="events", nth_leaf=1)
    r = run_cli("--sessions-dir", str(sessions_dir), "check", sid, "--json")
    s = json.loads(r.stdout)["sessions"][0]
    assert s["verdict"] == "corrupt"
    assert {"integrity", "needs_migration"} <= {f["code"] for f in s["findings"]}
    os.chmod(p, 0o666)
    r = run_cli("--sessions-dir", str(sessions_dir), "check", sid, "--json")
    assert json.loads(r.stdout)["sessions"][0]["verdict"] == "insecure"
    assert r.returncode == 1


# check --changed: only sessions without a recorded ok (of a full check, unless --quick), or
# whose identity changed since it.


def _settle() -> None:
    time.sleep(0.12)


def checked(agentdb: Agentdb, d: Path, *extra: str) -> list[str]:
    code, out, err = agentdb("--sessions-dir", str(d), "check", "--changed", "--json", *extra)
    assert code in (0, 1), err
    assert "have no recorded ok or changed since" in err
    return [s["session_id"] for s in json.loads(out)["sessions"]]


@pytest.mark.slow
def test_check_changed(agentdb: Agentdb, sessions_dir: Path) -> None:
    a, _ = make_session(sessions_dir, turns=1)
    b, _ = make_session(sessions_dir, turns=1, status="running")
    c, path_c = make_session(sessions_dir, turns=12)
    _settle()
    assert checked(agentdb, sessions_dir) == [a, b, c]  # never checked
    _settle()
    assert checked(agentdb, sessions_dir) == []  # every one ok and unchanged
    w = SessionWriter.open(sessions_dir, b)
    w.set_status("completed")
    w.close()
    _settle()
    assert checked(agentdb, sessions_dir) == [b]  # its identity changed
    _settle()
    assert checked(agentdb, sessions_dir) == []
    st = os.stat(path_c)
    d_flipped_bytes(path_c)
    os.utime(path_c, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: ctime moved
    _settle()
    assert checked(agentdb, sessions_dir) == [c]
    _settle()
    assert checked(agentdb, sessions_dir) == [c]  # no recorded ok: checked until it is fixed


@pytest.mark.slow
def test_a_quick_ok_is_not_a_full_ok(agentdb: Agentdb, sessions_dir: Path) -> None:
    a, _ = make_session(sessions_dir, turns=1)
    _settle()
    assert checked(agentdb, sessions_dir, "--quick") == [a]
    _settle()
    assert checked(agentdb, sessions_dir, "--quick") == []
    assert checked(agentdb, sessions_dir) == [a]  # a full --changed wants a full ok
    _settle()
    assert checked(agentdb, sessions_dir) == []


def test_changed_with_ids_is_a_usage_error(agentdb: Agentdb, sessions_dir: Path) -> None:
    a, _ = make_session(sessions_dir, turns=1)
    assert agentdb("--sessions-dir", str(sessions_dir), "check", "--changed", a).code == 2
    assert agentdb("--sessions-dir", str(sessions_dir), "check", "--changed", "--all").code == 2


@pytest.mark.slow
def test_one_file_check_loads_only_what_it_uses(sessions_dir: Path, tmp_path: Path) -> None:
    """Start-up of `agentdb check ID` (issue 12): no worker pool machinery, no migration
    ladder (a migrated file is decided by its fingerprint).
    Python's own import log of a real process says what was loaded."""
    sid, _ = make_session(sessions_dir, revision=1)
    SessionWriter.open(sessions_dir, sid).close()  # migrated: not the text agentdb creates
    r = run_cli(
        "--sessions-dir",
        str(sessions_dir),
        "check",
        sid,
        env={"PYTHONPROFILEIMPORTTIME": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert r.returncode == 0, r.stderr
    loaded = {
        line.split("|")[-1].strip() for line in r.stderr.splitlines() if "import time:" in line
    }
    assert "agentdb.checks.file" in loaded  # the log is there
    for heavy in ("multiprocessing", "agentdb.workers", "agentdb.schema.migrations"):
        assert heavy not in loaded, heavy
    # neither what only other paths use: OpenSSL (hashlib's algorithms besides BLAKE2b),
    # ctypes (the verdict cache's moved-file probe), scratch directories, CSV, terminal wrapping
    for unused in ("_hashlib", "ctypes", "tempfile", "shutil", "csv", "textwrap"):
        assert unused not in loaded, unused
