"""The report as one self-contained HTML page: inline CSS and SVG, no script, no network.

Every text that came from a session file (profiles, model names, ids in a hostile log) goes
through :func:`esc`; a Content-Security-Policy forbids scripts and any fetch even if something
slipped through. Every number on the page is an element with ``data-k="<path>"`` naming where
the same number is in the ``report --json`` document, so a test can compare them one by one.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from typing import Any

from agentdb.errors import visible
from agentdb.report import DayCost, Report, SessionLine

_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;
background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#b8c0d0;font-size:12px}
main{padding:8px 28px 40px;max-width:1200px}
section{background:#fff;border:1px solid #dde1e8;border-radius:8px;margin:16px 0;padding:14px 18px}
h2{font-size:16px;margin:0 0 10px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{border:1px solid #dde1e8;border-radius:6px;padding:8px 12px;min-width:120px}
.card .n{font-size:22px;font-weight:600;display:block}.card .l{color:#5b6474;font-size:12px}
.bad .n{color:#b42318}.warn .n{color:#b54708}.good .n{color:#067647}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eef0f3;vertical-align:top}
th{color:#5b6474;font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,Menlo,monospace}
ul.tree{list-style:none;padding-left:18px;margin:2px 0}ul.tree>li{margin:2px 0}
.tag{display:inline-block;border-radius:4px;padding:0 6px;font-size:11px;margin-left:4px;
background:#eef0f3}
.tag.bad{background:#fee4e2;color:#b42318}.tag.warn{background:#fef0c7;color:#b54708}
.tag.good{background:#dcfae6;color:#067647}
.next code{background:#f0f2f5;padding:2px 6px;border-radius:4px}
.muted{color:#5b6474}svg text{font:11px system-ui,sans-serif;fill:#5b6474}
"""

STATUS_COLORS = {
    "completed": "#17b26a",
    "running": "#2e90fa",
    "cancelled": "#98a2b3",
    "failed": "#f04438",
    "error_max_turns": "#f79009",
    "error_max_budget_usd": "#f79009",
    "error_max_wall_clock": "#f79009",
    "unreadable": "#b42318",
}
VERDICT_COLORS = {"ok": "#17b26a", "needs_migration": "#f79009"}


def esc(value: Any) -> str:
    """Text for an HTML element or attribute: markup escaped, control characters visible."""
    return html.escape(visible(str(value).translate(_CONTROLS)), quote=True)


def num(key: str, value: int | float | None, *, money: bool = False) -> str:
    if value is None or not math.isfinite(value):
        shown = "-"  # as in the JSON document, where a non-finite number is null
    elif money:
        shown = f"{float(value):.4f}"
    else:
        shown = str(int(value))
    return f'<span class="v" data-k="{esc(key)}">{shown}</span>'


def _card(label: str, key: str, value: Any, tone: str = "", *, money: bool = False) -> str:
    return (
        f'<div class="card {tone}"><span class="n">{"$" if money else ""}'
        f'{num(key, value, money=money)}</span><span class="l">{esc(label)}</span></div>'
    )


def _stacked_bar(counts: dict[str, int], colors: dict[str, str], key: str) -> str:
    total = sum(counts.values())
    if not total:
        return '<p class="muted">none</p>'
    width, x, parts, legend = 800.0, 0.0, [], []
    for name, n in counts.items():
        w = width * n / total
        color = colors.get(name, "#f04438")
        parts.append(
            f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="22" fill="{color}">'
            f"<title>{esc(name)}: {n}</title></rect>"
        )
        legend.append(
            f'<span class="tag" style="border-left:10px solid {color}">{esc(name)} '
            f"{num(f'{key}.{name}', n)}</span>"
        )
        x += w
    svg = (
        f'<svg role="img" width="100%" viewBox="0 0 {width:.0f} 22" preserveAspectRatio="none" '
        f'height="22">{"".join(parts)}</svg>'
    )
    return svg + "<div>" + " ".join(legend) + "</div>"


def _cost_chart(days: list[DayCost]) -> str:
    days = [d for d in days if d.day != "unknown"]  # in the table, not on a time axis
    if not days:
        return '<p class="muted">no cost recorded</p>'
    top = max(d.cost_usd for d in days) or 1.0
    n = len(days)
    w, h, pad = 800.0, 160.0, 24.0
    bw = w / n
    bars = []
    for i, d in enumerate(days):
        bh = (h - pad) * d.cost_usd / top
        bars.append(
            f'<rect x="{i * bw + bw * 0.1:.2f}" y="{h - pad - bh:.2f}" '
            f'width="{max(bw * 0.8, 0.5):.2f}" '
            f'height="{bh:.2f}" fill="#2e90fa"><title>{esc(d.day)}: '
            f"${d.cost_usd:.4f}, {d.turns} turns</title></rect>"
        )
    labels = (
        f'<text x="0" y="{h - 6:.0f}">{esc(days[0].day)}</text>'
        f'<text x="{w:.0f}" y="{h - 6:.0f}" text-anchor="end">{esc(days[-1].day)}</text>'
        f'<text x="0" y="12">max ${top:.4f}/day</text>'
    )
    return (
        f'<svg role="img" width="100%" viewBox="0 0 {w:.0f} {h:.0f}" height="{h:.0f}">'
        + "".join(bars)
        + labels
        + "</svg>"
    )


