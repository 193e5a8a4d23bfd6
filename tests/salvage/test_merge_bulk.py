"""The merge takes a page-engine tier into the scratch database in one statement per table
(``_Merger.take_tier_all``), and ``.recover``'s events with what it needs to judge them in one
pass (``_Merger.shell_events``); it must keep exactly what taking the same rows one by one
through ``put()`` with a lookup per row keeps: the same rows, sources, losses, unverified keys
and notes, on real damaged files of both revisions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentdb import salvage
from agentdb.salvage import merge
from agentdb.salvage.diskrows import DiskMap
from tests.rows import all_rows
from tests.salvage import corpus

pytestmark = pytest.mark.slow


def _row_by_row(self: Any, table: str, tier: int, name: str, dst: DiskMap) -> None:
    self.take_tier_rows(table, tier, name)


def _looked_up(self: Any, shell: Any) -> Any:
    return merge._plain(shell.rows["events"])


def _recover(base: Path, sid: str, case: corpus.Case, root: Path) -> tuple[Any, Any]:
    sessions = root / "sessions"
    sessions.mkdir(parents=True)
    dst = sessions / base.name
    shutil.copyfile(base, dst)
    case.damage(dst)
    out = salvage.recover_session(sessions, sid, recovery_log=root / "recovery.log")
    doc = json.loads(json.dumps(out.to_json()).replace(str(root), "ROOT"))
    doc.pop("seconds")
    for k in ("path", "corrupt_path"):
        doc.pop(k, None)
    rows = all_rows(dst) if out.outcome == "recovered" else None
    return doc, rows


@pytest.mark.parametrize("revision", [2, 1])
def test_bulk_tier_keeps_what_row_by_row_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, revision: int, capable_shell: Path
) -> None:
    sid, base = corpus.build_base(tmp_path / "base", revision=revision)
    taken = shell = 0
    for case in corpus.CASES:
        if case.wal:
            continue
        bulk = _recover(base, sid, case, tmp_path / "bulk" / case.name)
        with monkeypatch.context() as m:
            m.setattr(merge._Merger, "take_tier_all", _row_by_row)
            m.setattr(merge._Merger, "shell_events", _looked_up)
            one = _recover(base, sid, case, tmp_path / "rows" / case.name)
        assert bulk == one, case.name
        tables = bulk[0].get("tables", {})
        taken += sum(
            n
            for t in tables.values()
            for src, n in t.get("sources", {}).items()
            if src in ("live", "stray", "stale")
        )
        shell += "sqlite-recover" in bulk[0].get("found_by", {})
    assert taken > 0  # the page engine's tiers supplied rows: the bulk path ran
    assert shell > 0  # .recover ran on at least one case: its events were judged in one pass
