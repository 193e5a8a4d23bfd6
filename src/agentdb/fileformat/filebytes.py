"""The bytes of an open file, read on demand: what the format readers take instead of a file
held whole in memory (a database, a WAL)."""

from __future__ import annotations

import os


class FileBytes:
    """The bytes of an open regular file, read on demand (``os.pread``) instead of held whole:
    ``len()`` and contiguous slices, which is all the page source, the WAL scanner and the
    header parsers use."""

    def __init__(self, fd: int) -> None:
        self.fd = fd  # the caller's descriptor: it stays open while this is used
        self.size = os.fstat(fd).st_size

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __getitem__(self, key: slice) -> bytes:
        if not isinstance(key, slice):
            raise TypeError("FileBytes supports slices only")
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise TypeError("FileBytes supports contiguous slices only")
        if stop <= start:
            return b""
        return os.pread(self.fd, stop - start, start)
