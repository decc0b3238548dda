"""Data blocks (minilsm/sstable/block.py): encoding round trip, binary search, and malformed input."""

from __future__ import annotations

import struct
from bisect import bisect_left

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minilsm.errors import CorruptionError
from minilsm.sstable.block import ENTRY_HEADER, Block, BlockBuilder

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


def build(entries: list[Entry]) -> Block:
    b = BlockBuilder()
    for e in entries:
        b.add(*e)
    return Block(b.finish())


def internal(e: Entry) -> tuple[bytes, int]:
    return e[0], -e[1]


@given(sorted_entries())
def test_entries_round_trip(entries: list[Entry]) -> None:
    block = build(entries)
    assert block.count == len(entries)
    assert block.entries() == entries
    for i, (key, _, _) in enumerate(entries):
        assert block.key_at(i) == key


@given(sorted_entries(), st.binary(max_size=12), st.integers(0, (1 << 64) - 1))
def test_seek_matches_bisect_over_internal_order(entries: list[Entry], key: bytes, trailer: int) -> None:
    block = build(entries)
    order = [internal(e) for e in entries]
    probes = [(key, trailer)] + [(k, t) for k, t, _ in entries] + [(k, t + 1) for k, t, _ in entries]
    for k, t in probes:
        expect = bisect_left(order, (k, -t))
        pos = block.seek(k, t)
        assert pos == expect
        found = block.version_of(pos, k)
        if expect < len(entries) and entries[expect][0] == k:
            assert found == (entries[expect][1], entries[expect][2])
        else:
            assert found is None


def test_builder_resets_after_finish() -> None:
    b = BlockBuilder()
    b.add(b"a", 1, b"x")
    first = b.finish()
    assert b.count == 0
    b.add(b"a", 1, b"x")
    assert b.finish() == first


def test_size_is_exact() -> None:
    b = BlockBuilder()
    for i in range(10):
        b.add(b"k%d" % i, i, b"v" * i)
    expect = b.size()
    assert len(b.finish()) == expect


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x00\x00",
        struct.pack("<I", 0),  # no entries
        struct.pack("<I", 1),  # one entry, no room for it
        b"\x00" * 16 + struct.pack("<II", 0, 0xFFFFFFFF),  # count far beyond the block
        ENTRY_HEADER.pack(1, 1, 0) + b"ab" + struct.pack("<II", 5, 1),  # first offset is not 0
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
    with pytest.raises(CorruptionError):
        block.version_of(0, data[16 : 16 + (1 << 30)])
    # An offset that points past the entries.
    data = bytearray(good.data)
    struct.pack_into("<I", data, good.limit, good.limit - 1)
    with pytest.raises(CorruptionError):
        Block(bytes(data))


@given(st.binary(max_size=200), st.binary(max_size=8), st.integers(0, (1 << 64) - 1))
def test_arbitrary_bytes_never_raise_another_error(data: bytes, key: bytes, trailer: int) -> None:
    try:
        block = Block(data)
        pos = block.seek(key, trailer)
        block.version_of(pos, key)
        if pos:
            block.key_at(pos - 1)
        block.entries()
    except CorruptionError:
        pass
