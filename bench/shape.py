"""How much of a point read's cost is the store's shape (tables per level), and how much the code?

``python -m bench.shape [--num N] [--reads R] [--json PATH]`` loads minilsm and LevelDB the way
``python -m bench`` does (every key once in random order, then `num` overwrites), closes, reopens and
settles them, then reads present and absent keys in four equal parts, printing the tables per level
after each part: seek compaction (a table probed too often without a hit is compacted into the level
below) changes both stores' shapes during reads.  Then it runs minilsm's
`compact_range`, which leaves one table per key range, and reads again: the rate a missing-key read
reaches when only one filter is asked, whatever the store's history.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import deque
from typing import Any

from bench import common
from bench import workloads as w
from bench.peers import LevelDBStore, MiniLSMStore, Store


def _tables_per_level(store: Store) -> list[int]:
    if isinstance(store, MiniLSMStore):
        return [len(level) for level in store.db.version.levels]
    assert isinstance(store, LevelDBStore)
    return [int(store.db.get_property(b"leveldb.num-files-at-level%d" % n)) for n in range(7)]


def _read_parts(store: Store, data: w.Data, label: str, missing: bool, parts: int = 4) -> list[dict[str, Any]]:
    """Rate of each of `parts` runs of reads, and the tables per level after it."""
    p = data.params
    keys = [k for chunk in data.random_keys(label, p.reads, missing=missing) for k in chunk]
    get, step, out = store.get, len(keys) // parts, []
    for i in range(parts):
        part = keys[i * step : (i + 1) * step]
        start = time.perf_counter()
        deque(map(get, part), maxlen=0)
        out.append({"ops_per_sec": len(part) / (time.perf_counter() - start), "tables": _tables_per_level(store)})
    return out


def _loaded(name: str, path: str, data: w.Data) -> Store:
    store: Store = MiniLSMStore(path) if name == "minilsm" else LevelDBStore(path)
    w.fill(store, data, "fillrandom")
    w.overwrite(store, data)
    store.close()
    store = MiniLSMStore(path) if name == "minilsm" else LevelDBStore(path)
    store.settle()
    return store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shape", description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=1_000_000, help="keys (default 1,000,000)")
    parser.add_argument("--reads", type=int, default=1_000_000, help="reads of each kind (default 1,000,000)")
    common.add_json_option(parser)
    args = parser.parse_args(argv)
    params = w.Params(num=args.num, reads=args.reads, seeks=0)
    machine = common.print_header("Store shape and point reads", {"num": args.num, "reads": args.reads})
    data = w.Data(params)
    names = ["minilsm", "leveldb"]
    try:
        import plyvel  # noqa: F401
    except ImportError:
        names.remove("leveldb")
        print("leveldb skipped: pip install plyvel", file=sys.stderr)
    root = tempfile.mkdtemp(prefix="minilsm-shape-")
    report: dict[str, Any] = {"machine": machine, "params": vars(args), "runs": []}
    rows: list[list[object]] = []
    try:
        for name in names:
            store = _loaded(name, os.path.join(root, name), data)
            stages = [("as settled", store)]
            if isinstance(store, MiniLSMStore):
                stages.append(("after compact_range", store))
            for stage, s in stages:
                if stage == "after compact_range":
                    assert isinstance(s, MiniLSMStore)
                    s.db.compact_range()
                before = _tables_per_level(s)
                for kind, missing in (("present", False), ("missing", True)):
                    parts = _read_parts(s, data, f"shape-{kind}", missing)
                    report["runs"].append(
                        {"store": name, "stage": stage, "reads": kind, "tables_before": before, "parts": parts}
                    )
                    for i, part in enumerate(parts):
                        rows.append(
                            [name, stage, kind, f"{i + 1}/4", f"{part['ops_per_sec']:,.0f}", str(part["tables"])]
                        )
            store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(common.format_table(["store", "stage", "reads", "part", "ops/s", "tables per level after"], rows))
    common.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
