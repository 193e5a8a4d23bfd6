"""The report as one self-contained HTML page: inline CSS and SVG, no script, no network.

Every text that came from a session file (profiles, model names, ids in a hostile log) goes
through :func:`esc`; a Content-Security-Policy forbids scripts and any fetch even if something
slipped through. Every number on the page is an element with ``data-k="<path>"`` naming where
the same number is in the ``report --json`` document, so a test can compare them one by one.

Size: over 500 lines because it is one self-contained page: the CSS, the SVG charts and every
section's markup live together so the escaping rule is checked in one file.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Iterable
from typing import Any

from agentdb import times
from agentdb.errors import visible
from agentdb.views.report import DayCost, Report, SessionLine
from agentdb.views.sessions import UNREADABLE

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
.scroll{overflow-x:auto}.bar{width:30%;min-width:60px}
@media (max-width:700px){header{padding:14px 12px}main{padding:4px 8px 24px}
section{padding:10px 10px;margin:10px 0}.card{min-width:100px;padding:6px 8px}}
"""

# Codes of the JSON document as the page says them (the document keeps the codes).
WORDS = {
    "ok": "ok",
    "needs_migration": "needs migration",
    "corrupt": "corrupt",
    "inconsistent": "inconsistent",
    "unreadable": "unreadable",
    "insecure": "insecure file",
    "foreign": "not a session file",
    "too_new": "newer revision than this agentdb",
    "unsafe_schema": "unsafe schema",
    "damaged": "damaged",
    "refused": "refused",
    "interrupted": "interrupted",
    "not_ok": "not ok at the last check",
    "error_max_turns": "stopped: max turns",
    "error_max_budget_usd": "stopped: max budget",
    "error_max_wall_clock": "stopped: max wall clock",
    "recovered": "recovered",
    "restored": "restored",
}


def word(code: str) -> str:
    """An internal code as words on the page."""
    return WORDS.get(code, code.replace("_", " "))


def human_bytes(n: int) -> str:
    """1536 -> "1.5 KiB" (binary units, as ``agentdb status`` prints them)."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


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


def size(key: str, value: int) -> str:
    """A byte count in binary units; the exact count is the element's ``data-bytes``."""
    return (
        f'<span class="v" data-k="{esc(key)}" data-bytes="{int(value)}" '
        f'title="{int(value)} bytes">{esc(human_bytes(value))}</span>'
    )


def _card(
    label: str, key: str, value: Any, tone: str = "", *, money: bool = False, nbytes: bool = False
) -> str:
    shown = size(key, value) if nbytes else num(key, value, money=money)
    return (
        f'<div class="card {tone}"><span class="n">{"$" if money else ""}'
        f'{shown}</span><span class="l">{esc(label)}</span></div>'
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
            f"<title>{esc(word(name))}: {n}</title></rect>"
        )
        legend.append(
            f'<span class="tag" style="border-left:10px solid {color}">{esc(word(name))} '
            f"{num(f'{key}.{name}', n)}</span>"
        )
        x += w
    svg = (
        f'<svg role="img" width="100%" viewBox="0 0 {width:.0f} 22" preserveAspectRatio="none" '
        f'height="22">{"".join(parts)}</svg>'
    )
    return svg + "<div>" + " ".join(legend) + "</div>"


