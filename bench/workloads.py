"""db_bench's workloads, run the same way against any `Store` of bench/peers.py.

Keys and values.  Key i is ``b"%016d" % (2 * i)`` for i in [0, num): 16 bytes,
even numbers only, so that ``b"%016d" % (2 * i + 1)`` is a key that is absent
yet sorts between two present ones.  Such a key lies inside the key range of
whichever tables hold its neighbours, so the range check cannot rule it out
and only a Bloom filter can (`readmissing`).  Values are 100 bytes drawn from a
pool of 1,024 random ones (random bytes: nothing for a compressor to gain).

Timing.  Operations run in chunks of up to 1,000 whose keys are built before
the clock starts, so key formatting is never timed.  Most chunks are timed as
a whole, ``deque(map(op, keys), maxlen=0)``, and give the throughput (ops/s);
one chunk in eight instead times each operation alone with two
``perf_counter_ns`` calls and gives the latency percentiles.  Those two sets
are disjoint: throughput carries about 10 ns per op of loop overhead, latency
about `timer_overhead_ns` (measured and reported) of clock overhead, and
neither includes building keys.  Write latencies include any stall while the
store waits for a flush or compaction, as a caller would see them.

Workloads, in the order `run.py` runs them (as in db_bench):

=================  ==============================================================
fillseq            num puts in key order into an empty store
fillrandom         num puts, each key once, in random order, into an empty store
overwrite          num puts of random existing keys (with replacement)
readrandom         reads of random present keys, after close, reopen and settle
readmissing        reads of random absent keys that sort inside the data
readhot            reads of random keys among the first 1% of the key space
seekrandom         seek to a random key, then read the next 10 pairs
scan               one full ordered scan (throughput in keys/s)
readwhilewriting   readrandom in one thread while another thread overwrites
deleterandom       deletes of random keys (with replacement)
=================  ==============================================================
"""

from __future__ import annotations

import math
import random
import threading
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import starmap
from time import perf_counter, perf_counter_ns
from typing import Any

from bench.peers import Store

KEY_FORMAT = b"%016d"
VALUE_POOL = 1024
MAX_CHUNK = 1000
SAMPLE_EVERY = 8
SEEK_NEXTS = 10
HOT_FRACTION = 0.01


def present_key(i: int) -> bytes:
    """Key number i of the data set (0 <= i < num)."""
    return KEY_FORMAT % (2 * i)


def missing_key(i: int) -> bytes:
    """An absent key sorting just after present key i."""
    return KEY_FORMAT % (2 * i + 1)


@dataclass(frozen=True)
class Params:
    num: int
    reads: int
    seeks: int
    value_size: int = 100
    seed: int = 301
    budget: float | None = None
    """Seconds after which a workload other than a fill stops early (its rate is then over the ops done)."""


@dataclass
class Result:
    """One workload on one store.  Throughput and latency come from disjoint chunks (see the module docstring)."""

    workload: str
    ops: int
    """Operations run in all (timed in bulk or one by one)."""
    ops_per_sec: float | None
    p50_us: float | None
    p99_us: float | None
    samples: int
    """Operations timed one by one (the latency sample)."""
    unit: str = "op"
    extra: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "ops": self.ops,
            "ops_per_sec": self.ops_per_sec,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "samples": self.samples,
            "unit": self.unit,
            "extra": self.extra,
            "skipped": self.skipped,
        }


def percentile(sorted_ns: list[int], q: float) -> float | None:
    """The q-quantile (nearest rank: the ceil(q * n)-th smallest) of sorted nanosecond samples, in microseconds."""
    if not sorted_ns:
        return None
    # round() would round q * n = x.5 to the even neighbour, one rank low half the time (the median of 5 samples
    # came out as the 2nd); the tiny slack keeps 0.99 * 100 = 99.00000000000001 at rank 99.
    i = min(len(sorted_ns) - 1, max(0, math.ceil(q * len(sorted_ns) - 1e-9) - 1))
    return sorted_ns[i] / 1000


