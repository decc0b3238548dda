"""Power cuts before every file-system call: each moment of a workload leaves a store that opens with its writes.

The other crash tests cut the power between operations
(test_fault_injection's ``test_crash_without_any_fault_at_many_moments``), at
an injected failure (its sweeps) or at a SIGKILL's random moment
(test_crash.py).  A mistake in the order of one operation's file-system calls
(a log removed before the manifest edit that retires it is durable, a manifest
edit not synced before the tables it drops are deleted, a table renamed into
place before its bytes are synced) shows only when the power goes between two
particular calls, which none of those aim at.  This module aims at each of
them: the workload of tests/faultworkload.py (with iterators left open and
reopens that switch ``max_levels`` and the compaction style added) runs once
over `FaultFS`, and before each chosen call `FaultFS.copy_durable` writes what
a power cut at that moment would leave of the store (unsynced appends lost, or
with ``torn`` a random part of them kept; creations, renames and removals not
made durable by a directory sync undone, or with ``dir_ops`` the first few of
them kept, as a journaling file system may: without that, a file deleted too
early, before the manifest edit that makes it garbage is durable, would always
come back at the cut) into a directory of its own, while the run goes on.
Every copy must then open, pass `check_invariants`, and hold what
`faultworkload.check_recovered` allows, the model the fault sweeps use:

* `acked` is the writes that had returned when the power went, in order;
* every one of them up to `floor` is there: `floor` counts the writes up to
  the last ``sync=True`` write, ``flush``, ``compact_range`` or open before
  the cut (each makes every write before it durable: a synced log record syncs
  the records before it, a flush or an open writes them to a synced table);
* of the later, ``sync=False`` ones a prefix is there, as their log records
  may be lost, but only from the end;
* the write in flight at the cut (called but not returned) may be there or not;
* nothing else: no write from after the cut, no deleted value come back.

A copy is checked once the run is over, so that one run of the workload gives
every cut point (a run per cut point would cost hundreds of times as much).
With ``--slow``, some copies are also cut again during their own recovery
(before every call of the open that recovers them, and of the reads and close
after it), and each of those once more at a call in the middle of its
recovery.  Those must hold exactly what the first recovery found: it was all
on disk in the copy, and a crash while recovering must not lose what was
durable before it.

``REWRITE_AFTER`` is made small in some runs so that the manifest starts new
files (written aside, synced, renamed over) in the middle of a run, not only at
an open.  The default run checks a few hundred cut points in seconds;
``--slow`` checks every call of several configurations, background mode
included.
"""

from __future__ import annotations

import os
import random
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from faultfs import FaultFS
from faultworkload import Cut, Op, PowerCuts, Run, check_recovered, drive, workload
from storeutil import fast_tmp_dir

import minilsm.manifest

CHECK_LEVELS = 6
"""The copies are opened with this many levels, as many as the workload's last reopen (a store opens only with
more levels than its deepest table's)."""


@dataclass(frozen=True)
class Config:
    seed: int
    sync: str
    """Which writes pass sync=True: "all", "none" or "mixed" (see `faultworkload.workload`)."""
    style: str
    background: bool
    torn: bool
    dir_ops: bool
    """`FaultFS.dir_ops`: some unsynced creations, renames and removals survive the cut."""
    rewrite_after: int | None
    """`minilsm.manifest.REWRITE_AFTER` for the run; None leaves the default (64 KiB: no new file but at an open)."""

    def __str__(self) -> str:
        return (
            f"seed={self.seed} sync={self.sync} {self.style} {'background' if self.background else 'inline'} "
            f"{'torn' if self.torn else 'lost'}{' dir_ops' if self.dir_ops else ''} rewrite_after={self.rewrite_after}"
        )


