"""What ``check`` makes of the chain walk of a revision-3 file (design §6-§7): findings and the
``verified`` field. The walk itself is ``schema/chain.py`` (pure) over ``schema/chainio.py``
(one read transaction); this module only reads its :class:`ChainReport`.

* :func:`verify`: ``chainio.verify_quick`` (``--quick``: O(1) chain work) or
  ``chainio.verify_full`` (every row, link and gap) on an open connection.
* :func:`findings`: ``(code, message, fix)`` for each problem the report names, each message
  one line naming the problem and the fix (the caller prefixes the file name). Every code of
  ``ChainReport.problems`` gives at least one finding, so a walk that fails never reads ``ok``.
* :func:`verified_of`: the :class:`agentdb.results.Verified` of ``check --json``.

An event whose own hash fails is ``content_hash_mismatch`` (revision 2's code and wording; a
full check words it from ``hashing.mismatch_sql``, as for revision 2); ``row_hash_mismatch``
names the derived tables. A break a proven gap record explains is ``chain_gap_recorded``
(informational), as are rows bound to events such a record says were lost
(``orphan_of_recovery``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import apsw

from agentdb import db
from agentdb.results import GapSeen, LinkProof, Origin, TableProof, Verified
from agentdb.schema import chainio
from agentdb.schema.chain import COUNTED, DERIVED, MAX_GAP_RECORDS, ChainReport, Gap

SHOWN = 5  # items named in one message; the rest are counted

Found = tuple[str, str, str | None]  # (code, message without the file name, fix)


@dataclass(frozen=True)
class Proof:
    """One walk of one file."""

    report: ChainReport  # what the walk found
    gap_rows: int  # chain_gaps rows in the file (full: those read, at most MAX_GAP_RECORDS + 1)


def verify(conn: apsw.Connection, session_id: str, *, quick: bool) -> Proof:
    """The chain walk of the revision-3 file open on ``conn`` (named ``session_id``: the genesis
    of its chain), inside the caller's read transaction if there is one."""
    if quick:
        report = chainio.verify_quick(conn, session_id=session_id)
        gap_rows = int(db.scalar(conn, "SELECT count(*) FROM chain_gaps"))
        return Proof(report, gap_rows)
    report = chainio.verify_full(conn, session_id=session_id)
    return Proof(report, len(report.gap_records) + report.gap_records_excess)


# ------------------------------------------------------------------------------ wording


def _span(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}-{b}"


def _listed(items: list[str], total: int) -> str:
    shown = ", ".join(items[:SHOWN])
    more = total - min(len(items), SHOWN)
    return shown + (f" (+{more} more)" if more > 0 else "")


def _describe(gap: Gap) -> str:
    """One break, in words."""
    a, b = gap.from_seq, gap.to_seq
    if gap.kind == "events":
        return f"events {_span(a, b)} missing"
    if gap.kind == "tail":
        return f"events {_span(a, b)} missing (the next event links to the one before them)"
    if gap.kind == "link":
        before = "the session's start" if a <= 1 else f"event {a - 1}"
        return f"event {a} does not link to {before}"
    if gap.kind == "rows":
        return f"event {a}'s chain does not recompute (a row bound to it lost, moved or changed)"
    return "session_meta not proven to be the last one written"


def _recorded(gap: Gap) -> str:
    if gap.kind == "meta":
        return "session_meta rebuilt"
    if gap.kind == "rows":
        return f"rows of event {gap.from_seq}"
    return f"{gap.kind} {_span(gap.from_seq, gap.to_seq)}"


def _rows_of(table: str) -> str:
    return "events" if table == "events" else f"{table} rows"


def _key(table: str, key: object) -> str:
    if isinstance(key, tuple):
        return "/".join(map(str, key))
    return str(key)


def _head_tail_break(r: ChainReport, gap: Gap) -> bool:
    """The break ``finish`` adds for a head beyond the last event (head_mismatch words it)."""
    return (
        r.head is not None
        and gap.kind == "tail"
        and gap.from_seq == r.last_sequence + 1
        and gap.to_seq == r.head.sequence
    )


