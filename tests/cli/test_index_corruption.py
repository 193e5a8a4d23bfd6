"""A corrupted index file changes no answer: real pages of the index (rows of 60 sessions and
their recorded verdicts) damaged in place — a status or profile rewritten to another valid
value (the row still parses: only its checksum tells), a digit of a recorded check time, a
byte flipped in every page, a page zeroed, random or swapped with another — and ``sessions
list``, ``sessions tree`` and ``status`` (its counts by status) answer exactly what they
answer by reading every file.
A recorded verdict is history, not derivable from the files: a damaged one is dropped (the
session shows as never checked), never shown with a wrong value."""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb.index import verdicts
from tests.runner import Agentdb
from tests.support import make_session

pytestmark = pytest.mark.slow

PAGE = 4096


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("corrupt-index") / "sessions"
    d.mkdir(mode=0o700)
    rng = random.Random(7)
    ids: list[str] = []
    for i in range(60):
        parent = rng.choice(ids) if ids and i % 4 == 0 else None
        sid, _ = make_session(
            d,
            turns=1,
            status=rng.choice(["completed", "cancelled", "running", "failed"]),
            profile=rng.choice(["coder", "review", "planner"]),
            parent=parent,
            depth=1 if parent else 0,
        )
        ids.append(sid)
    time.sleep(0.12)  # settled: the index may believe what it stores
    return d


def _doc(agentdb: Agentdb, d: Path, *args: str) -> dict[str, Any]:
    code, out, err = agentdb.at(d)(*args, "--json")
    assert code in (0, 1), err
    got: dict[str, Any] = json.loads(out)
    got.pop("generated_at", None)
    return got


def _without_verdicts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k not in ("verdict", "checked_at")} for r in doc["sessions"]
    ]


def _checkpointed(path: Path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _rewrite(raw: bytearray, old: bytes, new: bytes, rng: random.Random) -> None:
    """Replace one occurrence of ``old`` past the first page (a stored value) by ``new``."""
    at = [i for i in range(PAGE, len(raw) - len(old)) if raw[i : i + len(old)] == old]
    assert at, old
    i = rng.choice(at)
    raw[i : i + len(old)] = new


def _damage(path: Path, how: str, rng: random.Random) -> None:
    raw = bytearray(path.read_bytes())
    pages = len(raw) // PAGE
    assert pages >= 4, pages  # real pages beyond the schema
    if how == "status_rewritten":
        _rewrite(raw, b"completed", b"cancelled", rng)
    elif how == "profile_rewritten":
        _rewrite(raw, b"planner", b"plannex", rng)
    elif how == "checked_at_digit":
        at = [i for i in range(PAGE, len(raw) - 20) if raw[i : i + 4] == b"20" + raw[i + 2 : i + 4]]
        at = [i for i in at if raw[i + 4 : i + 5] == b"-" and raw[i + 10 : i + 11] == b"T"]
        assert at
        i = rng.choice(at) + 18  # a seconds digit
        raw[i] = ord("0") + (raw[i] - ord("0") + 1) % 10
    elif how == "flip_every_page":
        for p in range(1, pages):
            raw[p * PAGE + rng.randrange(100, PAGE)] ^= 0xFF
    elif how == "zero_page":
        p = rng.randrange(1, pages)
        raw[p * PAGE : (p + 1) * PAGE] = bytes(PAGE)
    elif how == "random_page":
        p = rng.randrange(1, pages)
        raw[p * PAGE : (p + 1) * PAGE] = rng.randbytes(PAGE)
    elif how == "swap_pages":
        a, b = rng.sample(range(1, pages), 2)
        pa, pb = raw[a * PAGE : (a + 1) * PAGE], raw[b * PAGE : (b + 1) * PAGE]
        raw[a * PAGE : (a + 1) * PAGE], raw[b * PAGE : (b + 1) * PAGE] = pb, pa
    path.write_bytes(bytes(raw))


DAMAGES = [
    "status_rewritten",
    "profile_rewritten",
    "checked_at_digit",
    "flip_every_page",
    "zero_page",
    "random_page",
    "swap_pages",
]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_corrupted_index_changes_no_answer(
    agentdb: Agentdb, tree: Path, tmp_path: Path, how: str
) -> None:
    agentdb.at(tree)("check", "--quick", "--json")  # verdicts recorded beside the rows
    want = {
        cmd: _doc(agentdb, tree, *cmd.split(), "--no-index")
        for cmd in ("sessions list", "sessions tree", "status")
    }
    assert _doc(agentdb, tree, "sessions", "list") == want["sessions list"]  # warm
    path = verdicts.cache_path()
    _checkpointed(path)
    pristine = tmp_path / "pristine.sqlite"
    shutil.copyfile(path, pristine)
    for seed in range(3):
        shutil.copyfile(pristine, path)
        _damage(path, how, random.Random(seed))
        for _ in range(2):  # with the damaged file, then with what it became
            got = _doc(agentdb, tree, "sessions", "list")
            assert _without_verdicts(got) == _without_verdicts(want["sessions list"]), how
            for r, w in zip(got["sessions"], want["sessions list"]["sessions"], strict=True):
                assert r.get("verdict") in (None, w.get("verdict")), (how, r["session_id"])
                assert r.get("checked_at") in (None, w.get("checked_at")), (how, r["session_id"])
            assert _doc(agentdb, tree, "sessions", "tree") == want["sessions tree"], how
            st, want_st = _doc(agentdb, tree, "status"), want["status"]
            assert st["by_status"] == want_st["by_status"], how
            assert st["interrupted"] == want_st["interrupted"], how
            for k in ("sessions", "size_bytes", "interrupted"):
                assert st["summary"][k] == want_st["summary"][k], (how, k)
