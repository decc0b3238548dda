"""Data blocks: sorted versions, an offset array and a hash index, so one version is found without decoding the rest.

Layout of a data block's contents (before the 9-byte trailer `format.read_block` strips)::

    entry 0 | ... | entry n-1 | offset of entry 0 u32 | ... | offset of entry n-1 u32 |
    bucket 0 u8 | ... | bucket B-1 u8 | B u16 | n u32
    entry = key_len u32 | value_len u32 | trailer u64 | user key | value

LevelDB prefix-compresses keys and keeps a sparse array of "restart points",
so a lookup binary-searches the restarts and then decodes up to 16 entries one
by one.  In C that linear part is nearly free; in Python each decoded entry
costs a few hundred nanoseconds of interpreter work and dominates a lookup.
With one offset per entry, a lookup is a binary search in which each probe is
one `struct.unpack_from` and one slice, both done in C: about log2(n) probes
instead of log2(n / 16) + 8 decodes.  The price is 4 bytes per entry and no
prefix compression.

A point read usually skips even that search: as in RocksDB's
``kDataBlockBinaryAndHash``, the block ends in B one-byte buckets that map
``key_hash(key)[1] % B`` to the index of the key's first (newest) version, or
say that no key of the block hashes there (`HASH_EMPTY`) or that several do
(`HASH_COLLISION`, which falls back to the binary search).  The read already
holds the key's hash for the filters, so a lookup is one bucket read and one
entry decode.  The index costs 1/`HASH_UTIL_RATIO` bytes per distinct key; a
block in which some key's first version lies beyond entry `MAX_HASHED_ENTRY`
has none (B = 0), and is searched as before.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections.abc import Callable, Iterator
from functools import lru_cache
from operator import itemgetter
from typing import Final

from minilsm.bloom import KeyHash
from minilsm.errors import CorruptionError

ENTRY_HEADER: Final = struct.Struct("<IIQ")
"""key_len u32 | value_len u32 | trailer u64."""
_HEADER_SIZE: Final = ENTRY_HEADER.size
BLOCK_FOOTER: Final = struct.Struct("<HI")
"""num_buckets u16 | count u32: the last 6 bytes of a data block's contents."""
_FOOTER_SIZE: Final = BLOCK_FOOTER.size
_U32: Final = struct.Struct("<I")
_U32_PAIR: Final = struct.Struct("<II")
_U64: Final = struct.Struct("<Q")

HASH_EMPTY: Final = 0xFF
"""Bucket value: no key of the block hashes here, so the key sought is not in the block."""
HASH_COLLISION: Final = 0xFE
"""Bucket value: two or more keys of the block hash here; binary-search instead."""
MAX_HASHED_ENTRY: Final = 0xFD
"""The largest entry index a bucket can hold (the two byte values above it are taken)."""
HASH_UTIL_RATIO: Final = 0.25
"""Distinct keys per bucket.  A present key shares its bucket with another key, and the lookup falls
back to binary search, with probability about 1 - exp(-ratio): 22% here, 39% at 0.5 and 53% at
RocksDB's 0.75.  RocksDB can afford 0.75 because its fallback is cheap C; ours costs about 2.5 hash
hits.  Measured on cached blocks of 30 keys (16-byte keys, 100-byte values), a present-key lookup
costs 1.55 us by binary search alone, and with the index 1.09 us at 0.75, 0.90 at 0.5, 0.68 at
0.25 and 0.61 at 0.125.  The price is 1/ratio bytes per distinct key, so 0.25 costs 3% of a block
of 100-byte values (9% with 8-byte values), and 0.125 would double that for 0.07 us."""

# The offset array is decoded in one C call into an array of 4-byte unsigned
# ints ('I' on every mainstream platform); the file is little-endian.
_U32_CODE: Final = "I" if array("I").itemsize == 4 else "L"
_SWAP: Final = sys.byteorder != "little"


def num_buckets(distinct: int, util_ratio: float = HASH_UTIL_RATIO) -> int:
    """Buckets of the hash index of a block holding `distinct` user keys (all hashable).  O(1)."""
    return math.ceil(distinct / util_ratio)


def hash_index(firsts: list[tuple[int, int]], buckets: int) -> bytes:
    """The `buckets` bucket bytes for keys given as ``(key_hash(key)[1], index of the key's first version)``.

    O(len(firsts) + buckets).
    """
    out = bytearray((HASH_EMPTY,)) * buckets
    for h, i in firsts:
        b = h % buckets
        out[b] = i if out[b] == HASH_EMPTY else HASH_COLLISION
    return bytes(out)


