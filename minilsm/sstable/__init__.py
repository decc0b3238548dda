"""Sorted string tables: immutable files of sorted versions with an index, a Bloom filter and properties.

`TableBuilder` writes one (flush and compaction), `TableReader` reads one (point
reads and scans).  The byte layout lives in `format` (framing, footer, index,
properties) and `block` (data blocks), and is described in docs/FORMAT.md.
"""

from minilsm.sstable.builder import TableBuilder
from minilsm.sstable.format import (
    TableMeta,
    TableProperties,
    parse_table_file_name,
    read_block,
    table_file_name,
)
from minilsm.sstable.reader import BlockCache, TableReader

__all__ = [
    "BlockCache",
    "TableBuilder",
    "TableMeta",
    "TableProperties",
    "TableReader",
    "parse_table_file_name",
    "read_block",
    "table_file_name",
]
