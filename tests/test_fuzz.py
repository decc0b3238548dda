"""Fuzzing every reader of an on-disk structure: only `CorruptionError`, no hang, no huge allocation.

The targets live in fuzz/targets.py, shared with the atheris harness
(fuzz/run.py, for long runs; see fuzz/README.md).  Here hypothesis feeds each
target raw bytes and mutations of a valid sample: flipped, overwritten,
inserted and deleted bytes, truncations, and length fields forged to huge
values.  ``*_resealed`` targets recompute the checksums after mutating, so the
decoders behind them get exercised too.  Every example must finish within
`TIME_LIMIT` and allocate at most a small multiple of its input size (traced
with tracemalloc), so a forged length can never turn into a huge allocation.

``MINILSM_FUZZ_EXAMPLES`` sets the examples per target and strategy (CI: 60).
"""

from __future__ import annotations

import os
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz"))
from targets import SAMPLES, TARGETS, run_one

EXAMPLES = int(os.environ.get("MINILSM_FUZZ_EXAMPLES", "60"))
TIME_LIMIT = 2.0
FORGED = [0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFFFFFFFFFF, 1 << 40, 1 << 31, 65536, 4097, 0]

INPUTS: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()


@st.composite
def mutated(draw: st.DrawFn, sample: bytes) -> bytes:
    """`sample` with 1..8 random mutations."""
    data = bytearray(sample)
    for _ in range(draw(st.integers(1, 8))):
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        op = draw(st.sampled_from(["flip", "set", "forge32", "forge64", "insert", "delete", "truncate"]))
        if not data and op != "insert":
            continue
        if op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[pos] = draw(st.integers(0, 255))
        elif op in ("forge32", "forge64"):
            width = 4 if op == "forge32" else 8
            value = draw(st.sampled_from(FORGED)) & ((1 << 8 * width) - 1)
            data[pos : pos + width] = value.to_bytes(width, "little")
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        else:
            del data[pos:]
    return bytes(data)


@pytest.fixture(scope="module", autouse=True)
def traced() -> Iterator[None]:
    tracemalloc.start()
    yield
    tracemalloc.stop()
    total = sum(INPUTS.values())
    print(f"\nfuzz inputs: {total} ({dict(INPUTS)}); outcomes: {dict(OUTCOMES)}")


def check(name: str, data: bytes) -> None:
    """Run the target: it may read the data or raise CorruptionError; in bounded time and memory."""
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    start = time.monotonic()
    ok = run_one(name, data)  # any other exception fails the test
    elapsed = time.monotonic() - start
    peak = tracemalloc.get_traced_memory()[1] - base
    assert elapsed < TIME_LIMIT, f"{name}: {elapsed:.1f}s on {len(data)} bytes"
    assert peak < 64 * len(data) + (4 << 20), f"{name}: allocated {peak} bytes for a {len(data)}-byte input"
    INPUTS[name] += 1
    OUTCOMES["read" if ok else "CorruptionError"] += 1


FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_samples_are_valid(name: str) -> None:
    """The seeds themselves read cleanly (else every mutation would be rejected early, testing little)."""
    assert run_one(name, SAMPLES[name]())


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_random_bytes(name: str) -> None:
    @FUZZ
    @given(st.binary(max_size=4096))
    def run(data: bytes) -> None:
        check(name, data)

    run()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_mutated_samples(name: str) -> None:
    sample = SAMPLES[name]()

    @FUZZ
    @given(mutated(sample))
    def run(data: bytes) -> None:
        check(name, data)

    run()


@pytest.mark.parametrize(
    ("name", "step"),
    [("table_resealed", 23), ("log_resealed", 1), ("manifest_resealed", 1), ("block", 1), ("index", 1)],
)
def test_every_single_byte_flip_of_a_sample(name: str, step: int) -> None:
    """Each byte (or every `step`-th: test_corruption.py flips every byte of real tables) flipped in turn."""
    sample = SAMPLES[name]()
    for pos in range(0, len(sample), step):
        data = bytearray(sample)
        data[pos] ^= 0xFF
        check(name, bytes(data))


@pytest.mark.parametrize(
    ("name", "step"), [("table", 7), ("log", 1), ("manifest", 1), ("bloom", 1), ("counting_bloom", 1), ("batch", 1)]
)
def test_every_truncation_of_a_sample(name: str, step: int) -> None:
    sample = SAMPLES[name]()
    for n in range(0, len(sample), step):
        check(name, sample[:n])