def _head_problem(r: ChainReport) -> str:
    if r.tail == "head_missing":
        if r.head_rows == 0:
            return "no session_chain row: the head of the chain was deleted"
        return f"{r.head_rows} session_chain rows, expected exactly one"
    if r.tail == "head_damaged":
        if r.head is not None and r.head.row.proven:  # its hash holds; its values are no head
            shown = [
                f"{c} {_text(v)!r}" if type(v) is bytes else f"{c} {v!r}"
                for c in ("id", "origin", "origin_revision")
                for v in (r.head[c],)
            ]
            return (
                f"the session_chain row ({', '.join(shown)}) breaks the revision's constraints: "
                "it is not a head agentdb writes, so what it summarises cannot be trusted"
            )
        return (
            "the session_chain head fails its own hash: the head is damaged, so what it "
            "summarises (the last event, the counts) cannot be trusted"
        )
    assert r.head is not None
    hs, last = r.head.sequence, r.last_sequence
    if type(hs) is int and hs > last:
        return (
            f"the head names event {hs} but the last event is {last}: the tail was cut "
            f"(events {_span(last + 1, hs)} lost)"
        )
    if type(hs) is int and hs < last:
        return (
            f"the head names event {hs} but events run to {last}: events were written past "
            "the head, not by agentdb's writer"
        )
    return f"the head's hash is not the chain hash of its last event {last}: the tail was replaced"


def findings(proof: Proof, session_id: str, *, events_by_sql: bool) -> list[Found]:
    """The findings of one walk (see the module). ``events_by_sql``: the caller reports events
    whose own hash fails itself (a full check: ``hashing.mismatch_sql``'s wording)."""
    r = proof.report
    fix = f"agentdb recover {session_id}"
    run = f"; run `{fix}`"
    out: list[Found] = []
    head_proven = r.head is not None and r.head.proven
    problems = r.problems
    failed = {t: r.rows.get(t, 0) - r.proven.get(t, 0) for t in COUNTED}
    if "row_hash_mismatch" in problems:
        if failed["events"] and not events_by_sql:
            keys = [str(k) for t, k in r.row_failures if t == "events"]
            out.append(
                (
                    "content_hash_mismatch",
                    f"{failed['events']} events do not match their content hash (sequence "
                    f"{_listed(keys, failed['events'])}){run}",
                    fix,
                )
            )
        for table in DERIVED:
            if failed[table] <= 0:
                continue
            keys = [_key(t, k) for t, k in r.row_failures if t == table]
            what = "producer" if table == "producers" else "sequence"
            out.append(
                (
                    "row_hash_mismatch",
                    f"{failed[table]} {table} rows do not match their hash ({what} "
                    f"{_listed(keys, failed[table])}): changed outside the writer{run}",
                    fix,
                )
            )
    if "chain_break" in problems:
        shown = [b.gap for b in r.unexplained_breaks if not _head_tail_break(r, b.gap)]
        hidden = len(r.unexplained_breaks) - len(shown)  # worded by head_mismatch
        total = r.unexplained - hidden
        if total > 0:
            out.append(
                (
                    "chain_break",
                    f"the chain of events is broken in {total} place"
                    f"{'s' if total != 1 else ''}: "
                    f"{_listed([_describe(g) for g in shown], total)}{run}",
                    fix,
                )
            )
    if "head_mismatch" in problems:
        out.append(("head_mismatch", f"{_head_problem(r)}{run}", fix))
    if "count_mismatch" in problems and head_proven:
        parts = [f"{stored!r} {_rows_of(t)}, the file {n}" for t, stored, n in r.count_mismatches]
        out.append(
            (
                "count_mismatch",
                f"the head counts {'; '.join(parts)}: rows were deleted or added outside the "
                f"writer{run}",
                fix,
            )
        )
    if "meta_hash_mismatch" in problems and head_proven:
        why = (
            "session_meta does not match the head's meta_hash: changed outside the writer"
            if r.meta_hash is not None
            else "no single session_meta row to match the head's meta_hash"
        )
        out.append(("meta_hash_mismatch", f"{why}{run}", fix))
    if "gap_record_damaged" in problems:
        bad = [str(g.row.values[0]) for g in r.gap_records if not g.proven]
        if r.gap_records_excess:
            why = f"more than {MAX_GAP_RECORDS} chain_gaps rows (not all were read)"
        elif bad:
            why = (
                "chain_gaps rows fail their own hash or hold no gap a recovery writes (sequence "
                f"{_listed(bad, len(bad))})"
            )
        elif head_proven and r.head is not None and r.head["gap_count"] != proof.gap_rows:
            why = (
                f"the head counts {r.head['gap_count']!r} gap records, the file holds "
                f"{proof.gap_rows}: a gap record was deleted or added"
            )
        elif head_proven:
            why = "the gap records do not hash to the head's gaps_hash"
        else:
            why = ""  # the head is damaged or missing: head_mismatch says so
        if why:
            out.append(("gap_record_damaged", f"{why}{run}", fix))
    if "unbound_rows" in problems:
        keys = [f"{t} {_key(t, k)}" for t, k in r.unbound]
        out.append(
            (
                "unbound_rows",
                f"{r.unbound_count} rows belong to no event ("
                f"{_listed(keys, r.unbound_count)}){run}",
                fix,
            )
        )
    if r.orphans_of_recovery:
        out.append(
            (
                "orphan_of_recovery",
                f"{r.orphans_of_recovery} rows belong to events an earlier recovery lost "
                "(inside its recorded gaps): expected",
                None,
            )
        )
    out.extend(_recorded_findings(proof))
    # A failing walk must never read ok: any problem not worded above gets its own line.
    said = {code for code, _, _ in out}
    if "content_hash_mismatch" in said or (events_by_sql and failed["events"] > 0):
        said.add("row_hash_mismatch")  # events: the caller's content_hash_mismatch
    if "head_mismatch" in said:  # a damaged or missing head: what it summarises is unknown
        said |= {"chain_break", "count_mismatch", "meta_hash_mismatch", "gap_record_damaged"}
    for code in problems:
        if code not in said:
            out.append((code, f"the chain does not verify ({code.replace('_', ' ')}){run}", fix))
    return out


