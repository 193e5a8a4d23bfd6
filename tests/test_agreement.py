"""One judge: every command tells the same story about the same file.

The same files — healthy, seven kinds of damage, a foreign WAL, a hot rollback journal, invalid
UTF-8 in a TEXT column, each at revision 1 and revision 2 — go to every command, and the answers
must agree as the one-judge issue defines. Each (file, relation) pair is its own test, so the
matrix of what agrees is the test report.

Levels (docs/checks.md, "Which commands judge at which level"): ``check`` without ``--quick``,
``recover``, ``prune``, ``backup``, ``migrate`` and ``events`` judge at the *full* level (the
same :func:`agentdb.checks.judge`). ``sessions show`` judges one file at the *quick* level, and
takes a full verdict from the verdict cache when ``check`` recorded one for the file as it is.
``sessions list`` never runs a check: it reports what opening the file shows, plus the verdict
cache. So the relations are asserted at the matching level:

("error" below: the verdict is unreadable, corrupt or foreign)

* recover: check (full) in {ok, needs_migration} exactly when ``recover --dry-run`` says
  healthy;
* prune: ``prune --dry-run`` never refuses such a file as unreadable, and removes no other;
* list_open: no verdict cache: a ``sessions list`` row carries an error only when check (full)
  says error (the open level sees less, never more) or the file cannot be read as this session;
* list: after ``check`` recorded its verdict, a row carries an error exactly when it says error
  (a row of a file it cannot read as this session at all, e.g. too new, may carry one too);
* show_quick: no cache: ``sessions show`` fails exactly when ``check --quick`` says error, and
  refuses (exit 1) a file it cannot read as this session at all (as events below);
* show: after ``check``: ``sessions show`` fails exactly when check (full) says error (or
  refuses, as above);
* events: exits 1 exactly when check (full) is corrupt or unreadable, after printing at least
  every event SQLite itself reads in order before its first error — except a file it cannot
  read as this session at all (check: foreign, too_new, insecure, unsafe_schema), which it
  refuses with exit 1 and prints nothing (the issue's table leaves those out);
* backup: outcome ``corrupt`` exactly when check (full) is corrupt;
* migrate: ``migrate --dry-run`` says ``corrupt`` exactly when check (full) is corrupt or
  unreadable, whatever the revision, and would migrate only a file check calls needs_migration.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import pytest
import ulid

from agentdb import paths
from agentdb.paths import sidecar
from tests import rows
from tests.runner import global_options, invoke
from tests.salvage import corpus

HEALTHY = {"ok", "needs_migration"}
SHOWS_ERROR = {"unreadable", "corrupt", "foreign"}
EVENTS_FAIL = {"corrupt", "unreadable"}
# files events cannot read as this session at all: refused (exit 1) before any event is printed
REFUSED = {"foreign", "too_new", "insecure", "unsafe_schema"}


def _foreign_wal(p: Path) -> None:
    """Another session's valid -wal beside this file."""
    work = p.parent.parent / "other"
    (work / "w").mkdir(parents=True, exist_ok=True)
    (work / "c").mkdir(exist_ok=True)
    _, other = corpus.build_wal(work / "w", work / "c")
    shutil.copyfile(sidecar(other, "-wal"), sidecar(p, "-wal"))
    os.chmod(sidecar(p, "-wal"), 0o600)


def _too_new(p: Path) -> None:
    """A user_version beyond the revisions this build knows (the contract: refused, naming both)."""
    with open(p, "r+b") as f:
        f.seek(60)
        f.write((99).to_bytes(4, "big"))


def _negative_version(p: Path) -> None:
    """Garbage in the header's user_version that reads as a negative number (it is signed)."""
    with open(p, "r+b") as f:
        f.seek(60)
        f.write(bytes.fromhex("d53f2a0b"))


