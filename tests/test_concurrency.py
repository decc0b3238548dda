"""Threads reading, scanning, writing and holding snapshots while background flushes and compactions run.

Each check rests on a model of what a thread may see:

* batch writers each own a range of keys and write the whole range in one
  batch at versions 1, 2, 3, ... (every seventh version deletes the range).
  A consistent view (a scan, a snapshot) must show each range at one version,
  whole or wholly deleted, never a mix: batches are atomic and views fixed;
* a version read must lie between what the writer had acknowledged before the
  read started and what it had begun by the time the read ended, and a reader
  never sees a key go back to an older version (reads are monotonic);
* a snapshot read twice, with writes, flushes and compactions in between,
  gives the same answers; so does an iterator opened before them;
* after the threads stop, every range holds its last acknowledged version, and
  still does after a reopen: no write was lost.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from storeutil import check_invariants, crash, small_options

import minilsm
from minilsm.iterators import Entry

WRITERS = 3
KEYS_PER_WRITER = 12
DURATION = float(os.environ.get("MINILSM_CONCURRENCY_SECONDS", "4"))


def key(w: int, i: int) -> bytes:
    return b"w%d-k%02d" % (w, i)


def deletes(v: int) -> bool:
    return v % 7 == 0


def value(w: int, v: int) -> bytes:
    return b"%d|" % v + bytes([97 + w]) * (40 + v % 50)


def version_of(v: bytes | None) -> int | None:
    return None if v is None else int(v.split(b"|", 1)[0])


class Model:
    """What the writers have acknowledged (`acked`) and begun (`begun`), per writer."""

    def __init__(self) -> None:
        self.acked = [0] * WRITERS
        self.begun = [0] * WRITERS

    def check_range(self, w: int, versions: list[int | None], lo: int, hi: int, where: str) -> int:
        """`versions` of writer w's keys come from one consistent view taken between lo and hi acknowledged."""
        present = {v for v in versions if v is not None}
        assert len(present) <= 1, f"{where}: writer {w}'s batch seen half applied: {versions}"
        if present:
            (v,) = present
            assert len(versions) == KEYS_PER_WRITER and None not in versions, f"{where}: {versions}"
            assert not deletes(v) and lo <= v <= hi, f"{where}: version {v} outside [{lo}, {hi}]"
            return v
        # All absent: never written, or a deleting version in range.
        assert lo == 0 or any(deletes(v) for v in range(lo, hi + 1)), f"{where}: range gone at [{lo}, {hi}]"
        return lo


def run_threads(db: minilsm.DB, model: Model, duration: float) -> dict[str, int]:
    stop = threading.Event()
    errors: list[BaseException] = []
    counts: dict[str, int] = {}

    def loop(name: str, body: Callable[[random.Random], None], pause: float = 0.0) -> threading.Thread:
        def run() -> None:
            rng = random.Random(name)
            n = 0
            try:
                while not stop.is_set():
                    body(rng)
                    n += 1
                    if pause:
                        # A reader spinning on lock-free gets would hold the GIL and starve the
                        # writers (each log write gives the GIL up and waits to get it back).
                        time.sleep(pause)
            except BaseException as e:
                errors.append(e)
                stop.set()
            counts[name] = n

        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        return t

    def writer(w: int) -> Callable[[random.Random], None]:
        def body(rng: random.Random) -> None:
            v = model.acked[w] + 1
            model.begun[w] = v
            with db.write_batch() as wb:
                for i in range(KEYS_PER_WRITER):
                    if deletes(v):
                        wb.delete(key(w, i))
                    else:
                        wb.put(key(w, i), value(w, v))
            model.acked[w] = v

        return body

    def point_reader() -> Callable[[random.Random], None]:
        last_seen: dict[bytes, int] = {}  # per reader: what this thread saw last

        def body(rng: random.Random) -> None:
            w, i = rng.randrange(WRITERS), rng.randrange(KEYS_PER_WRITER)
            k = key(w, i)
            lo = model.acked[w]
            got = version_of(db.get(k))
            hi = model.begun[w]
            if got is None:
                assert lo == 0 or any(deletes(v) for v in range(lo, hi + 1)), f"get {k!r}: absent in [{lo}, {hi}]"
            else:
                assert lo <= got <= hi and not deletes(got), f"get {k!r}: version {got} outside [{lo}, {hi}]"
                assert got >= last_seen.get(k, 0), f"get {k!r} went back to version {got}"
                last_seen[k] = got

        return body

    def scanner(rng: random.Random) -> None:
        lo = list(model.acked)
        reverse = rng.random() < 0.5
        it = db.iterator(reverse=reverse) if rng.random() < 0.5 else db.iterator(prefix=b"w", reverse=reverse)
        items = list(it)
        hi = list(model.begun)
        keys = [k for k, _ in items]
        assert keys == sorted(keys, reverse=reverse) and len(set(keys)) == len(keys), "scan out of order"
        seen = dict(items)
        for w in range(WRITERS):
            versions = [version_of(seen.get(key(w, i))) for i in range(KEYS_PER_WRITER)]
            model.check_range(w, versions, lo[w], hi[w], "scan")

    def snapshot_holder(rng: random.Random) -> None:
        lo = list(model.acked)
        with db.snapshot() as snap:
            hi = list(model.begun)
            it = snap.iterator()
            first = [(k, snap.get(k)) for k in (key(w, i) for w in range(WRITERS) for i in range(KEYS_PER_WRITER))]
            for w in range(WRITERS):
                versions = [version_of(v) for k, v in first[w * KEYS_PER_WRITER : (w + 1) * KEYS_PER_WRITER]]
                model.check_range(w, versions, lo[w], hi[w], "snapshot")
            stop.wait(rng.uniform(0.05, 0.3))  # writes, flushes and compactions go on meanwhile
            assert [(k, snap.get(k)) for k, _ in first] == first, "a snapshot's answers changed"
            assert dict(it) == {k: v for k, v in first if v is not None}, "an iterator opened earlier changed"

    def maintenance(rng: random.Random) -> None:
        stop.wait(rng.uniform(0.1, 0.4))
        if rng.random() < 0.5:
            db.flush()
        else:
            w = rng.randrange(WRITERS)
            db.compact_range(key(w, 0), key(w, KEYS_PER_WRITER - 1))

    threads = [loop(f"writer{w}", writer(w)) for w in range(WRITERS)]
    threads += [loop(f"reader{r}", point_reader(), pause=0.0005) for r in range(2)]
    threads += [
        loop("scanner", scanner, pause=0.001),
        loop("snapshots", snapshot_holder),
        loop("maintenance", maintenance),
    ]
    stop.wait(duration)
    stop.set()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), f"{t.name} is stuck"
    if errors:
        raise errors[0]
    return counts


def check_final(db: minilsm.DB, model: Model) -> None:
    for w in range(WRITERS):
        v = model.acked[w]
        want = None if v == 0 or deletes(v) else value(w, v)
        assert [db.get(key(w, i)) for i in range(KEYS_PER_WRITER)] == [want] * KEYS_PER_WRITER, f"writer {w}"


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_readers_writers_snapshots_and_background_work(db_path: str, style: str) -> None:
    opts = small_options(background=True, compaction_style=style, memtable_size=4096, block_cache_size=16384)
    model = Model()
    db = minilsm.DB(db_path, **opts)
    counts = run_threads(db, model, DURATION / 2)
    stats = db.stats()
    check_final(db, model)
    check_invariants(db, sweep_first=True)  # readers may have held old versions past the last sweep
    db.close()
    with minilsm.DB(db_path, **opts) as db:
        check_final(db, model)
    print(f"{style}: {counts}, {stats.flushes} flushes, {stats.compactions} compactions")
    assert stats.flushes > 2 and stats.compactions > 0, "the background thread had nothing to do: test too weak"
    assert all(counts.get(f"writer{w}", 0) > 10 for w in range(WRITERS)), counts
    assert counts.get("snapshots", 0) > 1 and counts.get("scanner", 0) > 5, counts


