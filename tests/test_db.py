"""The public API of `minilsm.DB`: reads, writes, batches, iterators, snapshots, options and errors."""

from __future__ import annotations

import array
import errno
import fcntl
import gc
import itertools
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from storeutil import check_invariants, crash, small_options

import minilsm
from minilsm import db as db_module
from minilsm import fs as fs_module
from minilsm import iterators as iterators_module
from minilsm.check import check_store
from minilsm.fs import FileSystem
from minilsm.keys import KIND_VALUE, MAX_KEY_SIZE, MAX_VALUE_SIZE
from minilsm.sstable.reader import TableReader
from minilsm.wal import read_log


@pytest.fixture(params=[False, True], ids=["inline", "background"])
def db(request: pytest.FixtureRequest, db_path: str):  # type: ignore[no-untyped-def]
    d = minilsm.DB(db_path, **small_options(background=request.param))
    yield d
    d.close()


def fill(db: minilsm.DB, n: int, prefix: bytes = b"k") -> dict[bytes, bytes]:
    data = {prefix + b"%05d" % i: b"v%d" % i * 7 for i in range(n)}
    for k, v in data.items():
        db.put(k, v)
    return data


def test_put_get_delete_and_defaults(db: minilsm.DB) -> None:
    db.put(b"k", b"v")
    assert db.get(b"k") == b"v"
    assert db.get(b"x") is None
    assert db.get(b"x", default=b"d") == b"d"
    db.delete(b"k")
    assert db.get(b"k") is None
    db.delete(b"never-there")  # not an error, as in LevelDB


def test_empty_key_and_empty_value_are_valid(db: minilsm.DB) -> None:
    db.put(b"", b"")
    assert db.get(b"") == b""
    assert b"" in db
    db.flush()
    assert db.get(b"") == b""
    assert list(db.iterator()) == [(b"", b"")]


def test_mapping_sugar_has_exact_answers(db: minilsm.DB) -> None:
    db[b"a"] = b"1"
    assert db[b"a"] == b"1"
    assert b"a" in db and b"b" not in db
    with pytest.raises(KeyError):
        db[b"b"]
    del db[b"a"]
    assert b"a" not in db
    with pytest.raises(KeyError):
        del db[b"a"]
    db[b"x"] = b"1"
    db[b"y"] = b"2"
    assert list(db) == [b"x", b"y"]


