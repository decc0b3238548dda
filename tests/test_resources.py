"""Resources: open files bounded by `max_open_files`, and no growth of files, threads or memory over time.

* Many tables, a small `max_open_files`: point reads, scans, writes, flushes
  and compactions never hold more table files open than the cache allows (the
  count comes from /proc/self/fd, so a leak anywhere shows).
* A soak: a fixed key space overwritten and deleted over and over, with reads,
  scans, snapshots and background work.  After a warm-up the process's open
  files, threads, resident memory and the store's files on disk stay flat:
  nothing grows beyond the memtables, filters, indexes and caches.  CI runs a
  few seconds; ``--slow --minutes N`` runs N minutes.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import threading
import time
import weakref
from dataclasses import dataclass

import pytest
from storeutil import check_invariants, small_options

import minilsm
from minilsm.worker import shared_worker

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def held_files(path: str) -> list[str]:
    """What the process holds of the files of the store at `path`: one name per open descriptor and per mapping.

    With `mmap_reads` table files are mapped into memory; a deleted file shows as "NAME (deleted)" in both
    lists.
    """
    return [name for name in open_files() + mapped_files() if name.startswith(path + os.sep)]


def open_files() -> list[str]:
    """What each open descriptor of the process points at."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own descriptor, say)
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
    return held


def mapped_files() -> list[str]:
    """The file of each file-backed mapping of the process."""
    held = []
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.rstrip("\n").split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(os.sep):
                held.append(fields[5])
    return held


def tables_among(names: list[str], path: str) -> int:
    """How many of `names` are table files of the store at `path`."""
    return sum(name.startswith(path + os.sep) and name.endswith(".sst") for name in names)


def table_fds(path: str) -> int:
    """Open descriptors on table files of the store at `path`, by what they point at."""
    return tables_among(open_files(), path)


def table_maps(path: str) -> int:
    """Mappings of table files of the store at `path`."""
    return tables_among(mapped_files(), path)


def tables_held(path: str) -> int:
    """Table files of the store at `path` held open, counting descriptors and mappings apart (the larger)."""
    return max(table_fds(path), table_maps(path))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def store_bytes(path: str) -> int:
    total = 0
    for name in os.listdir(path):
        with contextlib.suppress(FileNotFoundError):  # the background thread deletes files meanwhile
            total += os.path.getsize(os.path.join(path, name))
    return total


@pytest.mark.parametrize("mapped", [False, True], ids=["pread", "mapped"])
@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
def test_open_table_files_stay_within_max_open_files(db_path: str, background: bool, mapped: bool) -> None:
    max_open = 4
    opts = small_options(
        background=background, max_open_files=max_open, target_file_size=1024, block_cache_size=0, mmap_reads=mapped
    )
    rng = random.Random(1)
    keys = [b"key%05d" % i for i in range(1500)]
    peak = 0
    with minilsm.DB(db_path, **opts) as db:
        for i, k in enumerate(keys):
            db.put(k, b"v%d" % i * 8)
            if i % 50 == 0:
                peak = max(peak, tables_held(db_path))
        db.flush()
        tables = sum(len(level) for level in db.version.levels)
        assert tables >= 5 * max_open, f"only {tables} tables: the bound would not be tested"
        for n in range(1500):
            k = rng.choice(keys)
            assert db.get(k) is not None
            if n % 25 == 0:
                peak = max(peak, tables_held(db_path))
            if n % 300 == 0:
                it = db.iterator(reverse=n % 600 == 0)
                for j, _ in enumerate(it):
                    if j % 100 == 0:
                        peak = max(peak, tables_held(db_path))
        db.compact_range()
        peak = max(peak, tables_held(db_path))
        assert len(db._file_cache) <= max_open
    gc.collect()
    assert table_fds(db_path) == table_maps(db_path) == 0, "table files left open after close"
    # A scan keeps one table per level-0 table or level being read, a compaction its output: a few beyond the cache.
    assert peak <= max_open + 3, f"{peak} table files open at once with max_open_files={max_open}"
    print(f"{tables} tables, max_open_files={max_open}: at most {peak} table files open")


