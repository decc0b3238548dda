"""Counters: what the store did, counted at the one place where each thing happens.

`Stats` is the live, mutable set of counters that each layer increments where
the thing happens (a get, a write, a flush or a compaction in `db.py`, a block
read in `sstable.format.read_block`, a filter probe in the table reader, a
dropped version in `compaction.drop_dead`).  The frozen types below are what
the store hands out: `DBStats` from ``db.stats()`` (the counters, per level and
per table), `TableInfo` rows from ``db.tables()``, and `FilterCounts`, the
filter outcomes with the false-positive rate measured beside the one theory
predicts.  They are plain data; `minilsm.report` gathers them from a live store.

Increments are plain attribute updates, not atomic across threads: under
concurrent readers a count can, rarely, be lost.  Single-threaded runs (tests,
benchmarks) count exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Final


@dataclass(slots=True)
class Stats:
    # point reads (db level)
    gets: int = 0
    found_in_memtable: int = 0
    found_in_tables: int = 0
    not_found: int = 0
    # per table probed by a point read (`tables_considered` and `filter_checks` are sums of these)
    tables_skipped_by_range: int = 0
    filter_negatives: int = 0
    filter_positives: int = 0
    filter_true_positives: int = 0
    # table file I/O (counted in sstable.format: blocks in read_block, bytes and reads in read_file_bytes)
    block_reads: int = 0
    block_bytes_read: int = 0
    file_reads: int = 0
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

    # A table a point read considers is either skipped by its key range or has its filter probed, and a
    # probe ends negative or positive.  So these two are sums, not counters: the hottest path of the
    # store (every table every read considers) then updates two counters fewer, and they stay exact.

    @property
    def filter_checks(self) -> int:
        """Filter probes: `filter_negatives` + `filter_positives`."""
        return self.filter_negatives + self.filter_positives

    @property
    def tables_considered(self) -> int:
        """Tables point reads considered: `tables_skipped_by_range` + `filter_checks`."""
        return self.tables_skipped_by_range + self.filter_checks

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)

    def add(self, other: Stats) -> None:
        """Add `other`'s counts to these (what a compaction worker process counted, to the store's)."""
        self._add(other, 1)

    def take_off(self, other: Stats | DBStats) -> None:
        """Subtract `other`'s counts from these: what a stats reset reported, keeping what came in since."""
        self._add(other, -1)

    def _add(self, other: Stats | DBStats, sign: int) -> None:
        # One in-place update per counter, spelled out, with no call between its read and its write: CPython
        # switches threads at calls and loop jumps, not inside such a statement, so a count that another thread
        # adds meanwhile is not overwritten (a getattr/setattr loop lost 13 of 181,400 reads to resets every
        # 10 ms beside two reader threads).  tests/test_observability.py checks that it names every field.
        self.gets += sign * other.gets
        self.found_in_memtable += sign * other.found_in_memtable
        self.found_in_tables += sign * other.found_in_tables
        self.not_found += sign * other.not_found
        self.tables_skipped_by_range += sign * other.tables_skipped_by_range
        self.filter_negatives += sign * other.filter_negatives
        self.filter_positives += sign * other.filter_positives
        self.filter_true_positives += sign * other.filter_true_positives
        self.block_reads += sign * other.block_reads
        self.block_bytes_read += sign * other.block_bytes_read
        self.file_reads += sign * other.file_reads
        self.block_cache_hits += sign * other.block_cache_hits
        self.index_loads += sign * other.index_loads
        self.filter_loads += sign * other.filter_loads
        self.user_bytes_written += sign * other.user_bytes_written
        self.log_bytes_written += sign * other.log_bytes_written
        self.flush_bytes_written += sign * other.flush_bytes_written
        self.compaction_bytes_written += sign * other.compaction_bytes_written
        self.compaction_bytes_read += sign * other.compaction_bytes_read
        self.flushes += sign * other.flushes
        self.compactions += sign * other.compactions
        self.entries_dropped_shadowed += sign * other.entries_dropped_shadowed
        self.tombstones_dropped += sign * other.tombstones_dropped

    def copy(self) -> Stats:
        return Stats(*(getattr(self, f.name) for f in fields(self)))


