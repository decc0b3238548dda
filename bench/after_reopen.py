"""Point reads in the minutes after a reopen: what seek compaction costs while it reshapes a store, and buys after.

``python -m bench.after_reopen [--num N] [--seconds S] [--settings on,off] [--dir DIR] [--json PATH]``
loads `--num` keys in random order (as ``python -m bench``'s fillrandom), closes the store, reopens it and
waits for its compactions.  Then, for each setting of ``seek_compaction``, it copies that settled store,
opens the copy and for `--seconds` alternates chunks of present-key and missing-key reads (the absent keys
lie inside the data, so only filters reject them), reporting per tenth of the time (or per chunk of each
kind, if that takes longer) each kind's rate, the compactions run so far and the tables per level.  Every
setting starts from the same files, so the settings differ only in what the reads set off.  Rates are
wall-clock over the chunk, so compaction running in the background thread (which shares the interpreter lock
with the reads) slows them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections import deque
from typing import Any

from bench import common
from bench import workloads as w
from bench.peers import MiniLSMStore

CHUNK = 5_000
"""Reads of each kind between two clock readings."""


def _tables_per_level(store: MiniLSMStore) -> list[int]:
    return [len(level) for level in store.db.version.levels]


def timeline(path: str, data: w.Data, seek_compaction: bool, seconds: float) -> list[dict[str, Any]]:
    """Read present and missing keys in turn for `seconds`; a row per tenth of the time (at least a chunk of each)."""
    store = MiniLSMStore(path, seek_compaction=seek_compaction)
    store.settle()
    get = store.get
    present = (k for chunk in data.random_keys("reopen-present", 10**12) for k in chunk)
    missing = (k for chunk in data.random_keys("reopen-missing", 10**12, missing=True) for k in chunk)
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    window_end = start + seconds / 10
    done = {"present": 0, "missing": 0}
    spent = {"present": 0.0, "missing": 0.0}
    while True:
        for kind, keys in (("present", present), ("missing", missing)):
            batch = [next(keys) for _ in range(CHUNK)]
            a = time.perf_counter()
            deque(map(get, batch), maxlen=0)
            spent[kind] += time.perf_counter() - a
            done[kind] += CHUNK
        now = time.perf_counter()
        if now >= window_end:
            stats = store.db.stats()
            rows.append(
                {
                    "until_s": round(now - start, 1),
                    "present_per_sec": done["present"] / spent["present"],
                    "missing_per_sec": done["missing"] / spent["missing"],
                    "compactions": stats.compactions,
                    "compaction_mib_written": stats.compaction_bytes_written / 2**20,
                    "tables_per_level": _tables_per_level(store),
                }
            )
            done = {"present": 0, "missing": 0}
            spent = {"present": 0.0, "missing": 0.0}
            if now - start >= seconds:
                break
            window_end = now + seconds / 10
    store.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.after_reopen", description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=1_000_000, help="keys (default 1,000,000)")
    parser.add_argument("--seconds", type=float, default=150.0, help="reading time per setting (default 150)")
    parser.add_argument("--settings", default="on,off", help="seek_compaction settings to run, in order")
    parser.add_argument("--dir", help="where to build the store (default: a new temporary directory)")
    common.add_json_option(parser)
    args = parser.parse_args(argv)
    settings = [s.strip() for s in args.settings.split(",")]
    if args.num < 2 or args.seconds <= 0 or not settings or any(s not in ("on", "off") for s in settings):
        parser.error("--num must be at least 2, --seconds positive, --settings a list of on and off")
    machine = common.print_header(
        "Point reads after a reopen, seek compaction on and off",
        {"num": args.num, "seconds": args.seconds, "settings": ",".join(settings), "chunk": CHUNK},
    )
    data = w.Data(w.Params(num=args.num, reads=0, seeks=0))
    root = tempfile.mkdtemp(prefix="minilsm-reopen-", dir=args.dir)
    base, run = os.path.join(root, "settled"), os.path.join(root, "run")
    report: dict[str, Any] = {"machine": machine, "params": vars(args), "runs": {}}
    try:
        store = MiniLSMStore(base, seek_compaction=False)
        load_start = time.perf_counter()
        w.fill(store, data, "fillrandom")
        store.close()
        store = MiniLSMStore(base, seek_compaction=False)
        store.settle()
        settled = _tables_per_level(store)
        store.close()
        print(f"loaded and settled in {time.perf_counter() - load_start:.0f} s: tables per level {settled}\n")
        report["settled_tables_per_level"] = settled
        for setting in settings:
            shutil.rmtree(run, ignore_errors=True)
            shutil.copytree(base, run)
            rows = timeline(run, data, setting == "on", args.seconds)
            report["runs"][setting] = rows
            print(f"seek_compaction {setting}:")
            table = [
                [
                    f"{r['until_s']:.1f}",
                    f"{r['present_per_sec']:,.0f}",
                    f"{r['missing_per_sec']:,.0f}",
                    r["compactions"],
                    f"{r['compaction_mib_written']:,.0f}",
                    str(r["tables_per_level"]),
                ]
                for r in rows
            ]
            headers = ["until (s)", "present/s", "missing/s", "compactions", "MiB written", "tables per level"]
            print(common.format_table(headers, table))
            print()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    common.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
