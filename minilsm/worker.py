"""The compaction worker: a helper process that merges tables and writes flushed ones, on a core of its own.

LevelDB compacts in a background thread, which in C runs on a second core
while the application reads and writes.  A Python thread cannot: it shares the
interpreter lock, so every byte a compaction merges is time taken from the
writer and the readers (at 1M keys, leveled compaction rewrites each byte about
five times, and a load spent most of its time merging).  So the store hands a
compaction to another process, as plain data:

* the store (the only one holding the directory's LOCK) describes the job: the
  input tables by number, the live snapshots, the key ranges of the levels
  below (`version.KeyRanges`, to know which tombstones may go) and the sizes;
* the worker opens the inputs read-only, runs the very same merge as an
  in-process compaction (`compaction.compaction_entries`, `write_compaction_tables`), and
  writes the output tables into a scratch directory of the job's own inside the
  store (``compaction-<token>.tmp``);
* the store takes the outputs' numbers, renames them into place, and installs
  them as it would its own.

A flush goes the same way when no merge is due (`FlushJob`): the frozen
memtable travels pickled, unsorted, and the worker sorts it and writes the
table, so the store's process spends about a thirtieth of a flush's time on it.
(While the worker merges, the store flushes in its own thread, beside it.)

Only the lock holder names a table file, so a worker left running by a store
process that died (it ends within about a second of that process, even in the
middle of a job) can write only into its own scratch directory, which the next
open deletes.

One worker serves every store of the process, one job at a time (a second core
is what it is for), started at the first job and ended at exit (`Worker.detach`:
a store left open then does its jobs in its own thread, without a word, as
without a worker; a job in hand is waited for a moment).  Jobs and
results travel as pickles over the worker's stdin and stdout, each result with
what the job counted (blocks read, versions dropped), failed or not.  If the
worker cannot be started or dies, `WorkerUnavailableError` tells the store to run
the job itself, and so does a file operation of the job that fails in the worker's
process (an `OSError`: its own limits, or a full disk, which then fails in the
store's thread too); any other error *of the job* (a corrupt input table)
comes back as the exception the job raised, as if it had run in-process.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import pickle
import re
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Final, NoReturn

from minilsm.compaction import Compaction, compaction_entries, flush_entries, write_compaction_tables, write_tables
from minilsm.fs import FileSystem
from minilsm.memtable import MemTable
from minilsm.sstable.builder import TableBuilder, TableMeta
from minilsm.sstable.reader import TableReader
from minilsm.stats import Stats
from minilsm.version import KeyRanges

_BOOT: Final = (
    "import json, os, sys; sys.path[:] = json.loads(os.environ['MINILSM_WORKER_SYS_PATH']); "
    "from minilsm.worker import main; main()"
)
MEANWHILE_EVERY: Final = 0.02
"""Seconds between a waiting store's looks for work of its own (`Worker.run`'s `meanwhile`)."""
SEND_BYTES: Final = 1 << 20
"""Bytes of a job's pickle written to the worker's pipe at once, and the size asked of the pipe (Linux's
``F_SETPIPE_SZ``; its default is 64 KiB).  Each write lets go of the interpreter lock and must take it back,
which can wait a switch interval (5 ms) for a thread that runs meanwhile: with a writer thread busy, a flush job
of a 4 MiB memtable took 430-460 ms through 64 KiB at a time, against 160-195 ms through 1 MiB."""
EXIT_WAIT: Final = 1.0
"""Seconds that the exit waits for a job in hand to end (`Worker.detach`), and then for the idle worker to end."""
MAX_FAILURES: Final = 3
"""A worker that fails this many jobs in a row (dies, or cannot start) is not tried again in this process; nor is
one whose `sys.executable` is not a Python interpreter (an embedded Python)."""
SCRATCH_PREFIX: Final = "compaction-"
SCRATCH_SUFFIX: Final = ".tmp"
_SCRATCH_TOKEN_BYTES: Final = 8
_SCRATCH_NAME: Final = re.compile(
    f"{re.escape(SCRATCH_PREFIX)}[0-9a-f]{{{2 * _SCRATCH_TOKEN_BYTES}}}{re.escape(SCRATCH_SUFFIX)}"
)


def scratch_name() -> str:
    """A fresh name for a job's scratch directory: unique, so no two jobs (nor a dead process's) share one."""
    return f"{SCRATCH_PREFIX}{secrets.token_hex(_SCRATCH_TOKEN_BYTES)}{SCRATCH_SUFFIX}"


def is_scratch_name(name: str) -> bool:
    """Whether `name` is one `scratch_name` makes, exactly: the open deletes such a directory with what it holds,
    so a user's ``compaction-backup.tmp`` must not match."""
    return _SCRATCH_NAME.fullmatch(name) is not None


