"""Engine 2: SQLite's .recover through a capable shell, on real, really damaged session files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import apsw
import pytest

from agentdb.jobs import demo
from agentdb.salvage import shell as sh
from agentdb.salvage import shell_load
from agentdb.schema.revisions import COLUMNS, TABLES
from tests.rows import all_rows, page_size, zero_page
from tests.support import WriterProcess, make_session, wait_for

DEBIAN_SQLITE3 = Path("/usr/bin/sqlite3")


def rev1_rows(path: Path) -> dict[str, set[tuple[object, ...]]]:
    """Every row of the file in revision-1 column order (the hash columns of revisions 2 and 3
    dropped)."""
    rows = all_rows(path)
    return {t: {r[: len(COLUMNS[1][t])] for r in rows[t]} for t in TABLES}


def dbstat(path: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    conn = apsw.Connection(
        f"file:{path.absolute()}?immutable=1",
        flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
    )
    try:
        return [tuple(r) for r in conn.execute(sql, args)]
    finally:
        conn.close()


def salvage(path: Path, sid: str, tmp: Path, shell: Path, **kw: object) -> sh.ShellSalvage:
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    res = sh.shell_salvage(path, None, sid, work, shell=shell, **kw)  # type: ignore[arg-type]
    assert list(work.iterdir()) == []  # the private copy and scratch are gone
    return res


def assert_subset(res: sh.ShellSalvage, original: dict[str, set[tuple[object, ...]]]) -> None:
    """Nothing invented: every returned row is a row of the file before it was damaged."""
    for t in TABLES:
        extra = set(res.rows[t]) - original[t]
        assert not extra, (t, sorted(extra, key=repr)[:3])
        assert len(res.rows[t]) == len(set(res.rows[t]))


# ---------------------------------------------------------------------------- detection


@pytest.mark.skipif(not DEBIAN_SQLITE3.exists(), reason="no /usr/bin/sqlite3 on this machine")
def test_debian_sqlite3_is_not_capable() -> None:
    version = subprocess.run(
        [str(DEBIAN_SQLITE3), "--version"], capture_output=True, text=True
    ).stdout
    if not version.startswith("3.40."):
        pytest.skip(f"/usr/bin/sqlite3 is {version.split()[0]}, not Debian bookworm's 3.40")
    problem = sh.selftest_problem(DEBIAN_SQLITE3)
    assert problem is not None and "exited with status" in problem
    assert not sh.is_capable(DEBIAN_SQLITE3)


def test_built_shell_is_capable(capable_shell: Path) -> None:
    assert sh.selftest_problem(capable_shell) is None
    assert sh.is_capable(capable_shell)


@pytest.mark.slow
def test_detection_order(
    capable_shell: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    empty_tools = tmp_path / "tools"
    empty_tools.mkdir()
    monkeypatch.setenv(sh.ENV_TOOLS, str(empty_tools))
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv(sh.ENV_SHELL, raising=False)
    assert sh.find_capable_shell() is None  # nothing anywhere
    if DEBIAN_SQLITE3.exists():
        (bin_dir / "sqlite3").symlink_to(DEBIAN_SQLITE3)
        assert sh.find_capable_shell() is None  # an incapable shell on PATH is passed over
        (bin_dir / "sqlite3").unlink()
    (bin_dir / "sqlite3").symlink_to(capable_shell)
    assert sh.find_capable_shell() == bin_dir / "sqlite3"  # PATH
    (bin_dir / "sqlite3").unlink()
    shutil.copy(capable_shell, empty_tools / sh.TOOL_NAME)
    assert sh.find_capable_shell() == empty_tools / sh.TOOL_NAME  # the tool cache
    monkeypatch.setenv(sh.ENV_SHELL, str(capable_shell))
    assert sh.find_capable_shell() == capable_shell  # the environment variable comes first
    monkeypatch.setenv(sh.ENV_SHELL, "none")
    assert sh.find_capable_shell() is None  # and can turn engine 2 off


# ---------------------------------------------------------------------------- salvage


@pytest.mark.parametrize("revision", [1, 2, 3])
def test_healthy_file_comes_back_whole(
    capable_shell: Path, sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    sid, path = make_session(sessions_dir, turns=4, revision=revision)
    before = path.read_bytes()
    res = salvage(path, sid, tmp_path, capable_shell)
    assert path.read_bytes() == before
    assert res.engine == "sqlite-recover"
    assert {t: set(r) for t, r in res.rows.items()} == rev1_rows(path)
    assert res.rejected == 0 and res.lost_and_found_mapped == 0
    assert [r[0] for r in res.rows["events"]] == sorted(r[0] for r in res.rows["events"])


@pytest.mark.slow
@pytest.mark.parametrize("revision", [1, 2, 3])
def test_zeroed_leaf_loses_only_its_rows(
    capable_shell: Path, sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    sid, path = make_session(sessions_dir, turns=8, revision=revision)
    original = rev1_rows(path)
    leaves = dbstat(
        path,
        "SELECT pageno, ncell FROM dbstat WHERE name='events' AND pagetype='leaf' ORDER BY pageno",
    )
    assert len(leaves) >= 3
    pgno = demo.damage_page(path, table="events", nth_leaf=1)
    lost = next(int(n) for p, n in leaves if p == pgno)  # type: ignore[call-overload]
    res = salvage(path, sid, tmp_path, capable_shell)
    assert_subset(res, original)
    assert len(res.rows["events"]) == len(original["events"]) - lost
    for t in ("session_meta", "cost_ledger", "plan_items", "producers"):
        assert set(res.rows[t]) == original[t]


@pytest.mark.parametrize("revision", [2, 3])
def test_flipped_payload_byte_is_rejected_by_content_hash(
    capable_shell: Path, sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    sid, path = make_session(sessions_dir, turns=4, revision=revision)
    original = rev1_rows(path)
    data = bytearray(path.read_bytes())
    for victim in sorted(original["events"], key=lambda r: -len(r[8])):  # type: ignore[arg-type]
        payload = bytes(victim[8])  # type: ignore[arg-type]
        at = data.find(payload)
        if at > 0 and data.find(payload, at + 1) == -1:
            break  # stored once, on its page (no stale copy elsewhere)
    else:
        pytest.fail("no event payload stored exactly once")
    data[at + len(payload) // 2] ^= 0xFF  # inside the payload: integrity_check would not notice
    path.write_bytes(bytes(data))
    res = salvage(path, sid, tmp_path, capable_shell)
    assert_subset(res, original)
    got = {r[0] for r in res.rows["events"]}
    assert victim[0] not in got
    assert got == {r[0] for r in original["events"]} - {victim[0]}
    assert res.rejected == 1


@pytest.mark.slow
def test_wal_is_read_from_a_copy_and_left_alone(
    capable_shell: Path, sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=2)
    wal = path.with_name(path.name + "-wal")
    writer = WriterProcess(sessions_dir, sid)
    assert wait_for(lambda: wal.exists() and wal.stat().st_size > 100_000, timeout=60)
    committed, _ = writer.stop()  # killed: its last commits live only in the -wal
    assert wal.exists() and wal.stat().st_size > 0
    before = (path.read_bytes(), wal.read_bytes())
    work = tmp_path / "work"
    work.mkdir()
    res = sh.shell_salvage(path, wal, sid, work, shell=capable_shell)
    assert (path.read_bytes(), wal.read_bytes()) == before
    got = {r[0] for r in res.rows["events"]}
    assert set(committed) <= got
    assert_subset(res, rev1_rows_with_wal(path, tmp_path))


def rev1_rows_with_wal(path: Path, tmp: Path) -> dict[str, set[tuple[object, ...]]]:
    d = tmp / "walcopy"
    d.mkdir()
    shutil.copy(path, d / path.name)
    shutil.copy(path.with_name(path.name + "-wal"), d / (path.name + "-wal"))
    conn = apsw.Connection(str(d / path.name))
    assert conn.execute("SELECT count(*) FROM events").get > 0
    conn.close()  # the last connection checkpoints the copy's WAL into it
    assert not (d / (path.name + "-wal")).exists()
    return rev1_rows(d / path.name)


@pytest.mark.slow
@pytest.mark.parametrize("revision", [2, 3])
def test_orphaned_pages_are_mapped_back_from_lost_and_found(
    capable_shell: Path, sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    sid, path = make_session(sessions_dir, turns=40, revision=revision)
    original = rev1_rows(path)
    roots = dict(dbstat(path, "SELECT name, rootpage FROM sqlite_schema"))
    kinds = dict(
        dbstat(
            path,
            "SELECT name, pagetype FROM dbstat WHERE pageno IN (?, ?)",
            *[roots["events"], roots["idx_events_producer"]],
        )
    )
    assert kinds == {"events": "internal", "idx_events_producer": "internal"}
    zero_page(path, int(roots["events"]))  # type: ignore[call-overload]
    zero_page(path, int(roots["idx_events_producer"]))  # type: ignore[call-overload]
    res = salvage(path, sid, tmp_path, capable_shell)
    assert_subset(res, original)
    assert set(res.rows["events"]) == original["events"]
    assert res.lost_and_found_mapped == len(original["events"])
    # idx_events_producer records have the producers table's shape; none may pass for one.
    assert set(res.rows["producers"]) == original["producers"]
    assert res.rejected > 0
    assert any("index_record" in n for n in res.notes)


@pytest.mark.parametrize("revision", [2, 3])
def test_lost_and_found_without_schema(
    capable_shell: Path, sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    """Page 1's cells gone: every table is orphaned; rows come back by shape only (at
    revision 3 with every table's stored hashes, which must hold)."""
    sid, path = make_session(sessions_dir, turns=6, revision=revision)
    original = rev1_rows(path)
    size = page_size(path)
    data = bytearray(path.read_bytes())
    data[100:size] = b"\0" * (size - 100)  # keep the header, lose sqlite_schema
    path.write_bytes(bytes(data))
    res = salvage(path, sid, tmp_path, capable_shell)
    assert_subset(res, original)
    assert res.lost_and_found_mapped > 0
    for t in TABLES:
        assert set(res.rows[t]) == original[t], t


