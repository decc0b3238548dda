"""The store benchmark: db_bench's workloads on minilsm and on each peer, same keys, same run, same machine.

    python -m bench [--num 200000] [--reads N] [--seeks N] [--stores minilsm,leveldb,...]
                    [--workloads fillseq,readrandom,...] [--dir DIR] [--json PATH]

Prints the machine and the parameters, then one table per workload with each
store's throughput, its ratio to minilsm and its latency percentiles, then
minilsm's own counters per read (tables probed, filter negatives, false
positives, block reads, cache hits), then the headline: minilsm's rate as a
fraction of each peer's.  bench/workloads.py says exactly what is timed;
bench/peers.py how each peer is configured and how durable its writes are.

Each store runs every workload before the next store starts, in a fresh
directory under `--dir` (a new temporary directory by default) that is deleted
afterwards.  A store whose package is missing is skipped with a note.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import workloads as w
from bench.common import add_json_option, format_table, print_header, write_json
from bench.peers import Peer, Store, peers

WORKLOADS = (
    "fillseq",
    "fillrandom",
    "overwrite",
    "readrandom",
    "readmissing",
    "readhot",
    "seekrandom",
    "scan",
    "readwhilewriting",
    "deleterandom",
)
DESCRIPTIONS = {
    "fillseq": "{num:,} puts in key order into an empty store",
    "fillrandom": "{num:,} puts, every key once in random order, one put per call, into an empty store",
    "overwrite": "{num:,} puts of random existing keys",
    "readrandom": "{reads:,} reads of random present keys, after close, reopen and settle",
    "readmissing": "{reads:,} reads of random absent keys inside the stored key range (only filters reject them)",
    "readhot": "{reads:,} reads of random keys among the first 1% of keys",
    "seekrandom": "{seeks:,} seeks to a random key, each followed by reading 10 pairs",
    "scan": "one full ordered scan of {num:,} pairs (rate in keys/s)",
    "readwhilewriting": "{reads:,} random reads in one thread while another thread overwrites random keys",
    "deleterandom": "{reads:,} deletes of random keys",
}
COUNTER_WORKLOADS = ("readrandom", "readmissing", "readhot", "readwhilewriting")


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file removed meanwhile
                total += os.path.getsize(os.path.join(root, name))
    return total


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def with_counters(store: Store, run: Any) -> w.Result:
    """Run one workload; attach the store's own counters (minilsm), counted from zero for it."""
    store.counters(reset=True)
    result: w.Result = run()
    counters = store.counters()
    if counters is not None:
        result.extra["counters"] = counters
        ops = max(1, counters.get("gets") or 0)
        if counters.get("gets"):
            positives = counters.get("filter_positives") or 0
            true_positives = counters.get("filter_true_positives") or 0
            result.extra["per_read"] = {
                "tables_probed": (counters.get("filter_checks") or 0) / ops,
                "filter_negatives": (counters.get("filter_negatives") or 0) / ops,
                "false_positives": (positives - true_positives) / ops,
                "block_reads": (counters.get("block_reads") or 0) / ops,
                "cache_hits": (counters.get("block_cache_hits") or 0) / ops,
            }
    return result


def run_store(peer: Peer, data: w.Data, selected: set[str], root: str) -> dict[str, Any]:
    """Every selected workload on one store, in db_bench's order."""
    results: list[w.Result] = []
    facts: dict[str, Any] = {}
    started = time.perf_counter()

    def done(result: w.Result) -> None:
        results.append(result)
        rate = f"{result.ops_per_sec:,.0f} {result.unit}s/s" if result.ops_per_sec else result.skipped or "-"
        progress(f"  {peer.name:<10} {result.workload:<17} {rate}")

    if "fillseq" in selected:
        path = os.path.join(root, peer.name, "fillseq")
        store = peer.open(path)
        done(with_counters(store, lambda: w.fill(store, data, "fillseq")))
        store.close()
        shutil.rmtree(path, ignore_errors=True)

    main = [name for name in WORKLOADS[1:] if name in selected]
    if main:
        path = os.path.join(root, peer.name, "main")
        store = peer.open(path)
        fill = with_counters(store, lambda: w.fill(store, data, "fillrandom"))
        if "fillrandom" in selected:
            done(fill)
        if "overwrite" in selected:
            done(with_counters(store, lambda: w.overwrite(store, data)))
        store.close()
        store = peer.open(path)
        facts["settle_seconds"] = store.settle()
        facts["disk_bytes_after_load"] = dir_bytes(path)
        shape = store.counters()
        if shape is not None and "tables_per_level" in shape:
            facts["tables_per_level"] = shape["tables_per_level"]
        for name in main:
            if name in ("fillrandom", "overwrite"):
                continue
            if name in ("readrandom", "readmissing", "readhot"):
                done(with_counters(store, lambda name=name: w.read(store, data, name)))
            elif name == "seekrandom":
                done(with_counters(store, lambda: w.seekrandom(store, data)))
            elif name == "scan":
                done(with_counters(store, lambda: w.scan(store)))
            elif name == "readwhilewriting":
                done(with_counters(store, lambda: w.readwhilewriting(store, data)))
            elif name == "deleterandom":
                done(with_counters(store, lambda: w.deleterandom(store, data)))
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    facts["seconds"] = time.perf_counter() - started
    return {"facts": facts, "results": {r.workload: r for r in results}}


