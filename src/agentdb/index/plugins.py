"""The plugin cache as sessions see it: which cached versions retained sessions reference.

The cache layout is ``<cache>/<category>/<name>/<version>/`` (CONTRACT.md); a version is *in the
cache* iff that directory exists. The cache is listed once, and a session's producers are looked
up in that listing: no path is ever built from a name read out of a session file. The ``kernel``
producer is no plugin and is never looked up. agentdb never deletes anything from the cache.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentdb import errors, faults, paths, workers
from agentdb.schema.enums import KERNEL
from agentdb.store import SessionReader

PluginVersion = tuple[str, str, str]  # (category, name, version)
MAX_PRODUCERS = 100_000  # producers read from one session file (a bound against hostile files)


def _subdirs(path: Path) -> list[str]:
    try:
        with os.scandir(path) as it:
            return sorted(de.name for de in it if de.is_dir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def cached_versions(plugin_cache: Path) -> set[PluginVersion]:
    """Every ``(category, name, version)`` directory in the cache (none if it does not exist)."""
    found: set[PluginVersion] = set()
    for cat in _subdirs(plugin_cache):
        if cat == KERNEL:
            continue
        for name in _subdirs(plugin_cache / cat):
            for ver in _subdirs(plugin_cache / cat / name):
                found.add((cat, name, ver))
    return found


def session_producers(reader: SessionReader) -> list[PluginVersion]:
    """The plugin versions one open session references (the kernel producer left out)."""
    page = reader.producers(limit=MAX_PRODUCERS)
    return [(p.category, p.name, p.version) for p in page.rows if p.category != KERNEL]


def pinning(producers: Iterable[PluginVersion], cached: set[PluginVersion]) -> list[PluginVersion]:
    """The producers that are in the cache, sorted, without repeats."""
    return sorted({p for p in producers if p[0] != KERNEL and p in cached})


def label(version: PluginVersion) -> str:
    return "/".join(version)


@dataclass(frozen=True)
class VersionRefs:
    """One cached plugin version and how many retained sessions reference it."""

    category: str
    name: str
    version: str
    sessions: int  # retained sessions whose producers name this version


@dataclass
class PluginRefs:
    """``agentdb plugins refs``: cached versions, referenced or not."""

    versions: list[VersionRefs] = field(default_factory=list)  # every cached version
    unreferenced: list[VersionRefs] = field(default_factory=list)  # no retained session uses it
    unreadable: list[str] = field(default_factory=list)  # sessions whose references are unknown
    sessions_read: int = 0  # sessions looked at (all of them unless interrupted)
    interrupted: bool = False  # Ctrl-C: counts cover ``sessions_read``; none unreferenced


def _producers_of(entry: paths.Entry) -> set[PluginVersion] | None:
    """The plugin versions one session file references; None when it cannot be read."""
    faults.point("plugins_refs_read")
    try:
        with SessionReader(entry.path, session_id=entry.session_id) as reader:
            return set(session_producers(reader))
    except errors.AgentdbError:
        return None


def _read_chunk(part: Sequence[paths.Entry]) -> list[set[PluginVersion] | None]:
    return [_producers_of(e) for e in part]


def _died(part: Sequence[paths.Entry], why: str) -> list[set[PluginVersion] | None]:
    return [None for _ in part]  # unknown references: listed as unreadable


def refs(sessions_dir: Path, plugin_cache: Path, *, jobs: int = 1) -> PluginRefs:
    """Count, for each cached version, the retained sessions that reference it.

    Sessions that cannot be read are listed in ``unreadable``: their references are unknown, so
    a cache manager should not treat "unreferenced" as final while that list is not empty.
    With ``jobs`` > 1 and many sessions, the files are read by that many worker processes (the
    answer is the same). After Ctrl-C the counts cover the sessions read before it, and no
    version is called unreferenced (the sessions not read may use it).
    """
    paths.require_sessions_dir(sessions_dir)
    cached = cached_versions(plugin_cache)
    counts = dict.fromkeys(cached, 0)
    out = PluginRefs()
    entries = list(paths.iter_session_entries(sessions_dir))
    if jobs <= 1 or len(entries) < workers.POOL_THRESHOLD:
        parts: list[Sequence[paths.Entry]] = [[e] for e in entries]
        jobs = 1
    else:
        size = max(1, min(workers.CHUNK, len(entries) // (jobs * 8) or 1))
        parts = [entries[i : i + size] for i in range(0, len(entries), size)]
    ran = workers.run_each(_read_chunk, parts, jobs, died=_died, drain=False)
    for index, got in zip(ran.indexes, ran.results, strict=True):
        for entry, used in zip(parts[index], got, strict=True):
            out.sessions_read += 1
            if used is None:
                out.unreadable.append(entry.session_id)
                continue
            for v in used & cached:
                counts[v] += 1
    out.interrupted = ran.interrupted
    for v in sorted(counts):
        row = VersionRefs(*v, counts[v])
        out.versions.append(row)
        if counts[v] == 0 and not out.interrupted:
            out.unreferenced.append(row)
    return out


def count_refs(
    per: Iterable[tuple[str, list[PluginVersion] | None]], cached: set[PluginVersion]
) -> PluginRefs:
    """:func:`refs` from each session's producers as already known (the session index):
    sessions whose producers are unknown are listed in ``unreadable``."""
    counts = dict.fromkeys(cached, 0)
    out = PluginRefs()
    for sid, used in per:
        out.sessions_read += 1
        if used is None:
            out.unreadable.append(sid)
            continue
        for v in set(used) & cached:
            counts[v] += 1
    for v in sorted(counts):
        row = VersionRefs(*v, counts[v])
        out.versions.append(row)
        if counts[v] == 0:
            out.unreferenced.append(row)
    return out


def scan_producers(sessions_dir: Path) -> list[tuple[str, list[PluginVersion] | None]]:
    """Each session's plugin versions, read from its file (None: it cannot be read)."""
    out: list[tuple[str, list[PluginVersion] | None]] = []
    for entry in paths.iter_session_entries(sessions_dir):
        try:
            with SessionReader(entry.path, session_id=entry.session_id) as reader:
                out.append((entry.session_id, session_producers(reader)))
        except errors.AgentdbError:
            out.append((entry.session_id, None))
    return out
