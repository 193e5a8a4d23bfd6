"""Every table command on a real pseudo-terminal (its window size set with ``TIOCSWINSZ``) at 80
and 200 columns: no line is wider than the terminal, and no cell is cut — every value the same
command writes with ``--csv`` is in the terminal's table, whole, across its wrapped lines (ids
shortened to an unambiguous prefix of at least eight characters; columns left out only when
the terminal is too narrow for them)."""

from __future__ import annotations

import csv
import io
import random
import re
from pathlib import Path

import click
import pytest

from agentdb.cli import output, tables
from agentdb.cli.main import cli
from agentdb.jobs import demo
from tests.runner import Terminal, invoke, state_options
from tests.support import clone_session, make_session

WIDTHS = (80, 200)
VOLATILE = {"time"}  # columns whose values differ from one run to the next
_RULE = re.compile(r"^-+(  -+)*$")


def _ulid(rng: random.Random, ms: int) -> str:
    from ulid import ULID

    return str(ULID.from_bytes(ms.to_bytes(6, "big") + rng.randbytes(10)))


def build(root: Path, n: int) -> tuple[demo.DemoState, list[str], str]:
    """The demo's state plus ``n`` sessions cloned from four templates (statuses, profiles, a
    parent, a profile name too long for an 80-column table), ids ten minutes apart; returns
    the state, the cloned ids and the id of a session with long event payloads."""
    state = demo.build(root)
    d = state.sessions_dir
    parent = state.sessions[0].session_id
    scratch = root / "templates"
    scratch.mkdir(mode=0o700)
    templates = [
        make_session(scratch, turns=2, revision=2, profile="researcher")[1],
        make_session(scratch, turns=1, revision=2, status="cancelled", parent=parent, depth=1)[1],
        make_session(scratch, turns=1, revision=2, status="error_max_turns", profile="tester")[1],
        make_session(
            scratch, turns=1, revision=2, profile="a-profile-name-much-longer-than-most-are"
        )[1],
    ]
    rng = random.Random(30)
    base = 1_780_000_000_000
    ids = []
    for i in range(n):
        sid = _ulid(rng, base + i * 600_000 + rng.randrange(2000))
        clone_session(templates[i % len(templates)], d, sid)
        ids.append(sid)
    longest = max(state.sessions, key=lambda s: s.path.stat().st_size).session_id
    return state, ids, longest


def commands(state: demo.DemoState, sid: str, backup: Path) -> list[list[str]]:
    return [
        ["sessions", "list"],
        ["sessions", "list", "--sort", "cost"],
        ["sessions", "show", sid],
        ["sessions", "costs"],
        ["sessions", "costs", "--by", "model"],
        ["sessions", "costs", "--by", "day-model"],
        ["sessions", "end", sid, "--dry-run"],
        ["check"],
        ["events", sid],
        ["status"],
        ["prune", "--older-than", "1d", "--dry-run"],
        ["recover", "--all", "--dry-run"],
        ["migrate", "--all", "--dry-run"],
        ["plugins", "refs"],
        ["plugins", "users", "model/anthropic"],
        ["preflight", sid],
        ["backup", "--all", "--to", "{new}"],
        ["backup", "--verify", str(backup)],
        ["restore", "--all", "--from", str(backup), "--dry-run"],
    ]


