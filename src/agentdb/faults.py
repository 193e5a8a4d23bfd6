"""Fault injection for crash and race tests: the one mechanism, named points.

Code that has a crash-relevant step calls :func:`point` with the step's name (``after_intent``,
``backup_after_copy``, ``before_commit``, …); nothing else takes a fault argument.
A point does nothing unless one of these names it:

- ``AGENTDB_FAULT=<point>`` kills the process there (SIGKILL): tests run a real ``agentdb``
  process with the variable set and check what the files look like after ``kill -9``;
- ``AGENTDB_PAUSE=<point>:<dir>`` stops the process there instead: it creates ``<dir>/reached``
  and waits (at most :data:`PAUSE_MAX` seconds) until ``<dir>/go`` exists, so a test can run
  another real job in exactly that window (a race made deterministic);
- :func:`injected` (in-process tests only): runs the test's action at the point — raise an
  exception, or change the world (put a symlink where a file is about to be written).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

ENV = "AGENTDB_FAULT"
PAUSE_ENV = "AGENTDB_PAUSE"
PAUSE_MAX = 60.0

_INJECTED: dict[str, Callable[[], None]] = {}  # point -> action, set only by injected()


def _raw_environ() -> tuple[object, dict[object, object] | None, object, object]:
    """``os.environ``, the dictionary behind it and the two variables' keys as it stores them.

    CPython's ``os.environ`` keeps the encoded environment in a dictionary that every change
    made through it updates in place (``os.environ[k] = v``, ``del``, ``update``, ``clear``,
    ``monkeypatch.setenv``): a key missing there is a variable that ``os.environ.get`` would not
    find. Looking there costs a dictionary lookup; ``os.environ.get`` of an unset variable
    raises and catches a KeyError inside ``os`` (~0.7 µs, twice per point: the writer passes one
    on every revision-3 emit). No such dictionary (another Python): None, and every point reads
    ``os.environ`` as before."""
    env = os.environ
    data = getattr(env, "_data", None)
    encode = getattr(env, "encodekey", None)
    if type(data) is not dict or encode is None:
        return env, None, None, None
    try:
        return env, data, encode(ENV), encode(PAUSE_ENV)
    except Exception:  # pragma: no cover - an encoding os.environ itself could not use
        return env, None, None, None


_ENVIRON, _ENVIRON_DATA, _FAULT_KEY, _PAUSE_KEY = _raw_environ()


def point(name: str) -> None:
    """Run an injected action for this point; SIGKILL this process if ``$AGENTDB_FAULT`` names
    it; pause if ``$AGENTDB_PAUSE`` does; otherwise do nothing."""
    action = _INJECTED.get(name)
    if action is not None:
        action()
    data = _ENVIRON_DATA
    if (
        data is not None
        and _FAULT_KEY not in data
        and _PAUSE_KEY not in data
        and os.environ is _ENVIRON  # not replaced (a test may put a plain dict there)
    ):
        return  # neither variable is set: nothing to do
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    spec = os.environ.get(PAUSE_ENV)
    if spec:
        where, _, gate = spec.partition(":")
        if where == name and gate:
            _pause(gate)


@contextmanager
def injected(actions: Mapping[str, Callable[[], None]]) -> Iterator[None]:
    """For in-process tests: within the block, reaching point ``name`` runs ``actions[name]()``
    (an exception it raises propagates from the point)."""
    saved = dict(_INJECTED)
    _INJECTED.update(actions)
    try:
        yield
    finally:
        _INJECTED.clear()
        _INJECTED.update(saved)


def _pause(gate: str) -> None:
    with open(os.path.join(gate, "reached"), "w"):
        pass
    deadline = time.monotonic() + PAUSE_MAX
    while not os.path.exists(os.path.join(gate, "go")) and time.monotonic() < deadline:
        time.sleep(0.01)
