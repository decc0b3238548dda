"""The store against a plain dict, step by step: writes, reads, scans, flushes, compactions,
snapshots, reopen and simulated crashes, in both compaction styles."""

from __future__ import annotations

import os
import shutil
import tempfile
from functools import partial

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)
from storeutil import Cursor, check_invariants, crash, move_alike, small_options

import minilsm

keys = st.binary(min_size=0, max_size=6).filter(lambda k: True) | st.sampled_from([b"", b"a", b"ab", b"b", b"\xff"])
values = st.binary(max_size=40) | st.binary(min_size=200, max_size=600)


class StoreMachine(RuleBasedStateMachine):
    style = "leveled"
    background = False
    mmap_reads = False

    snapshots = Bundle("snapshots")
    cursors = Bundle("cursors")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="minilsm-state-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        self.dirs = [self.dir]  # the store's, then each checkpoint's
        self.model: dict[bytes, bytes] = {}
        self.snaps: dict[int, tuple[minilsm.DB, minilsm.Snapshot, dict[bytes, bytes]]] = {}
        self.next_snap = 0
        # Iterators left open while the store changes: each with its model and what it yields of a pair.
        self.cursors: dict[int, tuple[minilsm.DBIterator[object], Cursor, slice]] = {}
        self.next_cursor = 0
        self.db = self._open()

    def _options(self) -> dict[str, object]:
        return small_options(compaction_style=self.style, background=self.background, mmap_reads=self.mmap_reads)

    def _open(self) -> minilsm.DB:
        return minilsm.DB(self.dir, **self._options())

    def teardown(self) -> None:
        try:
            self.db.close()
        finally:  # a failing example's store must not stay behind in /dev/shm either
            for d in self.dirs:
                shutil.rmtree(d, ignore_errors=True)

    # -- writes --
    @rule(key=keys, value=values)
    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, value)
        self.model[key] = value

    @rule(key=keys)
    def delete(self, key: bytes) -> None:
        self.db.delete(key)
        self.model.pop(key, None)

    @rule(ops=st.lists(st.tuples(st.booleans(), keys, values), max_size=8))
    def batch(self, ops: list[tuple[bool, bytes, bytes]]) -> None:
        with self.db.write_batch() as wb:
            for is_put, k, v in ops:
                if is_put:
                    wb.put(k, v)
                else:
                    wb.delete(k)
        for is_put, k, v in ops:
            if is_put:
                self.model[k] = v
            else:
                self.model.pop(k, None)

    @rule(key=keys, value=values)
    def failed_batch_changes_nothing(self, key: bytes, value: bytes) -> None:
        try:
            with self.db.write_batch() as wb:
                wb.put(key, value)
                raise RuntimeError("abandon")
        except RuntimeError:
            pass

    # -- reads --
    @rule(key=keys)
    def get(self, key: bytes) -> None:
        assert self.db.get(key) == self.model.get(key)
        assert (key in self.db) == (key in self.model)

    @rule(
        start=st.none() | keys,
        stop=st.none() | keys,
        reverse=st.booleans(),
        include_start=st.booleans(),
        include_stop=st.booleans(),
    )
    def scan(
        self, start: bytes | None, stop: bytes | None, reverse: bool, include_start: bool, include_stop: bool
    ) -> None:
        def after_start(k: bytes) -> bool:
            return start is None or k > start or (include_start and k == start)

        def before_stop(k: bytes) -> bool:
            return stop is None or k < stop or (include_stop and k == stop)

        expect = sorted((k, v) for k, v in self.model.items() if after_start(k) and before_stop(k))
        if reverse:
            expect.reverse()
        it = self.db.iterator(
            start=start, stop=stop, reverse=reverse, include_start=include_start, include_stop=include_stop
        )
        assert list(it) == expect

    @rule(prefix=st.binary(max_size=2), reverse=st.booleans())
    def scan_prefix(self, prefix: bytes, reverse: bool) -> None:
        expect = sorted((k, v) for k, v in self.model.items() if k.startswith(prefix))
        if reverse:
            expect.reverse()
        assert list(self.db.iterator(prefix=prefix, reverse=reverse)) == expect

    @rule(start=st.none() | keys, n=st.integers(0, 6), reverse=st.booleans(), key=st.booleans(), value=st.booleans())
    def seek_and_step(self, start: bytes | None, n: int, reverse: bool, key: bool, value: bool) -> None:
        """A seek then a few steps, by `next` and by a loop over `iter()`, then `close`: the view ends there."""
        if not (key or value):
            return
        pairs = sorted((k, v) for k, v in self.model.items() if start is None or k >= start)
        if reverse:
            pairs.reverse()
        expect = [(k, v) if key and value else k if key else v for k, v in pairs]
        it = self.db.iterator(start=start, reverse=reverse, include_key=key, include_value=value)
        got = [next(it) for _ in range(min(n, len(expect)))]
        for item in it:  # iter(it) hands out the batch-flattening iterator itself: the loop and next() share it
            if len(got) >= 2 * n:
                break
            got.append(item)
        assert got == expect[: 2 * n]
        it.close()
        for use in (lambda: next(it, None), lambda: list(it)):
            with pytest.raises(minilsm.ClosedError):
                use()

    # -- iterators left open, moved by next, prev, seeks and loops --
    @rule(
        target=cursors,
        start=st.none() | keys,
        stop=st.none() | keys,
        reverse=st.booleans(),
        shape=st.sampled_from([slice(0, 2), slice(0, 1), slice(1, 2)]),  # pairs, keys alone, values alone
        snap=st.none() | snapshots,
    )
    def open_cursor(
        self, start: bytes | None, stop: bytes | None, reverse: bool, shape: slice, snap: int | None
    ) -> int:
        store: minilsm.DB | minilsm.Snapshot = self.db
        view = self.model
        if snap is not None and snap in self.snaps:
            _, store, view = self.snaps[snap]
        items = sorted((k, v) for k, v in view.items() if (start is None or k >= start) and (stop is None or k < stop))
        it = store.iterator(
            start=start, stop=stop, reverse=reverse, include_key=shape.start == 0, include_value=shape.stop == 2
        )
        self.next_cursor += 1
        self.cursors[self.next_cursor] = (it, Cursor(items, start, stop, reverse), shape)
        return self.next_cursor

    def _shaped(self, pair: tuple[bytes, bytes] | None, shape: slice) -> object:
        if pair is None:
            return None
        return pair if shape == slice(0, 2) else pair[shape][0]

    @rule(i=cursors, back=st.booleans(), n=st.integers(1, 4))
    def cursor_step(self, i: int, back: bool, n: int) -> None:
        if i not in self.cursors:
            return  # closed, or ended by a reopen
        it, model, shape = self.cursors[i]
        for _ in range(n):
            expect = self._shaped(model.prev() if back else model.next(), shape)
            got = (it.prev() if back else next(it)) if expect is not None else None
            if expect is None:
                with pytest.raises(StopIteration):
                    it.prev() if back else next(it)
            assert got == expect

    @rule(
        i=cursors,
        n=st.integers(0, 5),
        moves=st.lists(st.tuples(st.integers(0, 4), keys | st.sampled_from(["prev", "start", "stop"])), max_size=3),
    )
    def cursor_loop(self, i: int, n: int, moves: list[tuple[int, bytes | str]]) -> None:
        """A `for` loop over the iterator goes on from its place, and moves it; as plyvel's loop, it follows
        the seeks and `prev` steps made in its body (`moves`: after which item, and where to)."""
        if i not in self.cursors:
            return
        it, model, shape = self.cursors[i]
        got: list[object] = []
        expect: list[object] = []
        if n:
            for item in it:
                got.append(item)
                expect.append(self._shaped(model.next(), shape))
                for _, to in (m for m in moves if m[0] == len(got) - 1):
                    move_alike(it, model, to, partial(self._shaped, shape=shape))
                if len(got) == n:
                    break
            else:
                assert model.next() is None  # the loop ran out where the model does
        assert got == expect

    @rule(i=cursors, to=keys | st.sampled_from(["start", "stop"]))
    def cursor_seek(self, i: int, to: bytes | str) -> None:
        if i not in self.cursors:
            return
        it, model, _ = self.cursors[i]
        move_alike(it, model, to)

    @rule(i=consumes(cursors))
    def cursor_close(self, i: int) -> None:
        if i in self.cursors:
            it = self.cursors.pop(i)[0]
            it.close()
            for use in (lambda: next(it, None), lambda: it.seek(b"")):
                with pytest.raises(minilsm.ClosedError):
                    use()

    def _end_cursors(self) -> None:
        """A store's close ends its iterators: each step and seek raises ClosedError from then on."""
        for it, _, _ in self.cursors.values():
            for move in (it.__next__, it.prev, it.seek_to_start):
                with pytest.raises(minilsm.ClosedError):
                    move()
        self.cursors.clear()

    # -- maintenance --
    @rule()
    def flush(self) -> None:
        self.db.flush()

    @rule(start=st.none() | keys, stop=st.none() | keys)
    def compact(self, start: bytes | None, stop: bytes | None) -> None:
        self.db.compact_range(start, stop)

    @rule()
    def reopen(self) -> None:
        self._reopen_at(self.dir)

    def _reopen_at(self, path: str) -> None:
        self.db.close()
        self._end_cursors()
        self.dir = path
        self.db = self._open()
        self.snaps.clear()

    @rule(move=st.booleans())
    def checkpoint(self, move: bool) -> None:
        target = f"{self.dirs[0]}.cp{len(self.dirs)}"
        self.db.checkpoint(target)
        self.dirs.append(target)
        if move:  # the copy becomes the store, and every later step runs on it
            self._reopen_at(target)
            assert list(self.db.iterator()) == sorted(self.model.items())
        else:
            with minilsm.DB(target, **{**self._options(), "create_if_missing": False}) as copy:
                assert list(copy.iterator()) == sorted(self.model.items())
                check_invariants(copy, sweep_first=self.background)

    @rule()
    def crash_and_reopen(self) -> None:
        for it, _, _ in self.cursors.values():
            it.close()  # a killed process's iterators die with it
        self.cursors.clear()
        crash(self.db)
        self.db = self._open()
        self.snaps.clear()

    # -- snapshots --
    @rule(target=snapshots)
    def take_snapshot(self) -> int:
        self.next_snap += 1
        self.snaps[self.next_snap] = (self.db, self.db.snapshot(), dict(self.model))
        return self.next_snap

    @rule(i=snapshots, key=keys)
    def read_snapshot(self, i: int, key: bytes) -> None:
        if i not in self.snaps:
            return  # released, or taken before a reopen (which releases every snapshot)
        _, snap, view = self.snaps[i]
        assert snap.get(key) == view.get(key)
        assert list(snap.iterator()) == sorted(view.items())
        assert list(snap.iterator(reverse=True)) == sorted(view.items(), reverse=True)

    @rule(i=consumes(snapshots))
    def release_snapshot(self, i: int) -> None:
        if i in self.snaps:
            self.snaps.pop(i)[1].close()

    @invariant()
    def tables_are_well_formed(self) -> None:
        check_invariants(self.db, sweep_first=self.background)

    @precondition(lambda self: len(self.model) > 0)
    @rule()
    def full_scan_matches(self) -> None:
        assert list(self.db.iterator()) == sorted(self.model.items())


