"""The store against plyvel (LevelDB itself), step by step: what the README's "behave as in plyvel" promises.

tests/test_db_stateful.py checks the store against a dict, a model written with the same reading of plyvel's
keywords as the code; here LevelDB answers.  Both stores take the same writes, batches (a raising block writes
nothing in either: plyvel's ``transaction=True``), snapshots and ``compact_range`` calls, and every read, scan
and snapshot read must agree.  Iterators are also left open, stepped a few keys at a time while writes,
flushes, compactions and snapshot releases go on, then closed or ended by a reopen, whose next step must raise
`ClosedError`.  Needs plyvel (the ``bench`` extra); skipped without it.

Three of plyvel's answers are not taken as they come.  A reverse scan is compared with plyvel's forward scan
reversed: plyvel 1.5.1 (LevelDB 1.22) yields nothing for a reverse scan whose range holds exactly one key
(``iterator(prefix=b"b", reverse=True)`` over the keys a, b, c).  `prefix` with `start`/`stop`, which
plyvel refuses, is compared with plyvel's prefix scan cut to the range.  And an iterator moved about (next,
prev, the seeks) is compared with plyvel's own iterator over the whole store, a reverse one with plyvel's
forward one, next and prev swapped; but one with a range is compared with `storeutil.Cursor` over plyvel's
scan of that range, since plyvel's bounded iterators step out of their range after a seek (``iterator(start=b"b")``,
``seek(b"b")``, ``prev()`` gives b"a" if that key is stored) and its reverse ones fail as its reverse scans do.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, rule
from storeutil import Cursor, move_alike, small_options

import minilsm

plyvel = pytest.importorskip("plyvel")

# Few enough keys that scans, bounds and prefixes keep meeting them: every key of up to three of these bytes.
_PARTS = [b"\x00", b"a", b"b", b"\xff"]
keys = (
    st.lists(st.sampled_from(_PARTS), max_size=3).map(b"".join)
    | st.binary(max_size=3)
    | st.tuples(st.sampled_from([b"p/", b"\xff" * 6]), st.binary(max_size=10)).map(b"".join)
)
# A bound is often a key, or the key right after one (k + b"\x00": where include_start=False starts).
bounds = st.none() | keys | keys.map(lambda k: k + b"\x00") | st.just(b"\xff" * 7)
prefixes = st.none() | st.lists(st.sampled_from(_PARTS), max_size=2).map(b"".join) | st.just(b"\xff\xff")
values = st.binary(max_size=30) | st.binary(min_size=100, max_size=400)
Pair = tuple[bytes, bytes]


def expected_scan(pdb: Any, start: bytes | None, stop: bytes | None, prefix: bytes | None, **kw: bool) -> list[Pair]:
    """plyvel's answer to the same scan (see the module docstring for the two it is not asked directly)."""
    include_start, include_stop, reverse = kw["include_start"], kw["include_stop"], kw["reverse"]
    if prefix is None:
        pairs = list(pdb.iterator(start=start, stop=stop, include_start=include_start, include_stop=include_stop))
    else:
        pairs = [
            (k, v)
            for k, v in pdb.iterator(prefix=prefix)
            if (start is None or k > start or (include_start and k == start))
            and (stop is None or k < stop or (include_stop and k == stop))
        ]
    return pairs[::-1] if reverse else pairs


class PlyvelCursor:
    """plyvel's forward iterator over the whole store, moved as a minilsm iterator is (`storeutil.Cursor`'s
    methods): a reverse iterator's next is its prev, and the other way round."""

    start = b""
    stop = None

    def __init__(self, lit: Any, reverse: bool) -> None:
        self.lit = lit
        self.reverse = reverse
        if reverse:
            lit.seek_to_stop()  # where a reverse iterator starts

    def next(self) -> Pair | None:
        return self._take(self.lit.prev if self.reverse else self.lit.__next__)

    def prev(self) -> Pair | None:
        return self._take(self.lit.__next__ if self.reverse else self.lit.prev)

    def seek(self, target: bytes | None) -> None:
        if target is None:
            self.lit.seek_to_stop()
        else:
            self.lit.seek(target)

    @staticmethod
    def _take(step: Any) -> Pair | None:
        try:
            pair: Pair = step()
        except StopIteration:
            return None
        return pair


