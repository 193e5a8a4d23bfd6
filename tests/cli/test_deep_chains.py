"""A parent chain is as deep as there are sessions. The report's tree and `sessions tree
--json` recursed once per generation: a chain of 499 sessions ended in a RecursionError
traceback (report --html) and in one from jsonable (sessions tree --json)."""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agentdb import sessions
from agentdb.cli.main import main
from agentdb.report import SessionLine
from agentdb.report.html import _tree


def _ids(n: int) -> list[str]:
    alpha = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    out = []
    for i in range(n):
        tail = ""
        for _ in range(6):
            tail = alpha[i % 32] + tail
            i //= 32
        out.append("01M8" + "0" * 16 + tail)
    return out


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


def test_the_report_tree_of_a_chain_deeper_than_the_recursion_limit() -> None:
    n = sys.getrecursionlimit() * 3
    ids = _ids(n)
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
    a, b, c, d, e = _ids(5)
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


@pytest.mark.parametrize("depth", [1500, 60_000])
def test_sessions_tree_json_of_a_deep_chain(
    depth: int, sessions_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    ids = _ids(depth)
    rows = [
        sessions.SessionRow(
            sid, sessions_dir / f"{sid}.sqlite", "completed", "p", ids[i - 1] if i else None, i
        )
        for i, sid in enumerate(ids)
    ]
    monkeypatch.setattr(sessions, "session_tree", lambda *_: sessions.build_forest(rows))
    old = sys.getrecursionlimit()
    try:
        code = main(["--sessions-dir", str(sessions_dir), "sessions", "tree", "--json"])
        out, err = capsys.readouterr()
        doc = json.loads(out) if code == 0 else None
    finally:
        sys.setrecursionlimit(old)
    assert "Traceback" not in err
    if depth == 1500:  # drawn whole
        assert code == 0 and doc is not None, err
        node = doc["roots"][0]
        n = 1
        while node["children"]:
            node = node["children"][0]
            n += 1
        assert n == depth
    else:  # deeper than any limit: one error (JSON under --json), exit 1
        assert code == 1 and out == "" and len(err.splitlines()) == 1, err
        assert json.loads(err)["error"]["code"] == "too_deep"
