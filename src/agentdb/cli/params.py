"""Click parameter types shared by several commands.

Each rejects a value it cannot act on before anything runs, as a one-line usage error naming
the option: an empty path, a number SQLite or a clock cannot hold, NaN, a table format tabulate
does not know, a directory that cannot be made where it is asked for.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from pathlib import Path
from typing import Any

import click

INT64_MAX = 2**63 - 1  # SQLite's integers: a larger sequence number cannot exist


class DurationType(click.ParamType):
    """``90d``, ``12h``, ``1d12h``, ``1y``, ``0s`` (units s, m, h, d, w, y = 365 days)."""

    name = "DURATION"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dt.timedelta:
        if isinstance(value, dt.timedelta):
            return value
        from agentdb.durations import parse_duration  # only a command given a duration uses it

        try:
            return parse_duration(str(value))
        except (ValueError, OverflowError) as e:
            self.fail(str(e), param, ctx)


DURATION = DurationType()


class AgeType(click.ParamType):
    """A duration (``90d``) or a UTC date/time (``2026-01-31``, ``2026-01-31T12:00``), as an age
    from now: a date becomes "now minus that date"."""

    name = "WHEN"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dt.timedelta:
        if isinstance(value, dt.timedelta):
            return value
        text = str(value)
        from agentdb.durations import parse_duration, parse_timestamp

        try:
            return parse_duration(text)
        except (ValueError, OverflowError) as e:
            if not text[:1].isdigit() or "-" not in text:
                self.fail(str(e), param, ctx)

        t = parse_timestamp(text)
        if t is None:
            self.fail(
                f"{text!r} is neither a duration (90d, 12h) nor a date (2026-01-31)", param, ctx
            )
        return max(dt.timedelta(0), dt.datetime.now(dt.timezone.utc) - t)


AGE = AgeType()


class SecondsType(click.ParamType):
    """A finite number of seconds in ``[0, maximum]`` (no NaN, no infinity)."""

    name = "SECONDS"

    def __init__(self, maximum: float) -> None:
        self.maximum = maximum

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not 0 <= seconds <= self.maximum:
            self.fail(f"{value!r}: give a number of seconds from 0 to {self.maximum:g}", param, ctx)
        return seconds


class TableFormatType(click.ParamType):
    """A tabulate table format name (``simple``, ``github``, ``plain``, ``grid``, ...)."""

    name = "FORMAT"
    DEFAULT = "simple"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if value == self.DEFAULT:
            return value  # the default needs no tabulate import (--json never draws a table)
        from tabulate import tabulate_formats

        if value in tabulate_formats:
            return str(value)
        self.fail(
            f"{value!r} is not a table format; use one of: {', '.join(tabulate_formats)}",
            param,
            ctx,
        )


TABLE_FORMAT = TableFormatType()


class DirectoryType(click.ParamType):
    """A directory path given on the command line: never empty (``""`` would mean the current
    directory without saying so). Whether it exists is the command's business."""

    name = "PATH"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        if isinstance(value, Path):
            return value
        if not isinstance(value, str) or not value:
            self.fail("an empty path; give a directory (use . for the current one)", param, ctx)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a byte that is not UTF-8 (surrogate-escaped by Python)
            self.fail(
                f"{value!r}: not a UTF-8 path; SQLite opens only UTF-8 file names, so choose "
                "or rename to one",
                param,
                ctx,
            )
        return Path(value)


DIRECTORY = DirectoryType()


class OutputDirType(DirectoryType):
    """A directory agentdb writes into, created (0700) if missing: it must be a directory, or
    its nearest existing ancestor must be one (no file, FIFO or dangling symlink in the way).
    Permissions and read-only file systems are met by the job, as OS errors (exit 1)."""

    name = "DIR"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = super().convert(value, param, ctx)
        problem = output_dir_problem(path)
        if problem is not None:
            self.fail(f"{problem}; give a directory", param, ctx)
        return path


OUTPUT_DIR = OutputDirType()


class OutputFileType(DirectoryType):
    """A file agentdb writes: a name (not empty, UTF-8), not an existing directory, in a place
    where a directory can be (no file, FIFO or dangling symlink in the way of its parent)."""

    name = "FILE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        if value == "":
            self.fail("an empty path; give a file name", param, ctx)
        path = super().convert(value, param, ctx)
        if os.path.isdir(path):
            self.fail(f"{path}: is a directory; give a file name", param, ctx)
        problem = output_dir_problem(path.parent)
        if problem is not None:
            self.fail(f"{problem}; give a file in a directory", param, ctx)
        return path


OUTPUT_FILE = OutputFileType()


def output_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be (made into) a directory, or None."""
    p = path
    while True:
        try:
            st = os.stat(p)
        except (FileNotFoundError, NotADirectoryError):  # ENOTDIR: an ancestor is a file
            if os.path.islink(p):
                return f"{p}: a symbolic link to {os.readlink(p)}, which does not exist"
            if p.parent == p:
                return f"{p}: does not exist"
            p = p.parent
            continue
        except OSError as e:
            return f"{p}: {e.strerror}"
        break
    if not os.path.isdir(p):
        what = "is" if p == path else f"(part of {path}) is"
        return f"{p}: {what} not a directory (mode {oct(st.st_mode)})"
    return None  # whether it can be written is the job's to find out (EACCES, EROFS: exit 1)
