"""The only code that writes to stdout. Reports as tabulate tables or one JSON document.

Progress, warnings and human notes go to stderr, so ``--json`` output is always parseable.

Size: over 500 lines because it is the only code that writes to stdout: tables that fit the
terminal, JSON, progress and notes share the terminal's state.
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

from agentdb import times
from agentdb.cli import tables
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
QUIET, VERBOSE, NO_PROGRESS, TABLE_STYLE, WIDE, LOCAL = (
    "agentdb.quiet",
    "agentdb.verbose",
    "agentdb.no_progress",
    "agentdb.table",
    "agentdb.wide",
    "agentdb.local",
)
CHUNK_ROWS = 1000  # a table is drawn this many rows at a time: memory stays flat in its length


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


def emit_table(
    rows: Iterable[Sequence[Any]],
    headers: Sequence[str],
    fmt: str = "simple",
    *,
    optional: Sequence[str] = (),
) -> None:
    """A table of ``rows``; every text cell goes through :func:`printable`.

    ``--csv`` writes CSV and ``--nl`` one JSON object per row instead. Column widths are those
    of the whole table: rows past the first :data:`CHUNK_ROWS` are measured while they are
    spooled to a temporary file, then every chunk is drawn to the same widths, so a table of
    any length takes flat memory and its columns line up.

    On a terminal (stdout a tty, no ``-v``/``--wide``) the table fits the terminal's width
    (:mod:`agentdb.cli.tables`): ids shortened to an unambiguous prefix, long cells wrapped
    (never cut), and, if that is not enough, the ``optional`` columns left out (in the order
    given; a note on stderr names them). Elsewhere the rows are drawn as they are.
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
    terminal = sys.stdout.isatty() and not wide()
    sheet = _Sheet(headers, terminal)
    first = [_cells(row) for row in itertools.islice(it, CHUNK_ROWS)]
    sheet.measure(first)
    with _Spool(it, sheet) as spool:
        if terminal:
            _draw_fitted(sheet, spool.chunks(first), headers, fmt, optional)
        else:
            _draw_natural(sheet, spool.chunks(first), headers, fmt)


class _Sheet:
    """What a table's layout needs to know of all its rows: the widest cell of each column and,
    for a terminal, the ids its id columns show."""

    def __init__(self, headers: Sequence[str], terminal: bool) -> None:
        self.natural = [0] * len(headers)
        self.idcols = (
            [i for i, h in enumerate(headers) if h in tables.ID_HEADERS] if terminal else []
        )
        self.ids: set[str] = set()
        self.spaced: set[int] = set()  # the columns with a space in some cell

    def measure(self, chunk: list[list[Any]]) -> None:
        natural = self.natural
        idcols = self.idcols
        for row in chunk:
            if len(row) > len(natural):
                natural.extend([0] * (len(row) - len(natural)))
            for i, c in enumerate(row):
                if idcols and i in idcols and tables.is_ulid(c):
                    self.ids.add(c)
                    continue
                if type(c) is str:
                    w = tables.cell_width(c)
                    if " " in c:
                        self.spaced.add(i)
                else:
                    w = 0 if c is None else tables.cell_width(str(c))
                if w > natural[i]:
                    natural[i] = w


class _Spool:
    """The rows after the first chunk, measured and kept in a temporary file until the widths
    of the whole table are known."""

    def __init__(self, rest: Iterator[Sequence[Any]], sheet: _Sheet) -> None:
        self.rest = rest
        self.sheet = sheet
        self.file: Any = None

    def __enter__(self) -> _Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()

    def chunks(self, first: list[list[Any]]) -> Iterator[list[list[Any]]]:
        import pickle

        if len(first) == CHUNK_ROWS:
            import tempfile

            self.file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by __exit__)
            count = 0
            while chunk := [_cells(row) for row in itertools.islice(self.rest, CHUNK_ROWS)]:
                self.sheet.measure(chunk)
                pickle.dump(chunk, self.file, protocol=pickle.HIGHEST_PROTOCOL)
                count += 1
            self.file.seek(0)
        else:
            count = 0
        if first:
            yield first
        for _ in range(count):
            yield pickle.load(self.file)


