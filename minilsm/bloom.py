"""Bloom filters: the structure that lets a read skip a table without touching its data.

A Bloom filter over a set S answers "definitely not in S" or "maybe in S".  It
is an array of m bits; adding a key sets k of them, and a query for a key that
was never added finds all k set only with probability about
``(1 - e^(-k n / m))^k`` (the false-positive rate), where n keys were added.

Every SSTable embeds one over its user keys (see sstable/), so a point read can
rule a table out with a few bit tests in memory instead of a disk read, as
LevelDB, RocksDB and Cassandra do.

Hashing.  A key is hashed once with XXH3-128 (stable across processes and
platforms, unlike Python's salted `hash()`) into two independent 64-bit halves
h1 and h2; probe i is ``(h1 + i * h2 + (i^3 - i) / 6) mod m``: Kirsch and
Mitzenmacher's double hashing ("Less hashing, same performance", 2006) with
Dillinger and Manolios' cubic term ("enhanced double hashing", 2004).  Plain
double hashing ``(h1 + i * h2) mod m`` walks an arithmetic progression, and in
a small filter two keys with the same step collide on most of their probes:
at 10 bits per key, filters of 7 to 9 keys measured 2.2-2.7% false positives
against 0.82% in theory.  The cubic term breaks the progression (1.1% there);
docs/BLOOM.md has the table.  Because the pair depends only on the key,
the store computes it once per read with `key_hash` and probes every table's
filter with `may_contain_hash`.  (LevelDB instead derives start and step from
one 32-bit hash: keys whose 32-bit hashes collide share every probe, a floor of
about n / 2^32 under the rate; RocksDB measured 1.5x the small-filter rate
near 10 million keys at 15 bits per key; docs/BLOOM.md.)

Costs: `add`/`may_contain` hash once (O(len(key))) and touch k bits, O(k);
`may_contain_hash` is O(k) and stops at the first clear bit, so an absent key
costs about two bit tests on average at the optimal k (roughly 0.2 us in
CPython 3.11; bench/bloom_bench.py measures it).

`probe_positions` is the one definition of where a key's probes land, and the
sizing (`params_for_keys`, `params_for_fpr`) and framing (`pack_filter`,
`unpack_filter`) helpers are shared with the counting variant in
counting_bloom.py, so both filters agree bit for bit.  docs/BLOOM.md has the
theory and the serialized layout.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections import deque
from collections.abc import Iterable
from itertools import chain, repeat
from operator import setitem
from typing import Final

import xxhash

from minilsm.errors import CorruptionError

KeyHash = tuple[int, int]
"""The (h1, h2) pair of one key: compute once with `key_hash`, probe many filters."""

_LN2: Final = math.log(2)

MAX_K: Final = 30

# Serialized form (all integers little-endian), documented byte by byte in docs/BLOOM.md:
#   magic u32 | format version u8 | hash scheme u8 | k u8 | param u8 |
#   num_bits u64 | num_keys u64 | payload | xxh64 checksum u64 of everything before it
# For a BloomFilter the payload is the bit array, ceil(num_bits / 8) bytes, and
# param is reserved (written 0, ignored on read); counting_bloom.py reuses the frame.
_MAGIC: Final = 0x46424C4D  # b"MLBF" read as a little-endian u32
_FORMAT_VERSION: Final = 1
HASH_SCHEME_XXH3_128_ENHANCED_DOUBLE: Final = 2
"""The hash scheme id in the header: XXH3-128 halves, enhanced double hashing (see `probe_positions`)."""
_HEADER: Final = struct.Struct("<IBBBBQQ")
_CHECKSUM: Final = struct.Struct("<Q")
SERIALIZED_OVERHEAD: Final = _HEADER.size + _CHECKSUM.size
"""Bytes a serialized filter adds to its bit array (32)."""

_BIT: Final = (1, 2, 4, 8, 16, 32, 64, 128)  # a tuple index is a little cheaper than `1 << (pos & 7)`
# The canonical XXH3-128 digest is big-endian, high half first.  Unpacking its 16
# bytes is ~40 ns cheaper than masking and shifting the 128-bit intdigest.
_HALVES: Final = struct.Struct(">QQ").unpack

_BULK_MIN_KEYS: Final = 64
"""Below this many keys `BloomFilter.add_hashes` adds one at a time (the lanes' setup costs more)."""
_LANE_ONE: Final = array("I", [1]).tobytes()
_LANES_OK: Final = array("I").itemsize == 4


def key_hash(key: bytes) -> KeyHash:
    """The (h1, h2) probe pair of `key`: one XXH3-128 digest split in two 64-bit halves.

    O(len(key)).  (A step of 0 needs no special case: the cubic term of
    `probe_positions` moves every probe after the second.)
    """
    high, low = _HALVES(xxhash.xxh3_128_digest(key))
    return low, high


def probe_positions(h: KeyHash, num_bits: int, k: int) -> list[int]:
    """The k positions ``g_i = (h1 + i*h2 + (i^3 - i)/6) mod num_bits``, i = 0..k-1, of the key hashed to `h`.

    This is the definition every filter of the family probes (positions may
    repeat).  It is walked incrementally, as Dillinger and Manolios give it: the
    position moves by the step, then the step grows by i, so the numbers stay
    below num_bits after the first two reductions.  O(k); `num_bits` must be positive.
    """
    pos = h[0] % num_bits
    step = h[1] % num_bits
    out = [pos]
    for i in range(1, k):
        pos += step
        if pos >= num_bits:
            pos -= num_bits
        step += i
        if step >= num_bits:
            step %= num_bits
        out.append(pos)
    return out


def k_for_bits_per_key(bits_per_key: float) -> int:
    """Probes per key for a filter of `bits_per_key`: round(bits_per_key * ln 2), kept in 1..30."""
    return max(1, min(MAX_K, round(bits_per_key * _LN2)))


def num_bits_for(n: int, bits_per_key: float) -> int:
    """Bits of a filter over `n` keys: max(64, ceil(n * bits_per_key)); 0 when bits_per_key is 0."""
    if bits_per_key <= 0:
        return 0
    return max(64, math.ceil(n * bits_per_key))


def params_for_keys(n: int, bits_per_key: float) -> tuple[int, int]:
    """(num_bits, k) of a filter for `n` keys at `bits_per_key`; (0, 0), "no filter", when bits_per_key is 0."""
    if not (bits_per_key >= 0 and math.isfinite(bits_per_key)):
        raise ValueError(f"bits_per_key must be a finite number >= 0, got {bits_per_key}")
    m = num_bits_for(n, bits_per_key)
    return m, k_for_bits_per_key(bits_per_key) if m else 0


def params_for_fpr(n: int, p: float) -> tuple[int, int]:
    """(num_bits, k) of a filter for `n` keys at false-positive rate `p`: `optimal_params`, at least 64 bits."""
    m, k = optimal_params(n, p)
    return max(64, m), k


def expected_fpr(m: int, n: int, k: int) -> float:
    """The textbook false-positive rate (1 - e^(-k n / m))^k of m bits, n keys, k probes.

    A filter with no bits (m == 0) says "maybe" to everything: rate 1.0.  The
    formula treats the k probes as independent bits; for small m the true rate
    is slightly higher (docs/BLOOM.md).  O(1).
    """
    if m <= 0 or k <= 0:
        return 1.0
    if n <= 0:
        return 0.0
    return float((1.0 - math.exp(-k * n / m)) ** k)


def optimal_params(n: int, p: float) -> tuple[int, int]:
    """(m, k) for `n` keys at target false-positive rate `p`, as Cassandra's bloom_filter_fp_chance.

    m = ceil(-n ln p / (ln 2)^2) and k = ceil(m / n * ln 2), k capped at `MAX_K`.  O(1).
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be between 0 and 1 (exclusive), got {p}")
    m = math.ceil(-n * math.log(p) / (_LN2 * _LN2))
    k = math.ceil(m / n * _LN2)
    return m, max(1, min(MAX_K, k))


def bits_per_key_for_fpr(p: float) -> float:
    """Bits per key needed for false-positive rate `p` at the optimal k: -ln p / (ln 2)^2."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be between 0 and 1 (exclusive), got {p}")
    return -math.log(p) / (_LN2 * _LN2)


