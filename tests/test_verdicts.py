"""The verdict cache: identity-checked, racily-clean aware, rebuilt on any doubt."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentdb.index import checked, verdicts
from agentdb.store import SessionWriter
from tests.support import make_session


def _entry(path: Path, verdict: str = "ok") -> verdicts.Entry:
    st = verdicts.stamp(path)
    assert st is not None
    return verdicts.Entry(path.name, st, verdict, False, "completed", 2)


def _settle() -> None:
    time.sleep(verdicts.FINE_GRANULARITY_NS / 1e9 * 2)


@pytest.mark.slow
def test_record_and_lookup_until_the_file_changes(sessions_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    sid, path = make_session(sessions_dir, status="running")
    _settle()
    assert verdicts.record(sessions_dir, [_entry(path)], cache_dir=cache)
    got = verdicts.lookup(sessions_dir, cache_dir=cache)
    assert got[path.name].verdict == "ok"
    assert got[path.name].matches(verdicts.identity_of(path))
    # a write lands in the -wal (or the file): the identity changes, the verdict is not trusted
    w = SessionWriter.open(sessions_dir, sid)
    w.set_status("completed")
    w.close()
    assert not got[path.name].matches(verdicts.identity_of(path))


@pytest.mark.slow
def test_same_size_same_mtime_other_inode_is_not_trusted(
    sessions_dir: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "c"
    _, path = make_session(sessions_dir)
    _settle()
    verdicts.record(sessions_dir, [_entry(path)], cache_dir=cache)
    st = os.stat(path)
    copy = tmp_path / "copy"
    shutil.copyfile(path, copy)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(copy, path)
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    got = verdicts.lookup(sessions_dir, cache_dir=cache)
    assert not got[path.name].matches(verdicts.identity_of(path))


@pytest.mark.slow
def test_a_stamp_in_the_same_tick_as_the_last_write_is_never_trusted(
    sessions_dir: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "c"
    _, path = make_session(sessions_dir)
    ident = verdicts.identity_of(path)
    assert ident is not None
    racy = verdicts.Stamp(ident, ident.newest_ns() + 1000)  # stamped right after the write
    verdicts.record(sessions_dir, [verdicts.Entry(path.name, racy, "ok", False)], cache_dir=cache)
    got = verdicts.lookup(sessions_dir, cache_dir=cache)
    assert not got[path.name].matches(verdicts.identity_of(path))
    assert not racy.settled


@pytest.mark.slow
def test_two_directories_do_not_share_entries(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    _, pa = make_session(a)
    _settle()
    verdicts.record(a, [_entry(pa)], cache_dir=cache)
    shutil.copy2(pa, b / pa.name)
    assert verdicts.lookup(b, cache_dir=cache) == {}
    assert pa.name in verdicts.lookup(a, cache_dir=cache)


@pytest.mark.slow
def test_damaged_or_foreign_cache_is_rebuilt_and_changes_no_answer(
    sessions_dir: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "c"
    _, path = make_session(sessions_dir)
    _settle()
    report, recorded = checked.check_and_record(sessions_dir, cache_dir=cache)
    assert recorded and report.ok
    cpath = verdicts.cache_path(cache)
    assert path.name in verdicts.lookup(sessions_dir, cache_dir=cache)
    # garbage over the cache: readers see nothing, the next check rebuilds it
    for p in (cpath, Path(str(cpath) + "-wal"), Path(str(cpath) + "-shm")):
        p.unlink(missing_ok=True)
    cpath.write_bytes(b"SQLite format 3\x00" + os.urandom(4000))
    os.chmod(cpath, 0o600)
    assert verdicts.lookup(sessions_dir, cache_dir=cache) == {}
    again, recorded = checked.check_and_record(sessions_dir, cache_dir=cache)
    assert recorded
    assert [s.verdict for s in again.sessions] == [s.verdict for s in report.sessions]
    assert verdicts.lookup(sessions_dir, cache_dir=cache)[path.name].verdict == "ok"
    # an SQLite file that is not ours (another application id) is replaced, not trusted
    import apsw

    for p in (cpath, Path(str(cpath) + "-wal"), Path(str(cpath) + "-shm")):
        p.unlink(missing_ok=True)
    conn = apsw.Connection(str(cpath))
    conn.execute(
        "CREATE TABLE verdicts(directory, name, identity, stamped_ns, verdict, quick, "
        "checked_at, status, revision); PRAGMA application_id=7; PRAGMA user_version=1"
    )
    conn.close()
    os.chmod(cpath, 0o600)
    assert verdicts.lookup(sessions_dir, cache_dir=cache) == {}
    assert verdicts.record(sessions_dir, [_entry(path)], cache_dir=cache)
    assert path.name in verdicts.lookup(sessions_dir, cache_dir=cache)


@pytest.mark.slow
def test_a_reader_never_creates_the_cache(sessions_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    make_session(sessions_dir)
    assert verdicts.lookup(sessions_dir, cache_dir=cache) == {}
    assert not cache.exists()


@pytest.mark.slow
def test_removed_files_are_forgotten_by_a_full_check(sessions_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    _, p1 = make_session(sessions_dir)
    _, p2 = make_session(sessions_dir)
    _settle()
    checked.check_and_record(sessions_dir, cache_dir=cache)
    assert set(verdicts.lookup(sessions_dir, cache_dir=cache)) == {p1.name, p2.name}
    p2.unlink()
    checked.check_and_record(sessions_dir, cache_dir=cache)
    assert set(verdicts.lookup(sessions_dir, cache_dir=cache)) == {p1.name}


@pytest.mark.slow
def test_concurrent_checks_share_the_cache(sessions_dir: Path, tmp_path: Path) -> None:
    """Four check processes recording at once: every one exits 0 with nothing on stderr about
    the cache, and the cache ends up holding every session once."""
    import subprocess
    import sys

    from tests.support import SRC

    names = {make_session(sessions_dir, turns=1)[1].name for _ in range(6)}
    _settle()
    env = {**os.environ, "PYTHONPATH": str(SRC), "XDG_CACHE_HOME": str(tmp_path / "x")}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentdb.cli.main",
                "--sessions-dir",
                str(sessions_dir),
                "check",
                "--jobs",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "verdict cache" not in err, err
    got = verdicts.lookup(sessions_dir, cache_dir=tmp_path / "x" / "agentdb")
    assert set(got) == names and all(r.verdict == "ok" for r in got.values())


@pytest.mark.slow
def test_never_writes_a_cache_inside_the_sessions_directory(sessions_dir: Path) -> None:
    """A home (or XDG_CACHE_HOME) inside the sessions directory: check still answers, and
    nothing is added to the directory."""
    _, path = make_session(sessions_dir)
    _settle()
    before = sorted(os.listdir(sessions_dir))
    report, recorded = checked.check_and_record(sessions_dir, cache_dir=sessions_dir / "c")
    assert report.ok and not recorded
    assert sorted(os.listdir(sessions_dir)) == before


def _page_of(cpath: Path) -> None:
    """Damage the verdicts table's root page in place: the header and schema still read."""
    import apsw

    conn = apsw.Connection(str(cpath))
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name='verdicts'").fetchone()
    size = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    assert root is not None and size is not None
    with open(cpath, "r+b") as f:
        f.seek((root[0] - 1) * size[0])
        f.write(b"\x0d" + b"\xff" * 7)


