"""No dead ends: following the fix ``check`` prints reaches a final state in at most three steps,
no fix names a command that refuses the file, and every other command that refuses a file
names the same fix (issue 28; the graph is :mod:`agentdb.checks.policy`'s).

Files of every kind the generators make — healthy at each revision, each damage kind of the
salvage corpus, seeded random damage, foreign, another session's file under this name,
insecure, a link, a directory, a FIFO, triggers and views, too new, inconsistent, not SQLite,
empty, interrupted, hard-linked, a FIFO where the recovery log goes — are walked:
``check --json ID`` gives the verdict and the fix; the fix is run exactly as printed
(``prune`` answered with ``--yes``, standing in for the operator's "y"); it must not refuse;
then ``check`` again. A state is final when the verdict is ok, the entry is gone from the
sessions directory (removed or set aside), or the step was a final decision with nothing to
run (too new: upgrade agentdb).
"""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
import ulid

from agentdb import paths
from agentdb.index import verdicts
from agentdb.store import SessionWriter
from tests import rows
from tests.runner import global_options, invoke
from tests.salvage import corpus
from tests.support import held_open, make_session

MAX_STEPS = 3
Make = Callable[[Path, random.Random], str]


def _sql(p: Path, sql: str) -> None:
    c = apsw.Connection(str(p))
    try:
        for _ in c.execute(sql):
            pass
    finally:
        c.close()


def _healthy(rev: int) -> Make:
    def make(d: Path, rng: random.Random) -> str:
        return make_session(d, revision=rev, turns=rng.randint(1, 4))[0]

    return make


def _damaged(damage: Callable[[Path], None], rev: int = 3) -> Make:
    def make(d: Path, rng: random.Random) -> str:
        sid, p = corpus.build_base(d, revision=rev, turns=6)
        damage(p)
        return sid

    return make


def _random_flips(d: Path, rng: random.Random) -> str:
    sid, p = make_session(d, revision=rng.choice([1, 2, 3]), turns=4)
    size = p.stat().st_size
    for _ in range(rng.randint(1, 6)):
        rows.flip(p, rng.randrange(100, size - 4), rng.randint(1, 4))
    return sid


def _zero_random_page(d: Path, rng: random.Random) -> str:
    sid, p = make_session(d, revision=rng.choice([1, 3]), turns=4)
    pages = p.stat().st_size // rows.page_size(p)
    rows.zero_page(p, rng.randint(2, pages))
    return sid


def _pragma(sql: str, rev: int = 1) -> Make:
    def make(d: Path, rng: random.Random) -> str:
        sid, p = make_session(d, revision=rev, turns=2)
        _sql(p, sql)
        return sid

    return make


def _insecure(d: Path, rng: random.Random) -> str:
    sid, p = make_session(d, turns=2)
    os.chmod(p, 0o666)
    return sid


def _symlink(d: Path, rng: random.Random) -> str:
    sid, p = make_session(d, turns=2)
    elsewhere = d.parent / f"elsewhere-{sid}.sqlite"
    os.replace(p, elsewhere)
    os.symlink(elsewhere, p)
    return sid


def _directory(d: Path, rng: random.Random) -> str:
    sid = str(ulid.ULID())
    (d / f"{sid}.sqlite").mkdir()
    return sid


def _fifo(d: Path, rng: random.Random) -> str:
    sid = str(ulid.ULID())
    os.mkfifo(d / f"{sid}.sqlite", 0o600)
    return sid


def _bytes(data: Callable[[random.Random], bytes]) -> Make:
    def make(d: Path, rng: random.Random) -> str:
        sid = str(ulid.ULID())
        p = d / f"{sid}.sqlite"
        p.write_bytes(data(rng))
        os.chmod(p, 0o600)
        return sid

    return make


def _another_sessions_file(d: Path, rng: random.Random) -> str:
    """Another session's whole file under this name (copied or renamed by hand)."""
    _, p = make_session(d, turns=2)
    sid = str(ulid.ULID())
    os.replace(p, d / f"{sid}.sqlite")
    return sid


