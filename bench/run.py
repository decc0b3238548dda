"""The store benchmark: db_bench's workloads on minilsm and on each peer, same keys, same run, same machine.

    python -m bench [--num 200000] [--reads N] [--seeks N] [--stores minilsm,leveldb,...]
                    [--workloads fillseq,readrandom,...] [--rounds N] [--dir DIR] [--json PATH]

Prints the machine and the parameters, then one table per workload with each
store's throughput, its ratio to minilsm and its latency percentiles, then
minilsm's own counters per read (tables probed, filter negatives, false
positives, block reads, cache hits), then the headline: minilsm's rate as a
fraction of each peer's.  bench/workloads.py says exactly what is timed;
bench/peers.py how each peer is configured and how durable its writes are.

Each store runs every workload before the next store starts, in a fresh
directory under `--dir` (a new temporary directory by default) that is deleted
afterwards.  A store whose package is missing is skipped with a note.

Rounds.  On a shared machine one run's ratios can move by tens of percent
from the next run's.  `--rounds N` runs every store N times, round-robin (all
stores, then all stores again), so each round compares stores that ran
minutes apart.  The tables then show each store's median rate and latencies
over the rounds, and each ratio as the median of the N ratios paired within
a round, with their lowest and highest: a claim that holds in every round
holds from the lowest to the highest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import workloads as w
from bench.common import add_json_option, dir_bytes, format_table, print_header, write_json
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


def fmt_us(x: float | None) -> str | None:
    return None if x is None else f"{x:.2f}"


def median_of(xs: Iterable[float | None]) -> float | None:
    """The median of the values that are not None (None if there are none)."""
    present = [x for x in xs if x is not None]
    return statistics.median(present) if present else None


Rounds = list[dict[str, dict[str, Any]]]
"""One dict per round: store name -> {"facts": ..., "results": {workload: Result}}."""


def per_round(rounds: Rounds, store: str, name: str) -> list[w.Result | None]:
    """`store`'s result for workload `name` in each round (None where it has none)."""
    return [run["results"].get(name) if run is not None else None for run in (r.get(store) for r in rounds)]


def paired_ratios(rounds: Rounds, top: str, bottom: str, name: str) -> list[float]:
    """rate(top) / rate(bottom) for `name`, one per round in which both stores have a rate."""
    return [
        a.ops_per_sec / b.ops_per_sec
        for a, b in zip(per_round(rounds, top, name), per_round(rounds, bottom, name), strict=True)
        if a is not None and b is not None and a.ops_per_sec and b.ops_per_sec
    ]


def fmt_ratios(ratios: list[float]) -> str | None:
    """The median ratio; with several rounds, followed by the lowest and highest: "0.24 (0.20-0.33)"."""
    if not ratios:
        return None
    mid = f"{statistics.median(ratios):.2f}"
    return mid if len(ratios) == 1 else f"{mid} ({min(ratios):.2f}-{max(ratios):.2f})"


