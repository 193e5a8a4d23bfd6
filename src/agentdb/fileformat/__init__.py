"""Pure readers of SQLite's on-disk formats (no SQLite calls, no policy).

Modules: :mod:`.varint`, :mod:`.record`, :mod:`.header`, :mod:`.btree`, :mod:`.wal`,
:mod:`.pager`. Every parser raises only :class:`FormatError` on bad bytes.
"""

from .btree import (
    BtreePage,
    IndexCell,
    PageKind,
    TableInteriorCell,
    TableLeafCell,
    cell_payload,
    freeblocks,
    iter_freelist,
    parse_cell,
    parse_page,
    read_overflow,
    walk_table,
)
from .errors import FormatError
from .filebytes import FileBytes
from .header import (
    DbHeader,
    JournalHeader,
    journal_problem,
    journal_restores,
    journal_torn,
    parse_header,
    parse_journal_header,
)
from .pager import PageSource, infer_page_size
from .record import decode_record, encode_record, record_shape
from .varint import read_varint
from .wal import (
    WalAnomaly,
    WalFrame,
    WalHeader,
    WalScan,
    foreign_evidence,
    parse_wal_header,
    scan_wal,
    wal_checksum,
)

__all__ = [
    "BtreePage",
    "DbHeader",
    "FileBytes",
    "FormatError",
    "IndexCell",
    "JournalHeader",
    "PageKind",
    "PageSource",
    "TableInteriorCell",
    "TableLeafCell",
    "WalAnomaly",
    "WalFrame",
    "WalHeader",
    "WalScan",
    "cell_payload",
    "decode_record",
    "encode_record",
    "foreign_evidence",
    "freeblocks",
    "infer_page_size",
    "iter_freelist",
    "journal_problem",
    "journal_restores",
    "journal_torn",
    "parse_cell",
    "parse_header",
    "parse_journal_header",
    "parse_page",
    "parse_wal_header",
    "read_overflow",
    "read_varint",
    "record_shape",
    "scan_wal",
    "wal_checksum",
    "walk_table",
]