# -- snapshots: what `db.stats()` and `db.tables()` hand out --------------------------


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None when the denominator is 0: the rate of nothing is unknown, not 0."""
    return numerator / denominator if denominator else None


@dataclass(frozen=True, slots=True)
class FilterCounts:
    """Filter outcomes of point reads, on one table, one level or the whole store, beside what theory predicts.

    Every probe of a table whose key range holds the key is one check, and ends as
    a *negative* (the filter said no: the data-block read is avoided, RocksDB's
    ``BLOOM_FILTER_USEFUL``) or a *positive*.  A positive is *true* when the table
    holds a version of the key (value or tombstone), else *false*: the block was
    read for nothing.  Counts add up with ``+``.
    """

    checks: int = 0
    negatives: int = 0
    positives: int = 0
    true_positives: int = 0
    expected_false_positives: float = 0.0
    """False positives the textbook rate (1 - e^(-kn/m))^k of each probed table predicts for these probes."""

    @classmethod
    def of(cls, negatives: int, positives: int, true_positives: int, expected_fpr: float) -> FilterCounts:
        """The counts of one table, `checks` and the expected false positives derived from these three reads."""
        counts = cls(negatives + positives, negatives, positives, true_positives)
        return cls(counts.checks, negatives, positives, true_positives, expected_fpr * counts.absent_probes)

    @property
    def false_positives(self) -> int:
        return self.positives - self.true_positives

    @property
    def absent_probes(self) -> int:
        """Probes of a table for a key it does not hold: the only probes a filter can get wrong."""
        return self.negatives + self.false_positives

    @property
    def measured_fpr(self) -> float | None:
        """false positives / (negatives + false positives); None before any absent-key probe."""
        return ratio(self.false_positives, self.absent_probes)

    @property
    def expected_fpr(self) -> float | None:
        """The rate theory predicts for the same probes (each table weighted by its absent-key probes)."""
        return ratio(self.expected_false_positives, self.absent_probes)

    def __add__(self, other: FilterCounts) -> FilterCounts:
        return FilterCounts(
            self.checks + other.checks,
            self.negatives + other.negatives,
            self.positives + other.positives,
            self.true_positives + other.true_positives,
            self.expected_false_positives + other.expected_false_positives,
        )

    def to_dict(self) -> dict[str, Any]:
        """The counts and the derived figures, JSON-ready."""
        return {
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "false_positives": self.false_positives,
            "measured_fpr": self.measured_fpr,
            "expected_fpr": self.expected_fpr,
        }


@dataclass(frozen=True, slots=True)
class TableInfo:
    """One live table, as ``db.tables()`` lists it: where it sits, what it holds, what its filter costs and does."""

    level: int
    number: int
    file_name: str
    file_size: int
    entries: int
    """Versions stored, tombstones included."""
    tombstones: int
    smallest: bytes
    largest: bytes
    min_seq: int
    max_seq: int
    data_blocks: int
    filter_keys: int
    """n: distinct user keys the filter was built over."""
    filter_bits: int
    """m: bits in the filter (0: no filter, every probe says maybe)."""
    filter_k: int
    """k: probes per key."""
    filter_bytes: int
    """The filter block's size in the file (bit array, 32-byte header and checksum, 9-byte block trailer)."""
    expected_fpr: float
    """(1 - e^(-kn/m))^k from this table's own n, m and k; 1.0 without a filter."""
    filter: FilterCounts
    """Point-read probes of this table since the store opened or the counters were reset."""
    block_reads: int
    """Data blocks read from this file by this store's reader: point reads, scans, and compactions run in the
    store's thread.  A compaction in the worker process reads through readers of its own, so its block reads
    count in the store's totals only."""

    @property
    def bits_per_key(self) -> float:
        return self.filter_bits / self.filter_keys if self.filter_keys else 0.0

    @property
    def measured_fpr(self) -> float | None:
        return self.filter.measured_fpr

    def to_dict(self, show_key: Callable[[bytes], str] = bytes.hex) -> dict[str, Any]:
        """JSON-ready; keys rendered with `show_key` (hex by default)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(
            smallest=show_key(self.smallest),
            largest=show_key(self.largest),
            filter=self.filter.to_dict(),
            bits_per_key=self.bits_per_key,
            measured_fpr=self.measured_fpr,
        )
        return d


@dataclass(frozen=True, slots=True)
class LevelStats:
    """One level: its tables and bytes, and the filter counts of the tables that live there now."""

    level: int
    tables: int
    bytes: int
    entries: int
    tombstones: int
    filter: FilterCounts
    block_reads: int

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["filter"] = self.filter.to_dict()
        return d


@dataclass(frozen=True, slots=True)
class DBStats:
    """A frozen snapshot of a store's counters and shape: what ``db.stats()`` returns.

    The counters (the fields up to `tombstones_dropped`, the same as `Stats`) count
    since the store was opened or last reset, all tables included.  `levels` and
    `tables` describe the tables live now; their filter counts and block reads
    are those of the live tables only, since a table's counts leave with it
    when compaction replaces it (so after compactions the per-level sums can be
    below the totals), and a compaction in the worker process counts its block
    reads in the totals only.
    """

    # point reads
    gets: int
    found_in_memtable: int
    found_in_tables: int
    not_found: int
    """Reads that returned the default: the key was never written, or its newest version is a tombstone."""
    # per table probed by a point read
    tables_considered: int
    tables_skipped_by_range: int
    filter_checks: int
    filter_negatives: int
    """The filter said no: a data-block read avoided (RocksDB's BLOOM_FILTER_USEFUL)."""
    filter_positives: int
    filter_true_positives: int
    # table file I/O
    block_reads: int
    """Data blocks read from table files and checked (block-cache hits are not reads); scans and compactions
    count too.  A point read takes each in a read of its own; a long scan takes them from its readahead windows
    as it reaches them, so blocks a window held past where the scan stopped count in `block_bytes_read` only."""
    block_bytes_read: int
    """Bytes read from table files, as the reads returned them: data blocks, a long scan's readahead windows (all
    of each, read by the scan or not), and index, filter, properties and footer when a table opens."""
    file_reads: int
    """Reads of table files, as made: one system call each (``pread``), or a slice of a mapped file.  A point read's
    data block, a scan's block or readahead window, and the footer and metadata blocks when a table opens."""
    block_cache_hits: int
    index_loads: int
    filter_loads: int
    # write path and compaction
    user_bytes_written: int
    """Key plus value bytes of every put and delete."""
    log_bytes_written: int
    flush_bytes_written: int
    compaction_bytes_written: int
    compaction_bytes_read: int
    """Bytes of the tables compactions merged away, whole (their file sizes), as LevelDB's and RocksDB's
    compaction statistics count "read"; trivial moves count nothing.  Not a count of reads: a compaction in the
    worker process reads all of them, but one in the store's thread only their data blocks (index, filter and
    properties are in memory already), some perhaps from the block cache, so 10% less in a measured run.  What
    a compaction reads in the store's thread counts in `block_reads` and `block_bytes_read` as it happens."""
    flushes: int
    """Memtables written as level-0 tables, the one an open makes of the writes it replays from the log included."""
    compactions: int
    """Compactions run, trivial moves included (tables relabelled to a deeper level, nothing read or written)."""
    entries_dropped_shadowed: int
    tombstones_dropped: int
    # shape, now
    levels: tuple[LevelStats, ...]
    tables: tuple[TableInfo, ...]
    memtable_bytes: int
    """Approximate bytes in the memtables (not yet in any table)."""
    live_bytes: int | None = None
    """Key plus value bytes of the newest visible version of every key (None unless measured: a full scan)."""

    @property
    def false_positives(self) -> int:
        """Filter said maybe and the table did not hold the key: a block read for nothing."""
        return self.filter_positives - self.filter_true_positives

    @property
    def measured_fpr(self) -> float | None:
        """false positives / (filter negatives + false positives), over every table probed."""
        return ratio(self.false_positives, self.filter_negatives + self.false_positives)

    @property
    def filter(self) -> FilterCounts:
        """The filter counts of the live tables, summed, with the false positives theory expects of them."""
        return sum((level.filter for level in self.levels), FilterCounts())

    @property
    def expected_fpr(self) -> float | None:
        """The rate theory predicts for the absent-key probes of the live tables (see `FilterCounts`)."""
        return self.filter.expected_fpr

    @property
    def table_bytes(self) -> int:
        """Bytes of every live table file."""
        return sum(level.bytes for level in self.levels)

    @property
    def write_amplification(self) -> float | None:
        """(flush + compaction bytes written) / user bytes written; None before any write.

        The log's bytes are left out, as LevelDB's and RocksDB's figure does.
        """
        return ratio(self.flush_bytes_written + self.compaction_bytes_written, self.user_bytes_written)

    @property
    def space_amplification(self) -> float | None:
        """Table bytes / live bytes; None unless `live_bytes` was measured and is positive.

        A fully compacted store sits above 1 by the table format's own bytes, about
        26 an entry (its 16-byte header, 4-byte offset and hash bucket, then block
        framing, index and 10-bit filter): 1.23 for 16-byte keys and 100-byte values,
        1.56 for 16-byte keys and 31-byte values (measured on 100,000 keys).  Shadowed
        versions and tombstones waiting for compaction raise it.  Data still in the
        memtable counts as live but is in no table yet.
        """
        return ratio(self.table_bytes, self.live_bytes) if self.live_bytes else None

    def to_dict(self, show_key: Callable[[bytes], str] = bytes.hex) -> dict[str, Any]:
        """Every counter and derived figure, per level and per table, JSON-ready (keys via `show_key`)."""
        d: dict[str, Any] = {name: getattr(self, name) for name in COUNTER_NAMES}
        d.update(
            false_positives=self.false_positives,
            measured_fpr=self.measured_fpr,
            expected_fpr=self.expected_fpr,
            write_amplification=self.write_amplification,
            space_amplification=self.space_amplification,
            table_bytes=self.table_bytes,
            memtable_bytes=self.memtable_bytes,
            live_bytes=self.live_bytes,
            levels=[level.to_dict() for level in self.levels],
            tables=[t.to_dict(show_key) for t in self.tables],
        )
        return d


DERIVED_COUNTERS: Final = ("tables_considered", "filter_checks")
"""Counters `Stats` computes from its fields (properties) rather than keeps."""
COUNTER_NAMES: Final = tuple(f.name for f in fields(DBStats))[: len(fields(Stats)) + len(DERIVED_COUNTERS)]
"""The counters `Stats` keeps or derives and `DBStats` reports, in order."""
