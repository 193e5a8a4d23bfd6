"""The operator's whole day, through the real CLI as separate processes (issue: restore,
repeatable backups, ending interrupted sessions, one screen).

backup twice (the second run copies nothing, exit 0); backup after growth (updated); restore of
a missing session (check ok after); a restore that would lose events refused (exit 1, events
unchanged); sessions end on an interrupted session; prune --include-pinned (--yes alone never
implies it); status --json with a version; report --html naming every session.
"""

from __future__ import annotations

import html.parser
import json
from pathlib import Path
from typing import Any

import pytest

from agentdb.jobs import demo
from agentdb.store import SessionWriter
from tests.rows import all_rows
from tests.runner import global_options, run_cli
from tests.support import SRC, make_session
from tests.test_prune import cache_version

pytestmark = pytest.mark.slow


def agentdb(state: Path, *args: str) -> tuple[int, Any, str]:
    """One command against the day's state, as a real process; JSON parsed under --json."""
    r = run_cli(
        *global_options(state / "sessions", state / "cache"),
        *args,
        env={"PYTHONPATH": str(SRC), "XDG_CACHE_HOME": str(state / "xdg-cache")},
    )
    assert "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout) if "--json" in args and r.stdout.strip() else r.stdout
    return r.returncode, doc, r.stderr


def event_ids(path: Path) -> list[tuple[object, ...]]:
    """(sequence, id) of every event of a closed session, read without creating anything."""
    return [r[:2] for r in all_rows(path)["events"]]


def outcomes(doc: dict[str, Any]) -> dict[str, str]:
    return {s["session_id"]: s["outcome"] for s in doc["sessions"]}


class Ids(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_an_operators_day(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    (tmp_path / "cache").mkdir(mode=0o700)
    backups = tmp_path / "backups"
    a, a_path = make_session(sessions, turns=2)
    b, b_path = make_session(sessions, turns=2)
    pinned, _ = make_session(sessions, turns=1, model=demo.MODEL_CACHED)
    cache_version(tmp_path / "cache", demo.MODEL_CACHED)
    # An interrupted session: its kernel died while it was running.
    w = SessionWriter.create(sessions, profile="coder")
    demo._turns(w, demo.MODEL_OLD, 1, seed=5)
    interrupted = w.session_id
    w.close()
    everyone = sorted([a, b, pinned, interrupted])

    # 1. Backups, twice: the second run copies nothing and exits 0.
    code, doc, err = agentdb(tmp_path, "backup", "--all", "--to", str(backups), "--json")
    assert code == 0, err
    assert set(outcomes(doc).values()) == {"copied"}
    code, doc, err = agentdb(tmp_path, "backup", "--all", "--to", str(backups), "--json")
    assert code == 0, err
    assert set(outcomes(doc).values()) == {"unchanged"}

    # 2. A session grows: the next backup updates its copy.
    w = SessionWriter.open(sessions, a)
    w.set_status("running")
    demo._turns(w, demo.MODEL_OLD, 1, seed=6)
    w.set_status("completed")
    w.close()
    code, doc, err = agentdb(tmp_path, "backup", "--all", "--to", str(backups), "--json")
    assert code == 0, err
    assert outcomes(doc)[a] == "updated" and outcomes(doc)[b] == "unchanged"

    # 3. A session file is lost: restore brings it back, and check says ok.
    before_b = event_ids(b_path)
    b_path.rename(tmp_path / "lost.sqlite")
    code, doc, err = agentdb(tmp_path, "restore", b, "--from", str(backups), "--json")
    assert code == 0, err
    assert outcomes(doc)[b] == "restored"
    assert event_ids(b_path) == before_b
    code, doc, err = agentdb(tmp_path, "check", b, "--json")
    assert code == 0 and doc["sessions"][0]["verdict"] == "ok", doc

    # 4. A restore that would lose events is refused; the session is unchanged.
    w = SessionWriter.open(sessions, b)
    w.set_status("running")
    demo._turns(w, demo.MODEL_OLD, 1, seed=7)
    w.set_status("completed")
    w.close()
    grown = event_ids(b_path)
    code, doc, err = agentdb(tmp_path, "restore", b, "--from", str(backups), "--json")
    assert code == 1
    assert outcomes(doc)[b] == "refused"
    assert event_ids(b_path) == grown

    # 5. The interrupted session is ended (cancelled by default).
    code, doc, err = agentdb(tmp_path, "sessions", "end", interrupted, "--json")
    assert code == 0, err
    code, doc, err = agentdb(tmp_path, "sessions", "show", interrupted, "--json")
    assert doc["session"]["status"] == "cancelled" and doc["session"]["ended_at"]

    # 6. Prune a pinned session: --yes alone refuses it, --include-pinned removes it and names
    #    the version it leaves unreferenced.
    code, doc, err = agentdb(tmp_path, "prune", pinned, "--yes", "--json")
    assert code == 0 and pinned not in doc["removed"]  # a refusal asked for: reported, exit 0
    assert doc["refused"][0]["reasons"][0]["code"] == "pinned"
    code, doc, err = agentdb(tmp_path, "prune", pinned, "--include-pinned", "--yes", "--json")
    assert code == 0, err
    assert doc["removed"] == [pinned]
    assert [v["name"] for v in doc["unreferenced_versions"]] == [demo.MODEL_CACHED.name]
    everyone.remove(pinned)

    # 7. One screen, as JSON with a version.
    code, doc, err = agentdb(tmp_path, "status", "--json")
    assert isinstance(doc["version"], int)
    assert doc["summary"]["sessions"] == len(everyone)
    sm = doc["summary"]  # b was checked after its restore, and has grown since
    assert (sm["never_checked"], sm["changed_since_check"]) == (len(everyone) - 1, 1)
    assert code == 1 and [n["command"] for n in doc["next"]] == ["agentdb check --problems"]
    code, doc, err = agentdb(tmp_path, "check", "--json")
    assert code == 0, doc
    code, doc, err = agentdb(tmp_path, "status", "--json")
    assert doc["summary"]["ok"] == len(everyone) and doc["summary"]["interrupted"] == 0, doc
    assert code == 0 and doc["next"] == [], doc["next"]

    # 8. A picture that names every session.
    page = tmp_path / "report.html"
    code, _, err = agentdb(tmp_path, "report", "--html", str(page))
    assert code in (0, 1), err
    parser = Ids()
    parser.feed(page.read_text())
    text = " ".join(parser.text)
    for sid in everyone:
        assert sid in text, sid
