"""The damage generator at revision 3, the damage-evident revision (issue 14 item 8), in CI.

Revision 3 promises that ``check`` shows a changed value in any table, a removed row, a cut
tail that leaves the head, and that recovery keeps every salvaged row's stored hashes and
records its gaps (docs/design/damage-evident-revision.md §1, §6, §7). The invariants of
:mod:`tests.fuzz.invariants` hold agentdb to that for revision-3 cases (``check_ok_on_damage``
against every committed state of the undamaged file, ``recover_row_differs`` with no in-place
tolerance, ``recover_hashes``, ``recover_gaps``); a consistent rollback to an earlier commit is
out of scope and counted apart.

Until check verifies the chain, recovery writes revision-3 replacements and CURRENT_REVISION is
3 (the three branches issue 14 item 8 waits for), these invariants fail on the agentdb they
run on: ``test_revision_3_case_holds_every_invariant`` then marks a case xfail when each of
its failures is one of ``PRE_MERGE_GAPS``, and fails on any other invariant. Once those
branches are merged, set ``PRE_MERGE_GAPS`` to ``frozenset()``: every case must then hold.
The tests of the generator and oracle themselves (drawing, preserved seeds, what a naive edit
leaves, a rollback counted apart) hold on any agentdb.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fuzz import oracle
from tests.fuzz.bases import Bases
from tests.fuzz.generator import REV3_ONLY, REVISIONS, Case, apply, kinds_for
from tests.fuzz.invariants import run_case

# Invariants a revision-3 case may fail for a known, named reason (none: check proves the chain
# and recovery keeps hashes since issue 14's merges). A case failing only on these is xfail.
PRE_MERGE_GAPS: frozenset[str] = frozenset()

# Seeds drawn at revision 3 (``Case.from_seed(seed, revision=3)``; short sessions, so the set
# runs in well under a minute), and naive edits through SQLite of each kind revision 3 promises
# to show (``sql_edit`` subseeds on the short revision-3 base without a WAL).
# 520051 (campaign of 2026-12-02): a truncated main file whose producers are derived from the
# salvaged events: their new hashes are counted unverified, which the invariant must allow.
# 520084: session_meta.parent_session_id changed to '0' (and page 1 zeroed): the engines kept
# the row, check called the replacement inconsistent (bad_parent_id) and nothing was recovered;
# salvage now holds session_meta to check's rules, so an older copy (or a rebuilt row) is used.
REV3_SEEDS = (2, 5, 500002, 500016, 520051, 520084)
SQL_EDITS = {
    "cost_ledger value": "rev=3 wal=0 size=short layout=plain damages=sql_edit/39",
    "plan_items value": "rev=3 wal=0 size=short layout=plain damages=sql_edit/21",
    "session_meta value": "rev=3 wal=0 size=short layout=plain damages=sql_edit/32",
    "session_chain count": "rev=3 wal=0 size=short layout=plain damages=sql_edit/28",
    "events chain_hash": "rev=3 wal=0 size=short layout=plain damages=sql_edit/18",
    "plan_items row deleted": "rev=3 wal=0 size=short layout=plain damages=sql_edit/41",
    "tail cut, head left": "rev=3 wal=0 size=short layout=plain damages=sql_edit/33",
    "tail cut with its bound rows": "rev=3 wal=0 size=short layout=plain damages=sql_edit/10",
}
# A -wal cut inside its second commit: SQLite presents the first commit's state whole.
ROLLBACK = "rev=3 wal=1 size=short layout=plain damages=truncate_wal/3"


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> Bases:
    return Bases(tmp_path_factory.mktemp("fuzz-bases-rev3"))


def test_revision_3_is_drawn_apart_and_earlier_seeds_keep_their_cases() -> None:
    """Revision 3 comes only when asked: a seed without a revision still draws 1 or 2 and the
    case it always drew (the CI seeds' cases pinned as printed before revision 3 existed), and
    only revision-3 cases draw the kinds of REV3_ONLY."""
    pinned = {
        0: "rev=2 wal=0 size=short layout=autovacuum damages=ptrmap/1043521778",
        1: "rev=1 wal=0 size=short layout=plain damages=zero_page/965274705",
        2: "rev=1 wal=1 size=short layout=plain damages=foreign_wal/540271020",
        9: "rev=2 wal=0 size=long layout=plain damages=byte_flip/995834408",
        360093: "rev=1 wal=0 size=long layout=plain damages=random_page/75504081",
        401823: "rev=2 wal=0 size=short layout=plain damages=stale_page/937578572",
    }
    for seed, text in pinned.items():
        assert str(Case.from_seed(seed)) == text
    for wal in (False, True):
        assert kinds_for(wal) == kinds_for(wal, 1) == kinds_for(wal, 2)
        assert not REV3_ONLY & set(kinds_for(wal))
        assert set(kinds_for(wal, 3)) >= REV3_ONLY
    picked = set()
    for seed in range(400):
        c = Case.from_seed(seed)
        assert c.revision in (1, 2) and not REV3_ONLY & {k for k, _ in c.damages}
        any_rev = Case.from_seed(seed, revisions=REVISIONS)
        picked.add(any_rev.revision)
        assert any_rev == Case.from_seed(seed, revision=any_rev.revision)
        assert Case.parse(str(any_rev)) == replace_seed(any_rev)
    assert picked == {1, 2, 3}


def replace_seed(c: Case) -> Case:
    return Case(c.revision, c.wal, c.size, c.layout, c.damages)


@pytest.mark.slow
def test_a_naive_edit_leaves_no_committed_state(bases: Bases, tmp_path: Path) -> None:
    """The oracle itself: every naive edit the generator makes leaves rows that are neither
    the undamaged file's last committed state nor an earlier one (so check must not pass it),
    with and without a WAL."""
    for wal in (False, True):
        for sub in range(40):
            d = tmp_path / f"{int(wal)}-{sub}"
            a = apply(Case(3, wal, "short", "plain", (("sql_edit", sub),)), bases, d)
            if not a.applied:
                continue
            st = oracle.read_state(a.path)
            assert st is not None, a.done
            digest = oracle.state_digest(st)
            assert a.base.state is not None
            assert digest != oracle.state_digest(a.base.state), a.done
            assert digest not in a.base.earlier, (a.done, a.base.earlier.get(digest))
            shutil.rmtree(d)


@pytest.mark.slow
def test_a_consistent_rollback_is_counted_apart(bases: Bases, tmp_path: Path) -> None:
    """A -wal cut inside a commit presents the commit before it, whole: a valid earlier state
    of the session (design §1: out of scope), counted as a rollback and no failure."""
    r = run_case(Case.parse(ROLLBACK), bases, tmp_path / "case")
    assert r.applied.applied
    assert r.rollback.startswith("commit "), (r.rollback, r.applied.done)
    assert not r.failures, r.failures


def _holds(case: Case, bases: Bases, work: Path) -> None:
    r = run_case(case, bases, work)
    assert r.applied.applied, r.applied.done
    replay = f"python -m tests.fuzz.generator --case '{case}'"
    names = {inv for inv, _ in r.failures}
    if names and names <= PRE_MERGE_GAPS:
        pytest.xfail(f"pre-merge revision-3 gap ({sorted(names)}): {r.failures}\nreplay: {replay}")
    assert not r.failures, f"{case} ({r.applied.done}): {r.failures}\nreplay: {replay}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", REV3_SEEDS)
def test_revision_3_seed_holds_every_invariant(bases: Bases, tmp_path: Path, seed: int) -> None:
    _holds(Case.from_seed(seed, revision=3), bases, tmp_path / "case")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SQL_EDITS))
def test_revision_3_case_holds_every_invariant(bases: Bases, tmp_path: Path, name: str) -> None:
    _holds(Case.parse(SQL_EDITS[name]), bases, tmp_path / "case")