def test_many_threads_writing_the_same_keys_lose_nothing(db_path: str) -> None:
    """Writers racing on shared keys: the store's final value of each key is the last acknowledged put's."""
    with minilsm.DB(db_path, **small_options(background=True, memtable_size=4096)) as db:
        lock = threading.Lock()
        last: dict[bytes, bytes] = {}
        errors: list[BaseException] = []

        def work(t: int) -> None:
            rng = random.Random(t)
            try:
                for n in range(300):
                    k = b"shared%02d" % rng.randrange(20)
                    v = b"t%d-n%d" % (t, n) * 5
                    with lock:  # the lock orders the writes, so the model knows which came last
                        db.put(k, v)
                        last[k] = v
                    if n % 50 == 0:
                        time.sleep(0)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        unlocked = [threading.Thread(target=lambda: [db.get(b"shared00") for _ in range(2000)]) for _ in range(2)]
        for t in threads + unlocked:
            t.start()
        for t in threads + unlocked:
            t.join()
        assert not errors, errors
        assert {k: db.get(k) for k in last} == last
    with minilsm.DB(db_path, **small_options()) as db:
        assert {k: db.get(k) for k in last} == last


@pytest.mark.parametrize("kind", ["write", "sync", "rename"])
def test_a_background_failure_stops_every_writer_and_loses_no_acknowledged_write(db_path: str, kind: str) -> None:
    """Writers racing while a flush or compaction fails: each gets ReadOnlyError (none hangs in a stall), and
    after a power cut every acknowledged sync=True write is there."""
    from faultfs import FaultFS
    from storeutil import crash

    fs = FaultFS()
    db = minilsm.DB(db_path, **small_options(fs=fs, background=True, memtable_size=4096))
    fs.arm(kind, 40)
    acked: list[dict[bytes, bytes]] = [{} for _ in range(4)]
    outcome: list[BaseException | None] = [None] * 4

    def work(t: int) -> None:
        try:
            for n in range(100_000):
                k, v = b"t%d-%03d" % (t, n % 150), b"%d" % n * 20
                db.put(k, v, sync=True)
                acked[t][k] = v
        except BaseException as e:
            outcome[t] = e

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a writer hangs after the background failure"
    assert fs.faults, "the failure never happened"
    assert all(isinstance(e, (minilsm.ReadOnlyError, minilsm.StoreIOError)) for e in outcome), outcome
    crash(db)
    fs.crash()
    with minilsm.DB(db_path, **small_options()) as db:
        for t in range(4):
            assert {k: db.get(k) for k in acked[t]} == acked[t]


class GateFS(minilsm.fs.FileSystem):
    """A file system that holds the `nth` creation of a table file at a gate until the test opens it."""

    def __init__(self, nth: int) -> None:
        self.left = nth
        self.reached = threading.Event()
        self.gate = threading.Event()

    def open_writable(self, path: str) -> minilsm.fs.WritableFile:
        if ".sst" in path:
            self.left -= 1
            if self.left == 0:
                self.reached.set()
                self.gate.wait(30)
        return super().open_writable(path)


def store_with_compaction_at_the_gate(db_path: str) -> tuple[minilsm.DB, GateFS]:
    """A background store whose compaction, started by two flushes, is held at the gate of its `GateFS`."""
    fs = GateFS(3)  # two flushes, then the compaction they start is held at the gate
    db = minilsm.DB(db_path, **small_options(fs=fs, background=True))
    for n in range(2):
        db.put(b"k", b"%d" % n)
        db.flush()
    assert fs.reached.wait(10), "the background compaction never started"
    return db, fs


