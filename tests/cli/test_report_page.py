"""What the report page says, as a person reads it (issue 30): sizes in binary units, only
recoveries counted as recoveries, words instead of internal codes, "unreadable" as a verdict
not a status, no empty problem table, a time axis with gaps, an honest note on missing costs."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest

from agentdb.jobs import demo
from agentdb.views import report
from agentdb.views.report import DayCost, html
from tests.cli.test_report import parse
from tests.runner import Agentdb, global_options, run_cli
from tests.support import make_session

CODES = ("not_ok", "needs_migration", "error_max_turns", "unreadable</span>")


def page_text(path: Path) -> str:
    return "".join(parse(path).text)


def test_sizes_are_binary_units_with_the_exact_count_beside(
    tmp_path: Path, sessions_dir: Path, agentdb: Agentdb
) -> None:
    for _ in range(3):
        make_session(sessions_dir, turns=3)
    out = tmp_path / "r.html"
    code, doc_text, err = agentdb(
        "--sessions-dir", str(sessions_dir), "report", "--html", str(out), "--json"
    )
    doc = json.loads(doc_text)
    raw = out.read_text()
    size = doc["summary"]["size_bytes"]
    m = re.search(r'data-k="summary.size_bytes" data-bytes="(\d+)"[^>]*>([^<]*)<', raw)
    assert m and int(m.group(1)) == size
    assert m.group(2) == html.human_bytes(size) and m.group(2).endswith("KiB")
    assert f"{size} bytes<" not in raw  # never the raw count as the figure
    assert html.human_bytes(91316224) == "87.1 MiB" and html.human_bytes(512) == "512 bytes"


def test_recoveries_logged_counts_recoveries_only(tmp_path: Path) -> None:
    state = demo.build(tmp_path / "demo")
    g = global_options(state.sessions_dir, state.plugin_cache)
    assert run_cli(*g, "recover", state.by_role("damaged").session_id).returncode == 0
    running = state.by_role("running").session_id
    assert run_cli(*g, "sessions", "end", running).returncode == 0  # logs an "end" line
    r = run_cli(*g, "prune", "--older-than", "150d", "--yes")  # logs "pruned" lines
    assert r.returncode in (0, 1), r.stderr
    log = (state.sessions_dir.parent / "recovery.log").read_text().splitlines()
    jobs = {json.loads(line).get("job") for line in log if '"outcome"' in line}
    assert {"prune", None} <= jobs  # recover's lines name no job
    st = json.loads(run_cli(*g, "status", "--json").stdout)
    assert st["summary"]["recoveries_logged"] == 1 == st["summary"]["recovered"]
    assert st["recoveries"]["other_jobs"].get("prune", 0) >= 1
    out = tmp_path / "r.html"
    doc = json.loads(run_cli(*g, "report", "--html", str(out), "--json").stdout)
    assert doc["summary"]["recoveries_logged"] == 1
    assert [r["job"] for r in doc["recoveries"]] == ["recover"]  # prune and end replace nothing
    assert parse(out).numbers["summary.recoveries_logged"] == "1"


def unreadable_state(sessions_dir: Path) -> str:
    make_session(sessions_dir, turns=2)
    make_session(sessions_dir, turns=1, revision=1)  # needs migration
    bad, path = make_session(sessions_dir, turns=2)
    path.write_bytes(b"this is not a database" * 300)  # its status cannot be read
    return bad


def test_unreadable_is_a_verdict_and_its_cost_is_said_unknown(
    tmp_path: Path, sessions_dir: Path, agentdb: Agentdb
) -> None:
    bad = unreadable_state(sessions_dir)
    out = tmp_path / "r.html"
    code, text, _ = agentdb(
        "--sessions-dir", str(sessions_dir), "report", "--html", str(out), "--json"
    )
    doc = json.loads(text)
    assert doc["by_status"].get("unreadable") == 1  # the JSON keeps its code
    assert doc["summary"]["costs_unknown"] == 1
    raw = out.read_text()
    label = raw.split(f'data-session="{bad}"', 1)[1].split("</li>", 1)[0]
    assert "unreadable now" in label and "cost unknown" in label
    assert '<span class="tag">unreadable</span>' not in raw  # not a status tag
    legend = raw.split("<h3>By status</h3>", 1)[1].split("<h3>", 1)[0]
    assert "unreadable" not in legend.split("<p", 1)[0]  # not in the status bar
    assert "status unknown" in legend
    shown = page_text(out)
    assert "1 sessions' costs unknown" in shown
    for code_word in CODES:
        assert code_word not in raw.replace('data-k="summary.needs_migration"', ""), code_word


def test_no_empty_problem_table(
    tmp_path: Path, sessions_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(4):
        make_session(sessions_dir, turns=1)
    monkeypatch.setattr(report, "TREE_LIMIT", 2)
    r = report.collect(sessions_dir, tmp_path / "none", cache_dir=tmp_path / "c")
    assert not r.sessions_complete and r.sessions == []
    page = html.render(r)
    tree = page.split('id="tree"', 1)[1].split("</section>", 1)[0]
    assert "<table" not in tree and "none:" in tree


def test_the_cost_chart_is_a_time_axis() -> None:
    days = [
        DayCost("2026-03-01", 1.0, 1),
        DayCost("2026-03-02", 2.0, 1),
        DayCost("2026-04-30", 1.0, 1),
    ]
    svg = html._cost_chart(days)
    xs = [float(x) for x in re.findall(r'<rect x="([0-9.]+)"', svg)]
    assert len(xs) == 3
    # one day apart, then 59 days apart: the gap shows as space, not as a neighbour
    assert (xs[2] - xs[1]) == pytest.approx(59 * (xs[1] - xs[0]), rel=1e-3)
    labels = re.findall(r'text-anchor="(?:start|middle|end)">([^<]+)</text>', svg)
    assert len(labels) >= 3  # ticks between the ends, not only the two ends
    assert {"Mar 16", "Apr 13"} <= set(labels)  # fortnightly Mondays over two months
    assert "61 days, 3 with spend" in svg
    # a week: every day labelled
    week = [
        DayCost((dt.date(2026, 1, 1) + dt.timedelta(days=i)).isoformat(), 1.0, 1) for i in (0, 6)
    ]
    assert len(re.findall(r"Jan \d", html._cost_chart(week))) == 7


def test_the_model_bar_scales_with_its_card(tmp_path: Path, sessions_dir: Path) -> None:
    make_session(sessions_dir, turns=2)
    r = report.collect(sessions_dir, tmp_path / "none", cache_dir=tmp_path / "c")
    page = html.render(r)
    model = page.split('id="cost-model"', 1)[1].split("</section>", 1)[0]
    assert '<svg width="100%"' in model and 'width="200"' not in model


def test_the_page_shows_times_as_every_table_does() -> None:
    """One time format (issue 30): RFC 3339 UTC with Z, to the second; a value that is not a
    time (another build's log) is shown as it is."""
    from agentdb.views.report import html

    assert html._when("2026-12-04T17:36:06.123Z") == "2026-12-04T17:36:06Z"
    assert html._when("2026-12-04T12:36:06-05:00") == "2026-12-04T17:36:06Z"
    assert html._when("yesterday") == "yesterday"
