"""Data blocks (minilsm/sstable/block.py): encoding round trip, binary search, hash index, and malformed input."""

from __future__ import annotations

import struct
from bisect import bisect_left

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minilsm.bloom import KeyHash, key_hash
from minilsm.errors import CorruptionError
from minilsm.sstable.block import (
    BLOCK_FOOTER,
    ENTRY_HEADER,
    HASH_COLLISION,
    HASH_EMPTY,
    HASH_UTIL_RATIO,
    MAX_HASHED_ENTRY,
    Block,
    BlockBuilder,
    num_buckets,
)

Entry = tuple[bytes, int, bytes]


@st.composite
def sorted_entries(draw: st.DrawFn) -> list[Entry]:
    """1..60 versions in internal order: user key ascending, trailer descending, with repeated keys."""
    keys = draw(st.lists(st.binary(max_size=12), min_size=1, max_size=25, unique=True))
    out: list[Entry] = []
    for key in sorted(keys):
        trailers = draw(st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=4, unique=True))
        for trailer in sorted(trailers, reverse=True):
            out.append((key, trailer, draw(st.binary(max_size=40))))
    return out


def build(
    entries: list[Entry], hash_of: dict[bytes, KeyHash] | None = None, util_ratio: float = HASH_UTIL_RATIO
) -> Block:
    """The block of `entries`, hashing keys with `key_hash` or, to force collisions, as `hash_of` says."""
    b = BlockBuilder(util_ratio)
    for key, trailer, value in entries:
        b.add(key, trailer, value, key_hash(key) if hash_of is None else hash_of[key])
    return Block(b.finish())


def without_hash_index(block: Block) -> Block:
    """The same block with num_buckets 0: lookups binary-search."""
    data = block.data
    return Block(data[: block.buckets_at] + BLOCK_FOOTER.pack(0, block.count))


def expected_get(entries: list[Entry], key: bytes, target: int) -> tuple[int, bytes] | bool:
    """What `Block.get` must answer, by brute force over the entries."""
    for k, t, v in entries:
        if k == key and t <= target:
            return t, v
    return any(k == key for k, _, _ in entries)


def internal(e: Entry) -> tuple[bytes, int]:
    return e[0], -e[1]


@given(sorted_entries())
def test_entries_round_trip(entries: list[Entry]) -> None:
    block = build(entries)
    assert block.count == len(entries)
    assert block.entries() == entries
    for i, (key, _, _) in enumerate(entries):
        assert block.key_at(i) == key


@st.composite
def fixed_width_entries(draw: st.DrawFn) -> list[Entry]:
    """1..60 versions whose keys share one length and whose values share another (the empty key included)."""
    key_len, value_len = draw(st.integers(0, 6)), draw(st.integers(0, 40))
    width = st.binary(min_size=key_len, max_size=key_len)
    keys = draw(st.lists(width, min_size=1, max_size=25, unique=True))
    out: list[Entry] = []
    for key in sorted(keys):
        trailers = draw(st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=4, unique=True))
        for trailer in sorted(trailers, reverse=True):
            out.append((key, trailer, draw(st.binary(min_size=value_len, max_size=value_len))))
    return out


@given(fixed_width_entries())
def test_fixed_width_blocks_decode_as_the_walk_does(entries: list[Entry]) -> None:
    # `entries` decodes these in one struct call; `versions` goes entry by entry through the offset array.
    block = build(entries)
    assert block.entries() == entries == list(block.versions(0, block.count))


def test_fixed_width_decode_is_not_taken_when_a_length_differs() -> None:
    entries: list[Entry] = [(b"k%d" % i, 10 - i, b"value %d" % i) for i in range(6)]  # 2-byte keys, 7-byte values
    block = build(entries)
    # Entry 3 claims a 3-byte key and a 6-byte value: the same width, so the entries still tile the
    # block at the same offsets, but walking the lengths splits entry 3 otherwise.
    data = bytearray(block.data)
    struct.pack_into("<II", data, block.offsets[3], 3, 6)
    forged = Block(bytes(data))
    walked = list(forged.versions(0, forged.count))
    assert walked[3] == (b"k3v", 7, b"alue 3") != entries[3]
    assert forged.entries() == walked
    # Claiming a longer value alone breaks the tiling, which the walk reports.
    struct.pack_into("<II", data, block.offsets[3], 2, 8)
    with pytest.raises(CorruptionError, match="runs past the block"):
        Block(bytes(data)).entries()


@given(sorted_entries(), st.binary(max_size=12), st.integers(0, (1 << 64) - 1))
def test_seek_matches_bisect_over_internal_order(entries: list[Entry], key: bytes, trailer: int) -> None:
    block = build(entries)
    order = [internal(e) for e in entries]
    probes = [(key, trailer)] + [(k, t) for k, t, _ in entries] + [(k, t + 1) for k, t, _ in entries]
    for k, t in probes:
        assert block.seek(k, t) == bisect_left(order, (k, -t))