def _draw_natural(
    sheet: _Sheet, chunks: Iterator[list[list[Any]]], headers: Sequence[str], fmt: str
) -> None:
    """Every chunk drawn at the natural widths of the whole table (the header at least two
    wider than its text, as tabulate draws it)."""
    natural = sheet.natural
    first = next(chunks, None)  # measures the spooled rows
    widths = [
        max(natural[i], len(headers[i]) + 2 if i < len(headers) else 0) for i in range(len(natural))
    ]
    firstchunk = True
    for chunk in itertools.chain([first] if first is not None else [], chunks):
        if fmt in _PADDABLE:
            fast = _simple(chunk, headers if firstchunk else None, widths, fmt)
            if fast is not None:
                _out(fast)
            else:
                padded = [[_pad(c, w) for c, w in zip(r, widths, strict=False)] for r in chunk]
                # Later chunks: the same padded columns, without the header or rule lines.
                _draw(padded, headers if firstchunk else None, fmt if firstchunk else "plain")
        else:
            _draw(chunk, headers, fmt)
        firstchunk = False


def _draw_fitted(
    sheet: _Sheet,
    chunks: Iterator[list[list[Any]]],
    headers: Sequence[str],
    fmt: str,
    optional: Sequence[str],
) -> None:
    """Every chunk drawn to fit the terminal: ids shortened, cells wrapped, optional columns
    left out when they must be."""
    first = next(chunks, None)  # measures the spooled rows
    if first is None:
        return  # no rows: no table, as before
    natural = list(sheet.natural)
    id_len = tables.id_length(sheet.ids) if sheet.ids else None
    for i in sheet.idcols:
        if id_len is not None and i < len(natural):
            natural[i] = max(natural[i], id_len)
    cols = tables.terminal_width(_stdout_fd())
    heads = [headers[i] if i < len(headers) else "" for i in range(len(natural))]
    unbroken = [i for i in range(len(natural)) if i not in sheet.spaced]
    if fmt in _PADDABLE:
        layout = tables.fit(
            natural,
            heads,
            cols,
            optional=optional,
            overhead=tables.GAP,
            whole=sheet.idcols,
            unbroken=unbroken,
        )
    else:
        from tabulate import MIN_PADDING, tabulate

        n = len(natural)
        probe = tabulate([["x"] * n], headers=["h"] * n if any(heads) else (), tablefmt=fmt)
        extra = max(len(line) for line in probe.splitlines()) - n * (1 + MIN_PADDING * any(heads))
        layout = tables.fit(
            natural,
            heads,
            cols - extra,
            optional=optional,
            header_pad=MIN_PADDING * any(heads),
            whole=sheet.idcols,
            unbroken=unbroken,
        )
    if layout.dropped:
        note(f"hidden to fit {cols} columns: {', '.join(layout.dropped)} (--wide shows them)")
    keep, widths = layout.keep, layout.widths
    idcols = set(sheet.idcols)

    def cells(row: Sequence[Any]) -> list[str]:
        out = []
        for i in keep:
            c = row[i] if i < len(row) else None
            if id_len is not None and i in idcols and isinstance(c, str) and tables.is_ulid(c):
                c = c[:id_len]
            out.append(tables.text(c))
        return out

    shown = [heads[i] for i in keep]
    firstchunk = True
    for chunk in itertools.chain([first], chunks):
        rows = [cells(r) for r in chunk]
        if fmt in _PADDABLE:
            lines = tables.draw_simple(
                rows, shown if firstchunk else None, widths, rule=fmt == "simple"
            )
            if lines:
                _out("\n".join(lines))
        else:
            pad = MIN_PADDING * any(heads)
            wrapped = [
                [
                    "\n".join(tables.ljust(x, w) for x in tables.wrap(c, w))
                    for c, w in zip(r, widths, strict=True)
                ]
                for r in rows
            ]
            hs = ["\n".join(tables.wrap(h, w - pad)) for h, w in zip(shown, widths, strict=True)]
            _draw(wrapped, hs if any(heads) else None, fmt)
        firstchunk = False


