"""Ctrl-C while a schema is being written keeps its meaning.

A KeyboardInterrupt that arrives while ``COMMIT`` runs can leave the connection with no open
transaction (SQLite already rolled back). ``create_schema`` then must not run a second
``ROLLBACK``: it would raise "cannot rollback - no transaction is active", which replaced the
interrupt, so ``recover --all`` reported that session as ``failed`` and went on instead of
stopping with exit 130.
"""

from pathlib import Path

import apsw
import pytest

from agentdb import db
from agentdb.schema import CURRENT_REVISION
from agentdb.schema.migrations import create_schema


def _interrupt() -> bool:
    raise KeyboardInterrupt


def test_ctrl_c_during_the_schema_commit_stays_an_interrupt(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    conn = db.open_writer(path, create=True)
    try:
        conn.set_commit_hook(_interrupt)  # the interrupt lands inside COMMIT
        with pytest.raises(KeyboardInterrupt):
            create_schema(conn, CURRENT_REVISION)
        assert conn.get_autocommit()  # nothing left open
        conn.set_commit_hook(None)
        assert db.scalar(conn, "SELECT count(*) FROM sqlite_schema") == 0  # rolled back whole
    finally:
        conn.close()


def test_apsw_really_rolls_back_when_commit_is_interrupted(tmp_path: Path) -> None:
    """The premise of the test above, without agentdb: the commit hook's exception leaves no
    transaction open, so a second ROLLBACK is the misuse SQLite reports."""
    conn = apsw.Connection(str(tmp_path / "plain.sqlite"))
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("CREATE TABLE t (x)")
    conn.set_commit_hook(_interrupt)
    with pytest.raises(KeyboardInterrupt):
        conn.execute("COMMIT")
    assert conn.get_autocommit()
    with pytest.raises(apsw.SQLError, match="no transaction is active"):
        conn.execute("ROLLBACK")
    conn.close()
