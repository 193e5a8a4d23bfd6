"""A hot rollback journal (a writer killed mid-transaction in DELETE mode) is not damage in itself.

At dd60f0c, check called such a file corrupt (the read-only open ignored the journal and read the
uncommitted pages) and recover built the replacement from those uncommitted pages and left the
old journal beside it; the next normal open rolled that journal into the new file. Now check
judges the rolled-back state (on a private copy), recover leaves a healthy rolled-back state
alone and salvages a damaged one from it, keeping the journal with the original.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from agentdb import checks, salvage
from agentdb.paths import sidecar
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.store import SessionWriter
from tests.fuzz import damage, oracle
from tests.rows import row_sets
from tests.runner import run_cli
from tests.salvage import corpus
from tests.support import make_session

KILL_MID_TRANSACTION = r"""
import os, sys, apsw
c = apsw.Connection(sys.argv[1])
c.execute("PRAGMA cache_size=2")
c.execute("BEGIN")
c.execute(sys.argv[2])
os.kill(os.getpid(), 9)
"""


def hot_journal_session(
    sessions_dir: Path, sql: str, revision: int = 2
) -> tuple[str, Path, dict[str, set]]:  # type: ignore[type-arg]
    """A closed session switched to DELETE mode, then a writer killed inside ``sql``'s
    transaction: the file holds uncommitted pages, the journal the committed ones."""
    sid, path = make_session(sessions_dir, turns=20, revision=revision)
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchall() == [("delete",)]
    conn.close()
    committed = row_sets(path)
    p = subprocess.run([sys.executable, "-c", KILL_MID_TRANSACTION, str(path), sql])
    assert p.returncode == -9
    assert sidecar(path, "-journal").stat().st_size > 0
    return sid, path, committed


def healthy(revision: int) -> str:
    """check's verdict on a healthy file of ``revision``."""
    return "ok" if revision == CURRENT_REVISION else "needs_migration"


