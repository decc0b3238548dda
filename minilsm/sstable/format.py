"""The SSTable file format: block framing, the footer, the index and properties encodings, and `read_block`.

A table file is a sequence of checksummed blocks followed by a fixed-size footer::

    data block 0 | ... | data block n-1 | filter block | index block | properties block | footer (68 bytes)

Every block ends in a 9-byte trailer, ``type u8 | xxh3_64(contents, seed=type) u64``,
so a damaged block, or a handle that points at the wrong kind of block, fails
its checksum.  The footer holds the handles of the three metadata blocks, the
format version, its own checksum and the magic number.  docs/FORMAT.md has the
byte-level picture; this module is the code it describes, and the one place
that reads table blocks from disk (`read_block`), so that every disk read is
checked and counted exactly once.

Reading never trusts a stored length: every offset and size is checked
against the file size or the enclosing buffer before it is used, so a damaged
or forged file raises `CorruptionError` rather than allocating gigabytes or
raising `struct.error`.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass, fields
from typing import Final, NamedTuple, Protocol

import xxhash

from minilsm.errors import CorruptionError
from minilsm.fs import RandomAccessFile
from minilsm.stats import Stats

FORMAT_VERSION: Final = 2
"""2: data blocks end in a hash index (block.py).  A reader refuses every other version."""
TABLE_MAGIC: Final = int.from_bytes(b"minilsmT", "little")
"""The last 8 bytes of every table; reads as ``minilsmT`` in a hex dump."""

TABLE_SUFFIX: Final = ".sst"
TEMP_SUFFIX: Final = ".tmp"

BLOCK_DATA: Final = 1
BLOCK_FILTER: Final = 2
BLOCK_INDEX: Final = 3
BLOCK_PROPERTIES: Final = 4
BLOCK_NAMES: Final = {BLOCK_DATA: "data", BLOCK_FILTER: "filter", BLOCK_INDEX: "index", BLOCK_PROPERTIES: "properties"}

BLOCK_TRAILER: Final = struct.Struct("<BQ")
"""Block type, then xxh3_64 of the block contents seeded with the type."""
BLOCK_TRAILER_SIZE: Final = BLOCK_TRAILER.size

MAX_BLOCK_READ: Final = 0x7FFFF000
"""Largest block `read_block` reads: Linux cuts one ``pread`` at 2 GiB - 4 KiB, so a longer block always reads short.
A block claiming more is damage, said before the read allocates its size (a forged footer's 50 GiB index)."""
LARGE_BLOCK: Final = 16 << 20
"""Blocks longer than this have their trailer's type byte checked before they are read: one 9-byte read, so that
an extent running into what was never written (a table extended by ``truncate -s``, whose footer was forged or
misplaced) is refused without reading gigabytes of zeros.  Data blocks are 4 KiB by default (`Options.block_size`
at most 1 GiB); a table's index and filter are a few MiB even for a flush of a 64 MiB memtable."""

FOOTER: Final = struct.Struct("<QQQQQQIQQ")
"""index, filter, properties handles (offset u64, size u64 each) | version u32 | checksum u64 | magic u64."""
FOOTER_SIZE: Final = FOOTER.size
_FOOTER_HEAD: Final = struct.Struct("<QQQQQQI")  # the part the footer checksum covers

INDEX_ENTRY: Final = struct.Struct("<QQII")
"""last trailer u64 | block offset u64 | block size u32 | last user key length u32, then the key."""
_U16: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_F64: Final = struct.Struct("<d")


def table_file_name(number: int) -> str:
    """The file name of table `number`: ``table_file_name(12) == "000012.sst"``."""
    return f"{number:06d}{TABLE_SUFFIX}"


def table_path(dirname: str, number: int) -> str:
    """The path of table `number` in `dirname`, spelled the same by every user: the file cache is keyed by it."""
    return os.path.join(dirname, table_file_name(number))


def parse_table_file_name(name: str) -> int | None:
    """The table number in a file name made by `table_file_name`, or None for any other name."""
    stem = name.removesuffix(TABLE_SUFFIX)
    if stem == name or not stem.isascii() or not stem.isdigit():
        return None
    number = int(stem)
    # Only the canonical spelling: "5.sst" is not the name of table 5, which is "000005.sst".
    return number if table_file_name(number) == name else None


# -- blocks -----------------------------------------------------------------------


class BlockHandle(NamedTuple):
    """Where a block lies in the file: `size` counts the contents and the 9-byte trailer."""

    offset: int
    size: int


def frame_block(contents: bytes, kind: int) -> bytes:
    """`contents` followed by its trailer: the bytes of one block as written to the file.  O(len(contents))."""
    return contents + BLOCK_TRAILER.pack(kind, xxhash.xxh3_64_intdigest(contents, kind))


def read_file_bytes(file: RandomAccessFile, offset: int, size: int, stats: Stats) -> bytes:
    """One positioned read of a table file (a pread, or a slice of its mapping), counted in ``stats.file_reads`` and
    ``stats.block_bytes_read``.

    The only code through which a store, a compaction or a tool's `TableReader` reads a table file: blocks
    (`read_block`), the footer and a scan's readahead windows (`Readahead`) all come through here, so that
    ``file_reads`` and ``block_bytes_read`` are exactly the reads made and what the files gave.  (A checkpoint's
    copy of a table where no hard link can be made, and a repair's comparison of two files, read whole files for
    no store, and count nothing.)  O(size).
    """
    raw = file.pread(offset, size)
    stats.file_reads += 1
    stats.block_bytes_read += len(raw)
    return raw


FIRST_READAHEAD: Final = 16 * 1024
MAX_READAHEAD: Final = 64 * 1024
"""Readahead windows.  Reading the 1M-key benchmark store's page-cached tables front to back cost 1.53 us per
4 KiB in 4 KiB preads, 0.61 in 16 KiB ones, 0.44 in 64 KiB and 0.67 in 256 KiB (bench/RESULTS.md, "Scans")."""


class Readahead:
    """The part of a table file that one forward scan has read ahead of itself, refilled in growing windows.

    A long scan reads block after block of a table; one system call per 4 KiB
    block costs 3.5 times what the same bytes cost in 64 KiB reads.  Like
    RocksDB's readahead file wrapper, a `read` past the window refills it from
    the offset asked for: it keeps what the window still holds from there (a
    block straddling its end), reads only the bytes after that, so no byte is
    read twice, and grows the window from `FIRST_READAHEAD` to `MAX_READAHEAD`,
    never past `end` (unless asked for more).  Each refill is one
    `read_file_bytes` and counts its bytes then, read by the scan or not.  Not
    thread-safe: one per scan.
    """

    __slots__ = ("_buf", "_end", "_start", "_stats", "_stop", "_window", "file")

    def __init__(self, file: RandomAccessFile, end: int, stats: Stats) -> None:
        self.file = file
        self._end = end
        self._stats = stats
        self._buf = b""
        self._start = self._stop = 0  # the file offsets the window holds: [start, stop)
        self._window = FIRST_READAHEAD

    def read(self, offset: int, size: int) -> bytes:
        """The `size` bytes at `offset`, as `RandomAccessFile.pread` gives them (short past the file's end)."""
        start, stop = self._start, self._stop
        if start <= offset and offset + size <= stop:
            return self._buf[offset - start : offset - start + size]
        kept = self._buf[offset - start :] if start <= offset < stop else b""
        at = offset + len(kept)
        fetched = read_file_bytes(
            self.file, at, max(offset + size, min(offset + self._window, self._end)) - at, self._stats
        )
        self._window = min(2 * self._window, MAX_READAHEAD)
        buf = kept + fetched
        self._buf, self._start, self._stop = buf, offset, offset + len(buf)
        return buf[:size]


def _check_large_block(file: RandomAccessFile, offset: int, size: int, stats: Stats, path: str, kind: int) -> None:
    """Before a block of more than `LARGE_BLOCK` bytes is read: refuse one longer than `MAX_BLOCK_READ`, and one whose
    trailer (read alone, 9 bytes, counted as `read_file_bytes` counts) is not of `kind`, with the errors
    `read_block` would raise after reading it whole."""
    name = BLOCK_NAMES.get(kind, "?")
    if size > MAX_BLOCK_READ:
        raise CorruptionError(
            f"{name} block at offset {offset}: extent of {size} bytes is longer than any block can be "
            f"(one read takes at most {MAX_BLOCK_READ})",
            path,
        )
    raw = read_file_bytes(file, offset + size - BLOCK_TRAILER_SIZE, BLOCK_TRAILER_SIZE, stats)
    if len(raw) != BLOCK_TRAILER_SIZE:
        raise CorruptionError(f"{name} block at offset {offset}: its trailer read {len(raw)} of 9 bytes", path)
    stored_kind = raw[0]
    if stored_kind != kind:
        raise CorruptionError(
            f"{name} block at offset {offset}: its trailer's type byte is {stored_kind} "
            f"({BLOCK_NAMES.get(stored_kind, 'no known kind')}), not {kind}",
            path,
        )


class CountsBlockReads(Protocol):
    """A table's own count of its data blocks read (a `TableReader`'s), kept beside the store's `Stats`."""

    block_reads: int


def read_block(
    file: RandomAccessFile,
    offset: int,
    size: int,
    stats: Stats,
    path: str,
    *,
    kind: int,
    ahead: Readahead | None = None,
    table: CountsBlockReads | None = None,
) -> bytes:
    """Read, check and count the block at `offset` of `size` bytes (trailer included); returns its contents.

    The only reader of table blocks.  It checks the extent against the file
    size before reading, then the trailer's type against `kind` and the
    checksum.  A data block counts one ``stats.block_reads``, and one on
    `table` if given; a filter block one ``stats.filter_loads``; an index block
    one ``stats.index_loads``.  Counted as soon as the bytes are in, before any
    check, so that a block that fails one counts as read in the store's totals
    and its table's row alike.  The bytes come from one `read_file_bytes` (which
    counts them), or from `ahead`, the window a forward scan of `file` has read
    (whose refills count theirs).  One positioned read or slice, plus one
    checksum pass, O(size).
    """
    if size < BLOCK_TRAILER_SIZE or offset + size > file.size():
        raise CorruptionError(
            f"{BLOCK_NAMES.get(kind, '?')} block at offset {offset}: extent of {size} bytes "
            f"does not fit a {file.size()}-byte file",
            path,
        )
    if size > LARGE_BLOCK:  # one comparison on every read; only such blocks pay more
        _check_large_block(file, offset, size, stats, path, kind)
    raw = read_file_bytes(file, offset, size, stats) if ahead is None else ahead.read(offset, size)
    if kind == BLOCK_DATA:
        stats.block_reads += 1
        if table is not None:
            table.block_reads += 1
    elif kind == BLOCK_FILTER:
        stats.filter_loads += 1
    elif kind == BLOCK_INDEX:
        stats.index_loads += 1
    if len(raw) != size:
        raise CorruptionError(
            f"{BLOCK_NAMES.get(kind, '?')} block at offset {offset}: read {len(raw)} of {size} bytes", path
        )
    n = size - BLOCK_TRAILER_SIZE
    stored_kind, checksum = BLOCK_TRAILER.unpack_from(raw, n)
    contents = raw[:n]
    if stored_kind != kind:
        raise CorruptionError(
            f"{BLOCK_NAMES.get(kind, '?')} block at offset {offset}: its trailer's type byte is {stored_kind} "
            f"({BLOCK_NAMES.get(stored_kind, 'no known kind')}), not {kind}",
            path,
        )
    if xxhash.xxh3_64_intdigest(contents, kind) != checksum:
        raise CorruptionError(f"{BLOCK_NAMES.get(kind, '?')} block at offset {offset}: checksum mismatch", path)
    return contents


# -- footer -----------------------------------------------------------------------


class Footer(NamedTuple):
    index_block: BlockHandle
    filter_block: BlockHandle
    properties_block: BlockHandle
    version: int


def encode_footer(index: BlockHandle, filter: BlockHandle, properties: BlockHandle) -> bytes:
    """The 68-byte footer naming the three metadata blocks."""
    head = _FOOTER_HEAD.pack(*index, *filter, *properties, FORMAT_VERSION)
    return head + _U64.pack(xxhash.xxh3_64_intdigest(head)) + _U64.pack(TABLE_MAGIC)


def read_footer(file: RandomAccessFile, stats: Stats, path: str) -> Footer:
    """Read and check the footer at the end of `file`; its bytes count in ``stats.block_bytes_read``.

    Checks, in order: the file can hold a footer, the magic number (a foreign
    file fails here), the footer checksum, the format version, and that the
    three metadata blocks follow one another up to the footer.
    """
    file_size = file.size()
    if file_size < FOOTER_SIZE:
        raise CorruptionError(f"file of {file_size} bytes is too short to be a table (footer is {FOOTER_SIZE})", path)
    raw = read_file_bytes(file, file_size - FOOTER_SIZE, FOOTER_SIZE, stats)
    if len(raw) != FOOTER_SIZE:
        raise CorruptionError(f"footer: read {len(raw)} of {FOOTER_SIZE} bytes", path)
    io, isz, fo, fsz, po, psz, version, checksum, magic = FOOTER.unpack(raw)
    if magic != TABLE_MAGIC:
        raise CorruptionError(f"bad magic number {magic:#018x}: not a minilsm table", path)
    if xxhash.xxh3_64_intdigest(raw[: _FOOTER_HEAD.size]) != checksum:
        raise CorruptionError("footer checksum mismatch", path)
    if version != FORMAT_VERSION:
        raise CorruptionError(f"unsupported table format version {version} (this build reads {FORMAT_VERSION})", path)
    # The builder writes filter, index and properties back to back just before
    # the footer; anything else is damage (or a forgery), caught before a read.
    if not (fo + fsz == io and io + isz == po and po + psz == file_size - FOOTER_SIZE):
        raise CorruptionError("footer: metadata block handles do not tile the end of the file", path)
    return Footer(BlockHandle(io, isz), BlockHandle(fo, fsz), BlockHandle(po, psz), version)


# -- index block --------------------------------------------------------------------


class Index(NamedTuple):
    """The decoded index: parallel lists, one item per data block, so that a lookup is one `bisect`."""

    last_keys: list[bytes]
    last_trailers: list[int]
    offsets: list[int]
    sizes: list[int]


def encode_index(index: Index) -> bytes:
    """Index block contents: ``count u32``, then per block `INDEX_ENTRY` and the block's last user key."""
    parts = [_U32.pack(len(index.last_keys))]
    for key, trailer, offset, size in zip(
        index.last_keys, index.last_trailers, index.offsets, index.sizes, strict=True
    ):
        parts.append(INDEX_ENTRY.pack(trailer, offset, size, len(key)))
        parts.append(key)
    return b"".join(parts)


def decode_index(data: bytes, data_end: int) -> Index:
    """Decode `encode_index` output for a file whose data blocks end at `data_end`.  O(blocks).

    Beyond bounds, checks that the blocks tile ``[0, data_end)`` in order and
    that their last keys increase in internal order, because the reader's
    bisect and one-block-per-lookup rule depend on both.
    """
    if len(data) < _U32.size:
        raise CorruptionError("index block is shorter than its count")
    (count,) = _U32.unpack_from(data, 0)
    if count > (len(data) - _U32.size) // INDEX_ENTRY.size:
        raise CorruptionError(f"index block: {count} entries do not fit {len(data)} bytes")
    index = Index([], [], [], [])
    pos = _U32.size
    expect_offset = 0
    prev_key: bytes | None = None
    prev_trailer = 0
    unpack = INDEX_ENTRY.unpack_from
    for i in range(count):
        if pos + INDEX_ENTRY.size > len(data):
            raise CorruptionError(f"index block: entry {i} runs past the block")
        trailer, offset, size, key_len = unpack(data, pos)
        pos += INDEX_ENTRY.size
        key = data[pos : pos + key_len]
        pos += key_len
        if len(key) != key_len:
            raise CorruptionError(f"index block: key of entry {i} runs past the block")
        if offset != expect_offset or size <= BLOCK_TRAILER_SIZE or offset + size > data_end:
            raise CorruptionError(
                f"index block: entry {i} has extent ({offset}, {size}), expected offset {expect_offset}"
            )
        if prev_key is not None and (key < prev_key or (key == prev_key and trailer >= prev_trailer)):
            raise CorruptionError(f"index block: entry {i} is out of order")
        expect_offset = offset + size
        prev_key, prev_trailer = key, trailer
        index.last_keys.append(key)
        index.last_trailers.append(trailer)
        index.offsets.append(offset)
        index.sizes.append(size)
    if pos != len(data):
        raise CorruptionError(f"index block: {len(data) - pos} bytes follow the last entry")
    if expect_offset != data_end:
        raise CorruptionError(f"index block: data blocks end at {expect_offset}, the filter starts at {data_end}")
    return index


# -- properties block -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableProperties:
    """Facts about one table, written by the builder, shown by ``minilsm tables``/``dump``.

    Sizes are on-disk bytes including block trailers.
    """

    num_entries: int
    num_deletions: int
    smallest: bytes
    largest: bytes
    min_seq: int
    max_seq: int
    bits_per_key: float
    filter_k: int
    filter_num_bits: int
    num_data_blocks: int
    data_size: int
    index_size: int
    filter_size: int
    creation_time: int
    """Unix seconds."""
    format_version: int


@dataclass(frozen=True, slots=True)
class TableMeta:
    """What the version set records about a table: enough to pick it for a read or a compaction without opening it."""

    number: int
    file_size: int
    smallest: bytes
    largest: bytes
    min_seq: int
    max_seq: int
    num_entries: int
    num_deletions: int


# Properties are stored by name, as RocksDB does, so that `dump` is
# self-describing and a later version can add one without a format change:
# ``count u16``, then per property ``name_len u8 | name | tag u8 | value`` where
# the tag says how the value is encoded.
_TAG_U64: Final = 1
_TAG_F64: Final = 2
_TAG_BYTES: Final = 3
_PROPERTY_TAGS: Final = {
    f.name: _TAG_BYTES if f.type == "bytes" else _TAG_F64 if f.type == "float" else _TAG_U64
    for f in fields(TableProperties)
}


def encode_properties(props: TableProperties) -> bytes:
    """Properties block contents, every field of `TableProperties` by name."""
    parts = [_U16.pack(len(_PROPERTY_TAGS))]
    for name, tag in _PROPERTY_TAGS.items():
        value = getattr(props, name)
        parts += (bytes((len(name),)), name.encode("ascii"), bytes((tag,)))
        if tag == _TAG_BYTES:
            parts += (_U32.pack(len(value)), value)
        else:
            parts.append((_F64 if tag == _TAG_F64 else _U64).pack(value))
    return b"".join(parts)


def decode_properties(data: bytes) -> TableProperties:
    """Decode `encode_properties` output; unknown names are skipped, a missing or mistyped one is corruption."""
    if len(data) < _U16.size:
        raise CorruptionError("properties block is shorter than its count")
    (count,) = _U16.unpack_from(data, 0)
    pos = _U16.size
    values: dict[str, object] = {}
    for _ in range(count):
        if pos >= len(data):
            raise CorruptionError("properties block: entry runs past the block")
        name_len = data[pos]
        name_bytes = data[pos + 1 : pos + 1 + name_len]
        pos += 1 + name_len
        if len(name_bytes) != name_len or pos >= len(data):
            raise CorruptionError("properties block: name runs past the block")
        tag = data[pos]
        pos += 1
        value: object
        if tag == _TAG_BYTES:
            if pos + _U32.size > len(data):
                raise CorruptionError("properties block: value length runs past the block")
            (n,) = _U32.unpack_from(data, pos)
            pos += _U32.size
            value = data[pos : pos + n]
            pos += n
        elif tag in (_TAG_U64, _TAG_F64):
            if pos + 8 > len(data):
                raise CorruptionError("properties block: value runs past the block")
            (value,) = (_U64 if tag == _TAG_U64 else _F64).unpack_from(data, pos)
            pos += 8
        else:
            raise CorruptionError(f"properties block: unknown value tag {tag}")
        if pos > len(data):
            raise CorruptionError("properties block: value runs past the block")
        name = name_bytes.decode("latin-1")
        if name in values:
            raise CorruptionError(f"properties block: {name!r} appears twice")
        if _PROPERTY_TAGS.get(name, tag) != tag:
            raise CorruptionError(f"properties block: {name!r} has value tag {tag}")
        values[name] = value
    if pos != len(data):
        raise CorruptionError(f"properties block: {len(data) - pos} bytes follow the last entry")
    missing = [name for name in _PROPERTY_TAGS if name not in values]
    if missing:
        raise CorruptionError(f"properties block: missing {', '.join(missing)}")
    bpk = values["bits_per_key"]
    if not isinstance(bpk, float) or not math.isfinite(bpk) or bpk < 0:
        raise CorruptionError(f"properties block: bits_per_key is {bpk!r}")
    return TableProperties(**{name: values[name] for name in _PROPERTY_TAGS})  # type: ignore[arg-type]
