"""`TableBuilder`: writes a table file from versions given in internal order.

Flushes and compactions feed versions one by one; data blocks are cut at
`block_size` and written as they fill, so memory holds one block plus the
index and one hash pair per distinct user key.  That one hash serves twice: the
block's hash index as the block is built, and the filter, which is sized and
built at `finish`, when the distinct count is known.  The file is written as
``NNNNNN.sst.tmp``, fsynced, renamed into place and the directory fsynced, so
a crash leaves either no table or a complete one, never a torn ``.sst``.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
from collections.abc import Iterable, Iterator
from itertools import accumulate, compress, count, islice, repeat, takewhile, tee
from operator import add, and_, gt, itemgetter, le, ne, neg
from typing import Final

from minilsm.bloom import BloomFilter, KeyHash, key_hashes
from minilsm.fs import FileSystem
from minilsm.keys import KIND_DELETE, KIND_VALUE, MAX_SEQUENCE
from minilsm.sstable.block import BLOCK_FOOTER, ENTRY_HEADER, MAX_ENTRY_GROWTH, BlockBuilder, EntryRun
from minilsm.sstable.format import (
    BLOCK_DATA,
    BLOCK_FILTER,
    BLOCK_INDEX,
    BLOCK_PROPERTIES,
    BLOCK_TRAILER_SIZE,
    FORMAT_VERSION,
    TEMP_SUFFIX,
    BlockHandle,
    Index,
    TableMeta,
    TableProperties,
    encode_footer,
    encode_index,
    encode_properties,
    frame_block,
    table_file_name,
)

__all__ = ["TableBuilder", "TableMeta"]  # TableMeta is what `finish` returns

Entry = tuple[bytes, int, bytes]
"""A version as builders take it: ``(user_key, trailer, value)``."""

_MAX_TRAILER: Final = (1 << 64) - 1
_MAX_LENGTH: Final = (1 << 32) - 1
_CHUNK: Final = 1024
"""Versions `add_run` handles a column at a time.  A chunk costs ~15 us of setup, ~1.5% of its time; more saves
little and holds more versions in memory."""
_MAX_GROWTH: Final = MAX_ENTRY_GROWTH + BLOCK_TRAILER_SIZE + BLOCK_FOOTER.size
"""The most a version adds to `estimated_size()` beyond its key and value bytes: its entry's share of a block,
and a block cut (the written block's trailer and the next block's footer)."""
_KEY: Final = itemgetter(0)
_TRAILER: Final = itemgetter(1)
_VALUE: Final = itemgetter(2)
_HIGH: Final = itemgetter(1)  # of a KeyHash: the half the blocks' hash indexes use


def _bad_trailer(trailer: int) -> str:
    return f"trailer {trailer} is not seq << 8 | kind with a known kind"


def _first(flags: Iterator[bool], default: int) -> int:
    """The index of the first true flag, or `default` if none is, found in C.  O(index)."""
    return next(compress(count(), flags), default)


def _take_below(versions: Iterator[Entry], budget: int, n: int) -> list[Entry]:
    """Up to `n` versions from `versions`, each one whose predecessors could add less than `budget` in all.

    What a version can add to `estimated_size()` is bounded by its key and
    value lengths plus `_MAX_GROWTH`.  Exactly the versions returned are taken from `versions`: the sums run
    one version behind (`accumulate` yields its initial 0 before taking
    anything), and `zip` asks `takewhile` for the next sum before it asks the
    last `tee` for the version, so the version after the last sum below
    `budget` is never taken.  The tees are dropped afterwards, all having
    taken what `versions` gave.  O(n); about 0.1 us per version (0.35 on
    versions not in the CPU caches).
    """
    if budget <= 0:
        return []
    keys, values, taken = tee(versions, 3)
    bounds = map(add, map(len, map(_KEY, keys)), map(len, map(_VALUE, values)))
    sums = takewhile(budget.__gt__, accumulate(map(add, bounds, repeat(_MAX_GROWTH)), initial=0))
    return [version for _, version in islice(zip(sums, taken, strict=False), n)]


class TableBuilder:
    """Builds table `number` in `dirname`.  Creating one creates ``NNNNNN.sst.tmp``; end with `finish` or `abandon`.

    `add` and `add_run` cost O(len(key) + len(value)) amortized per version plus
    one key hash per new user key; a block is written to the (buffered) file each
    time one fills.  Flushes and compactions feed whole streams to `add_run`.
    """

    __slots__ = (
        "_bits_per_key",
        "_block",
        "_block_size",
        "_dirname",
        "_done",
        "_file",
        "_fs",
        "_hashes",
        "_index",
        "_last_key",
        "_last_trailer",
        "_max_seq",
        "_min_seq",
        "_num_deletions",
        "_num_entries",
        "_offset",
        "_smallest",
        "_tmp_path",
        "number",
        "path",
    )

    def __init__(
        self, fs: FileSystem, dirname: str, number: int, *, block_size: int = 4096, bits_per_key: float = 10.0
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if bits_per_key < 0:
            raise ValueError(f"bits_per_key must be >= 0, got {bits_per_key}")
        self.number = number
        self.path = os.path.join(dirname, table_file_name(number))
        self._fs = fs
        self._dirname = dirname
        self._block_size = block_size
        self._bits_per_key = float(bits_per_key)
        self._tmp_path = self.path + TEMP_SUFFIX
        self._file = fs.open_writable(self._tmp_path)
        self._block = BlockBuilder()
        self._index = Index([], [], [], [])
        self._hashes: list[KeyHash] = []
        self._offset = 0
        self._num_entries = 0
        self._num_deletions = 0
        self._smallest = b""
        self._last_key: bytes | None = None
        self._last_trailer = 0
        self._min_seq = MAX_SEQUENCE
        self._max_seq = 0
        self._done = False

    @property
    def num_entries(self) -> int:
        """Versions added so far."""
        return self._num_entries

    def estimated_size(self) -> int:
        """Bytes of the file so far: written blocks plus the block being filled (metadata not counted)."""
        return self._offset + self._block.size()

    def add(self, user_key: bytes, trailer: int, value: bytes) -> None:
        """Append a version; raises ValueError unless it sorts strictly after the previous one.

        Internal order is user key ascending, then trailer descending.  A
        one-version `add_run`, so the two share every check; being a chunk of
        one, it costs some 10 us of setup: streams go through `add_run`.
        """
        self.add_run(((user_key, trailer, value),))

    def add_run(self, entries: Iterable[Entry], stop_size: int | None = None) -> Entry | None:
        """Append the versions ``(user_key, trailer, value)`` of `entries`, each checked as `add` checks it.

        Returns None once `entries` runs out.  With `stop_size`, stops instead
        at the first version of a new user key found when `estimated_size()`
        has reached `stop_size`, and returns that version, taken from
        `entries` but not added: a table cut there ends between user keys, so
        a key's versions never straddle two tables.  A builder without entries
        never stops.  A rejected version raises ValueError and leaves the
        builder as it was after the version before it.

        Versions are taken up to `_CHUNK` at a time and added a column at a
        time (`_append`), so that the per-version work is C code over lists
        rather than Python bytecode per version.  With `stop_size`, a chunk
        holds only versions before which the table cannot have reached it
        (`_take_below`), so the stop never falls inside a chunk and no version
        past it is taken; once it may have been reached, versions go one at a
        time.  O(len(key) + len(value)) amortized per version, about 1 us for
        16-byte keys and 100-byte values.
        """
        if self._done:
            raise ValueError(f"table builder for {self.path} is already finished or abandoned")
        versions = iter(entries)
        while True:
            stop = False
            if stop_size is None:
                chunk = list(islice(versions, _CHUNK))
            else:
                chunk = _take_below(versions, stop_size - self.estimated_size(), _CHUNK)
                if not chunk:  # the table may have reached stop_size, or `versions` is spent
                    stop = self._num_entries > 0
                    chunk = list(islice(versions, 1))
            if not chunk:
                return None
            stopped_at = self._append(chunk, stop)
            if stopped_at is not None:
                return stopped_at

    def _append(self, chunk: list[Entry], stop: bool) -> Entry | None:
        """Check and add the versions of `chunk`; with `stop`, return its first version instead if it starts a user key.

        The checks run a column at a time, in C, and find the first version
        that breaks a rule, checking each version in the order `add` documents:
        its kind, its place after the version before it, then the encodable
        lengths and trailer (`EntryRun` packs the headers).  The versions
        before it go in; then it raises.  The good run is hashed (one
        `key_hashes` digest per new user key, for the filter and the blocks'
        hash indexes) and cut into blocks by `BlockBuilder.fill`.
        O(len(chunk) + bytes) of C work, plus O(log) Python per block.
        """
        n = len(chunk)
        keys = list(map(_KEY, chunk))
        trailers = list(map(_TRAILER, chunk))
        values = list(map(_VALUE, chunk))
        last = self._last_key
        before = [last, *keys]  # before[i] is the key of the version before version i
        new = list(map(ne, keys, before))
        kinds = list(map(and_, trailers, repeat(0xFF)))
        bad = n if max(kinds) <= KIND_VALUE else _first(map(KIND_VALUE.__lt__, kinds), n)  # KIND_DELETE is 0
        # Order.  Usually every key is new and the keys ascend, which one C pass confirms; otherwise each
        # version must follow the one before it in internal order: key ascending, then trailer descending.
        if last is not None and (keys[0] < last or (keys[0] == last and trailers[0] >= self._last_trailer)):
            bad = 0
        elif not all(map(gt, islice(keys, 1, None), keys)):
            internal = list(zip(keys, map(neg, trailers), strict=True))
            bad = min(bad, 1 + _first(map(le, islice(internal, 1, None), internal), n - 1))
        if stop and bad and new[0]:
            return chunk[0]
        if bad < n:
            if bad:
                self._append(chunk[:bad], False)
            key, trailer = keys[bad], trailers[bad]
            if kinds[bad] > KIND_VALUE:
                raise ValueError(_bad_trailer(trailer))
            prev = before[bad]
            if prev is not None and key < prev:
                raise ValueError(f"key {key!r} added after {prev!r}: keys must be added in ascending order")
            prev_trailer = trailers[bad - 1] if bad else self._last_trailer
            raise ValueError(f"versions of {key!r} must be added newest first: trailer {trailer} after {prev_trailer}")
        new_hashes = key_hashes(compress(keys, new))
        hashes = self._hashes
        try:
            run = EntryRun(keys, trailers, values, new, [hashes[-1][1] if hashes else 0, *map(_HIGH, new_hashes)])
        except struct.error as e:
            # A length or trailer the header cannot hold: find the first such version (the error path only).
            for bad, (key, trailer, value) in enumerate(chunk):  # noqa: B007  # `bad` is used after the loop
                with contextlib.suppress(struct.error):
                    ENTRY_HEADER.pack(len(key), len(value), trailer)
                    continue
                break
            if bad:
                self._append(chunk[:bad], False)
            if len(key) > _MAX_LENGTH or len(value) > _MAX_LENGTH:
                raise ValueError("key and value must each be shorter than 4 GiB") from None
            if not 0 <= trailer <= _MAX_TRAILER:
                raise ValueError(_bad_trailer(trailer)) from None
            raise e
        hashes += new_hashes
        if last is None:
            self._smallest = keys[0]
        self._last_key = keys[-1]
        self._last_trailer = trailers[-1]
        self._num_entries += n
        self._num_deletions += kinds.count(KIND_DELETE)
        # Shifting out the kind keeps the order, so the extreme trailers hold the extreme sequence numbers.
        self._min_seq = min(self._min_seq, min(trailers) >> 8)
        self._max_seq = max(self._max_seq, max(trailers) >> 8)
        block = self._block
        block_size = self._block_size
        i = 0
        while i < n:
            i = block.fill(run, i, block_size)
            if block.size() >= block_size:
                self._flush_block(keys[i - 1], trailers[i - 1])
        return None

    def _flush_block(self, last_key: bytes, last_trailer: int) -> None:
        handle = self._write(self._block.finish(), BLOCK_DATA)
        index = self._index
        index.last_keys.append(last_key)
        index.last_trailers.append(last_trailer)
        index.offsets.append(handle.offset)
        index.sizes.append(handle.size)

    def _write(self, contents: bytes, kind: int) -> BlockHandle:
        block = frame_block(contents, kind)
        handle = BlockHandle(self._offset, len(block))
        self._file.append(block)
        self._offset += len(block)
        return handle

    def finish(self) -> TableMeta:
        """Write the filter, index, properties and footer, then fsync, rename into place and fsync the directory.

        Raises ValueError for a table without entries (`abandon` it instead).
        On any failure the temporary file is removed and the error re-raised.
        """
        if self._done:
            raise ValueError(f"table builder for {self.path} is already finished or abandoned")
        if self._num_entries == 0:
            raise ValueError("a table needs at least one entry; abandon() an empty builder")
        try:
            if self._block.count:
                assert self._last_key is not None
                self._flush_block(self._last_key, self._last_trailer)
            data_size = self._offset
            bloom = BloomFilter.for_keys(len(self._hashes), self._bits_per_key)
            bloom.add_hashes(self._hashes)
            filter_handle = self._write(bloom.to_bytes(), BLOCK_FILTER)
            index_handle = self._write(encode_index(self._index), BLOCK_INDEX)
            assert self._last_key is not None
            props = TableProperties(
                num_entries=self._num_entries,
                num_deletions=self._num_deletions,
                smallest=self._smallest,
                largest=self._last_key,
                min_seq=self._min_seq,
                max_seq=self._max_seq,
                bits_per_key=self._bits_per_key,
                filter_k=bloom.k,
                filter_num_bits=bloom.num_bits,
                num_data_blocks=len(self._index.offsets),
                data_size=data_size,
                index_size=index_handle.size,
                filter_size=filter_handle.size,
                creation_time=int(time.time()),
                format_version=FORMAT_VERSION,
            )
            props_handle = self._write(encode_properties(props), BLOCK_PROPERTIES)
            footer = encode_footer(index_handle, filter_handle, props_handle)
            self._file.append(footer)
            self._offset += len(footer)
            self._file.sync()
            self._file.close()
            self._fs.rename(self._tmp_path, self.path)
            self._fs.sync_dir(self._dirname)
        except BaseException:
            self.abandon()
            raise
        self._done = True
        self._hashes = []
        return TableMeta(
            number=self.number,
            file_size=self._offset,
            smallest=props.smallest,
            largest=props.largest,
            min_seq=props.min_seq,
            max_seq=props.max_seq,
            num_entries=props.num_entries,
            num_deletions=props.num_deletions,
        )

    def abandon(self) -> None:
        """Close and remove the temporary file (idempotent; errors while cleaning up are swallowed)."""
        if self._done:
            return
        self._done = True
        self._hashes = []
        with contextlib.suppress(OSError):
            self._file.close()
        try:
            if self._fs.exists(self._tmp_path):
                self._fs.remove(self._tmp_path)
        except OSError:
            pass