def probes(entries: list[Entry], key: bytes, target: int) -> list[tuple[bytes, int]]:
    """(key, target) pairs that hit every version, fall between versions, and miss."""
    out = [(key, target), (key, (1 << 64) - 1)]
    for k, t, _ in entries:
        out += [(k, t), (k, t + 1), (k, t - 1), (k, (1 << 64) - 1), (k + b"\x00", t)]
    return out


@given(
    sorted_entries(),
    st.binary(max_size=12),
    st.integers(0, (1 << 64) - 1),
    st.integers(1, 1 << 64),
    st.sampled_from([0.05, 0.5, 1.0, 8.0]),
)
@settings(max_examples=150)
def test_hash_lookup_agrees_with_binary_search(
    entries: list[Entry], key: bytes, target: int, hash_range: int, ratio: float
) -> None:
    # A small hash range or a high utilization ratio (few buckets) forces shared buckets;
    # a low one leaves most buckets empty.
    hash_of = {k: (0, key_hash(k)[1] % hash_range) for k, _, _ in entries}
    hashed = build(entries, hash_of, ratio)
    assert hashed.num_buckets == num_buckets(len(hash_of), ratio) > 0
    plain = without_hash_index(hashed)
    assert plain.entries() == hashed.entries() == entries
    for k, t in probes(entries, key, target):
        h = hash_of.get(k, (0, key_hash(k)[1] % hash_range))
        expect = expected_get(entries, k, t)
        assert hashed.get(k, h, t) == expect
        assert plain.get(k, h, t) == expect


@st.composite
def long_blocks(draw: st.DrawFn) -> list[Entry]:
    """Blocks around the byte limit: about 254 keys, some with many versions, so that the last
    key's first version lies on either side of entry MAX_HASHED_ENTRY."""
    nkeys = draw(st.integers(MAX_HASHED_ENTRY - 3, MAX_HASHED_ENTRY + 3))
    many = draw(st.sets(st.integers(0, nkeys - 1), max_size=3))
    out: list[Entry] = []
    for i in range(nkeys):
        versions = 5 if i in many else 1
        out += [(b"%04d" % i, 100 - v, b"v%d" % v) for v in range(versions)]
    return out


@given(long_blocks(), st.integers(95, 101))
@settings(max_examples=40)
def test_byte_limit_decides_whether_a_block_has_a_hash_index(entries: list[Entry], target: int) -> None:
    block = build(entries)
    keys = sorted({k for k, _, _ in entries})
    last_first = next(i for i, e in enumerate(entries) if e[0] == keys[-1])
    assert (block.num_buckets > 0) == (last_first <= MAX_HASHED_ENTRY)
    if block.num_buckets:
        assert block.num_buckets == num_buckets(len(keys))
    for k in [*keys, b"", b"9999", keys[0] + b"\x00"]:
        assert block.get(k, key_hash(k), target) == expected_get(entries, k, target)


def test_empty_key_and_bucket_values() -> None:
    entries = [(b"", 9, b"e"), (b"", 8, b"f"), (b"a", 7, b"x"), (b"b", 6, b""), (b"c", 5, b"y")]
    # Keys "" and "a" share bucket 0; "b" has bucket 1 and "c" bucket 2 to itself.
    hash_of = {b"": (0, 0), b"a": (0, 10), b"b": (0, 11), b"c": (0, 12)}
    block = build(entries, hash_of, 4 / 10)
    assert block.num_buckets == 10
    buckets = block.data[block.buckets_at : block.buckets_at + 10]
    assert buckets == bytes([HASH_COLLISION, 3, 4] + [HASH_EMPTY] * 7)
    assert block.get(b"", (0, 0), 100) == (9, b"e")
    assert block.get(b"", (0, 0), 8) == (8, b"f")
    assert block.get(b"", (0, 0), 7) is True
    assert block.get(b"b", (0, 1), 100) == (6, b"")
    assert block.get(b"c", (0, 2), 4) is True
    assert block.get(b"d", (0, 2), 100) is False  # bucket of "c": another key
    assert block.get(b"d", (0, 3), 100) is False  # empty bucket


def test_builder_resets_after_finish() -> None:
    b = BlockBuilder()
    b.add(b"a", 1, b"x", key_hash(b"a"))
    first = b.finish()
    assert b.count == 0
    b.add(b"a", 1, b"x", key_hash(b"a"))
    assert b.finish() == first


