"""The index answers exactly what a scan answers, on generated trees changed between queries.

Seeded random sequences of real changes — a real writer's events and status changes, a writer
left open (its commits only in the -wal), recoveries of damaged files, migrations, prunes, a
file replaced by another inode with the same size and mtime, a same-size in-place change with
the mtime put back, hostile entries, the index deleted or overwritten with garbage, a second
sessions directory sharing the index — with every cross-session answer compared after each
step: ``sessions list`` (with and without filters), ``sessions tree``, ``plugins refs``, cost
totals, the plugin-users query, ``status``, ``report`` and prune plans (dry runs).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentdb import index, paths, prune, salvage
from agentdb.index import verdicts
from agentdb.jobs import demo, migrate
from agentdb.store import Event, Producer, SessionWriter, Usage
from agentdb.views import queries, report, status
from tests.salvage.corpus import d_flipped_bytes
from tests.support import make_session

MODELS = [demo.MODEL_OLD, demo.MODEL_CACHED, Producer("model", "openai", "2.0.0")]
NOW = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
SETTLE = verdicts.FINE_GRANULARITY_NS / 1e9 * 1.5


def answers(d: Path, pc: Path, use_index: bool) -> dict[str, Any]:
    q = queries.ListQuery()
    out: dict[str, Any] = {}
    out["list"] = queries.list_sessions(d, q, use_index=use_index).rows
    out["list_filtered"] = queries.list_sessions(
        d,
        queries.ListQuery(statuses=("completed", "running"), sort="cost", limit=5),
        use_index=use_index,
    ).rows
    out["tree"] = queries.session_tree(d, use_index=use_index)[0]
    out["refs"] = queries.refs(d, pc, use_index=use_index)[0]
    costs = queries.cost_totals(d, use_index=use_index)
    costs.notes = []
    out["costs"] = costs
    users = queries.plugin_users(d, "model/anthropic", use_index=use_index)
    users.notes = []
    out["users"] = users
    out["status"] = status.status(d, pc, now=NOW, use_index=use_index)
    out["report"] = report.collect(d, pc, now=NOW, use_index=use_index)
    for name, sel in PRUNES.items():
        plan = prune.plan(d, pc, sel, now=NOW, use_index=use_index)
        out[name] = (prune.dry_run(plan).to_json(), plan.notes, plan.parents)
    return out


# prune plans (dry runs): every session selected, and whole subtrees by status and profile
PRUNES = {
    "prune_keep_last": prune.Selectors(older_than=dt.timedelta(0), keep_last=3),
    "prune_subtrees": prune.Selectors(
        statuses=("cancelled", "failed", "completed"), profile="review", with_descendants=True
    ),
}


def _same(d: Path, pc: Path, step: str) -> int:
    """Compare index and scan answers; returns how many files the index read again."""
    scan = answers(d, pc, False)
    snap = index.snapshot(d)
    assert not snap.notes, (step, snap.notes)
    got = answers(d, pc, True)
    for key in scan:
        assert got[key] == scan[key], f"after {step}: {key} differs"
    return snap.reread


def _sessions(d: Path) -> list[str]:
    return [e.session_id for e in paths.iter_session_entries(d)]


def _writable(d: Path) -> list[str]:
    """Regular session files this test made and can still write to."""
    out = []
    for sid in _sessions(d):
        p = paths.session_path(d, sid)
        if p.is_file() and not p.is_symlink() and sid not in BROKEN:
            out.append(sid)
    return out


BROKEN: set[str] = set()


def _emit(d: Path, sid: str, rng: random.Random, keep_open: bool) -> SessionWriter | None:
    try:
        w = SessionWriter.open(d, sid)
    except Exception:
        return None
    try:
        if w.info().status != "running":
            w.set_status("running")
        model = rng.choice(MODELS)
        for _ in range(rng.randint(1, 3)):
            w.emit(
                Event(
                    "message",
                    model,
                    b'{"role":"assistant"}',
                    usage=Usage(model.name, "m-" + model.version, 10, 5, rng.random() / 100),
                )
            )
        if rng.random() < 0.5:
            w.set_status(rng.choice(["completed", "cancelled", "failed"]))
    except Exception:
        w.close()
        return None
    if keep_open:
        return w
    w.close()
    return None


def _same_size_change(p: Path, rng: random.Random) -> None:
    """Change a byte inside session_meta's profile in place, then put the mtime back."""
    st = os.stat(p)
    conn = apsw.Connection(str(p))
    try:
        prof = conn.execute("SELECT profile FROM session_meta").fetchall()[0][0]
        new = "".join(rng.choice("abcdefgh") for _ in prof) if prof else "x"
        if new == prof:
            new = new[:-1] + ("z" if new[-1:] != "z" else "y")
        conn.execute("UPDATE session_meta SET profile = ?", (new,))
    finally:
        conn.close()
    if os.stat(p).st_size == st.st_size:
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


