"""Reports streamed in chunks: the same bytes as one rendering, produced while files are read.

``check``, ``sessions list`` and ``prune --dry-run`` write their JSON document and their tables a
chunk of rows at a time (``output.CHUNK_ROWS``), so memory stays flat in the number of sessions;
the bytes must be exactly those of one ``json.dumps`` of the whole document.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
from pathlib import Path

import pytest

from agentdb import checks
from agentdb.checks.run import CheckStream
from agentdb.cli import output
from agentdb.results import Finding
from agentdb.views import sessions
from tests.runner import Agentdb
from tests.support import clone_session, make_session


def _copies(sessions_dir: Path, n: int) -> list[str]:
    """``n`` healthy sessions: one written by agentdb, cloned under new ids
    (:func:`tests.support.clone_session`)."""
    sid, path = make_session(sessions_dir, turns=1, revision=2)
    ids = []
    for i in range(n):
        new = f"01ARZ3NDEK{i:016d}"
        clone_session(path, sessions_dir, new)
        ids.append(new)
    path.unlink()
    return sorted(ids)


@dataclasses.dataclass
class _Row:
    name: str
    path: Path
    cost: float | None


@pytest.mark.parametrize("chunk", [1, 2, 3, 1000])
def test_streamed_json_is_byte_for_byte_one_document(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(output, "CHUNK_ROWS", chunk)
    rows = [_Row(f"r{i}", Path(f"/x/{i}"), i / 3 if i % 2 else None) for i in range(7)]
    rows.append(_Row("caf\u00e9 \u009b", Path("/y"), float("inf")))  # escaped; inf is null
    doc = {
        "version": 1,
        "sessions": rows,
        "empty": [],
        "directory": [Finding("c", "m", "info")],
        "summary": {"n": len(rows), "nested": {"a": [1, 2]}},
    }
    output.emit_json(doc)
    whole = capsys.readouterr().out
    output.emit_json_stream(
        {
            "version": 1,
            "sessions": iter(rows),
            "empty": iter(()),
            "directory": [Finding("c", "m", "info")],
            "summary": output.Later(lambda: {"n": len(rows), "nested": {"a": [1, 2]}}),
        }
    )
    assert capsys.readouterr().out == whole
    json.loads(whole)


def test_later_is_computed_after_the_rows_before_it(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[int] = []

    def rows():  # type: ignore[no-untyped-def]
        for i in range(5):
            seen.append(i)
            yield i

    output.emit_json_stream({"rows": rows(), "count": output.Later(lambda: len(seen))})
    assert json.loads(capsys.readouterr().out) == {"rows": [0, 1, 2, 3, 4], "count": 5}


@pytest.mark.slow
def test_check_json_streamed_equals_one_document(
    sessions_dir: Path,
    agentdb: Agentdb,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = _copies(sessions_dir, 5)
    (sessions_dir / f"{ids[1]}.sqlite-wal").write_bytes(b"not a wal")  # a finding to render
    os.chmod(sessions_dir / f"{ids[1]}.sqlite-wal", 0o600)
    (sessions_dir / "01ARZ3NDEKTSV4RRFFQ69G5FAV.sqlite-shm").write_bytes(b"")  # orphan sidecar
    g = ["--sessions-dir", str(sessions_dir)]
    monkeypatch.setattr(output, "CHUNK_ROWS", 2)
    code, streamed, _ = agentdb(*g, "check", "--json", "--jobs", "1")
    report = checks.check_sessions(sessions_dir, jobs=1)
    output.emit_json(
        {
            "version": 1,
            "sessions": report.sessions,
            "directory": [
                {"path": d.path, "session_id": d.session_id, **output.jsonable(d.finding)}
                for d in report.directory
            ],
            "summary": report.summary,
        }
    )
    whole = capsys.readouterr().out
    assert code == 1
    assert streamed == whole
    doc = json.loads(streamed)
    assert [s["session_id"] for s in doc["sessions"]] == ids
    assert doc["summary"]["checked"] == 5 and doc["summary"]["directory_findings"] == 1


@pytest.mark.slow
def test_check_table_is_the_same_in_any_chunk_size(
    sessions_dir: Path, agentdb: Agentdb, monkeypatch: pytest.MonkeyPatch
) -> None:
    _copies(sessions_dir, 5)
    g = ["--sessions-dir", str(sessions_dir)]
    whole = agentdb(*g, "check", "--jobs", "1").out
    monkeypatch.setattr(output, "CHUNK_ROWS", 2)
    assert agentdb(*g, "check", "--jobs", "1").out == whole
    assert len(whole.splitlines()) == 2 + 5  # header, rule, five rows


@pytest.mark.slow
def test_check_results_are_produced_while_iterated(sessions_dir: Path) -> None:
    """A file is read only when its turn comes: the first result is out before the last file
    is opened (so nothing but the rows in hand is kept)."""
    ids = _copies(sessions_dir, 3)
    stream = CheckStream(sessions_dir, jobs=1)
    it = stream.results()
    first = next(it)
    assert first.session_id == ids[0] and first.verdict == "ok"
    os.unlink(sessions_dir / f"{ids[2]}.sqlite")  # gone before its turn
    rest = list(it)
    assert [r.session_id for r in rest] == ids[1:]
    assert rest[-1].verdict != "ok" and "missing" in [f.code for f in rest[-1].findings]
    assert stream.summary["checked"] == 3 and not stream.ok


@pytest.mark.slow
def test_sessions_list_json_streamed_equals_one_document(
    sessions_dir: Path,
    agentdb: Agentdb,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _copies(sessions_dir, 5)
    shutil.copyfile(__file__, sessions_dir / "01ARZ3NDEKTSV4RRFFQ69G5FAV.sqlite")  # unreadable
    os.chmod(sessions_dir / "01ARZ3NDEKTSV4RRFFQ69G5FAV.sqlite", 0o600)
    g = ["--sessions-dir", str(sessions_dir)]
    monkeypatch.setattr(output, "CHUNK_ROWS", 2)
    code, streamed, _ = agentdb(*g, "sessions", "list", "--json", "--jobs", "1")
    assert code == 0
    rows = sessions.list_sessions(sessions_dir)
    output.emit_json(
        {
            "version": 1,
            "sessions": rows,
            "summary": sessions.list_summary(rows),
            "interrupted": False,
        }
    )
    assert streamed == capsys.readouterr().out
    assert json.loads(streamed)["summary"]["sessions"] == 6


def test_empty_listing_summary_keeps_its_integer_zero(sessions_dir: Path, agentdb: Agentdb) -> None:
    code, out, _ = agentdb("--sessions-dir", str(sessions_dir), "sessions", "list", "--json")
    assert code == 0
    assert '"cost_usd": 0,' in out and json.loads(out)["sessions"] == []


@pytest.mark.parametrize("fmt", ["simple", "plain"])
def test_fast_table_drawing_is_what_tabulate_draws(fmt: str) -> None:
    """The simple/plain tables are drawn without tabulate when every cell is ASCII text, an
    integer or None: the bytes must be tabulate's."""
    from tabulate import tabulate

    rng = random.Random(7)
    pieces = ["", " ", "x", "ok", "  lead", "trail  ", "a b", "12", "-3.5", "1e5", "None"]
    for _ in range(200):
        ncols = rng.randint(1, 6)
        headers = [rng.choice(["session", "rev", "a", "first finding", "n"]) for _ in range(ncols)]
        rows = [
            [rng.choice([rng.choice(pieces), rng.randint(-5, 500), None]) for _ in range(ncols)]
            for _ in range(rng.randint(1, 6))
        ]
        cells = [output._cells(r) for r in rows]
        widths = [
            max([len(h) + 2, *(len("" if r[i] is None else str(r[i])) for r in cells)])
            for i, h in enumerate(headers)
        ]
        fast = output._simple(cells, headers, widths, fmt)
        want = tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)
        assert fast == want, (rows, headers)


@pytest.mark.slow
def test_check_with_workers_streams_in_id_order(sessions_dir: Path) -> None:
    """With a pool of workers the results still come in id order, the same as one process."""
    from agentdb.checks.run import POOL_THRESHOLD

    ids = _copies(sessions_dir, POOL_THRESHOLD + 10)
    one = [(r.session_id, r.verdict) for r in CheckStream(sessions_dir, jobs=1).results()]
    stream = CheckStream(sessions_dir, jobs=2)
    two = [(r.session_id, r.verdict) for r in stream.results()]
    assert [sid for sid, _ in two] == ids
    assert two == one and stream.ok and stream.summary["checked"] == len(ids)