def fmt_rate(x: float | None) -> str | None:
    return None if x is None else f"{x:,.0f}"


def fmt_us(x: float | None) -> str | None:
    return None if x is None else f"{x:.2f}"


def fmt_ratio(x: float | None) -> str | None:
    return None if x is None else f"{x:.2f}"


def workload_table(name: str, runs: dict[str, dict[str, Any]]) -> str:
    ours = runs.get("minilsm", {}).get("results", {}).get(name)
    base = ours.ops_per_sec if ours is not None else None
    rows = []
    for store, run in runs.items():
        r = run["results"].get(name)
        if r is None:
            continue
        if r.skipped:
            rows.append([store, None, None, None, None, f"skipped: {r.skipped}"])
            continue
        ratio = r.ops_per_sec / base if base and r.ops_per_sec else None
        note = ""
        if name == "readwhilewriting":
            note = f"writer {r.extra['writes_per_sec']:,.0f} puts/s"
        elif name == "seekrandom":
            note = f"{r.extra['keys_per_seek']:.1f} keys/seek"
        elif name.startswith("read"):
            note = f"found {100 * r.extra['found_fraction_in_sample']:.0f}% (sample)"
        if r.extra.get("stopped_early"):
            note = "; ".join(x for x in (f"* stopped at the time budget after {r.ops:,} ops", note) if x)
        unit = "keys/s" if r.unit == "key" else "ops/s"
        rows.append(
            [
                store,
                f"{r.ops_per_sec:,.0f} {unit}" if r.ops_per_sec else None,
                fmt_ratio(ratio),
                fmt_us(r.p50_us),
                fmt_us(r.p99_us),
                note,
            ]
        )
    return format_table(["store", "rate", "x minilsm", "p50 us", "p99 us", "note"], rows)


def write_amplification(run: dict[str, Any]) -> str:
    """minilsm's flush + compaction bytes over user bytes, per write workload."""
    parts = []
    for name in ("fillseq", "fillrandom", "overwrite", "deleterandom"):
        r = run["results"].get(name)
        wa = r.extra.get("counters", {}).get("write_amplification") if r is not None else None
        if wa is not None:
            parts.append(f"{name} {wa:.2f}")
    return "write amplification (flush + compaction bytes / user bytes, during the run): " + (", ".join(parts) or "-")


def counters_table(run: dict[str, Any]) -> str:
    rows = []
    for name, r in run["results"].items():
        per = r.extra.get("per_read")
        if per is None or name not in COUNTER_WORKLOADS:
            continue
        rows.append(
            [
                name,
                f"{per['tables_probed']:.2f}",
                f"{per['filter_negatives']:.2f}",
                f"{per['false_positives']:.4f}",
                f"{per['block_reads']:.3f}",
                f"{per['cache_hits']:.3f}",
            ]
        )
    headers = ["workload", "tables probed", "filter negatives", "false positives", "block reads", "cache hits"]
    return format_table(headers, rows)


