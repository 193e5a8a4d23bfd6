"""The memory figures of the benchmarks and of tests/salvage/test_cost.py come from
tests/peak_rss.py; this holds it to what it claims: the measuring process's own peak does not
count, while the command's own allocation does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import peak_rss

pytestmark = pytest.mark.slow

ALLOC = "b = bytearray({n} << 20); b[::4096] = b'x' * len(b[::4096])"


def _touch(mib: int) -> bytearray:
    b = bytearray(mib << 20)
    b[::4096] = b"x" * len(b[::4096])
    return b


def test_the_measuring_process_does_not_count() -> None:
    held = _touch(256)  # the measuring process's own peak: 256 MiB more than its children
    try:
        p = subprocess.Popen([sys.executable, "-c", "pass"])
        _, _, plain = os.wait4(p.pid, 0)
        usage, _ = peak_rss.run([sys.executable, "-c", "pass"])
    finally:
        del held
    # the default spawn reports the parent's peak (the artifact this module exists for) ...
    assert plain.ru_maxrss > 200 << 10
    # ... the launcher does not: a bare interpreter is a few tens of MiB at most
    assert usage.returncode == 0 and usage.maxrss_kib < 100 << 10


def test_the_command_s_own_memory_and_exit_count() -> None:
    small, _ = peak_rss.run([sys.executable, "-c", ALLOC.format(n=8)])
    big, out = peak_rss.run([sys.executable, "-c", ALLOC.format(n=160) + "; print('done')"])
    assert out == b"done\n"
    assert big.maxrss_kib - small.maxrss_kib > 140 << 10
    assert big.cpu_s > 0
    failed, _ = peak_rss.run([sys.executable, "-c", "raise SystemExit(3)"])
    assert failed.returncode == 3
    killed, _ = peak_rss.run([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"])
    assert killed.returncode == 128 + 9
