"""A realistic sample state, written through the writer API, for ``agentdb demo`` and tests.

Builds, under one root: ``state/agent/sessions/`` with a parent and its children (completed,
with costs and plan decisions), a running session, a revision-1 session, a session that uses a
plugin version present in the plugin cache (``cache/agent/plugins/``), and a damaged session
(one events leaf page zeroed) — the cases every operator command has to handle.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import ulid

from agentdb import db, fsutil
from agentdb.schema.enums import Decision, Status
from agentdb.schema.revisions import CURRENT_REVISION
from agentdb.store import Event, PlanItem, Producer, SessionWriter, Usage

KERNEL = Producer("kernel", "kernel", "0.9.0")
MODEL_OLD = Producer("model", "anthropic", "1.3.0")
MODEL_CACHED = Producer("model", "anthropic", "1.4.0")
SHELL = Producer("tool", "shell", "2.0.0")
CONTEXT = Producer("context", "repo-map", "0.2.1")
CACHED_PLUGINS = (
    (MODEL_CACHED.category, MODEL_CACHED.name, MODEL_CACHED.version),
    (SHELL.category, SHELL.name, "2.1.0"),
)


@dataclass
class DemoSession:
    session_id: str  # the ULID, which encodes when it started
    role: str  # what the session illustrates
    path: Path


@dataclass
class DemoState:
    root: Path
    sessions_dir: Path
    plugin_cache: Path
    sessions: list[DemoSession] = field(default_factory=list)

    def by_role(self, role: str) -> DemoSession:
        return next(s for s in self.sessions if s.role == role)


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _sid(t: dt.datetime) -> str:
    return str(ulid.ULID.from_datetime(t))


def _turns(
    w: SessionWriter,
    model: Producer,
    n: int,
    *,
    seed: int,
    deny_every: int = 3,
    at: dt.datetime | None = None,
) -> None:
    """n model turns, each: context, message (with cost), plan (with items), tool call/result.

    ``at`` backdates the events' wall-clock timestamps (display only) to start there.
    """
    for i in range(n):
        stamp = None if at is None else _iso(at + dt.timedelta(seconds=40 * i))
        turn = f"turn-{seed}-{i}"
        call = f"call-{seed}-{i}"
        decision: Decision = "deny" if i % deny_every == deny_every - 1 else "allow"
        text = json.dumps({"role": "assistant", "content": f"step {i}: " + "lorem ipsum " * 20})
        events = [
            Event(
                "context_contribution",
                CONTEXT,
                json.dumps({"files": i + 3}).encode(),
            ),
            Event(
                "message",
                model,
                text.encode(),
                usage=Usage(
                    model.name,
                    "claude-sonnet",
                    1200 + 37 * i,
                    300 + 11 * i,
                    round(0.0042 + 0.0007 * i, 6),
                    cache_read_tokens=800,
                ),
            ),
            Event(
                "plan",
                KERNEL,
                json.dumps({"turn": turn, "calls": [call]}).encode(),
                plan_items=[
                    PlanItem(
                        turn,
                        call,
                        "shell",
                        "bash",
                        decision,
                        "deny-network" if decision == "deny" else "allow-read-only",
                    )
                ],
            ),
            Event("tool_call", SHELL, json.dumps({"cmd": f"ls -la dir{i}"}).encode()),
            Event("tool_result", SHELL, (f"total {i}\n" + "x" * (40 * i)).encode()),
            Event("apply", KERNEL, json.dumps({"turn": turn, "ok": decision == "allow"}).encode()),
        ]
        w.emit_batch([replace(e, timestamp=stamp) for e in events])


def build(root: Path, *, now: dt.datetime | None = None) -> DemoState:
    """Write the sample state under ``root`` (which must not already hold one)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    fsutil.ensure_dir(root)
    state = DemoState(
        root, root / "state" / "agent" / "sessions", root / "cache" / "agent" / "plugins"
    )
    for cat, name, ver in CACHED_PLUGINS:
        fsutil.ensure_dir(state.plugin_cache / cat / name / ver)

    started: dict[str, dt.datetime] = {}

    def make(
        role: str,
        days_ago: float,
        profile: str,
        *,
        parent: str | None = None,
        depth: int = 0,
        revision: int = CURRENT_REVISION,
    ) -> SessionWriter:
        t = now - dt.timedelta(days=days_ago)
        w = SessionWriter.create(
            state.sessions_dir,
            profile=profile,
            parent_session_id=parent,
            depth=depth,
            session_id=_sid(t),
            started_at=_iso(t),
            revision=revision,
        )
        state.sessions.append(DemoSession(w.session_id, role, w.path))
        started[w.session_id] = t
        return w

    def turns(w: SessionWriter, model: Producer, n: int, seed: int) -> None:
        _turns(w, model, n, seed=seed, at=started[w.session_id] + dt.timedelta(seconds=5))

    def end(w: SessionWriter, status: Status, days_ago: float) -> None:
        w.set_status(status, at=_iso(now - dt.timedelta(days=days_ago)))
        w.close()

    parent = make("parent", 200, "coder")
    turns(parent, MODEL_OLD, 6, 1)
    child_a = make("child", 199.9, "researcher", parent=parent.session_id, depth=1)
    turns(child_a, MODEL_OLD, 3, 2)
    end(child_a, "completed", 199.8)
    child_b = make("child", 199.7, "tester", parent=parent.session_id, depth=1)
    turns(child_b, MODEL_OLD, 2, 3)
    end(child_b, "cancelled", 199.6)
    end(parent, "completed", 199.5)

    old = make("old-revision", 150, "coder", revision=1)
    turns(old, MODEL_OLD, 4, 4)
    end(old, "completed", 149.9)

    failed = make("failed", 120, "coder")
    turns(failed, MODEL_OLD, 2, 5)
    end(failed, "error_max_turns", 119.9)

    pinned = make("pinned", 100, "coder")
    turns(pinned, MODEL_CACHED, 3, 6)
    end(pinned, "completed", 99.9)

    damaged = make("damaged", 30, "coder")
    turns(damaged, MODEL_CACHED, 40, 7)
    end(damaged, "completed", 29.9)
    damage_page(state.by_role("damaged").path, table="events", nth_leaf=1)

    recent = make("recent", 1, "coder")
    turns(recent, MODEL_CACHED, 2, 8)
    end(recent, "completed", 0.9)

    running = make("running", 0.01, "coder")
    turns(running, MODEL_CACHED, 1, 9)
    running.close()  # left "running" with no process: an interrupted session
    return state


def damage_page(path: Path, *, table: str, nth_leaf: int = 0, fill: bytes = b"\x00") -> int:
    """Overwrite one leaf page of ``table``'s b-tree in a closed session file; returns its pgno."""
    conn = db.open_private(path, readonly=True)
    try:
        page_size = db.scalar(conn, "PRAGMA page_size")
        rows = db.rows(
            conn,
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno",
            (table,),
        )
    finally:
        conn.close()
    if not rows:
        raise ValueError(f"{path}: table {table} has no leaf pages")
    pgno = int(rows[min(nth_leaf, len(rows) - 1)][0])
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, (fill * page_size)[:page_size], (pgno - 1) * page_size)
        os.fsync(fd)
    finally:
        os.close(fd)
    return pgno