def _hot_journal(p: Path) -> None:
    """A writer in rollback-journal mode killed mid-transaction: a hot -journal beside it."""
    conn = apsw.Connection(str(p))
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    script = (
        "import apsw, os, sys\n"
        "c = apsw.Connection(sys.argv[1])\n"
        "c.execute('PRAGMA cache_size=1')\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        'c.execute("UPDATE events SET payload = zeroblob(3000)")\n'
        "os._exit(9)  # no COMMIT, no ROLLBACK: the journal stays hot\n"
    )
    subprocess.run([sys.executable, "-c", script, str(p)], check=False, timeout=60)
    assert sidecar(p, "-journal").stat().st_size > 0


def _column_renamed(p: Path) -> None:
    """A byte of a column name in the stored CREATE TABLE text flipped (the fuzz campaign's
    seed 360093): SQLite still reads the file, but no reader finds ``parent_session_id``."""
    data = bytearray(p.read_bytes())
    at = data.index(b"parent_session_id", data.index(b"CREATE TABLE session_meta"))
    data[at + 8] ^= 0x01  # parent_sEssion_id -> parent_sDssion_id
    p.write_bytes(bytes(data))


def _index_dropped(p: Path) -> None:
    """A schema that differs from its revision in what no reader needs (an index gone):
    inconsistent, and every command still reads the session."""
    conn = apsw.Connection(str(p))
    conn.execute("DROP INDEX idx_events_kind")
    conn.close()


def _ledger_misdirected(p: Path) -> None:
    """A cost_ledger row pointing at an event that is no message (a flipped bit in its
    integer: the revision-1 campaign's seed 390386): every row reads, the tables disagree."""
    conn = apsw.Connection(str(p))
    conn.execute(
        "UPDATE cost_ledger SET event_sequence = (SELECT min(sequence) FROM events "
        "WHERE kind != 'message') WHERE rowid = (SELECT min(rowid) FROM cost_ledger)"
    )
    conn.close()


# Built from a session copied while its writer had commits only in its WAL (revision 2 only).
WAL_CASES: dict[str, Callable[[Path], None] | None] = {
    "wal_healthy": None,
    "wal_torn_tail": corpus.d_torn_wal,
    "wal_flipped_frame": corpus.d_flipped_wal_frame,
}
CASES: dict[str, Callable[[Path], None] | None] = {
    "healthy": None,
    "zeroed_page": corpus.d_zeroed_page,
    "flipped_bytes": corpus.d_flipped_bytes,
    "truncated_inside_page": corpus.d_truncated_inside,
    "damaged_header": corpus.d_damaged_header,
    "broken_overflow_chain": corpus.d_broken_overflow,
    "index_only": corpus.d_index_only,
    "damaged_interior_page": corpus.d_interior_page,
    "foreign_wal": _foreign_wal,
    "hot_journal": _hot_journal,
    "invalid_utf8": rows.invalid_text,
    "too_new": _too_new,
    "negative_version": _negative_version,
    "column_renamed": _column_renamed,
    "index_dropped": _index_dropped,
    "ledger_misdirected": _ledger_misdirected,
    "misnamed": None,  # a healthy session copied under another id (renamed in _answers)
}
RELATIONS = (
    "recover",
    "prune",
    "list_open",
    "list",
    "show_quick",
    "show",
    "events",
    "backup",
    "migrate",
)

# Cells known to disagree, each naming the finding (/work/wt/FINDINGS.md) that owns the fix.
# Strict: once fixed, the cell fails until its entry is removed here.
XFAIL: dict[tuple[str, int, str], str] = {}


@dataclass
class Answers:
    """What every command said about one file."""

    verdict: str  # check (full)
    quick_verdict: str  # check --quick
    recover: str  # recover --dry-run outcome
    prune: dict[str, Any]  # prune --dry-run document
    list_open: dict[str, Any]  # sessions list row, no verdict cache
    list_cached: dict[str, Any]  # sessions list row, after check recorded its verdict
    show_open: tuple[int, str]  # sessions show exit code and stdout, no verdict cache
    show_cached: tuple[int, str]  # the same after check
    events: tuple[int, list[dict[str, Any]]]  # events exit code and the lines printed
    readable_events: int  # events SQLite itself reads in sequence order before the first error
    backup: str  # backup outcome
    migrate: str  # migrate --dry-run outcome
    unchanged: bool  # no command changed the sessions directory