@pytest.mark.slow
def test_a_cache_damaged_past_its_header_is_rebuilt(sessions_dir: Path, tmp_path: Path) -> None:
    """A cache whose schema reads but whose table is malformed used to stay: every check said
    "could not be written" and status said "never checked" forever."""
    cache = tmp_path / "c"
    _, path = make_session(sessions_dir)
    _settle()
    assert checked.check_and_record(sessions_dir, cache_dir=cache)[1]
    cpath = verdicts.cache_path(cache)
    _page_of(cpath)
    assert verdicts.lookup(sessions_dir, cache_dir=cache) == {}
    _, recorded = checked.check_and_record(sessions_dir, cache_dir=cache)
    assert recorded
    assert verdicts.lookup(sessions_dir, cache_dir=cache)[path.name].verdict == "ok"
    # damaged again, then a check (the writer's path) rebuilds it too
    _page_of(cpath)
    _, recorded = checked.check_and_record(sessions_dir, cache_dir=cache)
    assert recorded
    assert verdicts.lookup(sessions_dir, cache_dir=cache)[path.name].verdict == "ok"


@pytest.mark.slow
def test_a_shm_made_group_writable_after_the_check_is_not_trusted(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """check calls a session with a group-writable -shm insecure; a verdict recorded before
    the chmod must not be believed (status said "ok" and "refused 0" beside it)."""
    cache = tmp_path / "c"
    sid, path = make_session(sessions_dir)
    shm = Path(str(path) + "-shm")
    shm.write_bytes(b"")
    os.chmod(shm, 0o600)
    _settle()
    report, recorded = checked.check_and_record(sessions_dir, cache_dir=cache)
    assert recorded and report.ok
    os.chmod(shm, 0o666)
    got = verdicts.lookup(sessions_dir, cache_dir=cache)[path.name]
    assert not got.matches(verdicts.identity_of(path))
    again, _ = checked.check_and_record(sessions_dir, cache_dir=cache)
    assert again.sessions[0].verdict == "insecure"


@pytest.mark.slow
def test_a_crashed_sessions_wal_and_shm_stay_checked_after_reads(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """Run as root, SQLite fchowns a -wal and -shm to the database's owner on every open: a
    read-only open changes their ctime (not a byte, mode or mtime). The identity used their
    ctime, so a session a kernel left with both (a crash) was "changed since last check" right
    after every check, for ever. (As another user nothing is fchowned: the test passes either
    way there.)"""
    import subprocess
    import sys

    cache = tmp_path / "c"
    sid, path = make_session(sessions_dir)
    code = (
        "import apsw, os, sys\n"
        "c = apsw.Connection(sys.argv[1])\n"
        "list(c.execute('PRAGMA wal_autocheckpoint=0'))\n"
        "c.execute(\"UPDATE session_meta SET profile = 'crashed'\")\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=30)
    assert Path(str(path) + "-wal").exists() and Path(str(path) + "-shm").exists()
    _settle()
    report, recorded = checked.check_and_record(sessions_dir, cache_dir=cache)
    assert recorded and report.sessions[0].live is None
    checked.check_and_record(sessions_dir, cache_dir=cache)  # another read of the same file
    got = verdicts.lookup(sessions_dir, cache_dir=cache)[path.name]
    assert got.matches(verdicts.identity_of(path)), sid


@pytest.mark.slow
def test_an_entry_with_a_verdict_this_build_does_not_know_is_never_checked(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """Verdicts read back are typed (results.Verdict): a cache row another build wrote with a
    verdict this build does not know counts as never checked, not as a verdict."""
    cache = tmp_path / "c"
    _, good = make_session(sessions_dir)
    _, odd = make_session(sessions_dir)
    _settle()
    assert verdicts.record(
        sessions_dir, [_entry(good), _entry(odd, "mostly_fine")], cache_dir=cache
    )
    got = verdicts.lookup(sessions_dir, cache_dir=cache)
    assert got[good.name].verdict == "ok"
    assert odd.name not in got


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    recorded=st.sets(st.integers(0, 40), max_size=25),
    asked=st.lists(st.integers(0, 45), max_size=60),
    page=st.integers(1, 6),
)
def test_the_paged_lookup_answers_as_the_whole_one(
    sessions_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    recorded: set[int],
    asked: list[int],
    page: int,
) -> None:
    """``sessions list`` asks a page of names at a time (memory flat in the directory's size):
    in any order, for names recorded or not, across page boundaries, it answers as
    :func:`verdicts.lookup`'s dict does."""
    cache = tmp_path_factory.mktemp("cache")
    found = sorted(sessions_dir.glob("*.sqlite"))  # the examples share the directory
    path = found[0] if found else make_session(sessions_dir)[1]
    stamp = verdicts.stamp(path)
    assert stamp is not None
    name = lambda i: f"01ARZ3NDEK{i:016d}.sqlite"  # noqa: E731
    entries = [verdicts.Entry(name(i), stamp, "ok", bool(i % 2), "completed", 2) for i in recorded]
    if entries:
        assert verdicts.record(sessions_dir, entries, cache_dir=cache)
    whole = verdicts.lookup(sessions_dir, cache_dir=cache)
    assert set(whole) == {name(i) for i in recorded}
    old = verdicts.Lookup.PAGE
    verdicts.Lookup.PAGE = page
    try:
        with verdicts.Lookup(sessions_dir, cache_dir=cache) as paged:
            assert bool(paged) == bool(whole)
            for i in [*asked, *sorted(asked)]:
                assert paged.get(name(i)) == whole.get(name(i)), (i, page)
    finally:
        verdicts.Lookup.PAGE = old


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_session_recovered_during_a_check_is_judged_as_recovered(
    sessions_dir: Path, tmp_path: Path, jobs: int
) -> None:
    """A check read the recovery log, then recover finished a session before the check reached
    it: the replacement (rows of lost events kept as history) was judged without its outcome
    line, `inconsistent`, and the cache kept that verdict for `sessions list`, `status` and
    `report` until the next check. Found by a red-team review. The run now reads the log again
    when it changed and judges the session as recovered."""
    from agentdb import salvage
    from agentdb.jobs import demo

    cache = tmp_path / "c"
    ids = [make_session(sessions_dir, turns=4)[0] for _ in range(3)]
    sid = ids[-1]
    demo.damage_page(sessions_dir / f"{sid}.sqlite", table="events")
    run = checked.RecordedStream(sessions_dir, None, cache_dir=cache, jobs=jobs)
    assert salvage.recover_session(sessions_dir, sid).outcome == "recovered"
    _settle()
    got = {s.session_id: s for s in run}
    assert got[sid].verdict == "ok", [f.code for f in got[sid].findings]
    assert "orphan_of_recovery" in {f.code for f in got[sid].findings}
    assert checked.cached_judgement(sessions_dir, sid, "full", cache_dir=cache).verdict == "ok"


def test_the_walks_identity_is_the_verdict_caches_key(sessions_dir: Path) -> None:
    """``sessions list`` matches a recorded verdict against the walk's own lstat: the key the
    walk builds is ``verdicts.Identity.key()`` exactly, with and without sidecars, and its
    newest timestamp leaves out the -journal as Identity does."""
    from agentdb import paths
    from agentdb.index import stat as index_stat

    sid, path = make_session(sessions_dir, turns=1)
    entry = paths.Entry(sid, path)
    for sidecars in ((), ("-wal",), ("-shm",), ("-wal", "-shm"), ("-journal",)):
        for suffix in ("-wal", "-shm", "-journal"):
            p = Path(str(path) + suffix)
            if suffix in sidecars:
                p.write_bytes(b"")
            elif p.exists():
                p.unlink()
        ident = verdicts.identity_of(path)
        assert ident is not None
        for names in (None, set(os.listdir(sessions_dir))):
            seen = index_stat.seen(entry, names)
            assert seen.vkey == ident.key(), sidecars
            assert seen.vnewest_ns == ident.newest_ns()
            assert seen.vgranularity_ns == ident.granularity_ns()
            stamped = verdicts.Recorded(path.name, ident.key(), 0, "ok", False, "", None, None)
            later = dataclasses.replace(stamped, stamped_ns=time.time_ns() + 10**10)
            assert not seen.verdict_matches(stamped) and seen.verdict_matches(later)
