"""The only code that writes to stdout. Reports as tabulate tables or one JSON document.

Progress, warnings and human notes go to stderr, so ``--json`` output is always parseable.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import io
import itertools
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from agentdb.errors import visible

_PLAIN = (str, int, float, bool, type(None))
_SIMPLE = frozenset((str, int, bool, type(None)))  # as they are (a float may not be finite)
_closed = False  # the reader of stdout went away: nothing more is written there
_drawn: ProgressLine | None = None  # the progress line on the terminal right now, if any


def _out(text: str, nl: bool = True) -> None:
    """One write to stdout. A reader that closed the pipe (``agentdb events ID | head -1``) is
    not an error: the rest of the output goes nowhere and the command ends with its own code."""
    global _closed
    if _closed:
        return
    if _drawn is not None:
        _drawn.close()  # a report streamed while a progress line is drawn: the line goes first
    try:
        click.echo(text, nl=nl)
    except BrokenPipeError:
        _closed = True
        discard_stdout()
    except OSError as e:  # /dev/full, a full disk, EIO: name stdout, not agentdb
        _closed = True
        discard_stdout()  # what is still buffered must not fail again at exit
        raise stdout_error(e) from None


def stdout_error(e: OSError) -> OSError:
    """``e`` (a failed write to stdout, which names no file) naming ``stdout``."""
    return OSError(e.errno, e.strerror or str(e), "stdout")


def discard_stdout() -> None:
    """Point stdout at /dev/null, so later writes and the interpreter's final flush of what is
    still buffered do not fail on the closed pipe."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (an in-process test runner's buffer)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def stdout_closed() -> bool:
    """True once the reader of stdout has gone: a streaming command can stop early."""
    return _closed


# Settings every command shares (-q, -v, --no-progress, --csv, --nl), kept in the click context's
# meta dictionary, which every nested context shares; see commands.COMMON_OPTIONS.
QUIET, VERBOSE, NO_PROGRESS, TABLE_STYLE = (
    "agentdb.quiet",
    "agentdb.verbose",
    "agentdb.no_progress",
    "agentdb.table",
)
CHUNK_ROWS = 1000  # a table is drawn this many rows at a time: memory stays flat in its length
MAX_CELL = 60  # a text cell wider than this wraps (never cut) when stdout is a terminal


def setting(key: str) -> Any:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(key) if ctx is not None else None


def verbose() -> bool:
    return bool(setting(VERBOSE))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def jsonable(obj: Any) -> Any:
    """Dataclasses, paths, enums and bytes as plain JSON values; a float that JSON cannot hold
    (a cost summed past the largest double, an ``inf`` another writer stored) is null, never
    the ``Infinity``/``NaN`` that ``json.dumps`` would write and no JSON parser reads."""
    if type(obj) is float and not math.isfinite(obj):
        return None
    if type(obj) in _PLAIN:
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for n in _field_names(type(obj)):
            v = getattr(obj, n)
            out[n] = v if type(v) in _SIMPLE else jsonable(v)  # the common case, inline
        return out
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, bytes | bytearray | memoryview):
        return bytes(obj).decode("utf-8", "backslashreplace")
    return obj


def emit_json(doc: Any) -> None:
    # ASCII-only JSON: text from a session file may hold C1 control characters (a terminal reads
    # U+009B as CSI), and an escaped \u009b is inert wherever the document is printed.
    _out(json.dumps(jsonable(doc), ensure_ascii=True, sort_keys=False, allow_nan=False))


class Later:
    """A value of a streamed document computed only when the renderer reaches it (a summary
    counted while the rows before it were written)."""

    def __init__(self, compute: Callable[[], Any]) -> None:
        self.compute = compute