@pytest.mark.parametrize("versions", [1, 3])
@pytest.mark.parametrize("n", [1, 10, MAX_HASHED_ENTRY, 300])
def test_size_is_exact(n: int, versions: int) -> None:
    b = BlockBuilder()
    for i in range(n):
        key = b"k%d" % i
        for v in range(versions):
            size = b.add(key, 10 - v, b"v" * i, key_hash(key))
            assert size == b.size()
    expect = b.size()
    assert len(b.finish()) == expect


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x00\x00",
        b"\x00\x00\x00\x00\x00",
        struct.pack("<HI", 0, 0),  # no entries
        struct.pack("<HI", 0, 1),  # one entry, no room for it
        b"\x00" * 16 + struct.pack("<IHI", 0, 0, 0xFFFFFFFF),  # count far beyond the block
        ENTRY_HEADER.pack(1, 1, 0) + b"ab" + struct.pack("<IHI", 5, 0, 1),  # first offset is not 0
        ENTRY_HEADER.pack(1, 1, 0) + b"ab" + struct.pack("<I", 0) + b"\x00" + struct.pack("<HI", 2, 1),  # buckets
        ENTRY_HEADER.pack(1, 1, 0) + b"ab" + struct.pack("<I", 0) + struct.pack("<HI", 0xFFFF, 1),  # bucket count
    ],
)
def test_malformed_structure_is_corruption(data: bytes) -> None:
    with pytest.raises(CorruptionError):
        Block(data)


def test_forged_lengths_are_corruption_not_struct_error() -> None:
    # A block whose checksum would pass but whose entry claims a huge key.
    good = build([(b"a", 5, b"x"), (b"b", 4, b"y")])
    data = bytearray(good.data)
    struct.pack_into("<I", data, 0, 1 << 30)
    block = Block(bytes(data))
    with pytest.raises(CorruptionError):
        block.entries()
    for probe in (block, without_hash_index(block)):
        for key in (b"a", probe.data[16 : 16 + (1 << 30)]):  # the second matches the forged key_len
            with pytest.raises(CorruptionError):
                probe.get(key, key_hash(b"a"), 10)
    # An offset that points past the entries.
    data = bytearray(good.data)
    struct.pack_into("<I", data, good.limit, good.limit - 1)
    with pytest.raises(CorruptionError):
        Block(bytes(data))


@given(st.binary(max_size=200), st.binary(max_size=8), st.integers(0, (1 << 64) - 1))
def test_arbitrary_bytes_never_raise_another_error(data: bytes, key: bytes, trailer: int) -> None:
    try:
        block = Block(data)
        block.seek(key, trailer)
        block.get(key, key_hash(key), trailer)
        block.entries()
    except CorruptionError:
        pass


@pytest.mark.parametrize("value", range(2, MAX_HASHED_ENTRY + 1))
def test_forged_bucket_past_the_entries_is_corruption(value: int) -> None:
    block = build([(b"a", 5, b"x"), (b"b", 4, b"y")])
    bucket = block.buckets_at + key_hash(b"a")[1] % block.num_buckets
    data = bytearray(block.data)
    data[bucket] = value
    forged = Block(bytes(data))  # construction does not read the buckets; a lookup checks the one it uses
    with pytest.raises(CorruptionError, match=f"entry {value} of 2"):
        forged.get(b"a", key_hash(b"a"), 10)


def test_a_forged_offset_array_fails_every_read_that_uses_it() -> None:
    # Entry 3's offset points at entry 4; the entries themselves are intact (a resealed block).
    entries: list[Entry] = [(bytes([97 + i]), 10 - i, b"value %d" % i) for i in range(6)]
    block = build(entries)
    data = bytearray(block.data)
    struct.pack_into("<I", data, block.limit + 12, block.offsets[4])
    forged = Block(bytes(data))
    # A whole-block scan walks the entries by their own lengths and never reads the array ...
    assert forged.entries() == entries
    # ... the reads that do read it check each entry they decode against it.
    with pytest.raises(CorruptionError, match="does not start where"):
        list(forged.versions(0, forged.count))
    for i in (2, 3):  # entry 2 now ends short of the next offset; entry 3 starts at entry 4
        key = entries[i][0]
        for probe in (forged, without_hash_index(forged)):
            with pytest.raises(CorruptionError, match="does not end where"):
                probe.get(key, key_hash(key), 10)


def test_bucket_counts_that_do_not_fit_are_corruption() -> None:
    block = build([(b"a", 5, b"x"), (b"b", 4, b"y")])
    body = block.data[: -BLOCK_FOOTER.size]
    with pytest.raises(CorruptionError, match="cannot hold"):
        Block(body + BLOCK_FOOTER.pack(0xFFFF, 2))
    # A count a little too large moves the offset array onto the entries: caught at once or by a scan.
    for buckets in range(block.num_buckets + 1, len(body)):
        with pytest.raises(CorruptionError):
            Block(body + BLOCK_FOOTER.pack(buckets, 2)).entries()
