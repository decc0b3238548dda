"""Space after mass deletes: what each store keeps on disk once most of its keys are deleted.

``python -m bench.mass_delete [--num N] [--fraction F] [--stores a,b] [--json PATH]`` loads `--num` keys
in random order (16-byte keys, 100-byte values, as ``python -m bench``), closes and reopens the store and
waits for its compactions, then deletes a random `--fraction` of the keys in random order, closes, reopens
and waits again.  It prints the bytes in the store's directory at both points beside the live data (the
keys and values that remain), and the deletes' rate.  A store that keeps the deleted values (LevelDB keeps
them until a merge from above reaches their tables) stays near its loaded size; one that compacts tables of
mostly tombstones (minilsm's `tombstone_compaction`) comes down toward the live data.  The default stores
are minilsm, minilsm without tombstone compaction (`minilsm-notomb`), the same two size-tiered
(`minilsm-tiered`, `minilsm-tiered-notomb`), LevelDB and RocksDB (each skipped with a note if its package is
missing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any

from bench import common
from bench import workloads as w
from bench.peers import Peer, peers

DEFAULT_STORES = "minilsm,minilsm-notomb,minilsm-tiered,minilsm-tiered-notomb,leveldb,rocksdb"


def run_store(peer: Peer, path: str, data: w.Data, fraction: float) -> dict[str, Any]:
    """Load, settle, delete `fraction` of the keys, settle again; the sizes and times of one store."""
    store = peer.open(path)
    w.fill(store, data, "fillrandom")
    store.close()
    store = peer.open(path)
    store.settle()
    loaded = common.dir_bytes(path)
    num = data.params.num
    doomed = data.rng("mass-delete").sample(range(num), int(num * fraction))
    delete = store.delete
    start = time.perf_counter()
    for i in doomed:
        delete(w.present_key(i))
    seconds = time.perf_counter() - start
    store.close()
    store = peer.open(path)
    settle = store.settle()
    after = common.dir_bytes(path)
    store.close()
    live = (num - len(doomed)) * (len(w.present_key(0)) + data.params.value_size)
    return {
        "loaded_bytes": loaded,
        "after_bytes": after,
        "live_bytes": live,
        "space_over_live": after / live if live else None,
        "deletes": len(doomed),
        "deletes_per_sec": len(doomed) / seconds if seconds else None,
        "settle_seconds": settle,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mass_delete", description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=200_000, help="keys loaded (default 200,000)")
    parser.add_argument("--fraction", type=float, default=0.9, help="fraction of them deleted (default 0.9)")
    parser.add_argument("--stores", default=DEFAULT_STORES, help=f"stores to run (default {DEFAULT_STORES})")
    parser.add_argument("--dir", help="where to build the stores (default: a new temporary directory)")
    common.add_json_option(parser)
    args = parser.parse_args(argv)
    if args.num < 1 or not 0 < args.fraction < 1:
        parser.error("--num must be positive and --fraction in (0, 1)")
    by_name = {p.name: p for p in peers(args.num)}
    names = [n.strip() for n in args.stores.split(",") if n.strip()]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        parser.error(f"unknown store(s): {', '.join(unknown)}; known: {', '.join(by_name)}")
    machine = common.print_header(
        "Space after mass deletes", {"num": args.num, "fraction": args.fraction, "stores": ",".join(names)}
    )
    data = w.Data(w.Params(num=args.num, reads=0, seeks=0))
    root = tempfile.mkdtemp(prefix="minilsm-massdelete-", dir=args.dir)
    results: dict[str, Any] = {}
    try:
        for name in names:
            peer = by_name[name]
            note = peer.available()
            if note is not None:
                print(note)
                continue
            results[name] = run_store(peer, os.path.join(root, name), data, args.fraction)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mib = 1 << 20
    rows = [
        [
            name,
            f"{r['loaded_bytes'] / mib:.1f}",
            f"{r['after_bytes'] / mib:.1f}",
            f"{r['live_bytes'] / mib:.1f}",
            f"{r['space_over_live']:.2f}",
            f"{r['deletes_per_sec']:,.0f}",
            f"{r['settle_seconds']:.2f}",
        ]
        for name, r in results.items()
    ]
    headers = ["store", "MiB loaded", "MiB after deletes", "MiB live", "after / live", "deletes/s", "settle s"]
    print(common.format_table(headers, rows))
    print(f"\n'after deletes': closed, reopened and settled after deleting {args.fraction:.0%} of the keys")
    common.write_json(
        args.json, {"benchmark": "mass_delete", "machine": machine, "params": vars(args), "results": results}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
