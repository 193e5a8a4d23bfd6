"""The recovery plan: snapshot → diagnose → salvage → a checked replacement in scratch.

:func:`plan` runs while the caller holds the session (:func:`agentdb.locks.hold`) and writes
nothing in the sessions directory. Everything it writes — the private copy of the session, the
engines' scratch files, the replacement — lives in the job's private work directory (0700,
outside the sessions directory, removed when the job ends, whatever way it ends). The
:class:`RecoveryPlan` holds what :func:`agentdb.salvage.execution.execute` needs: the outcome
it will report (counts, losses, notes), the stamps of the files it read, and the path of the
replacement, already checked once by ``agentdb check``'s own judge. ``--dry-run`` stops here.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentdb import checks, fsutil, paths, recoverylog
from agentdb.checks import policy
from agentdb.salvage import chainrows, diskrows, replacement, rows, snapshot
from agentdb.salvage import merge as merge_mod
from agentdb.salvage import pages as pages_mod
from agentdb.salvage import tables as tables_mod
from agentdb.salvage.outcome import RecoveryOutcome
from agentdb.salvage.scratch import Scratch
from agentdb.salvage.snapshot import Snapshot
from agentdb.salvage.tables import TABLES
from agentdb.schema.revisions import CURRENT_REVISION, KNOWN_REVISION, REV3_REVISION
from agentdb.schema.text import text_encoding

# An engine's refusal of a session_meta row naming another id (tables.problem's words).
_OTHER_META = re.compile(r"session_meta: session_id '([^']*)' is not the file's id ")


@dataclass
class RecoveryPlan:
    """What recovering one session will do; pure until :func:`execute` acts on it."""

    outcome: RecoveryOutcome  # the outcome execute reports (recovered, healthy, unreadable, ..)
    snapshot: Snapshot | None = None  # what was read (None: refused before reading)
    scratch: Path | None = None  # the checked replacement, in the private work directory
    finish_log: bool = False  # a healthy file whose interrupted recovery lacks its outcome line


@dataclass
class Salvage:
    """What the engines found, merged."""

    found: rows.RowSalvage | None  # engine b (SQLite's reads), None when it could not run
    page: pages_mod.PageSalvage  # engine c (the file format)
    merged: merge_mod.Merged  # one row per key
    shell: merge_mod.ShellRows | None  # SQLite's .recover, when it ran
    shell_notes: list[str]
    rebuild: bool  # every table intact: only indexes or free space are damaged
    revision: int = CURRENT_REVISION  # the original's schema revision (as far as it is known)
    chain: chainrows.ChainEvidence | None = None  # revision 3: stored hashes, head, gap rows


def original_revision(diag: rows.Diagnosis, page: pages_mod.PageSalvage) -> int:
    """The original's revision: SQLite's ``user_version``, else the header's, else 3 when a
    record of a revision-3 shape was found, else 2 (events accepted with or without their
    revision-2 hash). Never "the current one" for an unknown header: once the current is 3, a
    revision-1 file with a garbage header would have every row dropped for want of a hash."""
    for rev in (diag.revision, page.revision):
        if rev is not None and 1 <= rev <= KNOWN_REVISION:
            return rev
    return REV3_REVISION if page.chain.shaped else REV3_REVISION - 1


def target_revision(original: int, asked: int | None = None) -> int:
    """The replacement's revision: never below the original's (a revision-3 original recovered
    into revision 2 would lose its chain); by default the current one or the original's."""
    if asked is None:
        return max(CURRENT_REVISION, original)
    if asked < original or asked > KNOWN_REVISION:
        raise ValueError(f"cannot recover a revision-{original} file into revision {asked}")
    return asked