@contextlib.contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises `KeyboardInterrupt` inside, as at a terminal, whatever this process was started with.

    A shell starts a background job (``cmd &``, as a CI script may be run) with SIGINT ignored, and Python then
    installs no handler of its own: a SIGINT sent to the test would do nothing (these tests failed so, old code
    and new alike, when the suite ran in the background)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupted_close(db: minilsm.DB, then: Callable[[], object] = lambda: None) -> None:
    """Call ``db.close()`` here (the main thread) and interrupt it with SIGINT, as a Ctrl-C, once it waits for the
    background thread; another thread sends the signal, then calls `then`."""
    main = threading.get_ident()

    def interrupt() -> None:
        while not db._closing:
            time.sleep(0.001)
        time.sleep(0.05)  # close() now waits for the background thread
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.05)
        then()

    helper = threading.Thread(target=interrupt, daemon=True)
    with ctrl_c_raises():
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            db.close()
    helper.join(10)


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[BaseException | None]]:
    """Run `call` in a started daemon thread; the list then gets None if it returns, or what it raised."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_read_prefers_the_memtable_to_the_memtable_being_flushed(db_path: str) -> None:
    """While a frozen memtable waits for its flush, the writes made since (in the new memtable) are the newer:
    a read answers from them first, an overwrite and a delete included, and a snapshot taken before them
    still answers from the frozen one."""
    fs = GateFS(1)  # the first table, the flush's, is held at the gate
    db = minilsm.DB(db_path, **small_options(fs=fs, background=True))
    db.put(b"a", b"old")
    db.put(b"b", b"old")
    snap = db.snapshot()
    flusher, outcome = in_thread(db.flush)
    assert fs.reached.wait(10), "the flush never started"
    assert db._imm is not None  # the old writes are in the frozen memtable, the flush at the gate
    db.put(b"a", b"new")
    db.delete(b"b")
    assert (db.get(b"a"), db.get(b"b")) == (b"new", None)
    assert dict(db.iterator()) == {b"a": b"new"}
    assert (snap.get(b"a"), snap.get(b"b")) == (b"old", b"old")
    fs.gate.set()
    flusher.join(10)
    assert outcome == [None]
    assert (db.get(b"a"), db.get(b"b")) == (b"new", None)
    snap.close()
    db.close()


@pytest.mark.parametrize("written_meanwhile", [True, False], ids=["memtable-written", "memtable-empty"])
def test_a_flush_that_waited_for_the_previous_one_and_wakes_after_close_raises_closed_error(
    db_path: str, written_meanwhile: bool
) -> None:
    """flush() waits for the background thread's flush of the memtable frozen before it; close() begins and wakes
    it, but on a loaded machine the mutex goes first to the background thread, which finishes that flush, and to
    close(), which closes the log.  The waiter, back at last, finds no frozen memtable: it must not freeze the
    memtable written meanwhile into the closed log (that failed with ClosedError from the log, recorded as a
    failure of the store: the slow thread stress test's "starting a new memtable and log failed: log ... is
    closed"), nor return as if it had flushed an empty one.  It gets ClosedError, as close() says a flush in
    another thread does, and the store records no failure."""
    fs = GateFS(1)  # the first table, the flush of the first memtable, is held at the gate
    db = minilsm.DB(db_path, **small_options(fs=fs, background=True))
    db.put(b"a", b"1")
    first, first_outcome = in_thread(db.flush)
    assert fs.reached.wait(10), "the flush never started"
    if written_meanwhile:
        db.put(b"b", b"2")  # in the new memtable: the late flush has something to freeze
    waiting, woke, resume = threading.Event(), threading.Event(), threading.Event()
    late_outcome: list[BaseException | None] = []

    def late_flush() -> None:
        try:
            db.flush()
            late_outcome.append(None)
        except BaseException as e:
            late_outcome.append(e)

    late = threading.Thread(target=late_flush, daemon=True)
    real_wait = db._cond.wait

    def wait(timeout: float | None = None) -> bool:
        if threading.current_thread() is late:
            waiting.set()
        woken = real_wait(timeout)
        if threading.current_thread() is late and db._closing and not woke.is_set():
            # Woken by close(), but the other threads take the mutex before this one is scheduled again.
            db._mutex.release()
            woke.set()
            try:
                resume.wait(10)
            finally:
                db._mutex.acquire()
        return woken

    db._cond.wait = wait  # type: ignore[method-assign]
    late.start()
    assert waiting.wait(10), "the late flush never waited for the first"
    closer = threading.Thread(target=db.close, daemon=True)
    closer.start()
    assert woke.wait(10), "close() never woke the waiting flush"
    fs.gate.set()  # the first flush ends, then close() closes the files
    closer.join(10)
    assert not closer.is_alive(), "close() hangs"
    resume.set()
    late.join(10)
    first.join(10)
    assert not late.is_alive() and not first.is_alive(), "a flush hangs after close()"
    assert len(late_outcome) == 1 and isinstance(late_outcome[0], minilsm.ClosedError), late_outcome
    assert db._bg_error is None, db._bg_error
    assert str(late_outcome[0]).endswith("the store is closed"), late_outcome
    assert len(first_outcome) == 1 and isinstance(first_outcome[0], minilsm.ClosedError), first_outcome
    with minilsm.DB(db_path, **small_options()) as db:
        assert (db.get(b"a"), db.get(b"b")) == (b"1", b"2" if written_meanwhile else None)


@pytest.mark.parametrize("background", [True, False], ids=["background", "inline"])
def test_freezing_the_memtable_of_a_closed_store_raises_closed_error_and_records_no_failure(
    db_path: str, background: bool
) -> None:
    """`_freeze_memtable` itself refuses a store closed (or closing) before it touches the log, whichever caller
    came back to it after a wait: the closed log's own ClosedError would be taken for a failed write."""
    db = minilsm.DB(db_path, **small_options(background=background))
    db.put(b"a", b"1")
    db.close()
    with db._mutex, pytest.raises(minilsm.ClosedError, match="the store is closed"):
        db._freeze_memtable()
    assert db._bg_error is None, db._bg_error


def test_close_stops_a_flush_waiting_in_another_thread(db_path: str) -> None:
    """close() while flush() waits for the background thread: the flush gets ClosedError, it does not hang."""
    db, fs = store_with_compaction_at_the_gate(db_path)
    db.put(b"k", b"2")
    flusher, outcome = in_thread(db.flush)
    while db._imm is None:  # the flush froze the memtable and now waits for the background thread
        time.sleep(0.001)
    closer = threading.Thread(target=db.close, daemon=True)
    closer.start()
    while not db._closing:
        time.sleep(0.001)
    fs.gate.set()
    closer.join(10)
    flusher.join(10)
    assert not closer.is_alive() and not flusher.is_alive(), "close() or flush() hangs"
    assert len(outcome) == 1 and isinstance(outcome[0], minilsm.ClosedError), outcome
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(b"k") == b"2"


@pytest.mark.parametrize("dropped", [True, False], ids=["dropped", "in-use"])
def test_an_open_refused_by_a_store_its_background_thread_holds_waits_for_the_job(db_path: str, dropped: bool) -> None:
    """Was: a store dropped without close() while its background thread ran a job stayed open, its directory
    locked, until that job and every one due after it had run, and an open of the path meanwhile raised
    LockError, "already open in this process", with no store left to close.  Now the thread lets go after each
    job, and an open refused by the lock of a store that the thread holds waits for the job to end: a dropped
    store is freed then and the open goes on; a store still in use refuses it then."""
    db, fs = store_with_compaction_at_the_gate(db_path)
    db.put(b"k", b"2")  # acknowledged: in the log, for the next open
    in_use = [] if dropped else [db]
    store = weakref.ref(db)
    del db
    assert store() is not None, "the background thread holds the store for its job"
    opened: list[minilsm.DB] = []
    opener, outcome = in_thread(lambda: opened.append(minilsm.DB(db_path, **small_options())))
    opener.join(0.5)
    assert opener.is_alive(), f"the open did not wait for the job: {outcome}"
    with pytest.warns(ResourceWarning, match="unclosed") if dropped else contextlib.nullcontext():
        fs.gate.set()
        opener.join(10)
    assert not opener.is_alive(), "the open hangs"
    if dropped:
        assert outcome == [None] and store() is None
        with opened[0] as db:
            assert db.get(b"k") == b"2"
    else:
        assert len(outcome) == 1 and isinstance(outcome[0], minilsm.LockError), outcome
        assert str(outcome[0]) == f"{db_path} is already open in this process"
        in_use[0].close()


@pytest.mark.parametrize("tool", ["check", "repair", "destroy"])
def test_an_offline_tool_refused_by_a_dropped_store_its_background_thread_holds_waits_for_the_job(
    db_path: str, tool: str
) -> None:
    """Was: only `DB` waited for a store dropped without close() whose background thread still ran a job: the
    plyvel idiom ``del db; destroy_db(path)`` (a test's teardown, say), or a check or repair right after the drop,
    raised LockError "is open in this process; close it to destroy it", with no store left to close."""
    db, fs = store_with_compaction_at_the_gate(db_path)
    db.put(b"k", b"2")
    store = weakref.ref(db)
    del db
    assert store() is not None, "the background thread holds the store for its job"
    call = {"check": minilsm.check_store, "repair": minilsm.repair_store, "destroy": minilsm.destroy_store}[tool]
    results: list[Any] = []
    runner, outcome = in_thread(lambda: results.append(call(db_path)))
    runner.join(0.5)
    assert runner.is_alive(), f"the {tool} did not wait for the job: {outcome}"
    with pytest.warns(ResourceWarning, match="unclosed"):
        fs.gate.set()
        runner.join(10)
    assert not runner.is_alive(), f"the {tool} hangs"
    assert outcome == [None] and store() is None, outcome
    if tool == "destroy":
        assert not os.path.exists(db_path)
    else:
        assert results[0].ok, results[0]
        with minilsm.DB(db_path, **small_options()) as reopened:
            assert reopened.get(b"k") == b"2"


def test_an_open_that_lets_go_of_the_last_reference_to_a_dropped_store_while_looking_for_it_goes_on(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: the refused open takes the open stores of the process in a list, and so holds each a moment; when
    the dropped store's background thread let go in that moment (its job ended), the open's own reference was the
    last, and letting go of it freed the store and its lock; the open then saw a thread not holding the store and
    raised LockError, "already open in this process", though nothing held the directory.  Here the thread lets go
    while the open's list holds the store, as a thread switch at that point does (1 open in 500 of a loop that
    opens, writes and drops the store, with thread switches every 10 us)."""
    db, fs = store_with_compaction_at_the_gate(db_path)
    db.put(b"k", b"2")
    hold = db._bg_hold
    assert hold is not None
    del db

    class LetGoWhileListed(weakref.WeakSet[minilsm.DB]):
        def __iter__(self) -> Iterator[minilsm.DB]:
            for store in super().__iter__():
                yield store  # the caller's list holds it now
                if store.path == db_path:
                    let_go = hold.let_go
                    fs.gate.set()
                    deadline = time.monotonic() + 10
                    while hold.let_go == let_go and time.monotonic() < deadline:
                        time.sleep(0.001)

    monkeypatch.setattr(minilsm.db, "_open_stores", LetGoWhileListed(minilsm.db._open_stores))
    # The collection a refused open runs before it refuses is followed by one more ask, which would hide what
    # this tests: the open must go on without it.
    collections: list[None] = []
    monkeypatch.setattr(minilsm.db, "gc", types.SimpleNamespace(collect=lambda: collections.append(None)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        with minilsm.DB(db_path, **small_options()) as db:
            assert db.get(b"k") == b"2"
    assert collections == [], "the open was refused and only asked again after a collection"


@pytest.mark.parametrize("closed_one_kept", [False, True], ids=["alone", "beside-a-closed-store-object"])
def test_an_open_refused_while_a_dropped_store_is_being_freed_goes_on(
    db_path: str, monkeypatch: pytest.MonkeyPatch, closed_one_kept: bool
) -> None:
    """Was (found by the drop/reopen audit): a dropped store leaves the process's open stores as it is freed, as
    its weak references go, before its lock goes with its attributes (its table files close in between, and other
    threads run), so an open refused in that moment found no store to wait for, asked again at once, and was
    refused again: LockError, "already open in this process", with no store left (2 loops in 1,500 with thread
    switches every 10 us).  Now an open refused with no store open there asks again for FREEING_WAIT.  Here the
    moment lasts 20 ms: a callback of the store's weak reference sleeps, in the thread that frees it.  A store of
    that path closed before, whose object the program still holds, is no store open there: it holds no lock."""
    earlier = minilsm.DB(db_path) if closed_one_kept else None
    if earlier is not None:
        earlier.close()
    db, fs = store_with_compaction_at_the_gate(db_path)
    db.put(b"k", b"2")
    freeing = threading.Event()

    def being_freed(_: object) -> None:
        freeing.set()
        time.sleep(0.02)

    store = weakref.ref(db, being_freed)
    # The collection a refused open runs before it refuses asks once more after it, which, as long as it takes,
    # would hide what this tests.
    monkeypatch.setattr(minilsm.db, "gc", types.SimpleNamespace(collect=lambda: 0))
    del db
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        fs.gate.set()
        assert freeing.wait(10), "the store was never freed"
        assert minilsm.db.FREEING_WAIT > 0.02
        with minilsm.DB(db_path, **small_options()) as db:
            assert db.get(b"k") == b"2"
    assert store() is None


def test_an_open_refused_by_a_store_in_use_that_its_thread_does_not_hold_does_not_wait(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait is for a store only its background thread may keep: one idle, held by its user, refuses at once,
    not when its idle thread next looks for work (here not before the wait's limit, shortened to 5 s)."""
    monkeypatch.setattr(minilsm.db, "SEEK_CHECK_INTERVAL", 60.0)
    monkeypatch.setattr(minilsm.db, "DROPPED_STORE_WAIT", 5.0)
    with minilsm.DB(db_path, **small_options(background=True)) as db:
        db.put(b"k", b"v")
        assert db._bg_hold is not None
        deadline = time.monotonic() + 10
        while db._bg_hold.held and time.monotonic() < deadline:  # the thread's look for work after the open
            time.sleep(0.001)
        time.sleep(0.2)  # and the one the open's notify may start after it: then the thread waits its 60 s
        assert not db._bg_hold.held
        started = time.monotonic()
        with pytest.raises(minilsm.LockError, match="already open in this process"):
            minilsm.DB(db_path, **small_options())
        assert time.monotonic() - started < minilsm.db.DROPPED_STORE_WAIT / 2


def test_an_open_refused_by_a_store_in_use_waits_for_its_job_in_hand_and_no_more(db_path: str) -> None:
    """An open refused by a store of this process whose thread runs a job waits for that job (the store may have
    been dropped, and go with it), then asks once more: a store still in use, whose thread goes on to its next
    job, refuses it then.  Waiting again for each later job would hold the open for as long as the store is busy."""

    class TwoGates(minilsm.fs.FileSystem):
        """Holds the third and the fourth creation of a table file, each at a gate of its own."""

        def __init__(self) -> None:
            self.tables = 0
            self.reached = [threading.Event(), threading.Event()]
            self.gates = [threading.Event(), threading.Event()]

        def open_writable(self, path: str) -> minilsm.fs.WritableFile:
            if ".sst" in path:
                self.tables += 1
                if 0 <= self.tables - 3 < 2:
                    self.reached[self.tables - 3].set()
                    self.gates[self.tables - 3].wait(30)
            return super().open_writable(path)

    fs = TwoGates()
    db = minilsm.DB(db_path, **small_options(fs=fs, background=True))
    try:
        for n in range(2):
            db.put(b"k", b"%d" % n)
            db.flush()
        assert fs.reached[0].wait(10), "the background compaction never started"  # the job in hand
        db.put(b"big", b"x" * 4096)
        db.put(b"k", b"2")  # freezes the full memtable: the thread's next job, a flush
        opener, outcome = in_thread(lambda: minilsm.DB(db_path, **small_options()))
        opener.join(0.3)
        assert opener.is_alive(), f"the open did not wait for the job in hand: {outcome}"
        fs.gates[0].set()
        assert fs.reached[1].wait(10), "the flush never started"
        opener.join(5)
        assert not opener.is_alive(), "the open waits for the store's next job too"
        assert len(outcome) == 1 and isinstance(outcome[0], minilsm.LockError), outcome
        assert "already open in this process" in str(outcome[0])
    finally:
        for gate in fs.gates:
            gate.set()
        db.close()
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(b"k") == b"2" and db.get(b"big") == b"x" * 4096


def test_an_open_refused_by_a_lock_of_this_process_that_no_store_holds_ends(db_path: str) -> None:
    """A LOCK this process holds with no store open on it (an offline tool's, or here the file system's lock
    itself) is asked again only for FREEING_WAIT, in case a store being freed holds it: then the open is refused,
    it does not ask for ever."""
    minilsm.DB(db_path).close()
    lock = minilsm.fs.DEFAULT_FS.lock(os.path.join(db_path, "LOCK"))
    try:
        opener, outcome = in_thread(lambda: minilsm.DB(db_path))
        opener.join(10)
        assert not opener.is_alive(), "the open asks for the lock for ever"
        assert len(outcome) == 1 and isinstance(outcome[0], minilsm.LockError), outcome
        assert "already open in this process" in str(outcome[0])
    finally:
        lock.release()
    minilsm.DB(db_path).close()


def test_a_writer_waiting_for_the_background_thread_learns_of_its_failure_outside_a_job(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer stalled on a memtable not yet flushed waits for the background thread with no timeout: if the
    thread ends on a failure of its own outside a job (a bug in choosing the next one), it must wake the writer,
    which then raises, rather than wait for ever."""
    failing = threading.Event()

    def choose(db: minilsm.DB) -> bool:
        if failing.is_set():
            raise RuntimeError("a bug in choosing the next job")
        return False  # nothing due: the frozen memtable stays unflushed, and the writer stalls on it

    monkeypatch.setattr(minilsm.DB, "_has_background_work", choose)
    monkeypatch.setattr(minilsm.db, "SEEK_CHECK_INTERVAL", 0.05)
    db = minilsm.DB(db_path, **small_options(background=True))
    try:

        def write() -> None:
            for n in range(3):  # the second freezes the full memtable, the third finds both full and waits
                db.put(b"k%d" % n, b"x" * 3000)

        writer, outcome = in_thread(write)
        writer.join(0.3)
        assert writer.is_alive(), f"the writer did not stall: {outcome}"
        failing.set()
        writer.join(10)
        assert not writer.is_alive(), "the writer waits for ever for a thread that has ended"
        assert len(outcome) == 1 and isinstance(outcome[0], minilsm.ReadOnlyError), outcome
        assert "a bug in choosing the next job" in str(outcome[0])
    finally:
        failing.set()
        db.close()


def test_a_store_opened_written_and_dropped_in_a_loop_opens_every_time(db_path: str) -> None:
    """As plyvel code often runs: a function opens the store, writes and returns without close().  Was: the
    next call's open was refused ("already open in this process") 187 times in 200 on a disk, whenever the
    dropped store's background thread was still compacting the table its open had made of the log.  Here table
    files take 20 ms to create, as fsyncs on a disk may, so that a job is under way at most returns."""

    class SlowTablesFS(minilsm.fs.FileSystem):
        def open_writable(self, path: str) -> minilsm.fs.WritableFile:
            if ".sst" in path:
                time.sleep(0.02)
            return super().open_writable(path)

    fs = SlowTablesFS()

    def record(i: int) -> None:
        db = minilsm.DB(db_path, fs=fs)
        db.put(b"%d" % i, b"x")  # "10".."19" between "1" and "2": tables that overlap, merges that are no moves

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        for i in range(30):
            record(i)
    with minilsm.DB(db_path) as db:
        assert [k for k, _ in db.iterator()] == sorted(b"%d" % i for i in range(30))


def test_close_waits_for_a_manual_compaction_in_another_thread(db_path: str) -> None:
    """Once close() returns the store's files are another opener's: a compact_range running in another thread
    must not write a manifest or delete files after it."""
    fs = GateFS(3)  # two flushes, then compact_range's output is held at the gate
    db = minilsm.DB(db_path, **small_options(fs=fs, background=True, level0_compaction_trigger=4))
    for n in range(2):
        db.put(b"k", b"%d" % n)
        db.flush()
    compactor, outcome = in_thread(db.compact_range)
    assert fs.reached.wait(10), "the manual compaction never started"
    at_close: list[tuple[list[str], bytes]] = []

    def files() -> tuple[list[str], bytes]:
        return sorted(os.listdir(db_path)), Path(db_path, "MANIFEST").read_bytes()

    def close() -> None:
        db.close()
        at_close.append(files())

    closer = threading.Thread(target=close, daemon=True)
    closer.start()
    time.sleep(0.05)  # without waiting for the compaction, close() is done by now
    fs.gate.set()
    closer.join(10)
    compactor.join(10)
    assert not closer.is_alive() and not compactor.is_alive(), "close() or compact_range() hangs"
    assert at_close == [files()], "the store changed its files after close() returned"
    assert len(outcome) == 1 and (outcome[0] is None or isinstance(outcome[0], minilsm.ClosedError)), outcome
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(b"k") == b"1"


def test_a_snapshot_collected_by_the_cycle_collector_under_the_store_lock_does_not_deadlock(db_path: str) -> None:
    """Was: an unclosed snapshot in a reference cycle is released by its finalizer whenever the cycle collector
    runs, in whichever thread allocates then; releasing took the store's mutex, so a collection inside any
    locked section (a put, snapshot(), the background thread) deadlocked that thread on itself."""
    import gc

    db = minilsm.DB(db_path, **small_options())
    db.put(b"k", b"v")

    class Holder:
        pass

    holder = Holder()
    holder.cycle = holder  # type: ignore[attr-defined]
    holder.snap = db.snapshot()  # type: ignore[attr-defined]
    del holder

    def collect_under_the_lock() -> None:
        with db._mutex:
            gc.collect()  # what any allocation in a locked section may do

    t = threading.Thread(target=collect_under_the_lock, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "releasing the snapshot deadlocked"
    assert db._snapshots == {}
    db.close()


def test_a_second_close_returns_only_once_the_store_is_closed(db_path: str) -> None:
    """Was: a close() racing with one already under way returned at once, before the directory was released,
    so reopening right after it raised LockError."""
    db, fs = store_with_compaction_at_the_gate(db_path)
    first = threading.Thread(target=db.close, daemon=True)
    first.start()
    while not db._closing:
        time.sleep(0.001)
    second_saw: list[bool] = []

    def second() -> None:
        db.close()
        second_saw.append(db.closed)

    t = threading.Thread(target=second, daemon=True)
    t.start()
    time.sleep(0.05)
    fs.gate.set()
    for thread in (first, t):
        thread.join(10)
        assert not thread.is_alive(), "close() hangs"
    assert second_saw == [True]
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(b"k") == b"1"


class HeldReads(minilsm.fs.FileSystem):
    """A file system whose `nth` table read (once armed) waits at a gate until the test opens it."""

    def __init__(self) -> None:
        self.left = 0
        self.reached = threading.Event()
        self.gate = threading.Event()

    def open_random(self, path: str) -> minilsm.fs.RandomAccessFile:
        fs, inner = self, super().open_random(path)

        class File:
            def pread(self, offset: int, size: int) -> bytes:
                if fs.left:
                    fs.left -= 1
                    if not fs.left:
                        fs.reached.set()
                        fs.gate.wait(30)
                return inner.pread(offset, size)

            def size(self) -> int:
                return inner.size()

            def close(self) -> None:
                inner.close()

        return File()


def store_of_flushed_keys_with_held_reads(db_path: str) -> tuple[HeldReads, minilsm.DB, dict[bytes, bytes]]:
    """A store on a `HeldReads` file system holding 200 keys in tables (no block cache), and those keys."""
    fs = HeldReads()
    db = minilsm.DB(db_path, **small_options(fs=fs, block_cache_size=0))
    data = {b"k%03d" % i: b"v" * 30 for i in range(200)}
    for k, v in data.items():
        db.put(k, v)
    db.flush()
    return fs, db, data


def test_closing_an_iterator_while_another_thread_steps_it_keeps_its_tables(db_path: str) -> None:
    """Was: close() from another thread while the iterator's generator was running could not stop it, yet let
    go of its tables; a compaction then deleted them under the loop, which failed with StoreIOError."""
    fs, db, data = store_of_flushed_keys_with_held_reads(db_path)
    it = db.iterator()
    got: list[tuple[bytes, bytes]] = []
    fs.left = 3  # the scan's third block read waits, inside the iterator's generator
    reader, outcome = in_thread(lambda: got.extend(it))
    assert fs.reached.wait(10)
    it.close()  # from this thread, while the generator runs in the other
    db.put(b"k000", b"new")
    db.compact_range()  # replaces the table the scan reads
    fs.gate.set()
    reader.join(10)
    assert not reader.is_alive()
    assert outcome == [None]
    assert got == sorted(data.items())[: len(got)]
    db.close()


def test_closing_the_store_while_another_thread_steps_an_iterator_ends_that_scan_with_closed_error(
    db_path: str,
) -> None:
    """Was: db.close() while another thread was inside an iterator's block read let that scan go on with what
    it held and end at its next block read with a ClosedError naming a table (or never, in memory).  Now
    the step under way finishes, the next one raises ClosedError naming the store, and close() does not
    wait for the scan."""
    fs, db, data = store_of_flushed_keys_with_held_reads(db_path)
    it = db.iterator()
    got = [next(it) for _ in range(20)]  # past the first block of every table
    fs.left = 1  # the scan's next block read waits, inside the iterator's generator
    reader, outcome = in_thread(lambda: got.extend(it))
    assert fs.reached.wait(10)
    db.close()  # from this thread, while the generator runs in the other
    fs.gate.set()
    reader.join(10)
    assert not reader.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], minilsm.ClosedError), outcome
    assert re.search(re.escape(f"{db_path}: the store is closed"), str(outcome[0]))
    assert len(got) < len(data) and got == sorted(data.items())[: len(got)]


_Outcome = tuple[bool, list[Any], BaseException | None]  # a scan's direction, what it got, how it ended


def test_closing_the_store_at_any_moment_of_other_threads_scans_raises_nothing_but_closed_error(
    db_path: str,
) -> None:
    """Scans in other threads (forward and reverse, over tables and the memtable) while the store closes at a
    random moment: each ends with its whole range or ClosedError after a correct prefix, never another error."""

    def scan(db: minilsm.DB, reverse: bool, outcomes: list[_Outcome]) -> None:
        got: list[Any] = []
        try:
            for kv in db.iterator(reverse=reverse):
                got.append(kv)
        except BaseException as e:
            outcomes.append((reverse, got, e))
        else:
            outcomes.append((reverse, got, None))

    rng = random.Random(8)
    for round_ in range(25):
        sizes = dict(memtable_size=16384, target_file_size=16384, level1_max_bytes=65536)
        db = minilsm.DB(db_path, **small_options(background=bool(round_ % 2), **sizes))
        data = {b"k%04d" % i: b"v%d" % i for i in range(3000)}  # scans long enough that some are cut short
        for k, v in data.items():
            db.put(k, v)
        outcomes: list[_Outcome] = []
        threads = [
            threading.Thread(target=scan, args=(db, reverse, outcomes), daemon=True) for reverse in (False, True) * 2
        ]
        for t in threads:
            t.start()
        time.sleep(rng.random() * 0.004)
        db.close()
        for t in threads:
            t.join(10)
            assert not t.is_alive()
        assert len(outcomes) == len(threads)
        for reverse, got, error in outcomes:
            want = sorted(data.items(), reverse=reverse)
            if error is None:
                assert got == want
            else:
                assert isinstance(error, minilsm.ClosedError), repr(error)
                assert got == want[: len(got)]


class _PreemptedDB(minilsm.DB):
    """A store whose next read of its memtable, once `preempt` is set, first runs `preempt`.

    That is where a reader that has taken its sequence number can lose the CPU to a writer and the
    background thread: this makes that interleaving happen on cue, in one thread.
    """

    preempt: Callable[[], None] | None = None

    @property  # type: ignore[override]
    def _mem(self) -> Any:
        hook, self.preempt = self.preempt, None
        if hook is not None:
            hook()
        return self.__dict__["_mem"]

    @_mem.setter
    def _mem(self, mem: Any) -> None:
        self.__dict__["_mem"] = mem


@pytest.mark.parametrize("read", ["get", "in", "iterator", "reverse", "may_contain"])
def test_a_read_overtaken_by_an_overwrite_and_a_compaction_still_finds_the_key(db_path: str, read: str) -> None:
    """Reads take their sequence number, then look in the memtables and the tables without a lock.  If a
    writer overwrites the key and a flush and a compaction finish in between, the new tables no longer hold
    the version that sequence number sees (no snapshot protects it: only the newest version was kept), and
    the read saw none: get returned None, `in` False, a scan left the key out, for a key present all
    along.  The read must give the old value or the new one.  (may_contain passed before: it asks the
    tables' filters only, at no sequence number; it is pinned alongside.)"""
    with _PreemptedDB(db_path, background=False) as db:
        db.put(b"k", b"v1")
        db.flush()

        def overwrite_and_compact() -> None:
            db.put(b"k", b"v2")
            db.compact_range()  # flushes the memtable, then merges v1 away

        db.preempt = overwrite_and_compact
        if read == "get":
            assert db.get(b"k") in (b"v1", b"v2")
        elif read == "in":
            assert b"k" in db
        elif read == "iterator":
            assert list(db.iterator()) in ([(b"k", b"v1")], [(b"k", b"v2")])
        elif read == "reverse":
            assert list(db.iterator(reverse=True, include_key=False)) in ([b"v1"], [b"v2"])
        else:
            assert db.may_contain(b"k")
        assert db.preempt is None  # the writer did run inside the read
        assert [t.entries for t in db.tables()] == [1] and db.get(b"k") == b"v2"


@pytest.mark.parametrize("read", ["get", "in", "iterator", "reverse"])
def test_a_snapshot_read_overtaken_by_its_own_release_and_a_compaction_gives_its_value_or_closed_error(
    db_path: str, read: str
) -> None:
    """Was: a read of a snapshot that another thread closed meanwhile went on at the snapshot's sequence number
    against tables a compaction had rewritten without the versions only that snapshot kept: get returned None
    (`in` False, a scan nothing) for a key the snapshot holds.  A read racing the release must give the
    snapshot's answer or raise ClosedError, as a read after the release does."""
    with _PreemptedDB(db_path, background=False) as db:
        db.put(b"k", b"v1")
        db.flush()
        snap = db.snapshot()

        def release_overwrite_and_compact() -> None:
            snap.close()  # as another thread may, while this one reads
            db.put(b"k", b"v2")
            db.compact_range()  # no snapshot left: v1 goes

        db.preempt = release_overwrite_and_compact
        try:
            if read == "get":
                got: object = snap.get(b"k")
                assert got == b"v1"
            elif read == "in":
                assert b"k" in snap
            elif read == "iterator":
                assert list(snap.iterator()) == [(b"k", b"v1")]
            else:
                assert list(snap.iterator(reverse=True, include_key=False)) == [b"v1"]
        except minilsm.ClosedError:
            pass
        assert db.preempt is None  # the release and the compaction did run inside the read
        assert [t.entries for t in db.tables()] == [1] and db.get(b"k") == b"v2"


def test_a_background_failure_that_no_later_write_meets_is_still_reported(
    db_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: a flush or compaction failing in the background thread was recorded for the next write to raise,
    and nowhere else: a store that took no write after it (a reader, or one closed next) said nothing at all,
    and a bug's traceback (any exception there) was lost with it.  It is logged as an error, once."""
    from faultfs import FaultFS

    fs = FaultFS()
    db = minilsm.DB(db_path, **small_options(fs=fs, background=True))
    fs.arm("rename", 1)  # the first table the background thread finishes
    with caplog.at_level("ERROR", logger="minilsm"):
        n = 0
        while db._imm is None and db._bg_error is None:  # until the memtable fills, and the flush begins
            db.put(b"k%03d" % n, b"v" * 20)
            n += 1
        deadline = time.monotonic() + 10
        while db._bg_error is None and time.monotonic() < deadline:
            time.sleep(0.001)
        assert fs.faults and db._bg_error is not None
        db.close()
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, caplog.text
    assert db_path in errors[0].getMessage() and "read-only" in errors[0].getMessage()
    assert errors[0].exc_info is not None and isinstance(errors[0].exc_info[1], minilsm.StoreIOError)
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(b"k000") == b"v" * 20


def test_a_batch_half_added_to_the_memtable_is_invisible_to_lock_free_readers(db_path: str) -> None:
    """Reads take no lock: a write is visible once the store's last sequence number covers it.  The writer adds
    a batch's ops to the memtable one by one (each a Python call, where the interpreter may switch threads) and
    publishes the number only after the last, so a read between two of them sees none of the batch.  Forced
    here (the stress runs in tests/test_thread_stress.py meet this moment about once in a thousand scans)."""
    from minilsm.memtable import MemTable

    seen: list[object] = []

    class Interrupted(MemTable):
        def add(self, key: bytes, seq: int, kind: int, value: bytes) -> None:
            if key == b"c":  # the batch's third op: a and b are in the memtable, c not yet
                seen.append(([db.get(k) for k in (b"a", b"b", b"c")], list(db.iterator()), b"a" in db))
                seen.append(list(db.iterator(reverse=True)))
            super().add(key, seq, kind, value)

    with minilsm.DB(db_path, background=False) as db:
        for k in (b"a", b"b", b"c"):
            db.put(k, b"old")
        db.flush()
        db.delete(b"a")  # in the memtable, under the batch's put
        with db._mutex:
            interrupted = Interrupted()
            for key, trailer, value in sorted(db._mem.entries(), key=lambda e: e[1]):  # oldest first, as written
                interrupted.add(key, trailer >> 8, trailer & 0xFF, value)
            db._mem = interrupted
        with db.write_batch() as wb:
            for k in (b"a", b"b", b"c"):
                wb.put(k, b"new")
        old = [(b"b", b"old"), (b"c", b"old")]
        assert seen == [([None, b"old", b"old"], old, False), old[::-1]]
        assert [db.get(k) for k in (b"a", b"b", b"c")] == [b"new"] * 3


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_kill"), reason="needs signal.pthread_kill")
def test_a_close_called_again_after_an_interrupt_waits_for_the_background_thread(db_path: str) -> None:
    """Was: the second close() returned at once, since an interrupted `Thread.join` marks the thread stopped in
    CPython 3.11 (bpo-45274's fix releases its lock); the thread, still flushing, then renamed and deleted files
    in a directory the store had let go, under the next store to open it (found by an audit).  close() now waits
    for an event the thread sets as it ends."""
    fs = GateFS(1)  # the background thread's flush, held at the gate
    db = minilsm.DB(db_path, **small_options(fs=fs, background=True))
    db.put(b"k", b"1")
    flushing, _ = in_thread(db.flush)
    assert fs.reached.wait(10), "the background flush never started"
    interrupted_close(db)
    again, outcome = in_thread(db.close)
    again.join(0.3)
    assert again.is_alive() and not db.closed, "the second close() did not wait for the background thread"
    fs.gate.set()
    again.join(10)
    flushing.join(10)
    assert outcome == [None] and db.closed and db._bg_done is not None and db._bg_done.is_set()
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(b"k") == b"1"


def test_an_interrupt_as_a_memtable_is_frozen_makes_the_store_read_only_and_a_crash_then_loses_nothing(
    db_path: str,
) -> None:
    """Was: an interrupt after the new log was made (here in the directory's sync, as a Ctrl-C there would) let the
    store go on writing into the old log; the next freeze made a third log, and after a crash the empty second
    one, before a log with records, made every open fail (found by an audit).  Now the store turns read-only, as
    after an interrupt in a write, and the reopen finds every acknowledged write."""
    interrupts = [0]

    class InterruptedSync(minilsm.fs.FileSystem):
        def sync_dir(self, path: str) -> None:
            if interrupts[0]:
                interrupts[0] -= 1
                raise KeyboardInterrupt
            super().sync_dir(path)

    db = minilsm.DB(db_path, **small_options(fs=InterruptedSync(), memtable_size=1 << 20))
    db.put(b"a", b"1")
    interrupts[0] = 1
    with pytest.raises(KeyboardInterrupt):
        db.flush()
    with pytest.raises(minilsm.ReadOnlyError):
        db.put(b"b", b"2")
    with pytest.raises(minilsm.ReadOnlyError):
        db.flush()
    assert db.get(b"a") == b"1"  # reads go on
    crash(db)
    with minilsm.DB(db_path, **small_options()) as again:
        assert dict(again.iterator()) == {b"a": b"1"}


def test_a_close_interrupted_while_it_closes_files_releases_the_directory_when_called_again(db_path: str) -> None:
    """Was: the interrupted close() marked the store closed in a `finally` without having let go of the LOCK, so
    the next close() returned at once and the directory stayed locked while the object lived (found by an
    audit).  Here the interrupt lands in the log file's close, as a Ctrl-C there would."""
    interrupts = [1]

    class InterruptedLogClose(minilsm.fs.FileSystem):
        def open_appendable(self, path: str) -> minilsm.fs.WritableFile:
            f = super().open_appendable(path)
            return _Interrupting(f) if path.endswith(".log") else f

        open_writable = open_appendable  # type: ignore[assignment]

    class _Interrupting:
        def __init__(self, f: minilsm.fs.WritableFile) -> None:
            self.f = f

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

        def close(self) -> None:
            if interrupts[0]:
                interrupts[0] -= 1
                raise KeyboardInterrupt
            self.f.close()

    db = minilsm.DB(db_path, **small_options(fs=InterruptedLogClose()))
    db.put(b"k", b"v")
    with pytest.raises(KeyboardInterrupt):
        db.close()
    with pytest.raises(minilsm.ClosedError):
        db.put(b"k", b"late")  # closed to writes
    db.close()
    assert db.closed
    with minilsm.DB(db_path, **small_options()) as again:
        assert again.get(b"k") == b"v"


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_kill"), reason="needs signal.pthread_kill")
def test_a_close_interrupted_while_it_waits_can_be_called_again_and_finishes(db_path: str) -> None:
    """Was: a KeyboardInterrupt (Ctrl-C) while close() waited for the background thread's compaction left the
    store marked as closing forever: every later close() waited for the first to finish and hung, and the
    directory stayed locked.  Now the interrupt propagates, the store stays closed to writes, and the next
    close() does the rest."""
    db, fs = store_with_compaction_at_the_gate(db_path)
    interrupted_close(db, then=fs.gate.set)
    with pytest.raises(minilsm.ClosedError):
        db.put(b"k", b"late")  # the store stays closed to writes
    again, outcome = in_thread(db.close)
    again.join(10)
    assert not again.is_alive(), "the second close() hangs"
    assert outcome == [None] and db.closed
    with minilsm.DB(db_path, **small_options()) as db:  # the directory was released
        assert db.get(b"k") == b"1"


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_kill"), reason="needs signal.pthread_kill")
def test_an_interrupt_while_compact_range_waits_for_the_mutex_does_not_release_another_threads_hold(
    db_path: str,
) -> None:
    """Was: compact_range merges with the mutex released and takes it back at the end.  A KeyboardInterrupt
    (Ctrl-C) while it waited for another thread's hold left without the mutex, and its `with` block then
    released the other thread's hold on the way out: two threads inside the store's critical sections.  Now
    the interrupt waits until the mutex is taken back, then propagates."""

    fs = GateFS(2)  # one flush, then compact_range's output table is held at the gate
    db = minilsm.DB(db_path, **small_options(fs=fs, background=True))
    for n in range(20):
        db.put(b"k%02d" % n, b"v")
    db.flush()
    main = threading.get_ident()
    released = threading.Event()

    def hold_the_mutex_then_interrupt() -> None:
        assert fs.reached.wait(10), "compact_range never reached its output table"
        db._mutex.acquire()
        fs.gate.set()
        time.sleep(0.2)  # compact_range writes its small table, then waits for the mutex
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.2)
        released.set()
        db._mutex.release()  # RuntimeError if compact_range released it already

    with ctrl_c_raises():
        holder, outcome = in_thread(hold_the_mutex_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            db.compact_range()
    assert released.is_set(), "the interrupt left compact_range while another thread held the mutex"
    holder.join(10)
    assert outcome == [None]
    with pytest.raises(minilsm.ReadOnlyError, match="interrupted"):
        db.put(b"k", b"late")
    db.close()
    with minilsm.DB(db_path, **small_options()) as db:
        assert [db.get(b"k%02d" % n) for n in range(20)] == [b"v"] * 20


def test_an_exception_anywhere_in_the_background_thread_stops_writers_with_read_only_error(
    db_path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: only a flush or compaction job's own exceptions were recorded; one raised while the background
    thread looked for work (the compaction picker, here made to fail as a bug in it would) ended the thread
    silently, and the next writer that waited for a flush waited forever.  Now any exception there is
    recorded and logged, and writers get ReadOnlyError."""
    import minilsm.compaction as compaction_mod

    real = compaction_mod.pick_compaction
    bg_thread: list[threading.Thread] = []

    def picker(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() in bg_thread:
            raise RuntimeError("a bug in the compaction picker")
        return real(*args, **kwargs)

    db = minilsm.DB(db_path, **small_options(background=True))
    assert db._bg_thread is not None
    bg_thread.append(db._bg_thread)
    monkeypatch.setattr(compaction_mod, "pick_compaction", picker)

    def write() -> None:
        for n in range(5000):
            db.put(b"k%04d" % n, b"v" * 50)

    with caplog.at_level("ERROR", logger="minilsm"):
        writer, outcome = in_thread(write)
        writer.join(20)
        assert not writer.is_alive(), "a writer waits forever for the dead background thread"
        bg_thread[0].join(20)  # it logs as it ends, after letting the writers go
    assert len(outcome) == 1 and isinstance(outcome[0], minilsm.ReadOnlyError), outcome
    assert "a bug in the compaction picker" in caplog.text
    monkeypatch.undo()
    db.close()


def test_a_batch_written_from_two_threads_at_once_is_applied_once(db_path: str) -> None:
    """Was: `WriteBatch._apply` tested `_closed` and set it only once the write was done, so a bound batch written
    by two threads at once passed the test in both and was applied twice: the second application put its old
    values back over writes acknowledged in between.  The second writer now gets `ClosedError`."""
    db = minilsm.DB(db_path, background=False)
    batch = db.write_batch()
    batch.put(b"k", b"old")
    first_inside, second_done = threading.Event(), threading.Event()
    applied: list[str] = []
    real = db._write_batch

    def gated(b: minilsm.WriteBatch, sync: bool | None) -> None:  # after _apply's test, before the store's write
        applied.append(threading.current_thread().name)
        if len(applied) == 1:
            first_inside.set()
            assert second_done.wait(10)
        real(b, sync)

    db._write_batch = gated  # type: ignore[method-assign]
    outcome: dict[str, str] = {}

    def write() -> None:
        try:
            batch.write()
            outcome[threading.current_thread().name] = "written"
        except minilsm.ClosedError:
            outcome[threading.current_thread().name] = "closed"

    first = threading.Thread(target=write, name="first")
    first.start()
    assert first_inside.wait(10)
    second = threading.Thread(target=write, name="second")
    second.start()
    second.join(10)
    second_done.set()
    first.join(10)
    assert applied == ["first"], applied
    assert outcome == {"first": "written", "second": "closed"}, outcome
    db.put(b"k", b"new")
    assert db.get(b"k") == b"new"
    db.close()


def test_memtables_flush_while_the_background_thread_merges(db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the worker, as in LevelDB: the thread that merges stops between entries to flush a frozen memtable,
    so writers wait for a flush, not for the whole merge.  Was: no flush until the merge had ended."""
    monkeypatch.setattr(minilsm.db, "FLUSH_CHECK_ENTRIES", 1)
    real = minilsm.compaction.compaction_entries
    flushes_inside: list[int] = []  # per merge, the flushes that landed while it ran

    def slow_merge(*args: Any, **kwargs: Any) -> Iterator[Entry]:
        before = db.stats().flushes
        for entry in real(*args, **kwargs):
            time.sleep(0.005)  # a merge long enough for the writer to fill two memtables
            yield entry
        flushes_inside.append(db.stats().flushes - before)

    monkeypatch.setattr(minilsm.compaction, "compaction_entries", slow_merge)
    rnd = random.Random(4)
    model: dict[bytes, bytes] = {}
    with minilsm.DB(db_path, **small_options(background=True, compaction_worker=False)) as db:
        deadline = time.monotonic() + 10
        while max(flushes_inside, default=0) < 2 and time.monotonic() < deadline:
            k, v = b"k%04d" % rnd.randrange(2000), rnd.randbytes(40)
            db.put(k, v)
            model[k] = v
        assert max(flushes_inside, default=0) >= 2, f"flushes during each merge: {flushes_inside}"
        db.wait_for_compactions()
        assert dict(db.iterator()) == model
        check_invariants(db, sweep_first=True)
    with minilsm.DB(db_path, **small_options(background=True, compaction_worker=False)) as db:
        assert dict(db.iterator()) == model


@pytest.mark.parametrize("via", ["store", "view"])
def test_two_threads_deleting_one_key_by_del_do_not_both_succeed(db_path: str, via: str) -> None:
    """``del db[key]`` checks, then deletes.  Was: nothing held the two together, so two threads deleting one key
    both passed the check and both succeeded, an outcome no order of the two gives (found by an API audit).
    Here the first waits between its check and its delete while the second runs."""
    db = minilsm.DB(db_path)
    db.put(b"p/k", b"v")
    first = db if via == "store" else db.prefixed_db(b"p/")
    second = db.prefixed_db(b"p/") if via == "store" else db  # the store and a view of it share the lock
    checked, go_on = threading.Event(), threading.Event()
    get = first.get

    def get_then_wait(*args: Any, **kwargs: Any) -> Any:
        value = get(*args, **kwargs)
        checked.set()
        go_on.wait(10)
        return value

    first.get = get_then_wait  # type: ignore[method-assign]
    key = b"p/k" if first is db else b"k"
    thread, outcome = in_thread(lambda: first.__delitem__(key))
    assert checked.wait(10)
    other, other_outcome = in_thread(lambda: second.__delitem__(b"k" if first is db else b"p/k"))
    other.join(0.2)  # time for it to run through, were nothing holding it
    go_on.set()
    thread.join(10)
    other.join(10)
    assert [type(o).__name__ for o in outcome + other_outcome] == ["NoneType", "KeyError"]
    assert b"p/k" not in db
    db.close()
