"""Many threads on one store, closed at a random moment from a random thread, then reopened in another style.

The run and its oracles are in tests/threadstress.py: writers of per-thread counters (point reads are
linearizable, views show one point in time), bank transfers in write batches (every view sums to the same
total), pairs written together; scans forward and reverse with prefixes and bounds, snapshots held across
flushes and compactions (seek compactions included) and released by close, finalizer or the cycle
collector; close() racing all of it.  The normal suite runs two short epochs; ``--slow`` runs many seeds
(``MINILSM_STRESS_SEEDS``, default 40) of four epochs each, switching threads every microsecond or so, and
as many runs of threads racing one injected I/O failure (tests/faultfs.py).
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable

import pytest
from threadstress import Epoch, initialise, run_epoch, run_seed

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc (Linux)")


def test_threads_racing_each_other_and_close_see_one_consistent_store(db_path: str) -> None:
    """Two epochs: background leveled, then inline tiered over the same store, with fast thread switches."""
    model = initialise(db_path)
    for n, (style, background) in enumerate([("leveled", True), ("tiered", False)]):
        ep = Epoch(style=style, background=background, switch=1e-5, seed=n, duration=0.8)
        out = run_epoch(db_path, model, ep)
        assert out.flushes > 2 and out.compactions > 0, f"nothing for the threads to race with: {out}"
        assert all(n > 0 for n in out.counts.values()), out.counts


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(int(os.environ.get("MINILSM_STRESS_SEEDS", "40"))))
def test_threads_racing_each_other_and_close_many_seeds(db_path: str, seed: int) -> None:
    run_seed(db_path, 1000 + seed, epochs=4, duration=1.5)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(int(os.environ.get("MINILSM_STRESS_SEEDS", "40"))))
def test_threads_racing_an_io_failure_see_only_store_errors_and_lose_no_write(db_path: str, seed: int) -> None:
    """Writers (puts and batches), readers, scans, snapshots, flushes and compactions racing one injected I/O
    failure (any kind, once or from then on): every call returns or raises StoreIOError / ReadOnlyError, no
    thread hangs, and after a process crash every acknowledged write is there.  (A remove failing from then on
    is left out: each sweep then retries every undeletable file, so the run slows quadratically, as
    LevelDB's would.)"""
    import errno

    from faultfs import STORE_KINDS, FaultFS
    from storeutil import crash, small_options

    import minilsm

    rng = random.Random(seed)
    kind = rng.choice(STORE_KINDS)
    sticky = rng.random() < 0.3 and kind != "remove"
    fs = FaultFS()
    opts = small_options(fs=fs, background=rng.random() < 0.7, compaction_style=rng.choice(["leveled", "tiered"]))
    db = minilsm.DB(db_path, **opts)
    fs.arm(kind, rng.randrange(1, 400), rng.choice([errno.EIO, errno.ENOSPC]), sticky=sticky)
    acked: list[dict[bytes, bytes]] = [{} for _ in range(3)]
    unexpected: list[BaseException] = []
    stop = threading.Event()
    store_errors = (minilsm.StoreIOError, minilsm.ReadOnlyError)

    def guarded(call: Callable[[], object]) -> bool:
        try:
            call()
        except store_errors:
            return False
        except BaseException as e:
            unexpected.append(e)
            stop.set()
            return False
        return True

    def writer(t: int) -> None:
        for n in range(2000):
            k, v = b"t%d-%03d" % (t, n % 100), b"%d" % n * 10
            if n % 3 == 0:

                def batch(k: bytes = k, v: bytes = v) -> None:
                    with db.write_batch() as wb:
                        wb.put(k, v)
                        wb.put(k + b"b", v)

                if not guarded(batch):
                    return
                acked[t][k + b"b"] = v
            elif not guarded(lambda k=k, v=v: db.put(k, v)):
                return
            acked[t][k] = v

    def reader() -> None:
        r = random.Random()

        def snapshot_reads() -> None:
            with db.snapshot() as snap:
                snap.get(b"t0-001")
                list(snap.iterator(reverse=True))

        while not stop.is_set():
            guarded(lambda: db.get(b"t%d-%03d" % (r.randrange(3), r.randrange(100))))
            guarded(lambda: list(db.iterator(prefix=b"t1", reverse=r.random() < 0.5)))
            guarded(snapshot_reads)
            if r.random() < 0.05:
                guarded(db.flush)
            if r.random() < 0.02:
                guarded(db.compact_range)

    writers = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(3)]
    readers = [threading.Thread(target=reader, daemon=True) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(120)
        assert not t.is_alive(), f"a writer hangs ({kind}, sticky={sticky})"
    stop.set()
    for t in readers:
        t.join(120)
        assert not t.is_alive(), f"a reader hangs ({kind}, sticky={sticky})"
    assert not unexpected, unexpected
    crash(db)  # a process crash: every acknowledged record reached the OS
    with minilsm.DB(db_path, **small_options()) as db:
        for t in range(3):
            assert {k: db.get(k) for k in acked[t]} == acked[t], f"writer {t} lost writes ({kind}, sticky={sticky})"
