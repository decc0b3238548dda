"""Counting Bloom filters: a Bloom filter that can forget a key.

A plain Bloom filter cannot delete: clearing a key's bits may clear bits that
other keys share.  A counting filter (Fan, Cao, Almeida and Broder, "Summary
cache", 2000) replaces each bit with a small counter: `add` increments the k
counters of a key, `remove` decrements them, and a query asks whether all k are
non-zero.  Positions, sizing and the serialized frame are those of
`minilsm.bloom`, so `to_bloom()` yields exactly the BloomFilter the same keys
would have built, and both probe with one `key_hash`.

Counters are 4 bits, two to a byte (even position in the low nibble).  A
counter that reaches 15 saturates: it is never incremented past 15 (no wrap to
0) and never decremented again, since its true count is no longer known.  So a
counter is either exact or saturated and at least the true count, and removing
keys that were added can never cause a false negative.  At the optimal k the
chance that any counter saturates is about 1.4e-15 per position (Fan et al.),
so in practice only heavily duplicated keys saturate one.

Memory: 4 bits per position, ceil(num_bits / 2) bytes, 4x the plain filter.
"""

from __future__ import annotations

from typing import Final

from minilsm.bloom import (
    BloomFilter,
    KeyHash,
    checked_k,
    expected_fpr,
    key_hash,
    pack_filter,
    params_for_fpr,
    params_for_keys,
    probe_positions,
    unpack_filter,
)
from minilsm.errors import CorruptionError

COUNTER_BITS: Final = 4
COUNTER_MAX: Final = (1 << COUNTER_BITS) - 1
"""A counter's saturated value (15): sticky, never incremented or decremented."""

_MAGIC: Final = 0x42434C4D  # b"MLCB" read as a little-endian u32

# to_bloom() turns counter byte 4b+j (counters 8b+2j, 8b+2j+1) into bits 2j, 2j+1 of bit byte b;
# table j maps a counter byte to those two bits, so bytes.translate does the per-counter work in C.
_TO_BITS: Final = tuple(bytes((bool(c & 0x0F) | bool(c & 0xF0) << 1) << (2 * j) for c in range(256)) for j in range(4))