class PlyvelParity(RuleBasedStateMachine):
    background = False
    style = "leveled"

    snapshots = Bundle("snapshots")
    iterators = Bundle("iterators")
    cursors = Bundle("cursors")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(
            prefix="minilsm-plyvel-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        )
        self.ldb = plyvel.DB(f"{self.dir}/leveldb", create_if_missing=True, write_buffer_size=4096)
        self.db = self._open()
        self.snaps: dict[int, tuple[minilsm.Snapshot, Any]] = {}
        # An open iterator: the store's, what plyvel's iterator made at the same moment yields, and how far it got.
        self.iters: dict[int, tuple[minilsm.DBIterator[Pair], list[Pair], int]] = {}
        # Iterators moved by next, prev and the seeks: the store's and plyvel's, made at the same moment.
        self.cursors: dict[int, tuple[minilsm.DBIterator[Pair], PlyvelCursor | Cursor]] = {}
        self.made = 0

    def _open(self) -> minilsm.DB:
        return minilsm.DB(
            f"{self.dir}/minilsm", **small_options(background=self.background, compaction_style=self.style)
        )

    def teardown(self) -> None:
        try:
            self.db.close()
            self.ldb.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- writes --
    @rule(key=keys, value=values)
    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, value)
        self.ldb.put(key, value)

    @rule(key=keys)
    def delete(self, key: bytes) -> None:
        self.db.delete(key)
        self.ldb.delete(key)

    @rule(
        ops=st.lists(st.tuples(st.booleans(), keys, values), max_size=8),
        fail=st.booleans(),
        transaction=st.sampled_from([True, False, None, "default"]),
    )
    def batch(self, ops: list[tuple[bool, bytes, bytes]], fail: bool, transaction: bool | str | None) -> None:
        """Puts and deletes, a key's later op winning.  A block that raises writes nothing in either store with
        ``transaction=True`` (the store's default), and the whole batch in both with False (plyvel's)."""
        kw = {} if transaction == "default" else {"transaction": transaction}
        with (
            pytest.raises(KeyError) if fail else contextlib.nullcontext(),
            self.db.write_batch(**kw) as wb,
            self.ldb.write_batch(transaction=kw.get("transaction", True)) as lwb,
        ):
            for put, key, value in ops:
                for b in (wb, lwb):
                    if put:
                        b.put(key, value)
                    else:
                        b.delete(key)
            if fail:
                raise KeyError("abandon")

    @rule(base=keys, n=st.integers(5, 60), size=st.integers(1, 200) | st.just(1))
    def load(self, base: bytes, n: int, size: int) -> None:
        """Enough writes to flush and compact a few times, overwriting and deleting as they go; then read them back
        both ways (small values leave dozens of keys in the memtable, which a scan copies a chunk at a time)."""
        for i in range(n):
            key, value, gone = base + b"%03d" % (i * 7 % n), bytes([i % 256]) * size, base + b"%03d" % (i // 2)
            for store in (self.db, self.ldb):
                store.put(key, value)
                if i % 5 == 0:
                    store.delete(gone)
        want = list(self.ldb.iterator(prefix=base))
        assert list(self.db.iterator(prefix=base)) == want
        assert list(self.db.iterator(prefix=base, reverse=True)) == want[::-1]

    # -- reads --
    @rule(
        key=keys,
        default=st.sampled_from([None, b"default", 7]),
        options=st.fixed_dictionaries({}, optional={"verify_checksums": st.booleans(), "fill_cache": st.booleans()}),
    )
    def get(self, key: bytes, default: object, options: dict[str, bool]) -> None:
        want = self.ldb.get(key)
        assert self.db.get(key, default, **options) == self.ldb.get(key, default, **options)
        assert (key in self.db) == (want is not None)
        if want is not None:
            assert self.db.may_contain(key)

    @rule(
        data=st.data(),
        prefix=prefixes,
        reverse=st.booleans(),
        include_start=st.booleans(),
        include_stop=st.booleans(),
    )
    def scan(self, data: st.DataObject, prefix: bytes | None, **kw: bool) -> None:
        # Bounds at the keys the store holds, or right after one, where the open and closed ends differ.
        held = list(self.ldb.iterator(include_value=False)) or [b""]
        near = st.sampled_from(held).flatmap(lambda k: st.sampled_from([k, k + b"\x00", k[:-1]]))
        start, stop = data.draw(bounds | near), data.draw(bounds | near)
        want = expected_scan(self.ldb, start, stop, prefix, **kw)
        assert list(self.db.iterator(start=start, stop=stop, prefix=prefix, **kw)) == want
        assert list(self.db.iterator(start=start, stop=stop, prefix=prefix, include_value=False, **kw)) == [
            k for k, _ in want
        ]

    # -- iterators left open --
    @rule(target=iterators, start=bounds, stop=bounds, reverse=st.booleans(), snap=st.none() | snapshots)
    def open_iterator(self, start: bytes | None, stop: bytes | None, reverse: bool, snap: int | None) -> int:
        store, ldb = self.snaps.get(snap or 0, (self.db, self.ldb))  # ids start at 1
        want = list(ldb.iterator(start=start, stop=stop))  # LevelDB's iterators see the moment they are made
        self.made += 1
        self.iters[self.made] = (
            store.iterator(start=start, stop=stop, reverse=reverse),
            want[::-1] if reverse else want,
            0,
        )
        return self.made

    @rule(i=iterators, steps=st.integers(1, 5))
    def step_iterator(self, i: int, steps: int) -> None:
        if i not in self.iters:
            return  # closed, or ended by a reopen
        it, want, pos = self.iters[i]
        got = [pair for _, pair in zip(range(steps), it, strict=False)]
        assert got == want[pos : pos + steps]
        self.iters[i] = (it, want, pos + len(got))

    @rule(i=consumes(iterators))
    def close_iterator(self, i: int) -> None:
        if i in self.iters:
            self.iters.pop(i)[0].close()

    # -- iterators moved about --
    @rule(target=cursors, start=bounds, stop=bounds, reverse=st.booleans(), snap=st.none() | snapshots)
    def open_cursor(self, start: bytes | None, stop: bytes | None, reverse: bool, snap: int | None) -> int:
        store, ldb = self.snaps.get(snap or 0, (self.db, self.ldb))
        self.made += 1
        # See the module docstring: plyvel's own iterator where it keeps to its range, else the model.
        oracle: PlyvelCursor | Cursor
        if start is None and stop is None:
            oracle = PlyvelCursor(ldb.iterator(), reverse)
        else:
            oracle = Cursor(list(ldb.iterator(start=start, stop=stop)), start, stop, reverse)
        self.cursors[self.made] = (store.iterator(start=start, stop=stop, reverse=reverse), oracle)
        return self.made

    @rule(i=cursors, moves=st.lists(st.sampled_from(["next", "prev", "start", "stop"]) | keys, min_size=1, max_size=6))
    def move_cursor(self, i: int, moves: list[str | bytes]) -> None:
        if i not in self.cursors:
            return
        it, oracle = self.cursors[i]
        for move in moves:
            move_alike(it, oracle, move)

    @rule(
        i=cursors,
        n=st.integers(1, 6),
        moves=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["prev", "start", "stop"]) | keys), max_size=3),
    )
    def loop_cursor(self, i: int, n: int, moves: list[tuple[int, str | bytes]]) -> None:
        """A `for` loop over the iterator, moved in its body (`moves`: after which item, and where to): it steps
        the iterator, as plyvel's loop steps plyvel's, so it follows each seek and `prev`."""
        if i not in self.cursors:
            return
        it, oracle = self.cursors[i]
        for got, item in enumerate(it, start=1):
            assert item == oracle.next()
            for _, move in (m for m in moves if m[0] == got - 1):
                move_alike(it, oracle, move)
            if got == n:
                break
        else:
            assert oracle.next() is None  # the loop ran out where plyvel's iterator does

    @rule(i=consumes(cursors))
    def close_cursor(self, i: int) -> None:
        if i in self.cursors:
            it, oracle = self.cursors.pop(i)
            it.close()
            if isinstance(oracle, PlyvelCursor):
                oracle.lit.close()

    # -- snapshots --
    @rule(target=snapshots)
    def snapshot(self) -> int:
        self.made += 1
        self.snaps[self.made] = (self.db.snapshot(), self.ldb.snapshot())
        return self.made

    @rule(i=snapshots, key=keys, start=bounds, reverse=st.booleans())
    def read_snapshot(self, i: int, key: bytes, start: bytes | None, reverse: bool) -> None:
        if i not in self.snaps:
            return
        snap, lsnap = self.snaps[i]
        assert snap.get(key, b"default") == lsnap.get(key, b"default")
        want = list(lsnap.iterator(start=start))
        assert list(snap.iterator(start=start, reverse=reverse)) == (want[::-1] if reverse else want)

    @rule(i=consumes(snapshots))
    def release_snapshot(self, i: int) -> None:
        """Iterators made from it read on, unchanged (`open_iterator` keeps them)."""
        if i in self.snaps:
            snap, lsnap = self.snaps.pop(i)
            snap.release()
            lsnap.release()

    # -- maintenance --
    @rule()
    def flush(self) -> None:
        self.db.flush()

    @rule(start=bounds, stop=bounds)
    def compact(self, start: bytes | None, stop: bytes | None) -> None:
        self.db.compact_range(start, stop)
        self.ldb.compact_range(start=start, stop=stop)

    @rule()
    def reopen(self) -> None:
        """close() ends the store's open iterators and snapshots, as plyvel's does; plyvel's store stays open."""
        self.db.close()
        for it, _, _ in self.iters.values():
            with pytest.raises(minilsm.ClosedError):
                next(it)
        for snap, _ in self.snaps.values():
            with pytest.raises(minilsm.ClosedError):
                snap.get(b"")
        for it, oracle in self.cursors.values():
            with pytest.raises(minilsm.ClosedError):
                it.seek_to_start()
            if isinstance(oracle, PlyvelCursor):
                oracle.lit.close()
        self.iters.clear()
        self.cursors.clear()
        self.snaps.clear()
        self.db = self._open()