def remove_scratch(fs: FileSystem, scratch: str) -> None:
    """Remove a job's scratch directory and what is left in it (never worth failing for)."""
    with contextlib.suppress(OSError):
        fs.remove_dir_and_files(scratch)


def remove_leftover_scratch(fs: FileSystem, dirname: str) -> None:
    """At a store's open: remove the scratch directories a crash left in `dirname` (no job of it runs yet)."""
    for name in fs.listdir(dirname):
        if is_scratch_name(name):
            remove_scratch(fs, f"{dirname}/{name}")


@dataclass(frozen=True)
class CompactionJob:
    """A compaction, described in plain data: what a worker needs to run it without the store."""

    dirname: str
    """The store's directory, where the inputs are."""
    scratch: str
    """The directory (made by the store) that receives the outputs, numbered 1, 2, ... in it."""
    level: int
    output_level: int
    inputs: list[int]
    """Table numbers of level `level`, in the `Compaction`'s order (level 0: newest first)."""
    overlaps: list[int]
    """Table numbers of `output_level` that the inputs overlap, in key order."""
    snapshots: list[int]
    below: KeyRanges
    drops_all_tombstones: bool
    target_file_size: int | None
    block_size: int
    bits_per_key: float


@dataclass(frozen=True)
class FlushJob:
    """A flush, described in plain data: write a frozen memtable as one level-0 table.

    The memtable travels pickled (`MemTable.__getstate__`: its dicts of versions, unsorted; `pickle_job`), which
    costs the store about a thirtieth of what sorting it and building the table in its own process would (3.1 ms
    against 92 ms of CPU for a 4 MiB memtable of 100-byte values; 9.5 ms against 411 ms for one of empty values).
    """

    scratch: str
    memtable: MemTable
    snapshots: list[int]
    block_size: int
    bits_per_key: float


def run_job(job: CompactionJob | FlushJob, fs: FileSystem, stats: Stats) -> list[TableMeta]:
    """Run `job` here: the same merge an in-process compaction (or flush) runs, into the scratch directory.

    Returns the outputs, in key order, each numbered by its file's number inside the scratch directory.
    Counts into `stats` as it goes (blocks read, versions dropped), as the in-process job counts into the
    store's, so that what it counted is there to send back even when it fails.
    """
    if isinstance(job, FlushJob):
        return run_flush(job, fs, stats)
    opened: list[TableReader] = []
    try:
        for n in job.inputs + job.overlaps:
            opened.append(TableReader.open(fs, job.dirname, n, stats))
        k = len(job.inputs)
        c = Compaction(
            job.level, job.output_level, opened[:k], opened[k:], "worker", drops_all_tombstones=job.drops_all_tombstones
        )
        entries = compaction_entries(c, job.below, job.snapshots, stats)
        count = 0

        def new_builder() -> TableBuilder:
            nonlocal count
            count += 1
            return TableBuilder(fs, job.scratch, count, block_size=job.block_size, bits_per_key=job.bits_per_key)

        return write_compaction_tables(c, entries, new_builder, job.target_file_size)
    finally:
        for t in opened:
            t.close()


def run_flush(job: FlushJob, fs: FileSystem, stats: Stats) -> list[TableMeta]:
    """Write the job's memtable as one table into the scratch directory, as the store's own flush does."""
    entries = flush_entries(job.memtable.entries(), job.snapshots, stats)
    return write_tables(
        entries,
        lambda: TableBuilder(fs, job.scratch, 1, block_size=job.block_size, bits_per_key=job.bits_per_key),
        None,
    )


