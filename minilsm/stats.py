"""Counters: what the store did, counted at the one place where each thing happens.

`Stats` is the live, mutable set of counters that the layers below `db.py`
increment (a block read in `sstable.format.read_block`, a filter probe in the
table reader, ...).  `db.stats()` hands out a frozen copy.

Increments are plain attribute updates, not atomic across threads: under
concurrent readers a count can, rarely, be lost.  Single-threaded runs (tests,
benchmarks) count exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True)
class Stats:
    # point reads (db level)
    gets: int = 0
    found_in_memtable: int = 0
    found_in_tables: int = 0
    not_found: int = 0
    # per table probed by a point read
    tables_considered: int = 0
    tables_skipped_by_range: int = 0
    filter_checks: int = 0
    filter_negatives: int = 0
    filter_positives: int = 0
    filter_true_positives: int = 0
    # table file I/O (counted in sstable.format.read_block and the reader's open)
    block_reads: int = 0
    block_bytes_read: int = 0
    block_cache_hits: int = 0
    index_loads: int = 0
    filter_loads: int = 0
    # write path and compaction
    user_bytes_written: int = 0
    log_bytes_written: int = 0
    flush_bytes_written: int = 0
    compaction_bytes_written: int = 0
    compaction_bytes_read: int = 0
    flushes: int = 0
    compactions: int = 0
    entries_dropped_shadowed: int = 0
    tombstones_dropped: int = 0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)

    def copy(self) -> Stats:
        return Stats(*(getattr(self, f.name) for f in fields(self)))
