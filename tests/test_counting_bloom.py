"""Tests of minilsm.counting_bloom: removal never hides a present key, saturation, shared probes, serialization."""

from __future__ import annotations

import struct
from collections import Counter

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from minilsm.bloom import SERIALIZED_OVERHEAD, BloomFilter, key_hash, probe_positions
from minilsm.counting_bloom import COUNTER_MAX, CountingBloomFilter
from minilsm.errors import CorruptionError

# Few distinct keys and tiny filters, so that keys share counters and duplicates saturate them.
small_keys = st.sampled_from([b"k%d" % i for i in range(12)])
operations = st.lists(st.tuples(st.booleans(), small_keys), max_size=300)
shapes = st.one_of(
    st.tuples(st.integers(1, 64), st.integers(1, 30)),  # tiny: counters shared and saturated
    st.tuples(st.integers(64, 2000), st.integers(1, 12)),
)


@given(ops=operations, shape=shapes)
def test_adds_and_removes_never_hide_a_present_key(ops: list[tuple[bool, bytes]], shape: tuple[int, int]) -> None:
    f = CountingBloomFilter(*shape)
    present: Counter[bytes] = Counter()
    for is_add, key in ops:
        if is_add or not present[key]:  # removing a key not present is the caller's error: the model never does
            f.add(key)
            present[key] += 1
        else:
            f.remove(key)
            present[key] -= 1
        assert all(f.may_contain(k) for k in +present), (is_add, key)
        assert f.num_keys == present.total()
    assert all(f.to_bloom().may_contain(k) for k in +present)


@given(key=small_keys, times=st.integers(COUNTER_MAX, 3 * COUNTER_MAX), others=st.lists(small_keys, max_size=20))
def test_saturated_counters_never_wrap_or_decrease(key: bytes, times: int, others: list[bytes]) -> None:
    f = CountingBloomFilter(64, 4)
    for _ in range(times):
        f.add(key)
    positions = probe_positions(key_hash(key), 64, 4)
    assert all(f.counter(p) == COUNTER_MAX for p in positions)
    assert f.saturated() == len(set(positions))
    for other in others:
        f.add(other)
    for other in others:
        f.remove(other)
    for _ in range(times):
        f.remove(key)
    # The true count is unknown once saturated, so the counters stay and the key stays "maybe".
    assert all(f.counter(p) == COUNTER_MAX for p in positions)
    assert key in f


def test_counters_count_up_to_saturation_and_back() -> None:
    f = CountingBloomFilter(1000, 1)  # k = 1: one counter per key, easy to watch
    (pos,) = probe_positions(key_hash(b"a"), 1000, 1)
    for expected in range(1, COUNTER_MAX):
        f.add(b"a")
        assert f.counter(pos) == expected
    for expected in range(COUNTER_MAX - 2, -1, -1):
        f.remove(b"a")
        assert f.counter(pos) == expected
    assert b"a" not in f
    assert f == CountingBloomFilter(1000, 1)


@given(keys=st.lists(st.binary(max_size=16), max_size=100), shape=shapes)
def test_to_bloom_is_the_plain_filter_of_the_same_keys(keys: list[bytes], shape: tuple[int, int]) -> None:
    # Same probe positions as BloomFilter: only adding gives exactly the plain filter, bit for bit.
    c, b = CountingBloomFilter(*shape), BloomFilter(*shape)
    for key in keys:
        c.add(key)
        b.add(key)
    assert c.to_bloom() == b
    assert c.to_bloom().num_keys == len(keys)
    assert all(c.may_contain_hash(key_hash(key)) for key in keys)


@given(ops=operations, m=st.integers(1, 300), k=st.integers(1, 8))
def test_to_bloom_sets_exactly_the_non_zero_counters(ops: list[tuple[bool, bytes]], m: int, k: int) -> None:
    f = CountingBloomFilter(m, k)
    present: Counter[bytes] = Counter()
    for is_add, key in ops:
        if is_add or not present[key]:
            f.add(key)
            present[key] += 1
        else:
            f.remove(key)
            present[key] -= 1
    bits = f.to_bloom().to_bytes()[24:-8]
    assert [bool(bits[p >> 3] >> (p & 7) & 1) for p in range(m)] == [f.counter(p) > 0 for p in range(m)]