class TieredStoreMachine(StoreMachine):
    style = "tiered"


class BackgroundStoreMachine(StoreMachine):
    background = True


class MappedStoreMachine(StoreMachine):
    """Tables read through memory mappings (`mmap_reads`): the same answers as through pread, every step."""

    mmap_reads = True


def option_space() -> st.SearchStrategy[dict[str, object]]:
    """Options from the whole range the constructor accepts, its corners most of all: a memtable of 1 byte
    (a table per write), tables of 1 byte, 64-byte blocks, two levels, level 0 stopping writes at its first
    table, filters of 0.001 to 100 bits per key, a file cache of one file, no block cache, both styles."""
    return st.integers(1, 4).flatmap(
        lambda trigger: st.fixed_dictionaries(
            {
                "bits_per_key": st.sampled_from([0, 0.001, 0.5, 1, 10, 37.5, 100]),
                "block_size": st.sampled_from([64, 65, 100, 256, 4096]),
                "block_cache_size": st.sampled_from([0, 1, 64, 4096, 1 << 20]),
                "max_open_files": st.sampled_from([1, 2, 500]),
                "memtable_size": st.sampled_from([1, 2, 50, 300, 2048, 1 << 20]),
                "level0_compaction_trigger": st.just(trigger),
                "level0_stop_writes_trigger": st.sampled_from([trigger, trigger + 1, trigger + 5]),
                "level1_max_bytes": st.sampled_from([1, 100, 8192]),
                "level_size_multiplier": st.sampled_from([2, 3, 10]),
                "target_file_size": st.sampled_from([1, 2, 100, 2048]),
                "max_levels": st.sampled_from([2, 3, 4, 7, 20]),
                "seek_compaction": st.booleans(),
                "tombstone_compaction": st.booleans(),
                "compaction_style": st.sampled_from(["leveled", "tiered"]),
                "tiered_min_threshold": st.sampled_from([2, 3, 4]),
                "tiered_bucket_low": st.sampled_from([1e-9, 0.5, 1.0]),
                "tiered_bucket_high": st.sampled_from([1.0, 1.5, 1e9]),
                "background": st.booleans(),
                "compaction_worker": st.booleans(),
                "mmap_reads": st.booleans(),
                "paranoid_checks": st.booleans(),
            }
        )
    )


