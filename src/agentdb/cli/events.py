"""``agentdb events ID``: a session's event log in sequence order."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import click

from agentdb.cli import output
from agentdb.cli.common import EXIT_INTERRUPTED, SESSION_ID, App, fmt_option, json_option
from agentdb.cli.params import INT64_MAX
from agentdb.schema import enums
from agentdb.store import EventRow
from agentdb.views import eventlog

PREVIEW = 60  # characters of payload a table row shows


def _decode(payload: bytes | str, truncated: bool) -> str | None:
    """The payload as text when it is UTF-8 (a cut multi-byte character at a cap is dropped)."""
    if isinstance(payload, str):
        return payload
    for cut in range(4 if truncated else 1):
        try:
            return payload[: len(payload) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


JSON_VERSION = 1  # of each line (src/agentdb/schemas/events.json)


def _json(e: EventRow) -> dict[str, Any]:
    text = _decode(e.payload, e.truncated)
    doc: dict[str, Any] = {
        "version": JSON_VERSION,
        "sequence": e.sequence,
        "id": e.id,
        "timestamp": e.timestamp,
        "kind": e.kind,
        "producer": {
            "category": e.producer_category,
            "name": e.producer_name,
            "version": e.producer_version,
        },
        "schema_version": e.schema_version,
        "payload_length": e.payload_length,
        "truncated": e.truncated,
    }
    if text is not None:
        doc.update(payload_encoding="utf-8", payload=text)
    else:
        raw = e.payload if isinstance(e.payload, bytes) else e.payload.encode()
        doc.update(payload_encoding="base64", payload=base64.b64encode(raw).decode())
    return doc


def _preview(e: EventRow) -> str:
    """A safe one-line preview: control and non-printable characters escaped."""
    text = _decode(e.payload, e.truncated)
    if text is None:
        raw = e.payload if isinstance(e.payload, bytes) else b""
        return "0x" + raw[: PREVIEW // 2].hex() + ("..." if len(raw) > PREVIEW // 2 else "")
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: PREVIEW * 2])
    return shown[:PREVIEW] + ("..." if len(shown) > PREVIEW or e.truncated else "")


@click.command("events")
@click.argument("session_id", type=SESSION_ID)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(enums.KINDS),
    help="Only events of this kind (repeatable).",
)
@click.option(
    "--after",
    type=click.IntRange(-INT64_MAX - 1, INT64_MAX),
    default=None,
    metavar="SEQ",
    help="Only events with a sequence greater than SEQ (default: every event, a revision-1 "
    "file's sequence 0 or below too).",
)
@click.option(
    "--max-payload",
    type=click.IntRange(0, 16 * 1024 * 1024),
    default=4096,
    show_default=True,
    metavar="BYTES",
    help="Bytes of each payload read and shown (JSON marks longer ones truncated).",
)
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep printing new events as the session's kernel appends them, like tail -f "
    "(read-only polling); ends when the session is no longer running (exit 0) or on Ctrl-C "
    "(exit 130).",
)
@json_option
@fmt_option
@click.pass_obj
def events_cmd(
    app: App,
    session_id: str,
    kinds: tuple[str, ...],
    after: int | None,
    max_payload: int,
    follow: bool,
    as_json: bool,
    fmt: str,
) -> int:
    """Print a session's events in sequence order (the only ordering authority).

    With --json, one JSON object per line: the envelope, payload_length, truncated, and the
    payload as UTF-8 text or, when it is not UTF-8, base64 (payload_encoding says which).

    Every event that can be read is printed (past a damaged row or page, reading resumes at
    the next event that reads); then the file is judged as `agentdb check` judges it (or by
    the verdict check recorded for it as it is now): exit status 1 when it is corrupt or
    unreadable, with one line on stderr saying which events could not be read.

    With --follow, events are printed as they are committed (one line each, flushed) until
    the session's status is no longer running; the file is read, never written or locked.
    """
    log = eventlog.EventLog(
        app.require_sessions_dir(),
        session_id,
        kinds=kinds or None,
        after=after,
        payload_cap=max_payload,
    )
    read = _Reading()
    if follow:
        return _follow(log, read, as_json)
    it = iter(log)
    if as_json:
        for e in read.events(it):
            output.emit_json_line(_json(e))
            if output.stdout_closed():
                break  # the reader has what it wanted (`| head -1`)
    else:
        output.emit_table(
            (_row(e) for e in read.events(it)), HEADERS, fmt, optional=("bytes", "producer")
        )
    if read.interrupted:
        output.warn(f"interrupted: the {read.count} event(s) read before Ctrl-C are printed")
        return EXIT_INTERRUPTED
    if output.stdout_closed():
        return 0  # the reader stopped reading: it has what it wanted, nothing is judged
    return _judged(log)


HEADERS = ["seq", "timestamp", "kind", "producer", "bytes", "payload"]
# --follow's columns: fixed widths, so rows printed minutes apart still line up
_FOLLOW_WIDTHS = (8, 23, 20, 30, 8)


def _follow_line(cells: tuple[Any, ...]) -> str:
    parts = []
    for i, (cell, width) in enumerate(zip(cells, _FOLLOW_WIDTHS, strict=False)):
        text = output.printable(str(cell))
        if len(text) > width and i == 3:  # a long producer: its end (the version) matters most
            text = "…" + text[-(width - 1) :]
        parts.append(text.rjust(width) if i in (0, 4) else text.ljust(width))
    return "  ".join([*parts, output.printable(str(cells[-1]))]).rstrip()


def _follow(log: eventlog.EventLog, read: _Reading, as_json: bool) -> int:
    """``--follow``: each event as one flushed line (or JSON line) as it is committed."""

    def idle() -> None:
        output.note(
            f"{log.path}: no process has the session open (its kernel may have died: "
            f"`agentdb sessions end {log.session_id} --dry-run`); following anyway, Ctrl-C to stop"
        )

    if not as_json:
        output.emit_text(_follow_line(tuple(HEADERS)))
    for e in read.events(log.follow(on_idle=idle)):
        if as_json:
            output.emit_json_line(_json(e))
        else:
            output.emit_text(_follow_line(_row(e)))
        if output.stdout_closed():
            return 0
    if read.interrupted:
        output.note(f"stopped following: {read.count} event(s) printed")
        return EXIT_INTERRUPTED
    return _judged(log)


def _span(a: int, b: int) -> str:
    if a <= -INT64_MAX - 1:
        return f"up to {b}"  # from the start of the log, whatever its lowest sequence
    return f"{a}..{b}" if a != b else str(a)


def _judged(log: eventlog.EventLog) -> int:
    """Exit 1, with one line on stderr, when the judge calls the file corrupt or unreadable."""
    try:
        j = log.judgement()
    except KeyboardInterrupt:
        output.warn(f"interrupted: the {log.count} event(s) read are printed, the file not judged")
        return EXIT_INTERRUPTED
    stopped = ""
    if log.error is not None:
        why = log.error.problem or str(log.error)
        ranges = ", ".join(_span(a, b) for a, b in log.skipped[:5])
        more = f" (+{len(log.skipped) - 5} more)" if len(log.skipped) > 5 else ""
        passed = f"; sequences {ranges}{more} could not be read" if ranges else ""
        stopped = f"printed {log.count} readable event(s) ({why}{passed}); "
    if j.damaged or log.error is not None:
        output.error(
            f"{log.path}: {stopped}{j.describe()}",
            code=j.verdict if j.damaged else "read_error",
            exit_code=1,
            path=str(log.path),
        )
        return 1
    return 0


class _Reading:
    """Events as they are read; Ctrl-C ends the reading, and what was read is still printed."""

    def __init__(self) -> None:
        self.count = 0
        self.interrupted = False

    def events(self, it: Iterator[EventRow]) -> Iterator[EventRow]:
        try:
            for e in it:
                self.count += 1
                yield e
        except KeyboardInterrupt:
            self.interrupted = True


def _row(e: EventRow) -> tuple[Any, ...]:
    return (
        e.sequence,
        output.when(e.timestamp, ms=True),
        e.kind,
        f"{e.producer_category}/{e.producer_name}@{e.producer_version}",
        e.payload_length,
        _preview(e),
    )