def checked_k(num_bits: int, k: int) -> int:
    """`k` for a filter of `num_bits` (0 when num_bits is 0); ValueError unless num_bits >= 0 and k in 1..30."""
    if num_bits < 0:
        raise ValueError(f"num_bits must be >= 0, got {num_bits}")
    if num_bits == 0:
        return 0
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be in 1..{MAX_K}, got {k}")
    return k


# -- the serialized frame, shared by every filter of the family -----------------


def pack_filter(magic: int, k: int, param: int, num_bits: int, num_keys: int, payload: bytes | bytearray) -> bytes:
    """Frame a filter: header, `payload`, then the XXH64 of both.  O(len(payload))."""
    scheme = HASH_SCHEME_XXH3_128_ENHANCED_DOUBLE
    body = _HEADER.pack(magic, _FORMAT_VERSION, scheme, k, param, num_bits, num_keys) + payload
    return body + _CHECKSUM.pack(xxhash.xxh64_intdigest(body))


def unpack_filter(data: bytes | bytearray | memoryview, magic: int, what: str) -> tuple[int, int, int, int, bytearray]:
    """(k, param, num_bits, num_keys, payload) of a `pack_filter` frame.  O(len(data)).

    Checks the length, `magic`, checksum, format version and hash scheme, and
    raises `CorruptionError` (naming `what`) on any mismatch; the caller checks
    that the payload size and k fit num_bits.
    """
    view = memoryview(data).cast("B")
    if len(view) < SERIALIZED_OVERHEAD:
        raise CorruptionError(f"{what}: {len(view)} bytes is shorter than its header")
    found, version, scheme, k, param, num_bits, num_keys = _HEADER.unpack_from(view, 0)
    if found != magic:
        raise CorruptionError(f"{what}: bad magic {found:#x}")
    (stored,) = _CHECKSUM.unpack_from(view, len(view) - _CHECKSUM.size)
    if xxhash.xxh64_intdigest(view[: -_CHECKSUM.size]) != stored:
        raise CorruptionError(f"{what}: checksum mismatch")
    if version != _FORMAT_VERSION:
        raise CorruptionError(f"{what}: unknown format version {version}")
    if scheme != HASH_SCHEME_XXH3_128_ENHANCED_DOUBLE:
        raise CorruptionError(f"{what}: unknown hash scheme {scheme}")
    if (num_bits == 0) != (k == 0) or k > MAX_K:
        raise CorruptionError(f"{what}: k={k} is invalid for {num_bits} bits")
    return k, param, num_bits, num_keys, bytearray(view[_HEADER.size : -_CHECKSUM.size])