def plan(
    path: Path,
    session_id: str,
    fd: int,
    work: Path,
    log: Path,
    *,
    target: int | None = None,
) -> RecoveryPlan:
    """Snapshot the held session into ``work``, judge it, salvage it and build a checked
    replacement there; see the module docstring. ``target``: the replacement's revision (by
    default :func:`target_revision`'s; never below the original's)."""
    out = RecoveryOutcome(session_id, "refused", str(path))
    with out.timed("snapshot"):
        snap = snapshot.take(path, fd, work)
    if snap is None:
        out.outcome = "skipped_live"
        out.notes.append(f"{path}: replaced while being locked; retry")
        return RecoveryPlan(out)
    result = RecoveryPlan(out, snap)
    store = Scratch(work / "scratch.sqlite")
    try:
        got = _salvage(result, store, session_id, work, log)
        if got is None:
            return result
        _describe(out, got)
        out.found_by = _found_by(got)
        if got.merged.count() == 0 and not got.merged.rows["session_meta"]:
            out.outcome = "unreadable"
            out.notes.append("nothing could be salvaged; the original is left untouched")
            return result
        revision = target_revision(got.revision, target)
        _build(result, got, work / "replacement.sqlite", store, revision)
    finally:
        store.close()
        snap.release()
    return result


def _salvage(
    plan_: RecoveryPlan, store: Scratch, session_id: str, work: Path, log: Path
) -> Salvage | None:
    """Judge the snapshot; when it needs salvage, run the engines (long values streamed into
    ``store``) and merge. None when the plan ends at the diagnosis."""
    snap = plan_.snapshot
    assert snap is not None
    out = plan_.outcome
    with out.timed("diagnose"):
        conn, diag = snapshot.judge(snap, session_id, work)
    try:
        if not _needs_salvage(plan_, diag, log):
            return None
        out.notes += diag.reasons
        evidence = store.chain_evidence()
        with out.timed("pages"):
            page = pages_mod.salvage_pages(
                snap.copy,
                snap.wal_scan,
                session_id,
                store,
                rolled_back=snap.had_journal and snap.journal_note is None,
                chain=evidence,
            )
        revision = original_revision(diag, page)
        found = None
        # The rows engine reads TEXT as its stored bytes: in a UTF-16 database those are not
        # the UTF-8 the replacement stores (the pages engine decodes by the header's encoding).
        if conn is not None and diag.refused is None and text_encoding(conn) is None:
            with out.timed("rows"):
                found = rows.salvage_rows(
                    conn, session_id, revision, page.verified, store, chain=evidence
                )
    finally:
        if conn is not None:
            conn.close()
    with out.timed("merge"):
        got = _merge(snap, diag, found, page, session_id, work, store, revision, evidence)
    snap.release()
    return got


def _needs_salvage(plan_: RecoveryPlan, diag: rows.Diagnosis, log: Path) -> bool:
    """False when the plan ends at the diagnosis (refused, or healthy); the reasons go in."""
    out, snap = plan_.outcome, plan_.snapshot
    assert snap is not None
    if diag.refused is not None and snap.interrupted is None:
        out.outcome = "refused"
        out.notes += diag.reasons
        return False
    if not diag.damaged and snap.interrupted is None:
        verdict, findings, step = _full_judge(snap, out.session_id, log)
        if verdict in checks.HEALTHY:
            if snap.had_journal:
                out.notes.append("a hot journal will be rolled back on the next open")
            _healthy(plan_, log)
            return False
        if policy.is_inconsistent(verdict):
            # Every row reads and every page is sound: there is nothing to salvage, and which
            # of the rows that disagree is wrong (a flipped reference, a status) no engine can
            # tell. The file stays as it is, for the operator to inspect.
            out.outcome = "refused"
            out.notes += findings
            out.notes.append(
                "check calls it inconsistent while every row reads: recover has nothing to "
                f"salvage and cannot tell which row is wrong; {step}"
            )
            return False
        diag.damaged = True  # damage only check's full judge sees: salvage it
        diag.integrity_only = False
        diag.reasons += findings
    if snap.had_journal and snap.journal_note is None:
        diag.reasons.append(
            "salvaged from the state the hot journal's rollback gives; the journal is kept "
            "with the original"
        )
    if snap.interrupted is not None:
        diag.reasons.append(f"resuming an interrupted recovery ({snap.interrupted.name})")
    return True


