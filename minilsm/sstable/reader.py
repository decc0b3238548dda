"""`TableReader`: point reads and range scans over one table file.

Opening a table reads its footer, index, filter and properties (never a data
block) and keeps them in memory: the index as parallel lists for `bisect`, the
filter as a `BloomFilter`.  A point read is then, in order: a key-range check,
a filter probe, a bisect of the index, and exactly one data block (from the
block cache, or one read of the file) searched through its hash index (binary
search over its offset array when the index cannot say).
Scans decode the first two blocks they reach a version at a time, as the consumer
asks, and each later block the range covers whole in one pass.

All disk reads go through `format.read_file_bytes`, which counts their bytes;
every block through `format.read_block`, which checks and counts it.  The file
itself is fetched per block read from the shared `TableFileCache` if one is
given (so the number of open files stays bounded), else held open.  A forward
scan that reaches its third block keeps the file for the rest of the scan and,
unless the file is mapped (`Options.mmap_reads`), reads it ahead in growing
windows (`format.Readahead`): fewer, larger reads, each block still checked and
counted by `read_block`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Final

from minilsm.bloom import BloomFilter, KeyHash, key_hash
from minilsm.cache import ClockCache, TableFileCache
from minilsm.errors import ClosedError, CorruptionError
from minilsm.fs import FileSystem, RandomAccessFile, is_mapped
from minilsm.keys import KIND_DELETE, KIND_VALUE, MAX_SEQUENCE
from minilsm.sstable.block import Block, BlockBuilder
from minilsm.sstable.format import (
    BLOCK_DATA,
    BLOCK_FILTER,
    BLOCK_INDEX,
    BLOCK_PROPERTIES,
    Index,
    Readahead,
    TableMeta,
    TableProperties,
    decode_index,
    decode_properties,
    read_block,
    read_footer,
    table_path,
)
from minilsm.stats import FilterCounts, Stats

Entry = tuple[bytes, int, bytes]
"""A version as scans yield it: (user_key, trailer, value)."""

BlockCache = ClockCache[tuple[int, int], Block]
"""The block cache: (table number, block offset) -> decoded data block, charged by its bytes."""

_NEWEST: Final = (MAX_SEQUENCE << 8) | 0xFF
"""The largest trailer: ``(key, _NEWEST)`` sorts before every version of `key` in internal order."""


class TableReader:
    """An open table.  Build one with `TableReader.open`.

    Attributes: `number`, `path`, `file_size`, `props` (`TableProperties`), `meta` (`TableMeta`),
    `smallest` and `largest` (user keys), `filter` (`BloomFilter`), and per-table
    counters `filter_checks`, `filter_negatives`, `filter_positives`,
    `filter_true_positives`, `block_reads`, `misses`, and `seek_charge`
    (compaction's, which a stats reset does not zero).  Safe to share between
    threads (counters may then, rarely, lose an increment).
    """

    __slots__ = (
        "_block_cache",
        "_closed",
        "_file",
        "_file_cache",
        "_last_keys",
        "_last_trailers",
        "_may_contain",
        "_num_blocks",
        "_offsets",
        "_sizes",
        "_stats",
        "block_reads",
        "file_size",
        "filter",
        "filter_negatives",
        "filter_positives",
        "filter_true_positives",
        "largest",
        "meta",
        "number",
        "path",
        "props",
        "seek_charge_base",
        "smallest",
    )

    def __init__(
        self,
        number: int,
        path: str,
        file_size: int,
        index: Index,
        bloom: BloomFilter,
        props: TableProperties,
        stats: Stats,
        file: RandomAccessFile | None,
        file_cache: TableFileCache | None,
        block_cache: BlockCache | None,
    ) -> None:
        """Use `TableReader.open`."""
        self.number = number
        self.path = path
        self.file_size = file_size
        self.props = props
        self.meta = TableMeta(
            number,
            file_size,
            props.smallest,
            props.largest,
            props.min_seq,
            props.max_seq,
            props.num_entries,
            props.num_deletions,
        )
        self.smallest = props.smallest
        self.largest = props.largest
        self.filter = bloom
        self.filter_negatives = 0
        self.filter_positives = 0
        self.filter_true_positives = 0
        self.block_reads = 0
        self.seek_charge_base = 0
        """Added to `misses` to make `seek_charge`: what stats resets took off, less what moves forgave."""
        self._last_keys = index.last_keys
        self._last_trailers = index.last_trailers
        self._offsets = index.offsets
        self._sizes = index.sizes
        self._num_blocks = len(index.offsets)
        self._may_contain = bloom.may_contain_hash
        self._stats = stats
        self._file = file
        self._file_cache = file_cache
        self._block_cache = block_cache
        self._closed = False

    @classmethod
    def open(
        cls,
        fs: FileSystem,
        dirname: str,
        number: int,
        stats: Stats,
        *,
        block_cache: BlockCache | None = None,
        file_cache: TableFileCache | None = None,
    ) -> TableReader:
        """Open table `number` in `dirname`: read and check its footer, index, filter and properties.

        Reads no data block.  Raises `CorruptionError` naming the file for any
        damage; `OSError` if the file cannot be opened.
        """
        path = table_path(dirname, number)
        file = file_cache.get(path) if file_cache is not None else fs.open_random(path)
        try:
            index, bloom, props = _read_metadata(file, stats, path)
        except BaseException:
            if file_cache is None:
                file.close()
            else:
                file_cache.evict(path)
            raise
        own = file if file_cache is None else None
        return cls(number, path, file.size(), index, bloom, props, stats, own, file_cache, block_cache)

    @property
    def filter_checks(self) -> int:
        """Filter probes of this table: `filter_negatives` + `filter_positives` (each probe is one or the other)."""
        return self.filter_negatives + self.filter_positives

    @property
    def misses(self) -> int:
        """Reads that got past this table's key range and found nothing here, so went on to the next table."""
        return self.filter_negatives + self.filter_positives - self.filter_true_positives

    @property
    def seek_charge(self) -> int:
        """`misses` since the table was created or last moved, across stats resets: what seek compaction weighs.

        Kept from the read counters, so that reads pay nothing for it (see `compaction.seek_compaction`).
        """
        return self.misses + self.seek_charge_base

    def forget_counts(self, reported: FilterCounts, block_reads: int) -> None:
        """Take counts a stats reset reported off the read counters, keeping the seek charge they make up.

        Taken off, not zeroed: what other threads' reads added since they were reported stays counted.
        """
        self.seek_charge_base += reported.absent_probes  # the `misses` taken off
        self.filter_negatives -= reported.negatives
        self.filter_positives -= reported.positives
        self.filter_true_positives -= reported.true_positives
        self.block_reads -= block_reads

    def clear_seek_charge(self) -> None:
        """Start the seek charge again from zero (a table moved to a deeper level, as LevelDB's fresh allowance)."""
        self.seek_charge_base = -self.misses

    # -- point reads ------------------------------------------------------------

    def get(
        self, key: bytes, h: KeyHash, seq: int, trace: list[dict[str, object]] | None = None, fill_cache: bool = True
    ) -> tuple[int, bytes] | None:
        """The newest version of `key` with sequence number <= `seq`, as ``(kind, value)``; None if there is none.

        `h` is ``key_hash(key)``, computed once by the caller for all tables.
        Costs, in order, stopping at the first that settles it: two key
        comparisons; a filter probe (O(k)); a bisect of the index (O(log
        blocks)); one data block, from the block cache or one read of the file
        (offered to the cache, which keeps a block from its second read, unless
        `fill_cache` is False), and a lookup in it (O(1) through its hash index,
        else a binary search, O(log entries)).  Counts in ``stats`` and on this
        reader; appends one dict to `trace` if given.
        """
        # Counts only outcomes: tables considered and filter checks are their sums (see Stats).
        stats = self._stats
        if key < self.smallest or key > self.largest:
            stats.tables_skipped_by_range += 1
            if trace is not None:
                trace.append({"file": self.number, "outcome": "skipped_by_range"})
            return None
        if not self._may_contain(h):
            stats.filter_negatives += 1
            self.filter_negatives += 1
            if trace is not None:
                trace.append({"file": self.number, "outcome": "filter_negative"})
            return None
        stats.filter_positives += 1
        self.filter_positives += 1

        # The wanted version is the first at or after (key, seq << 8 | 0xFF) in
        # internal order; it lies in the first block whose last version is at or
        # after that.  key <= largest == last_keys[-1], so i < num_blocks here.
        target = (seq << 8) | 0xFF
        last_keys = self._last_keys
        i = bisect_left(last_keys, key)
        if last_keys[i] == key and self._last_trailers[i] > target:  # the key rarely ends a block
            i = self._skip_newer(i, key, target)
            if i == self._num_blocks:  # the table ends in versions of `key` too new to see
                self._miss(True, trace, [], [])
                return None

        cache = self._block_cache
        cached = False
        if cache is None:
            block = self._load_block(i)
        else:
            cache_key = (self.number, self._offsets[i])
            hit = cache.get(cache_key)
            if hit is None:
                block = self._load_block(i)
                if fill_cache:
                    cache.put(cache_key, block, len(block.data))
            else:
                block = hit
                cached = True
                stats.block_cache_hits += 1
        try:
            found = block.get(key, h, target)
        except CorruptionError as e:
            raise self._block_damage(i, e.detail) from e
        if found is False:  # not in block i; only versions too new to see can lie in block i - 1
            self._miss(i > 0 and last_keys[i - 1] == key, trace, [i], [cached])
            return None
        if found is True:
            self._miss(True, trace, [i], [cached])
            return None
        trailer, value = found
        kind = trailer & 0xFF
        stats.filter_true_positives += 1
        self.filter_true_positives += 1
        if trace is not None:
            outcome = "found" if kind == KIND_VALUE else "tombstone"
            trace.append({"file": self.number, "outcome": outcome, "blocks": [i], "cached": [cached]})
        return kind, value

    def _skip_newer(self, i: int, key: bytes, target: int) -> int:
        # Rare: `key` has so many versions newer than the snapshot that they fill
        # block i (and maybe more); their trailers fall from block to block.
        trailers = self._last_trailers
        last_keys = self._last_keys
        n = self._num_blocks
        while i < n and trailers[i] > target and last_keys[i] == key:
            i += 1
        return i

    def _miss(
        self, present: bool, trace: list[dict[str, object]] | None, blocks: list[int], cached: list[bool]
    ) -> None:
        if present:
            self._stats.filter_true_positives += 1
            self.filter_true_positives += 1
        if trace is not None:
            outcome = "not_visible" if present else "false_positive"
            trace.append({"file": self.number, "outcome": outcome, "blocks": blocks, "cached": cached})

    # -- scans ------------------------------------------------------------------

    def iter(self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False) -> Iterator[Entry]:
        """Versions ``(user_key, trailer, value)`` with ``start <= user_key < stop``, in internal order or its reverse.

        Lazy: each block is read (or taken from the block cache, which scans do
        not fill) when the scan reaches it.  From the third block on, a block the
        range covers whole is decoded in one pass; the first two blocks, and a
        block the range ends inside, are decoded a version at a time as the
        consumer asks (the blocks a bound falls in entered by binary search), so
        a seek followed by a few steps decodes a few versions, not a block.
        O(1) per version.
        """
        if (start is not None and start > self.largest) or (stop is not None and stop <= self.smallest):
            return iter(())
        if start is not None and stop is not None and start >= stop:
            return iter(())
        keys = self._last_keys
        first = 0 if start is None else bisect_left(keys, start)
        # The first block ending at or after `stop` may still hold keys below it.
        last = self._num_blocks - 1 if stop is None else min(bisect_left(keys, stop), self._num_blocks - 1)
        return self._scan(first, last, start, stop, reverse)

    def iter_entries(self) -> Iterator[Entry]:
        """Every version of the table in internal order (for compaction)."""
        return self._scan(0, self._num_blocks - 1, None, None, False)

    def _scan(self, first: int, last: int, start: bytes | None, stop: bytes | None, reverse: bool) -> Iterator[Entry]:
        # Chained in C: a version passes through no Python frame of this reader on its way out.
        return chain.from_iterable(self._scan_blocks(first, last, start, stop, reverse))

    def _scan_blocks(
        self, first: int, last: int, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[Iterable[Entry]]:
        """The versions of blocks first..last (in range), one iterable per block, each block read when reached.

        From the third block on, a forward scan of a file not mapped reads it ahead (`format.Readahead`), up
        to the end of block `last` and no further: such a scan is long enough to be worth it, and a seek
        with a few steps rarely gets there (a 4 KiB block holds about 30 versions of 100 bytes).
        """
        blocks = range(last, first - 1, -1) if reverse else range(first, last + 1)
        ahead: Readahead | None = None
        for n, i in enumerate(blocks):
            if n == 2 and not reverse:
                file = self._open_file()
                if not is_mapped(file):  # a mapping's reads are slices already, and the kernel reads ahead
                    ahead = Readahead(file, self._offsets[last] + self._sizes[last], self._stats)
            block = self._scan_block(i, ahead)
            try:
                # (key, _NEWEST) sorts before every version of `key`: the bounds fall between user keys.
                lo = block.seek(start, _NEWEST) if i == first and start is not None else 0
                hi = block.seek(stop, _NEWEST) if i == last and stop is not None else block.count
                if n >= 2 and lo == 0 and hi == block.count:
                    # Deep in a long scan, a whole block is decoded in one pass into a list, which
                    # costs less per version.  The first two blocks stay lazy for short scans.
                    entries = block.entries()
                    yield reversed(entries) if reverse else entries
                    continue
            except CorruptionError as e:
                raise self._block_damage(i, e.detail) from e
            yield self._lazy_versions(block, i, lo, hi, reverse)

    def _lazy_versions(self, block: Block, i: int, lo: int, hi: int, reverse: bool) -> Iterator[Entry]:
        try:
            yield from block.versions(lo, hi, reverse)
        except CorruptionError as e:
            raise self._block_damage(i, e.detail) from e

    def _scan_block(self, i: int, ahead: Readahead | None) -> Block:
        if ahead is not None:
            # Read ahead, the block's bytes came from the file already: a cache hit would save a checksum,
            # and count a disk read as none.
            return self._load_block(i, ahead)
        cache = self._block_cache
        if cache is not None:
            block = cache.get((self.number, self._offsets[i]))
            if block is not None:
                self._stats.block_cache_hits += 1
                return block
        return self._load_block(i)

    # -- blocks -----------------------------------------------------------------

    def _load_block(self, i: int, ahead: Readahead | None = None) -> Block:
        """Data block `i` from its file, or from what a scan has read of it ahead: one `read_block`."""
        if ahead is None:
            file = self._open_file()
        elif self._closed:
            raise self._closed_error()
        else:
            file = ahead.file
        contents = read_block(
            file, self._offsets[i], self._sizes[i], self._stats, self.path, kind=BLOCK_DATA, ahead=ahead, table=self
        )
        try:
            block = Block(contents)
        except CorruptionError as e:
            raise self._block_damage(i, e.detail) from e
        if block.last_trailer != self._last_trailers[i]:
            # The checksum vouches for the bytes, not for whose they are: a file replaced after the index was
            # read (another table copied over it), or a read the disk misdirected, can give a sound block of
            # another table.  Sequence numbers are unique in a store and file numbers are never reused, so
            # such a block ends in another version than the index names (RocksDB seeds its checksums with the
            # file and offset instead, which needs a format of its own).  About 0.15-0.25 us a block read from
            # disk, 2-3% of a present-key read without the block cache.
            raise self._block_damage(i, "its last version is not the one the index names")
        return block

    def _open_file(self) -> RandomAccessFile:
        """The table's file: held open, or fetched from the file cache (opened again if it was dropped)."""
        file = self._file
        if file is None:
            if self._closed or self._file_cache is None:
                raise self._closed_error()
            file = self._file_cache.get(self.path)
        return file

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"table {self.path} is closed")

    def approximate_offset(self, key: bytes) -> int:
        """About where in the file the versions of `key` would begin: the offset of the data block that would
        hold it, or the end of the data blocks past the last key.  From the index in memory, O(log blocks)."""
        i = bisect_left(self._last_keys, key)
        return self._offsets[i] if i < self._num_blocks else self.props.data_size

    def block_entries(self, i: int, after: tuple[bytes, int] | None = None) -> list[Entry]:
        """Every version of data block `i`, read from the file and checked, their order and kinds too, the first
        after `after` (the (key, trailer) of the version before it) if given: ``minilsm repair`` skips a block
        that raises `CorruptionError`.  One `read_block`, O(block size)."""
        block = self._load_block(i)
        try:
            entries = block.entries()
            check_versions(entries, after)
        except CorruptionError as e:
            raise self._block_damage(i, e.detail) from e
        return entries

    def _block_damage(self, i: int, detail: str) -> CorruptionError:
        """Damage found in data block `i`, named by its number and offset in this file."""
        return CorruptionError(f"data block {i} at offset {self._offsets[i]}: {detail}", self.path)

    # -- checking and closing ---------------------------------------------------

    def verify(self) -> None:
        """Read and check every block of the file, bypassing the block cache (for ``minilsm check``).

        Beyond the checksums: data blocks tile the file and agree with the index,
        versions are in strict internal order, every user key passes the filter,
        and the counts, key range and sequence range match the properties.
        O(file size); the reads count in ``stats`` and on this reader like any other.
        """
        file = self._open_file()
        index, bloom, props = _read_metadata(file, self._stats, self.path)
        num_entries = num_deletions = 0
        min_seq = max_seq = None
        prev: tuple[bytes, int] | None = None
        rebuilt = BlockBuilder()  # `finish` empties it for the next block
        for i in range(len(index.offsets)):
            contents = read_block(
                file, index.offsets[i], index.sizes[i], self._stats, self.path, kind=BLOCK_DATA, table=self
            )
            try:
                entries = Block(contents).entries()
                check_versions(entries, prev)
            except CorruptionError as e:
                raise self._block_damage(i, e.detail) from e
            for key, trailer, value in entries:
                if prev is None or key != prev[0]:
                    h = key_hash(key)
                    if not bloom.may_contain_hash(h):
                        raise self._block_damage(i, f"the filter rejects key {key!r}, which the table holds")
                rebuilt.add(key, trailer, value, h)
                prev = (key, trailer)
                seq, kind = trailer >> 8, trailer & 0xFF
                num_entries += 1
                num_deletions += kind == KIND_DELETE
                min_seq = seq if min_seq is None else min(min_seq, seq)
                max_seq = seq if max_seq is None else max(max_seq, seq)
            if i == 0 and entries[0][0] != props.smallest:
                raise self._block_damage(i, "first key differs from the smallest key in the properties")
            if prev != (index.last_keys[i], index.last_trailers[i]):
                raise self._block_damage(i, "last version differs from the index entry")
            # The layout is a function of the entries: this checks every offset and hash bucket.
            if rebuilt.finish() != contents:
                raise self._block_damage(i, "offset array or hash index differs from what the entries imply")
        facts = (num_entries, num_deletions, min_seq, max_seq)
        if facts != (props.num_entries, props.num_deletions, props.min_seq, props.max_seq):
            raise CorruptionError(
                f"properties claim (entries, deletions, min seq, max seq) = "
                f"{(props.num_entries, props.num_deletions, props.min_seq, props.max_seq)}, the data holds {facts}",
                self.path,
            )

    def close(self) -> None:
        """Release the file if this reader holds it.  Data blocks cannot be read afterwards (`ClosedError`).

        With a file cache the cached file is left for the owner to `evict`
        when the table is deleted.
        """
        self._closed = True
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __repr__(self) -> str:
        return f"TableReader({self.path!r}, entries={self.props.num_entries}, blocks={self._num_blocks})"


def check_versions(entries: list[Entry], after: tuple[bytes, int] | None = None) -> None:
    """`CorruptionError` unless `entries` are in strict internal order (keys ascending, a key's versions newest
    first), each after `after` if given, and each of a known kind.  O(len(entries)).

    Reads and scans trust a block whose checksum passed for this (checking it would cost every read); a block
    forged or damaged with a valid checksum breaks it.  `verify` and repair check it; a compaction that meets
    such a block finds it through `verify` (see `compaction.write_compaction_tables`).
    """
    prev_key, prev_trailer = after if after is not None else (None, 0)
    for key, trailer, _ in entries:
        if prev_key is not None:
            if key < prev_key:
                raise CorruptionError(f"key {key!r} follows {prev_key!r}")
            if key == prev_key and trailer >= prev_trailer:
                raise CorruptionError(f"versions of {key!r} are out of order")
        if trailer & 0xFF not in (KIND_VALUE, KIND_DELETE):
            raise CorruptionError(f"unknown kind {trailer & 0xFF}")
        prev_key, prev_trailer = key, trailer


def _read_metadata(file: RandomAccessFile, stats: Stats, path: str) -> tuple[Index, BloomFilter, TableProperties]:
    """Footer, index, filter and properties of a table, each checked and cross-checked against the others."""
    footer = read_footer(file, stats, path)

    def decoded(kind: int, offset: int, size: int) -> bytes:
        return read_block(file, offset, size, stats, path, kind=kind)

    where = ""
    try:
        where = f"index block at offset {footer.index_block.offset}: "
        index = decode_index(decoded(BLOCK_INDEX, *footer.index_block), footer.filter_block.offset)
        where = f"filter block at offset {footer.filter_block.offset}: "
        bloom = BloomFilter.from_bytes(decoded(BLOCK_FILTER, *footer.filter_block))
        where = f"properties block at offset {footer.properties_block.offset}: "
        props = decode_properties(decoded(BLOCK_PROPERTIES, *footer.properties_block))
    except CorruptionError as e:
        if e.path is not None:
            raise
        raise CorruptionError(where + e.detail, path) from e
    problems = []
    if props.format_version != footer.version:
        problems.append(f"format version {props.format_version} differs from the footer's {footer.version}")
    if props.num_data_blocks != len(index.offsets) or not index.offsets:
        problems.append(f"{props.num_data_blocks} data blocks claimed, the index lists {len(index.offsets)}")
    if (props.data_size, props.filter_size, props.index_size) != (
        footer.filter_block.offset,
        footer.filter_block.size,
        footer.index_block.size,
    ):
        problems.append("data, filter or index size differs from the footer")
    if (props.filter_num_bits, props.filter_k) != (bloom.num_bits, bloom.k):
        problems.append("filter parameters differ from the filter block")
    if index.last_keys and props.largest != index.last_keys[-1]:
        problems.append("largest key differs from the index")
    if props.smallest > props.largest or props.min_seq > props.max_seq:
        problems.append("key or sequence range is inverted")
    # A read skips a block by its index trailer, unread, when that names a version too new to see: a trailer past
    # the table's sequence range would hide whole blocks from every read, with no error.
    low, high = props.min_seq << 8, (props.max_seq << 8) | 0xFF
    if not all(low <= t <= high and t & 0xFF in (KIND_VALUE, KIND_DELETE) for t in index.last_trailers):
        problems.append("an index entry names a version outside the table's sequence range, or of no known kind")
    if not props.num_data_blocks <= props.num_entries or props.num_deletions > props.num_entries:
        problems.append("entry counts are inconsistent")
    if problems:
        raise CorruptionError("properties block: " + "; ".join(problems), path)
    return index, bloom, props
