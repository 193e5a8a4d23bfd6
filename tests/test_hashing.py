"""Revision 3's hashes (docs/design/damage-evident-revision.md §3-§6): golden vectors pinned as
literal hex, equal to the measured prototype's (tests/hash_reference.py, which bench/chain_proto.py
imports) on values of every SQLite type, and the SQL functions ``db.harden`` registers equal to
the Python functions."""

from __future__ import annotations

import math
from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdb import db, hashing
from agentdb.hashing import (
    chain_hash,
    event_hash,
    frame,
    frames,
    gaps_hash,
    genesis,
    row_hash,
    row_hash_framed,
    row_hash_raw,
)
from tests import hash_reference as PROTO

SID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


EVENT = event_hash(
    1, "01ARZ3NDEKTSV4RRFFQ69G5FAW", "2026-12-01T00:00:00.000Z", "message", "model", "m", "1", "1",
    b"x",
)  # fmt: skip
COST = ("cost_ledger", (1, 1, "anthropic", "claude", 10, 20, 0, 0, 0.0125))
META = ("session_meta", (SID, None, "default", "running", 0, "2026-12-01T00:00:00.000Z", None))
PROD = ("producers", ("model", "m", "1", 1))
ODD = ("chain_gaps", (1, "events", 2**63 - 1, -(2**63), None, -0.0))


def _vectors() -> dict[str, bytes]:
    g = genesis(SID)
    plain = chain_hash(g, EVENT, ([], [], []))
    hc, hp, hm = row_hash(*COST), row_hash(*PROD), row_hash(*META)
    return {
        "row_cost": row_hash(*COST),
        "row_meta": hm,
        "row_prod": hp,
        "row_odd": row_hash(*ODD),
        "raw_invalid": row_hash_raw("plan_items", 0b1100, 1, 1, b"\xff\xfe", b"\xc3(", 5.0),
        "genesis": g,
        "chain_plain": plain,
        "chain_bound": chain_hash(plain, EVENT, ([hc], [hm, hp], [hp])),
        "gaps_empty": gaps_hash([]),
        "gaps_two": gaps_hash([hc, hp]),
    }


# A change of any of these changes what every revision-3 hash means: never edit one.
GOLDEN = {
    "row_cost": "1f987151f76bb6de7c5df9594892f47d",
    "row_meta": "f5d5511786ed6c791845545e2919a988",
    "row_prod": "9d2e1fa6411ea3fa95b728564d73ba8f",
    "row_odd": "c8f4dbaecc1f1b3550959ce97bdb6214",
    "raw_invalid": "4d329fd4f2e2d8f72500353c43384187",
    "genesis": "6ae96c142a220d7e4f47b7c33ebe103c",
    "chain_plain": "c1469576e4a0f09bb3dce64448f10eb9",
    "chain_bound": "353546f4a115c3e4d0e794d505eb5234",
    "gaps_empty": "819d91ae6298db360f080000dd3e948d",
    "gaps_two": "086a9bb5ec9ec42b6bf0561b44a02e4f",
}


def test_golden_vectors_are_pinned() -> None:
    assert {k: v.hex() for k, v in _vectors().items()} == GOLDEN


def test_golden_vectors_equal_the_prototype() -> None:
    g = PROTO.genesis(SID)
    plain = PROTO.chain_hash(g, EVENT, ([], [], []))
    hc, hp, hm = PROTO.row_hash(*COST), PROTO.row_hash(*PROD), PROTO.row_hash(*META)
    proto = {
        "row_cost": hc,
        "row_meta": hm,
        "row_prod": hp,
        "row_odd": PROTO.row_hash(*ODD),
        "raw_invalid": PROTO.row_hash_raw("plan_items", 0b1100, 1, 1, b"\xff\xfe", b"\xc3(", 5.0),
        "genesis": g,
        "chain_plain": plain,
        "chain_bound": PROTO.chain_hash(plain, EVENT, ([hc], [hm, hp], [hp])),
        "gaps_empty": PROTO.gaps_hash([]),
        "gaps_two": PROTO.gaps_hash([hc, hp]),
    }
    assert {k: v.hex() for k, v in proto.items()} == GOLDEN