# ---------------------------------------------------------------------------- hostile input


def _hostile_file(path: Path, sid: str) -> set[tuple[object, ...]]:
    """A session-shaped file whose schema carries CHECK/DEFAULT expressions and a trigger.

    The events CHECK fails for every stored row and the trigger's body inserts an invented
    event: were either executed by the loader, the rows would differ.
    """
    conn = apsw.Connection(str(path))
    good = set()
    conn.execute(
        "CREATE TABLE events (sequence INTEGER PRIMARY KEY, id, timestamp, kind,"
        " producer_category, producer_name, producer_version, schema_version, payload)"
    )
    conn.execute("CREATE TABLE x(a, b)")
    conn.execute(
        "CREATE TABLE session_meta(session_id, parent_session_id, profile, status, depth,"
        " started_at, ended_at)"
    )
    with conn:
        for i in range(1, 11):
            row = (i, f"ev-{i}", "2024-01-01T00:00:00.000Z", "message", "model", "m", "1", "1")
            conn.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?)", (*row, b"p" * i))
            good.add((*row, b"p" * i))
        conn.execute("INSERT INTO x VALUES (1, 2)")
        conn.execute(
            "INSERT INTO session_meta VALUES (?, NULL, 'coder', 'completed', 0, 't0', 't1')",
            (sid,),
        )
        conn.execute(
            "CREATE TRIGGER trg AFTER INSERT ON events BEGIN\n"
            "INSERT INTO events VALUES (999, 'fake', 't', 'message', 'model', 'm', '1', '1',"
            " x'00');\nEND"
        )
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_schema SET sql = 'CREATE TABLE events (sequence INTEGER PRIMARY KEY,"
        " id DEFAULT (hex(randomblob(8))), timestamp CHECK (length(timestamp) > 1000),"
        " kind, producer_category, producer_name, producer_version, schema_version, payload)'"
        " WHERE name = 'events'"
    )
    conn.execute(
        "UPDATE sqlite_schema SET sql = 'CREATE TABLE x(a DEFAULT (load_extension(''evil'')),"
        " b CHECK (evil(b)))' WHERE name = 'x'"
    )
    conn.execute("PRAGMA writable_schema=OFF")
    conn.close()
    return good


