"""A command's peak RSS and CPU time, measured so that the measuring process does not count.

A child that Python starts the default way (``subprocess`` uses ``vfork``/``posix_spawn``)
reports in ``ru_maxrss`` at least the *parent's* peak RSS: at ``exec`` Linux records the
high-water mark of the address space being left, and a vfork'd child leaves the parent's
(measured here: after a parent once held 300 MB, ``/bin/true`` reports 313 MB). A benchmark or
a test that builds large files first, then compares two children's peaks, compares its own
peak with itself. So the command runs as the grandchild of a small launcher (``python -I -S``)
that forks it (a fork's figure starts from the forking process's *current* RSS, the launcher's
few MB) and writes the grandchild's ``wait4`` usage to a pipe.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

_LAUNCHER = r"""
import os, signal, sys
fd = int(sys.argv[1])
pid = os.fork()
if pid == 0:
    os.close(fd)
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, lambda n, _f: os.kill(pid, n))
while True:
    try:
        _, status, ru = os.wait4(pid, 0)
        break
    except InterruptedError:
        pass
os.write(fd, b"%d %r %r" % (ru.ru_maxrss, ru.ru_utime, ru.ru_stime))
code = os.waitstatus_to_exitcode(status)
os._exit(code if code >= 0 else 128 - code)
"""


@dataclass(frozen=True)
class Usage:
    """What one command used (its own process and the children it waited for)."""

    returncode: int  # as the command exited (128 + N when signal N ended it)
    maxrss_kib: int  # peak resident set size, KiB
    cpu_s: float  # user + system seconds


class Measured:
    """``subprocess.Popen(argv, **kw)`` run through the launcher; :meth:`wait` gives its
    :class:`Usage`. ``stdin``/``stdout``/``stderr`` and ``env`` pass through to the command."""

    def __init__(self, argv: list[str], **kw: Any) -> None:
        r, w = os.pipe()
        pass_fds = (*kw.pop("pass_fds", ()), w)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(w), *argv],
                pass_fds=pass_fds,
                **kw,
            )
        finally:
            os.close(w)
        self._r = r
        self.stdout = self.proc.stdout
        self.stdin = self.proc.stdin

    def wait(self) -> Usage:
        rc = self.proc.wait()
        chunks = []
        while chunk := os.read(self._r, 256):
            chunks.append(chunk)
        os.close(self._r)
        fields = b"".join(chunks).split()
        if len(fields) != 3:
            raise RuntimeError(f"the launcher reported nothing (exit {rc})")
        return Usage(rc, int(fields[0]), float(fields[1]) + float(fields[2]))


def run(argv: list[str], **kw: Any) -> tuple[Usage, bytes]:
    """Run ``argv`` to completion; its usage and its standard output."""
    m = Measured(argv, stdout=subprocess.PIPE, **kw)
    assert m.stdout is not None
    out = m.stdout.read()
    m.stdout.close()
    return m.wait(), out