def _interrupted(d: Path, rng: random.Random) -> str:
    return make_session(d, turns=2, status=None)[0]


def _ended_at_without_end(d: Path, rng: random.Random) -> str:
    sid, p = make_session(d, revision=1, turns=2, status=None)
    _sql(p, "UPDATE session_meta SET ended_at = '2026-01-01T00:00:00Z'")
    return sid


def _bad_kind(d: Path, rng: random.Random) -> str:
    sid, p = make_session(d, revision=1, turns=2)
    _sql(p, "UPDATE events SET kind = 'telepathy' WHERE sequence = 2")
    return sid


def _interrupted_bad_kind(d: Path, rng: random.Random) -> str:
    """Status running, no process has it open, and a row outside the spec's enums: prune
    refuses a running session, so check's step must end it first."""
    sid, p = make_session(d, revision=1, turns=2, status=None)
    _sql(p, "UPDATE events SET kind = 'telepathy' WHERE sequence = 2")
    return sid


def _log_not_a_file(make: Make) -> Make:
    """``make``'s file, and a FIFO where the recovery log goes: every job that writes the log
    (recover, prune, sessions end, restore) refuses until it is moved away."""

    def with_fifo(d: Path, rng: random.Random) -> str:
        sid = make(d, rng)
        os.mkfifo(paths.recovery_log_path(d), 0o600)
        return sid

    return with_fifo


def _foreign_with_wal(d: Path, rng: random.Random) -> str:
    """Another session's file under this name, its last commits only in its WAL."""
    sid = str(ulid.ULID())
    other = d.parent / "elsewhere"
    (other / "live").mkdir(parents=True)
    _, p = corpus.build_wal(other / "live", other)
    for s in ("", "-wal"):
        os.replace(f"{p}{s}", d / f"{sid}.sqlite{s}")
    return sid