def _day(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def _ticks(first: dt.date, last: dt.date) -> list[dt.date]:
    """Dates to label on an axis from ``first`` to ``last``: days, Mondays, first days of
    months or of years, whichever gives at most eight labels."""
    span = (last - first).days
    if span <= 8:
        return [first + dt.timedelta(days=i) for i in range(span + 1)]
    if span <= 60:
        monday = first + dt.timedelta(days=(7 - first.weekday()) % 7)
        step = 7 if span <= 56 else 14
        return [
            monday + dt.timedelta(days=i)
            for i in range(0, last.toordinal() - monday.toordinal() + 1, step)
        ]
    if span <= 4 * 366:
        starts = []
        y, m = first.year, first.month
        while (d := dt.date(y + (m // 12), m % 12 + 1, 1)) <= last:
            starts.append(d)
            m += 1
        return starts[:: max(1, math.ceil(len(starts) / 8))]
    years = [dt.date(y, 1, 1) for y in range(first.year + 1, last.year + 1)]
    return years[:: max(1, math.ceil(len(years) / 8))]


def _tick_label(d: dt.date, first: dt.date, last: dt.date) -> str:
    span = (last - first).days
    if span <= 60:
        return f"{d:%b} {d.day}"
    if span <= 4 * 366:
        return f"{d:%b %Y}" if d.month == 1 or d.year != last.year else f"{d:%b}"
    return str(d.year)


def _cost_chart(days: list[DayCost]) -> str:
    """Spend per UTC day on a time axis: a day with no spend is a gap, not left out."""
    dated = [(dd, d) for d in days if (dd := _day(d.day)) is not None]  # "unknown": table only
    if not dated:
        return '<p class="muted">no cost recorded</p>'
    top = max(d.cost_usd for _, d in dated) or 1.0
    first, last = dated[0][0], dated[-1][0]
    n = (last - first).days + 1  # days on the axis, with or without spend
    w, h, left, pad = 700.0, 170.0, 4.0, 30.0
    plot = w - 2 * left
    bw = plot / n

    def x_of(d: dt.date) -> float:
        return left + (d - first).days * bw

    bars = []
    for day, d in dated:
        bh = max((h - pad - 16) * d.cost_usd / top, 0.5 if d.cost_usd > 0 else 0.0)
        bars.append(
            f'<rect x="{x_of(day) + bw * 0.1:.2f}" y="{h - pad - bh:.2f}" '
            f'width="{max(bw * 0.8, 0.8):.2f}" '
            f'height="{bh:.2f}" fill="#2e90fa"><title>{esc(d.day)}: '
            f"${d.cost_usd:.4f}, {d.turns} turns</title></rect>"
        )
    axis = [
        f'<line x1="{left}" y1="{h - pad:.1f}" x2="{w - left}" y2="{h - pad:.1f}" '
        'stroke="#c5cad3"/>'
    ]
    for tick in _ticks(first, last):
        x = x_of(tick) + bw / 2
        anchor = "start" if x < 40 else "end" if x > w - 40 else "middle"
        axis.append(
            f'<line x1="{x:.1f}" y1="{h - pad:.1f}" x2="{x:.1f}" y2="{h - pad + 4:.1f}" '
            'stroke="#98a2b3"/>'
            f'<text x="{x:.1f}" y="{h - pad + 16:.1f}" text-anchor="{anchor}">'
            f"{esc(_tick_label(tick, first, last))}</text>"
        )
    labels = (
        f'<text x="{left}" y="11">max ${top:.4f}/day</text>'
        f'<text x="{w - left}" y="11" text-anchor="end">{n} days, {len(dated)} with spend '
        f"({esc(first.isoformat())} to {esc(last.isoformat())}, UTC)</text>"
    )
    return (
        f'<svg role="img" width="100%" viewBox="0 0 {w:.0f} {h:.0f}" '
        f'preserveAspectRatio="xMinYMin meet">' + "".join(bars) + "".join(axis) + labels + "</svg>"
    )


def _table(headers: Iterable[str], rows: Iterable[str], nums: Iterable[int] = ()) -> str:
    right = set(nums)
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if i in right else f"<th>{esc(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = "".join(rows)
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        "</table></div>"
    )


def _verdict_tag(line: SessionLine) -> str:
    if line.status == UNREADABLE and line.verdict is None:
        return '<span class="tag bad">unreadable now</span>'  # a verdict, not a status
    v = line.verdict
    if v is None:
        return '<span class="tag">not checked since</span>'
    tone = "good" if v == "ok" else "warn" if v == "needs_migration" else "bad"
    return f'<span class="tag {tone}">{esc(word(v))}</span>'


def _session_label(line: SessionLine, i: int) -> str:
    shown = line.problems
    if "not_ok" in shown and {"damaged", "refused"} & set(shown):
        shown = [p for p in shown if p != "not_ok"]  # the verdict tag already says which
    problems = "".join(f'<span class="tag bad">{esc(word(p))}</span>' for p in shown)
    status = (
        "" if line.status == UNREADABLE else f'<span class="tag">{esc(word(line.status))}</span>'
    )
    cost = (
        "cost unknown"
        if line.status == UNREADABLE
        else f"${num(f'sessions.{i}.cost_usd', line.cost_usd, money=True)}"
    )
    return (
        f'<code data-session="{esc(line.session_id)}">{esc(line.session_id)}</code> '
        f"{status} {esc(line.profile or '')} · {cost}"
        f"{_verdict_tag(line)}{problems}"
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
            _card("sessions' files", "summary.size_bytes", s.size_bytes, nbytes=True),
            *(
                [
                    _card(
                        f"in {s.leftover_copies} kept {_copies(s.leftover_copies)} "
                        "(.corrupt, .pre-restore)",
                        "summary.leftover_bytes",
                        s.leftover_bytes,
                        "warn",
                        nbytes=True,
                    ),
                    _card("on disk in all", "summary.disk_bytes", s.disk_bytes, nbytes=True),
                ]
                if s.leftover_copies
                else []
            ),
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
            _card(
                "total cost"
                + (f" ({s.costs_unknown} sessions' unknown)" if s.costs_unknown else ""),
                "summary.cost_usd",
                s.cost_usd,
                money=True,
            ),
        ]
    )
    nxt = (
        '<ul class="next">'
        + "".join(f"<li><code>{esc(n.command)}</code> — {esc(n.why)}</li>" for n in report.next)
        + "</ul>"
        if report.next
        else '<p class="good">Nothing needs doing.</p>'
    )
    statuses = {k: n for k, n in report.by_status.items() if k != UNREADABLE}
    unread = report.by_status.get(UNREADABLE, 0)
    unread_note = (
        f'<p class="muted">and {num(f"by_status.{UNREADABLE}", unread)} whose file cannot be '
        "read: status unknown (their verdict says why)</p>"
        if unread
        else ""
    )
    health = (
        f'<section id="health"><h2>Health</h2><div class="cards">{cards}</div>'
        f"<h3>By status</h3>{_stacked_bar(statuses, STATUS_COLORS, 'by_status')}{unread_note}"
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
    unknown = (
        f'<p class="muted">{num("summary.costs_unknown", s.costs_unknown)} sessions\' costs '
        "unknown: their files cannot be read, so these totals leave them out "
        "(<code>agentdb recover --all --dry-run</code>)</p>"
        if s.costs_unknown
        else ""
    )
    costs = (
        f'<section id="cost-day"><h2>Cost per day</h2>{_cost_chart(report.cost_by_day)}{shown}'
        f"{unknown}<details><summary>per day</summary>"
        f"{_table(['day (UTC)', 'cost (USD)', 'turns'], day_rows, (1, 2))}</details></section>"
    )
    top = max((m.cost_usd for m in report.cost_by_model), default=0.0) or 1.0
    model_rows = [
        f"<tr><td>{esc(m.provider)}</td><td>{esc(m.model)}</td>"
        f'<td class="num">{num(f"cost_by_model.{i}.cost_usd", m.cost_usd, money=True)}</td>'
        f'<td class="num">{num(f"cost_by_model.{i}.turns", m.turns)}</td>'
        f'<td class="num">{num(f"cost_by_model.{i}.sessions", m.sessions)}</td>'
        f'<td class="bar"><svg width="100%" height="12" viewBox="0 0 100 12" '
        f'preserveAspectRatio="none"><rect width="{100 * m.cost_usd / top:.2f}" '
        f'height="12" fill="#7a5af8"/></svg></td></tr>'
        for i, m in enumerate(report.cost_by_model)
    ]
    models = (
        '<section id="cost-model"><h2>Cost per model</h2>'
        + _table(
            ["provider", "model", "cost (USD)", "turns", "sessions", ""], model_rows, (2, 3, 4)
        )
        + unknown
        + "</section>"
    )
    if report.sessions_complete:
        count = num("summary.sessions_shown", s.sessions_shown)
        tree = f'<section id="tree"><h2>Sessions ({count})</h2>{_tree(report.sessions)}</section>'
    else:
        rows = [
            f"<tr><td>{_session_label(ln, i)}</td></tr>" for i, ln in enumerate(report.sessions)
        ]
        listed = (
            _table(["session"], rows)
            if rows
            else '<p class="good">none: no session is damaged, refused, interrupted, '
            "waiting for a migration or not ok at its last check</p>"
        )
        tree = (
            f'<section id="tree"><h2>Problem sessions '
            f"({num('summary.sessions_shown', s.sessions_shown)} of "
            f'{num("summary.sessions", s.sessions)})</h2><p class="muted">Too many sessions '
            "to draw each one; the most serious are listed; <code>agentdb sessions tree</code> "
            "prints the whole tree.</p>" + listed + "</section>"
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
        f'<tr><td title="{esc(r.time)}">{esc(_when(r.time))}</td>'
        f"<td><code>{esc(r.session_id or '?')}</code></td>"
        f"<td>{esc(r.job)}</td><td>{esc(word(r.outcome))}</td>"
        f'<td class="num">{num(f"recoveries.{i}.events_lost", r.events_lost)}</td>'
        f"<td>{esc(_ranges(r.lost_ranges)) or '-'}</td></tr>"
        for i, r in enumerate(report.recoveries)
    ]
    recoveries = (
        '<section id="recoveries"><h2>Recovery history</h2>'
        + (
            _table(
                ["time", "session", "job", "outcome", "events lost", "event sequences lost"],
                rec_rows,
                (4,),
            )
            if rec_rows
            else '<p class="muted">no recoveries logged</p>'
        )
        + "</section>"
    )
    kept_rows = [
        f"<tr><td><code>{esc(x.name)}</code></td><td>{esc(len(x.files))}</td>"
        f'<td class="num">{size(f"leftovers.{i}.bytes", x.bytes)}</td></tr>'
        for i, x in enumerate(report.leftovers)
    ]
    kept = (
        '<section id="leftovers"><h2>Kept copies</h2><p>'
        f"{num('summary.leftover_copies', s.leftover_copies)} "
        f"{_copies(s.leftover_copies)} that recover (a damaged "
        "original, <code>.corrupt</code>) and restore (the file it replaced, "
        "<code>.pre-restore</code>) kept beside the sessions, "
        f"{size('summary.leftover_bytes', s.leftover_bytes)} with their sidecars. They may hold "
        "rows a recovery could not read. Nothing removes them on its own; once you have decided "
        "you need none of them: <code>agentdb prune --leftovers --dry-run</code>, then "
        "<code>agentdb prune --leftovers</code> (it asks first).</p>"
        + (_table(["copy", "files", "size"], kept_rows, (2,)) if kept_rows else "")
        + (
            f'<p class="muted">the first {len(kept_rows)} listed</p>'
            if len(kept_rows) < s.leftover_copies
            else ""
        )
        + "</section>"
        if s.leftover_copies
        else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>agentdb report</title><style>{CSS}</style></head><body>"
        f"<header><h1>agentdb report</h1><p>{esc(report.sessions_dir)} · generated "
        f"{esc(times.show(report.generated_at))}</p></header><main>"
        + health
        + costs
        + models
        + tree
        + pinned
        + recoveries
        + kept
        + "</main></body></html>\n"
    )


def _when(logged: str) -> str:
    """A logged time as the page shows it: RFC 3339 UTC to the second, as every table shows
    times (:func:`agentdb.times.show`; the log's own text, with milliseconds, is the cell's
    tooltip)."""
    return times.show(logged)


def _copies(n: int) -> str:
    return "copy" if n == 1 else "copies"


def _ranges(ranges: list[list[int]]) -> str:
    parts = [f"{a}" if a == b else f"{a}–{b}" for a, b in ranges[:50]]
    more = f" and {len(ranges) - 50} more ranges" if len(ranges) > 50 else ""
    return ", ".join(parts) + more