def _replace_same_size_mtime(p: Path, tmp: Path, rng: random.Random) -> None:
    """Another inode with the same size and mtime, and another profile."""
    st = os.stat(p)
    copy = tmp / "replacement.sqlite"
    shutil.copyfile(p, copy)
    _same_size_change(copy, rng)
    os.chmod(copy, 0o600)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(copy, p)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_index_answers_equal_scan_answers(
    seed: int, sessions_dir: Path, plugin_cache: Path, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    d = sessions_dir
    (plugin_cache / "model" / "anthropic" / "1.4.0").mkdir(parents=True)
    (plugin_cache / "tool" / "shell" / "2.0.0").mkdir(parents=True)
    BROKEN.clear()
    for _ in range(6):
        ids = _sessions(d)
        parent = rng.choice(ids) if ids and rng.random() < 0.5 else None
        depth = 0
        if parent:
            with index.record.SessionReader.open(d, parent) as r:
                depth = r.info().depth + 1
        make_session(
            d,
            turns=rng.randint(1, 3),
            parent=parent,
            depth=depth,
            model=rng.choice(MODELS),
            profile=rng.choice(["coder", "review"]),
            status=rng.choice(["completed", "running"]),
        )
    time.sleep(SETTLE)
    _same(d, plugin_cache, "build")
    open_writer: SessionWriter | None = None
    trusted = 0
    ops = [
        "emit",
        "live",
        "new",
        "recover",
        "migrate",
        "prune",
        "replace",
        "tick",
        "unlink",
        "hostile",
        "index_delete",
        "index_garbage",
        "other_dir",
        "nothing",
    ]
    for step in range(26):
        op = ops[step % len(ops)] if step < len(ops) else rng.choice(ops)
        if open_writer is not None and op != "live":
            open_writer.close()
            open_writer = None
        ids = _writable(d)
        if op == "emit" and ids:
            _emit(d, rng.choice(ids), rng, keep_open=False)
        elif op == "live" and ids and open_writer is None:
            open_writer = _emit(d, rng.choice(ids), rng, keep_open=True)
        elif op == "new":
            make_session(d, turns=1, model=rng.choice(MODELS), status="completed")
        elif op == "recover":
            sid, p = make_session(d, turns=12, status="completed")
            d_flipped_bytes(p)
            time.sleep(SETTLE)
            _same(d, plugin_cache, "damage")
            salvage.recover_session(d, sid)
        elif op == "migrate":
            sid, p = make_session(d, turns=1, revision=1, status="completed")
            time.sleep(SETTLE)
            _same(d, plugin_cache, "revision-1 file")
            migrate.migrate_one(migrate.probe(sid, p))
        elif op == "prune" and ids:
            plan = prune.plan(d, plugin_cache, prune.Selectors(ids=(rng.choice(ids),)))
            prune.execute(plan)
        elif op == "replace" and ids:
            time.sleep(SETTLE)
            _same(d, plugin_cache, "before replace")
            _replace_same_size_mtime(paths.session_path(d, rng.choice(ids)), tmp_path, rng)
        elif op == "tick" and ids:
            sid = rng.choice(ids)
            p = paths.session_path(d, sid)
            _same_size_change(p, rng)  # written just now: the next query stores a racy row
            index.snapshot(d)
            _same_size_change(p, rng)  # same size, mtime put back, likely the same tick
        elif op == "unlink" and ids:
            sid = rng.choice(ids)
            for suffix in ("", "-wal", "-shm"):
                q = Path(str(paths.session_path(d, sid)) + suffix)
                if q.exists():
                    q.unlink()
        elif op == "hostile":
            bad = "01HZZZZZZZZZZZZZZZZZZZZZZ" + rng.choice("ABC")
            p = paths.session_path(d, bad)
            if not os.path.lexists(p):
                if rng.random() < 0.5:
                    p.mkdir()
                else:
                    p.write_bytes(b"not sqlite" * 50)
                BROKEN.add(bad)
        elif op == "index_delete":
            for suffix in ("", "-wal", "-shm"):
                q = Path(str(verdicts.cache_path()) + suffix)
                if q.exists():
                    q.unlink()
        elif op == "index_garbage":
            verdicts.cache_path().write_bytes(b"garbage" * 1000)
        elif op == "other_dir":
            other = tmp_path / "other"
            other.mkdir(exist_ok=True)
            make_session(other, turns=1, profile="elsewhere")
            time.sleep(SETTLE)
            _same(other, plugin_cache, "other dir")
        if rng.random() < 0.6:
            time.sleep(SETTLE)
        reread = _same(d, plugin_cache, f"step {step} {op}")
        trusted += len(_sessions(d)) - reread
    if open_writer is not None:
        open_writer.close()
    assert trusted > 0  # the index was believed, not just rebuilt every time


def test_warm_query_reads_no_file(sessions_dir: Path) -> None:
    for _ in range(3):
        make_session(sessions_dir, turns=1)
    time.sleep(SETTLE)
    first = index.snapshot(sessions_dir)
    assert first.reread == 3 and first.used_index
    again = index.snapshot(sessions_dir)
    assert again.reread == 0
    assert [r.list_row() for r in again.records] == [r.list_row() for r in first.records]


@pytest.mark.slow
def test_a_racy_row_is_read_again(sessions_dir: Path) -> None:
    sid, p = make_session(sessions_dir, turns=1)
    index.snapshot(sessions_dir)  # the file was written within the granularity: racy
    assert index.snapshot(sessions_dir).reread == 1
    time.sleep(SETTLE)
    index.snapshot(sessions_dir)
    assert index.snapshot(sessions_dir).reread == 0


@pytest.mark.slow
def test_a_parallel_first_build_equals_the_scan(
    sessions_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forked readers in small chunks (a damaged and a hostile entry among them): the same
    records, in id order, as one process and as the scan."""
    for i in range(5):
        make_session(sessions_dir, turns=1, profile=f"p{i}")
    (sessions_dir / "01HZZZZZZZZZZZZZZZZZZZZZZA.sqlite").write_bytes(b"not sqlite" * 100)
    (sessions_dir / "01HZZZZZZZZZZZZZZZZZZZZZZB.sqlite").mkdir()
    monkeypatch.setattr("agentdb.index.walk.POOL_THRESHOLD", 1)
    monkeypatch.setattr("agentdb.index.walk.CHUNK", 2)
    snap = index.snapshot(sessions_dir, jobs=2)
    assert snap.reread == 7
    from agentdb.views import sessions

    assert [r.list_row() for r in snap.records] == list(sessions.scan(sessions_dir))


@pytest.mark.slow
def test_a_streamed_parallel_build_in_windows_equals_the_scan(
    sessions_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream reads a first build a window at a time with forked readers and writes the
    rows in batches inside one transaction: the same rows, in id order, as the scan, and the
    next query reads no file."""
    from agentdb.index import store, streaming
    from agentdb.views import sessions

    for i in range(7):
        make_session(sessions_dir, turns=1, profile=f"p{i}")
    (sessions_dir / "01HZZZZZZZZZZZZZZZZZZZZZZA.sqlite").write_bytes(b"not sqlite" * 100)
    (sessions_dir / "01HZZZZZZZZZZZZZZZZZZZZZZB.sqlite").mkdir()
    monkeypatch.setattr(streaming, "POOL_THRESHOLD", 1)
    monkeypatch.setattr(streaming, "CHUNK", 2)
    monkeypatch.setattr(streaming, "WINDOW", 3)
    monkeypatch.setattr(store, "BATCH", 2)
    time.sleep(SETTLE)
    st = index.stream(sessions_dir, jobs=2)
    assert [r.list_row() for r in st.records] == list(sessions.scan(sessions_dir))
    assert st.reread == 9 and st.used_index and not st.notes
    again = index.stream(sessions_dir, jobs=2)
    assert [r.list_row() for r in again.records] == list(sessions.scan(sessions_dir))
    assert again.reread == 1  # the directory named like a session is never stored