def test_hostile_schema_runs_nothing(capable_shell: Path, tmp_path: Path) -> None:
    sid = "01HZZZZZZZZZZZZZZZZZZZZZZZ"
    path = tmp_path / f"{sid}.sqlite"
    good = _hostile_file(path, sid)
    res = salvage(path, sid, tmp_path, capable_shell)
    # The CHECK would refuse each row and the trigger add event 999 if they ran.
    assert set(res.rows["events"]) == good
    assert len(res.rows["session_meta"]) == 1
    text = " ".join(res.notes)
    assert "CREATE TRIGGER x1" in text and "CREATE TABLE" in text


@pytest.mark.slow
def test_loader_authorizer_denies_everything_else(tmp_path: Path) -> None:
    conn = shell_load.open_scratch(tmp_path / "scratch.sqlite")
    calls: list[object] = []
    conn.create_scalar_function("evil", lambda *a: calls.append(a) or 1)
    hostile = "\n".join(
        [
            ".dbconfig defensive off",
            "BEGIN;",
            "PRAGMA writable_schema = on;",
            f"ATTACH '{tmp_path / 'attached.db'}' AS a;",
            "CREATE TABLE events(sequence DEFAULT (evil()));",
            "CREATE TRIGGER t AFTER INSERT ON events BEGIN\n"
            "INSERT INTO events(id) VALUES ('from-trigger');\nSELECT evil();\nEND;",
            "INSERT INTO events(id) VALUES (evil());",
            "INSERT INTO events(id) VALUES ((SELECT evil()));",
            "INSERT INTO events(id) SELECT name FROM sqlite_schema;",
            "INSERT INTO events(id) VALUES ('r') RETURNING evil();",
            "INSERT INTO sqlite_schema VALUES ('table', 'y', 'y', 0, 'CREATE TABLE y(a)');",
            "INSERT INTO events(id) VALUES (abs(-1));",
            "INSERT INTO events(id) VALUES ('ok-1'); DROP TABLE events;",
            "INSERT OR IGNORE INTO 'events'('id') VALUES (replace('a\\nb', '\\n', char(10)));",
            "DELETE FROM events;",
            "INSERT INTO events(id) VALUES ('cut off",
        ]
    )
    res = shell_load.load(conn, hostile)
    assert calls == []
    assert res.inserted == 2
    assert res.denied == 6
    ids = [r[0] for r in conn.execute("SELECT id FROM events ORDER BY rowid")]
    assert ids == ["ok-1", "a\nb"]
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema")}
    assert names == set(shell_load.SCRATCH_COLUMNS)
    assert not (tmp_path / "attached.db").exists()
    assert res.skipped["CREATE TRIGGER"] == 1 and res.skipped["DROP TABLE"] == 1
    conn.close()