def _table(headers: Iterable[str], rows: Iterable[str], nums: Iterable[int] = ()) -> str:
    right = set(nums)
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if i in right else f"<th>{esc(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = "".join(rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _verdict_tag(v: str | None) -> str:
    if v is None:
        return '<span class="tag">not checked since</span>'
    tone = "good" if v == "ok" else "warn" if v == "needs_migration" else "bad"
    return f'<span class="tag {tone}">{esc(v)}</span>'


def _session_label(line: SessionLine, i: int) -> str:
    problems = "".join(f'<span class="tag bad">{esc(p)}</span>' for p in line.problems)
    return (
        f'<code data-session="{esc(line.session_id)}">{esc(line.session_id)}</code> '
        f'<span class="tag">{esc(line.status)}</span>'
        f" {esc(line.profile or '')} · ${num(f'sessions.{i}.cost_usd', line.cost_usd, money=True)}"
        f"{_verdict_tag(line.verdict)}{problems}"
    )


def _tree(lines: list[SessionLine]) -> str:
    index = {ln.session_id: i for i, ln in enumerate(lines)}
    children: dict[str, list[int]] = {}
    roots: list[int] = []
    for i, ln in enumerate(lines):
        parent = ln.parent_session_id
        if parent is not None and parent in index and parent != ln.session_id:
            children.setdefault(parent, []).append(i)
        else:
            roots.append(i)
    seen: set[int] = set()

    def render(top: int) -> str:
        """``top``'s label and its subtree, without recursion (a parent chain can be as deep as
        there are sessions: recursion ended in a RecursionError traceback)."""
        parts: list[str] = []
        stack: list[int | str] = [top]  # a session's index, or markup to emit
        seen.add(top)
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                parts.append(item)
                continue
            ln = lines[item]
            parts.append(_session_label(ln, item))
            kids = [k for k in children.get(ln.session_id, []) if k not in seen]
            if not kids:
                continue
            seen.update(kids)
            parts.append('<ul class="tree">')
            stack.append("</ul>")
            for k in reversed(kids):
                stack.extend(("</li>", k, "<li>"))
        return "".join(parts)

    out = [f"<li>{render(i)}</li>" for i in roots]
    # members of a parent cycle are reached from no root: list them flat
    out += [f"<li>{render(i)}</li>" for i in range(len(lines)) if i not in seen]
    return f'<ul class="tree">{"".join(out)}</ul>'


