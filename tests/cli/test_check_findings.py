"""``check`` shows every finding of a session, most serious first, each with its fix; notes
only with ``-v``; and a ``.corrupt`` original stops saying "history may be incomplete" once the
recovery log shows nothing was lost (a lossless recovery, or a restore from a whole copy)."""

from __future__ import annotations

import os
from pathlib import Path

from agentdb.paths import job_file
from tests.runner import Agentdb
from tests.salvage.corpus import pages_of, zero_page
from tests.support import make_session

INCOMPLETE = "history may be incomplete"


def _rows_of(out: str, sid: str) -> list[str]:
    """The lines of ``sid``'s row block in a (piped, unwrapped) check table."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(sid))
    block = [lines[at]]
    for line in lines[at + 1 :]:
        if line.startswith(" "):
            block.append(line)
        else:
            break
    return block


def test_every_finding_ranked_with_its_fix_and_notes_only_with_v(
    sessions_dir: Path, agentdb: Agentdb
) -> None:
    sid, path = make_session(sessions_dir, turns=1, status="running")  # interrupted: warning
    job_file(path, "recover", "tmp").write_bytes(b"left by a killed job")  # job_leftover
    os.chmod(path, 0o644)  # readable_by_others: warning
    g = ["--sessions-dir", str(sessions_dir)]
    code, out, err = agentdb(*g, "check", sid)
    block = _rows_of(out, sid)
    text = "\n".join(block)
    assert len(block) == 3, text  # three findings, one row each
    assert "agentdb recover" in text and "chmod" in text and "sessions end" in text
    code, out, _ = agentdb(*g, "check", "--json", sid)
    doc = __import__("json").loads(out)
    assert len(doc["sessions"][0]["findings"]) == 3


def test_notes_hidden_unless_verbose(sessions_dir: Path, agentdb: Agentdb) -> None:
    sid, path = make_session(sessions_dir, turns=30)
    zero_page(path, pages_of(path, "events", "leaf")[1])
    g = ["--sessions-dir", str(sessions_dir)]
    assert agentdb(*g, "recover", sid).code == 0
    code, out, err = agentdb(*g, "check", sid)
    assert code == 0 and "expected" not in out and "notes not shown" in err
    assert INCOMPLETE in out  # events were lost: it says so
    code, out, err = agentdb(*g, "check", sid, "-v")
    block = _rows_of(out, sid)
    assert "expected" in block[-1] or any("expected" in line for line in block)
    # ranked: nothing before a warning or error is informational here; the note comes too
    assert len(block) >= 3


def test_a_lossless_recovery_no_longer_says_history_may_be_incomplete(
    sessions_dir: Path, agentdb: Agentdb
) -> None:
    sid, path = make_session(sessions_dir, turns=30)
    zero_page(path, pages_of(path, "idx_events_kind", "leaf")[0])  # an index only: rebuilt
    g = ["--sessions-dir", str(sessions_dir)]
    code, out, _ = agentdb(*g, "recover", sid, "--json")
    assert code == 0
    assert os.path.exists(f"{path}.corrupt")
    code, out, _ = agentdb(*g, "check", sid, "-v")
    assert code == 0 and INCOMPLETE not in out and "lost nothing" in out


def test_a_restore_from_a_whole_copy_no_longer_says_history_may_be_incomplete(
    sessions_dir: Path, agentdb: Agentdb, tmp_path: Path
) -> None:
    sid, path = make_session(sessions_dir, turns=30)
    g = ["--sessions-dir", str(sessions_dir)]
    assert agentdb(*g, "backup", sid, "--to", str(tmp_path / "b")).code == 0
    zero_page(path, pages_of(path, "events", "leaf")[1])
    assert agentdb(*g, "recover", sid).code == 0
    assert INCOMPLETE in agentdb(*g, "check", sid, "-v").out
    assert agentdb(*g, "restore", sid, "--from", str(tmp_path / "b")).code == 0
    code, out, _ = agentdb(*g, "check", sid, "-v")
    assert code == 0 and INCOMPLETE not in out and "restored since" in out