def test_framing_tells_types_apart() -> None:
    one = {row_hash("t", (v,)) for v in (1, 1.0, "1", b"1")}
    assert len(one) == 4
    empty = {row_hash("t", (v,)) for v in (None, "", b"")}
    assert len(empty) == 3
    assert row_hash("t", (0.0,)) != row_hash("t", (-0.0,))
    assert row_hash("t", ("ab", "c")) != row_hash("t", ("a", "bc"))
    assert row_hash("cost_ledger", (1,)) != row_hash("plan_items", (1,))  # table name framed
    # each kind has its own personalisation: the same bytes never hash alike across kinds
    sid = b"x" * 16
    assert genesis(sid) != row_hash_raw("", 0, sid)
    with pytest.raises(TypeError):
        row_hash("t", (True,))
    for bad in (lambda: frame(True), lambda: frames([1, False])):
        with pytest.raises(TypeError):
            bad()


def test_chain_sorts_bound_rows_and_checks_sizes() -> None:
    a, b = b"\x01" * 16, b"\x02" * 16
    g = genesis(SID)
    assert chain_hash(g, EVENT, ([a, b], [], [])) == chain_hash(g, EVENT, ([b, a], [], []))
    # which table a row is bound through matters
    assert chain_hash(g, EVENT, ([a], [], [])) != chain_hash(g, EVENT, ([], [a], []))
    assert chain_hash(g, EVENT) == chain_hash(g, EVENT, ([], [], []))
    for bad in (
        (g[:15], EVENT, ()),
        (g, EVENT + b"x", ()),
        (g, EVENT, ([a[:8]], [], [])),  # one bound row (the writer's fast path)
        (g, EVENT, ([], [a, b[:8]], [])),  # several
        (g, EVENT, ([], [], [a[:8]])),
    ):
        with pytest.raises(ValueError):
            chain_hash(*bad)


# -------------------------------------------------------------------- against the prototype

floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308]
)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.integers()  # big ints too
# the prototype encodes str strictly: a lone surrogate (no SQLite text) is left out here
texts = st.text(st.characters(blacklist_categories=("Cs",)))
values = st.none() | ints | floats | texts | st.binary()
tables = st.sampled_from(["events", "cost_ledger", "plan_items", "producers", "chain_gaps", "é"])
hashes = st.binary(min_size=16, max_size=16)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(tables, st.lists(values, max_size=12))
def test_row_hash_equals_the_prototype(table: str, row: list[Any]) -> None:
    assert row_hash(table, row) == PROTO.row_hash(table, row)


# stored TEXT as bytes: any bytes, invalid UTF-8 included, never decoded
raw_values = st.tuples(st.booleans(), st.binary()) | st.tuples(st.just(False), values)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(tables, st.lists(raw_values, max_size=12))
def test_row_hash_raw_equals_the_prototype(table: str, cells: list[tuple[bool, Any]]) -> None:
    mask = sum(1 << i for i, (is_text, _) in enumerate(cells) if is_text)
    row = [v for _, v in cells]
    got = row_hash_raw(table, mask, *row)
    assert got == PROTO.row_hash_raw(table, mask, *row)
    # TEXT passed as its bytes hashes as the str it decodes to (when it does)
    as_values = [v.decode() if t and _utf8(v) else v for t, v in cells]
    if all(_utf8(v) for t, v in cells if t):
        assert got == row_hash(table, as_values)


def _utf8(v: bytes) -> bool:
    try:
        v.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(tables, st.lists(values, max_size=12), st.integers(0, 12))
def test_kept_frames_hash_as_the_row(table: str, row: list[Any], cut: int) -> None:
    """The writer keeps the frames of a row's unchanged columns (store/chained.py's head):
    frames split anywhere, or framed one by one, hash as the whole row."""
    expect = PROTO.row_hash(table, row)
    assert row_hash_framed(table, frames(row[:cut]) + frames(row[cut:])) == expect
    assert row_hash_framed(table, b"".join(frame(v) for v in row)) == expect
    assert frames(row) == PROTO._frames(row)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(hashes, hashes, st.lists(st.lists(hashes, max_size=4), min_size=3, max_size=3))
def test_chain_hash_equals_the_prototype(prev: bytes, content: bytes, derived: Any) -> None:
    assert chain_hash(prev, content, derived) == PROTO.chain_hash(prev, content, derived)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(hashes, hashes, st.lists(st.lists(hashes, max_size=4), max_size=3))
def test_chain_hash_of_fewer_tables(prev: bytes, content: bytes, derived: list[Any]) -> None:
    """Tables left out are empty ones; tuples and lists alike."""
    full = [*derived, *[[]] * (3 - len(derived))]
    expect = PROTO.chain_hash(prev, content, full)
    assert chain_hash(prev, content, derived) == expect
    assert chain_hash(prev, content, tuple(tuple(d) for d in derived)) == expect


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",))) | st.binary(), st.lists(hashes))
def test_genesis_and_gaps_equal_the_prototype(sid: str | bytes, gaps: list[bytes]) -> None:
    assert genesis(sid) == PROTO.genesis(sid)
    assert gaps_hash(gaps) == PROTO.gaps_hash(gaps)


