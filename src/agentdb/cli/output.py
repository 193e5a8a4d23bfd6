"""The only code that writes to stdout. Reports as tabulate tables or one JSON document.

Progress, warnings and human notes go to stderr, so ``--json`` output is always parseable.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import click

_PLAIN = (str, int, float, bool, type(None))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def jsonable(obj: Any) -> Any:
    """Dataclasses, paths, enums and bytes as plain JSON values."""
    if type(obj) in _PLAIN:
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {n: jsonable(getattr(obj, n)) for n in _field_names(type(obj))}
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
    click.echo(json.dumps(jsonable(doc), ensure_ascii=True, sort_keys=False))


def emit_json_line(doc: Any) -> None:
    click.echo(json.dumps(jsonable(doc), ensure_ascii=True, separators=(",", ":")))


# Control characters (C0, DEL, C1) as visible escapes: text read from a session file may carry
# terminal escape sequences (a title change, a cursor move) or newlines that break a table.
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape; safe to print on a terminal."""
    return text.translate(_ESCAPES)


def emit_table(rows: Iterable[Sequence[Any]], headers: Sequence[str], fmt: str = "simple") -> None:
    """A table of ``rows``; every text cell goes through :func:`printable`."""
    rows = [[printable(c) if isinstance(c, str) else c for c in row] for row in rows]
    if rows:
        from tabulate import tabulate  # imported when a table is drawn: --json never needs it

        click.echo(tabulate(rows, headers=list(headers), tablefmt=fmt, disable_numparse=True))


def emit_text(text: str) -> None:
    click.echo(text)


def note(text: str) -> None:
    """A human note on stderr (summary lines, hints); one line, control characters escaped."""
    click.echo(printable(text), err=True)


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
    calling the object as ``bar(done, total)`` does the same, for callbacks.
    """

    def __init__(self, label: str, *, enabled: bool | None = None, width: int = 30):
        self.label = label
        self.enabled = is_terminal() if enabled is None else enabled
        self.width = width
        self.drawn = False
        self._last = 0.0

    def update(self, done: int, total: int, what: str = "") -> None:
        if not self.enabled or total <= 0:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        filled = self.width * done // total
        bar = "#" * filled + "-" * (self.width - filled)
        click.echo(f"\r{self.label} [{bar}] {done}/{total} {what}\x1b[K", err=True, nl=False)
        self.drawn = True

    def __call__(self, done: int, total: int) -> None:
        self.update(done, total)

    def session(self, out: Any, done: int, total: int) -> None:
        """A job's per-session callback: ``out`` is its outcome (anything with a session_id)."""
        self.update(done, total, out.session_id)

    def close(self) -> None:
        if self.drawn:
            click.echo("\r\x1b[K", err=True, nl=False)
            self.drawn = False
