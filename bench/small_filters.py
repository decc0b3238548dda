"""Small filters: why minilsm's probe walk has a cubic term (the table in docs/BLOOM.md, "Small filters").

A filter of a few keys has few bits (at least 64), and plain double hashing, ``g_i = h1 + i*h2 mod m``, walks an
arithmetic progression: an absent key whose step and start fall on a present key's walk shares most of its
probes and is likely a false positive.  This measures, at `--bits-per-key` (default 10), the false-positive rate
of three walks over the same keys and the same 128-bit hashes (`minilsm.bloom.key_hash`): plain double hashing
with the step forced odd, plain with any step, and minilsm's enhanced walk (`minilsm.bloom.probe_positions`).
Each filter size gets `--sets` key sets of random 16-byte keys, each probed with `--probes` absent 17-byte keys
(so none can be present); the rate shown is the mean over the sets.  Seeded: the same arguments give the same
table.  Pure computation, no store: about a minute at the defaults.

    python -m bench.small_filters [--sets 300] [--probes 2000] [--seed 1] [--bits-per-key 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from collections.abc import Callable
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import add_json_option, format_table, print_header, write_json
from minilsm.bloom import KeyHash, key_hash, params_for_keys, probe_positions

SIZES = (5, 7, 9, 12, 15, 20, 30, 50)
Walk = Callable[[KeyHash, int, int], list[int]]


def plain_walk(odd: bool) -> Walk:
    """Plain double hashing, ``(h1 + i*h2) mod m``, with the step forced odd or taken as it comes."""

    def walk(h: KeyHash, m: int, k: int) -> list[int]:
        h1, h2 = h
        step = h2 | 1 if odd else h2
        return [(h1 + i * step) % m for i in range(k)]

    return walk


WALKS: dict[str, Walk] = {
    "plain, h2 forced odd": plain_walk(odd=True),
    "plain, any h2": plain_walk(odd=False),
    "enhanced (minilsm)": probe_positions,
}


def false_positive_rates(n: int, bits_per_key: float, sets: int, probes: int, rng: random.Random) -> dict[str, float]:
    """Each walk's mean false-positive rate over `sets` filters of `n` keys, `probes` absent keys each."""
    m, k = params_for_keys(n, bits_per_key)
    hits = dict.fromkeys(WALKS, 0)
    for _ in range(sets):
        present = [key_hash(rng.randbytes(16)) for _ in range(n)]
        absent = [key_hash(rng.randbytes(17)) for _ in range(probes)]
        for name, walk in WALKS.items():
            bits = {p for h in present for p in walk(h, m, k)}
            hits[name] += sum(all(p in bits for p in walk(h, m, k)) for h in absent)
    return {name: count / (sets * probes) for name, count in hits.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sets", type=int, default=300, help="key sets per filter size (default 300)")
    parser.add_argument("--probes", type=int, default=2000, help="absent keys per key set (default 2,000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--bits-per-key", type=float, default=10.0, help="filter size (default 10)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.sets < 1 or args.probes < 1 or not args.bits_per_key > 0:
        parser.error("--sets, --probes and --bits-per-key must be positive")
    k = params_for_keys(SIZES[0], args.bits_per_key)[1]
    theory = (1 - math.exp(-k / args.bits_per_key)) ** k
    params = {
        "bits per key": args.bits_per_key,
        "k": k,
        "theory": f"{theory * 100:.2f}% ((1 - e^(-kn/m))^k at m = n * bits per key)",
        "key sets": f"{args.sets} per size, {args.probes} absent keys each (seed {args.seed})",
    }
    info = print_header("Small filters: plain and enhanced double hashing", params)
    rng = random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    for n in SIZES:
        m, _ = params_for_keys(n, args.bits_per_key)
        rows.append({"keys": n, "bits": m, **false_positive_rates(n, args.bits_per_key, args.sets, args.probes, rng)})
    print(
        format_table(
            ["keys", "bits", *WALKS], [[r["keys"], r["bits"], *(f"{r[w] * 100:.2f}%" for w in WALKS)] for r in rows]
        )
    )
    write_json(args.json, {"benchmark": "small_filters", "machine": info, "params": params, "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
