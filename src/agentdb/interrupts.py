"""Ctrl-C that ends a streamed report cleanly.

A command that writes its report while the files are still being read (one JSON document, a
table drawn in chunks) must never be cut in the middle of a row: what was finished before the
interrupt is reported, and the document stays whole. :class:`Guarded` iterates a source so that
a Ctrl-C arriving while the source works (reading files, waiting for workers) ends the iteration
at once, and one arriving while the consumer writes ends it after that row.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Generic, TypeVar

T = TypeVar("T")


class Guarded(Generic[T]):
    """Iterate ``source``; Ctrl-C ends the iteration and sets ``interrupted`` instead of raising
    in the consumer. Only the main thread can catch signals; elsewhere it iterates as is (a
    ``KeyboardInterrupt`` from the source still ends it)."""

    def __init__(self, source: Iterator[T]) -> None:
        self.source = source
        self.interrupted = False

    def __iter__(self) -> Iterator[T]:
        main = threading.current_thread() is threading.main_thread()
        waiting = False
        pending = False

        def handler(signum: int, frame: FrameType | None) -> None:
            nonlocal pending
            if waiting:
                raise KeyboardInterrupt  # inside the source: caught just below
            pending = True  # the consumer is writing a row: stop after it

        old = signal.signal(signal.SIGINT, handler) if main else None
        try:
            while not pending:
                waiting = True
                try:
                    item = next(self.source)
                except StopIteration:
                    return
                finally:
                    waiting = False
                yield item
            self.interrupted = True
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            close = getattr(self.source, "close", None)
            if close is not None:
                close()  # a generator's own clean-up (a worker pool) runs now
            if main:
                signal.signal(signal.SIGINT, signal.default_int_handler if old is None else old)