def timer_overhead_ns() -> float:
    """What the per-op latency loop adds to an op: the median of timing a call that does nothing."""
    lat: list[int] = []
    _each(lambda k: None, [b""] * 20_000, lat)
    lat.sort()
    return float(lat[len(lat) // 2])


# -- the timing loops ---------------------------------------------------------------


def _bulk(op: Callable[[Any], object], args: list[Any]) -> None:
    deque(map(op, args), maxlen=0)


def _bulk_pairs(op: Callable[[bytes, bytes], object], pairs: list[tuple[bytes, bytes]]) -> None:
    deque(starmap(op, pairs), maxlen=0)


def _each(op: Callable[[Any], object], args: list[Any], lat: list[int]) -> int:
    """Time each call; returns how many returned something other than None (found keys)."""
    clock = perf_counter_ns
    append = lat.append
    found = 0
    for a in args:
        t = clock()
        r = op(a)
        append(clock() - t)
        if r is not None:
            found += 1
    return found


def _each_pairs(op: Callable[[bytes, bytes], object], pairs: list[tuple[bytes, bytes]], lat: list[int]) -> int:
    clock = perf_counter_ns
    append = lat.append
    for k, v in pairs:
        t = clock()
        op(k, v)
        append(clock() - t)
    return 0


def measure(
    name: str,
    chunks: Iterable[list[Any]],
    bulk: Callable[[list[Any]], None],
    each: Callable[[list[Any], list[int]], int],
    budget: float | None = None,
) -> Result:
    """Run the chunks, one in `SAMPLE_EVERY` op by op (latency), the rest in bulk (throughput).

    With a `budget` in seconds, stop once it is spent (noted in ``extra["stopped_early"]``).  So that a
    store taking milliseconds per op stops near the budget, not a whole chunk later, the first chunk
    runs in pieces of 16 ops, and any chunk expected to take over 1% of the budget in pieces that fit it.
    """
    bulk_ns = bulk_ops = ops = found = 0
    lat: list[int] = []
    timed_ns = timed_ops = 0  # everything timed so far, bulk and sampled: the per-op estimate
    deadline = None if budget is None else perf_counter() + budget
    stopped = False
    for n, chunk in enumerate(chunks):
        sampled = n % SAMPLE_EVERY == SAMPLE_EVERY // 2
        pieces = [chunk]
        if budget is not None:
            piece = 16 if not timed_ops else max(1, int(budget / 100 * 1e9 * timed_ops / max(1, timed_ns)))
            if piece < len(chunk):
                pieces = [chunk[i : i + piece] for i in range(0, len(chunk), piece)]
        for part in pieces:
            if deadline is not None and perf_counter() > deadline:
                stopped = True
                break
            ops += len(part)
            if sampled:
                before = len(lat)
                found += each(part, lat)
                timed_ns += sum(lat[before:])
            else:
                t = perf_counter_ns()
                bulk(part)
                dt = perf_counter_ns() - t
                bulk_ns += dt
                bulk_ops += len(part)
                timed_ns += dt
            timed_ops += len(part)
        if stopped:
            break
    if not bulk_ops:  # too few chunks: fall back on the sampled ones
        bulk_ops, bulk_ns = len(lat), sum(lat)
    lat.sort()
    result = Result(
        name,
        ops,
        bulk_ops / (bulk_ns / 1e9) if bulk_ns else None,
        percentile(lat, 0.5),
        percentile(lat, 0.99),
        len(lat),
    )
    result.extra["found_in_sample"] = found
    if stopped:
        result.extra["stopped_early"] = True
    return result


def chunk_size(ops: int) -> int:
    """At most `MAX_CHUNK`, and small enough to give at least 64 chunks (8 of them sampled)."""
    return max(1, min(MAX_CHUNK, ops // 64))


# -- key and value streams ------------------------------------------------------------


class Data:
    """Deterministic key orders and values for one run (the same for every store)."""

    def __init__(self, params: Params) -> None:
        self.params = params
        rng = random.Random(params.seed)
        self.values = [rng.randbytes(params.value_size) for _ in range(VALUE_POOL)]

    def rng(self, salt: str) -> random.Random:
        return random.Random(f"{self.params.seed}:{salt}")

    def _pairs(self, numbers: Iterable[int], start: int) -> list[tuple[bytes, bytes]]:
        values = self.values
        mask = VALUE_POOL - 1
        return [(KEY_FORMAT % (2 * i), values[(start + j) & mask]) for j, i in enumerate(numbers)]

    def sequential_pairs(self) -> Iterator[list[tuple[bytes, bytes]]]:
        num = self.params.num
        step = chunk_size(num)
        for s in range(0, num, step):
            yield self._pairs(range(s, min(num, s + step)), s)

    def shuffled_pairs(self) -> Iterator[list[tuple[bytes, bytes]]]:
        """Every key once, in random order (a permutation: 4 bytes per key while it runs)."""
        num = self.params.num
        order = array("I", range(num)) if num < 2**32 else array("Q", range(num))
        self.rng("fillrandom").shuffle(order)
        step = chunk_size(num)
        for s in range(0, num, step):
            yield self._pairs(order[s : s + step], s)

    def random_numbers(self, salt: str, count: int, below: int) -> Iterator[list[int]]:
        """`count` random numbers in [0, below), with replacement, in chunks."""
        rand = self.rng(salt).random
        step = chunk_size(count)
        for s in range(0, count, step):
            yield [int(rand() * below) for _ in range(min(step, count - s))]

    def random_pairs(self, salt: str, count: int) -> Iterator[list[tuple[bytes, bytes]]]:
        s = 0
        for numbers in self.random_numbers(salt, count, self.params.num):
            yield self._pairs(numbers, s)
            s += len(numbers)

    def random_keys(
        self, salt: str, count: int, below: int | None = None, missing: bool = False
    ) -> Iterator[list[bytes]]:
        """Chunks of `count` random keys: present key i for i < `below` (default all), or with `missing` the absent
        key just after it, drawn only where a present key follows too, so that it lies inside the data."""
        odd = 1 if missing else 0
        if below is None:
            below = max(1, self.params.num - odd)  # absent key num - 1 would sort after every present key
        for numbers in self.random_numbers(salt, count, below):
            yield [KEY_FORMAT % (2 * i + odd) for i in numbers]


# -- the workloads ----------------------------------------------------------------------


def fill(store: Store, data: Data, name: str) -> Result:
    chunks = data.sequential_pairs() if name == "fillseq" else data.shuffled_pairs()
    put = store.put
    return measure(name, chunks, lambda c: _bulk_pairs(put, c), lambda c, lat: _each_pairs(put, c, lat))


def overwrite(store: Store, data: Data) -> Result:
    put = store.put
    chunks = data.random_pairs("overwrite", data.params.num)
    return measure(
        "overwrite", chunks, lambda c: _bulk_pairs(put, c), lambda c, lat: _each_pairs(put, c, lat), data.params.budget
    )


def read(store: Store, data: Data, name: str) -> Result:
    """readrandom, readmissing or readhot."""
    p = data.params
    below = max(1, int(p.num * HOT_FRACTION)) if name == "readhot" else None
    chunks = data.random_keys(name, p.reads, below, missing=name == "readmissing")
    get = store.get
    result = measure(name, chunks, lambda c: _bulk(get, c), lambda c, lat: _each(get, c, lat), p.budget)
    result.extra["found_fraction_in_sample"] = result.extra["found_in_sample"] / max(1, result.samples)
    return result


def seekrandom(store: Store, data: Data) -> Result:
    seek = store.seek
    if seek is None:
        return Result("seekrandom", 0, None, None, None, 0, skipped="no ordered iteration")
    read_keys = [0]

    def bulk(keys: list[bytes]) -> None:
        read_keys[0] += sum(seek(k, SEEK_NEXTS) for k in keys)

    def each(keys: list[bytes], lat: list[int]) -> int:
        clock = perf_counter_ns
        append = lat.append
        n = 0
        for k in keys:
            t = clock()
            n += seek(k, SEEK_NEXTS)
            append(clock() - t)
        read_keys[0] += n
        return 0

    result = measure("seekrandom", data.random_keys("seekrandom", data.params.seeks), bulk, each, data.params.budget)
    result.extra["keys_per_seek"] = read_keys[0] / max(1, result.ops)
    return result


def scan(store: Store) -> Result:
    """One full ordered scan; the 'op' is one key, and there is no per-op latency."""
    if store.scan is None:
        return Result("scan", 0, None, None, None, 0, unit="key", skipped="no ordered iteration")
    t = perf_counter()
    n = 0
    for _ in store.scan():
        n += 1
    dt = perf_counter() - t
    return Result("scan", n, n / dt if dt else None, None, None, 0, unit="key", extra={"seconds": dt})


def deleterandom(store: Store, data: Data) -> Result:
    delete = store.delete
    chunks = data.random_keys("deleterandom", data.params.reads)
    return measure(
        "deleterandom", chunks, lambda c: _bulk(delete, c), lambda c, lat: _each(delete, c, lat), data.params.budget
    )


def readwhilewriting(store: Store, data: Data) -> Result:
    """readrandom in this thread while a writer thread overwrites random keys as fast as it can."""
    get, put = store.get, store.put
    if not store.thread_safe:
        lock = threading.Lock()
        get0, put0 = get, put

        def get(key: bytes) -> bytes | None:
            with lock:
                return get0(key)

        def put(key: bytes, value: bytes) -> object:
            with lock:
                return put0(key, value)

    stop = threading.Event()
    written = [0]
    failure: list[BaseException] = []

    def writer() -> None:
        rng = data.rng("writer").random
        num = data.params.num
        values = data.values
        n = 0
        try:
            while not stop.is_set():
                for _ in range(100):
                    put(KEY_FORMAT % (2 * int(rng() * num)), values[n & (VALUE_POOL - 1)])
                    n += 1
        except BaseException as e:  # re-raised by the reader thread
            failure.append(e)
        written[0] = n

    thread = threading.Thread(target=writer, name="bench-writer")
    start = perf_counter()
    thread.start()
    try:
        chunks = data.random_keys("readwhilewriting", data.params.reads)
        result = measure(
            "readwhilewriting", chunks, lambda c: _bulk(get, c), lambda c, lat: _each(get, c, lat), data.params.budget
        )
    finally:
        stop.set()
        thread.join()
    elapsed = perf_counter() - start
    if failure:
        raise failure[0]
    result.extra["writes"] = written[0]
    result.extra["writes_per_sec"] = written[0] / elapsed
    return result
