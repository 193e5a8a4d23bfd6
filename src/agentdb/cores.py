"""How many worker processes a job may start: the CPUs this process may run on.

:func:`usable_cores` is the default ``--jobs``: the CPUs of this process's affinity mask
(``sched_getaffinity``), capped by its cgroup's CPU quota, which ``sched_getaffinity`` does not
see (a container limited to 1.5 CPUs still shows every core of the host). Apart from
:mod:`agentdb.workers` so that a command computing its default ``--jobs`` does not load
``multiprocessing`` (a one-file ``check`` never starts a pool).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

POOL_THRESHOLD = 200  # fewer files than this are read in the calling process (no start-up cost)
CHUNK = 250  # entries per task sent to a worker
PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def quota_cores(quota: int, period: int) -> int | None:
    """CPUs a CFS quota allows, rounded up (1.5 CPUs: two workers share them); None if none."""
    if quota <= 0 or period <= 0:
        return None
    return max(1, math.ceil(quota / period))


def _read_small(path: Path) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(256)
    except (OSError, ValueError):
        return None


def read_cpu_max(path: Path) -> int | None:
    """cgroup v2 ``cpu.max`` (``"<quota> <period>"`` or ``"max <period>"``) as CPUs; None
    when unlimited, absent or not understood (then it limits nothing)."""
    text = _read_small(path)
    parts = text.split() if text is not None else []
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        return quota_cores(int(parts[0]), int(parts[1]))
    except ValueError:
        return None


def read_cfs_quota(directory: Path) -> int | None:
    """cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` in ``directory`` as CPUs (quota
    -1: unlimited, None)."""
    quota, period = (_read_small(directory / n) for n in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
    if quota is None or period is None:
        return None
    try:
        return quota_cores(int(quota.strip()), int(period.strip()))
    except ValueError:
        return None


def _up_from(base: Path, rel: str) -> list[Path]:
    """``base/rel`` and each of its ancestors up to ``base`` (a parent's quota caps its
    children's); ``rel`` is the path /proc/self/cgroup gives, never followed above ``base``."""
    parts = [p for p in rel.split("/") if p and p not in (".", "..")]
    return [base.joinpath(*parts[:k]) for k in range(len(parts), -1, -1)]


def cgroup_cpu_limit(
    proc_cgroup: Path = PROC_CGROUP, cgroup_root: Path = CGROUP_ROOT
) -> int | None:
    """The tightest CPU quota over this process's cgroup and its ancestors, v2 and v1; None
    when there is none (or nothing can be read: then nothing is capped)."""
    text = _read_small_lines(proc_cgroup)
    limits: list[int] = []
    for line in text:
        hier, _, rest = line.partition(":")
        controllers, _, rel = rest.partition(":")
        if hier == "0" and controllers == "":  # v2 unified hierarchy: "0::/path"
            for d in _up_from(cgroup_root, rel):
                limits += [c for c in [read_cpu_max(d / "cpu.max")] if c is not None]
        elif "cpu" in controllers.split(","):  # v1: "N:cpu,cpuacct:/path"
            for mount in _V1_CPU_MOUNTS:
                for d in _up_from(cgroup_root / mount, rel):
                    limits += [c for c in [read_cfs_quota(d)] if c is not None]
    return min(limits) if limits else None


def _read_small_lines(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in f.readlines(64 * 1024)]
    except OSError:
        return []


def usable_cores(proc_cgroup: Path = PROC_CGROUP, cgroup_root: Path = CGROUP_ROOT) -> int:
    """The CPUs this process may use: its affinity mask, capped by its cgroup's quota."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(proc_cgroup, cgroup_root)
    return max(1, min(cores, limit) if limit is not None else cores)