def workload_table(name: str, rounds: Rounds) -> str:
    rows = []
    for store, run in rounds[0].items():
        r = run["results"].get(name)
        if r is None:
            continue
        if r.skipped:
            rows.append([store, None, None, None, None, f"skipped: {r.skipped}"])
            continue
        every = per_round(rounds, store, name)
        rates = [x.ops_per_sec for x in every if x is not None and x.ops_per_sec]
        rate = median_of(rates)
        note = ""
        if name == "readwhilewriting":
            note = f"writer {median_of([x.extra['writes_per_sec'] for x in every if x is not None]):,.0f} puts/s"
        elif name == "seekrandom":
            note = f"{r.extra['keys_per_seek']:.1f} keys/seek"
        elif name.startswith("read"):
            note = f"found {100 * r.extra['found_fraction_in_sample']:.0f}% (sample)"
        stopped = [x.ops for x in every if x is not None and x.extra.get("stopped_early")]
        if stopped:
            ops = ", ".join(f"{n:,}" for n in stopped)
            note = "; ".join(x for x in (f"* stopped at the time budget after {ops} ops", note) if x)
        if len(rates) > 1:
            note = "; ".join(x for x in (f"rounds {min(rates):,.0f}-{max(rates):,.0f}", note) if x)
        unit = "keys/s" if r.unit == "key" else "ops/s"
        rows.append(
            [
                store,
                f"{rate:,.0f} {unit}" if rate else None,
                "1.00" if store == "minilsm" else fmt_ratios(paired_ratios(rounds, store, "minilsm", name)),
                fmt_us(median_of([x.p50_us for x in every if x is not None])),
                fmt_us(median_of([x.p99_us for x in every if x is not None])),
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
    table = format_table(headers, rows)
    if any(row[0] == "readwhilewriting" for row in rows):
        # The block counters count every data block the store touched, and the writer's compactions read
        # their inputs through the same counters while the reads run: those are no read's.
        table += (
            "\nreadwhilewriting: block reads and cache hits include the blocks the writer's compactions read"
            " meanwhile, so they exceed what the reads themselves touched (at most 1 + false positives each)"
        )
    return table


def headline(rounds: Rounds, selected: list[str]) -> str:
    if "minilsm" not in rounds[0]:
        return ""
    others = [s for s in rounds[0] if s != "minilsm"]
    if not others:
        return ""
    rows = [[name, *(fmt_ratios(paired_ratios(rounds, "minilsm", s, name)) for s in others)] for name in selected]
    return format_table(["minilsm / peer", *others], rows)


def summary(rounds: Rounds, selected: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """For the JSON: per store and workload, the rates of every round, their median, and the paired ratios."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for store in rounds[0]:
        for name in selected:
            rates = [r.ops_per_sec if r is not None else None for r in per_round(rounds, store, name)]
            if not any(rates):
                continue
            ratios = paired_ratios(rounds, "minilsm", store, name) if store != "minilsm" else []
            out.setdefault(store, {})[name] = {
                "ops_per_sec": rates,
                "ops_per_sec_median": median_of(rates),
                "minilsm_over_store": ratios or None,
                "minilsm_over_store_median": statistics.median(ratios) if ratios else None,
            }
    return out


def round_json(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        s: {"facts": r["facts"], "workloads": {n: res.to_dict() for n, res in r["results"].items()}}
        for s, r in runs.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--num", type=int, default=200_000, help="keys in the data set (default 200,000)")
    parser.add_argument("--reads", type=int, help="operations per read and delete workload (default --num)")
    parser.add_argument("--seeks", type=int, help="seeks in seekrandom (default --reads / 4)")
    parser.add_argument(
        "--stores", help="comma-separated stores to run (default: every available one but the minilsm-* variants)"
    )
    parser.add_argument("--workloads", help=f"comma-separated workloads (default: all of {','.join(WORKLOADS)})")
    parser.add_argument("--dir", help="where to put the stores (default: a new temporary directory)")
    parser.add_argument("--seed", type=int, default=301)
    parser.add_argument(
        "--budget",
        type=float,
        default=120.0,
        help="seconds after which a workload other than a fill stops early (default 120; 0: none)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every store this many times, round-robin; tables show medians and the spread of "
        "ratios paired within a round (default 1)",
    )
    add_json_option(parser)
    args = parser.parse_args(argv)
    reads = args.reads if args.reads is not None else args.num
    seeks = args.seeks if args.seeks is not None else max(1, reads // 4)
    if args.num < 1 or reads < 1 or seeks < 1 or args.rounds < 1:
        parser.error("--num, --reads, --seeks and --rounds must be positive")
    selected = WORKLOADS if args.workloads is None else tuple(args.workloads.split(","))
    unknown = set(selected) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    all_peers = peers(args.num)
    names = [p.name for p in all_peers]
    wanted = [p.name for p in all_peers if not p.on_request] if args.stores is None else args.stores.split(",")
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
        "rounds": args.rounds,
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
    rounds: Rounds = []
    try:
        for i in range(args.rounds):
            runs: dict[str, dict[str, Any]] = {}
            for peer in runnable:
                progress(f"{peer.name}:" if args.rounds == 1 else f"round {i + 1} of {args.rounds}, {peer.name}:")
                runs[peer.name] = run_store(peer, data, set(selected), root)
            rounds.append(runs)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)

    if args.rounds > 1:
        print(f"{args.rounds} rounds: rates and latencies are medians over the rounds; ratios are medians of the")
        print("ratios paired within each round, with the lowest and highest in brackets.\n")
    for name in selected:
        print(f"{name}: {DESCRIPTIONS[name].format(num=args.num, reads=reads, seeks=seeks)}")
        print(workload_table(name, rounds))
        print()
    first = rounds[0]
    if "minilsm" in first:
        print("minilsm counters per read" + (" (round 1)" if args.rounds > 1 else ""))
        print(counters_table(first["minilsm"]))
        print(write_amplification(first["minilsm"]))
        facts = first["minilsm"]["facts"]
        if "tables_per_level" in facts:
            print(
                f"tables per level after the load: {facts['tables_per_level']}; "
                f"settled in {facts['settle_seconds']:.2f} s after reopening"
            )
        print()
    table = headline(rounds, list(selected))
    if table:
        print("minilsm's rate as a fraction of each peer's (>= 1: minilsm is faster)")
        print(table)
        print()
    print(
        format_table(
            ["store", "seconds", "settled after reopening (s)", "disk bytes after load"],
            [
                [s, f"{f['seconds']:.1f}", f"{f.get('settle_seconds', 0.0):.2f}", f.get("disk_bytes_after_load")]
                for s, f in ((s, r["facts"]) for s, r in first.items())
            ],
        )
        + ("\n(round 1)" if args.rounds > 1 else "")
    )

    write_json(
        args.json,
        {
            "benchmark": "workloads",
            "machine": info,
            "params": shown,
            "stores": notes,
            # "results" is the first round, in the layout of a one-round run.
            "results": round_json(first),
            "rounds": [round_json(runs) for runs in rounds],
            "summary": summary(rounds, list(selected)),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