def test_removing_a_certainly_absent_key_is_refused_and_changes_nothing() -> None:
    f = CountingBloomFilter.for_keys(100, 10)
    f.add(b"present")
    before = f.to_bytes()
    with pytest.raises(KeyError):
        f.remove(b"never added")
    assert f.to_bytes() == before


def test_removing_a_never_added_false_positive_hides_other_keys() -> None:
    # The documented hazard: a never-added key whose counters are all shared passes the
    # KeyError guard, and its removal takes counts that belonged to a present key.
    f = CountingBloomFilter(64, 1)
    (target,) = probe_positions(key_hash(b"present"), 64, 1)
    impostor = next(
        key
        for key in (struct.pack("<Q", i) for i in range(10_000))
        if probe_positions(key_hash(key), 64, 1) == [target]
    )
    f.add(b"present")
    f.remove(impostor)
    assert b"present" not in f


def test_no_filter_says_maybe_and_counts_keys() -> None:
    f = CountingBloomFilter.for_keys(100, 0)
    assert (f.num_bits, f.k, f.nbytes) == (0, 0, 0)
    f.add(b"a")
    f.remove(b"b")  # nothing to check against: accepted
    assert b"anything" in f
    assert f.to_bloom() == BloomFilter.for_keys(100, 0)


@given(n=st.integers(0, 10_000), bits_per_key=st.floats(min_value=0, max_value=24))
def test_sizing_and_memory_match_the_plain_filter(n: int, bits_per_key: float) -> None:
    c, b = CountingBloomFilter.for_keys(n, bits_per_key), BloomFilter.for_keys(n, bits_per_key)
    assert (c.num_bits, c.k) == (b.num_bits, b.k)
    assert c.nbytes == (c.num_bits + 1) // 2
    if c.num_bits % 8 == 0:
        assert c.nbytes == 4 * b.nbytes  # the documented cost: 4 bits per position instead of 1


def test_for_fpr_matches_the_plain_filter() -> None:
    c, b = CountingBloomFilter.for_fpr(1000, 0.01), BloomFilter.for_fpr(1000, 0.01)
    assert (c.num_bits, c.k) == (b.num_bits, b.k)
    assert c.expected_fpr(1000) == b.expected_fpr(1000)


@pytest.mark.parametrize(("num_bits", "k"), [(-1, 1), (64, 0), (64, 31)])
def test_bad_shapes_are_refused(num_bits: int, k: int) -> None:
    with pytest.raises(ValueError):
        CountingBloomFilter(num_bits, k)


# -- serialization ---------------------------------------------------------------


@given(ops=operations, shape=st.one_of(shapes, st.just((0, 0))))
def test_serialization_round_trip(ops: list[tuple[bool, bytes]], shape: tuple[int, int]) -> None:
    f = CountingBloomFilter(*shape)
    for _, key in ops:
        f.add(key)
    data = f.to_bytes()
    assert len(data) == SERIALIZED_OVERHEAD + f.nbytes
    g = CountingBloomFilter.from_bytes(memoryview(data))
    assert g == f
    assert g.num_keys == f.num_keys


def sample() -> bytes:
    f = CountingBloomFilter(37, 3)  # odd m: the last byte holds one counter
    for i in range(20):
        f.add(b"%d" % (i % 7))
    return f.to_bytes()


def test_every_single_byte_flip_and_truncation_is_corruption() -> None:
    data = sample()
    for i in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[i] ^= mask
            with pytest.raises(CorruptionError):
                CountingBloomFilter.from_bytes(damaged)
    for end in range(len(data)):
        with pytest.raises(CorruptionError):
            CountingBloomFilter.from_bytes(data[:end])


@pytest.mark.parametrize(("width", "num_bits"), [(1, 37), (8, 37), (4, 36), (4, 39)], ids=str)
def test_forged_width_or_size_behind_a_valid_checksum_is_corruption(width: int, num_bits: int) -> None:
    data = sample()
    body = data[:7] + bytes([width]) + struct.pack("<Q", num_bits) + data[16:-8]
    with pytest.raises(CorruptionError):
        CountingBloomFilter.from_bytes(body + struct.pack("<Q", xxhash.xxh64_intdigest(body)))


def test_plain_and_counting_frames_are_not_confused() -> None:
    with pytest.raises(CorruptionError, match="magic"):
        BloomFilter.from_bytes(sample())
    with pytest.raises(CorruptionError, match="magic"):
        CountingBloomFilter.from_bytes(BloomFilter.for_keys(10, 10).to_bytes())
