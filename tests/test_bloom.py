"""Tests of minilsm.bloom: probe positions, sizing formulas, serialization, and the false-positive rate.

The rate tests use deterministic keys (struct-packed counters): present keys are
``pack("<QQ", tag, i)`` with tag >= 1 and absent keys ``pack("<QQ", 0, i)``, so
the two sets are disjoint by construction and every run sees the same filters.
"""

from __future__ import annotations

import functools
import hashlib
import math
import pathlib
import re
import struct
from collections import deque

import pytest
import xxhash
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minilsm.bloom import (
    MAX_K,
    SERIALIZED_OVERHEAD,
    BloomFilter,
    KeyHash,
    bits_per_key_for_fpr,
    expected_fpr,
    k_for_bits_per_key,
    key_hash,
    optimal_params,
    params_for_fpr,
    params_for_keys,
    probe_positions,
)
from minilsm.errors import CorruptionError

LN2 = math.log(2)
U64 = (1 << 64) - 1


def keys_of(tag: int, n: int) -> list[bytes]:
    return [struct.pack("<QQ", tag, i) for i in range(n)]


@functools.cache
def absent_hashes(n: int) -> list[KeyHash]:
    """Hashes of n keys that no test adds (tag 0), computed once per process."""
    return [key_hash(k) for k in keys_of(0, n)]


def filter_of(n: int, bits_per_key: float, tag: int = 1) -> BloomFilter:
    f = BloomFilter.for_keys(n, bits_per_key)
    for key in keys_of(tag, n):
        f.add(key)
    return f


def fp_rate(f: BloomFilter, probes: list[KeyHash]) -> float:
    return sum(map(f.may_contain_hash, probes)) / len(probes)


key_lists = st.lists(st.binary(max_size=24), max_size=150)
bits_per_keys = st.one_of(
    st.just(0.0),
    st.integers(min_value=0, max_value=24).map(float),
    st.floats(min_value=0.0, max_value=24.0, allow_nan=False),
)
u64s = st.integers(min_value=0, max_value=U64)


# -- the pinned format and probe positions -------------------------------------


@pytest.mark.parametrize(
    ("n", "bits_per_key", "num_bits", "k", "sha256"),
    [
        (10, 10, 100, 7, "791b4e127608e7ecdf3bded21009dfb286c8f377c480f372e64cedeaffff198b"),
        (100, 7.3, 730, 5, "671f7767c233bfd4d9f6436503406be73a8d11835a7903eed3f192861022ff86"),
        (1000, 3.1, 3100, 2, "13241e7965b851687f59ce97aa482bdf44331adbe167a5a81ca09190ab93028e"),
        (0, 0, 0, 0, "9be5d8d3f5bb33f712e6abd81ab5447efb27ca68bdbc78bdee598f4c15548015"),
    ],
)
def test_serialized_bytes_are_pinned(n: int, bits_per_key: float, num_bits: int, k: int, sha256: str) -> None:
    # SSTables embed these bytes: a change of hash, probe walk, sizing or layout must fail here first.
    f = BloomFilter.for_keys(n, bits_per_key)
    for i in range(n):
        f.add(b"key%d" % i)
    assert (f.num_bits, f.k) == (num_bits, k)
    assert hashlib.sha256(f.to_bytes()).hexdigest() == sha256


def test_serialized_layout_of_one_key() -> None:
    f = BloomFilter.for_keys(1, 10)
    f.add(b"minilsm")
    data = f.to_bytes()
    assert data[:4] == b"MLBF"
    assert data[4:8] == bytes([1, 2, 7, 0])  # version, hash scheme, k, reserved
    assert struct.unpack_from("<QQ", data, 8) == (64, 1)  # num_bits, num_keys
    assert data[24:32] == bytes.fromhex("0200040028212000")  # the 64-bit array
    assert struct.unpack_from("<Q", data, 32) == (xxhash.xxh64_intdigest(data[:32]),)
    assert len(data) == SERIALIZED_OVERHEAD + 8


