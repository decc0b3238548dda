"""MemTable against a plain-list model, and its iterators under concurrent adds."""

from __future__ import annotations

import itertools
import pickle
import random
import sys
import threading
from collections.abc import Iterator
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from minilsm.keys import KIND_DELETE, KIND_VALUE, MAX_SEQUENCE
from minilsm.memtable import VERSION_OVERHEAD, MemTable

# Tiny keys collide often and include b"" and prefixes of each other (b"a" < b"a\0").
small_keys = st.binary(max_size=2)
writes = st.lists(
    st.tuples(small_keys, st.sampled_from([KIND_VALUE, KIND_DELETE]), st.binary(max_size=4)),
    max_size=60,
)
bound = st.none() | small_keys


def build(ops: list[tuple[bytes, int, bytes]]) -> tuple[MemTable, list[tuple[bytes, int, int, bytes]]]:
    """A memtable and the model: (key, seq, kind, value) in write order, seqs 1, 2, ..."""
    mem = MemTable()
    model = []
    for seq, (key, kind, value) in enumerate(ops, start=1):
        value = value if kind == KIND_VALUE else b""
        mem.add(key, seq, kind, value)
        model.append((key, seq, kind, value))
    return mem, model


def model_order(model: list[tuple[bytes, int, int, bytes]]) -> list[tuple[bytes, int, bytes]]:
    """Internal order: user key ascending, trailer descending."""
    rows = [(key, seq << 8 | kind, value) for key, seq, kind, value in model]
    return sorted(rows, key=lambda r: (r[0], -r[1]))


@given(writes, st.data())
def test_get_matches_model_at_every_snapshot(ops: list[tuple[bytes, int, bytes]], data: st.DataObject) -> None:
    mem, model = build(ops)
    probe_keys = {key for key, *_ in model} | {b"", b"\x00", b"zz", b"\xff\xff\xff"}
    snapshots = {0, len(model), MAX_SEQUENCE, *range(1, len(model) + 1)}
    for key in probe_keys:
        for snap in snapshots:
            visible = [(kind, value) for k, seq, kind, value in model if k == key and seq <= snap]
            assert mem.get(key, snap) == (visible[-1] if visible else None)


@given(writes, bound, bound)
def test_iter_matches_model(ops: list[tuple[bytes, int, bytes]], start: bytes | None, stop: bytes | None) -> None:
    mem, model = build(ops)
    expected = [
        row for row in model_order(model) if (start is None or row[0] >= start) and (stop is None or row[0] < stop)
    ]
    assert list(mem.iter(start, stop)) == expected
    assert list(mem.iter(start, stop, reverse=True)) == expected[::-1]


@given(writes)
def test_sizes_and_entries(ops: list[tuple[bytes, int, bytes]]) -> None:
    mem, model = build(ops)
    assert len(mem) == len(model)
    assert mem.num_keys == len({key for key, *_ in model})
    assert mem.empty == (not model)
    assert mem.approximate_size == sum(len(k) + len(v) + VERSION_OVERHEAD for k, _, _, v in model)
    assert list(mem.entries()) == model_order(model)


@given(writes, st.booleans(), st.data())
def test_a_pickled_memtable_holds_the_same_versions(
    ops: list[tuple[bytes, int, bytes]], iterated: bool, data: st.DataObject
) -> None:
    """How a frozen memtable travels to the compaction worker: unpickled, it answers and iterates as before."""
    mem, model = build(ops)
    if iterated:  # keys sorted in already, or still pending: the copy sorts its own either way
        list(mem.entries())
    copy = pickle.loads(pickle.dumps(mem))
    assert list(copy.entries()) == list(mem.entries()) == model_order(model)
    assert (len(copy), copy.num_keys, copy.approximate_size) == (len(mem), mem.num_keys, mem.approximate_size)
    key = data.draw(small_keys)
    seq = data.draw(st.integers(0, len(model) + 1))
    assert copy.get(key, seq) == mem.get(key, seq)
    copy.add(b"new", len(model) + 1, KIND_VALUE, b"v")  # a working memtable of its own, not a view of the first
    assert copy.get(b"new", MAX_SEQUENCE) == (KIND_VALUE, b"v") and len(copy) == len(mem) + 1


