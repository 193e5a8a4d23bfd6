"""One time format, with an explicit zone: RFC 3339 UTC with Z by default; --local or $TZ
shows local time with its offset (tables only: JSON keeps UTC)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from agentdb import times
from tests.runner import Agentdb, run_cli
from tests.support import make_session

UTC_S = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def test_show() -> None:
    assert times.show("2026-05-18T17:13:52.772Z") == "2026-05-18T17:13:52Z"
    assert times.show("2026-05-18T17:13:52.772Z", ms=True) == "2026-05-18T17:13:52.772Z"
    assert times.show("2026-05-18T19:13:52+02:00") == "2026-05-18T17:13:52Z"
    assert times.show("2026-05-18T17:13:52") == "2026-05-18T17:13:52Z"  # stored UTC
    assert times.show("yesterday") == "yesterday" and times.show(None) == ""
    t = dt.datetime(2026, 5, 18, 17, 13, 52, tzinfo=times.UTC)
    assert times.rfc3339(t) == "2026-05-18T17:13:52Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", times.now(ms=True))


def test_tables_say_utc_or_local_with_its_offset(sessions_dir: Path, agentdb: Agentdb) -> None:
    sid, _ = make_session(sessions_dir, turns=1, started_at="2026-05-18T17:13:52.772Z")
    g = ["--sessions-dir", str(sessions_dir)]
    out = agentdb(*g, "sessions", "list", env={"TZ": None}).out
    assert "2026-05-18T17:13:52Z" in out
    out = agentdb(*g, "sessions", "show", sid, env={"TZ": None}).out
    assert "2026-05-18T17:13:52Z" in out
    out = agentdb(*g, "events", sid, env={"TZ": None}).out
    assert UTC_S.search(out) or re.search(r"T\d\d:\d\d:\d\d\.\d{3}Z", out)
    ny = run_cli(*g, "sessions", "list", env={"TZ": "America/New_York"}).stdout  # read at start
    assert "2026-05-18T13:13:52-04:00" in ny and "17:13:52Z" not in ny
    doc = json.loads(agentdb(*g, "sessions", "list", "--json", env={"TZ": "America/New_York"}).out)
    assert doc["sessions"][0]["started_at"] == "2026-05-18T17:13:52.772Z"  # JSON stays UTC
    local = agentdb(*g, "sessions", "list", "--local", env={"TZ": None}).out
    assert re.search(r"2026-05-18T\d\d:13:52[+-]\d\d:\d\d", local)
