"""``agentdb prune``: remove the sessions the operator selects, refusing those that must stay."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator

import click

from agentdb import errors, leftovers, prune
from agentdb.cli import output
from agentdb.cli.common import (
    SESSION_ID,
    App,
    default_jobs,
    finish,
    fmt_option,
    jobs_option,
    json_option,
    no_index_option,
    wait_option,
)
from agentdb.cli.params import DURATION
from agentdb.schema import enums


def _statuses(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    statuses = tuple(s.strip() for v in value for s in v.split(",") if s.strip())
    for s in statuses:
        if s not in enums.STATUSES:
            raise click.BadParameter(f"unknown status {s!r}; one of {', '.join(enums.STATUSES)}")
    return statuses


@click.command("prune")
@click.argument("ids", nargs=-1, type=SESSION_ID)
@click.option(
    "--until",
    "--older-than",
    "older_than",
    type=DURATION,
    metavar="DURATION",
    help="Ended (or, never ended, started) at least this long ago: 90d, 1d12h, 2w, 1y, 0s "
    "(--older-than is the same option).",
)
@click.option(
    "--since",
    "newer_than",
    type=DURATION,
    metavar="DURATION",
    help="Ended (or, never ended, started) less than this long ago.",
)
@click.option(
    "--keep-last",
    type=click.IntRange(min=0),
    metavar="N",
    help="Keep the N newest matching sessions.",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    callback=_statuses,
    metavar="S[,S...]",
    help="Only sessions with one of these statuses.",
)
@click.option("--profile", metavar="P", help="Only sessions of this profile.")
@click.option(
    "--with-descendants",
    is_flag=True,
    help="Add each selected session's subtree, judged as a whole.",
)
@click.option(
    "--include-damaged",
    is_flag=True,
    help="Explicit ids may be unreadable; remove their .corrupt copies too.",
)
@click.option(
    "--include-pinned",
    is_flag=True,
    help="Pinned sessions (they use a cached plugin version) may be removed too; the "
    "confirmation lists the versions, --yes alone never implies this.",
)
@click.option(
    "--leftovers",
    "leftover_copies",
    is_flag=True,
    help="Remove the copies recover and restore kept (<id>.sqlite.corrupt[.N], "
    ".pre-restore[.N], with their -wal/-journal), of IDS or of every session, instead of "
    "sessions; never a session file. Dry-run it first.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be removed and what is refused; change nothing.",
)
@click.option(
    "--yes", "-y", is_flag=True, help="Remove without asking (required with no terminal)."
)
@wait_option(
    "Wait at most SECONDS (all together) for selected sessions another process has open "
    "to be closed, instead of refusing them as live at once."
)
@jobs_option("Read and judge files while planning")
@no_index_option
@json_option
@fmt_option
@click.pass_obj
def prune_cmd(
    app: App,
    ids: tuple[str, ...],
    older_than: dt.timedelta | None,
    newer_than: dt.timedelta | None,
    keep_last: int | None,
    statuses: tuple[str, ...],
    profile: str | None,
    with_descendants: bool,
    include_damaged: bool,
    include_pinned: bool,
    leftover_copies: bool,
    dry_run: bool,
    yes: bool,
    wait: float | None,
    jobs: int | None,
    no_index: bool,
    as_json: bool,
    fmt: str,
) -> int:
    """Remove the sessions you select, refusing those that must stay.

    Selected = IDS plus the sessions matching every filter given (--until/--older-than,
    --since, --status, --profile, --keep-last). Refused, with every reason: running, live
    (open by a process), pinned (uses a plugin version in the plugin cache), has_children (a
    session that stays names it as parent), unreadable (corrupt: only removed when named with
    --include-damaged), foreign (another application's file: never removed). Pinned sessions
    are removed only with --include-pinned; the report then names the versions no session
    references any more (what `agentdb plugins refs` lists as evictable). Nothing is removed
    without --yes or a confirmation on a terminal. The text report gives totals by reason and
    the first refused sessions (-v lists every one; --json has every reason).
    Sessions that are not selected are known from the session index (validated by stat;
    --no-index reads every file); every selected one is read and judged from its file, and
    just before removing it, under its lock, prune takes its identity again, runs
    quick_check, and re-reads the parent link of every session new or changed since the plan.
    Exit 0: did all asked (sessions left by prune's own rules -- pinned, parents of sessions
    that stay, keeping .corrupt originals -- are reported, not failures); 1: a session refused
    for a problem (running, live, damaged, foreign, not found, changed, failed), or nothing
    removed for want of a confirmation; 2: usage error; 130: Ctrl-C (what was removed before it
    is reported; run prune again to finish).

    With --leftovers, prune removes no session: it lists the copies recover and restore kept
    beside sessions (a damaged original, the file a restore replaced) and, after confirmation
    (or --yes), removes them with their sidecars. Remove them only once you have decided you
    need nothing in them: recover keeps each original because it may hold rows the
    recovery could not read. A copy that changed since it was listed, whose session a job
    holds, or whose session has an interrupted job's files, is skipped (exit 1).
    """
    if leftover_copies:
        given = [
            name
            for name, value in (
                ("--until/--older-than", older_than),
                ("--since", newer_than),
                ("--keep-last", keep_last),
                ("--status", statuses),
                ("--profile", profile),
                ("--with-descendants", with_descendants),
                ("--include-damaged", include_damaged),
                ("--include-pinned", include_pinned),
                ("--wait", wait),
            )
            if value
        ]
        if given:
            raise click.UsageError(f"--leftovers selects by IDS only; drop {', '.join(given)}")
        return _leftovers(
            app, tuple(dict.fromkeys(ids)), dry_run=dry_run, yes=yes, as_json=as_json, fmt=fmt
        )
    selectors = prune.Selectors(
        ids=tuple(dict.fromkeys(ids)),
        older_than=older_than,
        newer_than=newer_than,
        keep_last=keep_last,
        statuses=statuses,
        profile=profile,
        with_descendants=with_descendants,
        include_damaged=include_damaged,
        include_pinned=include_pinned,
    )
    try:
        selectors.validate()
    except errors.UsageError as e:
        raise click.UsageError(str(e)) from None
    bar = output.ProgressLine("prune: judging")
    try:
        plan = prune.plan(
            app.require_sessions_dir(),
            app.use_plugin_cache(),
            selectors,
            wait=wait,
            use_index=not no_index,
            jobs=jobs or default_jobs(),
            progress=bar.update,
        )
    finally:
        bar.close()
    with plan:  # its scratch database goes when the command ends, however it ends
        return _run(plan, dry_run=dry_run, yes=yes, as_json=as_json, fmt=fmt)


def _run(plan: prune.PrunePlan, *, dry_run: bool, yes: bool, as_json: bool, fmt: str) -> int:
    for n in plan.notes_index:
        output.note(n)
    for n in plan.notes:
        output.warn(n)
    if dry_run:
        return _report(prune.dry_run(plan), as_json, fmt)
    removals = len(plan.removals)  # a count: the decisions stay in the plan's database
    if not removals:  # nothing to remove; execute only forgets stale intents of past runs
        return _report(prune.execute(plan), as_json, fmt)
    if not yes:
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            _report(prune.dry_run(plan), as_json, fmt)
            output.note("agentdb: nothing removed: no terminal to confirm on; pass --yes to remove")
            return errors.EXIT_PROBLEMS
        preview = prune.dry_run(plan)
        _show(preview, fmt)
        pinned = plan.pinned_removals
        if pinned:
            output.note(f"{pinned} of them are pinned (--include-pinned); they pin:")
            for v in preview.versions:
                if v.removed:
                    output.note(f"  {_version_line(v)}")
        if not click.confirm(
            f"Remove {removals} session(s), {output.human_bytes(plan.bytes)}"
            + (f", {pinned} of them pinned" if pinned else "")
            + "?",
            default=False,
            err=True,
        ):
            output.note("agentdb: nothing removed")
            return errors.EXIT_PROBLEMS
    bar = output.ProgressLine("prune")
    try:
        result = prune.execute(plan, progress=bar.update)
    finally:
        bar.close()
    return _report(result, as_json, fmt)


def _report(result: prune.PruneResult, as_json: bool, fmt: str) -> int:
    if as_json:
        output.emit_json_stream(result.json_parts())
    else:
        _show(result, fmt)
    done = len(result.removed) + len(result.refused)
    return finish(not problems(result), result.interrupted, done, "removed or refused")


# Refusals by prune's own rules, each with the option that lifts it (--include-pinned,
# --with-descendants, --include-damaged): prune did what it was asked (exit 0) when these are all
# that kept a session. Any other reason (running: an interrupted session to end first; live,
# damaged, foreign, not found, changed, failed) is a problem found or a part not done: exit 1.
POLICY = frozenset({"pinned", "has_children", "has_corrupt_copies"})


def problems(result: prune.PruneResult) -> list[str]:
    """The refused sessions kept for a reason that is not one of prune's rules."""
    return [d.session_id for d in result.refused if any(r.code not in POLICY for r in d.reasons)]


REFUSED_ROWS = 10  # refused sessions listed in the text report without -v


def _version_line(v: prune.VersionUse) -> str:
    after = (
        "no session references it after this prune"
        if v.unreferenced_after
        else f"{v.staying} session(s) that stay still reference it"
    )
    return f"{'/'.join(v.version)}: pinned by {v.removed} removed session(s); {after}"


def _rows(result: prune.PruneResult, refused: int) -> Iterator[tuple[str, str, str]]:
    """The table's rows, as it draws them (the plan's lists are read as they go)."""
    verb = "would remove" if result.dry_run else "removed"
    ids = result.would_remove if result.dry_run else result.removed
    for sid in ids:
        yield (sid, verb, "")
    shown = result.refused if output.verbose() else result.refused[:REFUSED_ROWS]
    listed = 0
    for d in shown:
        listed += 1
        for i, r in enumerate(d.reasons):
            yield (
                d.session_id if i == 0 else "",
                "refused" if i == 0 else "",
                f"{r.code}: {r.message}",
            )
    hidden = refused - listed
    if hidden:
        yield ("…", f"and {hidden} more refused", "-v lists every one; --json too")


def _show(result: prune.PruneResult, fmt: str) -> None:
    ids = result.would_remove if result.dry_run else result.removed
    refused = len(result.refused)
    output.emit_table(_rows(result, refused), ["session", "action", "reason"], fmt)
    if refused:
        output.emit_text("")
        output.emit_table(
            [(code, str(n)) for code, n in result.by_reason.items()],
            ["refused because", "sessions"],
            fmt,
        )
    if result.versions:
        output.emit_text("")
        output.emit_table(
            [
                (
                    "/".join(v.version),
                    str(v.selected),
                    str(v.outside),
                    "unreferenced" if v.unreferenced_after else f"{v.staying} still reference it",
                )
                for v in result.versions
            ],
            ["cached version", "selected sessions it pins", "referenced outside", "after"],
            fmt,
        )
    if result.dry_run:
        freed = output.human_bytes(result.would_free_bytes)
        done = f"{len(ids)} session(s) would be removed, {freed} to free"
    else:
        freed = output.human_bytes(result.freed_bytes)
        done = f"{len(ids)} session(s) removed, {freed} freed"
    output.note(f"{done}; {refused} refused")
    if result.unreferenced:
        names = ", ".join("/".join(v.version) for v in result.unreferenced)
        would = "would reference" if result.dry_run else "references"
        output.note(
            f"no session that stays {would} {names}: `agentdb plugins refs` lists "
            f"{'them' if len(result.unreferenced) > 1 else 'it'} as unreferenced"
            + (
                f" (but {result.unknown_references} unreadable session(s) may)"
                if result.unknown_references
                else ""
            )
        )
    elif result.by_reason.get("pinned"):
        output.note(
            "pinned sessions stay while their plugin version is cached; "
            "--include-pinned removes them (the versions stay cached)"
        )


def _leftovers(
    app: App, ids: tuple[str, ...], *, dry_run: bool, yes: bool, as_json: bool, fmt: str
) -> int:
    """``prune --leftovers``: list the kept copies, then remove them once confirmed."""
    sessions_dir = app.require_sessions_dir()
    found = leftovers.find(sessions_dir, frozenset(ids) if ids else None)
    size = output.human_bytes(sum(x.bytes for x in found))
    if dry_run or not found:
        _show_leftovers(found, dry_run=True, as_json=as_json, fmt=fmt)
        if found:
            output.note(
                f"{len(found)} kept copies would be removed, {size} to free; "
                "`agentdb prune --leftovers --yes` removes them"
                + (" (of these sessions)" if ids else "")
            )
        else:
            output.note("no kept copies (.corrupt, .pre-restore) to remove")
        return errors.EXIT_OK
    if not yes:
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            _show_leftovers(found, dry_run=True, as_json=as_json, fmt=fmt)
            output.note("agentdb: nothing removed: no terminal to confirm on; pass --yes to remove")
            return errors.EXIT_PROBLEMS
        _show_leftovers(found, dry_run=True, as_json=False, fmt=fmt)
        if not click.confirm(
            f"Remove {len(found)} kept copies, {size}? What they hold is gone for good",
            default=False,
            err=True,
        ):
            output.note("agentdb: nothing removed")
            return errors.EXIT_PROBLEMS
    done = leftovers.remove(sessions_dir, found)
    _show_leftovers(done, dry_run=False, as_json=as_json, fmt=fmt)
    removed = [x for x in done if x.action == "removed"]
    skipped = len(done) - len(removed)
    output.note(
        f"{len(removed)} kept copies removed, {output.human_bytes(sum(x.bytes for x in removed))}"
        f" freed; {skipped} skipped"
    )
    return errors.EXIT_OK if not skipped else errors.EXIT_PROBLEMS


def _show_leftovers(
    found: list[leftovers.Leftover], *, dry_run: bool, as_json: bool, fmt: str
) -> None:
    if as_json:
        removed = [x for x in found if x.action == "removed"]
        output.emit_json(
            {
                "version": 1,
                "dry_run": dry_run,
                "leftovers": [x.to_json() for x in found],
                "summary": {
                    "copies": len(found),
                    "bytes": sum(x.bytes for x in found),
                    "removed": len(removed),
                    "skipped": sum(1 for x in found if x.action == "skipped"),
                    "freed_bytes": sum(x.bytes for x in removed),
                },
            }
        )
        return
    output.emit_table(
        (
            (
                x.session_id,
                x.name.split(".sqlite.", 1)[1],
                len(x.files),
                output.human_bytes(x.bytes),
                x.action.replace("_", " ") + (f": {x.reason}" if x.reason else ""),
            )
            for x in found
        ),
        ["session", "kept as", "files", "size", "action"],
        fmt,
    )