@pytest.mark.slow
def test_splitter_keeps_trigger_bodies_whole() -> None:
    text = (
        ".dbconfig defensive off\nBEGIN;\nINSERT INTO t VALUES('a;b', \"c;\", [d;], `e;`);\n"
        "CREATE TEMP TRIGGER x AFTER INSERT ON t BEGIN INSERT INTO t VALUES(1); END;\n"
        "-- a comment; with a semicolon\n/* and; another */ INSERT INTO t VALUES(2);;\n"
        "INSERT INTO t VALUES(3) -- comment; here\n;\n"
        "INSERT INTO t VALUES('unterminated"
    )
    got = list(shell_load.split_statements(text))
    assert got == [
        "BEGIN;",
        "INSERT INTO t VALUES('a;b', \"c;\", [d;], `e;`);",
        "CREATE TEMP TRIGGER x AFTER INSERT ON t BEGIN INSERT INTO t VALUES(1); END;",
        "INSERT INTO t VALUES(2);",  # comments before a statement are white space
        "INSERT INTO t VALUES(3) -- comment; here\n;",
    ]
    for stmt in got:
        assert apsw.complete(stmt)
    # The same text arriving in pieces that end at line ends (the output is never held whole).
    lines = text.splitlines(keepends=True)
    for size in (1, 2, 3):
        pieces = ["".join(lines[i : i + size]) for i in range(0, len(lines), size)]
        assert list(shell_load.iter_statements(pieces)) == got, size