@pytest.mark.slow
@pytest.mark.parametrize("revision", [2, 3])
def test_hot_journal_with_a_healthy_rollback(
    sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    sid, path, committed = hot_journal_session(
        sessions_dir, "UPDATE events SET payload = randomblob(3000)", revision
    )
    before = {p.name: p.read_bytes() for p in sessions_dir.iterdir()}
    result = checks.check_path(path, sid)
    assert result.verdict == healthy(revision), result.findings
    assert "hot_journal" in {f.code for f in result.findings}
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "healthy", out.notes
    assert "a hot journal will be rolled back on the next open" in out.notes
    assert {p.name: p.read_bytes() for p in sessions_dir.iterdir()} == before
    conn = apsw.Connection(str(path))  # the next normal open rolls it back
    conn.execute("SELECT count(*) FROM events").fetchall()
    conn.close()
    assert row_sets(path) == committed
    assert checks.check_path(path, sid).verdict == healthy(revision)


@pytest.mark.slow
@pytest.mark.parametrize("revision", [2, 3])
def test_hot_journal_with_a_damaged_rollback(
    sessions_dir: Path, tmp_path: Path, revision: int
) -> None:
    sid, path, committed = hot_journal_session(
        sessions_dir, "UPDATE cost_ledger SET model_id = hex(randomblob(900))", revision
    )
    damage.zero_sector(path, damage.pages_of(path, "events", "leaf")[3], 2)
    file_bytes = path.read_bytes()
    journal = sidecar(path, "-journal").read_bytes()
    result = checks.check_path(path, sid)
    assert result.verdict == "corrupt"
    assert "hot_journal" in {f.code for f in result.findings}
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", out.notes
    assert out.corrupt_path is not None and out.corrupt_journal is not None
    assert Path(out.corrupt_path).read_bytes() == file_bytes
    assert Path(out.corrupt_journal).read_bytes() == journal
    assert not sidecar(path, "-journal").exists()  # never beside the replacement
    got = corpus.at_revision(row_sets(path), revision)  # the replacement: current revision
    assert got["cost_ledger"] == committed["cost_ledger"]  # committed rows, not the uncommitted
    assert got["events"] <= committed["events"]
    assert len(got["events"]) >= len(committed["events"]) - 20
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"


@pytest.mark.slow
def test_journal_of_another_page_size_is_foreign(sessions_dir: Path, tmp_path: Path) -> None:
    sid, path, _ = hot_journal_session(sessions_dir, "UPDATE events SET payload = randomblob(3000)")
    damage.write_at(sidecar(path, "-journal"), 24, (1024).to_bytes(4, "big"))
    journal = sidecar(path, "-journal").read_bytes()
    result = checks.check_path(path, sid)
    assert result.verdict == "corrupt"
    assert "foreign_journal" in {f.code for f in result.findings}
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", out.notes
    assert out.corrupt_journal is not None
    assert Path(out.corrupt_journal).read_bytes() == journal
    assert not sidecar(path, "-journal").exists()
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"
    assert os.stat(path).st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_hot_journal_beside_a_wal_is_read_as_sqlite_reads_it(
    sessions_dir: Path, tmp_path: Path
) -> None:
    """A hot journal and a -wal both beside the file: SQLite rolls the journal back, then
    applies the -wal (whatever the header says), and check judges that state. The read-only
    open (events, show, backup, ...) used to copy the -wal alone and read the dead writer's
    uncommitted pages under it: events printed fewer events than SQLite shows, and backup
    called the session corrupt where check called it ok."""
    sid, path = make_session(sessions_dir, turns=20, status=None)
    wal = sidecar(path, "-wal")
    # The writer's own commit (a plain UPDATE would break session_meta's hash at revision 3),
    # left in the -wal: WAL mode, no checkpoint.
    writer = SessionWriter.open(sessions_dir, sid)
    writer.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    writer.conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    writer.set_status("completed")
    wal_bytes = wal.read_bytes()
    writer.close()
    conn = apsw.Connection(str(path))  # checkpoint the -wal into the file, then DELETE mode
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchall() == [("delete",)]
    conn.close()
    committed = row_sets(path)
    p = subprocess.run(
        [sys.executable, "-c", KILL_MID_TRANSACTION, str(path), "DELETE FROM events"]
    )
    assert p.returncode == -9
    assert sidecar(path, "-journal").stat().st_size > 0
    wal.write_bytes(wal_bytes)  # the -wal beside it again
    os.chmod(wal, 0o600)
    assert checks.check_path(path, sid).verdict == "ok"
    # SQLite's own read (a private copy, journal and -wal beside it): every event
    assert len(oracle.read_rows(path).rows["events"]) == len(committed["events"])
    before = {q.name: q.read_bytes() for q in sessions_dir.iterdir()}
    env = {"XDG_STATE_HOME": str(sessions_dir.parent.parent)}
    p = run_cli("--sessions-dir", str(sessions_dir), "events", sid, "--json", env=env)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == len(committed["events"])
    to = tmp_path / "backup"
    p = run_cli("--sessions-dir", str(sessions_dir), "backup", sid, "--to", str(to), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["sessions"][0]["outcome"] == "copied"
    assert row_sets(to / path.name) == committed
    assert {q.name: q.read_bytes() for q in sessions_dir.iterdir()} == before


INSERT_COPIES = (
    "INSERT INTO events(sequence, id, timestamp, kind, producer_category, producer_name, "
    "producer_version, schema_version, payload) SELECT sequence + 100000, id || 'x', timestamp, "
    "kind, producer_category, producer_name, producer_version, schema_version, payload "
    "FROM events"
)


@pytest.mark.slow
def test_torn_journal_leaves_the_killed_rows_unverified(sessions_dir: Path, tmp_path: Path) -> None:
    """A hot journal cut to its 28-byte header (the storage lost its records though the
    overwritten pages reached the disk): its rollback restores nothing, so the file still holds
    the killed INSERT's rows. recover kept them as structural_only and reported the jump to
    sequence 100001 as tens of thousands of events known lost; they are unverified now, and
    the jump is no loss."""
    sid, path, committed = hot_journal_session(sessions_dir, INSERT_COPIES, revision=1)
    j = sidecar(path, "-journal")
    os.truncate(j, 28)
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    assert out.outcome == "recovered", out.notes
    got = row_sets(path)
    seqs = sorted({r[0] for r in got["events"]} - {r[0] for r in committed["events"]})
    assert seqs and seqs[0] > 100000  # the killed transaction's rows: SQLite reads them too
    ranges = out.lost.get("unverified_event_sequences", [])
    assert out.tables["events"]["unverified"] >= len(seqs)
    assert all(any(a <= s <= b for a, b in ranges) for s in seqs), (seqs[:5], ranges)
    assert "event_sequences" not in out.lost, out.lost  # nothing is known lost
    assert any("journal is cut short or torn" in n for n in out.notes), out.notes
    assert checks.check_path(path, sid, recovered=True).verdict == "ok"


@pytest.mark.slow
def test_journal_torn_reads_records_as_the_playback_does(sessions_dir: Path) -> None:
    from agentdb.fileformat import journal_torn

    _sid, path, _ = hot_journal_session(sessions_dir, INSERT_COPIES, revision=1)
    whole = sidecar(path, "-journal").read_bytes()
    assert journal_torn(whole) is None  # every promised record is there
    ps = int.from_bytes(whole[24:28], "big")
    sector = int.from_bytes(whole[20:24], "big")
    promised = int.from_bytes(whole[8:12], "big")
    assert promised > 2
    assert journal_torn(whole[:28]) == (frozenset(), promised)
    cut = whole[: sector + 2 * (ps + 8) + 100]
    got = journal_torn(cut)
    assert got is not None and len(got[0]) == 2 and got[1] == promised - 2
    bad = bytearray(whole)
    bad[sector + (ps + 8) + 4 + ps - 200] ^= 1  # the second record's checksum fails
    got = journal_torn(bytes(bad))
    assert got is not None and len(got[0]) == 1 and got[1] >= promised - 1


def _header(records: int, initial: int, sector: int, page_size: int) -> bytes:
    fields = (records, 0, initial, sector, page_size)
    return bytes.fromhex("d9d505f920a163d7") + b"".join(v.to_bytes(4, "big") for v in fields)


# Journal headers no killed writer of ours leaves, beside a healthy file at rest: magic and
# zeros (the red-team's), sizes SQLite does not allow, a valid header that promises nothing but
# names a smaller original size, each 28 bytes long and one sector long (SQLite reads no
# header from a journal shorter than its 512-byte sector).
ODD_JOURNALS = {
    "zeros": _header(0, 0, 0, 0),
    "no_sector_size": _header(0, 1, 0, 4096),
    "no_page_size": _header(3, 1, 512, 0),
    "odd_page_size": _header(0, 1, 512, 3000),
    "restores_one_page": _header(0, 1, 512, 4096),
    "restores_no_page": _header(0, 0, 512, 4096),
}


@pytest.mark.slow
@pytest.mark.parametrize("length", [28, 512])
@pytest.mark.parametrize("name", sorted(ODD_JOURNALS))
def test_odd_journal_headers_are_judged_as_sqlite_rolls_them_back(
    sessions_dir: Path, tmp_path: Path, name: str, length: int
) -> None:
    """SQLite is the oracle: a private copy of the file and the journal opened normally shows
    what the next open of the session would do. Where that leaves every row as it was, check
    is ok and recover leaves the file; where it destroys rows (it truncates the file to the
    header's original size), check calls the journal foreign (corrupt) and recover keeps every
    row from the file as it is, with the journal beside the original."""
    sid, path = make_session(sessions_dir, turns=20)
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchall() == [("delete",)]
    conn.close()
    committed = row_sets(path)
    journal = ODD_JOURNALS[name].ljust(length, b"\0")
    sidecar(path, "-journal").write_bytes(journal)
    os.chmod(sidecar(path, "-journal"), 0o600)
    probe = tmp_path / "oracle"
    probe.mkdir()
    (probe / path.name).write_bytes(path.read_bytes())
    sidecar(probe / path.name, "-journal").write_bytes(journal)
    try:
        conn = apsw.Connection(str(probe / path.name))  # read-write: SQLite rolls back
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()
        conn.close()
        assert not sidecar(probe / path.name, "-journal").exists()
        intact = row_sets(probe / path.name) == committed
    except apsw.Error:
        intact = False
    result = checks.check_path(path, sid)
    out = salvage.recover_session(sessions_dir, sid, recovery_log=tmp_path / "log")
    if intact:
        assert result.verdict == "ok", result.findings
        assert out.outcome == "healthy", out.notes
        return
    assert result.verdict == "corrupt", result.findings
    assert "foreign_journal" in {f.code for f in result.findings}
    assert out.outcome == "recovered", out.notes
    assert row_sets(path) == committed
    assert out.corrupt_journal is not None
    assert Path(out.corrupt_journal).read_bytes() == journal
    assert not sidecar(path, "-journal").exists()


@pytest.mark.slow
@pytest.mark.parametrize("length", [28, 512])
@pytest.mark.parametrize("name", sorted(ODD_JOURNALS))
def test_the_kernel_opens_beside_an_odd_journal_and_loses_nothing(
    sessions_dir: Path, name: str, length: int
) -> None:
    """The writer's open judges the file first: a journal whose rollback would truncate the
    session goes with the original (recovered), a harmless one is SQLite's to delete; either
    way every committed row is there afterwards and no journal is left beside the file."""
    from agentdb.kernel import open_session

    sid, path = make_session(sessions_dir, turns=20)
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchall() == [("delete",)]
    conn.close()
    committed = row_sets(path)
    sidecar(path, "-journal").write_bytes(ODD_JOURNALS[name].ljust(length, b"\0"))
    os.chmod(sidecar(path, "-journal"), 0o600)
    open_session(sessions_dir, sid).close()
    assert row_sets(path) == committed
    assert not sidecar(path, "-journal").exists()