def _readable_events(path: Path) -> int:
    """Events SQLite reads from the file alone, in sequence order, before it raises (a file
    with a -wal or -journal is judged by the commands with it; this is only a lower bound)."""
    n = 0
    try:
        conn = apsw.Connection(
            f"file:{path}?mode=ro&immutable=1",
            flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
        )
        for _ in conn.execute(
            "SELECT sequence, CAST(id AS BLOB), CAST(timestamp AS BLOB), CAST(kind AS BLOB), "
            "CAST(producer_category AS BLOB), CAST(producer_name AS BLOB), "
            "CAST(producer_version AS BLOB), CAST(schema_version AS BLOB), "
            "CAST(payload AS BLOB) FROM events ORDER BY sequence"
        ):
            n += 1
    except (apsw.Error, UnicodeDecodeError):
        pass
    return n


def _answers(case: str, base: tuple[str, Path], root: Path) -> Answers:
    sid, src = base
    sessions = root / "sessions"
    sessions.mkdir(mode=0o700)
    path = sessions / src.name
    shutil.copyfile(src, path)
    os.chmod(path, 0o600)
    if sidecar(src, "-wal").exists():
        shutil.copyfile(sidecar(src, "-wal"), sidecar(path, "-wal"))
        os.chmod(sidecar(path, "-wal"), 0o600)
    damage = CASES[case] if case in CASES else WAL_CASES[case]
    if damage is not None:
        damage(path)
    if case == "misnamed":  # the same bytes under another session's name
        sid = str(ulid.ULID())
        path = path.rename(paths.session_path(sessions, sid))
    plain = case not in ("foreign_wal", "hot_journal") and case not in WAL_CASES
    readable = _readable_events(path) if plain else 0
    time.sleep(0.1)  # the verdict cache trusts a file only once its timestamps have settled
    before = sorted(os.listdir(sessions))
    cache = root / "xdg-cache"  # this file's own verdict cache

    def _run(*args: str) -> tuple[int, str]:
        code, out, _ = invoke([*g, *args], env={"XDG_CACHE_HOME": str(cache)})
        return code, out

    g = global_options(sessions, root / "plugins")

    _, out = _run("sessions", "list", "--json")
    list_open = json.loads(out)["sessions"][0]
    show_open = _run("sessions", "show", sid, "--json")
    _, out = _run("check", sid, "--quick", "--json")
    quick = json.loads(out)["sessions"][0]["verdict"]
    shutil.rmtree(cache, ignore_errors=True)  # only a full check's verdict from here on
    _, out = _run("check", sid, "--json")
    verdict = json.loads(out)["sessions"][0]["verdict"]
    _, out = _run("sessions", "list", "--json")
    list_cached = json.loads(out)["sessions"][0]
    show_cached = _run("sessions", "show", sid, "--json")
    _, out = _run("recover", sid, "--dry-run", "--json")
    recover = json.loads(out)["sessions"][0]["outcome"]
    _, out = _run("prune", sid, "--dry-run", "--json")
    prune = json.loads(out)
    code, out = _run("events", sid, "--json")
    events = (code, [json.loads(line) for line in out.splitlines() if line.strip()])
    _, out = _run("backup", sid, "--to", str(root / "backup"), "--json")
    backup = json.loads(out)["sessions"][0]["outcome"]
    _, out = _run("migrate", sid, "--dry-run", "--json")
    migrate = json.loads(out)["sessions"][0]["outcome"]
    return Answers(
        verdict,
        quick,
        recover,
        prune,
        list_open,
        list_cached,
        show_open,
        show_cached,
        events,
        readable,
        backup,
        migrate,
        sorted(os.listdir(sessions)) == before,
    )


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, int], Answers]:
    root = tmp_path_factory.mktemp("agreement")
    bases: dict[int | str, tuple[str, Path]] = {}
    for rev in (1, 2):
        d = root / f"base{rev}"
        d.mkdir(mode=0o700)
        bases[rev] = corpus.build_base(d, revision=rev)
    (root / "wal-w").mkdir(mode=0o700)
    (root / "wal-c").mkdir(mode=0o700)
    bases["wal"] = corpus.build_wal(root / "wal-w", root / "wal-c")
    done: dict[tuple[str, int], Answers] = {}

    def get(case: str, revision: int) -> Answers:
        if (case, revision) not in done:
            work = root / f"{case}-{revision}"
            work.mkdir()
            base = bases["wal" if case in WAL_CASES else revision]
            done[case, revision] = _answers(case, base, work)
        return done[case, revision]

    return get