def test_tombstone_answers_the_read_and_older_snapshots_see_older_versions() -> None:
    mem = MemTable()
    mem.add(b"k", 5, KIND_VALUE, b"v5")
    mem.add(b"k", 7, KIND_DELETE, b"")
    mem.add(b"k", 9, KIND_VALUE, b"v9")
    assert mem.get(b"k", 4) is None
    assert mem.get(b"k", 5) == (KIND_VALUE, b"v5")
    assert mem.get(b"k", 8) == (KIND_DELETE, b"")
    assert mem.get(b"k", 9) == (KIND_VALUE, b"v9")
    assert mem.get(b"j", MAX_SEQUENCE) is None
    assert list(mem.iter()) == [(b"k", 9 << 8 | 1, b"v9"), (b"k", 7 << 8 | 0, b""), (b"k", 5 << 8 | 1, b"v5")]


def test_empty_memtable() -> None:
    mem = MemTable()
    assert mem.empty and len(mem) == 0 and mem.num_keys == 0 and mem.approximate_size == 0
    assert list(mem.iter()) == [] and list(mem.iter(reverse=True)) == []
    assert mem.get(b"", MAX_SEQUENCE) is None


def _check_interleaved(rng: random.Random, reverse: bool) -> None:
    """Adds between the steps of one iterator: every key present at the start shows up once, in order."""
    mem = MemTable()
    seq = 0
    for _ in range(3000):  # enough keys for several chunks and SortedList sublist splits
        seq += 1
        mem.add(rng.randbytes(3), seq, KIND_VALUE, b"")
    before = {(key, trailer) for key, trailer, _ in mem.iter()}
    seen: list[tuple[bytes, int]] = []
    for key, trailer, _ in mem.iter(reverse=reverse):
        seen.append((key, trailer))
        for _ in range(rng.randrange(3)):
            seq += 1
            # New keys anywhere (behind and ahead of the cursor), and new versions of the current key.
            mem.add(key if rng.random() < 0.3 else rng.randbytes(3), seq, KIND_VALUE, b"")
    assert len(seen) == len(set(seen)), "a version was returned twice"
    assert before <= set(seen), "a version present when iteration began was skipped"
    internal = sorted(seen, key=lambda kt: (kt[0], -kt[1]))
    assert seen == (internal[::-1] if reverse else internal)


def test_adds_while_iteration_is_suspended() -> None:
    for seed in range(3):
        _check_interleaved(random.Random(seed), reverse=False)
        _check_interleaved(random.Random(seed), reverse=True)


def test_iterators_in_threads_while_another_thread_adds() -> None:
    mem = MemTable()
    rng = random.Random(42)
    for seq in range(1, 2001):
        mem.add(rng.randbytes(4), seq, KIND_VALUE, b"x")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        seq = 10_000
        wrng = random.Random(7)
        while not stop.is_set() and seq < 30_000:  # bounded, so that scans stay short
            seq += 1
            mem.add(wrng.randbytes(4), seq, KIND_VALUE, b"y")

    def reader(reverse: bool) -> None:
        try:
            for _ in range(6):
                before = {key for key, _, _ in mem.iter()} if not reverse else None
                keys = [key for key, _, _ in mem.iter(reverse=reverse)]
                distinct = list(dict.fromkeys(keys))  # versions of one key are adjacent
                assert distinct == sorted(set(keys), reverse=reverse), "out of order or a key split apart"
                if before is not None:
                    assert before <= set(keys), "a key present at the start was skipped"
        except BaseException as e:
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows, to provoke torn reads
    try:
        w = threading.Thread(target=writer)
        readers = [threading.Thread(target=reader, args=(r,)) for r in (False, True, False)]
        w.start()
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        stop.set()
        w.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[0]
    assert len(mem) > 2000