class CountingBloomFilter:
    """A Bloom filter with 4-bit saturating counters, so keys can be removed.

    Same probe positions and sizing as `BloomFilter`: ``for_keys(n, bits_per_key)``
    or ``for_fpr(n, p)``, with ``num_bits == 0`` meaning "no filter" (maybe to every
    key).  Memory is ceil(num_bits / 2) bytes, 4x a BloomFilter of the same size.

    Removing a key that was never added is the caller's error.  When such a key
    looks absent (a counter is 0) `remove` refuses it with KeyError and changes
    nothing; but when it is a false positive, its counters belong to other keys
    and decrementing them can make those keys false negatives.

    >>> f = CountingBloomFilter.for_keys(100, bits_per_key=10)
    >>> f.add(b"apple")
    >>> f.remove(b"apple")
    >>> b"apple" in f
    False
    """

    __slots__ = ("_counters", "k", "num_bits", "num_keys")

    def __init__(self, num_bits: int, k: int, counters: bytearray | None = None, num_keys: int = 0) -> None:
        k = checked_k(num_bits, k)
        nbytes = (num_bits + 1) // 2
        if counters is None:
            counters = bytearray(nbytes)
        elif len(counters) != nbytes:
            raise ValueError(f"counter array of {len(counters)} bytes does not hold {num_bits} counters")
        self.num_bits = num_bits
        self.k = k
        self.num_keys = num_keys
        self._counters = counters

    @classmethod
    def for_keys(cls, n: int, bits_per_key: float = 10.0) -> CountingBloomFilter:
        """An empty filter sized for `n` keys at `bits_per_key` positions per key (0 gives "no filter")."""
        return cls(*params_for_keys(n, bits_per_key))

    @classmethod
    def for_fpr(cls, n: int, p: float) -> CountingBloomFilter:
        """An empty filter sized for `n` keys at false-positive rate `p`."""
        return cls(*params_for_fpr(n, p))

    # -- counters ---------------------------------------------------------------

    def counter(self, pos: int) -> int:
        """The counter at position `pos` (0..num_bits-1).  O(1)."""
        return self._counters[pos >> 1] >> ((pos & 1) << 2) & COUNTER_MAX

    def saturated(self) -> int:
        """How many counters are stuck at `COUNTER_MAX`.  O(m)."""
        return sum(self.counter(pos) == COUNTER_MAX for pos in range(self.num_bits))

    # -- adding and removing ----------------------------------------------------

    def add(self, key: bytes) -> None:
        """Add one occurrence of `key`.  O(len(key) + k)."""
        self.add_hash(key_hash(key))

    def add_hash(self, h: KeyHash) -> None:
        """Add one occurrence of the key whose `key_hash` is `h`.  O(k)."""
        self.num_keys += 1
        if self.num_bits == 0:
            return
        counters, counter = self._counters, self.counter
        for pos in probe_positions(h, self.num_bits, self.k):
            if counter(pos) != COUNTER_MAX:
                counters[pos >> 1] += 1 << ((pos & 1) << 2)

    def remove(self, key: bytes) -> None:
        """Remove one occurrence of `key`, which must have been added.  O(len(key) + k).

        Raises KeyError, changing nothing, if `key` is certainly absent.  Removing
        a never-added key that the filter cannot tell apart (a false positive)
        silently corrupts it: other keys may then be reported absent.
        """
        self.remove_hash(key_hash(key))

    def remove_hash(self, h: KeyHash) -> None:
        """`remove` for a key already hashed with `key_hash`.  O(k)."""
        if self.num_bits:
            counters, counter = self._counters, self.counter
            positions = probe_positions(h, self.num_bits, self.k)
            if not all(map(counter, positions)):
                raise KeyError("key is not in the counting filter")
            for pos in positions:
                # A saturated counter's true count is unknown: keep it.  A 0 here means the key
                # probes this position more often than it was added (it never was): don't wrap to 15.
                if 0 < counter(pos) < COUNTER_MAX:
                    counters[pos >> 1] -= 1 << ((pos & 1) << 2)
        self.num_keys = max(0, self.num_keys - 1)

    # -- querying ---------------------------------------------------------------

    def may_contain(self, key: bytes) -> bool:
        """False if `key` is certainly not present; True if it may be.  O(len(key) + k)."""
        return self.may_contain_hash(key_hash(key))

    def __contains__(self, key: bytes) -> bool:
        return self.may_contain(key)

    def may_contain_hash(self, h: KeyHash) -> bool:
        """`may_contain` for a key already hashed with `key_hash`.  O(k)."""
        return not self.num_bits or all(map(self.counter, probe_positions(h, self.num_bits, self.k)))

    # -- measuring and converting -----------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of the counter array: ceil(num_bits / 2)."""
        return len(self._counters)

    def expected_fpr(self, n: int | None = None) -> float:
        """Theoretical false-positive rate with `n` keys present (default: `num_keys`, added minus removed)."""
        return expected_fpr(self.num_bits, self.num_keys if n is None else n, self.k)

    def to_bloom(self) -> BloomFilter:
        """The plain BloomFilter of the keys present: bit set where the counter is non-zero.  O(m), in C.

        Keys only added (never removed) give exactly the filter `BloomFilter` builds from them.
        """
        counters = bytes(self._counters) + bytes(-len(self._counters) % 4)
        merged = 0
        for j, table in enumerate(_TO_BITS):
            # Each translated slice holds its two bits per byte apart from the others', so OR is exact.
            merged |= int.from_bytes(counters[j::4].translate(table), "little")
        nbytes = (self.num_bits + 7) // 8
        return BloomFilter(self.num_bits, self.k, bytearray(merged.to_bytes(nbytes, "little")), self.num_keys)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CountingBloomFilter):
            return NotImplemented
        return (self.num_bits, self.k, self._counters) == (other.num_bits, other.k, other._counters)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"CountingBloomFilter(num_bits={self.num_bits}, k={self.k}, num_keys={self.num_keys})"

    # -- serialization ----------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The checksummed form: BloomFilter's frame with magic "MLCB", param = 4 (counter width).  O(m)."""
        return pack_filter(_MAGIC, self.k, COUNTER_BITS, self.num_bits, self.num_keys, self._counters)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> CountingBloomFilter:
        """Decode `to_bytes` output.  Any damage raises `CorruptionError`, never a wrong filter.  O(m)."""
        k, width, num_bits, num_keys, counters = unpack_filter(data, _MAGIC, "counting bloom filter")
        if width != COUNTER_BITS:
            raise CorruptionError(f"counting bloom filter: unsupported counter width {width}")
        if (num_bits + 1) // 2 != len(counters):
            raise CorruptionError(f"counting bloom filter: {num_bits} counters do not fit a {len(counters)}-byte array")
        return cls(num_bits, k, counters, num_keys)
