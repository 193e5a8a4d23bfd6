"""A one-line progress bar on stderr, shown only when stderr is a terminal."""

from __future__ import annotations

import sys
import time

import click


class ProgressBar:
    """Callable as ``progress(done, total)``; redraws at most ten times a second."""

    def __init__(self, label: str, *, enabled: bool | None = None) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = width * done // total if total else width
        bar = "#" * filled + "-" * (width - filled)
        click.echo(f"\r{self.label} [{bar}] {done}/{total}", err=True, nl=False)
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            click.echo("\r\x1b[K", err=True, nl=False)
            self._drawn = False