class BlockBuilder:
    """Accumulates versions, in the order given, into the contents of one data block.

    `util_ratio` (distinct keys per hash bucket) is for tests; tables use `HASH_UTIL_RATIO`.
    """

    __slots__ = ("_buf", "_firsts", "_index_size", "_index_sizes", "_last_key", "_offsets")

    def __init__(self, util_ratio: float = HASH_UTIL_RATIO) -> None:
        if not util_ratio > 0:
            raise ValueError(f"util_ratio must be > 0, got {util_ratio}")
        self._buf = bytearray()
        self._offsets: list[int] = []
        self._firsts: list[tuple[int, int]] = []  # (bucket hash, entry index) of each key's first version
        self._last_key: bytes | None = None
        # Bytes after the offset array (buckets and footer), by distinct keys, so that `add` only looks one up.
        self._index_sizes = [num_buckets(d, util_ratio) + _FOOTER_SIZE for d in range(MAX_HASHED_ENTRY + 2)]
        self._index_size = _FOOTER_SIZE

    def add(self, key: bytes, trailer: int, value: bytes, h: KeyHash) -> int:
        """Append one version of `key`, whose `key_hash` is `h`; returns `size()` after it.

        The caller keeps internal order.  Raises `struct.error`, with the builder unchanged, when a
        length does not fit in 32 bits or the trailer in 64 (`TableBuilder` relies on this check
        rather than repeating it per version).  O(len(key) + len(value)) amortized.
        """
        header = ENTRY_HEADER.pack(len(key), len(value), trailer)
        buf = self._buf
        offsets = self._offsets
        n = len(offsets)
        if key != self._last_key:  # None after `finish`: a key continued from the last block is entered again
            self._last_key = key
            firsts = self._firsts
            firsts.append((h[1], n))
            # The index exists while every key's first version is within a byte's reach.
            self._index_size = self._index_sizes[len(firsts)] if n <= MAX_HASHED_ENTRY else _FOOTER_SIZE
        offsets.append(len(buf))
        buf += header
        buf += key
        buf += value
        return len(buf) + 4 * n + 4 + self._index_size

    @property
    def count(self) -> int:
        return len(self._offsets)

    def size(self) -> int:
        """Bytes the block's contents would have if finished now."""
        return len(self._buf) + 4 * len(self._offsets) + self._index_size

    def finish(self) -> bytes:
        """The block's contents; the builder is empty again afterwards.  O(entries)."""
        n = len(self._offsets)
        buckets = self._index_size - _FOOTER_SIZE
        contents = b"".join(
            (
                self._buf,
                struct.pack(f"<{n}I", *self._offsets),
                hash_index(self._firsts, buckets) if buckets else b"",
                BLOCK_FOOTER.pack(buckets, n),
            )
        )
        self._buf = bytearray()
        self._offsets = []
        self._firsts = []
        self._last_key = None
        self._index_size = _FOOTER_SIZE
        return contents


