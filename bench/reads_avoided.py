"""The reads-avoided experiment: what a Bloom filter of each size saves a missing-key read, measured against theory.

Part 1, filter size.  For bits per key 0, 1, 2, 4, 6, 8, 10, 12, 16 and 20 it
loads the same `--num` keys (``b"%016d" % (2 * i)``, random order, 100-byte
values) into a fresh store with that setting, inline (``background=False``),
so that every store ends with exactly the same tables, then reads `--probes`
absent keys (odd numbers, so each falls inside some table's key range and only
a filter can rule the table out).  The block cache is off, so every data
block a read touches is a read from the file.  Per setting it reports:

* the false-positive rate measured over every filter probe of an absent key,
  beside the theoretical ``(1 - e^(-kn/m))^k`` aggregated the same way: each
  probed table's own rate (from its n, m and k) times the absent-key probes it
  received, summed over the tables and divided by the probes (``DBStats.filter``);
* data-block reads per missing-key read, and the reads the filters avoided:
  the share of table probes that ended at the filter (``1 - reads / probes``);
* filter memory per key (bytes of the filter blocks over the keys they hold);
* the time of a missing-key read (the least of `--repeat` passes, in CPU time of
  the reading thread, so that other processes on the machine inflate it least).

Part 2, growth.  For leveled and tiered compaction it loads keys in random
order in the default configuration (10 bits per key, background compaction)
but for seek compaction, which is off so that every read of a checkpoint meets
the shape the load left (with it on, the reads would reshape the store as they
are counted), and at 10^4, 3*10^4, ... up to `--grow-to` keys (10^6 by default; 10^7 works,
given time) lets compaction settle and reads `--probes` absent keys, reporting
the tables in the store, tables probed, filter checks and block reads per
read, and the time per read.

    python -m bench.reads_avoided [--num 200000] [--probes 50000] [--grow-to 1000000] [--json PATH] [--plot PNG]

With matplotlib installed (``pip install -e '.[plot]'``) `--plot` writes a PNG:
measured against theoretical false-positive rate, and block reads per missing
read, by bits per key.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import sys
import tempfile
import time
from array import array
from collections.abc import Iterator
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import minilsm
from bench.common import add_json_option, format_table, print_header, write_json
from minilsm.bloom import expected_fpr, k_for_bits_per_key

BITS_PER_KEY = (0, 1, 2, 4, 6, 8, 10, 12, 16, 20)
KEY = b"%016d"
VALUE_SIZE = 100


def key_order(num: int, seed: int) -> array[int]:
    """0 .. num-1 in a random order (4 bytes per key)."""
    order = array("I", range(num)) if num < 2**32 else array("Q", range(num))
    random.Random(seed).shuffle(order)
    return order


def load(db: minilsm.DB, numbers: Iterator[int], values: list[bytes]) -> None:
    put = db.put
    mask = len(values) - 1
    for j, i in enumerate(numbers):
        put(KEY % (2 * i), values[j & mask])


def missing_keys(below: int, count: int, seed: int) -> list[bytes]:
    """`count` random absent keys (odd numbers), each between two of the first `below` present keys.

    The last of those is ``2 * (below - 1)``: an odd number past it would fall in no table's key range.
    Distinct while there are gaps enough (past that, each gap is drawn once before any twice): a filter
    answers a key the same every time, so a repeated key adds no information, and the binomial interval
    the report draws, which counts every probe as independent, would be too narrow (drawn with
    replacement, 20,000 keys between 20,000 present ones held 12,596 distinct, and the interval's
    variance was about half the measurement's).
    """
    rng = random.Random(seed)
    gaps = below - 1
    numbers: list[int] = []
    while len(numbers) < count:
        numbers += rng.sample(range(gaps), min(gaps, count - len(numbers)))
    return [KEY % (2 * n + 1) for n in numbers]


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate `hits` / `n` (95% for z = 1.96).

    Unlike p +- z sqrt(p(1 - p)/n) it stays inside [0, 1] and is not empty at 0 hits, which matters
    for the few false positives of the larger filters.
    """
    if n <= 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def time_reads(db: minilsm.DB, keys: list[bytes], repeat: int) -> float:
    """The least over `repeat` passes of the CPU time of one read, in microseconds (the least disturbed pass)."""
    get = db.get
    runs = []
    for _ in range(repeat):
        start = time.thread_time_ns()
        for k in keys:
            get(k)
        runs.append((time.thread_time_ns() - start) / len(keys) / 1000)
    return min(runs)


def count_reads(db: minilsm.DB, keys: list[bytes]) -> dict[str, Any]:
    """Read `keys` once from zeroed counters; the counters per read, and the filter counts as `DBStats` gives them."""
    db.stats(reset=True)
    get = db.get
    found = sum(get(k) is not None for k in keys)
    st = db.stats()
    n = len(keys)
    f = st.filter
    return {
        "found": found,
        "tables_considered_per_read": st.tables_considered / n,
        "filter_checks_per_read": st.filter_checks / n,
        "filter_negatives_per_read": st.filter_negatives / n,
        "false_positives_per_read": st.false_positives / n,
        "block_reads_per_read": st.block_reads / n,
        "measured_fpr": f.measured_fpr,
        "expected_fpr": f.expected_fpr,
        "expected_false_positives": f.expected_false_positives,
        "false_positives": f.false_positives,
        "absent_probes": f.absent_probes,
    }


# -- part 1: filter size ----------------------------------------------------------------


def filter_sizes(args: argparse.Namespace, root: str, values: list[bytes]) -> list[dict[str, Any]]:
    order = key_order(args.num, args.seed)
    probes = missing_keys(args.num, args.probes, args.seed + 1)
    rows: list[dict[str, Any]] = []
    for bits in BITS_PER_KEY:
        path = os.path.join(root, f"bits{bits}")
        with minilsm.DB(path, bits_per_key=bits, background=False, block_cache_size=0) as db:
            load(db, iter(order), values)
            db.flush()
            tables = db.tables()
            counts = count_reads(db, probes)
            micros = time_reads(db, probes[: args.timed], args.repeat)
        shutil.rmtree(path, ignore_errors=True)
        filter_bytes = sum(t.filter_bytes for t in tables)
        filter_keys = sum(t.filter_keys for t in tables)
        k = k_for_bits_per_key(bits) if bits else 0
        row = {
            "bits_per_key": bits,
            "k": k,
            "tables": len(tables),
            "nominal_fpr": expected_fpr(round(bits * 1_000_000), 1_000_000, k) if bits else 1.0,
            **counts,
            "filter_bytes_per_key": filter_bytes / filter_keys if filter_keys else 0.0,
            "us_per_missing_read": micros,
        }
        rows.append(row)
        progress(f"bits/key {bits}: {row['block_reads_per_read']:.4f} block reads per missing read")
    base = rows[0]["block_reads_per_read"] or None
    for row in rows:
        checks = row["filter_checks_per_read"]
        row["reads_avoided"] = row["filter_negatives_per_read"] / checks if checks else 0.0
        row["reads_avoided_vs_no_filter"] = 1 - row["block_reads_per_read"] / base if base else None
    return rows


def size_table(rows: list[dict[str, Any]]) -> str:
    def pct(x: float | None, digits: int = 3) -> str | None:
        return None if x is None else f"{100 * x:.{digits}g}%"

    headers = [
        "bits/key",
        "k",
        "FPR measured",
        "FPR theory",
        "probes/read",
        "block reads/read",
        "reads avoided",
        "filter B/key",
        "us/read",
    ]
    return format_table(
        headers,
        [
            [
                r["bits_per_key"],
                r["k"],
                pct(r["measured_fpr"]),
                pct(r["expected_fpr"]),
                f"{r['filter_checks_per_read']:.2f}",
                f"{r['block_reads_per_read']:.4f}",
                pct(r["reads_avoided"], 4),
                f"{r['filter_bytes_per_key']:.3f}",
                f"{r['us_per_missing_read']:.2f}",
            ]
            for r in rows
        ],
    )


# -- part 2: growth ----------------------------------------------------------------------


def checkpoints(limit: int) -> list[int]:
    """10^4, 3*10^4, 10^5, ... up to and including `limit`."""
    points = {limit}
    n = 10_000
    while n < limit:
        points.update(x for x in (n, 3 * n) if x < limit)
        n *= 10
    return sorted(points)


def growth(args: argparse.Namespace, root: str, values: list[bytes], style: str) -> list[dict[str, Any]]:
    limit = args.grow_to
    order = key_order(limit, args.seed + 2)
    path = os.path.join(root, f"grow-{style}")
    rows: list[dict[str, Any]] = []
    loaded = 0
    with minilsm.DB(path, compaction_style=style, block_cache_size=0, seek_compaction=False) as db:
        for target in checkpoints(limit):
            load(db, (order[i] for i in range(loaded, target)), values)
            loaded = target
            db.flush()
            db.wait_for_compactions()
            # Absent keys among all the key space the loaded keys are drawn from.
            probes = missing_keys(limit, args.probes, args.seed + 3)
            counts = count_reads(db, probes)
            levels = [level.tables for level in db.stats().levels]
            rows.append(
                {
                    "style": style,
                    "keys": target,
                    "tables": sum(levels),
                    "tables_per_level": levels,
                    **counts,
                    "us_per_missing_read": time_reads(db, probes[: args.timed], args.repeat),
                }
            )
            progress(f"{style} at {target:,} keys: {sum(levels)} tables, {counts['filter_checks_per_read']:.2f} probes")
    shutil.rmtree(path, ignore_errors=True)
    return rows


def per_level(counts: list[int]) -> str:
    """Tables per level from level 0 to the deepest non-empty one: ``[3, 5, 50, 7, 0, 0]`` -> ``3/5/50/7``."""
    deepest = max((i for i, n in enumerate(counts) if n), default=0)
    return "/".join(str(n) for n in counts[: deepest + 1])


def growth_table(rows: list[dict[str, Any]]) -> str:
    headers = ["keys", "tables", "L0/L1/...", "ranges hit/read", "block reads/read", "FPR measured", "us/read"]
    return format_table(
        headers,
        [
            [
                f"{r['keys']:,}",
                r["tables"],
                per_level(r["tables_per_level"]),
                f"{r['filter_checks_per_read']:.2f}",
                f"{r['block_reads_per_read']:.4f}",
                "-" if r["measured_fpr"] is None else f"{100 * r['measured_fpr']:.3g}%",
                f"{r['us_per_missing_read']:.2f}",
            ]
            for r in rows
        ],
    )


# -- output ----------------------------------------------------------------------------


def plot(rows: list[dict[str, Any]], path: str) -> str | None:
    """Write the PNG; returns a note instead when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[plot]'): no plot written"
    with_filter = [r for r in rows if r["bits_per_key"] > 0]
    bits = [r["bits_per_key"] for r in with_filter]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.semilogy(bits, [r["expected_fpr"] for r in with_filter], "o-", label="theory (1 - e^(-kn/m))^k, per table")
    seen = [r for r in with_filter if r["false_positives"]]
    # 95% binomial (Wilson) interval of each measured rate, as error bars.
    bounds = [wilson_interval(r["false_positives"], r["absent_probes"]) for r in seen]
    left.errorbar(
        [r["bits_per_key"] for r in seen],
        [r["measured_fpr"] for r in seen],
        yerr=[
            [r["measured_fpr"] - lo for (lo, _), r in zip(bounds, seen, strict=True)],
            [hi - r["measured_fpr"] for (_, hi), r in zip(bounds, seen, strict=True)],
        ],
        fmt="s--",
        capsize=3,
        label="measured (95% interval)",
    )
    none = [r for r in with_filter if not r["false_positives"]]
    if none:
        left.semilogy(
            [r["bits_per_key"] for r in none],
            [1 / r["absent_probes"] for r in none],
            "v",
            color="tab:orange",
            label="measured 0 (drawn at 1 / probes)",
        )
    left.set_xlabel("bits per key")
    left.set_ylabel("false-positive rate")
    left.set_title("Filter false-positive rate")
    left.grid(True, which="both", alpha=0.3)
    left.legend()
    all_bits = [r["bits_per_key"] for r in rows]
    right.plot(all_bits, [r["block_reads_per_read"] for r in rows], "o-", color="tab:red")
    right.set_yscale("symlog", linthresh=0.001)
    right.set_xlabel("bits per key (0: no filter)")
    right.set_ylabel("data-block reads per missing-key read")
    right.set_title("Block reads per missing-key read")
    right.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--num", type=int, default=200_000, help="keys per store in part 1 (default 200,000)")
    parser.add_argument("--probes", type=int, default=50_000, help="absent keys read per measurement (default 50,000)")
    parser.add_argument("--timed", type=int, default=20_000, help="of those, how many are timed (default 20,000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed passes; the least is reported (default 5)")
    parser.add_argument("--grow-to", type=int, default=1_000_000, help="last growth checkpoint; 0 skips part 2")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--dir", help="where to build the stores (default: a new temporary directory)")
    parser.add_argument("--plot", metavar="PNG", help="also write the plot there (needs matplotlib)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if min(args.num, args.probes, args.timed, args.repeat) < 1 or args.grow_to < 0:
        parser.error("--num, --probes, --timed and --repeat must be positive")
    if args.num < 2 or args.grow_to == 1:
        parser.error("--num and --grow-to (unless 0) must be at least 2: absent keys fall between two present ones")
    args.timed = min(args.timed, args.probes)

    params = {
        "num": args.num,
        "probes": args.probes,
        "timed": args.timed,
        "repeat": args.repeat,
        "grow_to": args.grow_to,
        "keys": "b'%016d' % (2*i) present, odd numbers absent (inside the tables' ranges); 100-byte values",
        "stores": (
            "part 1: background=False, block_cache_size=0; "
            "part 2: defaults but block_cache_size=0, seek_compaction=False"
        ),
        "seed": args.seed,
    }
    info = print_header("minilsm reads-avoided experiment", params)
    rng = random.Random(args.seed)
    values = [rng.randbytes(VALUE_SIZE) for _ in range(1024)]
    root = args.dir or tempfile.mkdtemp(prefix="minilsm-reads-avoided-")
    report: dict[str, Any] = {"benchmark": "reads_avoided", "machine": info, "params": params}
    try:
        rows = filter_sizes(args, root, values)
        print(f"Part 1: {args.num:,} keys, {args.probes:,} absent-key reads per setting")
        print(size_table(rows))
        print(
            "FPR measured = false positives / absent-key filter probes; theory = sum over probed tables of "
            "(1 - e^(-kn/m))^k x that table's absent-key probes, over the same probes.\n"
            "reads avoided = filter negatives / filter probes (each probe would read one block without a filter)."
        )
        print()
        report["filter_sizes"] = rows
        if args.grow_to:
            report["growth"] = {}
            for style in ("leveled", "tiered"):
                grown = growth(args, root, values, style)
                report["growth"][style] = grown
                print(f"Part 2: growth, {style} compaction, 10 bits/key, {args.probes:,} absent-key reads per point")
                print(growth_table(grown))
                print()
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.plot:
        note = plot(report["filter_sizes"], args.plot)
        print(note or f"plot written to {args.plot}")
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
