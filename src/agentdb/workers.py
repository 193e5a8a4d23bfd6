"""Worker processes for jobs over many session files, and how many of them to start.

* :func:`agentdb.cores.usable_cores` — the default ``--jobs``: the CPUs this process may run on
  (``sched_getaffinity``), capped by the cgroup's CPU quota, which ``sched_getaffinity`` does
  not see (a container limited to 1.5 CPUs still shows every core of the host).
* :func:`forked_pool` — a plain pool for read-only scans (``check``, ``sessions list``,
  ``status``): workers only read, so terminating them mid-file changes nothing.
* :func:`run_each` — one item per task, results in the items' order, for jobs that also act
  on files (``migrate``, ``backup``) and for scans that must notice a worker that dies
  (``prune`` planning, ``plugins refs``). A worker killed mid-item (``kill -9``, the OOM killer)
  is replaced and its item run once more in the new worker, which finishes or repeats it
  safely, as a re-run of the job would (every job here is crash-safe per file); if that one
  dies too, the item gets the job's own "failed" outcome. Ctrl-C stops handing out items; the
  items in hand are interrupted as a single-process run would be (``drain``: the job's own
  cleanup runs in the worker) or, for read-only scans, abandoned; a second Ctrl-C stops the
  workers at once. Workers ignore the terminal's SIGINT: Ctrl-C is the parent's to handle.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.pool
import os
import pickle
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agentdb.cores import CHUNK as CHUNK  # re-exported
from agentdb.cores import POOL_THRESHOLD as POOL_THRESHOLD
from agentdb.cores import usable_cores as usable_cores

_POLL = 0.1  # seconds between looks at the Ctrl-C flag while waiting for workers

T = TypeVar("T")
R = TypeVar("R")


# ------------------------------------------------------------------------- read-only pool


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


@contextmanager
def forked_pool(jobs: int) -> Iterator[multiprocessing.pool.Pool]:
    """``jobs`` forked processes; closed when the block ends, terminated if it is left early."""
    pool = multiprocessing.get_context("fork").Pool(jobs, initializer=ignore_sigint)
    try:
        yield pool
        pool.close()
    finally:
        pool.terminate()  # no-op after close()
        pool.join()


# ------------------------------------------------------------------------- one item per task

_INTERRUPT = signal.SIGUSR1  # the parent's "Ctrl-C" to a worker (the terminal's SIGINT is ignored)
_PR_SET_PDEATHSIG = 1  # prctl(2): a signal for this process when its parent dies


@dataclass
class Ran(Generic[R]):
    """What :func:`run_each` finished."""

    results: list[R] = field(default_factory=list)  # in the items' order
    indexes: list[int] = field(default_factory=list)  # which item each result is of
    interrupted: bool = False  # Ctrl-C: items not listed were not run, or not finished
    deaths: int = 0  # workers that died mid-item (each item was run again, or reported failed)


class _Failure:
    """An exception raised by the job function in a worker, carried back to the parent."""

    def __init__(self, exc: BaseException) -> None:
        try:
            pickle.loads(pickle.dumps(exc))
            self.exc: BaseException = exc
        except Exception:
            self.exc = RuntimeError(f"{type(exc).__name__}: {exc}")


class _Interrupted:
    """The item was stopped by Ctrl-C (the job's own KeyboardInterrupt handling ran)."""


class _WorkerState:
    in_item = False
    parent = 0


def _interrupt_item(signum: int, frame: object) -> None:
    if _WorkerState.in_item:  # between items there is nothing to stop
        raise KeyboardInterrupt
    if os.getppid() != _WorkerState.parent:  # orphaned between items: nothing to finish
        os._exit(0)


def _on_parent_death(parent: int) -> None:
    """Have the kernel send this worker the interrupt if its parent dies (``kill -9`` of the
    command): the item in hand stops as at Ctrl-C, instead of running on as an orphan (a
    ``--wait 3600`` for a lock would keep it for an hour). Linux only; elsewhere a no-op."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(_INTERRUPT), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request was made
        os.kill(os.getpid(), _INTERRUPT)


def _serve(
    conn: multiprocessing.connection.Connection, fn: Callable[[Any], Any], parent: int
) -> None:
    ignore_sigint()
    _WorkerState.parent = parent
    signal.signal(_INTERRUPT, _interrupt_item)
    _on_parent_death(parent)
    while True:
        try:
            while not conn.poll(1.0):
                if os.getppid() != parent:  # the command was killed: no one will send more
                    return
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        index, item = msg
        try:
            _WorkerState.in_item = True
            try:
                reply: tuple[int, Any] = (index, fn(item))
            finally:
                _WorkerState.in_item = False
        except KeyboardInterrupt:
            reply = (index, _Interrupted())
        except Exception as e:
            reply = (index, _Failure(e))
        if os.getppid() != parent:
            return
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            conn.send((index, _Failure(e)))
        except OSError:  # the parent is gone (killed): nobody to answer
            return


@dataclass
class _Worker:
    proc: Any  # multiprocessing's forked Process
    conn: multiprocessing.connection.Connection
    task: int | None = None  # the item index in hand
    told: bool = False  # sent the interrupt for this item


class _Stop:
    """Ctrl-C while workers run: the first stops handing out items, the second stops all."""

    def __init__(self) -> None:
        self.count = 0
        self.old: Any = None
        self.installed = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> _Stop:
        if self.installed:
            self.old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1

    def __exit__(self, *exc: object) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, self.old)


def _why(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def run_each(
    fn: Callable[[T], R],
    items: Sequence[T],
    jobs: int,
    *,
    died: Callable[[T, str], R],
    done: Callable[[R, int, int], None] | None = None,
    drain: bool = True,
) -> Ran[R]:
    """``fn(item)`` for every item, in ``jobs`` forked workers (in this process when ``jobs``
    is 1 or there is one item); results in the items' order whatever order they finish in.

    ``died(item, why)`` is the result of an item whose worker died twice on it. ``done(result,
    finished, total)`` is called here, in the order items finish (a progress line).

    Ctrl-C (SIGINT to this process) stops handing out items. With ``drain`` (jobs that act on
    files) each item in hand is interrupted the way a single-process run is: a
    ``KeyboardInterrupt`` raised inside ``fn`` in its worker, so the job's own cleanup runs;
    the items that finished are the results. Without it (read-only scans) the workers are
    terminated at once. A second Ctrl-C terminates them in any case.
    """
    ran: Ran[R] = Ran()
    total = len(items)
    if jobs <= 1 or total <= 1:
        try:
            for i, item in enumerate(items):
                ran.results.append(fn(item))
                ran.indexes.append(i)
                if done:
                    done(ran.results[-1], len(ran.results), total)
        except KeyboardInterrupt:
            ran.interrupted = True
        return ran
    return _run_forked(fn, items, min(jobs, total), died, done, drain, ran)


def _run_forked(
    fn: Callable[[T], R],
    items: Sequence[T],
    jobs: int,
    died: Callable[[T, str], R],
    done: Callable[[R, int, int], None] | None,
    drain: bool,
    ran: Ran[R],
) -> Ran[R]:
    ctx = multiprocessing.get_context("fork")
    total = len(items)
    results: dict[int, R] = {}
    queue: deque[int] = deque(range(total))
    tries: dict[int, int] = {}
    failure: BaseException | None = None
    pool: list[_Worker] = []

    def spawn() -> _Worker:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, fn, os.getpid()), daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def finish(index: int, result: R) -> None:
        results[index] = result
        if done:
            done(result, len(results), total)

    with _Stop() as stop:
        try:
            pool = [spawn() for _ in range(jobs)]
            while True:
                if stop.count > 1 or (stop.count and not drain):
                    break
                stopping = stop.count > 0 or failure is not None
                for w in pool:
                    if w.task is None and queue and not stopping:
                        w.task, w.told = queue.popleft(), False
                        w.conn.send((w.task, items[w.task]))
                    elif w.task is not None and stop.count and not w.told:
                        w.told = True
                        os.kill(w.proc.pid, _INTERRUPT)
                busy = [w for w in pool if w.task is not None]
                if not busy:
                    break
                waits = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
                ready = multiprocessing.connection.wait(waits, timeout=_POLL)
                for i, w in enumerate(pool):
                    if w.task is None or (w.conn not in ready and w.proc.sentinel not in ready):
                        continue
                    index = w.task
                    try:
                        got = w.conn.recv() if w.conn.poll() else None
                    except (EOFError, OSError):
                        got = None
                    if got is not None:
                        w.task = None
                        if isinstance(got[1], _Failure):
                            failure = failure or got[1].exc
                        elif not isinstance(got[1], _Interrupted):
                            finish(got[0], got[1])
                        continue
                    w.proc.join()
                    why = _why(w.proc.exitcode)
                    w.conn.close()
                    ran.deaths += 1
                    tries[index] = tries.get(index, 0) + 1
                    if stop.count:
                        pass  # interrupted anyway: the item is left as a killed run leaves it
                    elif tries[index] < 2 and failure is None:
                        queue.appendleft(index)
                    else:
                        finish(index, died(items[index], f"the worker process {why}"))
                    pool[i] = spawn()
        finally:
            _shut(pool)
    if failure is not None:
        raise failure
    for i in sorted(results):
        ran.indexes.append(i)
        ran.results.append(results[i])
    ran.interrupted = stop.count > 0 or len(results) < total
    return ran


def _shut(pool: list[_Worker]) -> None:
    """Idle workers are told to leave; any still busy (abandoned or a second Ctrl-C) are
    terminated."""
    for w in pool:
        try:
            if w.task is None:
                w.conn.send(None)
            else:
                w.proc.terminate()
        except (OSError, ValueError):
            w.proc.terminate()
    for w in pool:
        w.proc.join(5)
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join()
        w.conn.close()