@given(h1=u64s, h2=u64s, m=st.one_of(st.integers(1, 300), st.integers(1, 1 << 40)), k=st.integers(1, MAX_K))
def test_probe_positions_are_enhanced_double_hashing(h1: int, h2: int, m: int, k: int) -> None:
    # The closed form of the incremental walk: g_i = h1 + i*h2 + (i^3 - i)/6 (mod m).
    assert probe_positions((h1, h2), m, k) == [(h1 + i * h2 + (i**3 - i) // 6) % m for i in range(k)]


@given(st.binary(max_size=64))
def test_key_hash_is_the_two_halves_of_xxh3_128(key: bytes) -> None:
    h1, h2 = key_hash(key)
    digest = xxhash.xxh3_128_intdigest(key)
    assert (h1, h2) == (digest & U64, digest >> 64)  # low half, high half
    assert 0 <= h1 <= U64 and 0 <= h2 <= U64


@given(data=st.data(), h1=u64s, h2=u64s, m=st.integers(1, 200), k=st.integers(1, MAX_K))
def test_add_and_check_walk_probe_positions(data: st.DataObject, h1: int, h2: int, m: int, k: int) -> None:
    positions = probe_positions((h1, h2), m, k)
    f = BloomFilter(m, k)
    f.add_hash((h1, h2))
    array = f.to_bytes()[24:-8]
    assert {p for p in range(m) if array[p >> 3] >> (p & 7) & 1} == set(positions)
    # may_contain_hash walks the same positions inline: compare on an arbitrary bit array.
    bits = bytearray(data.draw(st.binary(min_size=(m + 7) // 8, max_size=(m + 7) // 8)))
    g = BloomFilter(m, k, bits)
    assert g.may_contain_hash((h1, h2)) == all(bits[p >> 3] >> (p & 7) & 1 for p in positions)


@given(hashes=st.lists(st.tuples(u64s, u64s), max_size=20), m=st.integers(0, 300), k=st.integers(1, MAX_K))
def test_add_hashes_is_add_hash_for_each(hashes: list[KeyHash], m: int, k: int) -> None:
    # The bulk add walks the probes inline: it must set exactly the bits, and count exactly the keys, of add_hash.
    one, bulk = BloomFilter(m, k), BloomFilter(m, k)
    for h in hashes:
        one.add_hash(h)
    bulk.add_hashes(iter(hashes))
    assert bulk == one and bulk.num_keys == one.num_keys == len(hashes)


@settings(max_examples=60, deadline=None)
@given(
    before=st.lists(st.tuples(u64s, u64s), max_size=10),
    hashes=st.lists(st.tuples(u64s, u64s), min_size=60, max_size=150),
    m=st.one_of(st.integers(1, 40), st.integers(41, 5000), st.just(1 << 16)),
    k=st.integers(1, MAX_K),
)
def test_add_hashes_in_lanes_is_add_hash_for_each(before: list[KeyHash], hashes: list[KeyHash], m: int, k: int) -> None:
    # Enough keys for the lane-parallel fill (and filters below its limit on m), added on top of bits
    # already set: the same bits and the same count as add_hash, one key at a time.
    one, bulk = BloomFilter(m, k), BloomFilter(m, k)
    for h in before:
        one.add_hash(h)
        bulk.add_hash(h)
    for h in hashes:
        one.add_hash(h)
    bulk.add_hashes(iter(hashes))
    assert bulk == one and bulk.num_keys == one.num_keys == len(before) + len(hashes)


# -- no false negatives ----------------------------------------------------------


@given(keys=key_lists, bits_per_key=bits_per_keys, sized_for=st.one_of(st.none(), st.integers(0, 300)))
@example(keys=[b"", b"a"], bits_per_key=0.0, sized_for=None)
@example(keys=[b"x"] * 40, bits_per_key=0.5, sized_for=1)
def test_no_false_negatives(keys: list[bytes], bits_per_key: float, sized_for: int | None) -> None:
    # Also for filters sized for fewer keys than they get (sized_for): overfull, never wrong.
    f = BloomFilter.for_keys(len(keys) if sized_for is None else sized_for, bits_per_key)
    for key in keys:
        f.add(key)
    assert all(f.may_contain(key) for key in keys)
    assert all(key in f for key in keys)
    assert all(f.may_contain_hash(key_hash(key)) for key in keys)
    assert f.num_keys == len(keys)


def test_zero_bits_per_key_is_no_filter() -> None:
    f = BloomFilter.for_keys(1000, 0)
    assert (f.num_bits, f.k, f.nbytes) == (0, 0, 0)
    assert b"never added" in f
    assert f.expected_fpr() == 1.0


# -- serialization ---------------------------------------------------------------


@given(keys=key_lists, bits_per_key=bits_per_keys)
def test_serialization_round_trip(keys: list[bytes], bits_per_key: float) -> None:
    f = BloomFilter.from_keys(keys, len(keys), bits_per_key)
    data = f.to_bytes()
    assert len(data) == SERIALIZED_OVERHEAD + f.nbytes
    for form in (data, bytearray(data), memoryview(data)):
        g = BloomFilter.from_bytes(form)
        assert g == f
        assert (g.num_bits, g.k, g.num_keys) == (f.num_bits, f.k, f.num_keys)
        assert all(key in g for key in keys)


SAMPLES = [filter_of(50, 10), filter_of(7, 3.3), filter_of(0, 0), filter_of(5, 0)]


@pytest.mark.parametrize("f", SAMPLES, ids=repr)
def test_every_single_byte_flip_is_corruption(f: BloomFilter) -> None:
    data = f.to_bytes()
    for i in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[i] ^= mask
            with pytest.raises(CorruptionError):
                BloomFilter.from_bytes(damaged)


@pytest.mark.parametrize("f", SAMPLES, ids=repr)
def test_every_truncation_and_extension_is_corruption(f: BloomFilter) -> None:
    data = f.to_bytes()
    for end in range(len(data)):
        with pytest.raises(CorruptionError):
            BloomFilter.from_bytes(data[:end])
    with pytest.raises(CorruptionError):
        BloomFilter.from_bytes(data + b"\0")


def forge(version: int = 1, scheme: int = 2, k: int = 7, num_bits: int = 64, num_keys: int = 1, size: int = 8) -> bytes:
    """A frame with a valid checksum around whatever header fields a forger chooses."""
    body = b"MLBF" + struct.pack("<BBBBQQ", version, scheme, k, 0, num_bits, num_keys) + bytes(size)
    return body + struct.pack("<Q", xxhash.xxh64_intdigest(body))


@pytest.mark.parametrize(
    "fields",
    [
        {"version": 2},
        {"scheme": 0},
        {"scheme": 1},  # plain double hashing: a different walk, never misread
        {"k": 0},
        {"k": MAX_K + 1},
        {"num_bits": 0, "size": 0},  # no bits, but k = 7
        {"num_bits": U64},  # a forged length must not allocate
        {"num_bits": 65},
        {"num_bits": 56},
    ],
    ids=str,
)
def test_forged_fields_behind_a_valid_checksum_are_corruption(fields: dict[str, int]) -> None:
    BloomFilter.from_bytes(forge())  # the unforged frame decodes
    with pytest.raises(CorruptionError):
        BloomFilter.from_bytes(forge(**fields))


@given(st.binary(max_size=80))
def test_random_bytes_are_corruption(data: bytes) -> None:
    with pytest.raises(CorruptionError):
        BloomFilter.from_bytes(data)


# -- union -----------------------------------------------------------------------


@given(a=key_lists, b=key_lists, bits_per_key=bits_per_keys)
def test_union_contains_both_sides(a: list[bytes], b: list[bytes], bits_per_key: float) -> None:
    n = len(a) + len(b)
    fa, fb = BloomFilter.from_keys(a, n, bits_per_key), BloomFilter.from_keys(b, n, bits_per_key)
    u = fa.union(fb)
    assert all(key in u for key in a + b)
    assert u.num_keys == n
    assert u == (fb | fa) == BloomFilter.from_keys(a + b, n, bits_per_key)


@pytest.mark.parametrize(("other_n", "other_bits_per_key"), [(20, 10), (10, 12), (10, 0)])
def test_union_of_different_parameters_is_refused(other_n: int, other_bits_per_key: float) -> None:
    with pytest.raises(ValueError, match="different parameters"):
        BloomFilter.for_keys(10, 10).union(BloomFilter.for_keys(other_n, other_bits_per_key))


def test_union_with_something_else_is_a_type_error() -> None:
    f = BloomFilter.for_keys(10, 10)
    with pytest.raises(TypeError):
        f.union(b"not a filter")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _ = f | 3  # type: ignore[operator]


# -- sizing formulas -------------------------------------------------------------


def test_seven_probes_at_ten_bits_per_key() -> None:
    assert k_for_bits_per_key(10) == 7
    assert BloomFilter.for_keys(1000, 10).k == 7
    assert [k_for_bits_per_key(b) for b in (1, 2, 4, 6, 8, 12, 16, 20)] == [1, 1, 3, 4, 6, 8, 11, 14]
    assert k_for_bits_per_key(0.1) == 1 and k_for_bits_per_key(1000) == MAX_K


@given(n=st.integers(0, 10**9), bits_per_key=st.floats(min_value=1e-9, max_value=64.0))
def test_num_bits_is_max_64_ceil_n_times_bits_per_key(n: int, bits_per_key: float) -> None:
    assert params_for_keys(n, bits_per_key) == (
        max(64, math.ceil(n * bits_per_key)),
        max(1, min(MAX_K, round(bits_per_key * LN2))),
    )
    if n <= 10_000:  # build only filters that fit in memory comfortably
        f = BloomFilter.for_keys(n, bits_per_key)
        assert (f.num_bits, f.k) == params_for_keys(n, bits_per_key)
        assert f.nbytes == (f.num_bits + 7) // 8


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_bad_bits_per_key_is_refused(bad: float) -> None:
    with pytest.raises(ValueError):
        BloomFilter.for_keys(10, bad)


@given(m=st.integers(1, 10**9), n=st.integers(1, 10**8), k=st.integers(1, MAX_K))
def test_expected_fpr_formula(m: int, n: int, k: int) -> None:
    assert expected_fpr(m, n, k) == pytest.approx((1 - math.exp(-k * n / m)) ** k, rel=1e-12, abs=1e-300)
    assert expected_fpr(m, n, k) <= expected_fpr(m, n + 1, k)


def test_expected_fpr_edges_and_a_known_value() -> None:
    assert expected_fpr(0, 10, 7) == 1.0
    assert expected_fpr(100, 0, 7) == 0.0
    assert expected_fpr(10_000, 1000, 7) == pytest.approx(0.008194, rel=1e-3)


@given(n=st.integers(1, 10**8), p=st.floats(min_value=1e-12, max_value=0.999))
def test_optimal_params_formula(n: int, p: float) -> None:
    m, k = optimal_params(n, p)
    assert m == math.ceil(-n * math.log(p) / LN2**2)
    assert k == max(1, min(MAX_K, math.ceil(m / n * LN2)))
    if 1e-9 <= p <= 0.1:
        # An integer k at or just above the optimum m/n ln 2 costs at most a few percent over p.
        assert expected_fpr(m, n, k) <= 1.05 * p
    assert params_for_fpr(n, p) == (max(64, m), k)


def test_for_fpr_builds_the_optimal_filter() -> None:
    f = BloomFilter.for_fpr(1000, 0.01)
    assert (f.num_bits, f.k) == (9586, 7)
    assert f.expected_fpr(1000) == pytest.approx(0.01, rel=0.01)


@given(p=st.floats(min_value=1e-15, max_value=0.999))
def test_bits_per_key_for_fpr_formula(p: float) -> None:
    b = bits_per_key_for_fpr(p)
    assert b == pytest.approx(-math.log(p) / LN2**2)
    # At the real-valued optimum k = b ln 2 half the bits are set, so the rate is 2^-k = p.
    assert 0.5 ** (b * LN2) == pytest.approx(p, rel=1e-9)


def test_bits_per_key_for_one_percent() -> None:
    assert bits_per_key_for_fpr(0.01) == pytest.approx(9.585, abs=1e-3)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 2.0])
def test_rates_outside_zero_one_are_refused(bad: float) -> None:
    with pytest.raises(ValueError):
        bits_per_key_for_fpr(bad)
    with pytest.raises(ValueError):
        optimal_params(10, bad)
    with pytest.raises(ValueError):
        optimal_params(0, 0.01)


# -- measured false-positive rate against theory ----------------------------------

THEORY_KEYS = 20_000
THEORY_PROBES = 400_000


@pytest.mark.parametrize("bits_per_key", [4, 6, 8, 10, 12, 16])
def test_false_positive_rate_matches_theory(bits_per_key: int) -> None:
    f = filter_of(THEORY_KEYS, bits_per_key)
    p = f.expected_fpr()
    measured = fp_rate(f, absent_hashes(THEORY_PROBES))
    # Given the filter, each absent probe is a Bernoulli trial, so the false-positive
    # count is binomial: 5 standard deviations, sqrt(p(1-p)/N), leave a 1-in-1.7-million
    # chance of a spurious failure.  The slack of 3% of p is for the model, not the
    # dice: the formula ignores that this particular filter's fill ratio scatters
    # around its mean (at 4 bits/key, k = 3, that moves the rate by about 0.6% of p,
    # one standard deviation) and it slightly underestimates for small m (double-hashing
    # probe collisions and the (1 - 1/m)^kn vs e^(-kn/m) gap, both O(k^2 / m), under
    # 0.1% of p at m >= 80,000 bits).  Over 12 key sets per bits/key the largest
    # deviation seen was 3 standard deviations.
    sigma = math.sqrt(p * (1 - p) / THEORY_PROBES)
    assert abs(measured - p) <= 5 * sigma + 0.03 * p, (measured, p)
    # Half the bits set near the optimal k, as the formula 1 - e^(-kn/m) says.
    assert f.fill_ratio() == pytest.approx(1 - math.exp(-f.k * THEORY_KEYS / f.num_bits), rel=0.01)


SIZE_PROBES = 10_000
SWEEP = [*range(1, 101), *sorted({round(100 * 1.2**i) for i in range(26)} - {100}), 10_000]


def test_ten_bits_per_key_stays_under_two_percent_at_every_size() -> None:
    # The rate of a filter size is what the design controls: the average over key sets
    # of that size.  One tiny filter's rate varies with its keys by chance (a 70-bit
    # filter with 38 bits set instead of 35 measures 2.5% instead of 1.1%), so each size
    # below 100 keys averages 4 key sets (40,000 probes): at a true rate of 1.1% that
    # measures within about 0.1 points (one standard deviation), far from the 2% line.
    #
    # This bound is what chose the probe walk.  Plain double hashing, (h1 + i*h2) mod m,
    # measured 2.5-2.7% at 7-9 keys, since in a 64-100 bit filter an absent key sharing a
    # present key's step and landing on its arithmetic progression finds most bits set;
    # the cubic term of enhanced double hashing brings the worst size to about 1.1%.
    probes = absent_hashes(SIZE_PROBES)
    worst = 0.0
    for n in SWEEP:
        key_sets = 4 if n < 100 else 1
        rates = [fp_rate(filter_of(n, 10, tag=n * 1000 + r), probes) for r in range(key_sets)]
        rate = sum(rates) / len(rates)
        worst = max(worst, rate)
        assert rate <= 0.02, (n, rate)
    assert worst > 0.005  # the filters really were probed at their design rate, not all-negative


def test_near_theory_at_a_million_keys() -> None:
    n, probes = 1_000_000, absent_hashes(THEORY_PROBES)
    f = BloomFilter.for_keys(n, 10)
    deque(map(f.add, keys_of(1, n)), maxlen=0)
    p = f.expected_fpr()
    assert (f.num_bits, f.k, f.nbytes) == (10_000_000, 7, 1_250_000)
    # The same binomial bound as above; at m = 10^7 bits the model error is negligible.
    sigma = math.sqrt(p * (1 - p) / len(probes))
    assert abs(fp_rate(f, probes) - p) <= 5 * sigma + 0.03 * p


def test_the_rate_docs_bloom_md_quotes_is_the_one_the_filter_gives() -> None:
    # docs/BLOOM.md quotes bench.bloom_bench at 10 bits per key over its fixed keys; the measured rate involves
    # no timing, so it must be exactly what the filter answers for those keys today.
    doc = (pathlib.Path(__file__).parent.parent / "docs" / "BLOOM.md").read_text()
    row = re.search(r"\| minilsm `BloomFilter` \| 7 \| 0\.8194% \| ([0-9.]+)% \|", doc)
    assert row is not None
    f = BloomFilter.for_keys(100_000, 10)
    f.add_hashes([key_hash(b"key:%012d" % i) for i in range(100_000)])
    false_positives = sum(f.may_contain_hash(key_hash(b"absent:%012d" % i)) for i in range(200_000))
    assert row.group(1) == f"{100 * false_positives / 200_000:.4g}"