# ---------------------------------------------------------------------------- limits


@pytest.mark.slow
def test_output_cap_gives_partial_result(
    capable_shell: Path, sessions_dir: Path, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=6)
    original = rev1_rows(path)
    res = salvage(path, sid, tmp_path, capable_shell, output_cap=12_000)
    assert any("more than 12000 bytes" in n for n in res.notes)
    assert_subset(res, original)
    assert sum(len(r) for r in res.rows.values()) < sum(len(r) for r in original.values())


@pytest.mark.slow
def test_timeout_kills_the_shell_and_keeps_what_it_printed(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """A shell that prints one good statement and hangs: killed at the limit, the row kept."""
    sid, path = make_session(sessions_dir, turns=1, revision=1)
    original = rev1_rows(path)
    (ev,) = [r for r in original["events"] if r[0] == 1]
    hex_payload = bytes(ev[8]).hex()  # type: ignore[arg-type]
    values = ", ".join(f"'{v}'" for v in ev[1:8])
    script = tmp_path / "slow-sqlite3"
    stmt = (
        "INSERT INTO 'events'('sequence','id','timestamp','kind','producer_category',"
        f"'producer_name','producer_version','schema_version','payload')"
        f" VALUES (1, {values}, X'{hex_payload}');"
    )
    script.write_text(f"#!/bin/sh\n/bin/cat <<'EOF'\n{stmt}\nEOF\nexec /bin/sleep 60\n")
    script.chmod(0o700)
    work = tmp_path / "work"
    work.mkdir()
    res = sh.shell_salvage(path, None, sid, work, shell=script, timeout=1.0)
    assert any("did not finish within 1s" in n for n in res.notes)
    assert res.rows["events"] == [ev]
    assert list(work.iterdir()) == []


# ---------------------------------------------------------------------------- shape mapping

SID = "01HZZZZZZZZZZZZZZZZZZZZZZZ"
EVENT = ("ev-1", "t", "message", "model", "anthropic", "1.0", "1", b"payload")


def test_mapping_by_shape() -> None:
    from agentdb.hashing import event_hash
    from agentdb.salvage.shell_rows import map_lost_and_found as m

    h = event_hash(7, *EVENT)
    assert m(10, 7, (None, *EVENT, h), revision=2, session_id=SID).table == "events"
    assert m(10, 7, (None, *EVENT, b"x" * 16), revision=2, session_id=SID).reason == "invalid"
    assert m(9, 7, (None, *EVENT), revision=1, session_id=SID).row == (7, *EVENT)
    assert m(9, 7, (None, *EVENT), revision=2, session_id=SID).table is None  # hash missing
    cost = (None, 3, "anthropic", "sonnet", 10, 5, 0, 800, 0)
    assert m(9, 1, cost, revision=2, session_id=SID).row == (1, *cost[1:8], 0.0)
    plan = (None, 3, "turn", "call", "anthropic", "shell", "deny", "policy")
    assert m(8, 2, plan, revision=2, session_id=SID).table == "plan_items"
    meta = (SID, None, "coder", "completed", 0, "t0", "t1")
    assert m(7, 1, meta, revision=2, session_id=SID).table == "session_meta"
    other = ("01HYYYYYYYYYYYYYYYYYYYYYYY", *meta[1:])
    assert m(7, 1, other, revision=2, session_id=SID).reason == "invalid"  # another session
    prod = ("model", "anthropic", "1.0", 2)
    assert m(4, 1, prod, revision=2, session_id=SID).table == "producers"
    # idx_events_producer / sqlite_autoindex_producers_1 records: same shape, no rowid
    assert m(4, None, prod, revision=2, session_id=SID).reason == "index_record"
    assert m(2, None, ("message", 7), revision=2, session_id=SID).reason == "index_record"
    assert m(2, 1, ("events", 7), revision=2, session_id=SID).reason == "shape"  # sqlite_sequence
    bad_enum = (None, *EVENT[:2], "KIND_UNSPECIFIED", *EVENT[3:])
    assert m(9, 7, bad_enum, revision=1, session_id=SID).reason == "invalid"


def test_mapping_by_shape_at_revision_3() -> None:
    """Revision 3 adds prev_hash and chain_hash to events and a content_hash to every derived
    table: each shape maps with its stored hashes, and a hash that fails rejects the row."""
    from agentdb.hashing import event_hash, row_hash
    from agentdb.salvage.shell_rows import map_lost_and_found as m

    h, prev, link = event_hash(7, *EVENT), b"p" * 16, b"c" * 16
    got = m(12, 7, (None, *EVENT, h, prev, link), revision=3, session_id=SID)
    assert (got.table, got.row, got.stored, got.links) == ("events", (7, *EVENT), h, (prev, link))
    assert m(12, 7, (None, *EVENT, b"x" * 16, prev, link), revision=3, session_id=SID).reason == (
        "invalid"
    )
    assert m(9, 7, (None, *EVENT), revision=3, session_id=SID).table is None  # hash missing
    cost = (1, 3, "anthropic", "sonnet", 10, 5, 0, 800, 0.5)
    plan = (2, 3, "turn", "call", "anthropic", "shell", "deny", "policy")
    prod = ("model", "anthropic", "1.0", 2)
    for table, row in (("cost_ledger", cost), ("plan_items", plan), ("producers", prod)):
        rh = row_hash(table, row)
        rec = (None, *row[1:]) if table != "producers" else row
        rowid = row[0] if table != "producers" else 1
        got = m(len(rec) + 1, rowid, (*rec, rh), revision=3, session_id=SID)
        assert (got.table, got.row, got.stored) == (table, row, rh), table
        bad = m(len(rec) + 1, rowid, (*rec, b"x" * 16), revision=3, session_id=SID)
        assert bad.reason == "invalid", table


def test_by_key_takes_the_first_row_of_a_key_in_any_order(tmp_path: Path) -> None:
    """Keys in increasing order go in without a lookup; a key at or below the largest one is
    looked up, so a repeated key keeps its first row and a different repeat is a conflict,
    in the job's scratch database as in a dict."""
    from agentdb.salvage.scratch import Scratch
    from agentdb.salvage.shell_rows import ByKey

    store = Scratch(tmp_path / "scratch.sqlite")
    try:
        for rows in ({}, store.map("shell_events")):
            by = ByKey()
            by.rows["events"] = rows
            got = [by.add("events", (k, tag)) for k, tag in [(1, "a"), (3, "b"), (2, "c")]]
            got += [
                by.add("events", (3, "b")),
                by.add("events", (1, "x")),
                by.add("events", (4, "d")),
            ]
            assert got == [True, True, True, False, False, True]
            assert by.conflicts == 1
            assert dict(sorted(rows.items())) == {
                1: (1, "a"),
                2: (2, "c"),
                3: (3, "b"),
                4: (4, "d"),
            }
    finally:
        store.close()