def deleted_fds(path: str) -> int:
    """Descriptors and mappings of files of the store at `path` that were deleted (their disk space is still held)."""
    return sum(name.endswith(" (deleted)") for name in held_files(path))


@pytest.mark.parametrize("mapped", [False, True], ids=["pread", "mapped"])
@pytest.mark.parametrize("suffix", ["", "/"])
def test_deleted_tables_are_closed_whatever_the_path_spelling(db_path: str, suffix: str, mapped: bool) -> None:
    """Was: with a trailing slash on the path, the file cache knew a table as "db/N.sst" and the sweep evicted
    "db//N.sst", so every compacted-away table stayed open (its disk space held) until the LRU dropped it."""
    with minilsm.DB(db_path + suffix, **small_options(mmap_reads=mapped)) as db:
        for i in range(2000):
            db.put(b"k%04d" % (i % 300), b"v" * 50)
            if i % 100 == 0:
                assert db.get(b"k0000") is not None  # opens the tables
        assert db.stats().compactions > 5
        gc.collect()
        assert deleted_fds(db_path) == 0


@pytest.mark.parametrize("mapped", [False, True], ids=["pread", "mapped"])
def test_close_releases_every_descriptor_and_thread(db_path: str, mapped: bool) -> None:
    gc.collect()
    fds, threads = open_fds(), threading.active_count()
    for _ in range(5):
        with minilsm.DB(db_path, **small_options(background=True, mmap_reads=mapped)) as db:
            for i in range(500):
                db.put(b"k%04d" % i, b"v" * 50)
            with db.snapshot() as snap:
                list(snap.iterator())
            list(db.iterator())
    gc.collect()
    assert open_fds() == fds
    assert held_files(db_path) == []  # nor a table mapped into memory
    assert threading.active_count() == threads


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
def test_a_store_dropped_without_close_is_freed_and_releases_its_directory(db_path: str, background: bool) -> None:
    """Was: a `DB` dropped without `close()` was never freed.  Its background thread held it, and the lock file
    had no finalizer, so the directory stayed locked until the process exited: opening the path again (a
    notebook cell run twice, a test fixture that forgot to close) raised LockError, "already open (by this or
    another process)", with no object left to close, and a thread and three descriptors leaked per store.
    plyvel, sqlite3 and Python's own files release what they hold when collected; so does a store now, with
    a ResourceWarning as an unclosed file gives.  Its acknowledged writes are in the log, as after `close()`."""
    gc.collect()
    fds, threads = open_fds(), threading.active_count()
    pipes = shared_worker().descriptors  # the compaction worker's, the process's: one it starts now is no leak
    opts = small_options(background=background)
    db = minilsm.DB(db_path, **opts)
    for i in range(300):
        db.put(b"k%04d" % i, b"v%d" % i)
    bg, ref = db._bg_thread, weakref.ref(db)
    with pytest.warns(ResourceWarning, match="unclosed"):
        del db
        # The background thread holds the store while it runs a job (a flush the puts started, or a look for
        # work), and lets go when that ends: wait for that, not for ever.
        deadline = time.monotonic() + 10
        while ref() is not None and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.01)
    assert ref() is None, "the store is still referenced"
    if bg is not None:
        bg.join(10)
        assert not bg.is_alive(), "the background thread outlives its store"
    started = shared_worker().descriptors - pipes
    assert open_fds() - len(started) == fds and threading.active_count() == threads and held_files(db_path) == []
    with minilsm.DB(db_path, **opts) as db:  # the directory is free again, and nothing acknowledged is lost
        assert [v for _, v in db.iterator()] == [b"v%d" % i for i in range(300)]


