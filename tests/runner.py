"""The one way tests run the ``agentdb`` command line.

Three needs, one runner each:

- in-process (fast, the default): the ``agentdb`` fixture (``tests/conftest.py``) calls
  :func:`invoke`, which runs ``main()`` with stdout/stderr captured apart, an optional
  environment, and a hang guard (a run that takes longer than ``HANG`` seconds fails the test
  instead of stalling the suite);
- a real process, where the test needs one (exit status of the real console script, a kill,
  a umask, a fault point, another user): :func:`run_cli`;
- a real process on a pseudo-terminal (progress bars, prompts, terminal tables, Ctrl-C):
  :class:`Terminal`.

Both answer with the exit code, stdout and stderr; nothing here mocks SQLite or agentdb.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from click.testing import CliRunner

from agentdb.cli.main import main
from agentdb.jobs import demo

HANG = 120  # seconds an in-process run may take before the test fails as a hang


class Ran(NamedTuple):
    """What one in-process run answered (unpacks as ``code, out, err``)."""

    code: int  # the exit code main() returned
    out: str  # everything written to stdout
    err: str  # everything written to stderr

    def json(self) -> Any:
        """stdout parsed as the one JSON document it must be."""
        return json.loads(self.out)


class Hang(Exception):
    """A run took longer than HANG seconds (not an OSError: main() must not swallow it)."""


def invoke(argv: Sequence[str], env: dict[str, str] | None = None, hang: int = HANG) -> Ran:
    """``agentdb argv`` in this process; ``env`` entries are set (``None`` unsets) for the run;
    :class:`Hang` is raised when it takes longer than ``hang`` seconds."""

    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {hang}s")

    runner = CliRunner(env=env)
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(hang)
    try:
        with runner.isolation() as (out, err, _):
            code = main(list(argv))
            o, e = out.getvalue(), err.getvalue()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return Ran(code, o.decode("utf-8", "replace"), e.decode("utf-8", "replace"))


def global_options(sessions_dir: Path, plugin_cache: Path | None = None) -> list[str]:
    """``--sessions-dir S [--plugin-cache C]``."""
    g = ["--sessions-dir", str(sessions_dir)]
    if plugin_cache is not None:
        g += ["--plugin-cache", str(plugin_cache)]
    return g


def state_options(state: demo.DemoState) -> list[str]:
    """The global options that point at a demo state's sessions and plugin cache."""
    return global_options(state.sessions_dir, state.plugin_cache)


