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
from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate, compress, repeat
from operator import add, sub
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
_U64: Final = struct.Struct("<Q")
_NO_LIMIT: Final = 1 << 63  # a block size no block reaches

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


MAX_ENTRY_GROWTH: Final = _HEADER_SIZE + 4 + num_buckets(1)
"""The most one version adds to the size of a block (hash ratio `HASH_UTIL_RATIO`) beyond its key and value
bytes: its header, its offset and, for a new key, the buckets a key adds (a ceiling grows by at most
the ceiling of the step)."""


def hash_index(hashes: list[int], firsts: list[int], buckets: int) -> bytes:
    """The `buckets` bucket bytes for the keys whose bucket hashes (``key_hash(key)[1]``) are `hashes`
    and whose first versions are entries `firsts` of the block.  O(len(hashes) + buckets).
    """
    out = bytearray((HASH_EMPTY,)) * buckets
    for h, i in zip(hashes, firsts, strict=True):
        b = h % buckets
        out[b] = i if out[b] == HASH_EMPTY else HASH_COLLISION
    return bytes(out)


class EntryRun:
    """Versions in internal order, encoded a column at a time, for `BlockBuilder.fill` to cut into blocks.

    ``keys[i]`` and ``trailers[i]`` are version i's; ``entries[i]`` is its
    encoded entry, starting at ``starts[i]`` were the entries back to back, and
    ``footprint[i]`` counts the bytes versions ``0 .. i-1`` take in a block,
    offsets included.  ``new[i]`` says whether version i is the first of its
    user key (given by the caller, who knows the key before the run);
    ``distinct[i]`` counts the new keys among versions ``0 .. i-1``, so
    version i's key has bucket hash ``hashes[distinct[i + 1]]``: `hashes`
    holds one ``key_hash(key)[1]`` per new key, after ``hashes[0]`` for the key
    the run continues (any value when there is none).

    Every column is one pass of C code (`map`, `accumulate`, `bytes.join`),
    with no Python bytecode per version.  Raises `struct.error`, having kept
    nothing, when a length or trailer does not fit the entry header.
    O(total bytes).
    """

    __slots__ = ("distinct", "entries", "footprint", "hashes", "keys", "new", "starts", "trailers")

    def __init__(
        self, keys: list[bytes], trailers: list[int], values: list[bytes], new: list[bool], hashes: list[int]
    ) -> None:
        headers = map(ENTRY_HEADER.pack, map(len, keys), map(len, values), trailers)
        # One bytes object per entry: joining those later is twice as fast as joining headers, keys and
        # values as separate parts (measured: 0.17 against 0.33 us per version with the offsets below).
        self.entries = list(map(b"".join, zip(headers, keys, values, strict=True)))
        self.starts = list(accumulate(map(len, self.entries), initial=0))
        self.footprint = list(map(add, self.starts, range(0, 4 * len(self.starts), 4)))
        self.keys = keys
        self.trailers = trailers
        self.new = new
        self.distinct = list(accumulate(new, initial=0))
        self.hashes = hashes


