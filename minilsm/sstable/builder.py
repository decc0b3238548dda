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
import struct
import time
from collections.abc import Iterable

from minilsm.bloom import BloomFilter, KeyHash, key_hash
from minilsm.fs import FileSystem
from minilsm.keys import KIND_DELETE, KIND_VALUE, MAX_SEQUENCE
from minilsm.sstable.block import BlockBuilder
from minilsm.sstable.format import (
    BLOCK_DATA,
    BLOCK_FILTER,
    BLOCK_INDEX,
    BLOCK_PROPERTIES,
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
    table_path,
)

__all__ = ["TableBuilder", "TableMeta"]  # TableMeta is what `finish` returns

_MAX_TRAILER = (1 << 64) - 1
_MAX_LENGTH = (1 << 32) - 1
_NO_STOP = 1 << 63  # a stop size no table reaches
_NO_HASH: KeyHash = (0, 0)  # stands for the hash of the previous key before there is one


def _bad_trailer(trailer: int) -> str:
    return f"trailer {trailer} is not seq << 8 | kind with a known kind"


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
        self.path = table_path(dirname, number)
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
        one-version `add_run`, so the two share every check.
        """
        self.add_run(((user_key, trailer, value),))

    def add_run(
        self, entries: Iterable[tuple[bytes, int, bytes]], stop_size: int | None = None
    ) -> tuple[bytes, int, bytes] | None:
        """Append the versions ``(user_key, trailer, value)`` of `entries`, each checked as `add` checks it.

        Returns None once `entries` runs out.  With `stop_size`, stops instead
        at the first version of a new user key found when `estimated_size()`
        has reached `stop_size`, and returns that version, taken from
        `entries` but not added: a table cut there ends between user keys, so
        a key's versions never straddle two tables.  A builder without entries
        never stops.  A rejected version raises ValueError and leaves the
        builder as it was after the version before it.

        The loop keeps the builder's state in local variables: per version, a
        few comparisons, `BlockBuilder.add`, and one `key_hash` per user key.
        O(len(key) + len(value)) amortized per version.
        """
        if self._done:
            raise ValueError(f"table builder for {self.path} is already finished or abandoned")
        block = self._block
        block_add = block.add
        hashes = self._hashes
        block_size = self._block_size
        stop = _NO_STOP if stop_size is None else stop_size
        # The stop rule is estimated_size() >= stop, kept as size >= room: `size` is the block's, as
        # `block_add` returns it, and `room` changes only when a block is written.
        size = block.size()
        room = stop - self._offset
        last = self._last_key
        last_trailer = self._last_trailer
        h = hashes[-1] if hashes else _NO_HASH  # the hash of `last`, for its versions still to come
        min_seq = self._min_seq
        max_seq = self._max_seq
        deletions = self._num_deletions
        count = self._num_entries
        try:
            for key, trailer, value in entries:
                kind = trailer & 0xFF
                if kind > KIND_VALUE:  # KIND_DELETE is 0, KIND_VALUE 1
                    raise ValueError(_bad_trailer(trailer))
                # Every check runs before the version changes anything (but `_smallest`, which counts only
                # once a version is in); `block_add` itself rejects lengths and trailers too large to
                # encode (struct.error, below) before it changes the block.
                if key != last:
                    if last is None:
                        self._smallest = key
                    elif key < last:
                        raise ValueError(f"key {key!r} added after {last!r}: keys must be added in ascending order")
                    elif size >= room:
                        return key, trailer, value
                    # One hash per user key serves both the filter and the blocks' hash indexes.
                    h = key_hash(key)
                    size = block_add(key, trailer, value, h)
                    hashes.append(h)
                    last = key
                elif trailer >= last_trailer:
                    raise ValueError(
                        f"versions of {key!r} must be added newest first: trailer {trailer} after {last_trailer}"
                    )
                else:
                    size = block_add(key, trailer, value, h)
                last_trailer = trailer
                seq = trailer >> 8
                if seq < min_seq:
                    min_seq = seq
                if seq > max_seq:
                    max_seq = seq
                if kind == KIND_DELETE:
                    deletions += 1
                count += 1
                if size >= block_size:
                    self._flush_block(key, trailer)
                    size = block.size()
                    room = stop - self._offset
        except struct.error as e:
            # From `block_add` on a length or trailer out of range; anything else is not ours to relabel.
            if len(key) > _MAX_LENGTH or len(value) > _MAX_LENGTH:
                raise ValueError("key and value must each be shorter than 4 GiB") from None
            if not 0 <= trailer <= _MAX_TRAILER:
                raise ValueError(_bad_trailer(trailer)) from None
            raise e
        finally:
            self._last_key = last
            self._last_trailer = last_trailer
            self._min_seq = min_seq
            self._max_seq = max_seq
            self._num_deletions = deletions
            self._num_entries = count
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