class Agentdb:
    """The ``agentdb`` fixture: ``agentdb(*argv)`` runs in-process and returns a :class:`Ran`.

    ``agentdb.at(sessions_dir, plugin_cache)`` is a runner that puts those global options first.
    """

    def __init__(self, prefix: Sequence[str] = ()) -> None:
        self.prefix = list(prefix)

    def __call__(self, *argv: str, env: dict[str, str] | None = None) -> Ran:
        return invoke([*self.prefix, *argv], env=env)

    def at(self, sessions_dir: Path, plugin_cache: Path | None = None) -> Agentdb:
        return Agentdb([*self.prefix, *global_options(sessions_dir, plugin_cache)])


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    drop: Sequence[str] = (),
    fault: str | None = None,
    umask: int | None = None,
    prefix: Sequence[str] = (),
    preexec_fn: Callable[[], None] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a subprocess, stdin closed (prune never prompts).

    ``env`` adds to the inherited environment, ``drop`` removes names from it; ``fault`` sets
    ``AGENTDB_FAULT`` (which is never inherited otherwise); ``umask`` is set in the child;
    ``prefix`` goes before the interpreter (``setpriv …``); ``preexec_fn`` runs in the child.
    """
    full = {k: v for k, v in os.environ.items() if k not in drop and k != "AGENTDB_FAULT"}
    full.update(env or {})
    if fault:
        full["AGENTDB_FAULT"] = fault

    def child() -> None:
        if umask is not None:
            os.umask(umask)
        if preexec_fn is not None:
            preexec_fn()

    return subprocess.run(
        [*prefix, sys.executable, "-m", "agentdb.cli.main", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        preexec_fn=child if (umask is not None or preexec_fn is not None) else None,
    )


class Terminal:
    """``agentdb`` as a real process with some of its streams on a pseudo-terminal: what a
    person at a terminal sees (progress bars, prompts, wrapped tables), and Ctrl-C.

    ``size`` (columns, lines) sets the terminal's window size (``TIOCSWINSZ``).

    Streams not on the terminal: stdin closed, stdout a pipe, stderr discarded. Use it as a
    context manager (the process is killed and the terminal closed on the way out)::

        with Terminal("prune", "--older-than", "90d", stdin=True) as t:
            t.read_until(b"[y/N]")
            t.write("y\\n")
            code, out, seen = t.finish()
    """

    def __init__(
        self,
        *args: str,
        stdin: bool = False,
        stdout: bool = False,
        stderr: bool = True,
        env: dict[str, str] | None = None,
        size: tuple[int, int] | None = None,
    ) -> None:
        full = {k: v for k, v in os.environ.items() if k != "AGENTDB_FAULT"}
        full.update(env or {})
        self.master, slave = os.openpty()
        if size is not None:  # (columns, lines), as a terminal emulator's window sets them
            import fcntl
            import struct
            import termios

            cols, rows = size
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            for name in ("COLUMNS", "LINES"):  # the window's size, not the environment's
                full.pop(name, None)
        self.seen = b""  # everything read from the terminal so far
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agentdb.cli.main", *args],
                stdin=slave if stdin else subprocess.DEVNULL,
                stdout=slave if stdout else subprocess.PIPE,
                stderr=slave if stderr else subprocess.DEVNULL,
                env=full,
            )
        finally:
            os.close(slave)
        self._closed = False

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_until(self, done: bytes | Callable[[bytes], bool], quiet: float = 60) -> bytes:
        """Read the terminal until ``done`` (a byte string, or a test of everything seen);
        fails when the terminal stays silent for ``quiet`` seconds first."""
        test = done if callable(done) else (lambda seen: done in seen)
        while not test(self.seen):
            ready, _, _ = select.select([self.master], [], [], quiet)
            assert ready, f"nothing more shown for {quiet}s: {self.seen[-2000:]!r}"
            self.seen += os.read(self.master, 65536)
        return self.seen

    def write(self, text: str) -> None:
        """Type ``text`` at the terminal."""
        os.write(self.master, text.encode())

    def send_signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        """Wait for the exit; returns (exit code, stdout, everything the terminal showed)."""
        if self.proc.stdout is None:  # stdout is the terminal: read it to the end as it comes
            self._drain(timeout)
        else:  # both at once: a full terminal (a long job's progress) would block the job
            import threading

            got: list[bytes] = []
            reader = threading.Thread(target=lambda: got.append(self.proc.stdout.read()))  # type: ignore[union-attr]
            reader.start()
            self._drain(timeout)  # until the terminal's other end closes (the job exited)
            reader.join(timeout)
            self.proc.wait(timeout)
            self.proc.stdout.close()
            self._drain(0.2)
            self.close()
            text = b"".join(got).decode("utf-8", "replace")
            return self.proc.returncode, text, self.seen.decode("utf-8", "replace")
        out, _ = self.proc.communicate(timeout=timeout)
        self._drain(0.2)
        self.close()
        text = (out or b"").decode("utf-8", "replace")
        return self.proc.returncode, text, self.seen.decode("utf-8", "replace")

    def _drain(self, wait: float) -> None:
        """Read the terminal until EOF (EIO once the other end is closed) or ``wait`` seconds
        without output."""
        while True:
            ready, _, _ = select.select([self.master], [], [], wait)
            if not ready:
                break
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.seen += chunk

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.master)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