def emit_json_stream(doc: dict[str, Any]) -> None:
    """``doc`` as one JSON document, byte for byte what :func:`emit_json` writes, but written as
    it goes: a value that is an iterator (not a list) is drawn :data:`CHUNK_ROWS` items at a time
    and a :class:`Later` is computed when reached, so memory stays flat in the number of rows.
    The reader closing the pipe stops the iteration."""

    def dumps(value: Any) -> str:
        return json.dumps(jsonable(value), ensure_ascii=True, allow_nan=False)

    parts = []
    for i, (key, value) in enumerate(doc.items()):
        head = ("{" if i == 0 else ", ") + dumps(str(key)) + ": "
        if isinstance(value, Later):
            value = value.compute()
        if not isinstance(value, Iterator):
            parts.append(head + dumps(value))
            continue
        _out("".join(parts) + head + "[", nl=False)
        parts = []
        sep = ""
        while not _closed and (chunk := list(itertools.islice(value, CHUNK_ROWS))):
            # one encoder call per chunk: "[a, b]" less its brackets is "a, b", the same bytes
            _out(sep + dumps(chunk)[1:-1], nl=False)
            sep = ", "
        parts.append("]")
    _out("".join(parts) + ("}" if doc else "{}"))


def emit_json_line(doc: Any) -> None:
    _out(json.dumps(jsonable(doc), ensure_ascii=True, separators=(",", ":"), allow_nan=False))


# Control characters (C0, DEL, C1) as visible escapes: text read from a session file may carry
# terminal escape sequences (a title change, a cursor move) or newlines that break a table.
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})


def printable(text: str) -> str:
    """``text`` with every control character, and every invisible character that reorders or
    hides text (U+202E and the other bidi overrides, zero-width characters), shown as an
    escape; safe to print on a terminal."""
    return visible(text.translate(_ESCAPES))


def emit_table(rows: Iterable[Sequence[Any]], headers: Sequence[str], fmt: str = "simple") -> None:
    """A table of ``rows``; every text cell goes through :func:`printable`.

    ``--csv`` writes CSV and ``--nl`` one JSON object per row instead. Rows are drawn
    :data:`CHUNK_ROWS` at a time, so a table of any length takes flat memory; for the plain
    formats every chunk is padded to the first chunk's column widths, so the columns line up.
    On a terminal, long text cells wrap at :data:`MAX_CELL` characters or less when the terminal
    is narrow (``-v`` never wraps); they are never cut.
    """
    style = setting(TABLE_STYLE)
    it = iter(rows)
    if style == "csv":
        _emit_csv(it, headers)
        return
    if style == "nl":
        for row in it:
            emit_json_line(dict(zip(headers, row, strict=False)))
        return
    widths: list[int] | None = None
    wrap = False
    first = True
    while chunk := [_cells(row) for row in itertools.islice(it, CHUNK_ROWS)]:
        if widths is None:
            widths, wrap = _widths(chunk, headers)
        if fmt in _PADDABLE:
            fast = None if wrap else _simple(chunk, headers if first else None, widths, fmt)
            if fast is not None:
                _out(fast)
            else:
                padded = [
                    [_pad(c, w, wrap) for c, w in zip(r, widths, strict=False)] for r in chunk
                ]
                # Later chunks: the same padded columns, without the header or rule lines.
                _draw(padded, headers if first else None, fmt if first else "plain", None)
        else:
            _draw(chunk, headers, fmt, widths if wrap else None)
        first = False