class Block:
    """A read-only data block: its contents, as kept in the block cache, and its offset array decoded on demand.

    Construction checks the count, bucket count and the first and last offsets
    against the block size (O(1)).  A point read that its hash index settles
    then reads the two offsets it needs straight from the bytes; a binary
    search or an entry-at-a-time scan (`versions`) decodes the whole offset
    array once (O(n) in C) and the block keeps it; a whole-block decode
    (`entries`) needs none of it.  The checksum has already vouched for the
    bytes, so entries and buckets are bounds-checked only when used;
    malformed structure that slips through surfaces as `CorruptionError`,
    never as a wrong-typed exception.
    """

    __slots__ = ("_offsets", "buckets_at", "count", "data", "last_trailer", "limit", "num_buckets")

    def __init__(self, data: bytes) -> None:
        size = len(data)
        if size < _FOOTER_SIZE:
            raise CorruptionError(f"data block of {size} bytes has no entry count")
        buckets, count = BLOCK_FOOTER.unpack_from(data, size - _FOOTER_SIZE)
        buckets_at = size - _FOOTER_SIZE - buckets
        limit = buckets_at - 4 * count
        if count == 0 or limit < _HEADER_SIZE * count:
            raise CorruptionError(f"data block of {size} bytes cannot hold {count} entries and {buckets} buckets")
        first, last = _U32.unpack_from(data, limit)[0], _U32.unpack_from(data, buckets_at - 4)[0]
        if first != 0 or last > limit - _HEADER_SIZE:
            raise CorruptionError("data block: offset array points outside the entries")
        self.data = data
        self.last_trailer: int = _U64.unpack_from(data, last + 8)[0]
        """The last entry's trailer, which a reader matches against its index entry."""
        self._offsets: array[int] | None = None
        self.count = count
        self.limit = limit  # where the entries end and the offset array begins
        self.num_buckets = buckets
        self.buckets_at = buckets_at  # where the hash index begins

    @property
    def offsets(self) -> array[int]:
        """The offset array, decoded in one C call at its first use and kept.  O(n) once, then O(1)."""
        offsets = self._offsets
        if offsets is None:
            offsets = array(_U32_CODE)
            offsets.frombytes(self.data[self.limit : self.buckets_at])
            if _SWAP:
                offsets.byteswap()
            self._offsets = offsets
        return offsets

    def get(self, key: bytes, h: KeyHash, target: int) -> tuple[int, bytes] | bool:
        """The first version of `key` with trailer <= `target`, as ``(trailer, value)``.

        Without one, whether the block holds `key` at all: True if it holds
        only versions newer than `target`, False if none.  `h` is
        ``key_hash(key)``.  With a hash index, one bucket read and one entry
        decode, O(1); on a shared bucket, or when the key's newest version is
        newer than `target`, a binary search as without an index, O(log n).
        """
        lo = 0
        buckets = self.num_buckets
        if buckets:
            i = self.data[self.buckets_at + h[1] % buckets]
            if i < HASH_COLLISION:
                k, trailer, value = self._entry(i)
                if k != key:  # the one key hashed here is another: `key` is not in the block
                    return False
                if trailer <= target:
                    return trailer, value
                lo = i + 1  # a snapshot read: an older version of `key`, later in the block
            elif i == HASH_EMPTY:
                return False
        i = self.seek(key, target, lo)
        if i < self.count:
            k, trailer, value = self._entry(i)
            if k == key:
                return trailer, value
        return i > 0 and self.key_at(i - 1) == key

    def seek(self, key: bytes, trailer: int, lo: int = 0) -> int:
        """Index of the first version at or after ``(key, trailer)`` in internal order (`count` if none).

        Binary search over the offset array from entry `lo` on: about
        log2(count - lo) probes, each reading one header and slicing one key.
        O(log n).
        """
        data = self.data
        offsets = self.offsets
        key_len_at = _U32.unpack_from
        trailer_at = _U64.unpack_from
        hi = self.count
        try:
            while lo < hi:
                mid = (lo + hi) >> 1
                o = offsets[mid]
                (key_len,) = key_len_at(data, o)
                k = data[o + _HEADER_SIZE : o + _HEADER_SIZE + key_len]
                # The trailer is decoded only on a user-key tie, which is rare.
                if k < key or (k == key and trailer_at(data, o + 8)[0] > trailer):
                    lo = mid + 1
                else:
                    hi = mid
        except struct.error as e:
            raise CorruptionError("data block: entry header runs past the block") from e
        return lo

    def _entry(self, i: int) -> tuple[bytes, int, bytes]:
        """Entry `i` as ``(user_key, trailer, value)``, checked to exist and to end where the next one begins."""
        data = self.data
        if i >= self.count:
            raise CorruptionError(f"data block: hash index points at entry {i} of {self.count}")
        at = self.limit + 4 * i  # its offset; the next entry's follows, unless it is the last
        try:
            if i + 1 < self.count:
                o, end = _U32_PAIR.unpack_from(data, at)
            else:
                o, end = _U32.unpack_from(data, at)[0], self.limit
            key_len, value_len, trailer = ENTRY_HEADER.unpack_from(data, o)
        except struct.error as e:
            raise CorruptionError("data block: entry header runs past the block") from e
        o += _HEADER_SIZE
        if o + key_len + value_len != end:
            raise CorruptionError(f"data block: entry {i} does not end where the next begins")
        return data[o : o + key_len], trailer, data[o + key_len : end]

    def key_at(self, i: int) -> bytes:
        """User key of entry `i` (0 <= i < count)."""
        o = self.offsets[i]
        try:
            (key_len,) = _U32.unpack_from(self.data, o)
        except struct.error as e:
            raise CorruptionError("data block: entry header runs past the block") from e
        return self.data[o + _HEADER_SIZE : o + _HEADER_SIZE + key_len]

    def versions(self, lo: int, hi: int, reverse: bool = False) -> Iterator[tuple[bytes, int, bytes]]:
        """Entries ``lo .. hi-1`` as ``(user_key, trailer, value)``, in block order or its reverse, lazily.

        Each entry is decoded only when the consumer asks for it, so a seek
        followed by a few steps decodes a few entries, not the block; a full
        pass costs what `entries` does.  Each decoded entry is checked to end
        where the next one begins.  O(1) per entry.
        """
        data = self.data
        offsets = self.offsets
        unpack = ENTRY_HEADER.unpack_from
        try:
            if not reverse:
                pos = offsets[lo] if lo < hi else 0
                for i in range(lo, hi):
                    o = offsets[i]
                    if o != pos:
                        raise CorruptionError(f"data block: entry {i} does not start where the previous one ends")
                    key_len, value_len, trailer = unpack(data, o)
                    o += _HEADER_SIZE
                    pos = o + key_len + value_len
                    yield data[o : o + key_len], trailer, data[o + key_len : pos]
                if hi == self.count and lo < hi and pos != self.limit:
                    raise CorruptionError(f"data block: entries end at {pos}, the offset array starts at {self.limit}")
            else:
                end = offsets[hi] if hi < self.count else self.limit
                for i in range(hi - 1, lo - 1, -1):
                    o = offsets[i]
                    key_len, value_len, trailer = unpack(data, o)
                    o += _HEADER_SIZE
                    if o + key_len + value_len != end:
                        raise CorruptionError(f"data block: entry {i} does not end where the next one begins")
                    end = offsets[i]
                    yield data[o : o + key_len], trailer, data[o + key_len : o + key_len + value_len]
        except struct.error as e:
            raise CorruptionError("data block: entry header runs past the block") from e

    def entries(self) -> list[tuple[bytes, int, bytes]]:
        """Every version as ``(user_key, trailer, value)``, in block order, checking that entries tile the block.

        Walks the entries by their own lengths, without the offset array: the
        n entries must end exactly where the array begins.  (Searches check
        the array against the entries they decode, and ``minilsm check``
        rebuilds every block.)  One pass, a few Python steps per entry: O(n).
        A block of fixed-width entries (every key one length, every value one
        length, as fixed-size records give) is decoded by one `struct` call
        instead, with the same result: about 200 ns an entry against 260.
        """
        data = self.data
        count = self.count
        limit = self.limit
        # The first entry's lengths, were every entry to share them, would tile the entries exactly.
        key_len, value_len = _U32_PAIR.unpack_from(data, 0)  # the constructor checked limit >= 16 * count
        stride = _HEADER_SIZE + key_len + value_len
        if stride * count == limit and _same_lengths(data, stride, limit, count):
            return list(map(_ENTRY_ORDER, _fixed_width(key_len, value_len)(memoryview(data)[:limit])))
        unpack = ENTRY_HEADER.unpack_from
        out: list[tuple[bytes, int, bytes]] = []
        append = out.append
        h = _HEADER_SIZE
        pos = 0
        try:
            for _ in range(count):
                key_len, value_len, trailer = unpack(data, pos)
                k = pos + h  # where the key starts
                v = k + key_len  # where the value starts
                pos = v + value_len
                append((data[k:v], trailer, data[v:pos]))
        except struct.error as e:
            raise CorruptionError("data block: entry header runs past the block") from e
        if pos != limit:
            raise CorruptionError(f"data block: entries end at {pos}, the offset array starts at {limit}")
        return out


def _same_lengths(data: bytes, stride: int, limit: int, count: int) -> bool:
    """Whether the entries' 8 length bytes are the first entry's at every multiple of `stride` below `limit`.

    Then walking the entries by their lengths would land on exactly those
    multiples, so a fixed-width decode gives what the walk gives.  Eight
    strided slices, compared in C: O(n), a few nanoseconds an entry.
    """
    # A loop, not all() over a generator: with all(), the 200k store's full scan gained 8% instead of 13%.
    for j in range(8):  # noqa: SIM110
        if data[j:limit:stride] != data[j : j + 1] * count:
            return False
    return True


_ENTRY_ORDER: Final = itemgetter(1, 0, 2)
"""(trailer, key, value), as a fixed-width decode yields it, to the (key, trailer, value) of an entry."""


@lru_cache(maxsize=64)
def _fixed_width(key_len: int, value_len: int) -> Callable[[memoryview], Iterator[tuple[int, bytes, bytes]]]:
    """`iter_unpack` of entries with these lengths: skip the two lengths, then trailer, key and value."""
    return struct.Struct(f"<8xQ{key_len}s{value_len}s").iter_unpack