def test_a_read_between_any_two_steps_of_an_add_sees_every_version_added_before() -> None:
    """A key's newest version sits apart from its older ones, and readers take no lock: an overwrite must move
    the newest version to the older ones before the new one replaces it, and a reader must look at the newest
    first.  Here a reader runs at every store into either dict, just before it and just after it, as another
    thread may: each read at an earlier sequence number, and each scan, must find exactly what was added before."""
    mem = MemTable()
    added: list[tuple[bytes, int, int, bytes]] = []  # (key, seq, kind, value), every add that has returned

    def check() -> None:
        for seq in range(len(added) + 1):
            for key in {k for k, _, _, _ in added}:
                expect = None
                for k, s, kind, value in added:
                    if k == key and s <= seq:
                        expect = (kind, value)
                assert mem.get(key, seq) == expect, (key, seq)
        for reverse in (False, True):
            seen = [(k, t >> 8) for k, t, _ in mem.iter(reverse=reverse)]
            done = sorted(((k, s) for k, s, _, _ in added), key=lambda ks: (ks[0], -ks[1]), reverse=reverse)
            assert len(seen) == len(set(seen)), "a version was returned twice"
            assert [ks for ks in seen if ks in set(done)] == done

    class Watched(dict):  # type: ignore[type-arg]
        def __setitem__(self, key: object, value: object) -> None:
            check()
            super().__setitem__(key, value)
            check()

    mem._latest = Watched()
    mem._lookup = mem._latest.get
    mem._older = Watched()
    mem._older_of = mem._older.get
    rng = random.Random(5)
    for seq in range(1, 41):
        key, kind = rng.choice([b"a", b"b", b"c"]), KIND_DELETE if seq % 7 == 0 else KIND_VALUE
        value = b"" if kind == KIND_DELETE else b"v%d" % seq
        mem.add(key, seq, kind, value)
        added.append((key, seq, kind, value))
    check()


def test_adds_between_the_looks_of_one_read_hide_no_version_added_before_it() -> None:
    """The reader's half of the test above, which runs each read whole between two steps of an add: a read or a
    scan looks at a key's newest version, then at its older ones, and the writer may run between any two looks.
    Here one to three whole adds (of a key read, a key's second version, a new key) run right after each look in
    turn: a read at a sequence number taken before, and a scan, must still find exactly what was added before.
    With the older versions looked at first (in `get`, or either way of `iter`), it fails."""
    rng = random.Random(3)
    script = []  # (key, seq, kind, value): the writer's adds, in order
    for seq in range(1, 16):
        key, kind = rng.choice([b"a", b"b", b"c"]), KIND_DELETE if seq % 5 == 0 else KIND_VALUE
        script.append((key, seq, kind, b"" if kind == KIND_DELETE else b"v%d" % seq))
    script.append((b"a\x00", 16, KIND_VALUE, b"new"))
    looks = 0  # lookups into either dict since the read began
    at, burst, added = 0, 0, 0  # after the `at`-th look, add script[added : added + burst]

    class Looked(dict):  # type: ignore[type-arg]
        def get(self, key: object, default: object = None) -> object:
            found = super().get(key, default)
            self.looked()
            return found

        def __getitem__(self, key: object) -> object:
            found = super().__getitem__(key)
            self.looked()
            return found

        @staticmethod
        def looked() -> None:
            nonlocal looks, added
            looks += 1
            if looks == at:
                for version in script[added : added + burst]:
                    mem.add(*version)  # the table being read; its own looks count past `at`
                added += burst

    def fresh(done: int) -> MemTable:
        nonlocal looks, added
        table = MemTable()
        table._latest = Looked()
        table._lookup = table._latest.get
        table._older = Looked()
        table._older_of = table._older.get
        looks, added = -(1 << 30), done  # no adds from the looks of these; the read's count from 0
        for version in script[:done]:
            table.add(*version)
        return table

    runs = 0
    for done in range(len(script)):
        before = script[:done]
        for read in [(key, seq) for key in (b"a", b"b", b"c") for seq in range(done + 1)] + [False, True]:
            for burst in (1, 2, 3):
                at = 0
                while True:  # after each look of the read in turn, until it makes no more
                    at += 1
                    mem = fresh(done)
                    looks = 0
                    if isinstance(read, tuple):
                        key, seq = read
                        visible = [(kind, value) for k, s, kind, value in before if k == key and s <= seq]
                        assert mem.get(key, seq) == (visible[-1] if visible else None), (read, done, at, burst)
                    else:
                        seen = [(k, t >> 8) for k, t, _ in mem.iter(reverse=read)]
                        order = sorted(seen, key=lambda ks: (ks[0], -ks[1]), reverse=read)
                        assert seen == order and len(seen) == len(set(seen)), (read, done, at, burst)
                        want = sorted(((k, s) for k, s, _, _ in before), key=lambda ks: (ks[0], -ks[1]), reverse=read)
                        assert [ks for ks in seen if ks[1] <= done] == want, (read, done, at, burst)
                    runs += 1
                    if looks < at:
                        break
    assert runs > 3000  # about 3,900 reads and scans


