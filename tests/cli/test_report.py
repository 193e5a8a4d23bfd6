"""agentdb report --html: every number on the page equals the JSON's; hostile text stays text;
the file is never written over, through a link, or into the sessions directory."""

from __future__ import annotations

import json
import os
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from agentdb.jobs import demo
from agentdb.store import Event, Producer, SessionWriter, Usage
from agentdb.views import report
from agentdb.views.report import SessionLine
from agentdb.views.report.html import _tree
from tests.runner import run_cli
from tests.support import make_session, ulids


class Page(HTMLParser):
    """Every data-k number, every data-session id, every start tag."""

    def __init__(self) -> None:
        super().__init__()
        self.numbers: dict[str, str] = {}  # key -> its text (every occurrence must agree)
        self.seen: list[tuple[str, str]] = []  # (key, text) of every occurrence
        self.sessions: list[str] = []
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self._key: str | None = None
        self.text: list[str] = []
        self.sizes: list[str] = []  # data-bytes of every size shown in binary units

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)
        a = dict(attrs)
        if a.get("data-k") and a.get("data-bytes") is not None:  # shown in KiB/MiB: the
            self.seen.append((str(a["data-k"]), str(a["data-bytes"])))  # exact count is here
            self.sizes.append(str(a["data-bytes"]))
        elif a.get("data-k"):
            self._key = str(a["data-k"])
            self.seen.append((self._key, ""))
        if a.get("data-session"):
            self.sessions.append(str(a["data-session"]))

    def handle_endtag(self, tag: str) -> None:
        self._key = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._key is not None:
            key, text = self.seen[-1]
            self.seen[-1] = (key, text + data)


def parse(path: Path) -> Page:
    p = Page()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    for key, text in p.seen:
        assert p.numbers.setdefault(key, text) == text, f"{key} shown as two numbers"
    return p


def lookup(doc: Any, key: str) -> Any:
    for part in key.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def assert_numbers_match(page: Page, doc: dict[str, Any]) -> None:
    assert page.numbers, "no numbers found on the page"
    for key, shown in page.seen:
        value = lookup(doc, key)
        if isinstance(value, float) or key.endswith("cost_usd"):
            assert shown == f"{float(value):.4f}", key
        else:
            assert shown == str(value), key