class TieredPlyvelParity(PlyvelParity):
    style = "tiered"


class BackgroundPlyvelParity(PlyvelParity):
    background = True


TestPlyvelParity = PlyvelParity.TestCase
TestTieredPlyvelParity = TieredPlyvelParity.TestCase
TestBackgroundPlyvelParity = BackgroundPlyvelParity.TestCase
for _case, _examples in ((TestPlyvelParity, 60), (TestTieredPlyvelParity, 30), (TestBackgroundPlyvelParity, 30)):
    _case.settings = settings(max_examples=_examples, stateful_step_count=60, deadline=None)
del _case, _examples  # else pytest collects the loop's last TestCase again, under the name `_case`


def test_prefixed_db_answers_as_plyvels(tmp_path: Any) -> None:
    """The same writes through plyvel's prefixed_db and minilsm's, and every read of each view agrees."""
    ldb = plyvel.DB(str(tmp_path / "leveldb"), create_if_missing=True)
    db = minilsm.DB(str(tmp_path / "minilsm"), **small_options())
    try:
        rng = random.Random(11)
        for i in range(400):
            k = bytes(rng.choice(b"ab/\x00\xff") for _ in range(rng.randrange(5)))
            for store in (db, ldb):
                if i % 7 == 0:
                    store.delete(k)
                else:
                    store.put(k, b"%d" % i)
        for p in [b"a", b"a/", b"\xff", b"b\x00"]:
            view, lview = db.prefixed_db(p), ldb.prefixed_db(p)
            assert list(view.iterator()) == list(lview.iterator()), p
            for start in [None, b"", b"/", b"b"]:
                for reverse in (False, True):
                    want = list(lview.iterator(start=start, include_value=False))
                    got = list(view.iterator(start=start, reverse=reverse, include_value=False))
                    assert got == (want[::-1] if reverse else want), (p, start)
            for k in [b"", b"/", b"a", b"\xff"]:
                assert view.get(k) == lview.get(k)
            it, lit = view.iterator(), lview.iterator()
            for target in [b"", b"/", b"b", b"\xff\xff"]:
                it.seek(target)
                lit.seek(target)
                assert next(it, None) == next(lit, None), (p, target)
    finally:
        db.close()
        ldb.close()