def _simple(
    chunk: list[list[Any]], headers: Sequence[str] | None, widths: list[int], fmt: str
) -> str | None:
    """The chunk as tabulate draws it in the ``simple`` or ``plain`` format (cells stripped and
    left-aligned, columns two spaces apart, each line right-stripped), each column padded to
    ``widths``: the same bytes without tabulate's pass over every cell to guess its type. None
    when a cell needs tabulate (not text or an integer, several lines, non-ASCII characters
    whose width tabulate measures its own way) or a row has another number of cells."""
    n = len(widths)
    lines = []
    if headers is not None:
        if len(headers) != n or not all(h.isascii() and "\n" not in h for h in headers):
            return None
        lines.append(
            "  ".join(h.strip().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
        )
        if fmt == "simple":
            lines.append("  ".join("-" * w for w in widths))
    for row in chunk:
        if len(row) != n:
            return None
        cells = []
        for c, w in zip(row, widths, strict=True):
            if type(c) is int:
                c = str(c)
            elif c is None:
                c = ""
            elif type(c) is not str or not c.isascii() or "\n" in c:
                return None
            cells.append(c.ljust(w))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


_PADDABLE = {"simple", "plain"}


def _cells(row: Sequence[Any]) -> list[Any]:
    # stripped, as tabulate shows a cell (and measures its width)
    return [printable(c).strip() if isinstance(c, str) else c for c in row]


def _widths(chunk: list[list[Any]], headers: Sequence[str]) -> tuple[list[int], bool]:
    """Column widths from the first chunk, and whether to wrap to them.

    Elsewhere than on a terminal (and with -v) they are the first chunk's natural widths. On a
    terminal, columns of short values (ids, statuses, sizes: up to :data:`_KEEP` wide) keep
    their width, and the long ones (messages, paths) are capped at :data:`MAX_CELL` and then
    narrowed, widest first, down to 12 characters, until the table fits the terminal.
    """
    ncols = max(len(headers), *(len(r) for r in chunk))
    # tabulate gives a column at least its header's width plus two
    natural = [len(headers[i]) + 2 if i < len(headers) else 0 for i in range(ncols)]
    for row in chunk:
        for i, c in enumerate(row):
            natural[i] = max(natural[i], 0 if c is None else len(str(c)))
    if not sys.stdout.isatty() or verbose():
        return natural, False
    import shutil  # only a terminal's table needs it (with bz2 and lzma)

    budget = shutil.get_terminal_size((100, 24)).columns - 2 * (ncols - 1)
    widths = [w if w <= _KEEP else min(w, MAX_CELL) for w in natural]
    while sum(widths) > budget:
        widest = max(range(ncols), key=lambda i: widths[i] if natural[i] > _KEEP else -1)
        if natural[widest] <= _KEEP or widths[widest] <= 12:
            break  # nothing left to narrow: the table is wider than the terminal
        widths[widest] -= 1
    return widths, True


_KEEP = 28


def _pad(cell: Any, width: int, wrap: bool) -> Any:
    if type(cell) is int:
        cell = str(cell)  # as tabulate shows it; padded, so every chunk keeps the column's width
    if not isinstance(cell, str):
        return cell
    if len(cell) <= width or not wrap:
        return cell.ljust(width)
    import textwrap

    return "\n".join(
        line.ljust(width) for line in textwrap.wrap(cell, width, break_on_hyphens=False)
    )


def _draw(
    chunk: list[list[Any]], headers: Sequence[str] | None, fmt: str, widths: list[int] | None
) -> None:
    from tabulate import tabulate  # imported when a table is drawn: --json never needs it

    kwargs: dict[str, Any] = {"tablefmt": fmt, "disable_numparse": True}
    if widths is not None and fmt not in _PADDABLE:
        kwargs["maxcolwidths"] = widths
    if headers is None:
        # A continuation chunk: same widths, no header line.
        text = tabulate(chunk, headers=(), **kwargs)
    else:
        text = tabulate(chunk, headers=list(headers), **kwargs)
    _out(text)


def _emit_csv(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> None:
    import csv

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(headers)
    it = iter(rows)
    while True:
        chunk = list(itertools.islice(it, CHUNK_ROWS))
        # CSV quotes what it must; control characters are escaped only on a terminal.
        writer.writerows([_cells(r) for r in chunk] if sys.stdout.isatty() else chunk)
        _out(buf.getvalue(), nl=False)
        buf.seek(0)
        buf.truncate()
        if not chunk:
            break


def emit_text(text: str) -> None:
    _out(text)


def note(text: str) -> None:
    """A human note on stderr (summary lines, hints); one line, control characters escaped.
    Silent with ``-q``."""
    if not setting(QUIET):
        click.echo(printable(text), err=True)


def detail(text: str) -> None:
    """A note shown only with ``-v``."""
    if verbose() and not setting(QUIET):
        click.echo(printable(text), err=True)


def error(
    message: str,
    *,
    code: str,
    exit_code: int,
    path: str | None = None,
    as_json: bool | None = None,
) -> None:
    """The one line an error gets on stderr: ``agentdb: <message>``, or under ``--json`` one
    JSON object ``{"version", "error": {"code", "message", "path", "exit"}}``. ``as_json``
    None: whether the running command was given ``--json``."""
    if as_json is None:
        ctx = click.get_current_context(silent=True)
        as_json = ctx is not None and bool(ctx.meta.get("agentdb.json_errors"))
    if as_json:
        doc = {
            "version": 1,
            "error": {"code": code, "message": message, "path": path, "exit": exit_code},
        }
        click.echo(json.dumps(doc, ensure_ascii=True), err=True)
    else:
        click.echo(f"agentdb: {printable(message)}", err=True)


def warn(text: str) -> None:
    click.echo(f"agentdb: warning: {printable(text)}", err=True)


def is_terminal() -> bool:
    return sys.stderr.isatty()


def human_bytes(n: int | float) -> str:
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"


class ProgressLine:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal.

    ``update(done, total, what)`` redraws at most ten times a second (and always at the end);
    an update that comes too soon is drawn a moment later, so a burst of updates followed by a
    long wait never leaves a stale count on the screen. Calling the object as
    ``bar(done, total)`` does the same, for callbacks.
    """

    INTERVAL = 0.1  # seconds between redraws

    def __init__(self, label: str, *, enabled: bool | None = None, width: int = 30):
        self.label = label
        if enabled is None:
            enabled = is_terminal() and not setting(QUIET) and not setting(NO_PROGRESS)
        self.enabled = enabled
        self.width = width
        self.drawn = False
        self._last = 0.0
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._pending: tuple[int, int, str] | None = None  # skipped, to be drawn by the timer
        self._timer: threading.Timer | None = None

    def update(self, done: int, total: int, what: str = "") -> None:
        global _drawn
        if not self.enabled or total <= 0:
            return
        with self._lock:
            now = time.monotonic()
            wait = self.INTERVAL - (now - self._last)
            if done < total and wait > 0:
                self._pending = (done, total, what)
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._flush)
                    self._timer.daemon = True
                    self._timer.start()
                _drawn = self  # a report written meanwhile closes it first (no late redraw)
                return
            self._draw(done, total, what, now)

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
            if self._pending is not None:
                self._draw(*self._pending, time.monotonic())

    def _draw(self, done: int, total: int, what: str, now: float) -> None:
        self._pending = None
        self._last = now
        click.echo(f"\r{self.line(done, total, now)} {what}\x1b[K", err=True, nl=False)
        self.drawn = True
        global _drawn
        _drawn = self

    def line(self, done: int, total: int, now: float) -> str:
        """``label [####----] done/total  rate/s  ETA m:ss`` (rate and ETA once measurable)."""
        filled = self.width * min(done, total) // total
        bar = "#" * filled + "-" * (self.width - filled)
        text = f"{self.label} [{bar}] {done}/{total}"
        elapsed = now - self._start
        if done > 0 and elapsed > 0:
            rate = done / elapsed
            eta = int((total - done) / rate) if rate > 0 else 0
            text += f"  {rate:.1f}/s  ETA {eta // 60}:{eta % 60:02d}"
        return text

    def __call__(self, done: int, total: int) -> None:
        self.update(done, total)

    def session(self, out: Any, done: int, total: int) -> None:
        """A job's per-session callback: ``out`` is its outcome (anything with a session_id)."""
        self.update(done, total, out.session_id)

    def close(self) -> None:
        global _drawn
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._pending = None
            if self.drawn:
                click.echo("\r\x1b[K", err=True, nl=False)
                self.drawn = False
            if _drawn is self:
                _drawn = None