def test_a_dropped_store_that_a_reference_cycle_holds_does_not_refuse_the_next_open(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was (found by the drop/reopen audit): a store whose background flush failed holds its failure, whose
    traceback holds the store's own frames: a cycle, which only the cycle collector frees.  Dropped, it kept its
    lock until a collection happened to run, and an open of the path meanwhile raised LockError, "already open in
    this process", with no store left to close.  Now a refused open runs the collector once before it refuses."""

    class FullDisk(minilsm.fs.FileSystem):
        def open_writable(self, path: str) -> minilsm.fs.WritableFile:
            if ".sst" in path:
                raise OSError(28, "No space left on device", path)
            return super().open_writable(path)

    # The failure is logged with its traceback, which pytest's log capture would keep, and the store with it.
    monkeypatch.setattr(logging.getLogger("minilsm"), "disabled", True)
    gc.collect()
    gc.disable()  # as a collection that has not come yet
    try:
        db = minilsm.DB(db_path, **small_options(fs=FullDisk(), background=True, compaction_worker=False))
        with contextlib.suppress(minilsm.Error):
            for i in range(300):
                db.put(b"k%03d" % i, b"v" * 50)  # until the failed flush turns the store read-only
        assert db._bg_done is not None and db._bg_done.wait(10) and db._bg_error is not None
        store = weakref.ref(db)
        with pytest.warns(ResourceWarning, match="unclosed"):
            del db
            assert store() is not None, "no cycle holds the store: the test tests nothing"
            with minilsm.DB(db_path, **small_options()) as db:
                assert db.get(b"k000") == b"v" * 50  # acknowledged before the failure: in the log
        assert store() is None
    finally:
        gc.enable()


@dataclass
class Sample:
    t: float
    fds: int
    threads: int
    rss: int
    disk: int
    versions: int


def test_soak_no_growth(db_path: str, request: pytest.FixtureRequest) -> None:
    minutes = request.config.getoption("--minutes")
    duration = 60 * minutes if minutes else 4.0
    if minutes and not request.config.getoption("--slow"):
        pytest.skip("a long soak: add --slow")
    cache = 64 << 10
    opts = small_options(background=True, block_cache_size=cache, max_open_files=8, memtable_size=8192)
    rng = random.Random(7)
    keys = [b"soak%04d" % i for i in range(400)]
    samples: list[Sample] = []
    ops = 0
    with minilsm.DB(db_path, **opts) as db:
        start = time.monotonic()
        next_sample = start
        # At least so many ops, whatever the machine's speed: enough for the levels to fill and turn over.
        while (now := time.monotonic()) - start < duration or ops < 4000:
            r = rng.random()
            k = rng.choice(keys)
            if r < 0.5:
                db.put(k, bytes([rng.randrange(256)]) * rng.randrange(10, 200))
            elif r < 0.6:
                db.delete(k)
            elif r < 0.9:
                db.get(k)
            elif r < 0.97:
                for _ in zip(range(50), db.iterator(start=k), strict=False):
                    pass
            else:
                with db.snapshot() as snap:
                    snap.get(k)
            ops += 1
            if now >= next_sample:  # (no gc.collect() here: in a big test run's heap it takes 100 ms)
                sample = Sample(now - start, open_fds(), threading.active_count(), rss_bytes(), store_bytes(db_path), 0)
                sample.versions = len(db._versions)
                samples.append(sample)
                next_sample = now + duration / 40
                assert db._block_cache is not None and db._block_cache.usage <= cache
                assert len(db._file_cache) <= 8
        stats = db.stats()
        check_invariants(db, sweep_first=True)  # reads let go of old versions after the last sweep
        assert not db._snapshots
    assert len(samples) >= 10 and stats.compactions > 0
    warm = samples[len(samples) // 3 :]  # after the levels have filled
    first, last = warm[0], warm[-1]
    peak_fds = max(s.fds for s in warm)
    print(
        f"soak {duration:.0f}s, {ops} ops, {stats.flushes} flushes, {stats.compactions} compactions: "
        f"fds {first.fds}..{peak_fds}, threads {first.threads}..{last.threads}, rss {first.rss >> 20}.."
        f"{max(s.rss for s in warm) >> 20} MiB, disk {min(s.disk for s in warm) >> 10}.."
        f"{max(s.disk for s in warm) >> 10} KiB, live versions {max(s.versions for s in warm)}"
    )
    assert peak_fds <= first.fds + 10, "open files grow"
    assert {s.threads for s in warm} == {first.threads}, "threads come and go or pile up"
    assert max(s.versions for s in warm) <= 10, "old versions are kept alive"
    # Fixed key space, bounded caches: disk and memory wander within a band; they must not trend up.
    assert max(s.disk for s in warm) <= 4 * min(s.disk for s in warm) + (256 << 10), "store grows on disk"
    assert max(s.rss for s in warm) - first.rss <= 24 << 20, "memory grows"


class _HeldOpens(minilsm.fs.FileSystem):
    """A file system whose next table open, once armed, waits at a gate until the test opens it."""

    def __init__(self) -> None:
        self.armed = False
        self.reached = threading.Event()
        self.gate = threading.Event()

    def open_random(self, path: str) -> minilsm.fs.RandomAccessFile:
        if self.armed and path.endswith(".sst"):
            self.armed = False
            self.reached.set()
            self.gate.wait(30)
        return super().open_random(path)


@pytest.mark.parametrize("read", ["get", "scan"])
def test_a_read_opening_a_table_file_as_the_store_closes_leaves_no_file_open(db_path: str, read: str) -> None:
    """Was: a read that found its table open, then opened the file through the store's file cache just after
    close() had emptied it, put the file in the closed store's cache: it stayed open, for as long as the DB
    object lived."""
    fs = _HeldOpens()
    db = minilsm.DB(db_path, **small_options(fs=fs, block_cache_size=0, max_open_files=1, level0_compaction_trigger=4))
    for k in (b"a", b"b"):
        db.put(k, b"v")
        db.flush()  # two tables; the cache keeps only the newer one's file open
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            if read == "get":
                assert db.get(b"a") == b"v"
            else:
                assert next(db.iterator(stop=b"b")) == (b"a", b"v")
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    fs.armed = True  # the read of b"a" opens the older table's file again
    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    assert fs.reached.wait(10)
    db.close()
    fs.gate.set()
    reader.join(10)
    assert not reader.is_alive()
    assert len(outcome) == 1 and (outcome[0] is None or isinstance(outcome[0], minilsm.ClosedError)), outcome
    assert table_fds(db_path) == 0, "a table file opened during close() stays open"


@pytest.mark.parametrize("worker", [False, True], ids=["thread", "worker"])
def test_level0_stays_bounded_across_short_sessions(db_path: str, worker: bool) -> None:
    """Was: a store opened for a few writes at a time (fewer than fill a memtable) gained a level-0 table per
    open, from its recovered log, and close() abandoned the merge the open had started in the worker; writes
    waited for `level0_stop_writes_trigger` only once a memtable filled, so level 0 grew without bound (962
    tables after 1000 sessions, each read probing all of them, memory and open time growing with it)."""
    opts = small_options(background=True, compaction_worker=worker, memtable_size=1 << 20)
    stop = opts["level0_stop_writes_trigger"]
    peak = 0
    for session in range(30):
        with minilsm.DB(db_path, **opts) as db:
            peak = max(peak, len(db.version.levels[0]))
            for i in range(5):  # the same keys each time: the level-0 tables overlap, so a merge is due
                db.put(b"k%04d" % i, b"v%d" % session)
    with minilsm.DB(db_path, **opts) as db:
        peak = max(peak, len(db.version.levels[0]))
        assert list(db.iterator()) == [(b"k%04d" % i, b"v29") for i in range(5)]
    assert peak <= stop + 1, f"level 0 reached {peak} tables with level0_stop_writes_trigger={stop}"