class BloomFilter:
    """A Bloom filter of `num_bits` bits and `k` probes per key.

    Build one with `for_keys` (bits per key, as LevelDB and RocksDB size them) or
    `for_fpr` (a target rate, as Cassandra).  A filter with ``num_bits == 0`` is
    "no filter": it answers maybe to every key, which is what ``bits_per_key=0``
    means throughout minilsm.  Memory: ceil(num_bits / 8) bytes.

    >>> f = BloomFilter.for_keys(1000, bits_per_key=10)
    >>> f.add(b"apple")
    >>> b"apple" in f
    True
    """

    __slots__ = ("_bits", "k", "num_bits", "num_keys")

    def __init__(self, num_bits: int, k: int, bits: bytearray | None = None, num_keys: int = 0) -> None:
        """A filter over `bits` (taken, not copied; None: all clear) that has had `num_keys` keys added.
        O(num_bits / 8) to allocate the bits, O(1) when given."""
        k = checked_k(num_bits, k)
        nbytes = (num_bits + 7) // 8
        if bits is None:
            bits = bytearray(nbytes)
        elif len(bits) != nbytes:
            raise ValueError(f"bit array of {len(bits)} bytes does not hold {num_bits} bits")
        self.num_bits = num_bits
        self.k = k
        self.num_keys = num_keys
        self._bits = bits

    @classmethod
    def for_keys(cls, n: int, bits_per_key: float = 10.0) -> BloomFilter:
        """An empty filter sized for `n` keys at `bits_per_key` (0 gives "no filter").  O(n * bits_per_key / 8)."""
        return cls(*params_for_keys(n, bits_per_key))

    @classmethod
    def for_fpr(cls, n: int, p: float) -> BloomFilter:
        """An empty filter sized for `n` keys at false-positive rate `p`.  O(m / 8) for its m bits."""
        return cls(*params_for_fpr(n, p))

    @classmethod
    def from_keys(cls, keys: Iterable[bytes], n: int, bits_per_key: float = 10.0) -> BloomFilter:
        """A filter sized for `n` keys holding every key of `keys`.  O(m / 8), plus `add`'s O(len(key) + k) per
        key."""
        f = cls.for_keys(n, bits_per_key)
        for key in keys:
            f.add(key)
        return f

    # -- adding -----------------------------------------------------------------

    def add(self, key: bytes) -> None:
        """Add `key`.  O(len(key) + k)."""
        self.add_hash(key_hash(key))

    def add_hash(self, h: KeyHash) -> None:
        """Add the key whose `key_hash` is `h`.  O(k)."""
        self.num_keys += 1
        if self.num_bits == 0:
            return
        bits = self._bits
        for pos in probe_positions(h, self.num_bits, self.k):
            bits[pos >> 3] |= _BIT[pos & 7]

    def add_hashes(self, hashes: Iterable[KeyHash]) -> None:
        """`add_hash` for each of `hashes`: how a table builder fills its filter.  O(k) per key.

        For a table's worth of keys, the probes of all keys advance together,
        one probe index at a time, as lanes of one Python integer: 32 bits per
        key, so an addition or a conditional subtraction of `num_bits` is one
        big-integer operation in C for every key at once (SWAR).  Each key's
        positions are then set in a byte per bit with ``map(setitem, ...)``, and
        the bytes are packed into bits eight strided slices at a time.  About
        0.4 us per key against 0.75 us for the same walk in Python bytecode; the
        result is bit for bit what `add_hash` gives (property-tested).  Few keys,
        or filters too small or too large for the lanes, take `add_hash` per key.
        """
        pairs = hashes if isinstance(hashes, list) else list(hashes)
        n = len(pairs)
        m = self.num_bits
        k = self.k
        # Lanes hold values below 2m, so m < 2**30 fits 32-bit lanes with the top bit free as the
        # "at least m" flag; m > k keeps `step + i` below 2m, so one subtraction reduces it.
        if n < _BULK_MIN_KEYS or not k < m < 1 << 30 or not _LANES_OK:
            for h in pairs:
                self.add_hash(h)
            return
        order = sys.byteorder
        lanes = array("I", [h % m for h in chain.from_iterable(pairs)])  # h1 % m, h2 % m, h1 % m, ...
        pos = int.from_bytes(lanes[0::2].tobytes(), order)
        step = int.from_bytes(lanes[1::2].tobytes(), order)
        ones = int.from_bytes(_LANE_ONE * n, order)
        flags = ones << 31
        bias = ones * ((1 << 31) - m)  # lane + bias sets the lane's top bit exactly when lane >= m
        width = 4 * n
        parts = [pos.to_bytes(width, order)]
        for i in range(1, k):  # the walk of `probe_positions`, every lane at once
            pos += step
            pos -= (((pos + bias) & flags) >> 31) * m
            step += ones * i
            step -= (((step + bias) & flags) >> 31) * m
            parts.append(pos.to_bytes(width, order))
        bits = self._bits
        bytemap = bytearray(8 * len(bits))
        deque(map(setitem, repeat(bytemap), array("I", b"".join(parts)), repeat(1)), 0)
        # Byte 8j+b of the byte map is bit b of byte j: pack with eight strided slices.
        packed = int.from_bytes(bits, "little")
        for b in range(8):
            packed |= int.from_bytes(bytemap[b::8], "little") << b
        bits[:] = packed.to_bytes(len(bits), "little")
        self.num_keys += n

    # -- querying ---------------------------------------------------------------

    def may_contain(self, key: bytes) -> bool:
        """False if `key` was certainly never added; True if it may have been.  O(len(key) + k)."""
        return self.may_contain_hash(key_hash(key))

    __contains__ = may_contain

    def may_contain_hash(self, h: KeyHash) -> bool:
        """`may_contain` for a key already hashed with `key_hash`.  O(k), about 2 bit tests for an absent key.

        This is the store's hottest path (every table a point read considers),
        so it walks `probe_positions` inline and stops at the first clear bit
        instead of building the list: an absent key usually fails the first or
        second probe, so the step is reduced only after the first one passes.
        """
        m = self.num_bits
        if not m:
            return True
        bits = self._bits
        h1, h2 = h
        pos = h1 % m
        if not bits[pos >> 3] & _BIT[pos & 7]:
            return False
        step = h2 % m
        for i in range(1, self.k):
            pos += step
            if pos >= m:
                pos -= m
            if not bits[pos >> 3] & _BIT[pos & 7]:
                return False
            step += i
            if step >= m:
                step %= m
        return True

    # -- measuring --------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of the bit array, ceil(num_bits / 8).  O(1)."""
        return len(self._bits)

    @property
    def bits_per_key(self) -> float:
        """Bits per added key (0.0 before any key is added).  O(1)."""
        return self.num_bits / self.num_keys if self.num_keys else 0.0

    def fill_ratio(self) -> float:
        """Fraction of bits set; about 1/2 at the optimal k.  O(m)."""
        if self.num_bits == 0:
            return 1.0
        return int.from_bytes(self._bits, "little").bit_count() / self.num_bits

    def expected_fpr(self, n: int | None = None) -> float:
        """Theoretical false-positive rate after `n` keys (default: the keys added): `expected_fpr`.  O(1)."""
        return expected_fpr(self.num_bits, self.num_keys if n is None else n, self.k)

    # -- combining --------------------------------------------------------------

    def union(self, other: BloomFilter) -> BloomFilter:
        """A new filter holding the keys of both (bitwise OR).  O(m).

        Filters trained in parallel on partitions of a data set combine this way;
        they must have the same num_bits and k (and so the same hash scheme), or
        `ValueError` is raised.
        """
        if not isinstance(other, BloomFilter):
            raise TypeError(f"cannot union a BloomFilter with {type(other).__name__}")
        if (self.num_bits, self.k) != (other.num_bits, other.k):
            raise ValueError(
                f"cannot union filters with different parameters: "
                f"m={self.num_bits}, k={self.k} against m={other.num_bits}, k={other.k}"
            )
        merged = int.from_bytes(self._bits, "little") | int.from_bytes(other._bits, "little")
        bits = bytearray(merged.to_bytes(len(self._bits), "little"))
        return BloomFilter(self.num_bits, self.k, bits, self.num_keys + other.num_keys)

    def __or__(self, other: object) -> BloomFilter:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return self.union(other)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return (self.num_bits, self.k, self._bits) == (other.num_bits, other.k, other._bits)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"BloomFilter(num_bits={self.num_bits}, k={self.k}, num_keys={self.num_keys})"

    # -- serialization ----------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The self-describing, checksummed form stored in SSTables (layout in docs/BLOOM.md).  O(m)."""
        return pack_filter(_MAGIC, self.k, 0, self.num_bits, self.num_keys, self._bits)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> BloomFilter:
        """Decode `to_bytes` output.  Any damage raises `CorruptionError`, never a wrong filter.  O(m)."""
        k, _reserved, num_bits, num_keys, bits = unpack_filter(data, _MAGIC, "bloom filter")
        if (num_bits + 7) // 8 != len(bits):
            raise CorruptionError(f"bloom filter: {num_bits} bits do not fit a {len(bits)}-byte array")
        return cls(num_bits, k, bits, num_keys)
