"""Many threads on one store, closed at a random moment from a random thread, then reopened in another style.

The run and its oracles are in tests/threadstress.py: writers of per-thread counters (point reads are
linearizable, views show one point in time), bank transfers in write batches (every view sums to the same
total), pairs written together; scans forward and reverse with prefixes and bounds, snapshots held across
flushes and compactions (seek compactions included) and released by close, finalizer or the cycle
collector; close() racing all of it.  The normal suite runs two short epochs; ``--slow`` runs many seeds
(``MINILSM_STRESS_SEEDS``, default 40) of four epochs each, switching threads every microsecond or so.
"""

from __future__ import annotations

import os

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
