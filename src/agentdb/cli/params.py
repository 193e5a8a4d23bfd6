"""Click parameter types shared by several commands."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from agentdb.durations import parse_duration


class DurationType(click.ParamType):
    """``90d``, ``12h``, ``1d12h``, ``1y``, ``0s`` (units s, m, h, d, w, y = 365 days)."""

    name = "DURATION"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dt.timedelta:
        if isinstance(value, dt.timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


DURATION = DurationType()
