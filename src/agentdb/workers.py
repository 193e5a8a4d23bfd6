"""The one pool of forked worker processes that jobs reading many session files share.

Workers only read, so stopping them mid-file changes nothing; Ctrl-C is the parent's to handle
(workers ignore SIGINT), and leaving the ``with`` block early — an error, an interrupt, a reader
that stopped consuming — terminates them.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import signal
from collections.abc import Iterator
from contextlib import contextmanager

POOL_THRESHOLD = 200  # fewer files than this are read in the calling process (no start-up cost)
CHUNK = 250  # entries per task sent to a worker


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
