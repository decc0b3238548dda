"""The compaction worker process: the same results as compacting in the thread, and no harm when it fails."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import inspect
import io
import itertools
import logging
import os
import pickle
import pickletools
import random
import resource
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Final

import pytest
from storeutil import check_invariants, flip_byte, small_options

from minilsm import DB, ClosedError, CorruptionError, worker
from minilsm.check import check_store
from minilsm.compaction import flush_entries
from minilsm.fs import FileSystem
from minilsm.keys import KIND_DELETE, KIND_VALUE
from minilsm.memtable import MemTable
from minilsm.sstable.format import TableMeta
from minilsm.sstable.reader import TableReader
from minilsm.stats import Stats

FALLBACK = "in-process instead"  # "compacting ..." or "flushing ...": the worker failed and the thread took over


@pytest.fixture
def fresh_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[worker.Worker]:
    """A worker of this test's own (not the one the process shares), ended afterwards."""
    w = worker.Worker()
    monkeypatch.setattr(worker, "_shared", w)
    yield w
    w.close()


def load(db: DB, seed: int, n: int = 1500, model: dict[bytes, bytes] | None = None) -> dict[bytes, bytes]:
    """Random puts, overwrites and deletes; `model` (a new dict by default) updated to what the store must hold."""
    rnd = random.Random(seed)
    model = {} if model is None else model
    for _ in range(n):
        key = b"k%04d" % rnd.randrange(400)
        if rnd.random() < 0.2:
            db.delete(key)
            model.pop(key, None)
        else:
            value = rnd.randbytes(rnd.randrange(1, 40))
            db.put(key, value)
            model[key] = value
    return model


def every_version(db: DB) -> list[tuple[int, list[tuple[bytes, int, bytes]]]]:
    """(level, versions) of every table, in level and key order: the store's whole content, sequence numbers too."""
    return [(level, list(t.iter_entries())) for level, t in db.version.tables()]


def scratch_dirs(path: str) -> list[str]:
    return [n for n in os.listdir(path) if worker.is_scratch_name(n)]


def test_compactions_run_in_the_worker_and_the_store_reads_back_exactly(
    db_path: str, fresh_worker: worker.Worker, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="minilsm"):
        with DB(db_path, **small_options(background=True)) as db:
            model = load(db, seed=1)
            db.wait_for_compactions()
            assert db.stats().compactions > 0
            assert fresh_worker.pid is not None, "no job reached the worker"
            check_invariants(db, sweep_first=True)
            assert dict(db.iterator()) == model
            assert all(db.get(k) == v for k, v in model.items())
        with DB(db_path, **small_options(background=True)) as db:
            assert dict(db.iterator()) == model
    assert FALLBACK not in caplog.text
    assert scratch_dirs(db_path) == []


def test_only_a_scratch_directory_of_the_stores_own_name_is_removed(db_path: str) -> None:
    """Was: any name starting "compaction-" and ending ".tmp" counted as a worker's scratch directory, so the
    open deleted a user's ``compaction-backup.tmp/`` and what it held (found by a format audit)."""
    from minilsm.destroy import destroy_store

    with DB(db_path) as db:
        db.put(b"k", b"v")
    scratch = worker.scratch_name()
    lookalikes = ["compaction-backup.tmp", "compaction-.tmp", "compaction-0123456789ABCDEF.tmp",
                  "compaction-0123456789abcdef0.tmp", "compaction-0123456789abcde.tmp"]  # fmt: skip
    for name in [scratch, *lookalikes]:
        os.mkdir(os.path.join(db_path, name))
        with open(os.path.join(db_path, name, "000001.sst"), "wb") as f:
            f.write(b"someone's")
    assert [f.file for f in check_store(db_path).findings] == [scratch]
    with DB(db_path) as db:
        assert db.get(b"k") == b"v"
    assert sorted(n for n in os.listdir(db_path) if n.startswith("compaction-")) == sorted(lookalikes)
    os.mkdir(os.path.join(db_path, scratch))
    destroy_store(db_path)
    assert sorted(os.listdir(db_path)) == sorted(lookalikes)
    assert all(os.listdir(os.path.join(db_path, n)) == ["000001.sst"] for n in lookalikes)


@pytest.mark.parametrize("snapshot", [False, True])
def test_the_worker_keeps_and_drops_exactly_what_the_thread_does(
    tmp_path: os.PathLike[str], fresh_worker: worker.Worker, snapshot: bool
) -> None:
    """After a full compact_range, a store's tables hold the same versions whoever merged them."""
    dumps = []
    for use_worker in (False, True):
        with DB(
            os.path.join(tmp_path, f"w{use_worker}"), **small_options(background=True, compaction_worker=use_worker)
        ) as db:
            load(db, seed=2, n=600)
            snap = db.snapshot() if snapshot else None
            load(db, seed=3, n=600)
            db.compact_range()
            dumps.append([versions for _, versions in every_version(db)])
            if snap is not None:
                snap.close()
    assert fresh_worker.pid is not None
    thread, process = dumps
    assert process == thread
    kept = [v for versions in process for v in versions]
    assert any(v[1] & 0xFF == KIND_DELETE for v in kept) == snapshot  # a snapshot keeps tombstones it sees


def test_a_job_writes_only_into_its_scratch_directory(db_path: str) -> None:
    """What keeps a worker that outlived its store's process from overwriting a table of the store reopened."""
    with DB(db_path, **small_options(background=False)) as db:
        load(db, seed=4, n=400)
        db.flush()
        version = db.version
        level, tables = next((n, list(ts)) for n, ts in enumerate(version.levels) if ts)
    before = sorted(os.listdir(db_path))
    scratch = os.path.join(db_path, worker.scratch_name())
    os.mkdir(scratch)
    job = worker.CompactionJob(
        dirname=db_path,
        scratch=scratch,
        level=level,
        output_level=level + 1,
        inputs=[t.number for t in tables],
        overlaps=[],
        snapshots=[],
        below=version.ranges,
        drops_all_tombstones=False,
        target_file_size=1024,
        block_size=256,
        bits_per_key=10.0,
    )
    stats = Stats()
    metas = worker.run_job(job, FileSystem(), stats)
    assert sorted(os.listdir(db_path)) == sorted([*before, os.path.basename(scratch)])
    assert sorted(os.listdir(scratch)) == [f"{m.number:06d}.sst" for m in metas]
    assert [m.number for m in metas] == list(range(1, len(metas) + 1))
    assert stats.block_reads >= sum(t.meta.num_entries > 0 for t in tables)


