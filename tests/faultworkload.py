"""The workload the fault-injection and power-cut tests run, and the model of which writes must survive a crash.

`workload` makes a deterministic list of operations (puts, deletes and batches
with or without sync, reads, scans, flushes, compactions, snapshots, a reopen);
`drive` runs it on a store, checking every read against the writes
acknowledged so far, and records in a `Run` which writes were acknowledged and
how many of them a crash must keep (`Run.floor`); `check_recovered` opens the
store after a crash and checks it against that record.  tests/test_fault_injection.py
fails file-system calls under it; tests/test_power_cut_sweep.py cuts the power
before them, with `PowerCuts` (which tests/test_checkpoint.py uses too).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from faultfs import FaultFS
from storeutil import check_invariants, small_options

import minilsm
from minilsm.errors import ClosedError, ReadOnlyError, StoreIOError

# -- the workload --------------------------------------------------------------------

Op = tuple  # ("put", key, value, sync) | ("delete", key, sync) | ("batch", ops, sync) | ("get", key) | ...
# ... | ("reopen",) | ("reopen", {option: value}) (a reopen with other options) | ("iter",) (an iterator left open)
WRITES = ("put", "delete", "batch")
KEYS = [b"key%03d" % i for i in range(40)]


def workload(seed: int, n: int, sync: str) -> list[Op]:
    """`n` operations; `sync` is "all", "none" or "mixed" (which writes pass sync=True)."""
    rng = random.Random(seed)
    ops: list[Op] = []
    for i in range(n):
        s = sync == "all" or (sync == "mixed" and rng.random() < 0.2)
        r = rng.random()
        key = rng.choice(KEYS)
        value = b"v%d." % i + bytes([rng.randrange(256)]) * rng.randrange(8, 160)
        if r < 0.55:
            ops.append(("put", key, value, s))
        elif r < 0.65:
            ops.append(("delete", key, s))
        elif r < 0.75:
            batch = [(rng.random() < 0.8, rng.choice(KEYS), b"b%d.%d" % (i, j) * 6) for j in range(rng.randrange(1, 6))]
            ops.append(("batch", batch, s))
        elif r < 0.88:
            ops.append(("get", key))
        elif r < 0.92:
            ops.append(("scan",))
        elif r < 0.95:
            ops.append(("flush",))
        elif r < 0.97:
            ops.append(("compact",))
        else:
            ops.append(("snapshot",))
    ops.insert(n // 2, ("reopen",))  # a clean close and a recovery, in the middle
    return ops


def apply(model: dict[bytes, bytes], op: Op) -> None:
    if op[0] == "put":
        model[op[1]] = op[2]
    elif op[0] == "delete":
        model.pop(op[1], None)
    elif op[0] == "batch":
        for is_put, k, v in op[1]:
            if is_put:
                model[k] = v
            else:
                model.pop(k, None)


def model_of(ops: list[Op], indexes: list[int]) -> dict[bytes, bytes]:
    model: dict[bytes, bytes] = {}
    for i in indexes:
        apply(model, ops[i])
    return model


# -- running it ----------------------------------------------------------------------

MINILSM_ERRORS = (StoreIOError, ReadOnlyError)


@dataclass
class Run:
    acked: list[int] = field(default_factory=list)
    """Indexes of the write ops that took effect, in order: those acknowledged, and a failed one that a
    reopen in the middle of the run found on disk."""
    failed_write: int | None = None
    """The first write op that raised since the last open (or, for a power cut in the middle of the run, the one
    in flight then): it may or may not have reached the disk."""
    floor: int = 0
    """How many of `acked` must survive a crash: up to the last sync=True write, flush or recovery."""
    errors: list[tuple[int, BaseException]] = field(default_factory=list)
    db: minilsm.DB | None = None
    current: int = -1
    """The index of the op running now: a power cut taken during the run reads it (test_power_cut_sweep.py)."""


def options(fs: FaultFS, background: bool, overrides: Mapping[str, object] | None = None) -> dict[str, object]:
    return small_options(fs=fs, background=background, **(overrides or {}))


def short(errors: list[tuple[int, BaseException]]) -> str:
    return "; ".join(f"op {i}: {type(e).__name__}: {str(e)[-120:]}" for i, e in errors[:3])


def drive(
    path: str,
    fs: FaultFS,
    ops: list[Op],
    background: bool = False,
    overrides: Mapping[str, object] | None = None,
    run: Run | None = None,
) -> Run:
    """Run `ops`, checking every outcome; the store is left open (or None if an open failed) in ``run.db``.

    `overrides` change `small_options` for every open; `run`, if given, is the record to fill in as the ops go.
    """
    run = Run() if run is None else run
    model: dict[bytes, bytes] = {}
    snapshots: list[tuple[minilsm.Snapshot, dict[bytes, bytes]]] = []
    iterators: list[minilsm.DBIterator[tuple[bytes, bytes]]] = []
    read_only = False
    try:
        db: minilsm.DB | None = minilsm.DB(path, **options(fs, background, overrides))
    except StoreIOError as e:
        run.errors.append((-1, e))
        return run
    for i, op in enumerate(ops):
        assert db is not None
        kind = op[0]
        run.current = i
        try:
            if kind == "put":
                db.put(op[1], op[2], sync=op[3])
            elif kind == "delete":
                db.delete(op[1], sync=op[2])
            elif kind == "batch":
                with db.write_batch(sync=op[2]) as wb:
                    for is_put, k, v in op[1]:
                        if is_put:
                            wb.put(k, v)
                        else:
                            wb.delete(k)
            elif kind == "get":
                assert db.get(op[1]) == model.get(op[1]), (i, op)
            elif kind == "scan":
                assert dict(db.iterator()) == model, i
            elif kind == "snapshot":
                for snap, view in snapshots:
                    assert dict(snap.iterator()) == view
                snapshots.append((db.snapshot(), dict(model)))
            elif kind == "iter":
                # Left open until the next reopen, it holds on to the tables it reads: a flush or compaction
                # meanwhile must leave them in place and delete them later.
                it = db.iterator()
                assert next(it, None) == min(model.items(), default=None), i
                iterators.append(it)
            elif kind == "flush":
                db.flush()
                run.floor = len(run.acked)
            elif kind == "compact":
                db.compact_range()
                run.floor = len(run.acked)  # compact_range flushes first
            elif kind == "reopen":
                snapshots.clear()
                iterators.clear()
                db.close()
                db = None
                db = minilsm.DB(path, **options(fs, background, {**(overrides or {}), **(op[1] if op[1:] else {})}))
                read_only = False
                if run.failed_write is not None:
                    # The failed write may have reached the log, and recovery replayed it: both are allowed.
                    state = dict(db.iterator())
                    if state != model:
                        apply(model, ops[run.failed_write])
                        assert state == model, f"op {i}: recovery found neither model ({short(run.errors)})"
                        run.acked.append(run.failed_write)
                    run.failed_write = None
                run.floor = len(run.acked)  # recovery wrote everything replayed to a synced table
        except MINILSM_ERRORS as e:
            run.errors.append((i, e))
            if kind in WRITES:
                if read_only:
                    assert isinstance(e, ReadOnlyError), f"op {i} {kind}: {e!r} after the store went read-only"
                elif run.failed_write is None:
                    run.failed_write = i
            if kind in WRITES or kind in ("flush", "compact") or isinstance(e, ReadOnlyError):
                read_only = True
            if kind == "reopen":
                break  # the failed open left no store behind
            continue
        except ClosedError as e:
            pytest.fail(f"op {i} {kind}: unexpected {e!r}")
        if kind in WRITES:
            assert not read_only, f"op {i}: a write succeeded on a read-only store ({short(run.errors)})"
            run.acked.append(i)
            apply(model, op)
            if op[-1]:
                run.floor = len(run.acked)
    run.db = db
    return run


def check_recovered(
    path: str,
    ops: list[Op],
    run: Run,
    label: str,
    fs: FaultFS | None = None,
    overrides: Mapping[str, object] | None = None,
) -> dict[bytes, bytes]:
    """Reopen after the crash; the state must be the acknowledged writes (or a prefix allowed by `run.floor`).

    The reopen runs over `fs` (a new `FaultFS` if None: no real fsync, so fast) with `overrides` of `small_options`.
    """
    try:
        db = minilsm.DB(path, **small_options(fs=fs or FaultFS(), **(overrides or {})))
    except Exception as e:
        raise AssertionError(f"{label}: the store does not open: {e}") from e
    with db:
        state = dict(db.iterator())
        for k in KEYS:
            assert db.get(k) == state.get(k), f"{label}: get and scan disagree on {k!r}"
        check_invariants(db)
    model: dict[bytes, bytes] = {}
    for n in range(len(run.acked) + 1):
        if n:
            apply(model, ops[run.acked[n - 1]])
        if n >= run.floor and state == model:
            return state
    if run.failed_write is not None:
        apply(model, ops[run.failed_write])
        if state == model:
            return state
    full = model_of(ops, run.acked)
    lost = sorted(k for k in full if state.get(k) != full[k])[:5]
    extra = sorted(k for k in state if k not in full)[:5]
    pytest.fail(
        f"{label}: recovered state is no allowed prefix of the {len(run.acked)} acknowledged writes "
        f"(floor {run.floor}, failed write {run.failed_write}); differing keys e.g. {lost}, unexpected {extra}; "
        f"errors: {short(run.errors)}"
    )


# -- power cuts in the middle of a run ------------------------------------------------


def acknowledged_at_cut(run: Run, ops: Sequence[Op]) -> Run:
    """What a power cut now must keep, from `run` as `drive` fills it in: acked, floor, and the write in flight.

    In background mode the cut comes from the background thread while the workload's thread runs on, so
    the fields are read in an order that keeps them consistent: `floor` first (it only grows, and never past
    ``len(acked)``), then the op running, then `acked`, so that a write that returns between those two reads
    is taken as acknowledged, not in flight.  Whatever they say was made durable before the cut: a write's
    or flush's file-system calls all come before its acknowledgement, and the cut holds the lock every call takes.
    """
    floor = run.floor
    current = run.current
    acked = list(run.acked)
    in_flight = current >= 0 and ops[current][0] in WRITES and (not acked or acked[-1] < current)
    return Run(acked=acked, floor=floor, failed_write=current if in_flight else None)


@dataclass
class Cut:
    number: int
    kind: str
    path: str
    copy: str
    """The directory holding what the cut left of the store."""
    must: Run | None
    """What it must hold (`acknowledged_at_cut`), if the copies were taken during a `drive`."""

    def label(self, total: int) -> str:
        return f"cut {self.number}/{total} before {self.kind} {os.path.basename(self.path)}"


class PowerCuts:
    """`FaultFS.on_call` hook: before each call whose number is in `at` (every call if None), a copy of `store` as
    a power cut then would leave it, in a new directory under `root`.

    Reads are not numbered, and have no cut before them: the durable state before a read is the one before the
    next call that is not a read, where the model is at least as strict (nothing a write does goes without a call).
    """

    def __init__(
        self,
        fs: FaultFS,
        store: str,
        root: str,
        at: Container[int] | None,
        run: Run | None = None,
        ops: Sequence[Op] = (),
    ) -> None:
        self.fs, self.store, self.root, self.at, self.run, self.ops = fs, store, root, at, run, ops
        self.number = 0
        self.cuts: list[Cut] = []
        self.calls: Counter[tuple[str, str]] = Counter()
        """Every call by (kind, file name): what the run exercised."""
        fs.on_call = self

    def __call__(self, kind: str, path: str) -> None:
        self.calls[kind, os.path.basename(path)] += 1
        if kind == "read":
            return
        self.number += 1
        if self.at is not None and self.number not in self.at:
            return
        must = None if self.run is None else acknowledged_at_cut(self.run, self.ops)
        copy = os.path.join(self.root, str(self.number))
        self.fs.copy_durable(self.store, copy)
        self.cuts.append(Cut(self.number, kind, path, copy, must))