@settings(max_examples=50)
@given(st.lists(st.binary(max_size=3), min_size=1, max_size=40, unique=True), st.data())
def test_reverse_iteration_from_stop_bound(keys: list[bytes], data: st.DataObject) -> None:
    mem = MemTable()
    for seq, key in enumerate(keys, start=1):
        mem.add(key, seq, KIND_VALUE, key)
    stop = data.draw(st.sampled_from(keys))
    got = [key for key, _, _ in mem.iter(stop=stop, reverse=True)]
    assert got == sorted((k for k in keys if k < stop), reverse=True)


few_keys = st.sampled_from([b"", b"a", b"a\x00", b"b", b"c"])
steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), few_keys, st.sampled_from([KIND_VALUE, KIND_DELETE])),
        st.tuples(st.just("scan"), st.none() | few_keys, st.none() | few_keys, st.booleans()),
        st.tuples(st.just("next"), st.integers(0, 3), st.integers(1, 3)),
        st.tuples(st.just("add_at_cursor"), st.integers(1, 3)),
        st.tuples(st.just("read"), few_keys, st.integers(0, 60)),
        st.tuples(st.just("pickle"), st.none()),
    ),
    min_size=10,
    max_size=60,
)


@settings(max_examples=400)
@given(steps)
def test_suspended_scans_reads_and_copies_between_adds_match_a_model(
    script: list[tuple[Any, ...]],
) -> None:
    """Scans left suspended (bounded or not, either way, chunks of 2 keys) while adds go on, also of the key a
    scan stands on; reads and pickled copies in between.  A scan returns every version added before it began,
    in order, once each, and of each key exactly the versions up to the newest it returned."""
    mem = MemTable()
    model: list[tuple[bytes, int, int, bytes]] = []
    scans: list[
        tuple[Iterator[tuple[bytes, int, bytes]], list[tuple[bytes, int, bytes]], int, bytes | None, bytes | None, bool]
    ] = []
    cursor: bytes | None = None  # the key the last scan stepped returned last

    def add(key: bytes, kind: int) -> None:
        seq = len(model) + 1
        value = b"" if kind == KIND_DELETE else b"v%d" % seq
        mem.add(key, seq, kind, value)
        model.append((key, seq, kind, value))

    with mock.patch.multiple("minilsm.memtable", _FIRST_CHUNK=2, _MAX_CHUNK=4):
        for step in script:
            if step[0] == "add":
                add(step[1], step[2])
            elif step[0] == "scan":
                _, start, stop, reverse = step
                scans.append((mem.iter(start, stop, reverse), [], len(model), start, stop, reverse))
            elif step[0] == "next" and scans:
                it, out = scans[step[1] % len(scans)][:2]
                out.extend(itertools.islice(it, step[2]))
                cursor = out[-1][0] if out else cursor
            elif step[0] == "add_at_cursor" and cursor is not None:
                for _ in range(step[1]):  # new versions of the key that scan stands on
                    add(cursor, KIND_VALUE)
            elif step[0] == "read":
                key, seq = step[1], min(step[2], len(model))
                visible = [(kind, value) for k, s, kind, value in model if k == key and s <= seq]
                assert mem.get(key, seq) == (visible[-1] if visible else None)
            elif step[0] == "pickle":
                copy = pickle.loads(pickle.dumps(mem))
                assert list(copy.entries()) == list(mem.entries()) == model_order(model)
                assert list(copy.iter(reverse=True)) == list(mem.iter(reverse=True))
                assert (len(copy), copy.num_keys, copy.approximate_size) == (
                    len(mem),
                    mem.num_keys,
                    mem.approximate_size,
                )
        versions = {(k, s << 8 | kind): v for k, s, kind, v in model}
        for it, out, began, start, stop, reverse in scans:
            out.extend(it)
            rows = [(k, t) for k, t, _ in out]
            assert rows == sorted(rows, key=lambda kt: (kt[0], -kt[1]), reverse=reverse) and len(set(rows)) == len(rows)
            assert all(versions[k, t] == v for k, t, v in out)
            inside = [
                r for r in model_order(model) if (start is None or r[0] >= start) and (stop is None or r[0] < stop)
            ]
            newest = {k: t for k, t in sorted(rows, key=lambda kt: kt[1])}  # of each key, the newest returned
            assert sorted(rows) == sorted((k, t) for k, t, _ in inside if t <= newest.get(k, -1))
            assert all(k in newest and t <= newest[k] for k, t, _ in inside if t >> 8 <= began)
    assert list(mem.entries()) == model_order(model)
    assert list(mem.iter(reverse=True)) == model_order(model)[::-1]
