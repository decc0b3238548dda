"""Real crashes: SIGKILL a writing child process at random moments, reopen, and check every acknowledged write.

The child (tests/crash_child.py) applies a deterministic sequence of puts,
deletes and batches with ``sync=True`` and reports each acknowledgement, and
the start and end of every flush and compaction, over a pipe.  The parent
kills it at a random point: after a random number of acknowledgements, just
after a flush or a compaction started, or during the open (recovery of the
previous kill).  Then, on a copy of the directory, the store must open and
hold exactly the writes acknowledged so far, plus possibly the one in flight,
with no orphan or missing table.  The next child continues from the crashed
directory itself, so every open recovers a real crash.

CI runs a few dozen kills; ``--kills N`` (with ``--slow`` for the tiered run)
runs N, e.g. ``pytest tests/test_crash.py --kills 1000 --slow``.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from crash_child import NUM_KEYS, apply, make_op, options
from storeutil import check_invariants

import minilsm
from minilsm import worker

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_child.py")
ROOT = os.path.dirname(os.path.dirname(CHILD))


def kill_once(path: str, seed: int, first: int, style: str, rng: random.Random) -> tuple[int, str, str]:
    """Run one child from op `first` and SIGKILL it; returns (last acknowledged op, aim, where it died)."""
    background = rng.random() < 0.7
    aim = rng.choice(["acks", "acks", "flush", "compaction", "open"])
    proc = subprocess.Popen(
        [sys.executable, CHILD, path, str(seed), str(first), style, "1" if background else "0"],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.stdout is not None
    # A safety net: whatever the aim, the child dies within a few seconds.
    timer = threading.Timer(rng.uniform(0.1, 0.5) if aim == "open" else 20.0, proc.kill)
    timer.start()
    acks_wanted = rng.randrange(1, 250)
    last = first - 1
    started = opened = False
    flushing = compacting = 0
    try:
        for raw in proc.stdout:
            line = raw.decode().strip()
            if line.startswith("A "):
                last = int(line[2:])
                if aim == "acks" and last - first + 1 >= acks_wanted:
                    time.sleep(rng.uniform(0, 0.002))  # land in the middle of the next op, often
                    proc.kill()
                elif last - first > 2000:
                    proc.kill()  # the aimed-for event did not come
            elif line == "I":
                started = True
            elif line == "O":
                opened = True
            elif line in ("F+", "C+"):
                if line == "F+":
                    flushing += 1
                else:
                    compacting += 1
                if aim == ("flush" if line == "F+" else "compaction"):
                    time.sleep(rng.uniform(0, 0.01))
                    proc.kill()
            elif line == "F-":
                flushing -= 1
            elif line == "C-":
                compacting -= 1
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
        proc.stdout.close()  # the pipe is ours to close, the child being dead (else a ResourceWarning)
    assert proc.returncode == -9, f"the child died by itself (exit code {proc.returncode})"
    where = (
        "startup"
        if not started
        else "open"
        if not opened
        else "compaction"
        if compacting
        else "flush"
        if flushing
        else "write"
    )
    return last, aim, where


def verify(path: str, style: str, model: dict[bytes, bytes], in_flight: tuple[object, ...]) -> bool:
    """Open a copy of the crashed store; True if the in-flight op took effect (which is allowed), else False."""
    copy = path + ".verify"
    shutil.rmtree(copy, ignore_errors=True)
    # A compaction worker may outlive the killed child for the rest of its job, writing into a scratch directory
    # that is not the store's state (the next open deletes it): copying it could race that worker's renames.
    shutil.copytree(path, copy, ignore=shutil.ignore_patterns(f"{worker.SCRATCH_PREFIX}*{worker.SCRATCH_SUFFIX}"))
    with minilsm.DB(copy, **{**options(style, False), "sync": False}) as db:
        state = dict(db.iterator())
        for i in range(NUM_KEYS):
            k = b"key%04d" % i
            assert db.get(k) == state.get(k), f"get and scan disagree on {k!r}"
        check_invariants(db)
    shutil.rmtree(copy)
    if state == model:
        return False
    with_op = dict(model)
    apply(with_op, in_flight)
    if state == with_op:
        return True
    lost = sorted(k for k in model if state.get(k) != model[k])[:5]
    extra = sorted(k for k in state if k not in model)[:5]
    pytest.fail(f"recovered state differs from the acknowledged writes: keys {lost} lost or wrong, {extra} unexpected")


def run_kills(path: str, kills: int, seed: int, style: str) -> Counter[str]:
    rng = random.Random(seed)
    model: dict[bytes, bytes] = {}
    first = 0
    where: Counter[str] = Counter()
    for _ in range(kills):
        last, aim, died = kill_once(path, seed, first, style, rng)
        for i in range(first, last + 1):
            apply(model, make_op(seed, i))
        in_flight = make_op(seed, last + 1)
        if verify(path, style, model, in_flight):
            apply(model, in_flight)
            where["in-flight op recovered"] += 1
            last += 1
        first = last + 1
        where[f"died during {died}"] += 1
        where[f"aimed at {aim}"] += 1
    where["acknowledged ops"] = first
    return where


def test_sigkill_loses_no_acknowledged_write_leveled(db_path: str, request: pytest.FixtureRequest) -> None:
    kills = request.config.getoption("--kills") or 24
    where = run_kills(db_path, kills, seed=1, style="leveled")
    print(f"leveled, {kills} kills: {dict(where)}")
    assert where["acknowledged ops"] > kills  # the children did make progress
    if kills >= 24:
        assert where["died during flush"] + where["died during compaction"] > 0, where


@pytest.mark.slow
def test_sigkill_loses_no_acknowledged_write_tiered(db_path: str, request: pytest.FixtureRequest) -> None:
    kills = request.config.getoption("--kills") or 24
    where = run_kills(db_path, kills, seed=2, style="tiered")
    print(f"tiered, {kills} kills: {dict(where)}")