def _stderr_fd() -> int:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


def when(value: str | None, *, ms: bool = False) -> str:
    """A stored time as tables show it: RFC 3339 UTC with ``Z``; local time with its offset
    with ``--local`` or when ``$TZ`` is set (:mod:`agentdb.times`)."""
    local = bool(setting(LOCAL)) or bool(os.environ.get("TZ"))
    return times.show(value, local=local, ms=ms)


def wide() -> bool:
    """``-v`` or ``--wide``: tables as they are, every column, whole ids, nothing wrapped."""
    return verbose() or bool(setting(WIDE))


def _stdout_fd() -> int:
    try:
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return 1


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


def _pad(cell: Any, width: int) -> Any:
    if type(cell) is int:
        cell = str(cell)  # as tabulate shows it; padded, so every chunk keeps the column's width
    if not isinstance(cell, str):
        return cell
    return cell.ljust(width)


def _draw(chunk: list[list[Any]], headers: Sequence[str] | None, fmt: str) -> None:
    from tabulate import tabulate  # imported when a table is drawn: --json never needs it

    text = tabulate(chunk, headers=list(headers or ()), tablefmt=fmt, disable_numparse=True)
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


def emit_wrapped(text: str, indent: str = "", *, command: bool = False) -> None:
    """``indent`` + ``text`` (made printable), wrapped to the terminal's width when stdout is a
    terminal (not with ``-v``/``--wide``), continuation lines indented as the first; a
    ``command`` continues its lines with `` \\`` so it can be pasted into a shell as it is."""
    text = printable(text)
    if not sys.stdout.isatty() or wide():
        _out(indent + text)
        return
    room = tables.terminal_width(_stdout_fd()) - tables.cell_width(indent) - (2 if command else 0)
    lines = tables.wrap(text, max(room, 20))
    tail = " \\" if command else ""
    _out(
        "\n".join(
            indent + line + (tail if k < len(lines) - 1 else "") for k, line in enumerate(lines)
        )
    )


def note(text: str) -> None:
    """A human note on stderr (summary lines, hints); one line, control characters escaped.
    Silent with ``-q``."""
    if not setting(QUIET):
        _erase_progress()
        click.echo(printable(text), err=True)


def detail(text: str) -> None:
    """A note shown only with ``-v``."""
    if verbose() and not setting(QUIET):
        _erase_progress()
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


def _erase_progress() -> None:
    """A line for stderr while a progress line is drawn: the progress line goes first."""
    if _drawn is not None:
        _drawn.close()


def warn(text: str) -> None:
    _erase_progress()
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
        cols = tables.terminal_width(_stderr_fd())
        click.echo(f"\r{self.line(done, total, now, what, cols)}\x1b[K", err=True, nl=False)
        self.drawn = True
        global _drawn
        _drawn = self

    def line(self, done: int, total: int, now: float, what: str = "", cols: int = 0) -> str:
        """``label [####----] done/total  rate/s  ETA m:ss  what`` (rate and ETA once
        measurable), at most ``cols - 1`` columns wide when ``cols`` is given (the last column
        is left free: a line that fills it wraps on some terminals, and ``\r`` would then
        redraw only its second half): the bar narrows, then goes, then ``what`` is clipped."""
        count = f"{done}/{total}"
        elapsed = now - self._start
        if done > 0 and elapsed > 0:
            rate = done / elapsed
            eta = int((total - done) / rate) if rate > 0 else 0
            count += f"  {rate:.1f}/s  ETA {eta // 60}:{eta % 60:02d}"
        room = cols - 1 if cols > 0 else 10**6
        what = printable(what)
        fixed = len(self.label) + 1 + len(count) + (1 + len(what) if what else 0)
        width = min(self.width, room - fixed - 3)
        if width >= 5:
            filled = width * min(done, total) // total
            bar = "[" + "#" * filled + "-" * (width - filled) + "] "
        else:
            bar = ""
        text = f"{self.label} {bar}{count}" + (f" {what}" if what else "")
        return text[:room]  # what is clipped last: a progress line is never a record

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
