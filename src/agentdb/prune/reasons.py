"""Why a selected session stays: its own reasons, judged alone, and the rules that join
sessions (a ``--with-descendants`` subtree goes or stays whole)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from agentdb import paths
from agentdb.index import plugins
from agentdb.prune.decisions import PruneDecision, Reason
from agentdb.prune.scan import INTENT, Facts, Stamp
from agentdb.schema.enums import RUNNING


def needs_judge(f: Facts) -> bool:
    """A readable file nobody has open, present: check's judge decides if it is damaged (a
    file someone has open is refused as live, and its WAL is not judged)."""
    return (
        f.entry_kind != "absent" and f.problem is None and f.info is not None and f.holder is None
    )


def members(label: str, ids: Iterable[str], limit: int = 3) -> str:
    ids = list(ids)
    shown = ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
    return f"{label} {shown}"


def own_reasons(
    f: Facts,
    explicit: bool,
    allow_damaged: bool,
    pins: Sequence[plugins.PluginVersion],
    include_pinned: bool,
    judged: str | None,
) -> list[Reason]:
    """Every reason that keeps this one session, judged alone (has_children comes later).
    ``judged``: what check's judge said of it (:func:`needs_judge`; None: nothing wrong)."""
    out: list[Reason] = []
    if f.entry_kind == "absent":
        if f.files.corrupt and not allow_damaged:
            out.append(
                Reason(
                    "not_found",
                    f"only its .corrupt copies remain ({', '.join(f.files.corrupt[:2])}); "
                    "name it with --include-damaged to remove them",
                )
            )
        elif not f.files.corrupt and not f.files.sidecars:
            out.append(Reason("not_found", "no such session file"))
        if f.holder is not None:
            out.append(Reason("live", f"{f.holder.file} is open; retry later"))
        return out
    if f.holder is not None:
        who = f" by pid {f.holder.pid}" if f.holder.pid else ""
        out.append(Reason("live", f"open{who} ({f.holder.file}); stop it or retry later"))
    problem = f.problem if f.problem is not None else judged
    if f.entry_kind == "directory":
        out.append(Reason("unreadable", f"{problem}; never removed, move it away by hand"))
    elif f.foreign:
        out.append(
            Reason(
                "foreign",
                f"{problem}: another application's file, never removed (not even with "
                "--include-damaged); move it out of the sessions directory by hand",
            )
        )
    elif problem is not None and not allow_damaged:
        hint = (
            "add --include-damaged to remove it"
            if explicit
            else "a selector never removes it; name it with --include-damaged"
        )
        out.append(Reason("unreadable", f"{problem}; {hint}"))
    if f.info is not None and f.info.status == RUNNING:
        out.append(Reason("running", "status is running (a kernel may resume it)"))
    if pins and not include_pinned:
        listed = members("references plugin versions in the cache:", map(plugins.label, pins))
        out.append(Reason("pinned", f"{listed}; --include-pinned removes it anyway"))
    if f.files.corrupt and not allow_damaged:
        out.append(
            Reason(
                "has_corrupt_copies",
                f"keeps damaged originals {', '.join(f.files.corrupt[:2])}; name it with "
                "--include-damaged to remove them with it",
            )
        )
    return out


_SUBTREE = "subtree of "


def is_inherited(r: Reason) -> bool:
    """A reason copied from another member of a --with-descendants subtree."""
    return r.message.startswith(_SUBTREE)


def resume_reasons(f: Facts, planned: Stamp | None) -> list[Reason]:
    """An interrupted prune is finished only if the session is exactly as it was planned."""
    if planned is None:
        return [Reason("changed", "an interrupted prune left an unreadable intent; it stays")]
    if f.entry_kind != "absent" and (f.stamp.main != planned.main or f.stamp.wal != planned.wal):
        return [
            Reason(
                "changed",
                "changed since an interrupted prune planned to remove it; it stays",
            )
        ]
    return []


def files_of(f: Facts, damaged: bool) -> list[str]:
    """What removing it deletes, in order: the main file first, the intent file last."""
    base = paths.session_filename(f.session_id)
    out = [base] if f.entry_kind != "absent" else []
    out += f.files.sidecars
    if damaged:
        out += f.files.corrupt
    if f.files.intent:
        out.append(base + INTENT)
    return out


def corrupt_bytes(sessions_dir: Path, f: Facts) -> int:
    total = 0
    for n in f.files.corrupt:
        try:
            total += os.lstat(sessions_dir / n).st_size
        except FileNotFoundError:
            pass
    return total


def refuse_whole_groups(decisions: dict[str, PruneDecision], top: dict[str, str]) -> bool:
    """If any member of a subtree stays, every member stays, naming the member that caused it
    (inherited reasons are rebuilt from the members' own reasons each round)."""
    changed = False
    by_group: dict[str, list[str]] = {}
    for sid, root in top.items():
        by_group.setdefault(root, []).append(sid)
    for root, members in by_group.items():
        own = {m: [r for r in decisions[m].reasons if not is_inherited(r)] for m in members}
        for m in members:
            d = decisions[m]
            inherited = [
                Reason(r.code, f"{_SUBTREE}{root}: member {c}: {r.message}")
                for c in members
                if c != m
                for r in own[c]
            ]
            new = own[m] + [r for r in inherited if r not in own[m]]
            if new != d.reasons:
                d.reasons = new
                changed = True
    return changed
