"""`RawIterator`: plyvel's raw iterator, which stands on an item, against a model and against plyvel itself."""

from __future__ import annotations

import pickle
from bisect import bisect_left
from typing import Any

import hypothesis.strategies as st
import pytest
from faultfs import FaultFS
from hypothesis import given, settings
from storeutil import fast_tmp_dir, small_options

import minilsm

keys = st.binary(max_size=3) | st.sampled_from([b"", b"a", b"b", b"\xff"])
ops = st.lists(
    st.one_of(
        st.sampled_from(["first", "last", "next", "prev", "valid", "key", "value", "item"]).map(lambda op: (op, b"")),
        keys.map(lambda k: ("seek", k)),
    ),
    max_size=25,
)


class RawModel:
    """Where a raw iterator stands: an index into the sorted items, or None (not valid)."""

    def __init__(self, items: dict[bytes, bytes]) -> None:
        self.items = sorted(items.items())
        self.keys = [k for k, _ in self.items]
        self.at: int | None = None

    def apply(self, op: str, arg: bytes) -> object:
        """What the op returns, or the exception class it raises."""
        n = len(self.items)
        if op == "first":
            self.at = 0 if n else None
        elif op == "last":
            self.at = n - 1 if n else None
        elif op == "seek":
            i = bisect_left(self.keys, arg)
            self.at = i if i < n else None
        elif op == "valid":
            return self.at is not None
        elif self.at is None:
            return minilsm.IteratorInvalidError
        elif op == "next":
            self.at = self.at + 1 if self.at + 1 < n else None
        elif op == "prev":
            self.at = self.at - 1 if self.at > 0 else None
        else:
            k, v = self.items[self.at]
            return {"key": k, "value": v, "item": (k, v)}[op]
        return None

    def current(self) -> tuple[bytes, bytes] | None:
        return None if self.at is None else self.items[self.at]


def run(it: Any, op: str, arg: bytes, invalid: type[Exception]) -> object:
    """The op on a minilsm or plyvel raw iterator, as `RawModel.apply` reports it."""
    call = {"first": "seek_to_first", "last": "seek_to_last"}.get(op, op)
    try:
        result = getattr(it, call)(arg) if op == "seek" else getattr(it, call)()
    except invalid:
        return minilsm.IteratorInvalidError
    return result


@settings(max_examples=150, deadline=None)
@given(
    before=st.dictionaries(keys, st.binary(max_size=8), max_size=12),
    after=st.dictionaries(keys, st.binary(max_size=8), max_size=4),
    flush_at=st.integers(0, 12),
    steps=ops,
)
def test_a_raw_iterator_moves_as_the_model_over_a_fixed_view(
    before: dict[bytes, bytes], after: dict[bytes, bytes], flush_at: int, steps: list[tuple[str, bytes]]
) -> None:
    with fast_tmp_dir() as d, minilsm.DB(d, **small_options()) as db:
        for i, (k, v) in enumerate(before.items()):
            if i == flush_at:
                db.flush()  # part in a table, part in the memtable
            db.put(k, v)
        it = db.raw_iterator()
        for k, v in after.items():  # after the iterator was made: not in its view
            db.put(k, v)
        model = RawModel(before)
        for op, arg in steps:
            assert run(it, op, arg, minilsm.IteratorInvalidError) == model.apply(op, arg), (op, arg)
            assert (it.item() if it.valid() else None) == model.current(), (op, arg)  # where each op left it
        it.close()


@settings(max_examples=150, deadline=None)
@given(items=st.dictionaries(keys, st.binary(max_size=8), max_size=12), steps=ops)
def test_a_raw_iterator_answers_as_plyvels(items: dict[bytes, bytes], steps: list[tuple[str, bytes]]) -> None:
    plyvel = pytest.importorskip("plyvel")
    with fast_tmp_dir() as d:
        pdb = plyvel.DB(f"{d}/leveldb", create_if_missing=True)
        with minilsm.DB(f"{d}/minilsm", **small_options()) as db:
            for k, v in items.items():
                db.put(k, v)
                pdb.put(k, v)
            mine, theirs = db.raw_iterator(), pdb.raw_iterator()
            for op, arg in steps:
                got = run(mine, op, arg, minilsm.IteratorInvalidError)
                assert got == run(theirs, op, arg, plyvel.IteratorInvalidError), (op, arg)
            mine.close()
            theirs.close()
        pdb.close()


def test_snapshots_and_prefixed_views_give_raw_iterators_of_their_own_view(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        db.put(b"a", b"1")
        db.put(b"p/x", b"2")
        with db.snapshot() as snap:
            db.put(b"b", b"3")
            it = snap.raw_iterator()
            it.seek_to_last()
            assert it.item() == (b"p/x", b"2")
            it.prev()
            assert it.key() == b"a"
        it = db.prefixed_db(b"p/").raw_iterator()
        it.seek(b"")
        assert it.item() == (b"x", b"2")  # the key without its prefix, as the view's other reads give it
        it.next()
        assert not it.valid()


def test_a_raw_iterator_on_no_item_says_why(db_path: str) -> None:
    """Was: "place it with a seek first" in every case, though an iterator that ran off an end was placed."""
    fs = FaultFS()
    with minilsm.DB(db_path, **small_options(fs=fs, block_cache_size=0)) as db:
        db.put(b"a", b"1")
        db.flush()  # a table, whose reads can fail
        it = db.raw_iterator()

        def says(why: str) -> None:
            for use in (it.key, it.next, it.prev):
                with pytest.raises(minilsm.IteratorInvalidError, match=f"^the raw iterator stands on no item: {why}"):
                    use()

        says("it was never placed; place it with a seek first")
        it.seek_to_first()
        it.next()
        says("it moved past the last one; place it again with a seek")
        it.seek(b"b")
        says("it moved past the last one")
        it.seek_to_last()
        it.prev()
        says("it moved before the first one; place it again with a seek")
        fs.arm("read", 1, sticky=True)
        with pytest.raises(minilsm.StoreIOError):
            it.seek_to_first()
        fs.disarm()
        says("its last move failed; place it again with a seek")
        it.seek_to_first()
        assert it.item() == (b"a", b"1")
        it.close()


def test_a_closed_raw_iterator_or_store_raises_closed_error(db_path: str) -> None:
    db = minilsm.DB(db_path, **small_options())
    db.put(b"a", b"1")
    with db.raw_iterator() as it:
        it.seek_to_first()
        assert it.key() == b"a"
    for use in (it.valid, it.key, it.next, it.seek_to_first):
        with pytest.raises(minilsm.ClosedError):
            use()
    it = db.raw_iterator()
    it.seek_to_first()
    with pytest.raises(TypeError, match="raw_iterator"):
        pickle.dumps(it)
    db.close()
    for use in (it.valid, it.key, it.prev, it.seek_to_last):
        with pytest.raises(minilsm.ClosedError, match="closed"):
            use()
