"""``agentdb prune`` at scale and with pinned sessions, as real processes: totals by reason,
refused rows capped, cached versions counted, ``--include-pinned`` with its confirmation on a
real terminal, and the versions it leaves unreferenced matching ``plugins refs``."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentdb import demo
from agentdb.store import Producer, SessionWriter
from tests.cli.test_prune_cli import run
from tests.test_prune import cache_version, old_session

REFUSED_ROW = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25} +refused ", re.MULTILINE)
OTHER = Producer("model", "openai", "2.0.0")  # a second cached version
CLI = [sys.executable, "-m", "agentdb.cli.main", "--sessions-dir"]


def _doc(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def _versions(doc: dict[str, Any], key: str = "pinned_versions") -> dict[str, dict[str, Any]]:
    return {f"{v['category']}/{v['name']}/{v['version']}": v for v in doc[key]}


def test_totals_by_reason_and_capped_rows(sessions_dir: Path, plugin_cache: Path) -> None:
    cache_version(plugin_cache, demo.MODEL_CACHED)
    pinned = [old_session(sessions_dir, 300 - i, model=demo.MODEL_CACHED) for i in range(14)]
    old_session(sessions_dir, 200, status="running")
    plain = [old_session(sessions_dir, 150 - i) for i in range(3)]
    newest = old_session(sessions_dir, 10, model=demo.MODEL_CACHED)  # kept by --keep-last
    args = ["prune", "--older-than", "0s", "--keep-last", "1", "--dry-run"]

    doc = _doc(run(sessions_dir, plugin_cache, *args, "--json"))
    assert doc["version"] == 1 and doc["dry_run"] is True
    sm = doc["summary"]
    assert sm["reasons"] == {"pinned": 14, "running": 1}
    assert (sm["selected"], sm["would_remove"], sm["refused"]) == (18, 3, 15)
    assert sorted(doc["would_remove"]) == sorted(plain)
    v = _versions(doc)["model/anthropic/1.4.0"]
    # 14 selected sessions pin it; the one --keep-last keeps is outside and keeps it cached
    assert (v["selected"], v["outside"], v["removed"]) == (14, 1, 0)
    assert v["unreferenced_after"] is False and doc["unreferenced_versions"] == []

    r = run(sessions_dir, plugin_cache, *args)
    assert r.returncode == 1
    assert len(REFUSED_ROW.findall(r.stdout)) == 10  # capped...
    assert "and 5 more refused" in r.stdout  # ...and says how many it left out
    assert re.search(r"^pinned +14$", r.stdout, re.MULTILINE)  # totals by reason
    assert re.search(r"^running +1$", r.stdout, re.MULTILINE)
    assert re.search(r"^model/anthropic/1\.4\.0 +14 +1 +15 still reference it$", r.stdout, re.M)
    assert newest not in r.stdout  # --keep-last kept it out of the selection
    assert "evict" not in r.stdout + r.stderr  # never advises evicting a version in use
    assert "--include-pinned removes them" in r.stderr

    r = run(sessions_dir, plugin_cache, *args, "-v")
    assert len(REFUSED_ROW.findall(r.stdout)) == 15
    assert all(s in r.stdout for s in pinned)


def test_include_pinned_removes_and_names_unreferenced_versions(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    cache_version(plugin_cache, demo.MODEL_CACHED)
    cache_version(plugin_cache, OTHER)
    only = [old_session(sessions_dir, 300 - i, model=demo.MODEL_CACHED) for i in range(2)]
    shared = old_session(sessions_dir, 250, model=OTHER)
    keeper = old_session(sessions_dir, 1, model=OTHER)  # stays: outside the selection
    running = old_session(sessions_dir, 200, model=demo.MODEL_CACHED, status="running")
    select_ = ["prune", "--until", "2d", "--json"]

    # --yes alone never implies --include-pinned
    doc = _doc(run(sessions_dir, plugin_cache, *select_, "--yes"))
    assert doc["removed"] == []
    assert doc["summary"]["reasons"] == {"pinned": 4, "running": 1}

    # with no terminal and no --yes, nothing is removed
    r = run(sessions_dir, plugin_cache, *select_, "--include-pinned")
    assert r.returncode == 1 and _doc(r)["removed"] == []
    assert all((sessions_dir / f"{s}.sqlite").exists() for s in [*only, shared])

    r = run(sessions_dir, plugin_cache, *select_, "--include-pinned", "--yes")
    doc = _doc(r)
    assert r.returncode == 1  # the running one still refuses
    assert sorted(doc["removed"]) == sorted([*only, shared])
    (ref,) = doc["refused"]
    assert ref["session_id"] == running
    assert [x["code"] for x in ref["reasons"]] == ["running"]  # not pinned any more, still running
    vs = _versions(doc)
    assert vs["model/anthropic/1.4.0"]["removed"] == 2
    assert vs["model/anthropic/1.4.0"]["staying"] == 1  # the running session still uses it
    assert vs["model/openai/2.0.0"]["outside"] == 1  # the keeper still uses it
    assert doc["unreferenced_versions"] == []

    # once the running session has ended, removing it leaves 1.4.0 with no reference at all
    with SessionWriter.open(sessions_dir, running) as w:
        w.set_status("cancelled")
    args = ["prune", running, "--include-pinned", "--yes", "--json"]  # ended just now: by id
    doc = _doc(run(sessions_dir, plugin_cache, *args))
    assert doc["removed"] == [running]
    assert list(_versions(doc, "unreferenced_versions")) == ["model/anthropic/1.4.0"]
    refs = _doc(run(sessions_dir, plugin_cache, "plugins", "refs", "--json"))
    evictable = {f"{v['category']}/{v['name']}/{v['version']}" for v in refs["unreferenced"]}
    assert "model/anthropic/1.4.0" in evictable and "model/openai/2.0.0" not in evictable
    assert (sessions_dir / f"{keeper}.sqlite").exists()


def _run_on_terminal(
    sessions_dir: Path, plugin_cache: Path, args: list[str], answer: str
) -> tuple[int, str, str]:
    """The real CLI with stdin and stderr on a pseudo-terminal; answers the prompt."""
    master, slave = os.openpty()
    env = {k: v for k, v in os.environ.items() if k != "AGENTDB_FAULT"}
    p = subprocess.Popen(
        [*CLI, str(sessions_dir), "--plugin-cache", str(plugin_cache), *args],
        stdin=slave,
        stderr=slave,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    os.close(slave)
    seen = b""
    end = time.monotonic() + 60
    try:
        while b"[y/N]" not in seen and time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                seen += os.read(master, 65536)
        assert b"[y/N]" in seen, seen
        os.write(master, answer.encode() + b"\n")
        out, _ = p.communicate(timeout=60)
        while True:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out, seen.decode(errors="replace")


def test_confirmation_lists_each_version_they_pin(sessions_dir: Path, plugin_cache: Path) -> None:
    cache_version(plugin_cache, demo.MODEL_CACHED)
    cache_version(plugin_cache, OTHER)
    a = old_session(sessions_dir, 300, model=demo.MODEL_CACHED)
    b = old_session(sessions_dir, 250, model=OTHER)
    old_session(sessions_dir, 1, model=OTHER)  # outside the selection
    args = ["prune", "--until", "2d", "--include-pinned"]
    code, _, term = _run_on_terminal(sessions_dir, plugin_cache, args, "n")
    assert code == 1 and "nothing removed" in term
    assert "2 of them are pinned" in term
    assert "model/anthropic/1.4.0: pinned by 1 removed session(s); no session references" in term
    assert "model/openai/2.0.0: pinned by 1 removed session(s); 1 session(s) that stay" in term
    assert (sessions_dir / f"{a}.sqlite").exists() and (sessions_dir / f"{b}.sqlite").exists()

    code, out, term = _run_on_terminal(sessions_dir, plugin_cache, args, "y")
    assert code == 0, term
    assert not (sessions_dir / f"{a}.sqlite").exists()
    assert not (sessions_dir / f"{b}.sqlite").exists()
    assert "plugins refs` lists it as unreferenced" in term and "model/anthropic/1.4.0" in term


def test_prune_json_validates_against_the_shipped_schema(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from agentdb import schemas

    cache_version(plugin_cache, demo.MODEL_CACHED)
    old_session(sessions_dir, 300, model=demo.MODEL_CACHED)
    old_session(sessions_dir, 200)
    for extra in ([], ["--include-pinned"]):
        doc = _doc(
            run(sessions_dir, plugin_cache, "prune", "--until", "1d", "--dry-run", "--json", *extra)
        )
        assert doc["pinned_versions"]
        jsonschema.validate(doc, schemas.load("prune"), cls=jsonschema.Draft202012Validator)