# ------------------------------------------------------------------------- the SQL functions


def _conn() -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    db.harden(conn)
    return conn


def _stored(v: Any) -> Any:
    # what SQLite gives back: NaN is stored as NULL
    return None if isinstance(v, float) and math.isnan(v) else v


sql_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
sql_values = st.none() | sql_ints | floats | texts | st.binary()


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(tables, st.lists(sql_values, min_size=1, max_size=8), st.binary())
def test_sql_row_hash_of_stored_values(table: str, row: list[Any], invalid: bytes) -> None:
    """Values stored in a table and hashed in SQL from their stored bytes (TEXT cast to BLOB)
    hash as :func:`row_hash` of the values stored; invalid UTF-8 TEXT as its bytes."""
    conn = _conn()
    cols = [f"c{i}" for i in range(len(row) + 1)]
    conn.execute(f"CREATE TABLE t ({', '.join(cols)})")
    conn.execute(
        f"INSERT INTO t VALUES ({', '.join('?' * len(row))}, CAST(? AS TEXT))", (*row, invalid)
    )
    mask = " | ".join(f"((typeof({c}) = 'text') << {i})" for i, c in enumerate(cols))
    args = ", ".join(hashing.as_bytes_sql(c) for c in cols)
    got = conn.execute(f"SELECT agentdb_row_hash(?, {mask}, {args}) FROM t", (table,)).get
    stored = [_stored(v) for v in row]
    if _utf8(invalid):
        assert got == row_hash(table, [*stored, invalid.decode()])
    assert got == row_hash_raw(table, 1 << len(row), *stored, invalid)


def test_sql_functions_equal_python() -> None:
    conn = _conn()
    g = genesis(SID)
    a, b, c = b"\x03" * 16, b"\x01" * 16, b"\x02" * 16
    q = "SELECT agentdb_genesis(?), agentdb_genesis(CAST(? AS BLOB)), agentdb_gaps_hash(NULL)"
    assert conn.execute(q, (SID, SID)).get == (g, g, gaps_hash([]))
    assert conn.execute("SELECT agentdb_gaps_hash(?)", (a + b,)).get == gaps_hash([a, b])
    got = conn.execute("SELECT agentdb_chain_hash(?, ?, ?, NULL, ?)", (g, EVENT, a + b, c)).get
    assert got == chain_hash(g, EVENT, ([b, a], [], [c]))
    plain = conn.execute("SELECT agentdb_chain_hash(?, ?, NULL, NULL, NULL)", (g, EVENT)).get
    assert plain == chain_hash(g, EVENT)
    # malformed input: NULL, never an exception (a verifier compares, a migration fails NOT NULL)
    for sql, args in (
        ("SELECT agentdb_chain_hash(?, ?, NULL, NULL, NULL)", (g[:15], EVENT)),
        ("SELECT agentdb_chain_hash(?, ?, ?, NULL, NULL)", (g, EVENT, a + b"x")),
        ("SELECT agentdb_chain_hash(?, ?, 'text', NULL, NULL)", (g, EVENT)),
        ("SELECT agentdb_chain_hash(NULL, ?, NULL, NULL, NULL)", (EVENT,)),
        ("SELECT agentdb_genesis(1)", ()),
        ("SELECT agentdb_gaps_hash(?)", (b"x",)),
        ("SELECT agentdb_row_hash()", ()),
        ("SELECT agentdb_row_hash('t', 'x', 1)", ()),
    ):
        assert conn.execute(sql, args).get is None, sql


def test_sql_functions_are_deterministic() -> None:
    """Registered deterministic, as the revision-2 hash is (SQLite may then factor calls out)."""
    conn = _conn()
    flags = dict(
        conn.execute(
            "SELECT name, flags FROM pragma_function_list WHERE name LIKE 'agentdb%hash%' "
            "OR name = 'agentdb_genesis'"
        ).fetchall()
    )
    names = {"agentdb_row_hash", "agentdb_chain_hash", "agentdb_genesis", "agentdb_gaps_hash"}
    assert names | {hashing.SQL_FUNCTION} <= set(flags)
    for name in names:
        assert flags[name] & apsw.SQLITE_DETERMINISTIC, name