class OptionSpaceMachine(StoreMachine):
    """The same steps on a store opened with options drawn from `option_space`: every value the constructor
    accepts must give a store that answers as the dict does, through flushes, compactions, reopens and crashes."""

    @initialize(options=option_space())
    def choose_options(self, options: dict[str, object]) -> None:
        self.db.close()
        minilsm.destroy_store(self.dir)
        self.chosen = options
        self.background = bool(options["background"])
        self.db = self._open()
        assert self.db.options == minilsm.Options(**options)  # type: ignore[arg-type]

    def _options(self) -> dict[str, object]:
        return getattr(self, "chosen", None) or super()._options()


class OptionSpaceLongMachine(OptionSpaceMachine):
    """The same, as a test of its own for `--slow`, with more examples."""


TestLeveled = StoreMachine.TestCase
TestLeveled.settings = settings(max_examples=100, stateful_step_count=60, deadline=None)
TestTiered = TieredStoreMachine.TestCase
TestTiered.settings = settings(max_examples=100, stateful_step_count=60, deadline=None)
TestBackground = BackgroundStoreMachine.TestCase
TestBackground.settings = settings(max_examples=40, stateful_step_count=60, deadline=None)
TestMapped = MappedStoreMachine.TestCase
TestMapped.settings = settings(max_examples=40, stateful_step_count=60, deadline=None)
TestOptionSpace = OptionSpaceMachine.TestCase
TestOptionSpace.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)
TestOptionSpaceLong = pytest.mark.slow(OptionSpaceLongMachine.TestCase)
TestOptionSpaceLong.settings = settings(max_examples=400, stateful_step_count=100, deadline=None)