def pickle_job(job: CompactionJob | FlushJob, write: Callable[[bytes], object]) -> None:
    """Pickle `job` as it travels to the worker, handing `write` the pickle a frame (about 64 KiB) at a time.

    O(objects), about 0.07-0.1 us a version of a flush job's memtable.  The pickler is one C call, which holds the
    interpreter lock throughout but for its calls of `write`: Python code, where another thread may take the lock.
    So other threads wait for one frame's pickling at most, not for the whole memtable's.  A 64 MiB memtable of
    100-byte values (508,401 versions) pickled into one buffer in 87-93 ms, and a thread that wanted to run waited
    83-93 ms; a frame at a time, in 65-75 ms, that thread waited 7-10 ms at most (the 5 ms switch interval and its
    own 1 ms sleep included).

    Without the pickler's memo (`pickle.Pickler.fast`).  The memo records every object pickled, so that one met
    again is written as a reference: for a flush job every key, value, version and list of the memtable, and the
    more versions it recorded, the more each cost.  A full 16 MiB memtable of empty values (524,288 versions) took
    390-480 ms with it (0.78-0.92 us a version), 16 MiB of 100-byte values 64-78 ms; without it, 37-40 ms and
    12-13 ms.  A job needs no object shared (one met twice is written twice) and holds no cycle (which fast mode
    refuses with `ValueError` rather than recursing forever).
    """
    # The C pickler flushes each full frame to its file's `write` (`_Pickler_OpcodeBoundary` in _pickle.c).
    pickler = pickle.Pickler(types.SimpleNamespace(write=write), protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True  # "deprecated" in the documentation since Python 2, and kept since, without a warning
    pickler.dump(job)


class WorkerUnavailableError(Exception):
    """The worker process could not be started, or died, or broke the protocol, or a file operation of the job
    failed in its process: run the job in-process.

    `said` is True once the worker has given up and said so: the store then need not say it again per job.
    """

    def __init__(self, message: str, *, said: bool = False) -> None:
        super().__init__(message)
        self.said = said


class Worker:
    """The client side: starts the worker process (`main`) when first needed and runs jobs in it, one at a time.

    Thread-safe (a lock serializes jobs).  `run` blocks in a pipe read while the
    job runs, which releases the interpreter lock for the rest of the process.
    """

    def __init__(self, command: list[str] | None = None) -> None:
        self._command = command
        """What to run instead of this module's `main` (tests start a worker that misbehaves)."""
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._failures = 0
        """Failures in a row; at `MAX_FAILURES` the stores stop asking (each failed try costs a process start)."""
        self._detached = False
        """Set at exit (`detach`): no job is taken from then on, and no worker started."""

    def run(
        self,
        job: CompactionJob | FlushJob,
        meanwhile: Callable[[], None] | None = None,
        *,
        stats: Stats,
        wait: bool = True,
    ) -> list[TableMeta]:
        """The job's outputs (see `run_job`); raises the job's own exception, or `WorkerUnavailableError`.

        What the job counted in the worker (blocks and bytes read, versions
        dropped) is added to `stats` once its reply comes, whether it succeeded
        or failed: its reads happened either way, as a failed job in the
        store's thread counts the reads it made (LevelDB adds a failed
        compaction's statistics too).  A job the store then runs again itself
        (after an `OSError` there, or a flush that failed there) thus counts
        twice, as it ran twice.  A job abandoned, or lost with a worker that
        died, sends nothing back.

        While the job runs, `meanwhile()` is called every `MEANWHILE_EVERY`
        seconds (the store flushes a memtable that filled meanwhile, as LevelDB
        does in the middle of a long compaction).  If it raises, the job is
        abandoned (the worker killed) and its exception propagates.  It is
        also called while another thread's job (another store's) keeps the
        worker busy.  Without `wait`, a busy worker raises
        `WorkerUnavailableError` (``said=True``: nothing to report) at once.
        """
        # Each acquire's answer lands in `taken` from C, before a signal handler can run: a KeyboardInterrupt
        # just after the lock was taken must not leave it held for good (every later job, any store's, would
        # wait for it).  CPython runs handlers between bytecodes; `map` calls the acquire with none in between.
        taken: list[bool] = []
        try:
            if not wait:
                taken.extend(map(self._lock.acquire, (False,)))
                if not taken[-1]:
                    raise WorkerUnavailableError("the compaction worker is busy", said=True)
            elif meanwhile is None:
                taken.extend(map(self._lock.acquire, (True,)))
            else:
                taken.extend(map(self._lock.acquire, (True,), (MEANWHILE_EVERY,)))
                while not taken[-1]:  # another thread's job in hand
                    meanwhile()
                    taken.extend(map(self._lock.acquire, (True,), (MEANWHILE_EVERY,)))
            # Asked with the lock held: `detach` sets `_detached` before it waits for the lock, so a job that
            # takes the lock after that is refused here, not sent down the pipes `detach` closes (nor to a
            # worker started for an exiting process).  Not a failure: nothing to say, nothing counted.
            if self.given_up:
                raise WorkerUnavailableError("the compaction worker is given up", said=True)
            try:
                proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
                stdin, stdout = proc.stdin, proc.stdout
                assert stdin is not None and stdout is not None
            except BaseException as e:
                self._broken(e)
            try:
                self._send(stdin, job, meanwhile)
                if meanwhile is not None:
                    # The reply is one pickle written at once, so the pipe turns readable only when it comes (or
                    # when the worker dies).  poll, not select: select fails for a descriptor numbered 1024 or above.
                    try:
                        waiting = select.poll()
                        waiting.register(stdout, select.POLLIN)
                    except BaseException as e:
                        self._broken(e)
                    self._await(waiting, meanwhile)
                try:
                    ok, payload, counted = pickle.load(stdout)
                except BaseException as e:
                    self._broken(e)
            except BaseException:
                # An interrupt between the steps above: the worker, not ended, holds the job (or part of it, or its
                # reply), which the next job would otherwise read as its own.
                if self._proc is proc:
                    self._end(kill=True)
                raise
            self._failures = 0
        finally:
            if taken and taken[-1]:
                self._lock.release()
        stats.add(counted)
        if ok:
            assert isinstance(payload, list)
            return payload
        assert isinstance(payload, BaseException)
        if isinstance(payload, OSError):
            # A file operation failed in the worker's process, whose own limits (open files, file size) the
            # store's process need not share: the store runs the job itself, which either succeeds or fails
            # with the store's own report (a full disk fails there too).  Not the worker's failure: it serves on.
            # Its text, not its repr: an OSError's repr leaves out the file it names (a table made unreadable).
            raise WorkerUnavailableError(
                f"a job failed in the compaction worker's process: {type(payload).__name__}: {payload}"
            ) from payload
        raise payload

    def _send(self, stdin: IO[bytes], job: CompactionJob | FlushJob, meanwhile: Callable[[], None] | None) -> None:
        """Pickle `job` into the worker's pipe as it is made (`pickle_job`), calling `meanwhile()` every
        `MEANWHILE_EVERY` seconds that the pipe stays full.

        A flush job carries a memtable, megabytes where the pipe holds 1 MiB (`SEND_BYTES`; 64 KiB if the system
        refuses that): a blocking write would wait for as long as the worker does not read (stopped by SIGSTOP, or
        stuck), and hold up close() with it.  So the pipe is written without blocking, `SEND_BYTES` at a time, and
        the worker unpickles the frames as they come.  If `meanwhile` raises, the job is abandoned (the worker,
        which holds part of it, is killed) and its exception propagates, as while waiting for the reply; so does a
        failure of the pipe or of the pickler, as `_broken` reports it.
        """
        try:
            fd = stdin.fileno()
            os.set_blocking(fd, False)  # only ever written here, through the descriptor (the buffer stays empty)
            ready = select.poll()
            ready.register(fd, select.POLLOUT)
        except BaseException as e:
            self._broken(e)
        frames: list[bytes] = []
        held = 0

        def send() -> None:
            view = memoryview(b"".join(frames))
            frames.clear()
            while view:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    self._await(ready, meanwhile)
                except BaseException as e:
                    self._broken(e)

        def write(frame: bytes) -> None:
            nonlocal held
            frames.append(frame)
            held += len(frame)
            if held >= SEND_BYTES:
                held = 0
                send()

        try:
            pickle_job(job, write)
            send()
        except BaseException as e:
            if self._proc is None:
                raise  # the worker is ended already: by `_broken`, or by `_await` when `meanwhile` raised
            self._broken(e)  # the pickler's own, or an interrupt between writes: the worker holds part of a job

    def _await(self, ready: select.poll, meanwhile: Callable[[], None] | None) -> None:
        """Wait until `ready` reports its pipe ready, calling `meanwhile()` every `MEANWHILE_EVERY` seconds.

        If `meanwhile` raises, the job is abandoned: the worker, which holds part of it, is killed (not its
        failure: no count), and the exception propagates.  Without `meanwhile`, wait as long as it takes.
        """
        while True:
            try:
                if ready.poll(None if meanwhile is None else MEANWHILE_EVERY * 1000):
                    return
            except BaseException as e:
                self._broken(e)
            if meanwhile is not None:
                try:
                    meanwhile()
                except BaseException:
                    self._end(kill=True)
                    raise

    def _broken(self, e: BaseException) -> NoReturn:
        """Dead, or out of step with us (an interrupt mid-reply): never reuse it, nor wait for it."""
        proc, how = self._proc, ""
        if proc is not None:  # before the kill: how it ended, if it has (its pipe may close a moment before)
            with contextlib.suppress(subprocess.TimeoutExpired):
                how = f" (its process {proc.pid} {_exit_status(proc.wait(timeout=0.05))})"
        self._end(kill=True)
        if isinstance(e, Exception):
            self._failures += 1
            last = "; it is not tried again in this process" if self._failures >= MAX_FAILURES else ""
            raise WorkerUnavailableError(f"the compaction worker failed{how}: {e!r}{last}") from e
        raise e

    def _start(self) -> subprocess.Popen[bytes]:
        self._end(kill=True)
        exe = sys.executable
        if not exe or not os.path.basename(exe).lower().startswith(("python", "pypy")):
            # Embedded (a server or an application that hosts Python): its executable is not an interpreter,
            # and running it with -c could start the host program again.
            self._failures = MAX_FAILURES - 1
            raise OSError(f"sys.executable is {exe!r}, not a Python interpreter to run a compaction worker")
        # The worker must import this very package, wherever this process found it (a checkout, say): it gets
        # our import path, made absolute (`""` is the current directory, which may have changed since the
        # import), with this package's directory in front if it is not on it.  Not `-m minilsm.worker`: the
        # classes that travel must be this module's, not __main__'s.
        path = [os.path.abspath(p) for p in sys.path]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if root not in path:
            path.insert(0, root)
        env = dict(os.environ, MINILSM_WORKER_SYS_PATH=json.dumps(path), MINILSM_WORKER_PARENT=str(os.getpid()))
        command = self._command or [exe, "-c", _BOOT]
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self._proc.stdin is not None
        with contextlib.suppress(AttributeError, OSError):  # not Linux, or past /proc/sys/fs/pipe-max-size
            fcntl.fcntl(self._proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, SEND_BYTES)
        return self._proc

    def _end(self, kill: bool, wait: float = 10) -> None:
        """Close the pipes; the worker then exits after the job in hand, or at once when killed (or when it has
        not within `wait` seconds)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if kill:
            proc.kill()
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        try:
            proc.wait(timeout=None if kill else wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """End the worker once the job in hand (another thread's) is done."""
        with self._lock:
            self._end(kill=False)

    def detach(self) -> None:
        """At exit: take no more jobs, and end the worker once the job in hand, if any, is done.

        A store left open (`close()` never called) keeps its background thread, a daemon, running while the exit
        handlers do, and it may be sending a job, waiting for the reply, or about to start one.  The pipes are
        that job's until it lets go of the lock, so they are closed only by the holder of the lock: were they
        closed under it, the job would fail on a closed pipe and be reported as the worker's failure, though the
        worker was ended on purpose.  So later jobs are refused (`WorkerUnavailableError`, ``said=True``: the
        store does them in its own thread, as without a worker, without a word), and the job in hand is waited
        for up to `EXIT_WAIT` seconds.  One not done by then is left to the worker, which ends with this process
        (its input ends, and it watches for it: `_end_when_orphaned`); its scratch directory goes at the store's
        next open, and its store reopens with every acknowledged write, all of which are in the log.
        """
        self._detached = True
        if not self._lock.acquire(timeout=EXIT_WAIT):
            return
        try:
            self._end(kill=False, wait=EXIT_WAIT)  # an idle worker ends as its input does
        finally:
            self._lock.release()

    @property
    def descriptors(self) -> set[int]:
        """The file descriptors of the pipes to the worker: the process's, not any store's (for leak checks)."""
        proc = self._proc
        if proc is None:
            return set()
        return {f.fileno() for f in (proc.stdin, proc.stdout) if f is not None and not f.closed}

    @property
    def given_up(self) -> bool:
        """True once this process starts no more workers: after `MAX_FAILURES` failures in a row, or at exit
        (`detach`)."""
        return self._failures >= MAX_FAILURES or self._detached

    @property
    def pid(self) -> int | None:
        """The worker's process id while one runs (for tests and `minilsm stats`)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None


_shared: Worker | None = None
_shared_lock = threading.Lock()


def shared_worker() -> Worker:
    """The process's one worker (a process forked after it started gets its own)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Worker()
        return _shared


def _forget_after_fork() -> None:
    # A forked child shares the parent's pipes to the worker: using them would interleave two clients' jobs.
    global _shared, _shared_lock
    _shared = None
    _shared_lock = threading.Lock()


def _detach_at_exit() -> None:
    if _shared is not None:
        _shared.detach()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_detach_at_exit)


# -- the worker process itself ------------------------------------------------------------


def serve(jobs: IO[bytes], results: IO[bytes]) -> None:
    """Run jobs from `jobs` until it ends, pickling to `results` for each ``(True, outputs, counts)``, or
    ``(False, the job's exception, counts)``: what it counted goes back whether it succeeded or not."""
    fs = FileSystem()
    while True:
        try:
            data = _answer(pickle.load(jobs), fs)
        except EOFError:
            return
        except pickle.UnpicklingError:
            if _ended(jobs):
                # The pickle stopped short because the store's process ended (or died) while it sent the job:
                # at exit it does not wait long for a job in hand (`Worker.detach`).  Nobody waits for this one.
                return
            raise
        try:
            results.write(data)
            results.flush()
        except BrokenPipeError:
            # The store's process ended while the job ran (a crash): nobody is waiting for the result.
            with contextlib.suppress(OSError):
                results.close()
            return


def _ended(jobs: IO[bytes]) -> bool:
    """Whether the writing end of the pipe `jobs` is closed (the store's process ended), asked without waiting."""
    try:
        ready = select.poll()
        ready.register(jobs, select.POLLIN)
        return any(events & select.POLLHUP for _, events in ready.poll(0))
    except (OSError, ValueError):  # not a pipe (a test's bytes), or closed
        return False


def _answer(job: CompactionJob | FlushJob, fs: FileSystem) -> bytes:
    """Run `job` and pickle its reply.  A function of its own so that the job, and a flush job's memtable with
    it, is freed when it returns, not held while the worker waits for the next job: a 64 MiB memtable kept the
    idle worker at 209 MiB resident."""
    stats = Stats()
    try:
        reply: tuple[bool, object, Stats] = (True, run_job(job, fs, stats), stats)
    except Exception as e:
        reply = (False, e.with_traceback(None), stats)  # its traceback would hold this frame, and the job
    try:
        return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an exception that does not pickle: send its text
        return pickle.dumps((False, RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}"), stats))


_ORPHAN_CHECK_SECONDS: Final = 1.0


def _exit_status(returncode: int) -> str:
    """How a process ended, from its `Popen.returncode`: "was killed by SIGKILL", "exited with status 1"."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _end_when_orphaned(parent: int) -> None:
    """End this process once the one that started it has ended (it is then re-parented), even in the middle of a job.

    The closed pipe tells the worker too, but only when it next reads or writes
    it: a store process killed during a large compaction left its worker merging
    for nobody until the job was done.  This also covers any other holder of a
    copy of the pipe (a forked child drops its copy: see `_forget_after_fork`).
    """
    while os.getppid() == parent:
        time.sleep(_ORPHAN_CHECK_SECONDS)
    os._exit(0)  # a job in hand is abandoned: its scratch directory goes at the store's next open


def main() -> None:
    # A Ctrl-C at the terminal reaches the whole process group; the store decides what an interrupt means.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The store's pid, not getppid(): a store that ended before this line ran would pass unseen.
    parent = int(os.environ.get("MINILSM_WORKER_PARENT", os.getppid()))
    threading.Thread(target=_end_when_orphaned, args=(parent,), name="minilsm-orphan-watch", daemon=True).start()
    # The results travel on the real stdout; anything printed goes to stderr instead of into the pipe.
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, results)
