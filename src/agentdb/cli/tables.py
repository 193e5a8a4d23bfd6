"""Tables that fit a terminal: display widths, wrapping that never cuts, the narrow layout.

Pure functions over cells already made printable (``output.printable``); :mod:`agentdb.cli.output`
decides when they apply (stdout a terminal, no ``-v``/``--wide``) and writes the lines.

The narrow layout, in order, until the table fits the terminal's width:

1. ids (26-character ULIDs in the columns named ``session`` and ``parent``) are shortened,
   git-style, to the shortest prefix that tells apart every id the table shows (at least
   :data:`MIN_ID`);
2. long text columns (messages, paths, payloads) wrap at :data:`SOFT_MIN` characters or more;
3. the command's optional columns are left out, least useful first (a note on stderr names them);
4. every column wraps, down to its header's longest word.

A cell that is wrapped keeps every character: lines break at spaces, and a word longer than the
column is split across lines.
"""

from __future__ import annotations

import itertools
import os
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MIN_ID = 8  # the shortest id prefix shown (git's default abbreviation is 7)
ULID_LEN = 26
SOFT_MIN = 20  # long text columns narrow to this before any column is left out
LONG = 28  # a column whose widest cell is wider than this is "long text"
GAP = 2  # spaces between columns (tabulate's simple and plain formats)
ID_HEADERS = frozenset({"session", "parent"})
_CROCKFORD = frozenset("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def terminal_width(fd: int, default: int = 80) -> int:
    """The width of the terminal on ``fd``: $COLUMNS when it is a positive number (as
    :func:`shutil.get_terminal_size` reads it), else the terminal's own, else ``default``."""
    try:
        env = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        env = 0
    if env > 0:
        return env
    try:
        cols = os.get_terminal_size(fd).columns
    except OSError:
        return default
    return cols if cols > 0 else default


def cell_width(text: str) -> int:
    """Columns ``text`` takes on a terminal: East Asian wide and full-width characters two,
    combining marks none, the rest one."""
    if text.isascii():
        return len(text)
    n = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


def text(cell: Any) -> str:
    """A cell as the table shows it (None is empty)."""
    return "" if cell is None else cell if isinstance(cell, str) else str(cell)


def ljust(s: str, width: int) -> str:
    return s + " " * (width - cell_width(s))


def _split(word: str, width: int) -> list[str]:
    """A word longer than ``width`` in pieces of at most ``width`` columns (at least one
    character each)."""
    pieces: list[str] = []
    cur, w = "", 0
    for ch in word:
        cw = cell_width(ch)
        if cur and w + cw > width:
            pieces.append(cur)
            cur, w = "", 0
        cur += ch
        w += cw
    if cur or not pieces:
        pieces.append(cur)
    return pieces


def wrap(s: str, width: int) -> list[str]:
    """``s`` in lines of at most ``width`` columns, broken at single spaces; a word longer than
    a line is split. Only the spaces a line breaks at are left out: every other character is
    kept, in order."""
    width = max(width, 1)
    if cell_width(s) <= width:
        return [s]
    lines: list[str] = []
    cur = ""
    for word in s.split(" "):
        candidate = word if not cur else cur + " " + word
        if cell_width(candidate) <= width:
            cur = candidate
            continue
        if cur:
            lines.append(cur)
        pieces = _split(word, width)
        lines.extend(pieces[:-1])
        cur = pieces[-1]
    lines.append(cur)
    return lines


def is_ulid(cell: Any) -> bool:
    return isinstance(cell, str) and len(cell) == ULID_LEN and _CROCKFORD.issuperset(cell)


def id_length(ids: Iterable[str]) -> int:
    """The shortest prefix length (at least :data:`MIN_ID`) at which every distinct id in
    ``ids`` differs from every other."""
    ordered = sorted(set(ids))
    n = MIN_ID
    for a, b in itertools.pairwise(ordered):
        common = 0
        while common < ULID_LEN and a[common] == b[common]:
            common += 1
        n = max(n, common + 1)
    return min(n, ULID_LEN)


@dataclass
class Layout:
    """How a table is drawn on a terminal."""

    keep: list[int]  # the columns shown, in order
    widths: list[int]  # the width of each shown column
    dropped: list[str]  # headers of the columns left out
    id_len: int | None  # ids shortened to this many characters (None: as they are)


def fit(
    natural: Sequence[int],
    headers: Sequence[str],
    budget: int,
    *,
    optional: Sequence[str] = (),
    overhead: int = 0,
    header_pad: int = 0,
    whole: Sequence[int] = (),
    unbroken: Sequence[int] = (),
) -> Layout:
    """Widths for columns whose widest cells are ``natural`` wide, fitting ``budget`` columns.

    ``overhead`` is what the format draws besides the cells for each column (two spaces
    between columns for simple/plain); ``header_pad`` what it adds to a header's width;
    ``whole`` the columns never wrapped (ids); ``unbroken`` the columns whose cells hold no
    space (file names, versions), wrapped only when leaving out columns was not enough."""
    ncols = len(natural)
    heads = [headers[i] if i < len(headers) else "" for i in range(ncols)]
    # the narrowest a column may get: its header's longest word (headers wrap at spaces)
    hard = [max([1, *(cell_width(w) + header_pad for w in h.split())]) for h in heads]
    for i in whole:
        if i < ncols:
            hard[i] = max(hard[i], natural[i])
    full = [max(natural[i], hard[i], cell_width(heads[i]) + header_pad) for i in range(ncols)]
    keep = list(range(ncols))
    dropped: list[str] = []
    queue = [i for h in optional for i in range(ncols) if heads[i] == h]

    def room() -> int:
        return budget - overhead * max(len(keep) - 1, 0)

    def narrow(widths: dict[int, int], floor: dict[int, int]) -> bool:
        """Narrow the widest column above its floor, one column at a time, until the table
        fits; True when it does."""
        total = sum(widths.values())
        while total > room():
            cands = [i for i in widths if widths[i] > floor[i]]
            if not cands:
                return False
            widest = max(cands, key=lambda i: (widths[i], -i))
            second = max((widths[i] for i in cands if i != widest), default=0)
            target = max(floor[widest], second, widths[widest] - (total - room()))
            if target >= widths[widest]:
                target = widths[widest] - 1
            total -= widths[widest] - target
            widths[widest] = target
        return True

    while True:
        widths = {i: full[i] for i in keep}
        soft = {
            i: max(hard[i], min(full[i], SOFT_MIN))
            if natural[i] > LONG and i not in unbroken
            else full[i]
            for i in keep
        }
        if narrow(widths, soft):
            break
        if queue:
            i = queue.pop(0)
            keep.remove(i)
            dropped.append(heads[i])
            continue
        narrow(widths, {i: hard[i] for i in keep})
        break
    return Layout(keep, [widths[i] for i in keep], dropped, None)


def draw_simple(
    rows: Iterable[Sequence[str]],
    headers: Sequence[str] | None,
    widths: Sequence[int],
    *,
    rule: bool,
) -> list[str]:
    """Lines of the simple (``rule``) or plain format, every cell wrapped to its column's
    width; a header wraps at spaces. Each line is right-stripped, as tabulate draws them."""
    lines: list[str] = []

    def block(cells: Sequence[str]) -> None:
        wrapped = [wrap(c, w) for c, w in zip(cells, widths, strict=False)]
        height = max((len(x) for x in wrapped), default=1)
        for k in range(height):
            parts = [
                ljust(x[k] if k < len(x) else "", w) for x, w in zip(wrapped, widths, strict=False)
            ]
            lines.append((" " * GAP).join(parts).rstrip())

    if headers is not None and any(headers):
        block(list(headers))
        if rule:
            lines.append((" " * GAP).join("-" * w for w in widths))
    for row in rows:
        block(row)
    return lines