def _interrupted_zeroed_page(d: Path, rng: random.Random) -> str:
    sid, p = make_session(d, turns=12, status=None)
    leaves = corpus.pages_of(p, "events", "leaf")
    rows.zero_page(p, leaves[len(leaves) // 2])
    return sid


def _hard_linked(make: Make) -> Make:
    """``make``'s file with a second name outside the directory (``cp -al`` backups): jobs
    that rewrite a file in place (migrate, sessions end) refuse it."""

    def linked(d: Path, rng: random.Random) -> str:
        sid = make(d, rng)
        os.link(d / f"{sid}.sqlite", d.parent / f"hard-link-{sid}")
        return sid

    return linked


def _after_a_recovery_that_salvaged_nothing(d: Path, rng: random.Random) -> str:
    sid = _bytes(lambda rng: rng.randbytes(20_480))(d, rng)
    ran = invoke([*global_options(d), "recover", sid])
    assert "nothing could be salvaged" in ran.err + ran.out, ran
    return sid


def _empty_database(d: Path, rng: random.Random) -> str:
    sid = str(ulid.ULID())
    p = d / f"{sid}.sqlite"
    _sql(p, "PRAGMA user_version = 1; PRAGMA journal_mode = WAL")
    os.chmod(p, 0o600)
    return sid


KINDS: dict[str, Make] = {
    "healthy_rev1": _healthy(1),
    "healthy_rev2": _healthy(2),
    "healthy_rev3": _healthy(3),
    "interrupted": _interrupted,
    "zeroed_page": _damaged(corpus.d_zeroed_page),
    "flipped_bytes": _damaged(corpus.d_flipped_bytes),
    "truncated_inside": _damaged(corpus.d_truncated_inside),
    "damaged_header": _damaged(corpus.d_damaged_header),
    "damaged_schema": _damaged(corpus.d_damaged_schema),
    "interior_page": _damaged(corpus.d_interior_page),
    "index_only_rev1": _damaged(corpus.d_index_only, rev=1),
    "broken_overflow_rev2": _damaged(corpus.d_broken_overflow, rev=2),
    "random_flips": _random_flips,
    "random_zero_page": _zero_random_page,
    "foreign_application": _pragma("PRAGMA application_id = 12345", rev=3),
    "another_sessions_file": _another_sessions_file,
    "another_sessions_file_with_wal": _foreign_with_wal,
    "recovery_log_fifo_zeroed_page": _log_not_a_file(_damaged(corpus.d_zeroed_page)),
    "recovery_log_fifo_bad_status": _log_not_a_file(
        _pragma("UPDATE session_meta SET status = 'zombie'")
    ),
    "recovery_log_fifo_bad_kind": _log_not_a_file(_bad_kind),
    "recovery_log_fifo_empty_file": _log_not_a_file(_bytes(lambda rng: b"")),
    "insecure_mode": _insecure,
    "symlink": _symlink,
    "directory": _directory,
    "fifo": _fifo,
    "view": _pragma("CREATE VIEW v AS SELECT 1"),
    "trigger": _pragma("CREATE TRIGGER t AFTER INSERT ON events BEGIN SELECT 1; END"),
    "too_new": _pragma("PRAGMA user_version = 9"),
    "too_new_with_view": _pragma("CREATE VIEW v AS SELECT 1; PRAGMA user_version = 9"),
    "bad_status": _pragma("UPDATE session_meta SET status = 'zombie'"),
    "ended_at_without_end": _ended_at_without_end,
    "bad_kind": _bad_kind,
    "interrupted_bad_kind": _interrupted_bad_kind,
    "hard_linked_rev1": _hard_linked(_healthy(1)),
    "hard_linked_bad_status": _hard_linked(_pragma("UPDATE session_meta SET status = 'zombie'")),
    "hard_linked_zeroed_page": _hard_linked(_damaged(corpus.d_zeroed_page)),
    "interrupted_zeroed_page": _interrupted_zeroed_page,
    "not_sqlite": _bytes(lambda rng: rng.randbytes(20_480)),
    "empty_file": _bytes(lambda rng: b""),
    "not_sqlite_recovered_nothing": _after_a_recovery_that_salvaged_nothing,
    "empty_database": _empty_database,
}


def _check(g: list[str], sid: str) -> dict:  # type: ignore[type-arg]
    ran = invoke([*g, "check", "--json", sid])
    assert ran.code in (0, 1), ran.err
    (entry,) = ran.json()["sessions"]
    return entry  # type: ignore[no-any-return]


def _run_fix(g: list[str], command: str, cwd: Path) -> tuple[int, str]:
    argv = shlex.split(command)
    if argv[0] == "agentdb":
        rest = argv[1:]
        if rest[0] == "prune":
            rest.append("--yes")
        ran = invoke([*g, *rest])
        return ran.code, ran.err + ran.out
    if "&&" in argv:  # `mv A B && mv A-wal B-wal`: each in turn, as a shell runs them
        i = argv.index("&&")
        code, said = _run_fix(g, shlex.join(argv[:i]), cwd)
        return (code, said) if code else _run_fix(g, shlex.join(argv[i + 1 :]), cwd)
    assert argv[0] in ("mv", "chmod", "cp"), f"a fix runs agentdb, mv, cp or chmod: {command!r}"
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    return done.returncode, done.stderr


def walk(
    sessions_dir: Path, sid: str, plugin_cache: Path | None = None
) -> list[tuple[str, str | None]]:
    """(verdict, fix command) at each step until a final state; fails on a dead end."""
    g = global_options(sessions_dir, plugin_cache)
    path = sessions_dir / f"{sid}.sqlite"
    seen: list[tuple[str, str | None]] = []
    for _ in range(MAX_STEPS + 1):
        entry = _check(g, sid)
        fix = entry.get("fix")
        seen.append((entry["verdict"], fix and fix["command"]))
        if entry["verdict"] == "ok":
            return seen
        assert fix is not None, f"{entry['verdict']} with no next step: {seen}"
        if fix["command"] is None:
            assert fix["final"], f"a step with nothing to run must be final: {fix}"
            return seen
        assert len(seen) <= MAX_STEPS, f"no final state within {MAX_STEPS} steps: {seen}"
        code, said = _run_fix(g, fix["command"], sessions_dir)
        # A recovery is an attempt (the spec's "not a guarantee"): one that salvaged nothing
        # is recorded in the recovery log, and check's next step changes with it.
        tried = fix["command"].startswith("agentdb recover") and "nothing could be salvaged" in said
        assert code == 0 or tried, f"the fix {fix['command']!r} refused or failed ({code}): {said}"
        if not os.path.lexists(path):
            return seen  # removed or set aside: no longer a session
        if fix["final"]:
            pytest.fail(f"a final step left the session in place: {seen}")
    pytest.fail(f"no final state within {MAX_STEPS} steps: {seen}")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_following_the_printed_fix_reaches_a_final_state(kind: str, sessions_dir: Path) -> None:
    rng = random.Random(f"dead-ends-{kind}")
    sid = KINDS[kind](sessions_dir, rng)
    steps = walk(sessions_dir, sid)
    assert steps, kind


@pytest.mark.parametrize("seed", range(6))
def test_seeded_random_damage_never_dead_ends(seed: int, sessions_dir: Path) -> None:
    rng = random.Random(seed)
    kind = rng.choice(["random_flips", "random_zero_page"])
    sid = KINDS[kind](sessions_dir, rng)
    walk(sessions_dir, sid)


def test_recovery_that_salvaged_nothing_then_points_at_a_final_decision(
    sessions_dir: Path,
) -> None:
    """The not-SQLite file: recover salvages nothing, then the fix is a final decision."""
    sid = KINDS["not_sqlite"](sessions_dir, random.Random(7))
    steps = walk(sessions_dir, sid)
    assert steps[0] == ("unreadable", f"agentdb recover {sid}")
    assert steps[1][1] == f"agentdb prune {sid} --include-damaged"
    assert not (sessions_dir / f"{sid}.sqlite").exists()


# ------------------------------------------------------------------ every command agrees

_COMMANDS = (
    ("check", "{sid}"),  # its table's "first finding" names the same step as --json
    ("events", "{sid}"),
    ("sessions", "show", "{sid}"),
    ("preflight", "{sid}"),
    ("migrate", "{sid}", "--dry-run"),
    ("recover", "{sid}", "--dry-run"),
    ("sessions", "end", "{sid}", "--status", "failed"),
    ("backup", "{sid}", "--to", "{backups}"),
    ("restore", "{sid}", "--from", "{backups}", "--dry-run"),
    ("prune", "{sid}", "--dry-run"),
)
_BACKTICKED = re.compile(r"`([^`]+)`")


def _printed_fixes(text: str, sid: str) -> set[str]:
    """Commands a message tells the operator to run about this session (pointers to
    ``agentdb check`` and to commands with placeholders are not fixes)."""
    out = set()
    for cmd in _BACKTICKED.findall(text):
        if sid not in cmd or cmd.startswith("agentdb check") or "DIR" in cmd:
            continue
        out.add(cmd)
    return out


@pytest.mark.parametrize(
    "kind",
    [
        "bad_status",
        "bad_kind",
        "not_sqlite",
        "too_new_with_view",
        "view",
        "foreign_application",
        "zeroed_page",
        "insecure_mode",
        "empty_database",
        "healthy_rev1",
        "empty_file",
        "interrupted_bad_kind",
        "recovery_log_fifo_zeroed_page",
        "recovery_log_fifo_bad_kind",
        "hard_linked_rev1",
        "hard_linked_bad_status",
        "not_sqlite_recovered_nothing",
    ],
)
def test_every_command_names_checks_fix(kind: str, sessions_dir: Path, tmp_path: Path) -> None:
    sid = KINDS[kind](sessions_dir, random.Random(kind))
    g = global_options(sessions_dir)
    entry = _check(g, sid)
    fix = entry.get("fix")
    expected = {fix["command"]} if fix and fix["command"] else set()
    for argv in _COMMANDS:
        args = [a.format(sid=sid, backups=tmp_path / "backups") for a in argv]
        ran = invoke([*g, *args])
        named = _printed_fixes(ran.err + ran.out, sid)
        assert named <= expected, f"`agentdb {' '.join(args)}` names {named}, check {expected}"
    shutil.rmtree(tmp_path / "backups", ignore_errors=True)


def test_writer_refuses_nothing_the_walk_reaches(sessions_dir: Path) -> None:
    """After ``sessions end`` repaired a status outside the spec's seven, the kernel's writer
    opens the session again."""
    sid = KINDS["bad_status"](sessions_dir, random.Random(1))
    walk(sessions_dir, sid)
    w = SessionWriter.open(sessions_dir, sid)
    w.close()


def test_status_never_sends_an_inconsistent_session_to_recover(sessions_dir: Path) -> None:
    """The dead end of issue 28: status said "damaged: agentdb recover --all --dry-run" for a
    session recover refuses."""
    sid = KINDS["bad_status"](sessions_dir, random.Random(2))
    g = global_options(sessions_dir)
    assert _check(g, sid)["verdict"] == "inconsistent"
    doc = invoke([*g, "status", "--json"]).json()
    commands = [n["command"] for n in doc["next"]]
    assert commands, doc
    assert not [c for c in commands if "recover" in c], commands


def test_setting_aside_takes_the_wal_along_and_never_replaces_an_earlier_one(
    sessions_dir: Path,
) -> None:
    """A file set aside keeps its last commits (its WAL goes with it, not left to be replayed
    into the next file of that name), and a second file set aside under the same name never
    replaces the first."""
    sid = KINDS["another_sessions_file_with_wal"](sessions_dir, random.Random(3))
    path = sessions_dir / f"{sid}.sqlite"
    held = rows.row_sets(path)
    assert os.path.getsize(f"{path}-wal") > 0  # its last commits are only there
    walk(sessions_dir, sid)
    first = sessions_dir / f"{sid}.sqlite.aside"
    assert not [p.name for p in sessions_dir.iterdir() if p.name.startswith(path.name + "-")]
    assert rows.row_sets(first) == held
    _, q = make_session(sessions_dir, turns=1)
    _sql(q, "PRAGMA application_id = 12345")
    os.replace(q, path)
    walk(sessions_dir, sid)
    assert rows.row_sets(first) == held
    assert (sessions_dir / f"{sid}.sqlite.aside.1").exists()


@pytest.mark.parametrize(
    "kind",
    [
        "bad_kind",
        "index_only_rev1",
        "interrupted_bad_kind",
        "interrupted_zeroed_page",
        "hard_linked_rev1",
    ],
)
def test_status_names_no_job_that_refuses_a_checked_session(kind: str, sessions_dir: Path) -> None:
    """A session whose recorded verdict is damaged or inconsistent is listed with its own step:
    status named `migrate --all` for it (an older revision) and `sessions end` (interrupted),
    and both refuse it; so does migrate a hard-linked file."""
    sid = KINDS[kind](sessions_dir, random.Random(kind))
    g = global_options(sessions_dir)
    time.sleep(verdicts.FINE_GRANULARITY_NS / 1e9 * 2)  # settled: status believes the verdict
    verdict = _check(g, sid)["verdict"]
    assert verdict != "ok", verdict
    doc = invoke([*g, "status", "--json"]).json()
    assert doc["summary"]["checked"] == 1, doc["summary"]
    for n in doc["next"]:
        argv = shlex.split(n["command"])[1:]
        ran = invoke([*g, *argv, *([] if "--dry-run" in argv else ["--dry-run"])])
        refused = argv[0] in ("migrate", "sessions") and ran.code != 0
        assert not refused, f"status names `{n['command']}`, which refuses {verdict}: {ran.out}"


# ------------------------------------------------------------------ what the policy cannot see
# fix_for(result) knows the file; prune also refuses a session by what is around it (a plugin
# version it pins, a child that names it) and every job refuses a file another process holds.


def _cache_producers_of(sessions_dir: Path, sid: str, plugin_cache: Path) -> None:
    c = apsw.Connection(str(sessions_dir / f"{sid}.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        for cat, name, version in c.execute("SELECT category, name, version FROM producers"):
            if cat != "kernel":
                (plugin_cache / cat / name / version).mkdir(parents=True, exist_ok=True)
    finally:
        c.close()


@pytest.mark.xfail(
    strict=True,
    reason="check's final step `prune ID --include-damaged` is refused as pinned when the "
    "plugin cache holds a version the session used (prune wants --include-pinned); fix_for "
    "does not see the plugin cache",
)
def test_a_pinned_inconsistent_session_is_not_a_dead_end(
    sessions_dir: Path, plugin_cache: Path
) -> None:
    sid = KINDS["bad_kind"](sessions_dir, random.Random(4))
    _cache_producers_of(sessions_dir, sid, plugin_cache)
    walk(sessions_dir, sid, plugin_cache)


@pytest.mark.xfail(
    strict=True,
    reason="check's final step `prune ID --include-damaged` is refused as has_children when "
    "another session names it as parent (only --with-descendants, which removes the healthy "
    "children too, gets past it); fix_for does not see the tree",
)
def test_an_unsalvageable_parent_is_not_a_dead_end(sessions_dir: Path) -> None:
    sid = KINDS["empty_file"](sessions_dir, random.Random(5))
    make_session(sessions_dir, parent=sid, depth=1, turns=1)
    walk(sessions_dir, sid)


@pytest.mark.xfail(
    strict=True,
    reason="a file another process holds open: check names recover (damaged) or prune "
    "(inconsistent), and both refuse it as live (skipped_live / live); the step is to close "
    "it first, which no printed command does",
)
@pytest.mark.parametrize("kind", ["zeroed_page", "bad_status"])
def test_a_damaged_file_held_open_is_not_a_dead_end(kind: str, sessions_dir: Path) -> None:
    sid = KINDS[kind](sessions_dir, random.Random(kind))
    with held_open(sessions_dir / f"{sid}.sqlite"):
        walk(sessions_dir, sid)


def test_status_does_not_send_back_to_recover_what_recovery_could_not_salvage(
    sessions_dir: Path,
) -> None:
    """After a recovery that salvaged nothing, check's step is a final decision; status said
    `recover --all --dry-run` again for it, for ever."""
    sid = KINDS["not_sqlite_recovered_nothing"](sessions_dir, random.Random(6))
    g = global_options(sessions_dir)
    time.sleep(verdicts.FINE_GRANULARITY_NS / 1e9 * 2)
    assert _check(g, sid)["fix"]["command"] == f"agentdb prune {sid} --include-damaged"
    doc = invoke([*g, "status", "--json"]).json()
    assert doc["summary"]["damaged"] == 1, doc["summary"]
    commands = [n["command"] for n in doc["next"]]
    assert commands and not [c for c in commands if "recover" in c], commands


def test_the_final_step_keeps_an_earlier_recoverys_original(sessions_dir: Path) -> None:
    """A session recovered once (its damaged original kept as .corrupt), whose replacement was
    later overwritten with garbage: the second recovery salvages nothing and check's final step
    was `prune --include-damaged`, which removes the .corrupt original too: the last copy of
    the history (recover can read it again) went with a step that said "nothing in it can be
    salvaged". Now the file is set aside and the original stays."""
    sid = KINDS["zeroed_page"](sessions_dir, random.Random(8))
    g = global_options(sessions_dir)
    assert invoke([*g, "recover", sid]).code == 0
    original = sessions_dir / f"{sid}.sqlite.corrupt"
    kept = original.read_bytes()
    (sessions_dir / f"{sid}.sqlite").write_bytes(random.Random(9).randbytes(20_480))
    steps = walk(sessions_dir, sid)
    assert original.read_bytes() == kept, steps