def _full_judge(snap: Snapshot, session_id: str, log: Path) -> tuple[str, list[str], str]:
    """``agentdb check``'s full verdict on the snapshot's private copy (its journal already
    rolled back, with its WAL unless that was set aside), and the messages of its errors: the
    diagnosis reads pages, hashes and text; the judge also reads what the rows say of each
    other (references, status, kinds), so a file is healthy only when both say so."""
    entries = recoverylog.entries_for(log, session_id)
    # A swap that finished without its outcome line (killed after the rename) left the
    # replacement, as recovered as with the line: judged so, it is finished, not refused.
    recovered = checks.was_recovered(entries) or _swapped_intent(entries) is not None
    result = checks.check_path(snap.copy, session_id, recovered=recovered)
    errors = [
        f.message.replace(str(snap.copy), str(snap.path))
        for f in result.findings
        if f.severity == "error"
    ]
    as_session = dataclasses.replace(result, path=snap.path, fix=None)
    return result.verdict, errors, policy.describe(policy.fix_for(as_session))


def _healthy(plan_: RecoveryPlan, log: Path) -> None:
    """A healthy file; if an interrupted recovery of it only lacks its outcome line, the plan
    is to finish that (its intent line says what it did)."""
    out = plan_.outcome
    out.outcome = "healthy"
    done = _swapped_intent(recoverylog.entries_for(log, out.session_id))
    if done is None:
        return
    done.outcome = "recovered"
    done.path = out.path
    done.notes = [*out.notes, *done.notes, "finished an interrupted recovery"]
    plan_.outcome = done
    plan_.finish_log = True


def _swapped_intent(entries: list[dict[str, Any]]) -> RecoveryOutcome | None:
    """The intent of a recovery whose swap was done but whose outcome line is missing: the
    log's last line for the session is an intent whose ``.corrupt`` name exists. Asked only of
    a file that is not that ``.corrupt`` copy (``Snapshot.interrupted`` is None)."""
    if not entries or entries[-1].get("event") != "intent":
        return None
    done = RecoveryOutcome.from_log(entries[-1])
    if done.corrupt_path is None or not Path(done.corrupt_path).exists():
        return None
    return done


def _merge(
    snap: Snapshot,
    diag: rows.Diagnosis,
    found: rows.RowSalvage | None,
    page: pages_mod.PageSalvage,
    session_id: str,
    work: Path,
    store: Scratch,
    revision: int = CURRENT_REVISION,
    evidence: chainrows.ChainEvidence | None = None,
) -> Salvage:
    """Merge the engines' rows; when rows are still known lost and the page engine did not
    understand every page, SQLite's own recovery extension may fill gaps. ``revision``: the
    original's (at 3 only rows whose stored hashes held are kept)."""
    rebuild = tables_intact(diag, found, page, store)
    torn = snap.journal_torn
    if torn is None and snap.journal_restored is not None:
        # The rollback of a whole-looking journal needs salvage: a whole journal's rollback
        # gives a committed state, which reads whole. Either the journal lost segments after
        # one that ends where the file ends (nothing in it tells), or other damage struck;
        # either way only the pages it restored are known to hold committed content.
        torn = snap.journal_restored
    chained: dict[str, Any] = {"chain": evidence, "revision": revision}
    first = None if rebuild else page
    merged = merge_mod.merge(
        session_id, first, found, None, store, torn, torn_witness=page, **chained
    )
    got = Salvage(found, page, merged, None, [], rebuild, revision, evidence)
    if rebuild:
        got.shell_notes.append(
            "index-rebuild: every table read in full through SQLite and agreeing with the "
            "page-level walk; the damage lies outside the tables (indexes, free space), "
            "which the replacement rebuilds"
        )
    elif page.fully_understood and merged.rows["session_meta"]:
        if merged.lost:
            got.shell_notes.append(
                "sqlite-recover not run: every page typed as a b-tree page parsed and every "
                "cell decoded, so the rows still missing are on pages with nothing left"
            )
    elif merged.lost or not merged.rows["session_meta"]:
        got.shell, got.shell_notes = _run_shell(
            snap.copy, snap.wal, session_id, work, store, evidence
        )
        if got.shell is not None and any(got.shell.rows.values()):
            got.merged = merge_mod.merge(
                session_id, page, found, got.shell, store, torn, torn_witness=page, **chained
            )
    return got


