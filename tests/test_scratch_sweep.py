"""The sweep of killed jobs' scratch directories (``$XDG_CACHE_HOME/agentdb/tmp``) never follows
a symlink, never leaves the cache folder, and never takes another host's scratch for a dead
job's (a home shared by two hosts: a pid alive there is not alive here). Issue 29, item 5."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentdb import fsutil


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _scratch(base: Path, name: str) -> Path:
    d = base / name
    d.mkdir(mode=0o700)
    (d / "copy.sqlite").write_bytes(b"private bytes")
    return d


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cache-home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def test_a_symlinked_tmp_is_never_followed(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = _scratch(elsewhere, f"agentdb-recover-{fsutil.host_tag()}-{_dead_pid()}-abc123")
    legacy = _scratch(elsewhere, f"agentdb-recover-{_dead_pid()}-abc123")
    (cache / "agentdb").mkdir(parents=True)
    (cache / "agentdb" / "tmp").symlink_to(elsewhere)
    with fsutil.private_workdir("agentdb-recover-") as work:
        assert not str(work).startswith(str(elsewhere))
        assert elsewhere.resolve() not in work.resolve().parents
    assert victim.exists() and legacy.exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted([victim.name, legacy.name])


def test_a_symlinked_agentdb_folder_is_never_followed(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "tmp").mkdir(parents=True)
    victim = _scratch(elsewhere / "tmp", f"agentdb-prune-{fsutil.host_tag()}-{_dead_pid()}-x1")
    cache.mkdir()
    (cache / "agentdb").symlink_to(elsewhere)
    with fsutil.private_workdir("agentdb-prune-") as work:
        assert elsewhere.resolve() not in work.resolve().parents
    assert victim.exists()


def test_a_symlink_named_like_dead_scratch_is_not_followed(cache: Path, tmp_path: Path) -> None:
    base = cache / "agentdb" / "tmp"
    base.mkdir(parents=True)
    target = _scratch(tmp_path, "precious")
    (base / f"agentdb-recover-{fsutil.host_tag()}-{_dead_pid()}-abc123").symlink_to(target)
    with fsutil.private_workdir("agentdb-recover-"):
        pass
    assert (target / "copy.sqlite").read_bytes() == b"private bytes"


def test_only_this_hosts_dead_jobs_are_swept(cache: Path) -> None:
    base = cache / "agentdb" / "tmp"
    base.mkdir(parents=True)
    me = fsutil.host_tag()
    other = "0badc0de" if me != "0badc0de" else "0badc0df"
    dead = _dead_pid()
    mine_dead = _scratch(base, f"agentdb-recover-{me}-{dead}-abc123")
    (mine_dead / "sub").mkdir()
    (mine_dead / "sub" / "copy.sqlite-wal").write_bytes(b"frames")
    (mine_dead / "link").symlink_to(
        mine_alive := _scratch(base, f"agentdb-recover-{me}-{os.getpid()}-def456")
    )
    theirs = _scratch(base, f"agentdb-recover-{other}-{dead}-abc123")  # alive on its host
    legacy = _scratch(base, f"agentdb-recover-{dead}-abc123")  # no host: whose is it?
    with fsutil.private_workdir("agentdb-recover-") as work:
        assert work.parent == base and work.name.startswith(f"agentdb-recover-{me}-{os.getpid()}-")
    assert not mine_dead.exists()
    assert mine_alive.exists() and theirs.exists() and legacy.exists()
    assert (mine_alive / "copy.sqlite").exists()  # the link to it was removed, not followed