class BlockBuilder:
    """Accumulates versions, in the order given, into the contents of one data block.

    `util_ratio` (distinct keys per hash bucket) is for tests; tables use `HASH_UTIL_RATIO`.
    """

    __slots__ = ("_bucket_bytes", "_entries", "_entry_bytes", "_firsts", "_hashed", "_hashes", "_last_key", "_offsets")

    def __init__(self, util_ratio: float = HASH_UTIL_RATIO) -> None:
        if not util_ratio > 0:
            raise ValueError(f"util_ratio must be > 0, got {util_ratio}")
        self._entries: list[bytes] = []  # encoded entries, joined by `finish`
        self._entry_bytes = 0
        self._offsets: list[int] = []
        self._hashes: list[int] = []  # the bucket hash of each key of the block ...
        self._firsts: list[int] = []  # ... and the entry index of its first version here
        self._hashed = True  # False once some key's first version lies beyond MAX_HASHED_ENTRY: no index
        self._last_key: bytes | None = None
        # Buckets by distinct keys, looked up rather than computed (a block with an index has at most 254 keys).
        self._bucket_bytes = [num_buckets(d, util_ratio) for d in range(MAX_HASHED_ENTRY + 2)]

    def add(self, key: bytes, trailer: int, value: bytes, h: KeyHash) -> int:
        """Append one version of `key`, whose `key_hash` is `h`; returns `size()` after it.

        A one-version `fill`.  The caller keeps internal order.  Raises `struct.error`, with the
        builder unchanged, when a length does not fit in 32 bits or the trailer in 64.
        O(len(key) + len(value)) amortized, a few microseconds of setup: runs go through `fill`.
        """
        # hashes[0] is the key continued from before and hashes[1] a new key's: both are `key`'s here.
        run = EntryRun([key], [trailer], [value], [key != self._last_key], [h[1], h[1]])
        self.fill(run, 0, _NO_LIMIT)
        return self.size()

    def fill(self, run: EntryRun, lo: int, limit: int) -> int:
        """Append versions ``lo, lo+1, ...`` of `run` up to the first that brings `size()` to `limit`, or to its end.

        Returns the index after the last version appended.  The block's size
        after each candidate version is a difference of `run`'s cumulative
        columns: a bisection bounds the cut, Python code runs only for the
        few probes just before that bound, and the versions go in as C-level
        list extensions.  O(versions appended + log len(run)).
        """
        n = len(run.keys)
        count = len(self._offsets)
        fresh = count == 0  # a block's first version always counts as its key's first in the block
        footprint = run.footprint
        new = run.new
        distinct = run.distinct
        # Without its hash index, the block holding versions lo..j would take footprint[j + 1] + base bytes: the
        # first j at which that reaches `limit` bounds the cut (n: no such version).
        base = self._entry_bytes + 4 * count + _FOOTER_SIZE - footprint[lo]
        bound = bisect_left(footprint, limit - base, lo + 1) - 1
        # The index is dropped for good at the first key whose first version lies past MAX_HASHED_ENTRY.
        dropped = lo
        if self._hashed:
            try:
                dropped = new.index(True, max(lo, lo + MAX_HASHED_ENTRY + 1 - count))
            except ValueError:
                dropped = n
        # Before `dropped` the size with the index grows with j, and it exceeds the size without index by
        # the buckets alone, a few bytes per key: so the cut is `bound` or a few versions before it, found
        # walking back (one or two probes with 100-byte values).
        keys_before = len(self._firsts) + (fresh and not new[lo]) - distinct[lo]
        buckets = self._bucket_bytes
        cut = end = min(bound, dropped)
        while cut > lo and footprint[cut] + base + buckets[distinct[cut] + keys_before] >= limit:
            cut -= 1  # the block holding versions lo .. cut - 1 reaches `limit` already
        if cut == end:
            cut = bound  # past `dropped` the size is the one without index, which reaches `limit` at `bound`
        hi = n if cut >= n else cut + 1

        starts = run.starts
        self._entries += run.entries[lo:hi]
        # (Slices, not `islice`, which would step over the first `lo` items every time.)
        self._offsets.extend(map(sub, starts[lo:hi], repeat(starts[lo] - self._entry_bytes)))
        self._entry_bytes += starts[hi] - starts[lo]
        if self._hashed:
            if dropped < hi:
                self._hashed = False
            else:
                if fresh and not new[lo]:  # a key continued from the previous block: its hash is the run's first
                    self._firsts.append(0)
                    self._hashes.append(run.hashes[distinct[lo]])
                self._firsts.extend(compress(range(count, count + hi - lo), new[lo:hi]))
                self._hashes.extend(run.hashes[distinct[lo] + 1 : distinct[hi] + 1])
        self._last_key = run.keys[hi - 1]
        return hi

    @property
    def count(self) -> int:
        return len(self._offsets)

    def size(self) -> int:
        """Bytes the block's contents would have if finished now.  O(1)."""
        buckets = self._bucket_bytes[len(self._firsts)] if self._hashed else 0
        return self._entry_bytes + 4 * len(self._offsets) + buckets + _FOOTER_SIZE

    def finish(self) -> bytes:
        """The block's contents; the builder is empty again afterwards.  O(entries)."""
        n = len(self._offsets)
        buckets = self._bucket_bytes[len(self._firsts)] if self._hashed else 0
        contents = b"".join(
            (
                *self._entries,
                struct.pack(f"<{n}I", *self._offsets),
                hash_index(self._hashes, self._firsts, buckets) if buckets else b"",
                BLOCK_FOOTER.pack(buckets, n),
            )
        )
        self._entries = []
        self._entry_bytes = 0
        self._offsets = []
        self._hashes = []
        self._firsts = []
        self._hashed = True
        self._last_key = None
        return contents