def _run_shell(
    copy: Path,
    wal: Path | None,
    session_id: str,
    work: Path,
    store: Scratch,
    evidence: chainrows.ChainEvidence | None = None,
) -> tuple[merge_mod.ShellRows | None, list[str]]:
    """SQLite's ``.recover`` on the private copy, when a capable shell exists; optional: it
    never sinks the other engines. A revision-3 record's stored hashes go to ``evidence``."""
    try:
        from agentdb.salvage import shell
    except ImportError:
        return None, []
    try:
        if shell.find_capable_shell() is None:
            return None, []
        shell_dir = work / "shell"
        fsutil.ensure_dir(shell_dir)
        got = shell.shell_salvage(copy, wal, session_id, shell_dir, store=store, chain=evidence)
    except Exception as e:  # the optional engine must never sink the others
        return None, [f"sqlite-recover engine failed: {type(e).__name__}: {e}"]
    found = merge_mod.ShellRows(got.rows, got.hashed, got.hashes)
    return found, list(got.notes)


def _build(plan_: RecoveryPlan, got: Salvage, target: Path, store: Scratch, revision: int) -> None:
    """Write the replacement into scratch at ``revision`` and check it once: ``agentdb
    check``'s full judge (integrity, identity, schema, session_meta, content hashes; at
    revision 3 the full chain walk with the recorded gaps) plus the merged row counts."""
    out = plan_.outcome
    merged = got.merged
    chained = None
    if revision >= REV3_REVISION:
        chained = replacement.Chained(out.session_id, got.revision, got.chain, recoverylog.now())
    with out.timed("replacement"):
        try:
            gaps = replacement.write(
                target, merged, store.resolve, revision=revision, chained=chained
            )
        except ValueError as e:  # the walk or the head refused what was salvaged
            out.outcome = "unreadable"
            out.replacement_check = [f"writing the revision-{revision} replacement fails: {e}"]
            out.notes.append(f"the replacement failed verification: {out.replacement_check[0]}")
            return
    out.gaps = [
        {
            "kind": g.kind,
            "from_seq": g.from_seq,
            "to_seq": g.to_seq,
            "expected_hash": None if g.expected_hash is None else g.expected_hash.hex(),
        }
        for g in gaps
    ]
    if any(g.kind == "meta" for g in gaps) and not merged.rebuilt_meta:
        # no hash vouches for the session_meta kept (the head's meta_hash names another)
        merged.unverified.setdefault("session_meta", set()).add(out.session_id)
        if out.tables.get("session_meta") is not None:
            out.tables["session_meta"].update(merged.levels("session_meta"))
        out.notes.append(
            "session_meta does not match the hash the original's head recorded (changed "
            "outside the writer, or an older copy): kept unverified, recorded as a meta gap"
        )
    with out.timed("check"):
        problems, orphans = replacement.check(target, out.session_id, merged)
    out.replacement_check = problems
    if orphans:
        out.notes.append(f"{orphans} rows reference events that were lost (kept: history)")
    if problems:
        out.outcome = "unreadable"
        out.notes.append(f"the replacement failed verification: {problems[0]}")
        return
    out.outcome = "recovered"
    plan_.scratch = target


def tables_intact(
    diag: rows.Diagnosis,
    found: rows.RowSalvage | None,
    page: pages_mod.PageSalvage,
    store: Scratch,
) -> bool:
    """True when only integrity_check complains and every table b-tree is intact: SQLite read
    every table start to end with no error and no rejected row (content hashes included), and
    the page engine's walk of the same b-trees found exactly the same rows, with no orphaned
    leaf holding a row SQLite did not see. The damage is then confined to indexes."""
    if not diag.integrity_only or found is None or not page.schema_found:
        return False
    if not found.complete or found.damaged_regions or found.rejected:
        return False
    if page.broken or page.crosslinked or page.crosslink_owner or page.doubtful:
        return False  # a live row's payload is structurally wrong: not an index-only damage
    for t in TABLES:
        live = store.map("live") if t in tables_mod.AUTOINCREMENT_TABLES else {}
        for c in page.candidates.of_table(t):
            key = tables_mod.key_of(c.table, c.row)
            if c.tier == pages_mod.LIVE:
                live[key] = c.row
            elif c.tier == pages_mod.STRAY and key not in found.rows[c.table]:
                return False  # a row in a leaf no b-tree reaches
        if len(live) != len(found.rows[t]) or any(
            found.rows[t].get(k) != row for k, row in diskrows.ordered(live)
        ):
            return False
    return True


