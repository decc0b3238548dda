"""Bloom filter benchmark: false-positive rate and speed at 1..20 bits per key, beside rbloom and pybloom-live.

For each bits-per-key setting it builds a minilsm `BloomFilter` over `--n` keys
and reports k, the textbook rate, the rate measured over `--probes` absent keys,
bytes per key, and nanoseconds per add and per check (absent key, present key,
and absent key whose `key_hash` is precomputed, which is what the store's read
path does).  When installed, rbloom (Rust) and pybloom-live (pure Python) are
measured on the same keys, each sized for the rate minilsm's filter expects at
that setting, so the rows compare memory and speed at equal target accuracy.

Times are the best of `--repeat` runs of the whole key list through
``deque(map(fn, keys), maxlen=0)``, so they include about 10 ns of iteration.
They are CPU time of this process (`time.process_time_ns`): the work is pure
computation, and CPU time is what other processes on a shared machine cannot
inflate (``--wall`` measures elapsed time instead).

    python -m bench.bloom_bench [--n 100000] [--probes 200000] [--repeat 3] [--wall] [--json PATH]
    python bench/bloom_bench.py ...
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.metadata
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import add_json_option, format_table, ns_per_call, print_header, write_json
from minilsm.bloom import BloomFilter, key_hash

BITS_PER_KEY = range(1, 21)
HEADERS = [
    "bits/key",
    "k",
    "expected",
    "measured",
    "bytes/key",
    "ns/add",
    "ns/check absent",
    "ns/check present",
    "ns/check hash",
]
OTHERS = {"rbloom": "rbloom", "pybloom-live": "pybloom_live"}

Timer = Callable[[Callable[[], object], int], float]
"""ns per call of a run making that many calls: `ns_per_call` with the run's repeat count and clock."""


def consume(fn: Callable[[Any], object], items: Iterable[Any]) -> None:
    deque(map(fn, items), maxlen=0)


def progress(message: str) -> None:
    """Overwrite one status line on a terminal (silent when stderr is redirected)."""
    if sys.stderr.isatty():
        print(f"\r\x1b[K{message}", end="" if message else "\r", file=sys.stderr, flush=True)


def measure_minilsm(bits_per_key: int, keys: list[bytes], absent: list[bytes], timer: Timer) -> dict[str, Any]:
    n = len(keys)
    filters: list[BloomFilter] = []

    def build() -> None:
        f = BloomFilter.for_keys(n, bits_per_key)
        consume(f.add, keys)
        filters.append(f)

    add_ns = timer(build, n)
    f = filters[-1]
    absent_hashes = [key_hash(key) for key in absent]
    present = keys[: len(absent)]
    return {
        "bits_per_key": bits_per_key,
        "k": f.k,
        "expected_fpr": f.expected_fpr(),
        "measured_fpr": sum(map(f.may_contain_hash, absent_hashes)) / len(absent),
        "bytes_per_key": f.nbytes / n,
        "ns_add": add_ns,
        "ns_check_absent": timer(lambda: consume(f.may_contain, absent), len(absent)),
        "ns_check_present": timer(lambda: consume(f.may_contain, present), len(present)),
        "ns_check_hash": timer(lambda: consume(f.may_contain_hash, absent_hashes), len(absent)),
    }


def measure_other(
    name: str, module: Any, target_fpr: float, bits_per_key: int, keys: list[bytes], absent: list[bytes], timer: Timer
) -> dict[str, Any]:
    """The same row for another library's filter sized for `target_fpr` over len(keys) keys."""
    n = len(keys)
    filters: list[Any] = []

    def make() -> Any:
        if name == "rbloom":
            return module.Bloom(n, target_fpr)
        return module.BloomFilter(capacity=n, error_rate=target_fpr)

    def build() -> None:
        f = make()
        consume(f.add, keys)
        filters.append(f)

    add_ns = timer(build, n)
    f = filters[-1]
    if name == "rbloom":
        k, num_bits = None, f.size_in_bits  # rbloom does not expose its k
    else:
        k, num_bits = f.num_slices, f.num_bits
    contains = f.__contains__
    present = keys[: len(absent)]
    return {
        "bits_per_key": bits_per_key,
        "k": k,
        "expected_fpr": target_fpr,
        "measured_fpr": sum(map(contains, absent)) / len(absent),
        "bytes_per_key": num_bits / 8 / n,
        "ns_add": add_ns,
        "ns_check_absent": timer(lambda: consume(contains, absent), len(absent)),
        "ns_check_present": timer(lambda: consume(contains, present), len(present)),
        "ns_check_hash": None,  # no precomputed-hash entry point
    }