def test_a_worker_that_dies_leaves_compactions_and_flushes_to_the_thread(
    db_path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Reads part of the job and exits: the store sees the pipe end mid-job.
    broken = worker.Worker([sys.executable, "-c", "import sys; sys.stdin.buffer.read(8); sys.exit(3)"])
    monkeypatch.setattr(worker, "_shared", broken)
    with caplog.at_level(logging.WARNING, logger="minilsm"):
        with DB(db_path, **small_options(background=True)) as db:
            model = load(db, seed=5)
            db.wait_for_compactions()
            assert db.stats().compactions > worker.MAX_FAILURES
            assert dict(db.iterator()) == model
            check_invariants(db, sweep_first=True)
        with DB(db_path, **small_options(background=True)) as db:
            assert dict(db.iterator()) == model
    assert FALLBACK in caplog.text and "exited with status 3" in caplog.text  # how the worker ended, said
    # After MAX_FAILURES in a row the process stops starting workers, says so once, and then nothing per job.
    assert caplog.text.count(FALLBACK) == worker.MAX_FAILURES
    assert caplog.text.count("not tried again in this process") == 1
    assert broken.pid is None
    assert scratch_dirs(db_path) == []


def slow_worker(seconds: float) -> worker.Worker:
    """A real worker whose every job first sleeps `seconds`: a merge long enough to write through."""
    boot = worker._BOOT.replace(
        "from minilsm.worker import main; main()",
        "import time, minilsm.worker as w; run = w.run_job; "
        f"w.run_job = lambda job, fs, stats: (time.sleep({seconds}), run(job, fs, stats))[1]; w.main()",
    )
    return worker.Worker([sys.executable, "-c", boot])


def test_memtables_flush_while_the_worker_merges(db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As LevelDB flushes in the middle of a long compaction: writers do not wait for the merge."""
    slow = slow_worker(0.5)
    monkeypatch.setattr(worker, "_shared", slow)
    rnd = random.Random(9)
    model: dict[bytes, bytes] = {}

    def put() -> None:
        key, value = b"k%04d" % rnd.randrange(2000), rnd.randbytes(40)
        db.put(key, value)
        model[key] = value

    try:
        with DB(db_path, **small_options(background=True)) as db:
            while not (db._compacting and slow.pid is not None):  # until a merge is in the worker
                put()
            flushes = db.stats().flushes
            while db._compacting and db.stats().flushes < flushes + 2:
                put()
            assert db.stats().flushes >= flushes + 2, "no memtable was flushed while the worker merged"
            db.wait_for_compactions()
            assert dict(db.iterator()) == model
            check_invariants(db, sweep_first=True)
        with DB(db_path, **small_options(background=True)) as db:
            assert dict(db.iterator()) == model
    finally:
        slow.close()


def test_an_embedded_python_compacts_in_process_without_running_its_host(
    db_path: str, fresh_worker: worker.Worker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A server hosting Python: its executable run with -c would be the server again, not a worker.
    monkeypatch.setattr(sys, "executable", "/usr/sbin/some-server")
    with caplog.at_level(logging.WARNING, logger="minilsm"), DB(db_path, **small_options(background=True)) as db:
        model = load(db, seed=10)
        db.wait_for_compactions()
        assert db.stats().compactions > 1
        assert dict(db.iterator()) == model
    assert fresh_worker.pid is None
    assert caplog.text.count("not a Python interpreter") == 1
    assert caplog.text.count("not tried again in this process") == 1


def test_the_worker_serves_a_process_with_over_a_thousand_files_open(
    db_path: str, fresh_worker: worker.Worker, caplog: pytest.LogCaptureFixture
) -> None:
    # select() refuses a descriptor numbered 1024 or more: with many tables open, the worker's pipes get one.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1200
    if soft < want and (hard == resource.RLIM_INFINITY or hard >= want):
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    elif soft < want:
        pytest.skip(f"the descriptor limit is {hard}")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with caplog.at_level(logging.WARNING, logger="minilsm"), DB(db_path, **small_options(background=True)) as db:
            model = load(db, seed=11)
            db.wait_for_compactions()
            assert dict(db.iterator()) == model
            assert max(fresh_worker.descriptors) >= 1024
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert FALLBACK not in caplog.text


def test_a_killed_worker_is_replaced_at_the_next_job(
    db_path: str, fresh_worker: worker.Worker, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="minilsm"), DB(db_path, **small_options(background=True)) as db:
        model = load(db, seed=6, n=800)
        db.wait_for_compactions()
        first = fresh_worker.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while fresh_worker.pid is not None and time.monotonic() < deadline:  # the kill lands asynchronously
            time.sleep(0.01)
        load(db, seed=7, n=800, model=model)
        db.wait_for_compactions()
        assert fresh_worker.pid not in (None, first)
        assert dict(db.iterator()) == model
    # Killed between jobs, it is seen dead before the next one is sent: nothing falls back to the thread.
    assert FALLBACK not in caplog.text
    with DB(db_path, **small_options(background=False)) as db:
        assert dict(db.iterator()) == model


def test_a_damaged_input_fails_the_job_with_the_error_and_the_counts_the_thread_gives(
    tmp_path: os.PathLike[str], fresh_worker: worker.Worker
) -> None:
    """The same exception, and the same data blocks counted as read before it.  Was: a job that failed in the
    worker sent back no counts, so the blocks and bytes it had read never reached the store's stats."""
    outcomes = []
    for use_worker in (False, True):
        path = os.path.join(tmp_path, f"w{use_worker}")
        with DB(
            path, **small_options(background=False, level0_compaction_trigger=50, level0_stop_writes_trigger=60)
        ) as db:
            load(db, seed=8, n=300)
            db.flush()
            table = db.version.levels[0][-1]  # the oldest: the merge reads the others' first blocks before it
            flip_byte(table.path, table._offsets[-1] + 10)  # a byte of its last data block
        with DB(
            path,
            **small_options(
                background=True,
                compaction_worker=use_worker,
                level0_compaction_trigger=50,
                level0_stop_writes_trigger=60,
            ),
        ) as db:
            before = db.stats()
            with pytest.raises(CorruptionError) as info:
                db.compact_range()
            after = db.stats()
            assert info.value.path == table.path
            error = (type(info.value), os.path.basename(table.path), info.value.detail)
            outcomes.append((error, after.block_reads - before.block_reads))
            assert after.block_bytes_read > before.block_bytes_read
    assert fresh_worker.pid is not None
    thread, process = outcomes
    assert process == thread
    assert thread[1] > table.props.num_data_blocks  # all of the damaged table's (the damaged one too), and more


def random_memtable(seed: int) -> MemTable:
    """A memtable of random writes: overwrites and deletes of 40 keys, some keys with many versions."""
    rnd = random.Random(seed)
    mem = MemTable()
    for seq in range(1, rnd.randrange(2, 200)):
        key = b"k%03d" % rnd.randrange(40)
        if rnd.random() < 0.25:
            mem.add(key, seq, KIND_DELETE, b"")
        else:
            mem.add(key, seq, KIND_VALUE, rnd.randbytes(rnd.randrange(0, 30)))
    return mem


@pytest.mark.parametrize("seed", range(8))
def test_a_flush_job_writes_the_versions_the_threads_flush_writes(db_path: str, seed: int) -> None:
    """The memtable goes to the worker pickled; the table holds what a flush in the store's thread would write."""
    mem = random_memtable(seed)
    last_seq = len(mem)
    snapshots = sorted(random.Random(seed).sample(range(1, last_seq + 1), k=min(3, last_seq)))
    scratch = os.path.join(db_path, worker.scratch_name())
    os.makedirs(scratch)
    job = worker.FlushJob(scratch=scratch, memtable=mem, snapshots=snapshots, block_size=256, bits_per_key=10.0)
    expected_stats = Stats()
    expected = list(flush_entries(mem.entries(), snapshots, expected_stats))
    stats = Stats()
    metas = worker.run_job(pickle.loads(pickle.dumps(job)), FileSystem(), stats)  # as it travels to the worker
    assert [m.number for m in metas] == [1] and os.listdir(scratch) == ["000001.sst"]
    table = TableReader.open(FileSystem(), scratch, 1, Stats())
    try:
        assert list(table.iter_entries()) == expected
    finally:
        table.close()
    assert stats.entries_dropped_shadowed == expected_stats.entries_dropped_shadowed > 0
    assert metas[0].num_entries == len(expected)


def test_a_flush_job_travels_without_the_picklers_memo(
    db_path: str, fresh_worker: worker.Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: pickled with the memo, which records every key, value and version of the memtable, so that pickling
    cost by the version, and more per version the more there were: 16 MiB of empty values took 390-440 ms in one
    C call holding the interpreter lock (0.78 us a version), against 37-39 ms without the memo."""
    frames: list[bytes] = []
    pickle_job = worker.pickle_job

    def spy(job: worker.FlushJob, write: Callable[[bytes], object]) -> None:
        pickle_job(job, lambda frame: (frames.append(bytes(frame)), write(frame)))

    monkeypatch.setattr(worker, "pickle_job", spy)
    mem = MemTable()
    for seq in range(1, 3001):  # empty values: all version, no byte (and each value the same object)
        mem.add(b"k%05d" % (seq % 1000), seq, KIND_VALUE, b"")
    scratch = os.path.join(db_path, worker.scratch_name())
    os.makedirs(scratch)
    job = worker.FlushJob(scratch=scratch, memtable=mem, snapshots=[1000, 2000], block_size=256, bits_per_key=10.0)
    stats = Stats()
    assert [m.num_entries for m in fresh_worker.run(job, stats=stats)] == [3000]
    assert stats.entries_dropped_shadowed == 0  # each snapshot stripe keeps its version of each key
    memo = {"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}
    sent = b"".join(frames)
    assert not [op.name for op, _, _ in pickletools.genops(sent) if op.name in memo]
    travelled = pickle.loads(sent).memtable
    assert list(travelled.entries()) == list(mem.entries())


def spy_jobs(w: worker.Worker, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The class names of the jobs `w` is given, in order."""
    jobs: list[str] = []
    run = w.run

    def spying(job: worker.CompactionJob | worker.FlushJob, *args: Any, **kw: Any) -> list[TableMeta]:
        jobs.append(type(job).__name__)
        return run(job, *args, **kw)

    monkeypatch.setattr(w, "run", spying)
    return jobs


def test_frozen_memtables_are_flushed_by_the_worker(
    db_path: str, fresh_worker: worker.Worker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = spy_jobs(fresh_worker, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="minilsm"):
        with DB(db_path, **small_options(background=True)) as db:
            model = load(db, seed=12)
            snap = db.snapshot()
            seen = dict(db.iterator())
            load(db, seed=13, n=500, model=model)
            db.flush()
            db.wait_for_compactions()
            assert db.stats().flushes >= 5
            assert "FlushJob" in jobs and "CompactionJob" in jobs
            assert dict(db.iterator()) == model
            assert dict(snap.iterator()) == seen
            check_invariants(db, sweep_first=True)
            snap.close()
        with DB(db_path, **small_options(background=True)) as db:
            assert dict(db.iterator()) == model
    assert FALLBACK not in caplog.text and "flush failed" not in caplog.text
    assert scratch_dirs(db_path) == []


def test_a_large_memtable_is_flushed_by_the_worker(
    db_path: str, fresh_worker: worker.Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: a frozen memtable over 16 MiB was flushed by the thread, since pickling it held the interpreter lock
    for one C call throughout; so a memtable_size of 16 MiB or more never flushed in the worker.  Now the job is
    pickled a frame at a time (`worker.pickle_job`), and a memtable of any size goes."""
    jobs = spy_jobs(fresh_worker, monkeypatch)
    with DB(db_path, **small_options(background=True, memtable_size=20 << 20)) as db:
        values = {b"k%02d" % i: bytes([i]) * (1 << 20) for i in range(22)}  # past 20 MiB: the memtable freezes
        for k, v in values.items():
            db.put(k, v)
        db.wait_for_compactions()
        assert db.stats().flushes == 1 and jobs == ["FlushJob"]
        assert dict(db.iterator()) == values


@pytest.mark.skipif(not hasattr(fcntl, "F_GETPIPE_SZ"), reason="pipe sizes are Linux's")
def test_a_job_travels_through_a_pipe_of_a_megabyte(db_path: str, fresh_worker: worker.Worker) -> None:
    """Was: the pipe's default 64 KiB, so each 64 KiB of a flush job waited to take the interpreter lock back
    from the threads that ran meanwhile (up to a switch interval each): 430-460 ms for a 4 MiB memtable's job
    beside a busy thread, against 160-195 ms now."""
    with open("/proc/sys/fs/pipe-max-size") as f:
        if int(f.read()) < worker.SEND_BYTES:
            pytest.skip("this system caps pipes below SEND_BYTES")
    mem = MemTable()
    mem.add(b"k", 1, KIND_VALUE, b"v")
    scratch = os.path.join(db_path, worker.scratch_name())
    os.makedirs(scratch)
    job = worker.FlushJob(scratch=scratch, memtable=mem, snapshots=[], block_size=4096, bits_per_key=10.0)
    assert [m.num_entries for m in fresh_worker.run(job, stats=Stats())] == [1]
    proc = fresh_worker._proc
    assert proc is not None and proc.stdin is not None
    assert fcntl.fcntl(proc.stdin.fileno(), fcntl.F_GETPIPE_SZ) == worker.SEND_BYTES


@pytest.mark.parametrize(
    ("function", "line", "look"),
    [("send", "while view:", 2), ("run", "if meanwhile is not None:", 1)],
    ids=["between the writes of a job", "between sending the job and waiting for its reply"],
)
def test_an_interrupt_while_a_job_is_sent_ends_the_worker(
    db_path: str, fresh_worker: worker.Worker, function: str, line: str, look: int
) -> None:
    """Was: `_send` let any exception out of its batched writes pass as one that had already ended the worker (and
    `run` did not look between sending the job and waiting for the reply), so an interrupt (Ctrl-C in a thread
    running `compact_range`) there left the worker holding the job, and the next job read that job's reply as its
    own.  Found by raising KeyboardInterrupt there from a trace function."""

    def job(n: int) -> worker.FlushJob:
        scratch = os.path.join(db_path, worker.scratch_name())
        os.makedirs(scratch)
        mem = MemTable()
        for seq in range(1, n + 1):
            mem.add(b"k%03d" % seq, seq, KIND_VALUE, b"v")
        return worker.FlushJob(scratch=scratch, memtable=mem, snapshots=[], block_size=256, bits_per_key=10)

    code = worker.Worker.run if function == "run" else worker.Worker._send
    source = inspect.getsourcelines(code)[0]
    where = code.__code__.co_firstlineno + [s.strip() for s in source].index(line)
    looks = 0

    def tracer(frame: Any, event: str, arg: object) -> Any:
        nonlocal looks
        if event == "call":
            return tracer if frame.f_code.co_name == function else None
        if event == "line" and frame.f_lineno == where:
            looks += 1
            if looks == look:  # the whole job written
                raise KeyboardInterrupt
        return tracer

    first = job(1)
    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            fresh_worker.run(first, lambda: None, stats=Stats())
    finally:
        sys.settrace(None)
    assert looks == look
    assert fresh_worker.pid is None  # ended with the job it holds
    assert [m.num_entries for m in fresh_worker.run(job(2), stats=Stats())] == [2]


@pytest.mark.parametrize("call", ["wait", "meanwhile", "no wait"])
def test_an_interrupt_as_a_job_takes_the_worker_never_leaves_it_taken(
    db_path: str, fresh_worker: worker.Worker, call: str
) -> None:
    """Was: `run` took the worker's lock before its `try`, so a KeyboardInterrupt right after the acquire returned
    (CPython runs signal handlers there) left it held for the process: every later job, any store's, waited
    forever, and compact_range hung (found by an audit).  A KeyboardInterrupt at each line of `run` up to the
    job's first step, from a trace function: the lock is free after each, and the next job runs."""
    kw: dict[str, Any] = {"wait": call != "no wait"}
    if call == "meanwhile":
        kw["meanwhile"] = lambda: None
    first_step = worker.Worker.run.__code__.co_firstlineno + [
        line.strip() for line in inspect.getsourcelines(worker.Worker.run)[0]
    ].index("if self.given_up:")
    for n in itertools.count(1):
        looks = 0
        scratch = os.path.join(db_path, worker.scratch_name())
        os.makedirs(scratch)
        job = worker.FlushJob(
            scratch=scratch, memtable=random_memtable(1), snapshots=[], block_size=256, bits_per_key=10
        )

        def tracer(frame: Any, event: str, arg: object, n: int = n) -> Any:
            nonlocal looks
            if event == "call":
                return tracer if frame.f_code is worker.Worker.run.__code__ else None
            if event == "line" and frame.f_lineno <= first_step:
                looks += 1
                if looks == n:
                    raise KeyboardInterrupt
            return tracer

        sys.settrace(tracer)
        try:
            fresh_worker.run(job, stats=Stats(), **kw)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        leaked = fresh_worker._lock.locked()
        if leaked:
            fresh_worker._lock.release()  # or the fixture's close of the worker would wait for it forever
        assert not leaked, f"interrupted at line event {n}"
        if looks < n:  # ran past the first step untouched: every line before it was tried
            break
    assert n > 3


@pytest.mark.parametrize("fails", [False, True])
def test_the_worker_lets_go_of_a_job_before_it_waits_for_the_next(
    db_path: str, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    """Was: `serve` held the last job, and a flush job's memtable with it, while it waited for the next one: an
    idle worker stayed at 209 MiB resident after flushing a 64 MiB memtable (41 MiB now)."""
    jobs: list[weakref.ref[worker.FlushJob]] = []
    run_job = worker.run_job

    def spy(job: worker.FlushJob, fs: FileSystem, stats: Stats) -> list[TableMeta]:
        jobs.append(weakref.ref(job))
        if fails:
            raise CorruptionError("a damaged input, say")
        return run_job(job, fs, stats)

    monkeypatch.setattr(worker, "run_job", spy)
    mem = MemTable()
    mem.add(b"k", 1, KIND_VALUE, b"v")
    scratch = os.path.join(db_path, worker.scratch_name())
    os.makedirs(scratch)
    job = worker.FlushJob(scratch=scratch, memtable=mem, snapshots=[], block_size=4096, bits_per_key=10.0)
    job_r, job_w = os.pipe()
    reply_r, reply_w = os.pipe()
    with open(job_r, "rb") as job_in, open(reply_w, "wb") as reply_out, open(reply_r, "rb") as reply_in:
        serving = threading.Thread(target=worker.serve, args=(job_in, reply_out))
        serving.start()
        with open(job_w, "wb") as job_out:
            worker.pickle_job(job, job_out.write)
            job_out.flush()
            ok, _, _ = pickle.load(reply_in)  # written once the job was answered
            assert ok is not fails and len(jobs) == 1
            assert jobs[0]() is None, "the worker still holds the job it answered"
        serving.join(10)  # the jobs' pipe closed: serve returns
        assert not serving.is_alive()


def test_other_threads_run_while_a_flush_job_is_pickled() -> None:
    """The pickler hands each frame (about 64 KiB) to a Python `write`, where another thread may take the
    interpreter lock: a thread that wants it waits for one frame, not for the whole memtable (83-93 ms for
    64 MiB of 100-byte values pickled in one call)."""
    mem = MemTable()
    for i in range(200_000):  # about 25 MiB of versions: 400 frames, 20-30 ms, room for the scheduler to run both
        mem.add(b"k%08d" % i, i + 1, KIND_VALUE, b"v" * 100)
    job = worker.FlushJob(scratch="unused", memtable=mem, snapshots=[], block_size=4096, bits_per_key=10.0)
    ticks = 0
    stop = threading.Event()

    def tick() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    frames: list[bytes] = []
    seen: list[int] = []  # the other thread's count at each frame

    def write(frame: bytes) -> None:
        frames.append(bytes(frame))
        seen.append(ticks)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0001)
    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        while not ticks:  # the other thread is running, and from now on asks for the lock
            time.sleep(0.001)
        worker.pickle_job(job, write)
    finally:
        stop.set()
        ticker.join()
        sys.setswitchinterval(interval)
    assert len(frames) > 10
    assert seen[-1] > seen[0], "no other thread ran while the job was pickled"
    assert list(pickle.loads(b"".join(frames)).memtable.entries()) == list(mem.entries())


_REFUSE = {
    "flushing": "w.run_flush = refuse",
    "compacting": (
        "run = w.run_job\n"
        "w.run_job = lambda job, fs, st: run(job, fs, st) if isinstance(job, w.FlushJob) else refuse(job, fs, st)"
    ),
}


@pytest.mark.parametrize("doing", ["flushing", "compacting"])
def test_a_job_whose_file_operation_fails_in_the_worker_is_done_again_by_the_thread(
    db_path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, doing: str
) -> None:
    """Was (compactions): a job that failed on the worker's own limit (open files, file size: limits of the
    worker's process alone) turned the store read-only, though the store's own process could run it; and a
    store reopened in the same process failed the same way.  An OSError of a job now sends it to the thread."""
    boot = worker._BOOT.replace(
        "from minilsm.worker import main; main()",
        "import minilsm.worker as w\n"
        "def refuse(job, fs, stats): raise OSError(24, 'forged: too many open files', '/forged/000042.sst')\n"
        f"{_REFUSE[doing]}\n"
        "w.main()",
    )
    refusing = worker.Worker([sys.executable, "-c", boot])
    monkeypatch.setattr(worker, "_shared", refusing)
    try:
        with caplog.at_level(logging.WARNING, logger="minilsm"):
            with DB(db_path, **small_options(background=True)) as db:
                model = load(db, seed=14)
                db.wait_for_compactions()
                assert db.stats().flushes >= 3 and db.stats().compactions > 0
                db.put(b"still", b"writable")
                model[b"still"] = b"writable"
                db.compact_range()
                assert dict(db.iterator()) == model
                check_invariants(db, sweep_first=True)
            with DB(db_path, **small_options(background=True)) as db:
                assert dict(db.iterator()) == model
        assert "forged: too many open files" in caplog.text and f"{doing} in-process instead" in caplog.text
        assert "a job failed in the compaction worker's process" in caplog.text
        # The file it names, as the same failure in the thread says it (found by the permissions audit: a table
        # the worker could not open was logged as "PermissionError(13, 'Permission denied')", no file named).
        assert "/forged/000042.sst" in caplog.text
        assert refusing.pid is not None  # a job that failed is not the worker's failure: it serves on
        assert "not tried again" not in caplog.text
    finally:
        refusing.close()
    assert scratch_dirs(db_path) == []


def test_a_busy_worker_is_not_waited_for_when_asked_not_to(fresh_worker: worker.Worker, db_path: str) -> None:
    job = worker.FlushJob(scratch=db_path, memtable=random_memtable(1), snapshots=[], block_size=256, bits_per_key=10)
    with fresh_worker._lock:  # another thread's job in hand
        started = time.monotonic()
        with pytest.raises(worker.WorkerUnavailableError) as info:
            fresh_worker.run(job, stats=Stats(), wait=False)
        assert info.value.said and time.monotonic() - started < 1
    assert fresh_worker.pid is None


def test_a_job_waiting_for_another_threads_job_does_its_meanwhile_work(
    fresh_worker: worker.Worker, db_path: str
) -> None:
    """Another store's job in hand: the waiting store still flushes a memtable that fills (its `meanwhile`)."""
    scratch = os.path.join(db_path, worker.scratch_name())
    os.makedirs(scratch)
    job = worker.FlushJob(scratch=scratch, memtable=random_memtable(2), snapshots=[], block_size=256, bits_per_key=10)
    calls: list[float] = []
    results: list[list[TableMeta]] = []
    with fresh_worker._lock:
        waiter = threading.Thread(
            target=lambda: results.append(fresh_worker.run(job, lambda: calls.append(1.0), stats=Stats()))
        )
        waiter.start()
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) >= 3, "meanwhile was not called while the worker was busy"
    waiter.join(10)
    assert [m.number for m in results[0]] == [1]


def test_a_scratch_directory_left_by_a_crash_goes_at_the_next_open(db_path: str) -> None:
    with DB(db_path) as db:
        db.put(b"k", b"v")
    leftover = os.path.join(db_path, worker.scratch_name())
    os.mkdir(leftover)
    with open(os.path.join(leftover, "000001.sst.tmp"), "wb") as f:
        f.write(b"half a table")
    said = [line for line in check_store(db_path).render().splitlines() if os.path.basename(leftover) in line]
    assert len(said) == 1 and "a compaction worker's scratch directory" in said[0]
    with DB(db_path) as db:
        assert db.get(b"k") == b"v"
    assert scratch_dirs(db_path) == []


def _running(pid: int) -> bool:
    """Whether process `pid` exists and has not ended (a zombie no one has reaped yet has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc"), reason="needs fork and /proc")
def test_the_worker_ends_with_its_store_process_though_that_process_forked_a_child(db_path: str) -> None:
    """A child forked after the worker started lets go of its copy of the job pipe at once (the at-fork hook drops
    the shared worker, whose pipes close with it), so the worker's input ends with the store's process."""
    script = f"""
import os, sys, time
sys.path[:0] = {[os.path.dirname(os.path.dirname(os.path.abspath(worker.__file__)))]!r}
import minilsm
from minilsm import worker
with minilsm.DB({db_path!r}, memtable_size=4096) as db:
    for i in range(3000):
        db.put(b"k%05d" % (i * 7919 % 3000), b"v" * 20)
    db.compact_range()
    assert db.stats().compactions > 0
pid = worker.shared_worker().pid
assert pid is not None, "the compactions did not run in the worker"
child = os.fork()
if child == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # not the test's pipes: it waits for their end
    os.dup2(null, 2)
    time.sleep(60)
    os._exit(0)
print(pid, child, flush=True)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    pid, child = map(int, run.stdout.split())
    try:
        assert _running(child), "the forked child should still hold the pipe"
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), "the worker outlived the process that started it"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_a_worker_stops_a_job_nobody_waits_for_once_its_store_process_is_killed(db_path: str) -> None:
    """Was: a store process killed mid-job left its worker merging until the job was done, and only then did it
    find the pipe broken.  It now ends within about a second."""
    boot = worker._BOOT.replace(
        "from minilsm.worker import main; main()",
        "import time, minilsm.worker as w; run = w.run_job; "
        "w.run_job = lambda job, fs, stats: (time.sleep(60), run(job, fs, stats))[1]; w.main()",
    )
    script = f"""
import sys, threading, time
sys.path[:0] = {[os.path.dirname(os.path.dirname(os.path.abspath(worker.__file__)))]!r}
import minilsm
from minilsm import worker
with minilsm.DB({db_path!r}, memtable_size=4096, background=False) as db:  # tables to merge, merged inline
    for i in range(3000):
        db.put(b"k%05d" % (i * 7919 % 3000), b"v" * 20)
worker._shared = worker.Worker({[sys.executable, "-c", boot]!r})
db = minilsm.DB({db_path!r}, memtable_size=4096)
threading.Thread(target=db.compact_range, daemon=True).start()
while worker._shared.pid is None or not db._compacting:
    time.sleep(0.01)
print(worker._shared.pid, flush=True)
time.sleep(60)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pid = None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the store process never got a job into the worker"
        pid = int(proc.stdout.readline())
        assert _running(pid)
        proc.kill()  # the store's process dies in the middle of the worker's (sleeping) job
        proc.wait()
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), "the worker went on with a job for a process that is gone"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # else a ResourceWarning when the Popen is collected
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@dataclasses.dataclass(frozen=True)
class _LeftOpen:
    """A script that loads a store and ends without close(), and where its background thread is as it ends."""

    boot: str
    """The worker's `main()` call, in `worker._BOOT`, and what it does before or after."""
    puts: int
    memtable_size: int
    value: bytes
    setup: str
    """Run before the store opens; defines `arrived()`, true once the background thread is where the exit is to
    find it."""


_SENDING: Final = _LeftOpen(
    # A flush job four times the pipe (`SEND_BYTES`), that the worker starts reading 0.3 s after it is ready to
    # (it says when in the file $READING): the background thread is writing the job into the full pipe as the exit
    # begins.
    "import pickle, time; load = pickle.load; "
    "pickle.load = lambda f: (open(os.environ['READING'], 'w').close(), time.sleep(0.3), load(f))[2]; "
    "from minilsm.worker import main; main()",
    4 * worker.SEND_BYTES // 1000 + 100,
    4 * worker.SEND_BYTES,
    b"v" * 1000,
    "def arrived() -> bool:\n"
    "    deadline = time.monotonic() + 10\n"
    "    while not os.path.exists(os.environ['READING']) and time.monotonic() < deadline:\n"
    "        time.sleep(0.01)\n"
    "    return worker._shared._lock.locked()",
)
_LEFT_OPEN_AT_EXIT: Final = {
    "sending a job": _SENDING,
    # The exit waits less than the job takes: the process ends mid-send, and the worker reads part of a job.
    "sending a job the exit does not wait for": dataclasses.replace(
        _SENDING, setup=_SENDING.setup + "\nworker.EXIT_WAIT = 0.05"
    ),
    # An idle worker that takes 0.5 s to end once its input does, and a flush job that the background thread
    # takes to the worker only once the exit has begun (held where it names the job's scratch directory).
    "between jobs": _LeftOpen(
        "import time; from minilsm.worker import main; main(); time.sleep(0.5)",
        1000,
        64 * 1024,
        b"v" * 100,
        "worker._shared._start()  # idle from the start, as after a job\n"
        "exiting, held, name = threading.Event(), threading.Event(), worker.scratch_name\n"
        "worker.scratch_name = lambda: (held.set(), exiting.wait(), time.sleep(0.2), name())[3]\n"
        "arrived = lambda: held.wait(10)\n"
        "atexit.register(exiting.set)  # after minilsm's import: runs before the worker's own exit handler",
    ),
}


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
@pytest.mark.parametrize("when", list(_LEFT_OPEN_AT_EXIT))
def test_a_worker_ended_at_exit_is_no_failure_of_a_store_left_open(
    db_path: str, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Was: the exit closed the worker's pipes under the background thread of a store never closed, whose job
    then failed on them, and about one exit in three of a 50,000-put load printed "the compaction worker failed
    (...): ValueError('I/O operation on closed file'); compacting in-process instead".  A worker ended on purpose
    has not failed: the exit now takes the worker only from a job's end, and refuses the jobs after it (the
    store does them itself); a job it does not wait for ends with the process, and the worker, which then reads
    part of a job, ends without a traceback.  Nothing is printed (the `ResourceWarning` is hidden by default),
    and the store reopens with every write."""
    case = _LEFT_OPEN_AT_EXIT[when]
    boot = worker._BOOT.replace("from minilsm.worker import main; main()", case.boot)
    script = f"""
import atexit, os, sys, threading, time
sys.path[:0] = {[os.path.dirname(os.path.dirname(os.path.abspath(worker.__file__)))]!r}
import minilsm
from minilsm import worker
worker._shared = worker.Worker({[sys.executable, "-c", boot]!r})
{case.setup}
db = minilsm.DB({db_path!r}, memtable_size={case.memtable_size})
for i in range({case.puts}):
    db.put(b"k%05d" % i, {case.value!r})
assert arrived(), "no flush job reached the worker"
print(worker._shared.pid)
"""  # and it ends without close(), as a script may
    run = subprocess.run(
        [sys.executable, "-W", "ignore::ResourceWarning", "-c", script],
        env=dict(os.environ, READING=f"{db_path}-reading"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    deadline = time.monotonic() + 10  # (a job the exit did not wait for ends with the worker: see `detach`)
    while _running(int(run.stdout)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(int(run.stdout)), "the worker outlived the process that started it"
    reopen_with_a_working_worker(db_path, monkeypatch, {b"k%05d" % i: case.value for i in range(case.puts)})


def test_the_worker_ends_quietly_on_part_of_a_job_only_once_the_store_has_let_go_of_the_pipe() -> None:
    """Part of a job, then the pipe's end: the store's process ended while it sent the job (at exit it waits only
    `EXIT_WAIT` for a job in hand), and the worker ends without a word, as at the end between jobs.  Bytes that
    are no job while the store still holds the pipe are the protocol broken, and raise as they did."""
    mem = MemTable()
    for i in range(1000):
        mem.add(b"k%04d" % i, i + 1, KIND_VALUE, b"v" * 100)
    job = pickle.dumps(worker.FlushJob(scratch="unused", memtable=mem, snapshots=[], block_size=4096, bits_per_key=10))
    for sent, let_go in ((job[: len(job) // 2], True), (b"\xff", False)):
        r, w = os.pipe()
        with os.fdopen(r, "rb") as jobs, os.fdopen(w, "wb") as store:
            store.write(sent)
            store.flush()
            if let_go:
                store.close()
                worker.serve(jobs, io.BytesIO())
            else:
                with pytest.raises(pickle.UnpicklingError):
                    worker.serve(jobs, io.BytesIO())


def test_close_does_not_wait_for_a_merge_in_a_worker_that_hangs(
    db_path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: close() joined the background thread, which waited for the worker's reply, so a worker stopped
    (SIGSTOP) or stuck in a job held close() for as long; a compact_range waiting on it likewise, and so did
    another store's close() whose thread waited for the worker to be free.  Closing now abandons the merge: the
    worker is ended, nothing of the merge is installed, and the store reopens as it was."""
    boot = worker._BOOT.replace(
        "from minilsm.worker import main; main()",
        "import time, minilsm.worker as w\n"
        "run = w.run_job\n"
        "w.run_job = lambda job, fs, stats: run(job, fs, stats) if isinstance(job, w.FlushJob) else time.sleep(600)\n"
        "w.main()",
    )
    stuck = worker.Worker([sys.executable, "-c", boot])
    monkeypatch.setattr(worker, "_shared", stuck)
    try:
        with caplog.at_level(logging.WARNING, logger="minilsm"):
            # Writes never wait for the merge (no stop trigger in reach), which the worker never finishes.
            db = DB(db_path, **small_options(background=True, level0_stop_writes_trigger=1000))
            model = load(db, seed=16, n=600)
            manual: list[BaseException] = []

            def compact() -> None:
                try:
                    db.compact_range()
                except BaseException as e:
                    manual.append(e)

            other = threading.Thread(target=compact)
            other.start()
            deadline = time.monotonic() + 20
            while not stuck._lock.locked() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert stuck._lock.locked(), "no merge reached the worker"
            started = time.monotonic()
            db.close()
            other.join(20)
            assert time.monotonic() - started < 10 and not other.is_alive()
            assert len(manual) == 1 and isinstance(manual[0], ClosedError)
        assert "read-only" not in caplog.text  # an abandoned merge is not a failure
        assert stuck.pid is None  # ended with the job it held
    finally:
        stuck.close()
    reopen_with_a_working_worker(db_path, monkeypatch, model)


def test_close_does_not_wait_for_a_flush_in_a_worker_that_hangs(
    db_path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: a flush sent to the worker waited for its reply with no look at the store, so close() hung behind a
    stuck worker.  Abandoned, the frozen memtable stays in its log, and the next open has every write."""
    boot = worker._BOOT.replace(
        "from minilsm.worker import main; main()",
        "import time, minilsm.worker as w\nw.run_flush = lambda job, fs, stats: time.sleep(600)\nw.main()",
    )
    stuck = worker.Worker([sys.executable, "-c", boot])
    monkeypatch.setattr(worker, "_shared", stuck)
    try:
        with caplog.at_level(logging.WARNING, logger="minilsm"):
            db = DB(db_path, **small_options(background=True))
            model: dict[bytes, bytes] = {}
            deadline = time.monotonic() + 20
            i = 0
            while not stuck._lock.locked() and time.monotonic() < deadline:  # until a flush is in the worker
                db.put(b"k%05d" % i, b"v" * 30)
                model[b"k%05d" % i] = b"v" * 30
                i += 1
                time.sleep(0.001)
            assert stuck._lock.locked(), "no flush reached the worker"
            started = time.monotonic()
            db.close()
            assert time.monotonic() - started < 10
        assert "read-only" not in caplog.text and "flush failed" not in caplog.text
        assert stuck.pid is None
    finally:
        stuck.close()
    reopen_with_a_working_worker(db_path, monkeypatch, model)


def test_close_does_not_wait_for_a_flush_job_a_stopped_worker_does_not_read(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: a flush job (the pickled memtable, far more than a pipe holds) was sent with a blocking write, before
    any look at the store, so a worker that had stopped reading (SIGSTOP, or stuck) held the background thread in
    that write, and close() joined it forever.  Now the job is sent a part at a time, looking for a close between."""
    never_reads = worker.Worker([sys.executable, "-c", "import time; time.sleep(600)"])
    monkeypatch.setattr(worker, "_shared", never_reads)
    rng = random.Random(7)
    closer: threading.Thread | None = None
    sends_waited: list[int] = []  # the waits for room in the pipe, in `_send`
    await_room = never_reads._await

    def spy(ready: select.poll, meanwhile: Callable[[], None] | None) -> None:
        if sys._getframe(1).f_code.co_name == "send":
            sends_waited.append(1)
        await_room(ready, meanwhile)

    monkeypatch.setattr(never_reads, "_await", spy)
    try:
        # A memtable of 4 MiB of values no pickle can share: its flush job is four times the pipe (`SEND_BYTES`,
        # the 1 MiB asked of it; 64 KiB if refused).  Was 256 KiB, which a 1 MiB pipe takes whole.
        memtable_size = 4 * worker.SEND_BYTES
        db = DB(db_path, **small_options(background=True, memtable_size=memtable_size, level0_stop_writes_trigger=1000))
        model: dict[bytes, bytes] = {}
        for i in range(memtable_size // 1000 + 100):
            model[b"k%05d" % i] = rng.randbytes(1000)
            db.put(b"k%05d" % i, model[b"k%05d" % i])
        deadline = time.monotonic() + 20
        while not never_reads._lock.locked() and time.monotonic() < deadline:  # the flush job is being sent
            time.sleep(0.01)
        assert never_reads._lock.locked(), "no flush reached the worker"
        time.sleep(0.2)  # the pipe is full now
        closer = threading.Thread(target=db.close, daemon=True)
        started = time.monotonic()
        closer.start()
        closer.join(10)
        assert not closer.is_alive(), "close() waits for a worker that does not read its job"
        assert time.monotonic() - started < 10
        assert never_reads.pid is None  # ended with the job it never read
        assert sends_waited, "the job fitted in the pipe: close() was never asked while it was sent"
    finally:
        proc = never_reads._proc
        if proc is not None:
            proc.kill()  # frees a background thread blocked in the write (the bug), so that the test ends
        if closer is not None:
            closer.join(20)
        never_reads.close()
    reopen_with_a_working_worker(db_path, monkeypatch, model)


def reopen_with_a_working_worker(db_path: str, monkeypatch: pytest.MonkeyPatch, model: dict[bytes, bytes]) -> None:
    """After a stuck worker's job was abandoned: the store, reopened, holds exactly `model`, and no scratch."""
    monkeypatch.setattr(worker, "_shared", worker.Worker())
    try:
        with DB(db_path, **small_options(background=True)) as db:
            assert dict(db.iterator()) == model
            check_invariants(db, sweep_first=True)
    finally:
        worker._shared.close()
    assert scratch_dirs(db_path) == []


def test_only_failures_in_a_row_give_the_worker_up(db_path: str) -> None:
    """`MAX_FAILURES` counts failures in a row: a job that succeeds between them starts the count again, so a
    worker that fails now and then (killed by an out-of-memory killer once a day, say) keeps serving.  (Never
    resetting the count survived every test: the mutation audit's V8.)"""
    dies = [sys.executable, "-c", "import sys; sys.stdin.buffer.read(8); sys.exit(3)"]
    w = worker.Worker(dies)
    scratch = os.path.join(db_path, worker.scratch_name())
    os.makedirs(scratch)
    job = worker.FlushJob(scratch=scratch, memtable=random_memtable(1), snapshots=[], block_size=256, bits_per_key=10)
    try:
        for command in (dies, None, dies):
            w.close()  # the next job starts a process of `command`
            w._command = command
            if command is None:  # the real worker: the job succeeds
                assert [m.number for m in w.run(job, stats=Stats())] == [1]
                os.remove(os.path.join(scratch, "000001.sst"))
                continue
            for _ in range(worker.MAX_FAILURES - 1):
                with pytest.raises(worker.WorkerUnavailableError, match="exited with status 3"):
                    w.run(job, stats=Stats())
            assert not w.given_up
    finally:
        w.close()