def _show_error(show: tuple[int, str]) -> bool:
    code, out = show
    if code != 0:
        return True
    return bool(json.loads(out)["session"].get("error"))


def _holds(relation: str, a: Answers) -> tuple[bool, object]:
    v = a.verdict
    if relation == "recover":
        return (v in HEALTHY) == (a.recover == "healthy"), (v, a.recover)
    if relation == "prune":
        reasons = {r["code"] for x in a.prune["refused"] for r in x["reasons"]}
        removed = a.prune["removed"]
        if v in HEALTHY:
            return "unreadable" not in reasons, (v, a.prune)
        return not removed, (v, a.prune)
    if relation == "list_open":
        return not a.list_open.get("error") or v in SHOWS_ERROR | REFUSED, (v, a.list_open)
    if relation == "list":
        error = bool(a.list_cached.get("error"))
        return error == (v in SHOWS_ERROR) or (error and v in REFUSED), (v, a.list_cached)
    if relation == "show_quick":
        if a.quick_verdict in REFUSED:  # refused like events: exit 1, one line
            return a.show_open[0] == 1, (a.quick_verdict, a.show_open)
        return _show_error(a.show_open) == (a.quick_verdict in SHOWS_ERROR), (
            a.quick_verdict,
            a.show_open[0],
            a.show_open[1][:300],
        )
    if relation == "show":
        if v in REFUSED:
            return a.show_cached[0] == 1, (v, a.show_cached)
        return _show_error(a.show_cached) == (v in SHOWS_ERROR), (
            v,
            a.show_cached[0],
            a.show_cached[1][:300],
        )
    if relation == "events":
        code, lines = a.events
        seqs = [e["sequence"] for e in lines]
        in_order = seqs == sorted(set(seqs))
        printed = len(lines) >= a.readable_events  # at least what SQLite itself reads
        if v in REFUSED:
            return code == 1 and not lines, (v, code, len(lines))
        return (code == 1) == (v in EVENTS_FAIL) and in_order and printed, (
            v,
            code,
            len(lines),
            a.readable_events,
        )
    if relation == "backup":
        return (a.backup == "corrupt") == (v == "corrupt"), (v, a.backup)
    if relation == "migrate":
        refused = (a.migrate == "corrupt") == (v in EVENTS_FAIL)
        return refused and (a.migrate != "migrated" or v == "needs_migration"), (v, a.migrate)
    raise AssertionError(relation)


# The files the quick tier (-m "not slow") asks every command about; the full run asks about all.
QUICK = {(c, 2) for c in ("healthy", "flipped_bytes", "hot_journal", "too_new", "misnamed")} | {
    ("wal_torn_tail", 2)
}


def _cells() -> list[Any]:
    out = []
    runs = [(case, rev) for case in CASES for rev in (1, 2)] + [(c, 2) for c in WAL_CASES]
    for case, rev in runs:
        for rel in RELATIONS:
            marks = [] if (case, rev) in QUICK else [pytest.mark.slow]
            why = XFAIL.get((case, rev, rel))
            if why is not None:
                marks.append(pytest.mark.xfail(reason=why, strict=True))
            out.append(pytest.param(case, rev, rel, marks=marks, id=f"{case}-rev{rev}-{rel}"))
    return out


@pytest.mark.parametrize(("case", "revision", "relation"), _cells())
def test_commands_agree(
    case: str,
    revision: int,
    relation: str,
    answers: Callable[[str, int], Answers],
) -> None:
    a = answers(case, revision)
    ok, detail = _holds(relation, a)
    assert ok, detail
    assert a.unchanged, "a read-only command or a --dry-run changed the sessions directory"
