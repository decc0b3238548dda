"""Process CPU time per operation of whichever minilsm this process imports: for pure-vs-compiled A/Bs.

``python -m bench.cpu_per_op STORE SCRATCH`` prints one JSON line: microseconds of process CPU (all
threads) per present-key get, missing-key get, scanned key, seek plus 10 keys, and random-order put
(100k puts into a new store at SCRATCH, through `wait_for_compactions`).  STORE is a 200k-key store
(keys ``b"%016d" % (2*i)``, 100-byte values), made on the first run and only read after that, so
every run reads the same files.  Run it alternately from the repository and from a
`bench.mypyc_build` directory (``python -m`` imports the package of the current directory) and
compare medians: CPU time is less disturbed than wall time by other work on a shared machine.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable

import minilsm

NUM = 200_000
OPS = 50_000


def cpu_us(fn: Callable[[], object], n: int) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) / n * 1e6


def make_store(path: str) -> None:
    keys = [b"%016d" % (2 * i) for i in range(NUM)]
    random.Random(1).shuffle(keys)
    with minilsm.DB(path) as db:
        for k in keys:
            db.put(k, os.urandom(100))
        db.wait_for_compactions()


def measure(store: str, scratch: str) -> dict[str, object]:
    rnd = random.Random(7)
    present = [b"%016d" % (2 * rnd.randrange(NUM)) for _ in range(OPS)]
    missing = [b"%016d" % (2 * rnd.randrange(NUM) + 1) for _ in range(OPS)]
    out: dict[str, object] = {"minilsm": minilsm.db.__file__}
    with minilsm.DB(store, create_if_missing=False) as db:
        get = db.get
        for _ in range(2):  # the same warm-up in every run: OS cache and block cache
            for k in present[:5000]:
                get(k)
        out["get_present_us"] = cpu_us(lambda: [get(k) for k in present], len(present))
        out["get_missing_us"] = cpu_us(lambda: [get(k) for k in missing], len(missing))
        out["scan_us_per_key"] = cpu_us(lambda: sum(1 for _ in db.iterator()), NUM)

        def seek10() -> None:
            for k in present[:5000]:
                it = db.iterator(start=k)
                for _ in range(10):
                    next(it, None)
                it.close()

        out["seek10_us"] = cpu_us(seek10, 5000)
    keys = [b"%016d" % (2 * i) for i in range(100_000)]
    rnd.shuffle(keys)
    value = os.urandom(100)
    shutil.rmtree(scratch, ignore_errors=True)
    with minilsm.DB(scratch) as db:
        put = db.put

        def load() -> None:
            for k in keys:
                put(k, value)
            db.wait_for_compactions()

        out["fillrandom_us"] = cpu_us(load, len(keys))
    shutil.rmtree(scratch, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    store, scratch = args
    if not os.path.exists(store):
        make_store(store)
    print(json.dumps(measure(store, scratch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
