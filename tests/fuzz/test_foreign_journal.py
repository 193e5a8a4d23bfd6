"""A hot ``-journal`` of another session (same page size) beside an intact session file.

At bcf0498 its header passed the only rule there was (page size, a restored size of 0 pages):
check judged the rolled-back state (another session's events under this one's name), the
read-only open read it, recover salvaged from it and labelled the other session's events, and
the kernel's open let SQLite roll it into the session. Now the rollback done in a private copy
is judged on its content (docs/recover.md, "A hot journal that is not this file's"): another
session_meta id, an event whose id changes, rows naming events the state does not hold. Such a
journal is ``foreign_journal``: never rolled back, kept beside the ``.corrupt`` copy, and the
file alone is salvaged whole.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from agentdb import checks, db, salvage
from agentdb.paths import sidecar
from tests.fuzz.test_hot_journal import hot_journal_session
from tests.rows import row_sets
from tests.salvage import corpus
from tests.support import make_session

STATEMENTS = {
    "events": "UPDATE events SET payload = randomblob(3000)",
    "cost_ledger": "UPDATE cost_ledger SET model_id = hex(randomblob(900))",
}


def _event_ids(path: Path) -> set[str]:
    return {r[1] for r in row_sets(path)["events"]}


def foreign_journal_beside(tmp_path: Path, sessions_dir: Path, revision: int, sql: str) -> Any:
    """This session (17 turns, closed, no sidecar) and another session's hot journal beside it
    (20 turns, a writer killed inside ``sql``)."""
    sid, path = make_session(sessions_dir, turns=17, revision=revision, profile="other")
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    _, other, _ = hot_journal_session(other_dir, sql, revision)
    mine = row_sets(path)
    shutil.copy(sidecar(other, "-journal"), sidecar(path, "-journal"))
    return sid, path, mine, sidecar(path, "-journal").read_bytes(), _event_ids(other)


@pytest.mark.parametrize("table", sorted(STATEMENTS))
@pytest.mark.parametrize("revision", [2, 3])
def test_another_sessions_hot_journal_is_never_rolled_back(
    sessions_dir: Path, tmp_path: Path, revision: int, table: str
) -> None:
    sid, path, mine, journal, theirs = foreign_journal_beside(
        tmp_path, sessions_dir, revision, STATEMENTS[table]
    )
    result = checks.check_path(path, sid)
    codes = {f.code for f in result.findings}
    assert "foreign_journal" in codes and "hot_journal" not in codes, result.findings
    assert result.verdict == "corrupt"
    assert codes <= {"foreign_journal", "needs_migration"}, result.findings  # the file is whole

    conn = db.open_readonly(path)  # events, show, backup: the file alone
    try:
        assert conn.how == "immutable"
        got = {r[0] for r in conn.execute("SELECT id FROM events NOT INDEXED")}
    finally:
        conn.close()
    assert got == {r[1] for r in mine["events"]}

    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", out.notes
    assert out.corrupt_journal is not None
    assert Path(out.corrupt_journal).read_bytes() == journal
    assert not sidecar(path, "-journal").exists()
    assert not any("unverified" in n for n in out.notes), out.notes  # its writer was not ours
    after = corpus.at_revision(row_sets(path), revision)
    assert after == mine
    assert not _event_ids(path) & theirs
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"


@pytest.mark.parametrize("revision", [2, 3])
def test_the_kernel_moves_another_sessions_journal_aside(
    sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    """The writer's open judges the file before SQLite opens it: the journal goes with the
    original (``.corrupt-journal``), the session keeps every row of its own."""
    from agentdb.kernel import open_session

    sid, path, mine, journal, theirs = foreign_journal_beside(
        tmp_path, sessions_dir, revision, STATEMENTS["events"]
    )
    open_session(sessions_dir, sid).close()
    assert not sidecar(path, "-journal").exists()
    kept = sidecar(path.with_name(path.name + ".corrupt"), "-journal")
    assert kept.read_bytes() == journal
    assert corpus.at_revision(row_sets(path), revision)["events"] == mine["events"]
    assert not _event_ids(path) & theirs
