"""JSON Schemas of every command's --json document (draft 2020-12), shipped as package data."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def names() -> list[str]:
    """Every shipped schema, by document name (``check``, ``sessions-list``, ...)."""
    return sorted(
        p.name[: -len(".json")]
        for p in resources.files(__name__).iterdir()
        if p.name.endswith(".json")
    )


def load(name: str) -> dict[str, Any]:
    """The schema of ``agentdb <name> --json`` (``sessions-list`` for ``sessions list``)."""
    doc: dict[str, Any] = json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text())
    return doc