def headline(runs: dict[str, dict[str, Any]], selected: list[str]) -> str:
    ours = runs.get("minilsm")
    others = [s for s in runs if s != "minilsm"]
    if ours is None or not others:
        return ""
    rows = []
    for name in selected:
        mine = ours["results"].get(name)
        row: list[object] = [name]
        for s in others:
            theirs = runs[s]["results"].get(name)
            if mine is None or theirs is None or not mine.ops_per_sec or not theirs.ops_per_sec:
                row.append(None)
            else:
                row.append(f"{mine.ops_per_sec / theirs.ops_per_sec:.2f}")
        rows.append(row)
    return format_table(["minilsm / peer", *others], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--num", type=int, default=200_000, help="keys in the data set (default 200,000)")
    parser.add_argument("--reads", type=int, help="operations per read and delete workload (default --num)")
    parser.add_argument("--seeks", type=int, help="seeks in seekrandom (default --reads / 4)")
    parser.add_argument("--stores", help="comma-separated stores to run (default: all available)")
    parser.add_argument("--workloads", help=f"comma-separated workloads (default: all of {','.join(WORKLOADS)})")
    parser.add_argument("--dir", help="where to put the stores (default: a new temporary directory)")
    parser.add_argument("--seed", type=int, default=301)
    parser.add_argument(
        "--budget",
        type=float,
        default=120.0,
        help="seconds after which a workload other than a fill stops early (default 120; 0: none)",
    )
    add_json_option(parser)
    args = parser.parse_args(argv)
    reads = args.reads if args.reads is not None else args.num
    seeks = args.seeks if args.seeks is not None else max(1, reads // 4)
    if args.num < 1 or reads < 1 or seeks < 1:
        parser.error("--num, --reads and --seeks must be positive")
    selected = WORKLOADS if args.workloads is None else tuple(args.workloads.split(","))
    unknown = set(selected) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    all_peers = peers(args.num)
    names = [p.name for p in all_peers]
    wanted = names if args.stores is None else args.stores.split(",")
    if set(wanted) - set(names):
        parser.error(f"unknown store(s): {', '.join(sorted(set(wanted) - set(names)))}; known: {', '.join(names)}")

    params = w.Params(args.num, reads, seeks, seed=args.seed, budget=args.budget or None)
    notes: dict[str, dict[str, Any]] = {}
    runnable: list[Peer] = []
    for peer in all_peers:
        if peer.name not in wanted:
            continue
        skip = peer.available()
        notes[peer.name] = {
            "version": peer.version() if skip is None else None,
            "durability": peer.durability,
            "config": peer.config,
            "skipped": skip,
        }
        if skip is None:
            runnable.append(peer)
    overhead = w.timer_overhead_ns()
    shown = {
        "num": args.num,
        "reads": reads,
        "seeks": seeks,
        "key/value": "16-byte keys b'%016d' % (2*i), 100-byte random values",
        "seed": args.seed,
        "budget": f"{args.budget:g} s per workload except fills (a store past it stops early, marked *)"
        if args.budget
        else "none",
        "timing": f"throughput: chunks of up to {w.MAX_CHUNK} ops timed whole; latency: 1 chunk in "
        f"{w.SAMPLE_EVERY} timed per op (clock overhead {overhead:.0f} ns/op included)",
    }
    info = print_header("minilsm store benchmark (db_bench workloads)", shown)
    for name, note in notes.items():
        if note["skipped"]:
            print(f"{name}: {note['skipped']}")
        else:
            print(f"{name} {note['version']}\n    durability: {note['durability']}\n    config: {note['config']}")
    print(flush=True)

    root = args.dir or tempfile.mkdtemp(prefix="minilsm-bench-")
    os.makedirs(root, exist_ok=True)
    data = w.Data(params)
    runs: dict[str, dict[str, Any]] = {}
    try:
        for peer in runnable:
            progress(f"{peer.name}:")
            runs[peer.name] = run_store(peer, data, set(selected), root)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)

    for name in selected:
        print(f"{name}: {DESCRIPTIONS[name].format(num=args.num, reads=reads, seeks=seeks)}")
        print(workload_table(name, runs))
        print()
    if "minilsm" in runs:
        print("minilsm counters per read")
        print(counters_table(runs["minilsm"]))
        print(write_amplification(runs["minilsm"]))
        facts = runs["minilsm"]["facts"]
        if "tables_per_level" in facts:
            print(
                f"tables per level after the load: {facts['tables_per_level']}; "
                f"settled in {facts['settle_seconds']:.2f} s after reopening"
            )
        print()
    summary = headline(runs, list(selected))
    if summary:
        print("minilsm's rate as a fraction of each peer's (>= 1: minilsm is faster)")
        print(summary)
        print()
    print(
        format_table(
            ["store", "seconds", "settled after reopening (s)", "disk bytes after load"],
            [
                [s, f"{f['seconds']:.1f}", f"{f.get('settle_seconds', 0.0):.2f}", f.get("disk_bytes_after_load")]
                for s, f in ((s, r["facts"]) for s, r in runs.items())
            ],
        )
    )

    write_json(
        args.json,
        {
            "benchmark": "workloads",
            "machine": info,
            "params": shown,
            "stores": notes,
            "results": {
                s: {"facts": r["facts"], "workloads": {n: res.to_dict() for n, res in r["results"].items()}}
                for s, r in runs.items()
            },
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