def parse(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """The first simple-format table in ``lines``: its headers and its rows, each cell the
    text of all its wrapped lines with the whitespace taken out."""
    at = next(i for i, line in enumerate(lines) if _RULE.match(line))
    spans = [m.start() for m in re.finditer(r"-+", lines[at])]

    def cut(line: str, k: int) -> str:
        end = spans[k + 1] if k + 1 < len(spans) else None
        return line[spans[k] : end].strip()

    headers = [" ".join(filter(None, (cut(h, k) for h in lines[:at]))) for k in range(len(spans))]
    rows: list[list[str]] = []
    for line in lines[at + 1 :]:
        if not line.strip():
            break
        cells = [cut(line, k) for k in range(len(spans))]
        if cells[0]:
            rows.append(cells)
        else:  # a wrapped row's next line
            assert rows, line
            rows[-1] = [a + b for a, b in zip(rows[-1], cells, strict=True)]
    return headers, [[re.sub(r"\s", "", c) for c in r] for r in rows]


def first_csv(text: str) -> tuple[list[str], list[list[str]]]:
    """The first CSV table in ``text``; a row with an empty first cell (a second reason for
    the row above) joined to the row above, as :func:`parse` reads the terminal's lines."""
    block = text.split("\n\n", 1)[0]
    rows = list(csv.reader(io.StringIO(block)))
    out: list[list[str]] = []
    for r in rows[1:]:
        if out and not r[0]:
            out[-1] = [a + b for a, b in zip(out[-1], r, strict=True)]
        else:
            out.append(r)
    return rows[0], out


def on_terminal(argv: list[str], cols: int) -> tuple[int, list[str]]:
    with Terminal(*argv, stdout=True, stderr=False, size=(cols, 50)) as t:
        code, _, seen = t.finish(timeout=600)
    return code, seen.replace("\r\n", "\n").split("\n")


def assert_fits_and_whole(g: list[str], argv: list[str], cols: int, fresh: Path) -> None:
    """``argv`` at ``cols`` columns; ``{new}`` in it is a new directory for each run."""
    tty, piped_to = (str(fresh / f"{cols}-{how}") for how in ("tty", "csv"))
    code, lines = on_terminal([*g, *(a.replace("{new}", tty) for a in argv)], cols)
    assert code in (0, 1), (argv, code, lines[-5:])
    wide = [line for line in lines if len(line) > cols]
    assert not wide, (argv, cols, wide[:3])
    if argv == ["status"]:  # a table without headers: every field is on its own line
        return
    piped = invoke([*g, *(a.replace("{new}", piped_to) for a in argv), "--csv"])
    want_headers, want = first_csv(piped.out)
    if not want:
        return
    headers, got = parse(lines)
    assert set(headers) <= set(want_headers), (argv, headers)
    if cols >= 200:
        assert headers == want_headers, argv  # nothing left out on a wide terminal
    assert len(got) == len(want), argv
    short: dict[str, set[str]] = {}
    for g_row, w_row in zip(got, want, strict=True):
        full = dict(zip(want_headers, w_row, strict=True))
        for h, cell in zip(headers, g_row, strict=True):
            value = full[h].replace(piped_to, tty)  # the two runs' own directories
            if h in ("session", "parent") and len(value) == 26 and cell != value:
                assert len(cell) >= 8 and value.startswith(cell), (argv, h, cell, value)
                short.setdefault(cell, set()).add(value)
            elif h not in VOLATILE:
                assert cell == re.sub(r"\s", "", value), (argv, h, cell, value)
    assert all(len(v) == 1 for v in short.values()), argv  # every prefix names one id


def _run_all(tmp_path: Path, n: int) -> None:
    state, _, sid = build(tmp_path / "d", n)
    g = state_options(state)
    backup = tmp_path / "backup"
    assert invoke([*g, "backup", "--all", "--to", str(backup)]).code in (0, 1)
    for i, argv in enumerate(commands(state, sid, backup)):
        for cols in WIDTHS:
            assert_fits_and_whole(g, argv, cols, tmp_path / f"new{i}")


def test_tables_fit_80_and_200_columns_with_60_sessions(tmp_path: Path) -> None:
    _run_all(tmp_path, 60)


@pytest.mark.slow
def test_tables_fit_80_and_200_columns_with_1500_sessions(tmp_path: Path) -> None:
    _run_all(tmp_path, 1500)


def test_wrapping_keeps_every_character() -> None:
    rng = random.Random(5)
    for _ in range(500):
        words = ["".join(rng.choice("ab界-/") for _ in range(rng.randint(1, 30))) for _ in range(6)]
        text = " ".join(words)
        width = rng.randint(1, 25)
        lines = tables.wrap(text, width)
        assert all(tables.cell_width(line) <= max(width, 2) for line in lines), (text, width)
        assert "".join(lines).replace(" ", "") == text.replace(" ", "")


def test_ids_shortened_to_the_shortest_unambiguous_prefix() -> None:
    a, b = "01KRY18VW4QHA9XS0GQTSGXJ93", "01KRY18VW4QHA9XS0GQTSGXJ94"
    assert tables.id_length([a]) == 8
    assert tables.id_length([a, "01KRY9GHC4X5F4D40ZKTMJB426"]) == 8
    assert tables.id_length([a, b, a]) == 26
    assert tables.id_length([a, "01KRY18VW5QHA9XS0GQTSGXJ93"]) == 10


def test_columns_line_up_past_the_first_chunk(capsys: pytest.CaptureFixture[str]) -> None:
    """A cell in a later chunk wider than any in the first one: every row still lines up
    (the widths are the whole table's, not the first chunk's)."""
    rows = [(f"id{i}", "x" * (3 if i < output.CHUNK_ROWS else 40), f"n{i}") for i in range(1500)]
    with click.Context(cli):
        output.emit_table(rows, ["id", "text", "n"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1502
    assert len({line.index(f"n{i}") for i, line in enumerate(lines[2:])}) == 1


def test_fit_leaves_out_optional_columns_before_wrapping_short_ones() -> None:
    heads = ["session", "status", "started", "ended", "depth"]
    layout = tables.fit([8, 15, 20, 20, 5], heads, 70, optional=["depth", "ended"], overhead=2)
    assert layout.dropped == ["depth"] and layout.widths == [8, 15, 20, 20]
    layout = tables.fit([8, 15, 20, 20, 5], heads, 40, optional=["depth", "ended"], overhead=2)
    assert layout.dropped == ["depth", "ended"]
    assert sum(layout.widths) + 2 * (len(layout.widths) - 1) <= 40