def table(rows: list[dict[str, Any]]) -> str:
    def pct(p: float) -> str:
        return f"{100 * p:.4g}%"

    def ns(t: float | None) -> str | None:
        return None if t is None else f"{t:.0f}"

    return format_table(
        HEADERS,
        [
            [
                r["bits_per_key"],
                r["k"],
                pct(r["expected_fpr"]),
                pct(r["measured_fpr"]),
                f"{r['bytes_per_key']:.3f}",
                ns(r["ns_add"]),
                ns(r["ns_check_absent"]),
                ns(r["ns_check_present"]),
                ns(r["ns_check_hash"]),
            ]
            for r in rows
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=100_000, help="keys added to each filter (default 100,000)")
    parser.add_argument("--probes", type=int, default=200_000, help="absent keys checked (default 200,000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per figure; the best is kept (default 3)")
    parser.add_argument("--wall", action="store_true", help="time elapsed (wall) time instead of process CPU time")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.n < 1 or args.probes < 1 or args.repeat < 1:
        parser.error("--n, --probes and --repeat must be positive")

    # Present and absent keys differ in their prefix, so no absent key is ever added.
    keys = [b"key:%012d" % i for i in range(args.n)]
    absent = [b"absent:%012d" % i for i in range(args.probes)]
    versions: dict[str, str | None] = {}
    modules: dict[str, Any] = {}
    for dist, module_name in OTHERS.items():
        try:
            modules[dist] = importlib.import_module(module_name)
            versions[dist] = importlib.metadata.version(dist)
        except ImportError:
            versions[dist] = None
    clock = time.perf_counter_ns if args.wall else time.process_time_ns
    timer: Timer = functools.partial(ns_per_call, repeat=args.repeat, clock=clock)
    params = {
        "n": args.n,
        "probes": args.probes,
        "repeat": args.repeat,
        "timer": f"best of {args.repeat}, {'wall' if args.wall else 'process CPU'} time",
        "keys": "b'key:%012d' added, b'absent:%012d' checked",
        "others": ", ".join(f"{d} {v}" if v else f"{d} (not installed)" for d, v in versions.items()),
    }
    info = print_header("minilsm Bloom filter benchmark", params)

    ours = []
    for bits_per_key in BITS_PER_KEY:
        ours.append(measure_minilsm(bits_per_key, keys, absent, timer))
        progress(f"minilsm: {bits_per_key}/{BITS_PER_KEY[-1]} bits per key")
    progress("")
    print("minilsm BloomFilter (XXH3-128, enhanced double hashing; k = round(bits/key * ln 2))")
    print(table(ours))
    print()

    results: dict[str, Any] = {"minilsm": ours}
    for dist in OTHERS:
        if dist not in modules:
            note = f"{dist} is not installed (pip install {dist}): skipped"
            print(note + "\n")
            results[dist] = {"skipped": note}
            continue
        rows = []
        for ref in ours:
            rows.append(
                measure_other(dist, modules[dist], ref["expected_fpr"], ref["bits_per_key"], keys, absent, timer)
            )
            progress(f"{dist}: {ref['bits_per_key']}/{BITS_PER_KEY[-1]} bits per key")
        progress("")
        print(f"{dist} {versions[dist]}, sized for minilsm's expected rate at each bits/key (k '-' = not exposed)")
        print(table(rows))
        print()
        results[dist] = rows

    write_json(args.json, {"benchmark": "bloom", "machine": info, "params": params, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