def cut_workload(cfg: Config, n: int) -> list[Op]:
    """`faultworkload.workload` with iterators left open and three reopens that change the options (a new
    max_levels also makes the manifest start a new file, as its edits name levels by number)."""
    ops = workload(cfg.seed, n, cfg.sync)
    rng = random.Random(cfg.seed)
    for _ in range(n // 25):
        ops.insert(rng.randrange(len(ops)), ("iter",))
    other = "tiered" if cfg.style == "leveled" else "leveled"
    # max_levels only grows: a smaller one would refuse to open a store with a table below it.
    reopens = ((0.3, {"max_levels": 5}), (0.6, {"max_levels": 5, "compaction_style": other}), (0.85, {"max_levels": 6}))
    for where, overrides in reopens:
        ops.insert(int(len(ops) * where), ("reopen", overrides))
    return ops


@pytest.fixture
def tmp() -> Iterator[str]:
    """A scratch directory in RAM where possible: a sweep writes a copy of the store per cut point."""
    with fast_tmp_dir() as d:
        yield d


def sweep(
    tmp: str,
    cfg: Config,
    monkeypatch: pytest.MonkeyPatch,
    n_ops: int,
    cuts: int | None,
    recovery_cuts_every: int | None = None,
) -> Counter[str]:
    """Cut the power before `cuts` calls spread over the run (every call if None) and check every copy.

    With `recovery_cuts_every`, every so many copies are also cut during their recovery, and again during that.
    Returns what was checked.
    """
    if cfg.rewrite_after is not None:
        monkeypatch.setattr(minilsm.manifest, "REWRITE_AFTER", cfg.rewrite_after)
    ops = cut_workload(cfg, n_ops)
    overrides = {"compaction_style": cfg.style}
    check_overrides = {**overrides, "max_levels": CHECK_LEVELS}
    store = os.path.join(tmp, "db")

    at = None
    if cuts is not None:  # a dry run counts the calls to spread the cuts over
        dry = FaultFS()
        drive(store, dry, ops, cfg.background, overrides).db.close()  # type: ignore[union-attr]
        total = dry.counts.total() - dry.counts["read"]
        at = range(1, total + 1, max(1, total // cuts))
        shutil.rmtree(store)

    fs = FaultFS(torn=cfg.torn, seed=cfg.seed, dir_ops=cfg.dir_ops)
    run = Run()
    power = PowerCuts(fs, store, os.path.join(tmp, "cuts"), at, run, ops)
    drive(store, fs, ops, cfg.background, overrides, run)
    assert not run.errors and run.db is not None, run.errors
    run.db.close()

    # The sweep really went through the paths it is meant to: a manifest new file in the middle of the run, not
    # only at each of the four opens, when REWRITE_AFTER is small, and tables deleted after compactions.
    opens = 1 + sum(op[0] == "reopen" for op in ops)
    if cfg.rewrite_after is not None and cfg.rewrite_after <= 300:
        assert power.calls["rename", "MANIFEST.tmp"] > opens, power.calls
    assert sum(n for (kind, name), n in power.calls.items() if kind == "remove" and name.endswith(".sst")) > 0

    checked = Counter[str]()
    rng = random.Random(cfg.seed)
    for i, cut in enumerate(power.cuts):
        assert cut.must is not None
        label = f"{cfg}: {cut.label(power.number)}"
        if recovery_cuts_every is None or i % recovery_cuts_every:
            check_recovered(cut.copy, ops, cut.must, label, overrides=check_overrides)
        else:
            checked += cut_recovery(cut, ops, cfg, check_overrides, label, rng)
        shutil.rmtree(cut.copy)
        checked["cut points"] += 1
        checked["with a write in flight"] += cut.must.failed_write is not None
        checked["before " + cut.kind] += 1
    checked["calls in the run (not reads)"] = power.number
    print(f"{cfg}: {dict(checked)}")
    return checked


def cut_recovery(
    cut: Cut, ops: list[Op], cfg: Config, overrides: dict[str, object], label: str, rng: random.Random
) -> Counter[str]:
    """Check `cut`'s copy while cutting the power before every call of its recovery; those copies must recover
    what it did, and so must each of them cut once more at a random call of its own recovery."""
    assert cut.must is not None
    fs = FaultFS(torn=cfg.torn, seed=cut.number, dir_ops=cfg.dir_ops)
    second = PowerCuts(fs, cut.copy, cut.copy + ".recovery", None)
    state = check_recovered(cut.copy, ops, cut.must, label, fs, overrides)
    checked = Counter[str]()
    for c2 in second.cuts:
        label2 = f"{label}, then during its recovery {c2.label(second.number)}"
        fs3 = FaultFS(torn=cfg.torn, seed=c2.number, dir_ops=cfg.dir_ops)
        third = PowerCuts(fs3, c2.copy, c2.copy + ".recovery", {rng.randint(1, second.number)})
        found = check_recovered(c2.copy, ops, cut.must, label2, fs3, overrides)
        assert found == state, f"{label2}: recovered other writes than the recovery it interrupted"
        checked["cut points during a recovery"] += 1
        for c3 in third.cuts:
            label3 = f"{label2}, then during that recovery {c3.label(third.number)}"
            found = check_recovered(c3.copy, ops, cut.must, label3, overrides=overrides)
            assert found == state, f"{label3}: recovered other writes than the recovery it interrupted"
            checked["cut points during a recovery of a recovery"] += 1
    shutil.rmtree(cut.copy + ".recovery")
    return checked


# -- the default run: a few hundred cut points ----------------------------------------------------------------

FAST = [
    Config(seed=1, sync="mixed", style="leveled", background=False, torn=False, dir_ops=True, rewrite_after=0),
    Config(seed=2, sync="none", style="tiered", background=False, torn=True, dir_ops=True, rewrite_after=200),
    Config(seed=3, sync="mixed", style="leveled", background=True, torn=False, dir_ops=True, rewrite_after=None),
]


@pytest.mark.parametrize("cfg", FAST, ids=str)
def test_a_power_cut_before_any_call_loses_no_acknowledged_write(
    cfg: Config, tmp: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = sweep(tmp, cfg, monkeypatch, n_ops=120, cuts=200, recovery_cuts_every=50)
    assert checked["cut points"] >= 150
    assert checked["cut points during a recovery"] > 0


# -- --slow: every call of more configurations, and cuts during recovery ---------------------------------------

SLOW = [
    Config(seed=11, sync="all", style="leveled", background=False, torn=False, dir_ops=False, rewrite_after=None),
    Config(seed=12, sync="mixed", style="leveled", background=False, torn=True, dir_ops=True, rewrite_after=300),
    Config(seed=13, sync="none", style="leveled", background=True, torn=False, dir_ops=True, rewrite_after=0),
    Config(seed=14, sync="mixed", style="tiered", background=False, torn=False, dir_ops=True, rewrite_after=0),
    Config(seed=15, sync="mixed", style="tiered", background=True, torn=True, dir_ops=True, rewrite_after=200),
    Config(seed=16, sync="none", style="tiered", background=False, torn=True, dir_ops=False, rewrite_after=None),
    Config(seed=17, sync="mixed", style="leveled", background=True, torn=True, dir_ops=True, rewrite_after=300),
    Config(seed=18, sync="all", style="tiered", background=True, torn=False, dir_ops=True, rewrite_after=None),
]


@pytest.mark.slow
@pytest.mark.parametrize("cfg", SLOW, ids=str)
def test_a_power_cut_before_every_call_and_during_recovery_loses_no_acknowledged_write(
    cfg: Config, tmp: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = sweep(tmp, cfg, monkeypatch, n_ops=200, cuts=None, recovery_cuts_every=10)
    assert checked["cut points"] == checked["calls in the run (not reads)"] >= 400
    assert checked["cut points during a recovery"] > 0