@pytest.mark.slow
def test_report_names_every_session_and_matches_the_json(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "demo")
    g = ("--sessions-dir", str(state.sessions_dir), "--plugin-cache", str(state.plugin_cache))
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdgcache")}
    assert run_cli(*g, "recover", state.by_role("damaged").session_id).returncode == 0
    time.sleep(0.12)
    run_cli(*g, "check", env=env)
    out = tmp_path / "r.html"
    p = run_cli(*g, "report", "--html", str(out), "--json", env=env)
    assert p.returncode == 0, p.stderr  # written: 0, though the page lists something to do
    doc = json.loads(p.stdout)
    assert doc["version"] == 1 and doc["sessions_complete"]
    page = parse(out)
    assert sorted(page.sessions) == sorted(s.session_id for s in state.sessions)
    assert_numbers_match(page, doc)
    for key in ("summary.sessions", "summary.cost_usd", "summary.damaged", "summary.ok"):
        assert key in page.numbers
    assert any(k.startswith("cost_by_day.") for k in page.numbers)
    assert any(k.startswith("cost_by_model.") for k in page.numbers)
    assert any(k.startswith("recoveries.") for k in page.numbers)  # the demo recovered one
    assert any(k.startswith("pinned.") for k in page.numbers)
    # the same numbers as the other commands' JSON
    status = json.loads(run_cli(*g, "status", "--json", env=env).stdout)
    for k, v in status["summary"].items():
        if not k.endswith("age_seconds"):
            assert doc["summary"][k] == v, k
    listed = json.loads(run_cli(*g, "sessions", "list", "--json").stdout)
    rows = listed["sessions"] if isinstance(listed, dict) else listed
    costs = {r["session_id"]: r["cost_usd"] for r in rows}
    for i, s in enumerate(doc["sessions"]):
        assert page.numbers[f"sessions.{i}.cost_usd"] == f"{costs[s['session_id']]:.4f}"
    assert abs(doc["summary"]["cost_usd"] - sum(costs.values())) < 1e-9
    assert abs(sum(d["cost_usd"] for d in doc["cost_by_day"]) - sum(costs.values())) < 1e-9
    # names read from the files are shown as text (never as Python reprs of their bytes)
    text = "".join(page.text)
    assert "claude-sonnet" in text and "anthropic" in text and "b'" not in text
    assert [m["model"] for m in doc["cost_by_model"]] == ["claude-sonnet"]
    # self-contained: no script, no external reference
    assert "script" not in page.tags
    for name, value in page.attrs:
        if name in ("src", "href"):
            raise AssertionError(f"external reference {name}={value}")
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_hostile_text_is_escaped(tmp_path: Path, sessions_dir: Path) -> None:
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>\x1b[31m'
    w = SessionWriter.create(sessions_dir, profile=evil)
    model = Producer("model", evil[:40], "1.0")
    w.emit(Event("message", model, b"{}", usage=Usage(evil, evil, 10, 10, 0.5)))
    w.set_status("completed")
    w.close()
    out = tmp_path / "r.html"
    p = run_cli("--sessions-dir", str(sessions_dir), "report", "--html", str(out))
    assert p.returncode in (0, 1), p.stderr
    page = parse(out)
    assert "script" not in page.tags and "img" not in page.tags
    assert not any(n.startswith("on") for n, _ in page.attrs)
    text = "".join(page.text)
    assert "<script>alert(1)</script>" in text  # shown as text
    assert "\x1b" not in out.read_text()


@pytest.mark.slow
def test_file_rules(tmp_path: Path, sessions_dir: Path) -> None:
    make_session(sessions_dir)
    g = ("--sessions-dir", str(sessions_dir))
    out = tmp_path / "r.html"
    out.write_text("keep me")
    p = run_cli(*g, "report", "--html", str(out))
    assert p.returncode == 1 and "--force" in p.stderr and out.read_text() == "keep me"
    assert "Traceback" not in p.stderr
    # a symlink is never followed: refused without --force, replaced (not its target) with it
    target = tmp_path / "target"
    target.write_text("target")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    assert run_cli(*g, "report", "--html", str(link)).returncode == 1
    assert run_cli(*g, "report", "--html", str(link), "--force").returncode in (0, 1)
    assert target.read_text() == "target" and not link.is_symlink()
    assert "<!DOCTYPE html>" in link.read_text()
    assert run_cli(*g, "report", "--html", str(out), "--force").returncode in (0, 1)
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert not [n for n in os.listdir(tmp_path) if "agentdb-tmp" in n]
    # never inside the sessions directory, however it is named
    before = sorted(os.listdir(sessions_dir))
    p = run_cli(*g, "report", "--html", str(sessions_dir / "r.html"))
    assert p.returncode == 1 and "sessions directory" in p.stderr
    alias = tmp_path / "alias"
    alias.symlink_to(sessions_dir)
    assert run_cli(*g, "report", "--html", str(alias / "r.html")).returncode == 1
    assert sorted(os.listdir(sessions_dir)) == before
    assert run_cli(*g, "report").returncode == 2  # neither --html nor --json


@pytest.mark.slow
def test_many_sessions_keep_the_page_bounded(
    tmp_path: Path, sessions_dir: Path, monkeypatch
) -> None:
    ids = [make_session(sessions_dir, turns=1)[0] for _ in range(6)]
    bad = make_session(sessions_dir, turns=1, revision=1)[0]
    monkeypatch.setattr(report, "TREE_LIMIT", 3)
    monkeypatch.setattr(report, "PROBLEM_LIMIT", 2)
    r = report.collect(sessions_dir, tmp_path / "none", cache_dir=tmp_path / "c")
    assert not r.sessions_complete
    assert [s.session_id for s in r.sessions] == [bad]
    assert r.summary.sessions == len(ids) + 1 and r.summary.sessions_shown == 1
    from agentdb.views.report import html

    out = tmp_path / "r.html"
    out.write_text(html.render(r))
    page = parse(out)
    assert page.sessions == [bad]
    assert page.numbers["summary.sessions"] == "7"


@pytest.mark.slow
def test_force_never_replaces_a_device_fifo_log_or_database(
    tmp_path: Path, sessions_dir: Path
) -> None:
    """--force renames over plain files only: as root, renaming over /dev/null replaced the
    device; it also replaced a FIFO, the recovery log and a backup copy."""
    sid, _ = make_session(sessions_dir)
    g = ("--sessions-dir", str(sessions_dir))
    backups = tmp_path / "backups"
    assert run_cli(*g, "backup", sid, "--to", str(backups)).returncode == 0
    copy = backups / f"{sid}.sqlite"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    log = sessions_dir.parent / "recovery.log"
    log.write_text('{"event":"outcome"}\n')
    for target, why in ((fifo, "not a regular file"), (log, "recovery log"), (copy, "SQLite")):
        before = os.lstat(target)
        data = None if target == fifo else target.read_bytes()
        p = run_cli(*g, "report", "--html", str(target), "--force")
        assert p.returncode == 1 and why in p.stderr, (target, p.stderr)
        assert "Traceback" not in p.stderr
        after = os.lstat(target)
        assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
        if data is not None:
            assert target.read_bytes() == data
    assert not [n for n in os.listdir(tmp_path) if "agentdb-tmp" in n]
    # a plain file (an earlier report) is still replaced
    old = tmp_path / "old.html"
    old.write_text("old report")
    assert run_cli(*g, "report", "--html", str(old), "--force").returncode in (0, 1)
    assert old.read_text().startswith("<!DOCTYPE html>")


class _Depth(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.depth = self.deepest = self.items = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "ul":
            self.depth += 1
            self.deepest = max(self.deepest, self.depth)
        elif tag == "li":
            self.items += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "ul":
            self.depth -= 1


@pytest.mark.slow
def test_the_report_tree_of_a_chain_deeper_than_the_recursion_limit() -> None:
    n = sys.getrecursionlimit() * 3
    ids = ulids(n)
    lines = [
        SessionLine(sid, "completed", "p", ids[i - 1] if i else None, i, None, 0.0, "ok")
        for i, sid in enumerate(ids)
    ]
    page = _tree(lines)
    p = _Depth()
    p.feed(page)
    p.close()
    assert (p.deepest, p.items, p.depth) == (n, n, 0)
    # siblings and a cycle still come out as before: each session once, properly nested
    a, b, c, d, e = ulids(5)
    small = [
        SessionLine(a, "completed", "p", None, 0, None, 0.0, "ok"),
        SessionLine(b, "completed", "p", a, 1, None, 0.0, "ok"),
        SessionLine(c, "completed", "p", a, 1, None, 0.0, "ok"),
        SessionLine(d, "completed", "p", e, 1, None, 0.0, "ok"),
        SessionLine(e, "completed", "p", d, 1, None, 0.0, "ok"),
    ]
    page = _tree(small)
    assert all(page.count(f'data-session="{x}"') == 1 for x in (a, b, c, d, e))
    assert page.index(a) < page.index(b) < page.index(c)
    p = _Depth()
    p.feed(page)
    assert (p.deepest, p.items, p.depth) == (2, 5, 0)