def _recorded_findings(proof: Proof) -> Iterable[Found]:
    r = proof.report
    if r.level == "full":
        gaps = [g.gap for g in r.gap_records if g.proven and g.gap is not None]
    else:
        gaps = [b.gap for b in r.recorded]
    if gaps:
        yield (
            "chain_gap_recorded",
            f"an earlier recovery recorded {len(gaps)} gap{'s' if len(gaps) != 1 else ''} in "
            f"the history: {_listed([_recorded(g) for g in gaps], len(gaps))} (lost then; "
            "the rest of the chain is proven)",
            None,
        )
    elif r.level == "quick" and r.gaps_ok and r.head is not None and proof.gap_rows:
        n = proof.gap_rows
        yield (
            "chain_gap_recorded",
            f"the head records {n} gap{'s' if n != 1 else ''} an earlier recovery left in the "
            "history (a full check names them)",
            None,
        )


# ----------------------------------------------------------------------------- verified


def _text(v: object) -> str:
    return v.decode("utf-8", "backslashreplace") if type(v) is bytes else str(v)


def verified_of(proof: Proof, *, meta_rows: int) -> Verified:
    """The ``verified`` field for one walk (``meta_rows``: the file's session_meta rows)."""
    r = proof.report
    head = r.head
    head_proven = head is not None and head.proven
    origin = None
    if head is not None and head_proven:
        rev = head["origin_revision"]
        origin = Origin(
            _text(head["origin"]), rev if type(rev) is int else None, _text(head["origin_at"])
        )
    rows = {t: TableProof(r.rows.get(t, 0), r.proven.get(t, 0)) for t in COUNTED}
    rows["session_meta"] = TableProof(meta_rows, int(head_proven and r.meta_ok))
    rows["session_chain"] = TableProof(r.head_rows, int(head_proven))
    rows["chain_gaps"] = TableProof(proof.gap_rows, sum(1 for g in r.gap_records if g.proven))
    gaps = [GapSeen(b.gap.kind, b.gap.from_seq, b.gap.to_seq, b.recorded) for b in r.breaks]
    for g in r.gap_records:  # recorded gaps no break showed (a lost tail before a new emit)
        if g.proven and g.gap is not None and not any(g.gap.explains(b.gap) for b in r.breaks):
            gaps.append(GapSeen(g.gap.kind, g.gap.from_seq, g.gap.to_seq, True))
    return Verified(r.level, origin, rows, LinkProof(r.links_checked, r.links_broken), gaps, r.tail)


__all__ = ["Proof", "findings", "verified_of", "verify"]