def render(report: Report) -> str:
    s = report.summary
    cards = "".join(
        [
            _card("sessions", "summary.sessions", s.sessions),
            _card("bytes on disk", "summary.size_bytes", s.size_bytes),
            _card("ok at last check", "summary.ok", s.ok, "good"),
            _card("damaged", "summary.damaged", s.damaged, "bad" if s.damaged else ""),
            _card("refused", "summary.refused", s.refused, "bad" if s.refused else ""),
            _card(
                "interrupted",
                "summary.interrupted",
                s.interrupted,
                "warn" if s.interrupted else "",
            ),
            _card(
                "need migration",
                "summary.needs_migration",
                s.needs_migration,
                "warn" if s.needs_migration else "",
            ),
            _card("changed since check", "summary.changed_since_check", s.changed_since_check),
            _card("never checked", "summary.never_checked", s.never_checked),
            _card("open right now", "summary.live", s.live),
            _card("recoveries logged", "summary.recoveries_logged", s.recoveries_logged),
            _card("total cost", "summary.cost_usd", s.cost_usd, money=True),
        ]
    )
    nxt = (
        '<ul class="next">'
        + "".join(f"<li><code>{esc(n.command)}</code> — {esc(n.why)}</li>" for n in report.next)
        + "</ul>"
        if report.next
        else '<p class="good">Nothing needs doing.</p>'
    )
    health = (
        f'<section id="health"><h2>Health</h2><div class="cards">{cards}</div>'
        f"<h3>By status</h3>{_stacked_bar(report.by_status, STATUS_COLORS, 'by_status')}"
        f"<h3>By verdict at the last check</h3>"
        f"{_stacked_bar(report.by_verdict, VERDICT_COLORS, 'by_verdict')}"
        f"<h3>Next</h3>{nxt}</section>"
    )
    day_rows = [
        f"<tr><td>{esc(d.day)}</td>"
        f'<td class="num">{num(f"cost_by_day.{i}.cost_usd", d.cost_usd, money=True)}</td>'
        f'<td class="num">{num(f"cost_by_day.{i}.turns", d.turns)}</td></tr>'
        for i, d in enumerate(report.cost_by_day)
    ]
    shown = (
        ""
        if s.days_shown == s.cost_days
        else f'<p class="muted">the newest {s.days_shown} of {s.cost_days} days</p>'
    )
    costs = (
        f'<section id="cost-day"><h2>Cost per day</h2>{_cost_chart(report.cost_by_day)}{shown}'
        f"<details><summary>per day</summary>"
        f"{_table(['day', 'cost (USD)', 'turns'], day_rows, (1, 2))}</details></section>"
    )
    top = max((m.cost_usd for m in report.cost_by_model), default=0.0) or 1.0
    model_rows = [
        f"<tr><td>{esc(m.provider)}</td><td>{esc(m.model)}</td>"
        f'<td class="num">{num(f"cost_by_model.{i}.cost_usd", m.cost_usd, money=True)}</td>'
        f'<td class="num">{num(f"cost_by_model.{i}.turns", m.turns)}</td>'
        f'<td class="num">{num(f"cost_by_model.{i}.sessions", m.sessions)}</td>'
        f'<td><svg width="200" height="12"><rect width="{200 * m.cost_usd / top:.1f}" '
        f'height="12" fill="#7a5af8"/></svg></td></tr>'
        for i, m in enumerate(report.cost_by_model)
    ]
    models = (
        '<section id="cost-model"><h2>Cost per model</h2>'
        + _table(
            ["provider", "model", "cost (USD)", "turns", "sessions", ""], model_rows, (2, 3, 4)
        )
        + "</section>"
    )
    if report.sessions_complete:
        count = num("summary.sessions_shown", s.sessions_shown)
        tree = f'<section id="tree"><h2>Sessions ({count})</h2>{_tree(report.sessions)}</section>'
    else:
        rows = [
            f"<tr><td>{_session_label(ln, i)}</td></tr>" for i, ln in enumerate(report.sessions)
        ]
        tree = (
            f'<section id="tree"><h2>Top problem sessions '
            f"({num('summary.sessions_shown', s.sessions_shown)} of "
            f'{num("summary.sessions", s.sessions)})</h2><p class="muted">Too many sessions '
            "to draw each one; <code>agentdb sessions tree</code> prints the whole tree.</p>"
            + _table(["session"], rows)
            + "</section>"
        )
    pin_rows = [
        f"<tr><td>{esc(p.category)}</td><td>{esc(p.name)}</td><td>{esc(p.version)}</td>"
        f'<td class="num">{num(f"pinned.{i}.sessions", p.sessions)}</td></tr>'
        for i, p in enumerate(report.pinned)
    ]
    pinned = (
        '<section id="plugins"><h2>Cached plugin versions sessions pin</h2>'
        + (
            _table(["category", "name", "version", "sessions"], pin_rows, (3,))
            if pin_rows
            else '<p class="muted">none</p>'
        )
        + "</section>"
    )
    rec_rows = [
        f"<tr><td>{esc(r.time)}</td><td><code>{esc(r.session_id or '?')}</code></td>"
        f"<td>{esc(r.outcome)}</td>"
        f'<td class="num">{num(f"recoveries.{i}.events_lost", r.events_lost)}</td>'
        f"<td>{esc(_ranges(r.lost_ranges)) or '-'}</td></tr>"
        for i, r in enumerate(report.recoveries)
    ]
    recoveries = (
        '<section id="recoveries"><h2>Recovery history</h2>'
        + (
            _table(
                ["time", "session", "outcome", "events lost", "event sequences lost"],
                rec_rows,
                (3,),
            )
            if rec_rows
            else '<p class="muted">no recoveries logged</p>'
        )
        + "</section>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>agentdb report</title><style>{CSS}</style></head><body>"
        f"<header><h1>agentdb report</h1><p>{esc(report.sessions_dir)} · generated "
        f"{esc(report.generated_at)}</p></header><main>"
        + health
        + costs
        + models
        + tree
        + pinned
        + recoveries
        + "</main></body></html>\n"
    )


def _ranges(ranges: list[list[int]]) -> str:
    parts = [f"{a}" if a == b else f"{a}–{b}" for a, b in ranges[:50]]
    more = f" and {len(ranges) - 50} more ranges" if len(ranges) > 50 else ""
    return ", ".join(parts) + more