def test_reads_survive_flushes_compactions_and_reopen(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        data = fill(db, 600)
        for i in range(0, 600, 3):
            k = b"k%05d" % i
            db.delete(k)
            del data[k]
        for i in range(1, 600, 5):
            k = b"k%05d" % i
            data[k] = b"new"
            db.put(k, b"new")
        assert db.stats().flushes > 3 and db.stats().compactions > 0
        check_invariants(db)
        assert list(db.iterator()) == sorted(data.items())
    with minilsm.DB(db_path, **small_options()) as db:
        for k in (b"k%05d" % i for i in range(600)):
            assert db.get(k) == data.get(k)
        db.compact_range()
        check_invariants(db)
        assert list(db.iterator()) == sorted(data.items())
        assert list(db.iterator(reverse=True)) == sorted(data.items(), reverse=True)


def test_wait_for_compactions_leaves_no_work_due(db_path: str) -> None:
    from minilsm import compaction

    with minilsm.DB(db_path, **small_options(background=True)) as db:
        data = fill(db, 600)
        db.wait_for_compactions()
        with db._mutex:  # settled: nothing frozen, running or due
            assert db._imm is None and not db._compacting
            assert compaction.pick_compaction(db.version, db.options, db._compact_pointers) is None
        assert db.stats().compactions > 0
        assert dict(db.iterator()) == data
    db.wait_for_compactions()  # closed: returns at once


def test_iterator_bounds_prefix_reverse_and_projection(db: minilsm.DB) -> None:
    for k in [b"a", b"ab", b"abc", b"b", b"ba", b"c", b"\xff", b"\xff\xff"]:
        db.put(k, k.upper())
    db.flush()
    db.put(b"abd", b"ABD")
    assert [k for k, _ in db.iterator(start=b"ab", stop=b"b")] == [b"ab", b"abc", b"abd"]
    assert [k for k, _ in db.iterator(prefix=b"ab")] == [b"ab", b"abc", b"abd"]
    assert [k for k, _ in db.iterator(prefix=b"ab", reverse=True)] == [b"abd", b"abc", b"ab"]
    assert [k for k, _ in db.iterator(prefix=b"\xff")] == [b"\xff", b"\xff\xff"]
    assert list(db.iterator(start=b"b", stop=b"c", include_value=False)) == [b"b", b"ba"]
    assert list(db.iterator(start=b"c", include_key=False)) == [b"C", b"\xff".upper(), b"\xff\xff".upper()]
    assert list(db.iterator(start=b"z", stop=b"a")) == []
    with pytest.raises(ValueError):
        db.iterator(include_key=False, include_value=False)


def test_iterator_open_and_closed_ends_as_plyvel(db: minilsm.DB) -> None:
    for k in [b"", b"\x00", b"a", b"a\x00", b"a\x00\x00", b"ab", b"b", b"b\x00", b"\xff"]:
        db.put(k, k)
    db.flush()
    db.put(b"a\x01", b"")

    def keys(**kw: object) -> list[bytes]:
        return list(db.iterator(include_value=False, **kw))  # type: ignore[arg-type]

    # The key right after `a` in bytewise order is a\x00: an open end must not skip it.
    assert keys(start=b"a", stop=b"b", include_start=False) == [b"a\x00", b"a\x00\x00", b"a\x01", b"ab"]
    assert keys(start=b"a", stop=b"b", include_stop=True) == [b"a", b"a\x00", b"a\x00\x00", b"a\x01", b"ab", b"b"]
    assert keys(start=b"a\x00", stop=b"a\x01", include_start=False, include_stop=True) == [b"a\x00\x00", b"a\x01"]
    assert keys(start=b"", include_start=False, stop=b"a") == [b"\x00"]
    assert keys(start=b"b", stop=b"b", include_stop=True) == [b"b"]
    assert keys(start=b"b", stop=b"b", include_start=False, include_stop=True) == []
    assert keys(stop=b"\xff", include_stop=True, reverse=True)[:2] == [b"\xff", b"b\x00"]
    assert keys(prefix=b"a", start=b"a", include_start=False) == [b"a\x00", b"a\x00\x00", b"a\x01", b"ab"]
    with db.snapshot() as snap:
        db.put(b"a\x00\x01", b"later")
        assert list(snap.iterator(start=b"a\x00", stop=b"ab", include_start=False, include_value=False)) == [
            b"a\x00\x00",
            b"a\x01",
        ]


def test_an_iterator_moves_as_plyvels_does(db: minilsm.DB) -> None:
    """next, prev and the seeks, each answer as plyvel 1.5.1 gave it on the same keys (the answers
    test_plyvel_parity.py gets from plyvel itself): the iterator stands between two keys."""
    for k in [b"a", b"b", b"c", b"d"]:
        db.put(k, k.upper())
    db.flush()  # b and c in a table, a and d in the memtable: each move merges both
    db.put(b"a", b"A")
    db.put(b"d", b"D")

    def stop(step: Callable[[], object]) -> bool:
        with pytest.raises(StopIteration):
            step()
        return True

    it = db.iterator()
    assert [next(it), next(it), it.prev(), it.prev()] == [(b"a", b"A"), (b"b", b"B"), (b"b", b"B"), (b"a", b"A")]
    assert stop(it.prev) and next(it) == (b"a", b"A")
    it.seek(b"bb")
    assert next(it) == (b"c", b"C")
    it.seek(b"b")
    assert it.prev() == (b"a", b"A")
    it.seek_to_stop()
    assert stop(it.__next__) and it.prev() == (b"d", b"D")
    assert next(it) == (b"d", b"D") and stop(it.__next__) and stop(it.__next__)
    assert it.prev() == (b"d", b"D")  # run out, it still stands after the last key
    it.seek_to_start()
    assert list(it) == [(b"a", b"A"), (b"b", b"B"), (b"c", b"C"), (b"d", b"D")]  # a loop goes on from the place

    ranged = db.iterator(start=b"b", stop=b"d", include_value=False)
    ranged.seek(b"a")  # clamped to the range, both ways
    assert next(ranged) == b"b"
    ranged.seek(b"z")
    assert stop(ranged.__next__) and ranged.prev() == b"c"

    back = db.iterator(reverse=True, include_key=False)  # next steps back, prev forward
    assert [next(back), next(back), back.prev()] == [b"D", b"C", b"C"]
    back.seek(b"b")
    assert next(back) == b"A"
    back.seek(b"b")
    assert back.prev() == b"B"
    back.seek_to_start()
    assert stop(back.__next__) and back.prev() == b"A"

    with db.snapshot() as snap:
        db.delete(b"c")
        frozen = snap.iterator(start=b"b")
        frozen.seek(b"c")
        assert next(frozen) == (b"c", b"C")  # the snapshot's view, however often it moves
        assert db.iterator(start=b"b", include_value=False).__next__() == b"b"

    it.close()  # from here on every use says so, as plyvel's: not an iterator run out, which stops
    for use in (it.__next__, it.prev, lambda: it.seek(b"a"), it.seek_to_start, lambda: list(it)):
        with pytest.raises(minilsm.ClosedError, match="the iterator is closed"):
            use()
    with pytest.raises(TypeError):
        ranged.seek("b")  # type: ignore[arg-type]


def test_a_loop_over_an_iterator_follows_the_moves_made_in_its_body(db: minilsm.DB) -> None:
    """plyvel's loop steps its iterator, so it follows a seek or a `prev` made in its body; so does this one
    (the answers below are plyvel 1.5.1's), whether the keys are in the memtable or in tables."""
    for k in [b"a", b"b", b"c", b"d", b"e"]:
        db.put(k, k)

    def loop(it: minilsm.DBIterator[bytes], moves: dict[int, Callable[[], object]]) -> list[bytes]:
        seen = []
        for key in it:
            seen.append(key)
            if len(seen) in moves:
                moves[len(seen)]()
        return seen

    for _where in ("memtable", "tables"):  # the second time, flushed
        it = db.iterator(include_value=False)
        assert loop(it, {2: partial(it.seek, b"d")}) == [b"a", b"b", b"d", b"e"]
        it = db.iterator(include_value=False)
        assert loop(it, {3: it.prev}) == [b"a", b"b", b"c", b"c", b"d", b"e"]
        it = db.iterator(include_value=False, reverse=True)
        assert loop(it, {2: it.prev}) == [b"e", b"d", b"d", b"c", b"b", b"a"]
        it = db.iterator(include_value=False)
        assert loop(it, {2: it.seek_to_stop}) == [b"a", b"b"]
        it = db.iterator(include_value=False)
        assert loop(it, {1: partial(it.seek, b"c"), 2: partial(it.seek, b"b"), 4: it.seek_to_start}) == [
            b"a", b"c", b"b", b"c", b"a", b"b", b"c", b"d", b"e",
        ]  # fmt: skip
        it = db.iterator(include_value=False)
        g = iter(it)
        it.seek(b"c")  # before the loop's first step
        assert list(g) == [b"c", b"d", b"e"]
        it = db.iterator(include_value=False)
        assert loop(it, {2: partial(it.seek, b"d"), 3: it.close}) == [b"a", b"b", b"d"]  # a close stops it

        # A loop that followed a move and broke off leaves the iterator where the loop left it.
        it = db.iterator()
        for key, _ in it:
            if key == b"a":
                it.seek(b"c")
            elif key == b"d":
                break
        assert [next(it), it.prev(), it.prev()] == [(b"e", b"e"), (b"e", b"e"), (b"d", b"d")]
        it.close()

        # Keys cut by a prefixed view, and a snapshot's iterator, follow the same way.
        with db.snapshot() as snap:
            it = snap.iterator(include_value=False, start=b"b")
            assert loop(it, {1: partial(it.seek, b"e"), 2: it.prev}) == [b"b", b"e", b"e"]
        db.put(b"pa", b"1")
        db.put(b"pb", b"2")
        db.put(b"pc", b"3")
        pdb = db.prefixed_db(b"p")
        pit = pdb.iterator(include_value=False)
        assert loop(pit, {1: partial(pit.seek, b"c")}) == [b"a", b"c"]
        for k in (b"pa", b"pb", b"pc"):
            db.delete(k)
        db.flush()


def test_a_loop_that_follows_a_move_says_when_the_store_closes(db_path: str) -> None:
    """The store's close ends a loop whose body moved the iterator, as it ends any other loop."""
    db = minilsm.DB(db_path)
    for k in [b"a", b"b", b"c"]:
        db.put(k, k)
    it = db.iterator(include_value=False)
    seen = []
    with pytest.raises(minilsm.ClosedError, match="closed"):
        for key in it:
            seen.append(key)
            it.seek(b"c")
            db.close()
    assert seen == [b"a"]


def test_approximate_sizes_come_from_the_indexes(db_path: str) -> None:
    """plyvel's approximate_size(s): bytes of table data in a key range, to a block, with no block read."""
    db = minilsm.DB(db_path, **small_options())
    for i in range(2000):
        db.put(b"k%05d" % i, b"v" * 100)
    db.compact_range()
    total = sum(t.props.data_size for _, t in db.version.tables())
    reads = db.stats().block_reads
    assert db.approximate_size(None, None) == total
    assert db.approximate_sizes((b"k00000", b"k02000"), (None, b"k00000"), (b"k02000", None)) == [total, 0, 0]
    # Cut anywhere, the parts add up to the whole: each cut is one offset, taken off one part and given the next.
    cuts: list[bytes | None] = [None, *sorted(b"k%05d" % i for i in random.Random(7).sample(range(2000), 9)), None]
    assert sum(db.approximate_sizes(*itertools.pairwise(cuts))) == total
    half = db.approximate_size(b"k00000", b"k01000")
    assert abs(half - total / 2) <= 2 * 256  # within a block either side (small_options: 256-byte blocks)
    assert db.approximate_size(b"k01000", b"k00500") == 0  # an empty range
    db.put(b"k99999", b"x" * 1000)
    assert db.approximate_size(b"k99999", None) == 0  # the memtable is not counted, as in LevelDB
    assert db.stats().block_reads == reads
    with pytest.raises(TypeError):
        db.approximate_size("k", None)  # type: ignore[arg-type]
    db.close()
    with pytest.raises(minilsm.ClosedError):
        db.approximate_size(None, None)


def test_a_prefixed_db_is_the_store_seen_through_its_prefix(db_path: str) -> None:
    """plyvel's prefixed_db: keys without the prefix in, and out; ranges, seeks, batches and snapshots within it."""
    with minilsm.DB(db_path, **small_options()) as db:
        for k in [b"a", b"u", b"u/", b"u/1", b"u/2", b"u/3", b"u0", b"v"]:
            db.put(k, b"raw " + k)
        users = db.prefixed_db(b"u/")
        assert users.prefix == b"u/" and users.db is db
        users.put(b"4", b"four")
        assert db.get(b"u/4") == b"four" and users.get(b"4") == b"four" and users.get(b"a") is None
        assert users.get(b"x", b"?") == b"?" and b"1" in users and b"u/1" not in users
        assert list(users) == [b"", b"1", b"2", b"3", b"4"]  # b"u/" itself is the empty key here
        assert list(users.iterator(start=b"2", include_value=False, reverse=True)) == [b"4", b"3", b"2"]
        assert list(users.iterator(stop=b"2", include_key=False)) == [b"raw u/", b"raw u/1"]
        assert list(users.iterator(prefix=b"3")) == [(b"3", b"raw u/3")]
        it = users.iterator(include_value=False)
        it.seek(b"3")
        assert [next(it), it.prev(), it.prev()] == [b"3", b"3", b"2"]
        it.seek_to_stop()
        assert it.prev() == b"4"  # never past the prefix's last key (u0 and v lie beyond it)
        del users[b"4"]
        with pytest.raises(KeyError):
            del users[b"4"]
        users[b"5"] = b"five"
        assert users[b"5"] == b"five" and db[b"u/5"] == b"five"
        with users.write_batch() as wb:
            wb.put(b"6", b"six")
            wb.delete(b"5")
            assert len(wb) == 2
        assert db.get(b"u/6") == b"six" and db.get(b"u/5") is None
        with users.snapshot() as snap:
            users.put(b"6", b"changed")
            assert snap.get(b"6") == b"six" and snap[b"6"] == b"six" and b"6" in snap
            assert list(snap.iterator(start=b"6", include_value=False)) == [b"6"]
        deep = users.prefixed_db(b"1")
        assert deep.prefix == b"u/1" and deep.get(b"") == b"raw u/1" and list(deep) == [b""]
        with pytest.raises(ValueError, match="maximum"):
            users.put(b"k" * (MAX_KEY_SIZE - 1), b"")  # the whole key, prefix included, is limited
        with pytest.raises(TypeError):
            db.prefixed_db("u/")  # type: ignore[arg-type]
        assert db.get(b"a") == b"raw a" and db.get(b"u0") == b"raw u0"  # nothing outside the prefix moved


def test_a_move_racing_the_stores_close_raises_closed_error_naming_the_store(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """db.close() in one thread while another seeks and steps an iterator: every move raises ClosedError naming
    the store.  Found by a thread stress test (close against random moves), whose two windows are hit here in one
    thread: (1) a seek and step between close()'s closing the table files and its cancelling the iterators read a
    closed table ("table .../000003.sst is closed"); (2) a close between a seek's check and its cancelling of the
    old merge left that merge in place, cancelled as "moved", and the next `next()` said so instead."""
    db = minilsm.DB(db_path, **small_options(block_cache_size=0))
    for i in range(50):
        db.put(b"k%03d" % i, b"v")
    db.flush()  # one table, read from disk by every new merge (no block cache)
    it = db.iterator()
    next(it)
    answers: list[object] = []
    table_close = TableReader.close

    def close_then_move(self: TableReader) -> None:  # close() closing the tables: the other thread moves then
        table_close(self)
        if not answers:
            try:
                it.seek(b"k010")
                answers.append(next(it))
            except minilsm.ClosedError as e:
                answers.append(e)

    monkeypatch.setattr(TableReader, "close", close_then_move)
    db.close()
    monkeypatch.undo()
    assert len(answers) == 1 and isinstance(answers[0], minilsm.ClosedError)
    assert str(answers[0]) == f"{db_path}: the store is closed"

    db = minilsm.DB(db_path, **small_options())
    it = db.iterator()
    next(it)
    scan_cancel = db_module._Scan.cancel

    def close_first(self: Any, message: str, follow: Any = None) -> None:  # between the seek's check and its cancel
        if message == db_module._MOVED and not db.closed:
            db.close()
        scan_cancel(self, message, follow)

    monkeypatch.setattr(db_module._Scan, "cancel", close_first)
    with pytest.raises(minilsm.ClosedError, match="the store is closed"):
        it.seek(b"k003")
    monkeypatch.undo()
    for move in (it.__next__, it.prev, it.seek_to_start, it.seek_to_stop, lambda: it.seek(b"k")):
        with pytest.raises(minilsm.ClosedError, match="the store is closed"):
            move()
    it.close()  # and once closed too, its seeks name the store, as its steps do
    for move in (it.__next__, it.prev, it.seek_to_start, it.seek_to_stop, lambda: it.seek(b"k")):
        with pytest.raises(minilsm.ClosedError, match="the store is closed"):
            move()


def test_an_iterator_goes_on_from_its_place_after_an_interrupted_step_or_move(db_path: str) -> None:
    """A Ctrl-C (KeyboardInterrupt, raised at any bytecode) or a failed read inside a step or a move, caught: the
    iterator still stands at its place (or at the move's), and goes on from there.  Found by raising
    KeyboardInterrupt at each line of DBIterator's methods and of the merge in turn (sys.settrace): the merge
    that the exception ended then ran dry, so the next `next()` said StopIteration in mid-range (and `for` over
    the iterator looped over nothing); a move cut short left a merge cancelled as moved in place, whose next
    step raised ClosedError("...has moved") and then ran dry; and a seek cut short between its assignments put
    the iterator at neither place (after next x3, prev, an interrupted seek, next gave k004 of k000..k006)."""
    db = minilsm.DB(db_path, **small_options(block_cache_size=0))
    items = [(b"k%03d" % i, b"v%d" % i) for i in range(40)]
    for k, v in items:
        db.put(k, v)
    db.flush()  # one table, each step reading it
    keys = [k for k, _ in items]

    def interrupt_at(n: int, move: Callable[[], object]) -> bool:
        """Run `move`, raising KeyboardInterrupt at its `n`th line in minilsm.db or .iterators (False: fewer)."""
        count = 0

        def trace(frame: Any, event: str, arg: object) -> Any:
            nonlocal count
            # Not in a merge that a dropped iterator's collection is closing (GeneratorExit passing its `except`
            # clause), where Python reports the interrupt as unraisable instead of raising it.
            closing = isinstance(sys.exc_info()[1], GeneratorExit)
            if event == "line" and frame.f_code.co_filename in (db_module.__file__, iterators_module.__file__):
                if closing:
                    return trace
                count += 1
                if count == n:
                    raise KeyboardInterrupt
            return trace

        sys.settrace(trace)
        try:
            move()
        except KeyboardInterrupt:
            return True
        finally:
            sys.settrace(None)
        return False

    def five(it: minilsm.DBIterator[bytes]) -> None:
        for i, _ in enumerate(it):
            if i == 4:
                break

    for reverse in (False, True):
        order = keys[::-1] if reverse else keys  # the order `next` takes
        for name, places in (("next", {2, 3}), ("prev", {2, 1}), ("seek", {2, 20}), ("loop", set(range(2, 8)))):
            n = 0
            while True:
                n += 1
                it = db.iterator(reverse=reverse, include_value=False)
                assert [next(it), next(it), next(it), it.prev()] == order[:3] + order[2:3]  # it stands at 2
                move = {
                    "next": it.__next__,
                    "prev": it.prev,
                    "seek": partial(it.seek, keys[20]),
                    "loop": partial(five, it),
                }
                if not interrupt_at(n, move[name]):
                    break
                # It stands at 2 (nothing done) or where the move took it; next, next, prev, prev then tell where.
                got = [next(it, None), next(it, None), it.prev(), it.prev()]
                assert any(got == [order[p], order[p + 1], order[p + 1], order[p]] for p in places), (name, n, got)
                assert [*it] == order[order.index(got[0]) :]  # and a loop goes on from there
                it.close()

    # A read that fails once (EIO): the step raises StoreIOError, and the next one goes on from the place.
    it = db.iterator(include_value=False)
    assert [next(it), next(it)] == keys[:2]
    load_block = TableReader._load_block
    failed: list[int] = []

    def fail_once(self: TableReader, i: int, ahead: Any = None) -> Any:
        if not failed:
            failed.append(i)
            raise OSError(5, "Input/output error")
        return load_block(self, i, ahead)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TableReader, "_load_block", fail_once)
        it.seek(keys[30])
        with pytest.raises(minilsm.StoreIOError):
            next(it)
        assert next(it) == keys[30] and it.prev() == keys[30] and it.prev() == keys[29]
        assert failed
    db.close()


def test_a_prefixed_batch_and_a_plain_one_append_each_other_as_in_plyvel(db_path: str) -> None:
    """plyvel's batches of a prefixed_db are WriteBatches: either kind appends the other, its ops as they are
    (LevelDB's Append copies them whole), so a plain batch's keys do not take the prefix."""
    with minilsm.DB(db_path) as db:
        users = db.prefixed_db(b"u/")
        plain = db.write_batch()
        plain.put(b"x", b"1")
        with users.write_batch() as pb:
            pb.put(b"y", b"2")
            pb.append(plain)
            pb.append(pb)  # itself: its ops twice, as a WriteBatch's
            assert len(pb) == 4
        prefixed = users.write_batch()
        prefixed.put(b"z", b"3")
        with db.write_batch() as wb:
            wb.append(prefixed)
        assert list(db.iterator()) == [(b"u/y", b"2"), (b"u/z", b"3"), (b"x", b"1")]  # what plyvel 1.5.1 gives


def test_a_prefixed_batch_is_written_by_the_store_and_says_when_it_is_spent(db_path: str) -> None:
    """Was: `db.write(pb)` raised TypeError for a prefixed view's batch, which `WriteBatch.append` takes, and the
    batch had no `closed` (nor a repr saying what it is), and neither it nor `PrefixedSnapshot` was exported."""
    with minilsm.DB(db_path) as db:
        pb = db.prefixed_db(b"u/").write_batch()
        assert isinstance(pb, minilsm.PrefixedWriteBatch) and not pb.closed
        pb.put(b"k", b"v")
        db.write(pb)
        assert pb.closed and db.get(b"u/k") == b"v"
        assert repr(pb) == f"<minilsm.PrefixedWriteBatch b'u/' of {pb.batch!r}>" and "closed" in repr(pb)
        with pytest.raises(minilsm.ClosedError):
            db.write(pb)  # spent, as a store's own batch is
        with db.prefixed_db(b"u/").snapshot() as snap:
            assert isinstance(snap, minilsm.PrefixedSnapshot) and snap.get(b"k") == b"v"


def test_a_prefixed_batch_tells_its_size_as_a_batch_does(db_path: str) -> None:
    """plyvel's prefixed_db batches have a WriteBatch's approximate_size: here the bytes of the encoded batch,
    whose keys hold the prefix."""
    with minilsm.DB(db_path) as db:
        pb = db.prefixed_db(b"u/").write_batch()
        assert pb.approximate_size == 12
        pb.put(b"k", b"v")
        assert pb.approximate_size == pb.batch.approximate_size == 12 + 9 + len(b"u/k") + len(b"v")


def test_a_prefixed_key_over_the_limit_is_named_with_its_prefix(db_path: str) -> None:
    """The limit is the whole key's, so a key the caller gave within it may pass it once prefixed: the error
    says so, rather than give the caller's key a length it does not have."""
    with minilsm.DB(db_path) as db:
        users = db.prefixed_db(b"u/")
        long = b"k" * (MAX_KEY_SIZE - 1)
        with users.snapshot() as snap:
            calls: list[Callable[[], object]] = [
                lambda: users.put(long, b""),
                lambda: users.get(long),
                lambda: users.delete(long),
                lambda: long in users,
                lambda: users.write_batch().put(long, b""),
                lambda: users.write_batch().delete(long),
                lambda: snap.get(long),
            ]
            for call in calls:
                with pytest.raises(ValueError, match=f"^key with the view's 2-byte prefix is {MAX_KEY_SIZE + 1} bytes"):
                    call()
            for name in ("start", "stop", "prefix"):
                with pytest.raises(ValueError, match=f"^{name} with the view's 2-byte prefix is"):
                    users.iterator(**{name: long})
                with pytest.raises(ValueError, match=f"^{name} with the view's 2-byte prefix is"):
                    snap.iterator(**{name: long})
            with pytest.raises(ValueError, match=r"^prefix with the view's 2-byte prefix is"):
                users.prefixed_db(long)
        with pytest.raises(ValueError, match=f"^key is {MAX_KEY_SIZE + 1} bytes"):
            users.put(long + b"kk", b"")  # over the limit alone: the caller's key is named, as the store's


def test_prefix_with_start_and_stop_over_every_kind_of_source_matches_a_model(db_path: str) -> None:
    """A gap: `prefix` was tested alone, never narrowed further by `start`/`stop`, and 0xff keys only in a memtable."""
    keys = sorted({b"".join(p) for n in range(4) for p in itertools.product([b"", b"\x00", b"a", b"\xff"], repeat=n)})
    rng = random.Random(5)
    model: dict[bytes, bytes] = {}
    with minilsm.DB(db_path, **small_options()) as db:
        for step in range(400):  # tables at several levels, a level-0 table and the memtable all hold some
            k = rng.choice(keys)
            if rng.random() < 0.25:
                db.delete(k)
                model.pop(k, None)
            else:
                model[k] = b"%d" % step * rng.randrange(1, 20)
                db.put(k, model[k])
            if step in (150, 300):
                db.compact_range()
            if step == 350:
                db.flush()
        assert db.version.levels[0] and db.version.bottom_level_with_data() > 0 and not db._mem.empty
        snap_model, snap = dict(model), db.snapshot()
        for k in keys[::2]:
            db.delete(k)
            model.pop(k, None)
        bounds = [None, b"", b"\x00", b"a", b"a\xff", b"\xff", b"\xff\xff", b"\xff\xff\xff\xff"]
        prefixes = [b"", b"a", b"\xff", b"\xff\xff", b"a\xff", b"\x00\x00"]
        for view, m in ((db, model), (snap, snap_model)):
            for start, stop, prefix, reverse in itertools.product(bounds, bounds, prefixes, (False, True)):
                want = sorted(
                    (k, v)
                    for k, v in m.items()
                    if k.startswith(prefix) and (start is None or k >= start) and (stop is None or k < stop)
                )
                got = list(view.iterator(start, stop, prefix=prefix, reverse=reverse))
                assert got == (want[::-1] if reverse else want), (view, start, stop, prefix, reverse)
        snap.close()


def test_iterator_sees_a_fixed_view(db: minilsm.DB) -> None:
    fill(db, 200)
    it = db.iterator()
    first = next(it)
    for i in range(200):
        db.put(b"k%05d" % i, b"changed")
    db.put(b"zzz", b"new")
    db.flush()
    db.compact_range()
    rest = list(it)
    assert first == (b"k00000", b"v0" * 7)
    assert len(rest) == 199
    assert all(v != b"changed" for _, v in rest)
    assert db.get(b"k00001") == b"changed"


@pytest.mark.parametrize("seed", range(4))
def test_long_scans_over_overlapping_sources_match_a_model(db_path: str, seed: int) -> None:
    # Many small blocks, several level-0 tables, deeper levels and the memtable, with overwrites,
    # tombstones and snapshots: every scan of every snapshot against the model of its time.
    rng = random.Random(seed)
    opts = small_options(level0_compaction_trigger=4, level0_stop_writes_trigger=8, memtable_size=4096)
    with minilsm.DB(db_path, **opts) as db:
        model: dict[bytes, bytes | None] = {}
        views: list[tuple[minilsm.Snapshot, dict[bytes, bytes]]] = []
        keys = [b"k%04d" % rng.randrange(700) for _ in range(3000)]
        for i, key in enumerate(keys):
            value = None if rng.random() < 0.15 else b"v%d" % i  # None: a delete
            if value is None:
                db.delete(key)
            else:
                db.put(key, value)
            model[key] = value
            if i % 700 == 350:
                views.append((db.snapshot(), {k: v for k, v in model.items() if v is not None}))
        views.append((db.snapshot(), {k: v for k, v in model.items() if v is not None}))
        for key in (b"k0001", b"k0350", b"k0699"):
            db.put(key, b"newest")  # after every snapshot: versions in the memtable that all of them hide
        levels = db.version.levels
        assert levels[0] and sum(1 for level in levels[1:] if level) >= 2  # the premise: sources overlap
        for snap, expect in views:
            items = sorted(expect.items())
            assert list(snap.iterator()) == items
            assert list(snap.iterator(reverse=True)) == items[::-1]
            lo, hi = sorted(b"k%04d" % rng.randrange(700) for _ in range(2))
            inside = [(k, v) for k, v in items if lo <= k < hi]
            assert list(snap.iterator(start=lo, stop=hi)) == inside
            assert list(snap.iterator(start=lo, stop=hi, reverse=True)) == inside[::-1]
            assert list(snap.iterator(prefix=b"k03", include_value=False)) == [k for k, _ in items if k[:3] == b"k03"]
            it = snap.iterator(start=lo)
            first = [p for p in items if p[0] >= lo][:100]
            assert [next(it) for _ in first] == first  # partial consumption, then close
            it.close()
            snap.close()


def test_closing_an_iterator_deletes_the_tables_only_it_held(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        fill(db, 300)
        db.flush()
        it = db.iterator()
        next(it)
        pinned = {f"{n:06d}.sst" for n in db.version.numbers()}
        db.compact_range()
        assert not pinned & {f"{n:06d}.sst" for n in db.version.numbers()}  # all replaced
        assert pinned <= set(os.listdir(db_path))  # still there: the iterator reads them
        assert len(list(it)) == 299
        assert pinned <= set(os.listdir(db_path))  # run out, but it may seek back: still held, as in LevelDB
        it.seek_to_start()
        assert len(list(it)) == 300
        it.close()
        assert not pinned & set(os.listdir(db_path))  # closed, so released and deleted


def test_of_many_iterators_on_an_old_view_the_last_to_close_sweeps_its_tables(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: each iterator closed on a view that compaction had replaced swept the directory (a listing, under the
    store's mutex), though the others still held the view and nothing could go."""
    with minilsm.DB(db_path, **small_options()) as db:
        fill(db, 300)
        db.flush()
        its = [db.iterator() for _ in range(5)]
        pinned = {f"{n:06d}.sst" for n in db.version.numbers()}
        db.compact_range()
        sweeps = []
        sweep = db._delete_obsolete_files
        monkeypatch.setattr(db, "_delete_obsolete_files", lambda: (sweeps.append(1), sweep())[1])
        for it in its[:-1]:
            it.close()
        assert sweeps == [] and pinned <= set(os.listdir(db_path))  # the last iterator reads them still
        its[-1].close()
        assert sweeps == [1] and not pinned & set(os.listdir(db_path))


def test_snapshot_keeps_the_old_view_through_compaction(db: minilsm.DB) -> None:
    data = fill(db, 300)
    with db.snapshot() as snap:
        for k in list(data)[:150]:
            db.delete(k)
        for k in list(data)[150:]:
            db.put(k, b"overwritten")
        db.flush()
        db.compact_range()
        assert snap.get(b"k00000") == data[b"k00000"]
        assert snap[b"k00200"] == data[b"k00200"]
        assert list(snap.iterator()) == sorted(data.items())
        assert db.get(b"k00000") is None
        assert db.get(b"k00200") == b"overwritten"
    with pytest.raises(minilsm.ClosedError):
        snap.get(b"k00000")


def test_snapshot_release_is_close_as_in_plyvel(db: minilsm.DB) -> None:
    """plyvel's Snapshot has both close() and release(); minilsm's had close() only (AttributeError)."""
    db.put(b"k", b"old")
    snap = db.snapshot()
    db.put(b"k", b"new")
    assert snap.get(b"k") == b"old"
    snap.release()
    with pytest.raises(minilsm.ClosedError):
        snap.get(b"k")
    snap.release()  # twice is harmless, as close() is
    assert db.get(b"k") == b"new"


def test_write_batch_is_atomic_and_discarded_on_exception(db: minilsm.DB) -> None:
    db.put(b"b", b"old")
    with db.write_batch() as wb:
        wb.put(b"a", b"1")
        wb.delete(b"b")
    assert db.get(b"a") == b"1" and db.get(b"b") is None
    with pytest.raises(RuntimeError), db.write_batch() as wb:
        wb.put(b"c", b"3")
        raise RuntimeError("boom")
    assert db.get(b"c") is None
    batch = minilsm.WriteBatch()
    batch.put(b"d", b"4")
    batch.put(b"d", b"5")  # later op in a batch wins, as in LevelDB
    db.write(batch)
    assert db.get(b"d") == b"5"


def test_write_batch_transaction_false_writes_the_batch_when_the_block_raises(db: minilsm.DB) -> None:
    """plyvel's default: the block's end writes the batch whatever happened in it, and the exception goes on.
    ``transaction=True`` is the store's own default, and None is False, as plyvel takes it."""
    for transaction, view in ((False, db), (None, db), (False, db.prefixed_db(b"p/")), (True, db)):
        with pytest.raises(RuntimeError, match="boom"), view.write_batch(transaction=transaction) as wb:
            wb.put(b"k", b"%r" % transaction)
            wb.delete(b"gone")
            raise RuntimeError("boom")
        assert getattr(wb, "batch", wb).closed  # spent either way (a prefixed batch wraps the store's)
    assert db.get(b"k") == b"None" and db.get(b"p/k") == b"False" and db.get(b"gone") is None
    with db.write_batch(transaction=False) as wb:
        wb.put(b"clean", b"exit")
    assert db.get(b"clean") == b"exit"


def test_a_bound_batch_once_written_or_discarded_is_not_written_again_through_db_write(db: minilsm.DB) -> None:
    """A batch of ``with db.write_batch()`` is closed once written or discarded, and writing it again raises
    ClosedError.  ``db.write(batch)`` did not ask: it applied the spent batch a second time, so an old value
    overwrote a newer write."""
    with db.write_batch() as wb:
        wb.put(b"k", b"old")
    db.put(b"k", b"new")
    with pytest.raises(minilsm.ClosedError):
        db.write(wb)
    assert db.get(b"k") == b"new"
    with pytest.raises(RuntimeError), db.write_batch() as discarded:
        discarded.put(b"k", b"discarded")
        raise RuntimeError("boom")
    seq = db.last_sequence
    with pytest.raises(minilsm.ClosedError):
        db.write(discarded)
    assert db.get(b"k") == b"new" and db.last_sequence == seq


def test_db_write_refuses_a_batch_bound_to_another_store(tmp_path: object) -> None:
    """Was: ``other.write(wb)`` of a batch from ``db.write_batch()`` wrote it into `other` and spent it, so its
    with-block ended without writing anything to `db`: the writes went to the wrong store, silently."""
    with minilsm.DB(os.path.join(str(tmp_path), "a")) as db, minilsm.DB(os.path.join(str(tmp_path), "b")) as other:
        with db.write_batch() as wb:
            wb.put(b"k", b"v")
            with pytest.raises(ValueError, match="another store"):
                other.write(wb)
            assert not wb.closed
        assert db.get(b"k") == b"v" and other.get(b"k") is None
        loose = minilsm.WriteBatch()  # a standalone batch belongs to no store: any store may write it
        loose.put(b"k", b"loose")
        other.write(loose)
        assert other.get(b"k") == b"loose"


def test_db_write_of_a_bound_batch_inside_its_block_writes_it_once(db: minilsm.DB) -> None:
    """Was: ``db.write(wb)`` inside ``with db.write_batch() as wb`` applied the batch, and the block's end
    applied it again, putting its old values back over the writes made in between.  Now db.write spends a
    bound batch as its own `write` does: the block's end neither writes it again nor raises, and a second
    db.write raises ClosedError.  (Written by its block first, then passed to db.write: ClosedError, as the
    test above pins.)"""
    with db.write_batch() as wb:
        wb.put(b"k", b"batch")
        wb.put(b"j", b"batch")
        db.write(wb)
        assert wb.closed and db.get(b"k") == b"batch"
        seq = db.last_sequence
        db.put(b"k", b"newer")
        with pytest.raises(minilsm.ClosedError):
            wb.put(b"late", b"op")
    assert db.get(b"k") == b"newer" and db.last_sequence == seq + 1
    assert list(wb) == [(KIND_VALUE, b"k", b"batch"), (KIND_VALUE, b"j", b"batch")]
    with pytest.raises(minilsm.ClosedError):
        db.write(wb)
    assert db.get(b"k") == b"newer" and db.last_sequence == seq + 1
    with pytest.raises(minilsm.ClosedError), db.write_batch() as twice:
        twice.put(b"k", b"twice")
        db.write(twice)
        db.write(twice)
    assert db.get(b"k") == b"twice" and db.last_sequence == seq + 2
    loose = minilsm.WriteBatch()  # not bound: db.write leaves it open, to reuse
    loose.put(b"k", b"loose")
    db.write(loose)
    db.write(loose)
    assert not loose.closed and db.last_sequence == seq + 4


def test_a_batch_touching_one_key_many_times_ends_with_its_last_op_everywhere(db_path: str) -> None:
    """Gap: only put-then-put was pinned.  A batch that puts and deletes one key several times must end with its
    last op in the memtable, in the table a flush writes (one version kept), after a crash through log
    replay, and before it for a snapshot; the batch takes one sequence number per op."""

    def batch(last_put: bool) -> minilsm.WriteBatch:
        b = minilsm.WriteBatch()
        for v in (b"1", b"2", b"3"):
            b.put(b"k", v)
            b.delete(b"k")
        if last_put:
            b.put(b"k", b"last")
        b.put(b"other", b"x")
        return b

    db = minilsm.DB(db_path, **small_options(memtable_size=1 << 20))
    db.put(b"k", b"before")
    snap = db.snapshot()
    seq = db.last_sequence
    db.write(batch(last_put=False))
    assert db.last_sequence == seq + 7
    assert db.get(b"k") is None and snap.get(b"k") == b"before"
    db.write(batch(last_put=True))
    assert db.last_sequence == seq + 15
    assert db.get(b"k") == b"last" and snap.get(b"k") == b"before"
    crash(db)
    with minilsm.DB(db_path, **small_options(memtable_size=1 << 20)) as db:
        assert db.recovery.records_replayed == 3
        assert db.last_sequence == seq + 15
        assert db.get(b"k") == b"last" and db.get(b"other") == b"x"
        (table,) = db.tables()  # the replayed log became one table: one version per key, no snapshot left
        assert (table.entries, table.tombstones) == (2, 0)
        db.delete(b"k")
        db.flush()
        assert db.get(b"k") is None
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(b"k") is None and list(db) == [b"other"]


def test_type_errors_and_size_limits_lose_nothing(db: minilsm.DB) -> None:
    db.put(b"keep", b"me")
    with pytest.raises(TypeError, match=r"^key must be bytes, bytearray or memoryview, not str; encode it first"):
        db.put("k", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^value must be bytes, bytearray or memoryview, not str; encode it first"):
        db.put(b"k", "v")  # type: ignore[arg-type]
    # Was: "key must be bytes, not array", as if the bytearray and memoryview it takes were refused too.
    with pytest.raises(TypeError, match=r"^key must be bytes, bytearray or memoryview, not array$"):
        db.get(array.array("b", b"k"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be bytes, bytearray or memoryview, not int$"):  # as a key is
        db.iterator(prefix=123)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.get(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.write([(b"a", b"b")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="maximum"):
        db.put(b"x" * (MAX_KEY_SIZE + 1), b"v")
    with pytest.raises(ValueError, match="maximum"):
        db.put(b"k", b"x" * (MAX_VALUE_SIZE + 1))
    with pytest.raises(TypeError), db.write_batch() as wb:
        wb.put(b"ok", b"1")
        wb.put("bad", b"2")  # type: ignore[arg-type]
    assert db.get(b"ok") is None
    assert db.get(b"keep") == b"me"
    db.put(bytearray(b"ba"), memoryview(b"mv"))  # bytes-like values are copied, not refused
    assert db.get(b"ba") == b"mv"


def test_closed_store_raises_clear_errors(db_path: str) -> None:
    db = minilsm.DB(db_path)
    db.put(b"k", b"v")
    db.close()
    db.close()  # idempotent
    one_put = minilsm.WriteBatch()
    one_put.put(b"k", b"v2")
    for call in (
        lambda: db.get(b"k"),
        lambda: db.put(b"k", b"v"),
        lambda: db.delete(b"k"),
        lambda: db.iterator(),
        lambda: db.snapshot(),
        lambda: db.flush(),
        # Was: a batch was handed out, and the block filled it, only for its end to raise ClosedError.
        lambda: db.write_batch(),
        # Was: an empty batch returned quietly, where any other raised.
        lambda: db.write(minilsm.WriteBatch()),
        lambda: db.write(one_put),
        lambda: db.compact_range(),
        lambda: db.explain(b"k"),
        lambda: db.may_contain(b"k"),
        lambda: b"k" in db,
        lambda: db.stats(measure_space=True),  # reads the tables
    ):
        with pytest.raises(minilsm.ClosedError):
            call()
    # What the store keeps in memory still answers, as the README says, for a report on a closed store.
    assert db.stats().user_bytes_written == 2 and db.tables() == [] and db.last_sequence == 1
    db.wait_for_compactions()  # returns at once
    with minilsm.DB(db_path) as db2:
        assert db2.get(b"k") == b"v"


# Each as a user holds it: a DBIterator, or the bare generator a `for` loop over one steps (as `iter(db)` is).
_ITERATORS: dict[str, Callable[[minilsm.DB], Iterator[Any]]] = {
    "forward": lambda db: db.iterator(),
    "reverse": lambda db: db.iterator(reverse=True),
    "keys": lambda db: db.iterator(include_value=False),
    "values": lambda db: db.iterator(include_key=False),
    "prefix-range": lambda db: db.iterator(start=b"k00010", stop=b"k00200", prefix=b"k00", reverse=True),
    "snapshot": lambda db: db.snapshot().iterator(),
    "for-loop": lambda db: iter(db.iterator()),
    "iter(db)": lambda db: iter(db),
}


@pytest.mark.parametrize("shape", ["memtable", "tables"])
@pytest.mark.parametrize("started", [False, True], ids=["unstarted", "started"])
@pytest.mark.parametrize("kind", list(_ITERATORS))
def test_closing_the_store_closes_its_iterators(db_path: str, kind: str, started: bool, shape: str) -> None:
    """Was: after db.close() an iterator went on yielding what it already held (the memtable's keys, a
    decoded block) and failed only at its next block read, with a ClosedError naming a table, or never on a
    store whose keys were all in memory.  plyvel closes a store's iterators with it: now the next step of
    each raises ClosedError naming the store, and a DBIterator goes on raising it."""
    db = minilsm.DB(db_path, **(small_options() if shape == "tables" else {}))
    fill(db, 300)
    assert bool(db.version.numbers()) == (shape == "tables")
    it = _ITERATORS[kind](db)
    if started:
        next(it)
    db.close()
    for _ in range(2 if isinstance(it, minilsm.DBIterator) else 1):
        with pytest.raises(minilsm.ClosedError, match=re.escape(f"{db_path}: the store is closed")):
            next(it)


def test_an_iterator_closed_with_its_store_lets_go_of_what_it_read(db_path: str) -> None:
    """Was: an iterator that outlived its store's close() still held the version it read, its tables and,
    through the version's release callback, the store itself, until the iterator was dropped."""
    db = minilsm.DB(db_path, **small_options())
    fill(db, 300)
    db.flush()
    started, unstarted = db.iterator(), db.iterator(reverse=True)
    next(started)
    tables = {id(t) for _, t in db.version.tables()}  # a TableReader takes no weak reference
    db.compact_range()  # from here on the iterators alone hold those tables
    store = weakref.ref(db)
    db.close()
    del db
    gc.collect()
    assert store() is None, "the closed store is kept alive by its iterators"
    assert not [o for o in gc.get_objects() if type(o) is TableReader and id(o) in tables], "tables kept"
    for it in (started, unstarted):
        with pytest.raises(minilsm.ClosedError):
            next(it)
        it.close()  # closing it too is harmless


@pytest.mark.parametrize("started", [False, True], ids=["unstarted", "started"])
def test_a_closed_iterator_lets_go_of_what_it_read(db_path: str, started: bool) -> None:
    """Was: since the scan's heap and sources live in its pin (for close() to cancel), an iterator closed by
    its `close` still held them as long as the object lived: the memtable it read (kept after its flush), the
    tables and the blocks it had decoded."""
    db = minilsm.DB(db_path, **small_options(memtable_size=1 << 20))
    fill(db, 300)
    read = [db._mem, *(t for _, t in db.version.tables())]  # neither takes a weak reference
    it = db.iterator()
    if started:
        next(it)
    it.close()
    db.flush()
    db.compact_range()  # the memtable and the tables the iterator read are now garbage
    gc.collect()
    kept = [o for o in read if [r for r in gc.get_referrers(o) if r is not read]]
    assert not kept, "a closed iterator keeps what it read"
    with pytest.raises(minilsm.ClosedError):
        next(it)
    db.close()


def test_a_spent_batch_lets_go_of_its_store(db_path: str) -> None:
    """Was: a written or discarded batch still held its store (its owner, and its writer's closure), so a store
    dropped without close() stayed open, its directory locked, as long as a batch variable lived."""
    db = minilsm.DB(db_path)
    with db.write_batch() as written:
        written.put(b"a", b"1")
    with pytest.raises(KeyError), db.prefixed_db(b"p/").write_batch() as discarded:
        discarded.put(b"b", b"2")
        raise KeyError("the block raised")
    by_store = db.write_batch()
    by_store.put(b"c", b"3")
    db.write(by_store)
    store = weakref.ref(db)
    del db
    gc.collect()
    assert store() is None, "a spent batch keeps its store alive"
    with minilsm.DB(db_path) as again:  # the dropped store's lock is released
        assert list(again.iterator()) == [(b"a", b"1"), (b"c", b"3")]
        for batch in (written, discarded.batch, by_store):
            with pytest.raises(minilsm.ClosedError, match=r"written|discarded"):
                batch.write()
            with pytest.raises(minilsm.ClosedError):
                again.write(batch)  # not "belongs to another store": it is spent, and says so


def test_a_snapshot_of_a_closed_store_raises_closed_error_naming_the_store(db_path: str) -> None:
    db = minilsm.DB(db_path)
    db.put(b"k", b"v")
    snap = db.snapshot()
    db.close()
    for call in (lambda: snap.get(b"k"), lambda: snap.iterator(), lambda: snap[b"k"], lambda: b"k" in snap):
        with pytest.raises(minilsm.ClosedError, match=re.escape(f"{db_path}: the store is closed")):
            call()
    snap.close()


def test_second_open_is_refused_in_process_and_across_processes(db_path: str) -> None:
    """The refusal says whose the lock is (was: "already open (by this or another process)" either way)."""
    with minilsm.DB(db_path) as db:
        db.put(b"k", b"v")
        with pytest.raises(minilsm.LockError, match=re.escape(f"{db_path} is already open in this process")):
            minilsm.DB(db_path)
        with pytest.raises(minilsm.LockError, match=re.escape(f"{db_path} is open in this process; close it")):
            check_store(db_path)
        code = f"import minilsm\ntry:\n    minilsm.DB({db_path!r})\nexcept minilsm.LockError as e:\n    print(e)\n"
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        assert out.stdout.strip() == f"{db_path} is already open (its LOCK is held by another process)", out.stderr
        assert db.get(b"k") == b"v"


def test_a_lock_this_process_let_go_is_not_said_to_be_held_here_once_another_process_takes_it(db_path: str) -> None:
    """What this process lists as its own locks follows each way of letting one go: a close, a failed open, a
    store dropped without close(); else a refusal by another process's lock would say "in this process"."""
    minilsm.DB(db_path).close()
    os.remove(os.path.join(db_path, "MANIFEST"))  # its log left without it: the open fails under the lock
    with pytest.raises(minilsm.CorruptionError):
        minilsm.DB(db_path)
    shutil.rmtree(db_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        minilsm.DB(db_path)  # dropped at once
        gc.collect()
    holder = f"import minilsm, sys\ndb = minilsm.DB({db_path!r})\nprint('open', flush=True)\nsys.stdin.read()\n"
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(minilsm.__file__))}
    with subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                          text=True) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stdin is not None
        try:
            assert proc.stdout.readline() == "open\n"
            with pytest.raises(minilsm.LockError, match=re.escape("(its LOCK is held by another process)")):
                minilsm.DB(db_path)
        finally:
            proc.stdin.close()


def test_a_store_collected_while_this_thread_lists_a_lock_lets_go_of_its_own(db_path: str) -> None:
    """A lock's list of this process's locks is guarded by a mutex that an allocation can be made under, and an
    allocation may collect a dropped store, whose lock's `__del__` releases it in the same thread: with a plain
    lock that release waited on itself for ever."""
    from minilsm import fs

    db = minilsm.DB(db_path)
    lock = db._file_lock
    done = threading.Event()

    def release_under_the_mutex() -> None:
        with fs._held_mutex:  # as when a collection runs inside the locked section
            lock.release()
        done.set()

    threading.Thread(target=release_under_the_mutex, daemon=True).start()
    assert done.wait(10), "a lock released while its own thread held the list's mutex hung"
    db._file_lock = lock  # released already: close's release again does nothing
    db.close()
    minilsm.DB(db_path).close()  # let go, and no longer listed as held here


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_lock_file_removed_or_replaced_before_its_lock_is_taken_is_opened_again(
    db_path: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Was: the lock was taken on the file that the path no longer named, so another open made (or found) the
    path's new file and locked that too: two stores open on one directory.  So it went when a destroy removed the
    LOCK, its last act, while another process opened the store."""
    minilsm.DB(db_path).close()
    lock_path = os.path.join(db_path, "LOCK")
    real_flock = fcntl.flock
    meddled = []

    def flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_EX and not meddled:  # after the open, before the lock: as the other holder acts
            meddled.append(how)
            if how == "removed":
                os.remove(lock_path)
            else:
                with open(lock_path + ".new", "wb"):
                    pass
                os.replace(lock_path + ".new", lock_path)
        real_flock(fd, operation)

    monkeypatch.setattr(fs_module.fcntl, "flock", flock)
    with minilsm.DB(db_path) as db:
        assert meddled == [how]
        with pytest.raises(minilsm.LockError, match="already open in this process"):
            minilsm.DB(db_path)  # the file now at the path is the one held
        db.put(b"k", b"v")
    with minilsm.DB(db_path) as db:
        assert db.get(b"k") == b"v"


def test_a_lock_file_removed_each_time_it_is_locked_is_refused_not_tried_for_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "LOCK")
    removes = [path]  # the file each lock has removed under it, the last named
    real_flock = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_EX:
            os.remove(removes[-1])
        real_flock(fd, operation)

    monkeypatch.setattr(fs_module.fcntl, "flock", flock)
    with pytest.raises(OSError, match="removed or replaced each time it was locked") as e:
        fs_module.DEFAULT_FS.lock(path)
    # Not a refusal: no one need hold the lock, and a store's open says so rather than "held by another process".
    assert e.value.errno == errno.EBUSY and not isinstance(e.value, BlockingIOError)
    os.mkdir(tmp_path / "db")
    removes.append(str(tmp_path / "db" / "LOCK"))
    with pytest.raises(minilsm.StoreIOError, match="removed or replaced each time it was locked"):
        minilsm.DB(str(tmp_path / "db"))
    monkeypatch.undo()
    fs_module.DEFAULT_FS.lock(path).release()  # nothing of the tries is left held
    minilsm.DB(str(tmp_path / "db")).close()


def test_create_if_missing_and_error_if_exists(db_path: str) -> None:
    with pytest.raises(minilsm.NotFoundError):
        minilsm.DB(db_path, create_if_missing=False)
    minilsm.DB(db_path).close()
    with pytest.raises(minilsm.ExistsError):
        minilsm.DB(db_path, error_if_exists=True)
    with pytest.raises(TypeError, match="unknown option"):
        minilsm.DB(db_path, bits_per_keyy=3)
    with pytest.raises(ValueError):
        minilsm.DB(db_path, bits_per_key=-1)
    with minilsm.DB(db_path, minilsm.Options(bits_per_key=4), block_size=1024) as db:
        assert db.options.bits_per_key == 4 and db.options.block_size == 1024


def test_a_file_in_place_of_the_directory_is_a_clear_error(tmp_path: object) -> None:
    p = os.path.join(str(tmp_path), "file")
    with open(p, "w") as f:
        f.write("x")
    with pytest.raises(minilsm.Error):
        minilsm.DB(p)


def test_crash_without_close_recovers_from_the_log(db_path: str) -> None:
    db = minilsm.DB(db_path, **small_options())
    data = fill(db, 250)
    db.delete(b"k00007")
    del data[b"k00007"]
    crash(db)
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.recovery.records_replayed > 0
        assert list(db.iterator()) == sorted(data.items())


def ten_writes_then_crash(db_path: str) -> str:
    """Ten acknowledged puts left only in the log by a crash; returns the log's path."""
    db = minilsm.DB(db_path, memtable_size=1 << 20)
    for i in range(10):
        db.put(b"k%d" % i, b"v" * 50)
    crash(db)
    logs = sorted(n for n in os.listdir(db_path) if n.endswith(".log"))
    return os.path.join(db_path, logs[-1])


def test_torn_log_tail_is_dropped_and_reported(db_path: str, caplog: pytest.LogCaptureFixture) -> None:
    last = ten_writes_then_crash(db_path)
    size = os.path.getsize(last)
    with open(last, "r+b") as f:
        f.truncate(size - 20)  # the last record loses its tail, as if the crash hit mid-append
    with minilsm.DB(db_path) as db:
        assert db.recovery.dropped_bytes > 0
        assert f"torn record of {db.recovery.dropped_bytes} bytes" in caplog.text
        assert [db.get(b"k%d" % i) for i in range(9)] == [b"v" * 50] * 9
        assert db.get(b"k9") is None


def test_damaged_log_record_in_the_middle_is_corruption_unless_paranoid_is_off(db_path: str) -> None:
    last = ten_writes_then_crash(db_path)
    with open(last, "r+b") as f:
        f.seek(os.path.getsize(last) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(minilsm.CorruptionError) as e:
        minilsm.DB(db_path)
    assert os.path.basename(last) in str(e.value)
    with minilsm.DB(db_path, paranoid_checks=False) as db:
        assert db.recovery.corruption is not None
        got = [db.get(b"k%d" % i) for i in range(10)]
        n = got.index(None)
        assert got[:n] == [b"v" * 50] * n and all(g is None for g in got[n:])


class _StallFlushFS(FileSystem):
    """Holds the first table a flush starts until `go` is set, so that a second log fills meanwhile."""

    def __init__(self) -> None:
        self.stalled = threading.Event()
        self.go = threading.Event()

    def open_writable(self, path: str) -> Any:
        if path.endswith(".sst.tmp") and not self.go.is_set():
            self.stalled.set()
            self.go.wait(10)
        return super().open_writable(path)


def open_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def two_logs_left_by_a_crash(db_path: str, copy: str) -> tuple[str, str]:
    """In `copy`, the files a crash leaves while the log of a frozen memtable (a0...) waits for its flush and
    the next log holds the rest of a0..a9 and b0..b4; returns the two logs' paths."""
    fs = _StallFlushFS()
    db = minilsm.DB(db_path, memtable_size=600, fs=fs)
    for i in range(10):
        db.put(b"a%d" % i, b"v" * 50)  # fills the first log; the 10th write freezes it
    assert fs.stalled.wait(10)
    for i in range(5):
        db.put(b"b%d" % i, b"w" * 50)  # into the second log, while the first one's flush is held
    os.mkdir(copy)
    logs = sorted(n for n in os.listdir(db_path) if n.endswith(".log"))
    for name in [*logs, "MANIFEST"]:
        shutil.copy(os.path.join(db_path, name), copy)  # what a crash at this moment leaves
    fs.go.set()
    db.close()
    assert len(logs) == 2
    first, second = (os.path.join(copy, n) for n in logs)
    return first, second


def test_recovery_that_stops_at_damage_reports_the_logs_it_did_not_replay(db_path: str, tmp_path: Any) -> None:
    """Regression: with paranoid_checks=False, damage in the log of a frozen memtable stopped recovery before
    the newer log, yet the report said both logs were replayed and left the newer log's bytes out of
    dropped_bytes; and the store's new log took the skipped log's file number, truncating it in place."""
    copy = str(tmp_path / "copy")
    first, second = two_logs_left_by_a_crash(db_path, copy)
    logs = [os.path.basename(first), os.path.basename(second)]
    size = os.path.getsize(first)
    with open(first, "r+b") as f:  # damage in the middle of the first log
        f.seek(size // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    skipped = os.path.getsize(second)
    with minilsm.DB(copy, paranoid_checks=False, background=False) as db:
        r = db.recovery
        assert r.corruption is not None and 0 < r.records_replayed < 10
        assert r.logs_replayed == 1
        assert r.dropped_bytes > skipped  # the damaged log's tail and the whole newer log
        assert [db.get(b"b%d" % i) for i in range(5)] == [None] * 5
        assert os.path.basename(db._log_path(db._log.number)) not in logs


@pytest.mark.parametrize("damage", ["truncated", "last_record_flipped"])
def test_a_damaged_end_of_an_older_log_is_not_a_torn_tail(db_path: str, tmp_path: Any, damage: str) -> None:
    """Regression: a damaged last record passed for a torn tail in any log, so in the log of a frozen memtable
    (synced when it was frozen, so never torn by a crash) it was dropped in silence and the newer log was
    replayed after the hole: the last write of that log, acknowledged, was lost while the later b0..b4
    stayed, even with paranoid_checks.  It is damage when a newer log holds records; a torn tail only when none does."""
    copy = str(tmp_path / "copy")
    first, _ = two_logs_left_by_a_crash(db_path, copy)
    size = os.path.getsize(first)
    with open(first, "r+b") as f:
        if damage == "truncated":
            f.truncate(size - 20)
        else:
            f.seek(size - 3)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x40]))
    intact = len(read_log(open_bytes(first), first).records)  # alone, the log ends in a torn tail
    with pytest.raises(minilsm.CorruptionError) as e:
        minilsm.DB(copy, background=False)
    assert e.value.path == first
    report = check_store(copy)
    assert [(f.file, f.damage) for f in report.findings] == [(os.path.basename(first), True)]
    with minilsm.DB(copy, paranoid_checks=False, background=False) as db:  # the writes before the hole, only
        n = db.recovery.records_replayed
        assert db.recovery.corruption is not None and n == intact
        assert [db.get(b"a%d" % i) for i in range(10)] == [b"v" * 50] * n + [None] * (10 - n)
        assert [db.get(b"b%d" % i) for i in range(5)] == [None] * 5


@pytest.mark.parametrize("records_left", ["all_but_the_last", "none"])
def test_an_older_log_cut_at_a_record_boundary_is_corruption(db_path: str, tmp_path: Any, records_left: str) -> None:
    """Regression: the log of a frozen memtable (synced when it was frozen) cut at a record boundary, or to
    zero bytes, ends in no torn tail, so recovery replayed it and then the newer log as if nothing were
    missing: acknowledged writes were lost in silence, even with paranoid_checks, and minilsm check said ok.
    A write takes the numbers right after the one before it, so the newer log's first record shows the gap;
    and an older log with no record at all before a log with records has lost them."""
    copy = str(tmp_path / "copy")
    first, _ = two_logs_left_by_a_crash(db_path, copy)
    data = open_bytes(first)
    records = read_log(data, first).records
    with open(first, "r+b") as f:
        f.truncate(len(data) - 16 - len(records[-1]) if records_left == "all_but_the_last" else 0)
    assert read_log(open_bytes(first), first).dropped_bytes == 0  # alone, the log looks whole
    with pytest.raises(minilsm.CorruptionError) as e:
        minilsm.DB(copy, background=False)
    assert e.value.path == first and "lost" in e.value.detail
    report = check_store(copy)
    assert [(f.file, f.damage) for f in report.findings] == [(os.path.basename(first), True)]
    with minilsm.DB(copy, paranoid_checks=False, background=False) as db:  # as at a damaged end: stop there
        n = db.recovery.records_replayed
        assert db.recovery.corruption is not None and n == (
            len(records) - 1 if records_left == "all_but_the_last" else 0
        )
        assert [db.get(b"a%d" % i) for i in range(10)] == [b"v" * 50] * n + [None] * (10 - n)
        assert [db.get(b"b%d" % i) for i in range(5)] == [None] * 5


def test_a_record_jumping_ahead_within_a_log_is_corruption(tmp_path: Any) -> None:
    """Records of one log are consecutive writes: one whose sequence number skips ahead says records between
    were lost (a forged or spliced log), and is refused as one going back is."""
    from minilsm.batch import encode_batch, replay

    path = str(tmp_path / "000007.log")
    ops = [(KIND_VALUE, b"k", b"v")]
    assert replay([encode_batch(5, ops), encode_batch(6, ops)], 2, path) == 6  # the first may start above
    with pytest.raises(minilsm.CorruptionError, match="record 1 has sequence number 8, not 6") as e:
        replay([encode_batch(5, ops), encode_batch(8, ops)], 2, path)
    assert e.value.path == path


def test_a_torn_tail_before_an_empty_newer_log_is_a_torn_tail(db_path: str) -> None:
    """A crash mid-append, then an open that failed after creating its new log: the torn record is the last
    thing ever written, and the store opens without it."""
    db = minilsm.DB(db_path, background=False)
    for i in range(3):
        db.put(b"k%d" % i, b"v")
    crash(db)
    (log,) = (n for n in os.listdir(db_path) if n.endswith(".log"))
    path = os.path.join(db_path, log)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 1)
    open(os.path.join(db_path, f"{int(log[:-4]) + 1:06d}.log"), "wb").close()  # the failed open's new log
    assert check_store(db_path).ok
    with minilsm.DB(db_path, background=False) as db:
        assert db.recovery.dropped_bytes > 0 and db.recovery.corruption is None
        assert [db.get(b"k%d" % i) for i in range(3)] == [b"v", b"v", None]


def test_a_missing_log_the_manifest_needs_is_corruption(db_path: str) -> None:
    """Regression: the manifest names the oldest log holding unflushed writes, which exists from before the
    manifest names it until a newer manifest moves past it; yet recovery replayed whatever logs it found, so
    with that log deleted the store opened without its acknowledged writes and said nothing.  A missing
    table was already a CorruptionError; a missing log now is too (and damage to minilsm check)."""
    db = minilsm.DB(db_path, background=False)
    for i in range(3):
        db.put(b"k%d" % i, b"v", sync=True)
    crash(db)
    (log,) = (n for n in os.listdir(db_path) if n.endswith(".log"))
    os.remove(os.path.join(db_path, log))
    before = sorted(os.listdir(db_path))
    with pytest.raises(minilsm.CorruptionError, match="missing") as e:
        minilsm.DB(db_path, background=False)
    assert e.value.path == os.path.join(db_path, log)
    assert sorted(os.listdir(db_path)) == before
    assert [(f.file, f.damage) for f in check_store(db_path).findings] == [(log, True)]


def test_a_log_older_than_the_tables_is_corruption(db_path: str) -> None:
    """Regression: every write in a log the manifest says to replay is newer than every table (a memtable's
    log falls below the manifest's log number in the same manifest that adds its table).  Recovery did not
    check it, so a log from an older backup restored under the current log's name put b"v1" in the memtable,
    where it shadowed the acknowledged b"v2" of a table."""
    db = minilsm.DB(db_path, background=False)
    db.put(b"k", b"v1", sync=True)
    crash(db)
    (old_log,) = (n for n in os.listdir(db_path) if n.endswith(".log"))
    old = open_bytes(os.path.join(db_path, old_log))
    with minilsm.DB(db_path, background=False) as db:
        db.put(b"k", b"v2", sync=True)
        db.flush()
        current = db._log_path(db._log.number)
    with open(current, "wb") as f:  # the restore
        f.write(old)
    with pytest.raises(minilsm.CorruptionError, match="sequence number 1") as e:
        minilsm.DB(db_path, background=False)
    assert e.value.path == current
    assert [(f.file, f.damage) for f in check_store(db_path).findings] == [(os.path.basename(current), True)]


def test_files_whose_names_the_store_never_writes_are_not_its_files(db_path: str) -> None:
    """Regression: the store took any digits for a file number, so a copy of its log saved as 1.log was replayed
    as log 1 a second time (its records now refused as going back in sequence), and a stray 7.sst counted as
    a table file; minilsm check ignored both.  Only the names the store writes are its files."""
    db = minilsm.DB(db_path, background=False)
    db.put(b"a", b"1")
    db.put(b"a", b"2")
    crash(db)
    (log,) = (n for n in os.listdir(db_path) if n.endswith(".log"))
    shutil.copy(os.path.join(db_path, log), os.path.join(db_path, "1.log"))
    with open(os.path.join(db_path, "7.sst"), "wb") as f:
        f.write(b"not a table")
    with minilsm.DB(db_path, background=False) as db:
        assert db.get(b"a") == b"2"
        assert db.recovery.logs_replayed == 1
    assert {"1.log", "7.sst"} <= set(os.listdir(db_path))  # not the store's to delete either
    with minilsm.DB(db_path, background=False) as db:
        assert db.get(b"a") == b"2"


def test_missing_table_is_corruption(db_path: str) -> None:
    with minilsm.DB(db_path) as db:
        fill(db, 50)
        db.flush()
    sst = [n for n in os.listdir(db_path) if n.endswith(".sst")]
    os.remove(os.path.join(db_path, sst[0]))
    with pytest.raises(minilsm.CorruptionError, match=sst[0]):
        minilsm.DB(db_path)


def test_orphan_files_from_a_crash_are_removed(db_path: str) -> None:
    with minilsm.DB(db_path) as db:
        fill(db, 20)
    for name in ("000999.sst", "000998.sst.tmp", "MANIFEST.tmp"):
        with open(os.path.join(db_path, name), "wb") as f:
            f.write(b"junk")
    for name in ("notes.txt", "notes.tmp"):
        with open(os.path.join(db_path, name), "w") as f:
            f.write("not ours")
    # `minilsm check` says which of them the next open deletes: the store's names only.
    noted = {f.file for f in check_store(db_path).findings if "the next open deletes it" in f.message}
    assert noted == {"000999.sst", "000998.sst.tmp", "MANIFEST.tmp"}
    with minilsm.DB(db_path) as db:
        assert db.get(b"k00003") == b"v3" * 7
    names = set(os.listdir(db_path))
    assert not {"000999.sst", "000998.sst.tmp", "MANIFEST.tmp"} & names
    assert {"notes.txt", "notes.tmp"} <= names  # files that are not the store's are left alone


def test_kill_9_loses_no_acknowledged_sync_write(db_path: str) -> None:
    child = textwrap.dedent(f"""
        import sys, minilsm
        db = minilsm.DB({db_path!r}, memtable_size=4096, block_size=512, target_file_size=4096,
                        level1_max_bytes=16384, level0_compaction_trigger=2)
        i = 0
        while True:
            db.put(b"key%06d" % i, b"value%06d" % i * 5, sync=True)
            print(i, flush=True)
            i += 1
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()}
    )
    acked = -1
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            acked = int(line)
            if acked >= 400:
                break
    finally:  # the child writes forever: kill it even if the loop fails, and close our end of its pipe
        proc.kill()
        proc.wait()
        proc.stdout.close()
    with minilsm.DB(db_path) as db:
        for i in range(acked + 1):
            assert db.get(b"key%06d" % i) == b"value%06d" % i * 5, i
        check_invariants(db)


def test_a_store_opened_by_a_relative_path_keeps_working_after_the_process_changes_directory(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: the store kept the relative path, so after os.chdir its next log went to another directory, the
    write failed and the store turned read-only."""
    parent, name = os.path.split(db_path)
    elsewhere = os.path.join(parent, "elsewhere")
    os.mkdir(elsewhere)
    monkeypatch.chdir(parent)
    with minilsm.DB(name, memtable_size=4096) as db:
        monkeypatch.chdir(elsewhere)
        fill(db, 500)  # several memtables: new logs and tables
        db.flush()
        assert db.get(b"k00003") == b"v3" * 7
        assert db.path == db_path  # what error messages name
    assert os.listdir(elsewhere) == []
    with minilsm.DB(db_path) as db:
        assert db.get(b"k00499") == b"v499" * 7


def test_opening_without_the_interpreter_lock_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock-free reads assume the GIL: a free-threaded build with it off is told so, and the store still works."""
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    with pytest.warns(RuntimeWarning, match="PYTHON_GIL=1"), minilsm.DB(tmp_path / "s") as db:
        db.put(b"k", b"v")
        assert db.get(b"k") == b"v"
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        minilsm.DB(tmp_path / "s").close()