def _found_by(got: Salvage) -> dict[str, dict[str, dict[str, int]]]:
    """Per engine that ran: how many rows of each table it found, and how many it gave."""
    merged, found, page, rebuild = got.merged, got.found, got.page, got.rebuild

    def used(*sources: str) -> dict[str, int]:
        return {t: n for t in TABLES if (n := sum(merged.sources[t][s] for s in sources))}

    out: dict[str, dict[str, dict[str, int]]] = {}
    if found is not None:
        out["index-rebuild" if rebuild else "rows"] = {
            "found": {t: len(v) for t, v in found.rows.items() if v},
            "used": used("rows"),
        }
    tiers = page.candidates.counts()
    out["pages"] = {
        "found": {t: tiers[t] for t in TABLES if t in tiers},
        "used": {} if rebuild else used("live", "stray", "stale"),
    }
    if page.free and not rebuild:
        shapes = Counter(fr.table for fr in page.free)  # classified once, by the page engine
        out["free-space"] = {"found": dict(shapes), "used": used("free-space")}
    if got.shell is not None:
        out["sqlite-recover"] = {
            "found": {t: len(v) for t, v in got.shell.rows.items() if v},
            "used": used("sqlite-recover"),
        }
    derived = used("derived", "rebuilt")
    if derived:
        out["derived"] = {"found": derived, "used": derived}
    return out


_ENGINE_SOURCES = (
    ("rows", ("rows",)),
    ("pages", ("live", "stray", "stale")),
    ("sqlite-recover", ("sqlite-recover",)),
    ("free-space", ("free-space",)),
    ("derived", ("derived", "rebuilt")),
)


def _describe(out: RecoveryOutcome, got: Salvage) -> None:
    """Counts per table (with verification levels), engines used, losses and notes."""
    merged, found, page = got.merged, got.found, got.page
    out.tables = {
        t: {
            "salvaged": len(merged.rows[t]),
            **merged.levels(t),
            "sources": dict(merged.sources[t]),
        }
        for t in TABLES
    }
    if found is not None:
        # The rows engine's reader: each restart begins past a new damaged region, so
        # restarts <= damaged_regions (the scan runs at most damaged_regions + 1 times).
        for t in TABLES:
            out.tables[t]["restarts"] = found.restarts.get(t, 0)
            out.tables[t]["damaged_regions"] = found.regions.get(t, 0)
    used: Counter[str] = Counter()
    for t in TABLES:
        used.update(merged.sources[t])
    out.engines = ["index-rebuild"] if got.rebuild else []
    for name, sources in _ENGINE_SOURCES:
        if any(used[s] for s in sources) and not (got.rebuild and name == "rows"):
            out.engines.append(name)
    out.lost = merged.lost
    out.foreign_ignored = dict(merged.foreign_ignored)
    rejected = Counter(page.rejected)
    if found is not None:
        rejected.update(found.rejected)
        out.notes += found.notes
        if found.damaged_regions:
            out.notes.append(f"rows engine stepped around {found.damaged_regions} damaged regions")
    out.notes += page.notes + merged.notes + got.shell_notes
    # session_meta rows naming another valid session id, which the engines refuse (each
    # engine names the same row: counted once per id)
    others = {
        m.group(1)
        for why in rejected
        if (m := _OTHER_META.match(why)) is not None and paths.is_valid_id(m.group(1))
    }
    if others:
        n = out.foreign_ignored.get("session_meta", 0)
        out.foreign_ignored["session_meta"] = max(n, len(others))
    if rejected:
        top = ", ".join(f"{why} ({n})" for why, n in rejected.most_common(6))
        out.notes.append(f"rejected: {top}")
