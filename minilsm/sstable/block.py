"""Data blocks: sorted versions plus an offset array, so one version is found without decoding the rest.

Layout of a data block's contents (before the 9-byte trailer `format.read_block` strips)::

    entry 0 | entry 1 | ... | entry n-1 | offset of entry 0 u32 | ... | offset of entry n-1 u32 | n u32
    entry = key_len u32 | value_len u32 | trailer u64 | user key | value

LevelDB prefix-compresses keys and keeps a sparse array of "restart points",
so a lookup binary-searches the restarts and then decodes up to 16 entries one
by one.  In C that linear part is nearly free; in Python each decoded entry
costs a few hundred nanoseconds of interpreter work and dominates a lookup.
With one offset per entry, a lookup is a binary search in which each probe is
one `struct.unpack_from` and one slice, both done in C: about log2(n) probes
instead of log2(n / 16) + 8 decodes.  The price is 4 bytes per entry and no
prefix compression.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator
from typing import Final

from minilsm.errors import CorruptionError

ENTRY_HEADER: Final = struct.Struct("<IIQ")
"""key_len u32 | value_len u32 | trailer u64."""
_HEADER_SIZE: Final = ENTRY_HEADER.size
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")

# The offset array is decoded in one C call into an array of 4-byte unsigned
# ints ('I' on every mainstream platform); the file is little-endian.
_U32_CODE: Final = "I" if array("I").itemsize == 4 else "L"
_SWAP: Final = sys.byteorder != "little"


class BlockBuilder:
    """Accumulates versions, in the order given, into the contents of one data block."""

    __slots__ = ("_buf", "_offsets")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._offsets: list[int] = []

    def add(self, key: bytes, trailer: int, value: bytes) -> int:
        """Append one version; returns `size()` after it.  The caller keeps internal order.

        O(len(key) + len(value)) amortized.
        """
        buf = self._buf
        offsets = self._offsets
        offsets.append(len(buf))
        buf += ENTRY_HEADER.pack(len(key), len(value), trailer)
        buf += key
        buf += value
        return len(buf) + 4 * len(offsets) + 4

    @property
    def count(self) -> int:
        return len(self._offsets)

    def size(self) -> int:
        """Bytes the block's contents would have if finished now."""
        return len(self._buf) + 4 * len(self._offsets) + 4

    def finish(self) -> bytes:
        """The block's contents; the builder is empty again afterwards."""
        n = len(self._offsets)
        contents = b"".join((self._buf, struct.pack(f"<{n}I", *self._offsets), _U32.pack(n)))
        self._buf = bytearray()
        self._offsets = []
        return contents


class Block:
    """A read-only data block: its contents and decoded offset array, as kept in the block cache.

    Construction checks the count and offset array against the block size
    (O(n) in C, no per-entry Python work).  The checksum has already vouched
    for the bytes, so entries are bounds-checked only when returned; malformed
    structure that slips through surfaces as `CorruptionError`, never as a
    wrong-typed exception.
    """

    __slots__ = ("count", "data", "limit", "offsets")

    def __init__(self, data: bytes) -> None:
        size = len(data)
        if size < 4:
            raise CorruptionError(f"data block of {size} bytes has no entry count")
        (count,) = _U32.unpack_from(data, size - 4)
        limit = size - 4 - 4 * count
        if count == 0 or limit < _HEADER_SIZE * count:
            raise CorruptionError(f"data block of {size} bytes cannot hold {count} entries")
        offsets = array(_U32_CODE)
        offsets.frombytes(data[limit : size - 4])
        if _SWAP:
            offsets.byteswap()
        if offsets[0] != 0 or offsets[-1] > limit - _HEADER_SIZE:
            raise CorruptionError("data block: offset array points outside the entries")
        self.data = data
        self.offsets = offsets
        self.count = count
        self.limit = limit  # where the entries end and the offset array begins

    def seek(self, key: bytes, trailer: int) -> int:
        """Index of the first version at or after ``(key, trailer)`` in internal order (`count` if none).

        Binary search over the offset array: about log2(count) probes, each
        reading one header and slicing one key.  O(log n).
        """
        data = self.data
        offsets = self.offsets
        key_len_at = _U32.unpack_from
        trailer_at = _U64.unpack_from
        lo = 0
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

    def version_of(self, i: int, key: bytes) -> tuple[int, bytes] | None:
        """``(trailer, value)`` of entry `i` if its user key is `key`; None if it is another key or `i` is count."""
        if i >= self.count:
            return None
        data = self.data
        o = self.offsets[i]
        try:
            key_len, value_len, trailer = ENTRY_HEADER.unpack_from(data, o)
        except struct.error as e:
            raise CorruptionError("data block: entry header runs past the block") from e
        o += _HEADER_SIZE
        if data[o : o + key_len] != key:
            return None
        end = self.offsets[i + 1] if i + 1 < self.count else self.limit
        o += key_len
        if o + value_len != end:
            raise CorruptionError(f"data block: entry {i} does not end where the next begins")
        return trailer, data[o:end]

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