class Block:
    """A read-only data block: its contents and decoded offset array, as kept in the block cache.

    Construction checks the count, bucket count and offset array against the
    block size (O(n) in C, no per-entry Python work).  The checksum has already
    vouched for the bytes, so entries and buckets are bounds-checked only when
    used; malformed structure that slips through surfaces as `CorruptionError`,
    never as a wrong-typed exception.
    """

    __slots__ = ("buckets_at", "count", "data", "limit", "num_buckets", "offsets")

    def __init__(self, data: bytes) -> None:
        size = len(data)
        if size < _FOOTER_SIZE:
            raise CorruptionError(f"data block of {size} bytes has no entry count")
        buckets, count = BLOCK_FOOTER.unpack_from(data, size - _FOOTER_SIZE)
        buckets_at = size - _FOOTER_SIZE - buckets
        limit = buckets_at - 4 * count
        if count == 0 or limit < _HEADER_SIZE * count:
            raise CorruptionError(f"data block of {size} bytes cannot hold {count} entries and {buckets} buckets")
        offsets = array(_U32_CODE)
        offsets.frombytes(data[limit:buckets_at])
        if _SWAP:
            offsets.byteswap()
        if offsets[0] != 0 or offsets[-1] > limit - _HEADER_SIZE:
            raise CorruptionError("data block: offset array points outside the entries")
        self.data = data
        self.offsets = offsets
        self.count = count
        self.limit = limit  # where the entries end and the offset array begins
        self.num_buckets = buckets
        self.buckets_at = buckets_at  # where the hash index begins

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
        offsets = self.offsets
        try:
            o = offsets[i]
            key_len, value_len, trailer = ENTRY_HEADER.unpack_from(data, o)
        except IndexError as e:
            raise CorruptionError(f"data block: hash index points at entry {i} of {self.count}") from e
        except struct.error as e:
            raise CorruptionError("data block: entry header runs past the block") from e
        o += _HEADER_SIZE
        end = offsets[i + 1] if i + 1 < self.count else self.limit
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

        One pass in a list comprehension's worth of Python per entry: O(n).
        """
        data = self.data
        unpack = ENTRY_HEADER.unpack_from
        out: list[tuple[bytes, int, bytes]] = []
        append = out.append
        h = _HEADER_SIZE
        pos = 0
        try:
            for o in self.offsets:
                if o != pos:
                    raise CorruptionError(f"data block: entry at {o} does not start where the previous one ends")
                key_len, value_len, trailer = unpack(data, o)
                v = o + h + key_len  # where the value starts
                pos = v + value_len
                append((data[o + h : v], trailer, data[v:pos]))
        except struct.error as e:
            raise CorruptionError("data block: entry header runs past the block") from e
        if pos != self.limit:
            raise CorruptionError(f"data block: entries end at {pos}, the offset array starts at {self.limit}")
        return out
