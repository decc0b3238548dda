"""`DB`: the store a Python application opens.  Read this file top to bottom to see an LSM tree work.

Write path (`put`, `delete`, `write`):
  validate -> make room (maybe freeze the memtable and start a new log) ->
  one checksummed log record per write or batch -> apply to the memtable ->
  publish the new sequence number, so readers see the whole batch or none of it.

Read path (`get`):
  memtable -> frozen memtable -> `Version.get`: level-0 tables newest first,
  then one table per deeper level; each table checks its key range, then its
  Bloom filter (with the key hashed once for all tables), then reads one block.

Background work (one thread, or inline with ``background=False``):
  flush the frozen memtable to a level-0 table (with the compaction worker, a
  merge that is due starts first and the thread flushes beside it), then
  compact while some level is over its limit, a table is mostly tombstones
  (`compaction.tombstone_compaction`), or a table is probed in vain
  too often (seek compaction: reads only count, and the idle background
  thread looks every `SEEK_CHECK_INTERVAL` seconds; inline, it waits for the
  next write's background work; either way, at most a quarter of the time:
  `SEEK_PACE`).
  Each ends by appending an edit to the manifest (fsynced); files that no live
  `Version` needs are deleted afterwards.

Locking: `_mutex` serializes writers and guards the state that changes
(memtables, version, manifest fields).  Point reads take no lock: they read
the last sequence number, then `_mem`, `_imm` and `_version` in that order, and
the background thread installs a new version *before* it drops the frozen
memtable, so a reader always finds each write in at least one of the places it
looks.  A flush or compaction keeps only the newest version of a key (and those
snapshots see), so a version installed after the reader took its sequence
number may lack the one that number sees: such a read starts again with a newer
number (`Version.installed_at` tells).  A snapshot's reads need no such check while it is held; one that
races the snapshot's release raises `ClosedError` (`Snapshot._check_still_held`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import sys
import threading
import time
import warnings
import weakref
from bisect import bisect_left
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from types import TracebackType
from typing import Any, Final, Generic, Literal, NoReturn, Self, SupportsIndex, TypedDict, TypeVar, Unpack, overload

from minilsm import compaction, report, worker
from minilsm.batch import SEQUENCE_ROOM_CHECKED_FROM, LogChain, WriteBatch, encode_batch, sequences_left
from minilsm.bloom import key_hash
from minilsm.cache import ClockCache, TableFileCache
from minilsm.checkpoint import write_checkpoint
from minilsm.errors import (
    ClosedError,
    CorruptionError,
    Error,
    ExistsError,
    IteratorInvalidError,
    LockError,
    NotFoundError,
    ReadOnlyError,
    StoreIOError,
)
from minilsm.fs import NO_WRITE_ACCESS, FileLock, FileSystem, LockedInThisProcessError
from minilsm.iterators import Entry, ScanHandle, concat, merge_visible, prefix_bounds, restate_closed
from minilsm.keys import KIND_DELETE, KIND_VALUE, MAX_KEY_SIZE, MAX_VALUE_SIZE, BytesLike, check_key, check_value
from minilsm.manifest import (
    LOCK_NAME,
    MANIFEST_NAME,
    ManifestRead,
    ManifestState,
    ManifestWriter,
    read_manifest,
    refuse_foreign_store,
    write_manifest,
)
from minilsm.memtable import MemTable
from minilsm.options import Options
from minilsm.report import ReadTrace
from minilsm.sstable.builder import TableBuilder, TableMeta
from minilsm.sstable.format import TEMP_SUFFIX, parse_table_file_name, table_file_name, table_path
from minilsm.sstable.reader import BlockCache, TableReader
from minilsm.stats import DBStats, Stats, TableInfo
from minilsm.version import Trace, Version
from minilsm.wal import LogWriter, log_file_name, parse_log_file_name, read_log_file

SEEK_CHECK_INTERVAL: Final = 0.5
"""Seconds between the idle background thread's looks for a seek compaction (reads never wake it: they take
no lock)."""
FREEING_WAIT: Final = 0.1
"""Seconds that an open refused by a lock of this process, with no store of this process open on the path, asks
again (`lock_store`): a store being freed leaves the open stores as its weak references go, before its lock goes
with its attributes, and its table files closing between the two let other threads run."""
DROPPED_STORE_WAIT: Final = 60.0
"""Seconds at most that an open refused by a store of this process waits for that store's background job to
end, in case the store was dropped without `close()` and only the job keeps it (`lock_store`).  A job is one flush
or one compaction (some megabytes); past this, the open is refused, as it would be by a store in use."""
SEEK_PACE: Final = 3.0
"""After a seek compaction that took d seconds, the next may start only SEEK_PACE * d seconds later, so that work
reads set off takes at most a quarter of the time.  In the background thread, compaction shares the interpreter
lock with the reads: at 10M keys, unpaced seek compactions ran back to back for over a minute after a reopen while
reads went at a tenth of their rate (bench/RESULTS.md, "Seek compaction at 10M keys").  The compaction worker
takes that off the reads (0.99 of their rate at 1M, "The compaction worker"); the pace still bounds what reads
cost a machine with one core.  Size-triggered compactions are never held back."""
FLUSH_CHECK_ENTRIES: Final = 4096
"""Versions a merge in the background thread writes between its looks for a frozen memtable to flush: about
12 ms of merging (3.0 us a version: a `compact_range` of 400,000 versions in the thread), against the 0.2 s or
more that writers take to fill a 4 MiB memtable."""
_log = logging.getLogger("minilsm")

_NO_WRITE_HINT: Final = (
    " (an open reads every file of the store and writes its LOCK, a new log and manifest: it needs read and write"
    " access to the directory and its files, as LevelDB's does; `minilsm check` and `minilsm manifest` read a store"
    " they cannot write)"
)

_MISSING: Any = object()

_T = TypeVar("_T")

_NO_GIL_WARNING = (
    "minilsm is untested with the interpreter lock off (a free-threaded build): its lock-free reads rely on it "
    "(docs/ARCHITECTURE.md, 'Threads'); run with PYTHON_GIL=1"
)
_Item = TypeVar("_Item")  # what a DBIterator yields: (key, value), or a key or a value


def store_path(path: str | os.PathLike[str]) -> str:
    """The absolute name of the store directory `path` (str, bytes or path-like) names, as `DB` and the offline tools
    (`check_store`, `repair_store`, `destroy_store`) take it.  O(len(path)).

    An empty path is a ValueError: ``abspath("")`` is the working directory, which would silently become a store,
    or be checked, repaired or destroyed as one (an unset setting, say; LevelDB answers NotFound).
    """
    name = os.fsdecode(path)
    if not name:
        raise ValueError("the store's path is empty; name a directory (os.curdir for the working directory)")
    return os.path.abspath(name)


def lock_holder(refused: BlockingIOError) -> str:
    """Where the store is open whose LOCK `FileSystem.lock` refused, as a `LockError` says it after "is open"."""
    if isinstance(refused, LockedInThisProcessError):
        return "in this process"
    return f"(its {LOCK_NAME} is held by another process)"


def lock_store(fs: FileSystem, path: str) -> FileLock:
    """Take the LOCK of the store at `path` (absolute, as `store_path` gives it) for `DB` or an offline tool, or
    raise `BlockingIOError` as `FileSystem.lock` does (`lock_holder` says where the store is open).

    Held by a store of this process whose background thread is running a job, it may be a store dropped
    without `close()` that only the thread keeps open (`_background_loop`): wait for the job to end, then ask
    again, as a plyvel reopen (or `destroy_db`) after a drop follows LevelDB's destructor, which waits for the
    compaction under way.  A store still in use then refuses it, a job later.  Held with no store open there, it
    may be a store being freed, which has left the open stores but not yet let go of its lock: ask again for
    `FREEING_WAIT` seconds.  Before it refuses, it runs the cycle collector once: a dropped store that a reference
    cycle holds (a background failure's traceback holds the store's frames) is garbage that only it frees.  O(1),
    or O(stores open) and the job's time, and a collection when refused.
    """
    name = f"{path}/{LOCK_NAME}"
    waited = collected = False
    gone_at = 0.0
    while True:
        try:
            return fs.lock(name)
        except LockedInThisProcessError:
            again = _wait_for_a_dropped_store(path, may_wait=not waited)
            if again is None:
                gone_at = gone_at or time.monotonic()
                again = time.monotonic() - gone_at < FREEING_WAIT
                if again:
                    time.sleep(0.001)
            else:
                waited = waited or again
            if not again and not collected:
                collected = again = True
                gc.collect()
            if not again:
                raise


@dataclass(frozen=True)
class RecoveryReport:
    """What `DB` found when it opened: logs replayed and any torn tail dropped."""

    logs_replayed: int = 0
    records_replayed: int = 0
    dropped_bytes: int = 0
    """Bytes of torn records dropped from log tails (a crash in the middle of an append); with `corruption`,
    also everything from the damage on, newer logs included."""
    corruption: str | None = None
    """With paranoid_checks=False: the damage where recovery stopped, if any."""
    manifest_edits: int = 0
    """Edits the manifest held after its snapshot (each a flush or compaction since the file began)."""
    manifest_dropped_bytes: int = 0
    """A torn last edit dropped from the manifest (a crash in the middle of its append)."""


class _ReadOptions(TypedDict, total=False):
    """plyvel's read options, which `get` and `iterator` take as keywords (for their overloads)."""

    verify_checksums: bool
    fill_cache: bool


class _ScanOptions(_ReadOptions, total=False):
    """`iterator`'s keywords other than the two that decide what it yields (for its overloads)."""

    prefix: BytesLike | None
    reverse: bool
    include_start: bool
    include_stop: bool


class _Scans:
    """The reads `DB`, `Snapshot` and the prefixed views share: `iterator`, iteration over keys, ``[]`` and ``in``.

    Each makes its iterators in `_new_iterator` and answers `get`.

    The overloads tell a type checker what the iterator yields: (key, value) pairs, or keys or values alone.
    """

    # One line an overload (fmt: off), as in typeshed's stubs: they differ only in the two flags and what is yielded.
    # fmt: off
    @overload
    def iterator(self, start: BytesLike | None = ..., stop: BytesLike | None = ..., *, include_key: Literal[True] = ...,
                 include_value: Literal[True] = ..., **kw: Unpack[_ScanOptions]) -> DBIterator[tuple[bytes, bytes]]: ...
    @overload
    def iterator(self, start: BytesLike | None = ..., stop: BytesLike | None = ..., *, include_key: Literal[True] = ...,
                 include_value: Literal[False], **kw: Unpack[_ScanOptions]) -> DBIterator[bytes]: ...
    @overload
    def iterator(self, start: BytesLike | None = ..., stop: BytesLike | None = ..., *, include_key: Literal[False],
                 include_value: Literal[True] = ..., **kw: Unpack[_ScanOptions]) -> DBIterator[bytes]: ...
    @overload
    def iterator(self, start: BytesLike | None = ..., stop: BytesLike | None = ..., *, include_key: bool = ...,
                 include_value: bool = ..., **kw: Unpack[_ScanOptions]) -> DBIterator[Any]: ...
    # fmt: on
    def iterator(
        self,
        start: BytesLike | None = None,
        stop: BytesLike | None = None,
        *,
        prefix: BytesLike | None = None,
        reverse: bool = False,
        include_key: bool = True,
        include_value: bool = True,
        include_start: bool = True,
        include_stop: bool = False,
        verify_checksums: bool = False,
        fill_cache: bool = True,
    ) -> DBIterator[Any]:
        """Iterate over keys in [start, stop) (or those beginning with `prefix`) in order.

        `include_start=False` leaves `start` itself out and `include_stop=True` takes
        `stop` in, as plyvel's keywords do; with `prefix` too, the range is the
        intersection.  The view is fixed when the iterator is made: later writes,
        flushes and compactions do not change what it yields.  Yields (key, value)
        pairs, or keys or values alone, as plyvel does.  Once the store closes, the
        iterator's next step raises `ClosedError`.  O(log sources) per version
        visited.

        plyvel's read options are taken and change nothing: every block read from a
        file is checked against its checksum, and a scan uses the blocks in the
        block cache but never adds the ones it reads (LevelDB's ``fill_cache=False``,
        which its documentation advises for bulk scans), whatever `fill_cache` says.
        """
        _check_read_options(verify_checksums, fill_cache)
        return self._new_iterator(start, stop, prefix, reverse, include_key, include_value, include_start, include_stop)

    # The iterator `iterator` returns, given its arguments in the order `iterator` passes them.
    _new_iterator: Callable[..., DBIterator[Any]]

    def raw_iterator(self, *, verify_checksums: bool = False, fill_cache: bool = True) -> RawIterator:
        """plyvel's raw iterator over every key: it stands on an item (`valid`, `key`, `value`, `item`) and moves
        with `next`, `prev`, `seek`, `seek_to_first` and `seek_to_last`; not valid until placed.  See
        `RawIterator` for what its moves cost; the read options as `iterator`'s.  Made in O(sources), no block
        read: a merge of the view is set up, which the first seek replaces."""
        return RawIterator(self.iterator(verify_checksums=verify_checksums, fill_cache=fill_cache))

    def __iter__(self) -> Iterator[bytes]:
        """The keys in order, as a dict's iteration gives them (plyvel's gives (key, value) pairs: `iterator()`).
        Costs what `iterator` does: O(log sources) per version visited."""
        return iter(self.iterator(include_value=False))

    # The one read every class of these has, as each overloads it.
    get: Callable[..., Any]

    def __getitem__(self, key: BytesLike) -> bytes:
        """The value of `key`; KeyError when it is absent or deleted.  A `get`, at its cost."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        """Whether `key` has a value.  A `get`, at its cost: a block read when a filter says maybe."""
        return self.get(key, _MISSING) is not _MISSING


class _Writes:
    """Dict-like writes, for `DB` and `PrefixedDB`: ``view[key] = value`` and ``del view[key]``."""

    get: Callable[..., Any]
    put: Callable[..., None]
    delete: Callable[..., None]
    _deletes_lock: Callable[[], threading.Lock]
    """The lock each ``del view[key]`` holds from its check to its delete: the store's, for its views too."""

    def __setitem__(self, key: BytesLike, value: BytesLike) -> None:
        """`put`, at its cost."""
        self.put(key, value)

    def __delitem__(self, key: BytesLike) -> None:
        """Delete `key`; KeyError when it is absent (dict semantics; `delete` never raises).  Costs a `get` and a
        `delete`."""
        # Two of these on one key in two threads must not both succeed, which no order of them gives (a dict's
        # `del` is one step): the lock keeps another from deleting between this check and this delete.  Any other
        # write landing there still gives an outcome of some order: it came first, and this deletes its value.
        with self._deletes_lock():
            if self.get(key, _MISSING) is _MISSING:
                raise KeyError(key)
            self.delete(key)


class DB(_Writes, _Scans):
    """An embedded, durable, ordered key-value store over one directory.

    >>> import tempfile, minilsm
    >>> with minilsm.DB(tempfile.mkdtemp()) as db:
    ...     db.put(b"k", b"v")
    ...     db.get(b"k")
    b'v'

    Options come as an `Options` object, keyword arguments, or both (keywords win).
    Keys and values are `bytes` (`bytearray` and `memoryview` are taken too, and
    come back as `bytes`); the empty key is valid.  A `DB` is safe to share
    between threads.  Only one `DB` may have a directory open at a time, across
    processes too (`LockError`).  In a child process forked while the store was
    open, the store is closed (`ClosedError`): it stays the parent's.
    """

    # -- opening and closing -------------------------------------------------------

    def __init__(self, path: str | os.PathLike[str], options: Options | None = None, **kwargs: Any) -> None:
        """Open the store in the directory `path`, creating it unless ``create_if_missing=False``.

        Cost: the manifest read, and each live table opened with its index, filter and properties read (no
        data block), O(tables); the logs the manifest does not cover replayed, O(their bytes), and what they
        held written as a level-0 table, as `flush` writes one; then a manifest write.
        """
        self.options = Options.make(options, **kwargs)
        # Absolute, as SQLite keeps its database's name: a relative path would follow the process's os.chdir()
        # and put the next log or table in another directory.  A bytes path too; file names are built as str.
        self.path = store_path(path)
        gil_enabled = getattr(sys, "_is_gil_enabled", None)  # 3.13+; every earlier CPython has the lock
        if gil_enabled is not None and not gil_enabled():
            warnings.warn(_NO_GIL_WARNING, RuntimeWarning, stacklevel=2)
        self._fs = self.options.fs
        self._stats = Stats()
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._item_deletes = threading.Lock()
        self._closed = True
        self._closing = False
        self._close_running = False  # a close() is under way (`_closing` stays set if an interrupt stops it)
        self._forked_from: int | None = None  # in a forked child: the pid of the process that opened the store
        self._bg_error: BaseException | None = None
        # Set as the background thread ends: what close() waits for.  Not `Thread.join`, which in CPython 3.11 and
        # 3.12 marks the thread stopped when an interrupt stops the join, so the next close() would not wait for it.
        self._bg_done: threading.Event | None = None
        self._bg_thread: threading.Thread | None = None
        self._bg_hold: _BackgroundHold | None = None
        self._compacting = False
        self._seek_resume_at = 0.0
        """`time.monotonic()` before which no seek compaction starts (`SEEK_PACE`)."""
        self._snapshots: dict[int, int] = {}  # snapshot id -> its sequence number
        self._snapshot_ids = 0
        self._range_compacted: tuple[set[int], set[int]] = (set(), set())
        """The tables that `compact_range` left holding nothing more to drop (tiered: the run the last call that
        merged wrote; leveled: the bottom-level tables that calls wrote, while their snapshots lived), and the
        snapshots (sequence numbers) live when their merges began (see `_still_fresh`)."""
        self._versions: weakref.WeakSet[Version] = weakref.WeakSet()  # every Version someone still holds
        # Every live iterator's pin, for close() to cancel.  A set of weak references, not a WeakSet: adding
        # to it and copying it are single C calls, safe from any thread without a lock.
        self._pins: set[weakref.ref[_Pin]] = set()
        self._pending_outputs: set[int] = set()  # table numbers being written, not yet in a version
        # A block enters the cache at its second read while remembered among the last refused: about twice as
        # many as the cache holds blocks.  See ClockCache; bench/RESULTS.md ("Point reads") measures it.
        cache_size = self.options.block_cache_size
        self._block_cache: BlockCache | None = (
            ClockCache(cache_size, admit_window=max(64, 2 * cache_size // self.options.block_size))
            if cache_size
            else None
        )
        self._file_cache = TableFileCache(self._fs, self.options.max_open_files, mapped=self.options.mmap_reads)
        self._imm: MemTable | None = None
        self._imm_log_number = 0  # the log holding the frozen memtable's writes
        self._level0_full = False
        """The open left level 0 at `level0_stop_writes_trigger` tables or more: writes take the slow path
        (`_make_room`) and wait for compaction to bring it under, whatever room the memtable has."""
        self._work_due = False
        """Inline mode: the open left flushes or compactions due, which the next write runs (background mode's
        thread starts them at once, as LevelDB does).  A store opened only to read is left as it was."""
        self._open()

    def _open(self) -> None:
        fs, path = self._fs, self.path
        try:
            if fs.exists(path) and not fs.is_dir(path):
                raise NotFoundError(f"{path} exists and is not a directory")
            if not self._store_exists():
                # The lock file needs the directory, and the writes the store acknowledges need its name durable.
                try:
                    fs.makedirs_synced(path)
                except NotADirectoryError:
                    # No store can be made there, as on a file itself (above): said so, naming the file.
                    above = os.path.dirname(path)
                    while not fs.exists(above) and above != os.path.dirname(above):
                        above = os.path.dirname(above)
                    raise NotFoundError(f"{path}: no store can be made there, {above} is not a directory") from None
            self._file_lock = self._lock()
            try:
                # Asked again under the lock: another process may have created the store meanwhile.
                self._recover(self._store_exists())
            except BaseException:
                # Nothing of a failed open may linger: not the lock, not the new log's or manifest's descriptor.
                for file in (getattr(self, "_log", None), getattr(self, "_manifest", None)):
                    try:
                        if file is not None:
                            file.close()
                    except OSError:
                        pass  # the open's own failure is the one to report
                self._file_cache.clear()
                self._file_lock.release()
                raise
        except OSError as e:
            # Every file operation of an open (and of the recovery it runs) reports as a minilsm error.
            hint = _NO_WRITE_HINT if e.errno in NO_WRITE_ACCESS else ""
            raise StoreIOError(f"{path}: opening the store failed: {e}{hint}") from e
        self._closed = False
        _open_stores.add(self)
        if self.options.background:
            # The thread holds the store weakly, so that one dropped without close() is still freed (`__del__`).
            self._bg_done = threading.Event()
            self._bg_hold = _BackgroundHold()
            self._bg_thread = threading.Thread(
                target=_background_loop,
                args=(weakref.ref(self), self._cond, self._bg_done, self._bg_hold),
                name=f"minilsm-bg:{path}",
                daemon=True,
            )
            self._bg_thread.start()
            with self._mutex:
                self._cond.notify_all()  # recovery may have left compaction work
        else:
            # Else level 0 would grow by a table per reopen until a memtable filled.
            self._work_due = self._has_background_work()

    def _lock(self) -> FileLock:
        """Take the store's LOCK (`lock_store`), or raise `LockError` saying where the store is open."""
        try:
            return lock_store(self._fs, self.path)
        except BlockingIOError as e:
            raise LockError(f"{self.path} is already open {lock_holder(e)}") from None

    def _store_exists(self) -> bool:
        """Whether the directory holds a store, refused as `create_if_missing`/`error_if_exists` say."""
        path = self.path
        if not self._fs.exists(f"{path}/{MANIFEST_NAME}"):
            if not self.options.create_if_missing:
                raise NotFoundError(f"no minilsm store at {path} (create_if_missing is False)")
            return False
        if self.options.error_if_exists:
            raise ExistsError(f"a minilsm store already exists at {path} (error_if_exists is True)")
        return True

    def _recover(self, exists: bool) -> None:
        """Rebuild the in-memory state from the manifest, the tables and the logs.

        Crash safety comes from the order of operations everywhere else: a table is
        synced before the manifest names it, and a log is deleted only after the
        manifest says its writes are in tables.  So here: trust the manifest, replay
        every log it does not cover, write the result as a table, then delete what
        no one references.
        """
        fs, path = self._fs, self.path
        manifest_path = f"{path}/{MANIFEST_NAME}"
        self._manifest = ManifestWriter(fs, path)
        empty = ManifestState(levels=[[] for _ in range(self.options.max_levels)])
        read = read_manifest(fs, path) if exists else ManifestRead(empty)
        state = read.state
        if not exists:
            names = fs.listdir(path)
            refuse_foreign_store(path, names)  # before the files' names mislead: theirs are as ours
            if any(self._list_files(names)):
                raise CorruptionError("table or log files present but no MANIFEST", manifest_path)
            # A new store's manifest comes before any other file of it: a crash while
            # creating the store then leaves either no store or one that opens.
            write_manifest(fs, path, state)

        def missing(what: str, file: str) -> CorruptionError:
            if read.dropped_bytes:
                # A torn edit was never acted on, so the state before it names only files that exist:
                # a file missing from it says that edit was whole once, and acted on.
                return CorruptionError(
                    f"{what} ({os.path.basename(file)}) is missing once the manifest's torn last record of "
                    f"{read.dropped_bytes} bytes is dropped: an edit the store acted on is damaged",
                    manifest_path,
                )
            # A manifest cut short exactly at a record's edge reads whole, as the older manifest it once was: the
            # file may be one that a lost edit removed.  Said, with the way out, as the message can know no more.
            return CorruptionError(
                f"{what} is missing (deleted, or the manifest lost edits at its end: `minilsm repair` rebuilds "
                "the store from the files there)",
                file,
            )

        # The manifest lists every level the store had, empty or not: a store made with a larger
        # max_levels opens with a smaller one as long as no table sits below it.
        max_levels = self.options.max_levels
        deepest = max((i for i, level in enumerate(state.levels) if level), default=0)
        if deepest >= max_levels:
            raise ValueError(f"{path}: the store has tables at level {deepest}; open it with max_levels > {deepest}")
        del state.levels[max_levels:]
        self._next_file = state.next_file_number
        self._last_seq = state.last_sequence
        self._compact_pointers = (list(state.compact_pointers) + [None] * max_levels)[:max_levels]
        # The checksum says the manifest is the one its writer wrote, not that it describes these tables
        # (a buggy writer, a restore mixing two backups): reads must never run against impossible levels.
        levels = []
        seen: set[int] = set()
        for n, level in enumerate(state.levels):
            readers = []
            for meta in level:
                table = table_path(path, meta.number)
                if meta.number in seen:
                    raise CorruptionError(f"table {meta.number} is listed twice (again at level {n})", manifest_path)
                seen.add(meta.number)
                if not fs.exists(table):
                    raise missing("table listed in the manifest", table)
                reader = self._open_table(meta.number)
                readers.append(reader)
                if reader.meta != meta:
                    raise CorruptionError(f"the manifest says {meta}, the table holds {reader.meta}", table)
                self._next_file = max(self._next_file, meta.number + 1)
                self._last_seq = max(self._last_seq, meta.max_seq)
            levels.append(readers)
        version = Version(levels, self.options.max_levels)
        try:
            version.check_invariants()
        except AssertionError as e:
            raise CorruptionError(f"levels are inconsistent: {e}", manifest_path) from None
        self._install_version(version)

        # Replay the logs the manifest does not cover, oldest first.
        mem = MemTable()
        logs = sorted(n for n, kind, tmp in self._list_files() if kind == "log" and not tmp and n >= state.log_number)
        if state.log_number and state.log_number not in logs:
            # That log existed before the manifest named it and goes only after a newer manifest moves past it.
            raise missing("log listed in the manifest", self._log_path(state.log_number))
        if logs:
            # Numbers of logs that recovery stops before are taken too: a new file must not reuse one.
            self._next_file = max(self._next_file, logs[-1] + 1)
        replayed = records = dropped = 0
        # Writes in these logs are newer than every table: a memtable's log falls below the log number in
        # the same manifest that adds its table.  Past that, each record goes on from the one before.
        chain = LogChain(state.newest_table_sequence())
        corruption: str | None = None
        for i, number in enumerate(logs):
            log_path = self._log_path(number)
            result = read_log_file(fs, log_path, paranoid=self.options.paranoid_checks)
            err = chain.lost_before(result.records, log_path)
            if err is not None:  # an older log lost its end, and this one's writes come after it
                if self.options.paranoid_checks:
                    raise err
                corruption = str(err)
                dropped += sum(fs.file_size(self._log_path(n)) for n in logs[i:])
                break
            replayed += 1
            dropped += result.dropped_bytes
            chain.replay(result.records, result.dropped_bytes, log_path, mem.add)
            self._last_seq = max(self._last_seq, chain.last)
            records += len(result.records)
            if result.corruption is not None:
                corruption = str(result.corruption)
                # Later logs hold later writes: applying them past a hole would reorder history.
                dropped += sum(fs.file_size(self._log_path(n)) for n in logs[i + 1 :])
                break
        self.recovery = RecoveryReport(replayed, records, dropped, corruption, read.edits, read.dropped_bytes)
        if read.dropped_bytes:
            _log.warning(
                "%s: dropped a torn record of %d bytes at the end of the manifest (a crash mid-write)",
                path,
                read.dropped_bytes,
            )
        if dropped and corruption is None:
            _log.warning("%s: dropped a torn record of %d bytes at the end of a log (a crash mid-write)", path, dropped)
        if corruption is not None:
            _log.error("%s: recovery stopped at damage (paranoid_checks is off): %s", path, corruption)

        # A fresh log for new writes; the replayed memtable becomes a level-0 table.
        self._mem = MemTable()
        self._log = self._new_log()
        with self._mutex:
            if not mem.empty:
                self._write_level0_table(mem)
            self._write_manifest()
            self._delete_obsolete_files()
            # Each open that replays writes adds a level-0 table, and close() abandons a merge still running in
            # the worker, so a store opened for a few writes at a time (never filling a memtable, where writes
            # otherwise wait for level 0: `_make_room`) would grow level 0 by a table a session, without bound.
            # Such an open makes its writes wait for level 0 first (not for a tiered store's runs that no
            # merge would reduce).
            self._level0_full = self._level0_stalls()
        # A compaction worker's scratch directory outlives only a crash of the store's process.
        worker.remove_leftover_scratch(fs, path)

    def close(self) -> None:
        """Finish background work in progress, close the log and the table files, and release the directory.

        Writes in the memtable are not flushed; they are in the log and come back
        on the next open, as in LevelDB.  A `flush` or `compact_range` running in
        another thread ends with `ClosedError` (a compaction step under way in
        this process first finishes; one in the compaction worker is abandoned,
        as is a merge or flush of the background thread's there, so that a worker stuck
        or busy with another store's job does not hold close() up).  The store's
        iterators close with it, as in plyvel: each lets go of what it read, and
        its next step raises `ClosedError` (a step under way in another thread
        finishes first; close does not wait for it).  Snapshots
        raise `ClosedError` too.  Closing twice is harmless; a close racing with
        one under way returns once the store is closed.  If an interrupt (a
        `KeyboardInterrupt`) stops close() while it waits for background work,
        the store stays closed to writes and the next close() finishes the job.
        O(tables + live iterators).
        """
        with self._mutex:
            # Another close() under way: return once it is done, as that caller will (or, if an interrupt
            # stopped it while it waited, carry on from there).
            while self._close_running:
                self._cond.wait()
            if self._closed:
                return
            self._closing = True  # for good: writes are refused, the background thread stops
            self._close_running = True
            self._cond.notify_all()
        try:
            if self._bg_done is not None:
                self._bg_done.wait()
            with self._mutex:
                # A compact_range in another thread writes outside the mutex: let its step end (it then sees
                # the close and stops), or it would rewrite the manifest of a directory no longer ours.
                while self._compacting:
                    self._cond.wait()
                self._close_files()
        finally:
            with self._mutex:
                self._close_running = False
                self._cond.notify_all()

    def _close_files(self) -> None:
        """The end of `close` (mutex held), where nothing is left to wait for.

        An interrupt (a `KeyboardInterrupt`) partway leaves the store closing, closed to writes, and the next
        close() does every step again (each may be repeated); until then the directory stays locked.  Any other
        failure leaves it closed as far as it got.
        """
        try:
            with contextlib.suppress(OSError):  # every acknowledged record was already handed to the OS
                self._log.close()
            with contextlib.suppress(OSError):  # every edit was synced as it was written
                self._manifest.close()
            # Table files close now, not whenever this object is collected; an iterator or
            # snapshot read that outlives the store gets ClosedError instead of reopening them.
            # The iterators are cancelled first: a seek or step in another thread between the two
            # would otherwise start a merge of tables already closed, and fail naming a table, not
            # the store.  (`versions` keeps the versions that only iterators held until their tables close.)
            versions = list(self._versions)
            self._cancel_iterators()
            for v in versions:
                for _, table in v.tables():
                    table.close()
            del versions
            self._file_cache.close()
            if self._block_cache is not None:
                self._block_cache.clear()
            self._file_lock.release()
        except Exception:
            self._mark_closed()
            raise
        self._mark_closed()

    def _mark_closed(self) -> None:
        self._closed = True
        self._closing = False
        self._cond.notify_all()

    def _cancel_iterators(self) -> None:
        """End every live iterator: its next step raises `ClosedError`."""
        message = str(self._closed_error())
        for ref in list(self._pins):
            pin = ref()
            if pin is not None:
                pin.cancel(message)

    def _closed_error(self) -> ClosedError:
        if self._forked_from is not None:
            return ClosedError(
                f"{self.path}: the store was opened by process {self._forked_from}, which this process was forked "
                "from; the store stays that process's, so open it here only once that process has closed it"
            )
        return ClosedError(f"{self.path}: the store is closed")

    def _forget_after_fork(self) -> None:
        """In a child process forked while the store was open: the store stays the parent's, and is closed here.

        The child has copies of the store's state, of its open files and of its
        lock on the directory (a `flock`, which the two processes share).  Had the
        child used them, it would write into the parent's log, and a sweep of
        obsolete files by its stale version (an iterator let go, a close) would
        delete the parent's newer tables.  So every call raises `ClosedError`
        here; the mutex (which a parent thread may have held at the fork, and
        which no thread here would ever release) is a new one, so that a close or
        a dropped iterator does not hang; and the child's copy of the lock and of
        the log close without unlocking or writing (see `fs`).  As LevelDB and
        SQLite say of theirs: open the store in the process that uses it.
        """
        self._forked_from = os.getppid()
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._item_deletes = threading.Lock()  # as the mutex: a parent thread's ``del db[k]`` may have held it
        self._bg_done = self._bg_thread = None  # threads do not survive a fork
        self._closed = True
        self._closing = False
        self._close_running = False
        self._cancel_iterators()
        with contextlib.suppress(OSError):
            self._file_lock.release()
        with contextlib.suppress(OSError):
            self._log.close()
        with contextlib.suppress(OSError):
            self._manifest.close()

    @property
    def closed(self) -> bool:
        """Whether the store is closed: True once `close` has finished (and in a child forked while it was open).
        O(1)."""
        return self._closed

    def __del__(self) -> None:
        # Collected without close(): the lock, the log and the table files close as their own objects go (the
        # log handed every acknowledged record to the OS, so nothing is lost), and the background thread, which
        # holds the store only while it works, ends at its next look.  Warn as an unclosed file does.
        if not getattr(self, "_closed", True):  # (an __init__ that raised early set nothing)
            with contextlib.suppress(Exception):  # at interpreter exit the warnings machinery may be gone
                warnings.warn(f"unclosed minilsm store {self.path!r}", ResourceWarning, stacklevel=2)

    def __enter__(self) -> DB:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<minilsm.DB {self.path!r}{' closed' if self._closed else ''}>"

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        # Pickle, copy.copy and copy.deepcopy all ask this.  A shallow copy would share the lock, the log and the
        # files, and its close() would close them under this store, whose next write then fails.
        raise TypeError(f"a minilsm.DB cannot be pickled or copied; open {self.path!r} where it is used")

    # -- writing ----------------------------------------------------------------------

    def _deletes_lock(self) -> threading.Lock:
        return self._item_deletes

    def put(self, key: BytesLike, value: BytesLike, *, sync: bool | None = None) -> None:
        """Set `key` to `value`.  `sync=True` fsyncs the log before returning.

        Cost: one log append (plus an fsync if syncing) and an O(1) memtable insert (a dict
        insert; a new key is sorted in later, when a scan or the flush needs the order).
        """
        # Plain bytes within the limits, the usual case, skip the validators' calls.
        if type(key) is not bytes or len(key) > MAX_KEY_SIZE:
            key = check_key(key)
        if type(value) is not bytes or len(value) > MAX_VALUE_SIZE:
            value = check_value(value)
        self._write(((KIND_VALUE, key, value),), sync)

    def delete(self, key: BytesLike, *, sync: bool | None = None) -> None:
        """Remove `key` (a tombstone; deleting a missing key is not an error, as in LevelDB).

        Cost: as `put`'s, one log append (plus an fsync if syncing) and an O(1) memtable insert; the key's
        older versions go only when compaction reaches them.
        """
        if type(key) is not bytes or len(key) > MAX_KEY_SIZE:
            key = check_key(key)
        self._write(((KIND_DELETE, key, b""),), sync)

    def write_batch(self, *, transaction: bool = True, sync: bool | None = None) -> WriteBatch:
        """A batch applied atomically when its `with` block ends without an exception.

        With ``transaction=False`` (plyvel's default) the block's end writes the
        batch even when the block raised, and the exception goes on.  O(1): the
        store sees nothing until the batch is written, which costs what `write` does.

        >>> with db.write_batch() as wb:          # doctest: +SKIP
        ...     wb.put(b"a", b"1"); wb.delete(b"b")
        """
        _check_flag("transaction", transaction)
        _check_flag("sync", sync)
        if self._closed:  # at once, as `iterator` and `snapshot` do, not after the block has filled the batch
            raise self._closed_error()
        return WriteBatch(
            _writer=lambda batch: self._write_batch(batch, batch._sync),
            _sync=sync,
            _owner=self,
            _transaction=transaction is True,  # None is False, as for every flag of plyvel's
        )

    def write(self, batch: WriteBatch | PrefixedWriteBatch, *, sync: bool | None = None) -> None:
        """Apply every operation of `batch` atomically: after a crash too, all or none.  Cost: one log append for
        the whole batch (plus an fsync if syncing), and an O(1) memtable insert per operation.

        A batch from `write_batch` is spent by this as by its own `write`, even
        if the write raises: its ``with`` block's end writes nothing more, and
        writing it again (or one already written or discarded,
        `WriteBatch.closed`) raises `ClosedError`, since that would put its old
        values back over newer writes.  A batch from another store's
        `write_batch` raises `ValueError`.  Without `sync` here, a batch from
        ``write_batch(sync=...)`` is written as that call asked, any other as
        the store's `sync` option says.  A `PrefixedWriteBatch` is written as the store's batch it wraps.
        """
        if isinstance(batch, PrefixedWriteBatch):
            batch = batch.batch
        if not isinstance(batch, WriteBatch):
            raise TypeError(f"batch must be a WriteBatch, not {type(batch).__name__}")
        if batch._owner is not None and batch._owner is not self:
            # Written here it would be spent, and its own store would never get it.
            raise ValueError("this WriteBatch belongs to another store (its write_batch()); write it there")
        _check_flag("sync", sync)  # before `_apply`, which would spend the batch
        if sync is None:
            sync = batch._sync
        batch._apply(lambda b: self._write_batch(b, sync))

    def _write_batch(self, batch: WriteBatch, sync: bool | None) -> None:
        ops = tuple(batch)
        if ops:
            self._write(ops, sync)
        else:
            self._check_writable()  # nothing to write, but the answer a write gets (as LevelDB's Write)

    def _write(
        self, ops: tuple[tuple[int, bytes, bytes], ...] | list[tuple[int, bytes, bytes]], sync: bool | None
    ) -> None:
        if sync is not None:  # `put`'s and `delete`'s: one test on the usual call
            _check_flag("sync", sync)
        with self._mutex:
            opts = self.options
            # One test for the usual case (open, no failure, room in the memtable); else the slow path.
            if (
                self._closed
                or self._closing
                or self._bg_error is not None
                or self._mem.approximate_size >= opts.memtable_size
                or self._work_due
                or self._level0_full
                or self._last_seq > SEQUENCE_ROOM_CHECKED_FROM
            ):
                self._make_room()
                if len(ops) > sequences_left(self._last_seq):
                    raise ReadOnlyError(
                        f"{self.path}: the write needs sequence numbers past the maximum, 2**56 - 1; the store is "
                        f"at {self._last_seq} (no store writes that many versions: a log or manifest said so)"
                    )
            seq = self._last_seq + 1
            payload = encode_batch(seq, ops)
            try:
                written = self._log.add_record(payload, opts.sync if sync is None else sync)
                add = self._mem.add
                user_bytes = 0
                for kind, key, value in ops:
                    add(key, seq, kind, value)
                    seq += 1
                    user_bytes += len(key) + len(value)
                self._last_seq = seq - 1  # publish: readers now see the whole batch
            except OSError as e:
                # The log may now end in a partial record; appending more after it would
                # bury the damage mid-log.  Refuse further writes until a reopen.
                raise self._fail_writes(f"writing the log {self._log_path(self._log.number)}", e) from e
            except BaseException as e:
                # An interrupt (a signal handler's KeyboardInterrupt, MemoryError) between the append and the
                # publish: the log may hold this record, whole or in part, under numbers the next write would
                # reuse, and recovery refuses a log that goes back.  The same refusal; the interrupt goes on.
                self._fail_writes(f"writing the log {self._log_path(self._log.number)}", e)
                raise
            st = self._stats
            st.log_bytes_written += written
            st.user_bytes_written += user_bytes

    def _fail_writes(self, what: str, e: BaseException) -> StoreIOError:
        """Turn the store read-only after a failed write-path operation (mutex held); returns the error to raise.

        Whatever failed (a log append, a new log, a flush, a compaction, a manifest)
        may have left the files and the in-memory state out of step, so nothing more
        is built on them: reads go on, writes get `ReadOnlyError`, and a reopen
        recovers from what is on disk.
        """
        # An interrupt (KeyboardInterrupt) has no text of its own.
        err = StoreIOError(f"{self.path}: {what} failed: {str(e) or f'interrupted ({type(e).__name__})'}")
        err.__cause__ = e
        if self._bg_error is None:
            self._bg_error = err
        self._cond.notify_all()
        return err

    def _check_writable(self) -> None:
        if self._closed or self._closing:
            raise self._closed_error()
        if self._bg_error is not None:
            raise ReadOnlyError(
                f"{self.path}: the store is read-only after a failed write: {self._bg_error}"
            ) from self._bg_error

    def _make_room(self) -> None:
        """Before a write: freeze a full memtable, waiting if the previous one is not flushed yet."""
        opts = self.options
        if self._work_due:
            self._check_writable()
            self._work_due = False
            self._do_background_work()
        while True:
            self._check_writable()
            if self._level0_full:  # the open left level 0 full (see `_recover`)
                if self._level0_stalls():
                    self._wait_for_background()
                    continue
                self._level0_full = False
            if self._mem.approximate_size < opts.memtable_size:
                return
            if self._imm is not None:
                # The previous memtable is still being flushed: writes wait here (LevelDB's stall).
                self._wait_for_background()
                continue
            if self._level0_stalls():
                # As LevelDB, only once a memtable is full: waiting at every write would cost a heavy load
                # (1M overwrites) 13% for the memtable's worth of writes it lets through first.
                self._wait_for_background()
                continue
            self._freeze_memtable()
            if not opts.background:
                self._do_background_work()
            return

    def _level0_stalls(self) -> bool:
        """Level 0 holds `level0_stop_writes_trigger` tables and a compaction would reduce them: writes wait."""
        return (
            len(self._version.levels[0]) >= self.options.level0_stop_writes_trigger
            and compaction.pick_compaction(self._version, self.options, self._compact_pointers) is not None
        )

    def _freeze_memtable(self) -> None:
        """The memtable becomes immutable; new writes go to a new memtable and a new log (mutex held).

        Raises `ClosedError` (`ReadOnlyError`) on a store closing or closed (read-only), touching nothing: a caller
        that waited with the mutex let go (`flush`, `_make_room`) may come back after close() closed the log,
        whose `ClosedError` would otherwise be recorded below as a failure of the store.
        """
        self._check_writable()
        old_log = self._log
        try:
            # The new log's writes may be synced while this memtable waits for its flush:
            # this log's unsynced tail must not be the only thing a crash then loses.
            old_log.sync()
            new_log = self._new_log()
            self._imm_log_number = old_log.number
            self._imm = self._mem  # set before replacing _mem: a lock-free reader must never miss it
            self._mem = MemTable()
            self._log = new_log
        except OSError as e:
            raise self._fail_writes("syncing the full log or starting a new one", e) from e
        except BaseException as e:
            # An interrupt (KeyboardInterrupt) partway: a new log may be made, empty, while writes went on into
            # the old one, and the next freeze's log after them; a crash then leaves an empty log before one with
            # records, which recovery refuses.  As in `_write`: no more writes until a reopen; the interrupt goes on.
            self._fail_writes("starting a new memtable and log", e)
            raise
        # Its records were handed to the OS on append; the file stays until the flush is durable.
        with contextlib.suppress(OSError):
            old_log.close()
        self._cond.notify_all()

    def _new_log(self) -> LogWriter:
        number = self._new_file_number()
        f = self._fs.open_writable(self._log_path(number))
        try:
            # The new file's name must survive a crash before the manifest can point at it.
            self._fs.sync_dir(self.path)
        except BaseException:
            f.close()
            raise
        return LogWriter(f, number)

    # -- reading ----------------------------------------------------------------------

    @overload
    def get(self, key: BytesLike, **kw: Unpack[_ReadOptions]) -> bytes | None: ...
    @overload
    def get(self, key: BytesLike, default: _T, **kw: Unpack[_ReadOptions]) -> bytes | _T: ...
    # plyvel's read options are keyword-only in the overloads only: in CPython 3.11 a keyword-only parameter left
    # to its default costs every call about 55 ns, 2% of a missing-key read, where a positional one costs nothing.
    def get(self, key: BytesLike, default: Any = None, verify_checksums: bool = False, fill_cache: bool = True) -> Any:
        """The value of `key`, or `default` when it is absent or deleted.

        plyvel's read options: ``fill_cache=False`` leaves the block cache as it
        was (a block read from the file is not offered to it; a cached block is
        still used), for a read that should not push hotter blocks out.  Every
        block read from a file is checked against its checksum, so
        `verify_checksums` asks for nothing more.

        Cost: two dict lookups for the memtables; then, per table that may hold the
        key, a range check and a filter probe in memory, and one block read when
        the filter says maybe.
        """
        if type(key) is not bytes or len(key) > MAX_KEY_SIZE:
            key = check_key(key)
        if self._closed:
            raise self._closed_error()
        if fill_cache is not True or verify_checksums is not False:  # one test on the usual call
            return self._get(key, None, default, None, _check_read_options(verify_checksums, fill_cache))
        return self._get(key, None, default, None)

    def _get(self, key: bytes, seq: int | None, default: Any, trace: Trace | None, fill_cache: bool = True) -> Any:
        """The read at sequence number `seq` (a snapshot's, or one the caller holds still), or the latest if None.

        `fill_cache` False: a block read from a table's file is not offered to the block cache."""
        stats = self._stats
        stats.gets += 1
        found: tuple[int, bytes] | None
        while True:
            at = self._last_seq if seq is None else seq
            found = self._mem.get(key, at)
            where = "memtable"
            if found is None:
                imm = self._imm
                if imm is not None:
                    found = imm.get(key, at)
                    where = "immutable memtable"
                if found is None:
                    version = self._version
                    if version.installed_at > at and seq is None:
                        # A flush or compaction finished after `at` was read and may have dropped the version
                        # it sees (see the module docstring): read again at the sequence number of now.
                        continue
            break
        if trace is not None:
            trace.append(
                {"source": "memtable", "outcome": "miss" if found is None else _outcome(found[0]), "where": where}
            )
        if found is None:
            try:
                found = version.get(key, key_hash(key), at, trace, fill_cache)
            except OSError as e:
                raise StoreIOError(f"{self.path}: a read failed: {e}") from e
            if found is not None and found[0] == KIND_VALUE:
                stats.found_in_tables += 1
                return found[1]
        elif found[0] == KIND_VALUE:
            stats.found_in_memtable += 1
            return found[1]
        stats.not_found += 1
        return default

    def _iterator(
        self,
        start: BytesLike | None,
        stop: BytesLike | None,
        prefix: BytesLike | None,
        reverse: bool,
        include_key: bool,
        include_value: bool,
        include_start: bool,
        include_stop: bool,
        *,
        seq: int | None = None,
        key_prefix: bytes = b"",
    ) -> DBIterator[Any]:
        if not (
            reverse.__class__ is include_key.__class__ is include_value.__class__ is bool
            and include_start.__class__ is include_stop.__class__ is bool
        ):  # one test on the usual call; each flag looked at only to name the wrong one
            names = ("reverse", "include_key", "include_value", "include_start", "include_stop")
            for name, flag in zip(
                names, (reverse, include_key, include_value, include_start, include_stop), strict=True
            ):
                _check_flag(name, flag)
        if key_prefix:  # a `PrefixedDB`'s: its keys leave the prefix off, and its range lies within the prefix
            start = None if start is None else _prefixed(key_prefix, start, "start")
            stop = None if stop is None else _prefixed(key_prefix, stop, "stop")
            prefix = key_prefix if prefix is None else _prefixed(key_prefix, prefix, "prefix")
        # In bytewise order the key right after k is k + b"\x00", so the open and closed ends
        # plyvel offers become the one half-open range every source understands.
        if start is not None:
            start = check_key(start, "start")
            if not include_start:
                start += b"\x00"
        if stop is not None:
            stop = check_key(stop, "stop")
            if include_stop:
                stop += b"\x00"
        if prefix is not None:
            pstart, pstop = prefix_bounds(check_key(prefix, "prefix"))
            start = pstart if start is None else max(start, pstart)
            stop = pstop if stop is None else (stop if pstop is None else min(stop, pstop))
        if not (include_key or include_value):
            raise ValueError("include_key and include_value cannot both be False")
        while True:
            at = self._last_seq if seq is None else seq
            mem, imm, version = self._mem, self._imm, self._version
            # As in `_get`: a version installed after `at` was read may lack a version `at` sees.
            if seq is not None or version.installed_at <= at:
                break
        pin = _Pin(self, at, mem, imm, version)
        self._pins.add(weakref.ref(pin, self._pins.discard))
        # Asked after the pin is listed: a close that began before it was may not cancel it.
        if self._closing or self._closed:
            raise self._closed_error()
        return DBIterator(pin, start, stop, reverse, include_key, include_value, key_prefix)

    _new_iterator = _iterator  # the latest view (`seq` None); a Snapshot's passes its own

    def _merge(
        self, view: _Pin, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> tuple[Generator[tuple[bytes, bytes], None, None], _Scan]:
        """A scan of the keys in [start, stop) of an iterator's `view`, and its handle: one source per memtable,
        per level-0 table and per deeper level, merged (`merge_visible`).  Nothing is read until its first step.
        """
        mem, imm, version = view.mem, view.imm, view.version
        if version is None:  # the store closed (`_Pin.cancel`) since the caller looked
            raise ClosedError(view.message or "the iterator is closed")
        sources: list[Iterator[Entry]] = []
        if start is None or stop is None or start < stop:
            # An empty memtable adds nothing to merge: whatever it gets later has a sequence number
            # above the view's, and a Version never changes.  Nor does a table outside the range.
            sources += [m.iter(start, stop, reverse) for m in (mem, imm) if m is not None and not m.empty]
            sources += [t.iter(start, stop, reverse) for t in version.levels[0] if _meets(t, start, stop)]
            for tables in version.levels[1:]:
                # Disjoint and sorted by key: the tables meeting the range are a slice, found by bisection
                # (O(log tables), where a test of each table would cost O(tables) per seek in a big level).
                lo = 0 if start is None else bisect_left(tables, start, key=_LARGEST)
                hi = len(tables) if stop is None else bisect_left(tables, stop, key=_SMALLEST)
                if lo < hi:
                    # One source, each table opened when the scan reaches it.
                    ordered = reversed(tables[lo:hi]) if reverse else tables[lo:hi]
                    sources.append(concat(t.iter(start, stop, reverse) for t in ordered))
        scan = _Scan(sources, view)
        return merge_visible(sources, view.at, reverse, scan), scan

    def _released_superseded_version(self) -> None:
        """An iterator let go of a version that compaction has replaced: delete what only it held."""
        # Only user code closes iterators, and it never holds the mutex, so waiting is safe.
        with self._mutex:
            if not self._closed:
                self._delete_obsolete_files()

    def prefixed_db(self, prefix: BytesLike) -> PrefixedDB:
        """A view of the keys that begin with `prefix`, with the prefix left off: plyvel's `prefixed_db`.

        O(len(prefix)): the view holds nothing of the store's (see `PrefixedDB` for what its calls cost).
        """
        return PrefixedDB(self, prefix)

    def snapshot(self) -> Snapshot:
        """A consistent, read-only view of the store as it is now.  Release it with `close()` or `with`.

        O(1) under the store's lock: it records a sequence number and holds no table.  Its cost is what it
        keeps: flushes and compactions keep every version a live snapshot can see (space on disk, and
        versions that scans step over), so hold snapshots only as long as needed.
        """
        with self._mutex:
            if self._closed:
                raise self._closed_error()
            self._snapshot_ids += 1
            sid = self._snapshot_ids
            self._snapshots[sid] = self._last_seq
            return Snapshot(self, sid, self._last_seq)

    def _release_snapshot(self, sid: int) -> None:
        # No mutex: this is also a finalizer, which the cycle collector may run in a thread that holds
        # the mutex already.  One dict operation is atomic under the GIL, and the readers copy the
        # values in one C call (`sorted`), so no lock is needed.
        self._snapshots.pop(sid, None)

    # -- flushing and compacting -------------------------------------------------------

    def flush(self) -> None:
        """Write the memtable to a level-0 table now, and wait until it is durable.

        Cost: O(n log n) for the memtable's n versions (its keys sorted, its bytes written once, with an
        fsync), an fsync of its log and a new log, and a manifest write (O(tables) and an fsync); first it
        waits for an earlier memtable's flush.  With ``background=False`` it then also runs any compaction due.
        """
        with self._mutex:
            # Asked again after every wait: the mutex was let go, and a close() may have closed the log meanwhile.
            self._check_writable()
            while self._imm is not None:
                self._wait_for_background()
                self._check_writable()
            if self._mem.empty:
                return
            self._freeze_memtable()
            if not self.options.background:
                self._do_background_work()
            while self._imm is not None:
                self._wait_for_background()
            # The frozen memtable is gone from memory once its table is installed, even if the
            # manifest write after that failed: only the recorded error tells.
            self._check_writable()

    def compact_range(self, start: BytesLike | None = None, stop: BytesLike | None = None) -> None:
        """Compact the keys in [start, stop] (None: unbounded) down to the bottom level (size-tiered: every run of
        the store into one, whatever the range).

        Flushes the memtable first, so that afterwards the range is fully merged and
        holds no shadowed version or tombstone that no snapshot needs.  Each level is
        merged down once, top to bottom, as in LevelDB: writes that other threads
        make during the call may stay above, so the call ends however long they go on.

        Cost: a `flush`, then per level one merge of the range's tables there with the tables they
        overlap one level down (at level 0, every level-0 table), so the range's data is read and written
        once per level it passes through; then one rewrite of the range's bottom-level tables, but for those
        that a merge of this call or an earlier one wrote under snapshots still live; a manifest write after
        each merge.  Tiered: one merge of every run of the store into one, whatever the range: O(store size).
        """
        start = None if start is None else check_key(start, "start")
        stop = None if stop is None else check_key(stop, "stop")
        self.flush()
        with self._mutex:
            while self._compacting:
                self._wait_for_background()
            self._compacting = True
            try:
                written: set[int] = set()
                merged_under: set[int] = set()  # the snapshots live when one of the merges began
                # Tiered: the run an earlier call wrote holds nothing more to drop while its snapshots live.
                earlier = self._still_fresh(*self._range_compacted)
                level = 0  # the next level to merge down: each once, so that flushes meanwhile cannot keep it going
                while True:
                    self._check_writable()
                    c = compaction.manual_compaction(self._version, start, stop, self.options, earlier, level)
                    if c is None:
                        break
                    merged_under.update(self._snapshots.values())  # those the merge keeps versions for
                    written.update(self._run_compaction(c, manual=True))
                    level = c.output_level
                    del c
                    self._delete_obsolete_files()
                    if self.options.compaction_style == "tiered":
                        self._range_compacted = (written, merged_under)
                        break  # one merge of every run is the whole job
                if self.options.compaction_style == "leveled":
                    # The merges' outputs dropped what the snapshots of then let go: while those all live, there
                    # is nothing more to drop in them, nor in what an earlier call left at the bottom.
                    left, left_under = self._range_compacted
                    if self._still_fresh(left, left_under):
                        written |= left
                        merged_under |= left_under
                    fresh = self._still_fresh(written, merged_under)
                    rewrites = compaction.bottom_compactions(self._version, start, stop, fresh)
                    while rewrites:
                        self._check_writable()
                        bottom = rewrites.pop(0)  # held by nothing here once it has run, as `c` above
                        merged_under.update(self._snapshots.values())
                        written.update(self._run_compaction(bottom, manual=True))
                        del bottom
                        self._delete_obsolete_files()
                    # Only what lies at the bottom now: a table a merge left above it may hold tombstones kept for
                    # the levels below, which could be dropped once it is moved down.
                    # No local may hold the version: the inline background work below would then keep its files.
                    levels = self._version.levels
                    at_bottom = {t.number for t in levels[self._version.bottom_level_with_data()]}
                    self._range_compacted = (written & at_bottom, merged_under)
            except OSError as e:
                raise self._fail_writes("a manual compaction", e) from e
            except Error:
                raise  # the store's own (closed, read-only, a damaged input): raised before anything changed
            except BaseException as e:
                # An interrupt (KeyboardInterrupt) may land between installing a version and writing the
                # manifest that names it: then nothing may be deleted, as after a failed manifest write.
                self._fail_writes("a manual compaction", e)
                raise
            finally:
                self._compacting = False
                self._cond.notify_all()
            if not self.options.background:
                self._do_background_work()

    def checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Write a copy of the store into the new directory `path`, while the store stays open (RocksDB's
        ``Checkpoint``): every write acknowledged before the call, as a store that opens on its own.

        Flushes the memtable, then takes the live tables under the mutex; they stay on disk until the copy
        is made, and the writes other threads make meanwhile go on and stay out of it.  The tables are
        hard-linked, not copied (copied only across file systems), so the cost is the flush plus O(tables):
        see `minilsm.checkpoint`.  Raises `ExistsError` if `path` exists or another checkpoint (in any process)
        is being written there, `NotFoundError` if the directory it goes into does not, `ValueError` if it lies
        in the store's own directory or is empty (not the working directory); a failure leaves no directory there
        (but a whole checkpoint, if it failed once in place and could not be taken back: `write_checkpoint`).
        """
        target = store_path(path)
        self.flush()
        with self._mutex:
            self._check_writable()
            version = self._version  # held until this returns: no table of it is deleted meanwhile
            state = ManifestState(
                next_file_number=self._next_file,
                last_sequence=self._last_seq,
                levels=version.metas(),
                compact_pointers=list(self._compact_pointers),
            )
        try:
            write_checkpoint(self._fs, self.path, target, state)
        except OSError as e:
            raise StoreIOError(f"{target}: the checkpoint of {self.path} failed: {e}") from e

    def _still_fresh(self, tables: set[int], snapshots: set[int]) -> set[int]:
        """`tables`, written by merges that began while `snapshots` (sequence numbers) were the live ones, if all
        of those are live still, else nothing.  O(snapshots).

        Such a merge kept only what those snapshots see (`compaction.drop_dead`), which they still see, and a
        snapshot taken since is newer than every version the tables hold, so rewriting them would drop nothing.
        Once one of them is released, the versions only it saw may go.
        """
        # set() copies the values in one C call: see `_release_snapshot`.
        return tables if snapshots <= set(self._snapshots.values()) else set()

    def wait_for_compactions(self) -> None:
        """Return once no flush or compaction is due or running (RocksDB's ``WaitForCompact``).

        For benchmarks and tests that measure a settled store.  Writes (and, through
        seek compaction, reads) from other threads meanwhile can make more work.  Returns at once when the store is
        closing or closed, or once background work has failed (writes report it).  Costs the work it waits for
        (with ``background=False`` it runs it), O(1) when none is due.
        """
        with self._mutex:
            while (
                not (self._closed or self._closing)
                and self._bg_error is None
                and (self._compacting or self._has_background_work())
            ):
                self._wait_for_background()

    # -- background work -----------------------------------------------------------

    def _wait_for_background(self) -> None:
        """Wait (mutex held) for the background thread, or do its work now when inline."""
        if self.options.background:
            # A close stops the background thread, so nothing would ever wake a waiter up.
            self._check_writable()
            self._cond.wait()
        else:
            self._do_background_work()

    def _has_background_work(self) -> bool:
        return self._imm is not None or (not self._compacting and self._pick_compaction() is not None)

    def _pick_compaction(self) -> compaction.Compaction | None:
        seek_ready = time.monotonic() >= self._seek_resume_at
        return compaction.pick_compaction(
            self._version,
            self.options,
            self._compact_pointers,
            seek=seek_ready,
            oldest_snapshot=min(self._snapshots.values(), default=None),  # one C call: see `_release_snapshot`
            quiet=self._imm is None and self._mem.empty,
        )

    def _do_background_work(self) -> None:
        """Inline mode: flush and compact until nothing is due (mutex held), or the store is closing."""
        while self._bg_error is None and not self._closing and self._has_background_work():
            self._do_one_background_job()
            if self._bg_error is not None:
                raise self._bg_error  # this call's own failure; later writes get ReadOnlyError
        self._check_writable()

    def _do_one_background_job(self) -> BaseException | None:
        """Flush the frozen memtable, or run one compaction if one is due (mutex held); returns its failure.

        A frozen memtable goes first, as in LevelDB, unless a merge is due that the worker can run: the merge
        then starts, and this thread flushes beside it (`_flush_while_merging`), so that both cores work.
        With no merge due the worker would idle, and the flush goes to it.
        """
        try:
            # Never a second compaction beside one running (`compact_range` in another thread): its inputs may be these.
            c = None if self._compacting else self._pick_compaction()
            merge_first = c is not None and not c.is_trivial_move() and self._worker_usable()
            if self._imm is not None and not merge_first:
                self._flush_immutable(in_worker=c is None)
            elif c is not None:
                self._compacting = True
                started = time.monotonic()
                try:
                    self._run_compaction(c, manual=False)
                finally:
                    self._compacting = False
                if c.by_seek:
                    finished = time.monotonic()
                    self._seek_resume_at = finished + SEEK_PACE * (finished - started)
            del c
            # Here, outside the job, no local still holds the version it replaced.
            self._delete_obsolete_files()
        except ClosedError:
            return None  # the store is closing and abandoned the job (in the worker) before installing anything
        except OSError as e:
            return self._fail_writes("a background flush or compaction", e)
        except Exception as e:
            self._bg_error = e
            self._cond.notify_all()
            return e
        except BaseException as e:
            # Inline, an interrupt (KeyboardInterrupt) in the writing thread, perhaps between installing a
            # version and writing the manifest that names it: nothing may be deleted from now on.
            self._fail_writes("a flush or compaction", e)
            raise
        return None

    def _flush_immutable(self, in_worker: bool) -> None:
        imm = self._imm
        assert imm is not None
        self._write_level0_table(imm, in_worker)
        # The new version holds the table, so readers may stop looking at _imm (in that
        # order: see the module docstring).  Only once the manifest names the table is
        # the frozen memtable's log garbage.
        self._imm = None
        self._write_manifest()

    def _write_level0_table(self, mem: MemTable, in_worker: bool = False) -> None:
        """Write `mem` as a new level-0 table and install it (the manifest is the caller's).

        With `in_worker`, `mem` goes to the compaction worker if it is free (`worker.FlushJob`), whatever its size:
        it travels pickled a frame at a time (`worker.pickle_job`), so no other thread waits long for the lock;
        the table is then sorted and built on the worker's core, off this process's interpreter lock, so
        writers go on meanwhile (LevelDB's flush runs on its background thread, which in C takes no time
        from them).  Readers keep reading `mem` until the table is installed.  If the worker is busy,
        unavailable or fails the job, `mem` is written here.
        """
        snapshots = sorted(self._snapshots.values())
        numbers: list[int] = []
        try:
            with self._unlocked():
                metas = None
                if in_worker and self._worker_usable():
                    metas = self._flush_in_worker(mem, snapshots, numbers)
                if metas is None:
                    entries = compaction.flush_entries(mem.entries(), snapshots, self._stats)
                    metas = compaction.write_tables(
                        entries, lambda: self._new_builder(self._output_number(numbers)), None
                    )
                readers = [self._open_table(m.number) for m in metas]
        finally:
            self._pending_outputs.difference_update(numbers)
        self._install_version(self._version.apply([], [(0, r) for r in readers], self.options.max_levels))
        self._stats.flushes += 1
        self._stats.flush_bytes_written += sum(m.file_size for m in metas)

    def _run_compaction(self, c: compaction.Compaction, manual: bool) -> list[int]:
        """Merge the compaction's inputs into new tables and install them (mutex held); returns their numbers.

        A move installs the inputs at their new level, and returns no number: it writes nothing.
        """
        opts = self.options
        version = self._version
        written: list[int] = []
        if not manual and c.is_trivial_move():
            # Nothing to merge with, so just relabel the level (LevelDB's trivial move, extended
            # to disjoint level-0 tables: a sequential load then writes each byte once, not twice).
            moved = c.inputs
            for t in moved:
                t.clear_seek_charge()  # a new place, a new allowance (as LevelDB, which re-adds the file)
            self._install_version(
                version.apply([t.number for t in moved], [(c.output_level, t) for t in moved], opts.max_levels)
            )
        else:
            snapshots = sorted(self._snapshots.values())
            target = opts.target_file_size if c.split_output else None
            numbers: list[int] = []
            try:
                with self._unlocked():
                    metas = None
                    if self._worker_usable():
                        metas = self._compact_in_worker(c, version, snapshots, target, numbers, manual)
                    if metas is None:
                        entries = compaction.compaction_entries(c, version.ranges, snapshots, self._stats)
                        if not manual and self.options.background:
                            entries = self._flushing_meanwhile(entries)
                        metas = compaction.write_compaction_tables(
                            c, entries, lambda: self._new_builder(self._output_number(numbers)), target
                        )
                    readers = [self._open_table(m.number) for m in metas]
            finally:
                self._pending_outputs.difference_update(numbers)
            removed = [t.number for t in c.all_inputs]
            self._install_version(self._version.apply(removed, [(c.output_level, r) for r in readers], opts.max_levels))
            self._stats.compaction_bytes_read += c.input_bytes()
            self._stats.compaction_bytes_written += sum(m.file_size for m in metas)
            written = [m.number for m in metas]
        if c.level > 0 and c.inputs:
            self._compact_pointers[c.level] = c.inputs[-1].largest
        self._stats.compactions += 1
        self._write_manifest()
        return written

    def _output_number(self, numbers: list[int]) -> int:
        """A file number for a new table, kept from deletion (`_pending_outputs`) and appended to `numbers`.

        Called with the mutex released in background mode: it takes it for the moment it needs.
        """
        with self._number_lock():
            n = self._new_file_number()
            self._pending_outputs.add(n)
        numbers.append(n)
        return n

    def _worker_usable(self) -> bool:
        """Whether flushes and compactions may go to the worker process: background mode, the real file system,
        and a worker this process has not given up on."""
        opts = self.options
        return (
            opts.compaction_worker
            and opts.background
            and type(self._fs) is FileSystem
            and not worker.shared_worker().given_up
        )

    def _compact_in_worker(
        self,
        c: compaction.Compaction,
        version: Version,
        snapshots: list[int],
        target: int | None,
        numbers: list[int],
        manual: bool,
    ) -> list[TableMeta] | None:
        """Run compaction `c` in the worker process (see `minilsm.worker`) and move its outputs into the store.

        Called with the mutex released.  Returns the outputs, renumbered as the
        store's own tables, or None if the worker is unavailable (the caller then
        runs `c` itself, as it does when a file operation of the job failed in the worker's process).  Any
        other failure of the job itself (a damaged input) raises, as in-process.
        Meanwhile the background thread flushes a memtable that fills
        (`_flush_while_merging`); `compact_range`'s thread leaves that to it.
        Once the store is closing, the job is abandoned with `ClosedError`.
        """

        def job(scratch: str) -> worker.CompactionJob:
            return worker.CompactionJob(
                dirname=self.path,
                scratch=scratch,
                level=c.level,
                output_level=c.output_level,
                inputs=[t.number for t in c.inputs],
                overlaps=[t.number for t in c.overlaps],
                snapshots=snapshots,
                below=version.ranges,
                drops_all_tombstones=c.drops_all_tombstones,
                target_file_size=target,
                block_size=self.options.block_size,
                bits_per_key=self.options.bits_per_key,
            )

        def meanwhile() -> None:
            self._abandon_if_closing()
            if not manual:
                self._flush_while_merging()

        return self._run_in_worker(job, numbers, meanwhile, "compacting")

    def _flush_in_worker(self, mem: MemTable, snapshots: list[int], numbers: list[int]) -> list[TableMeta] | None:
        """Have the worker write the frozen `mem` (`worker.FlushJob`); None if it cannot, so the caller flushes.

        Called with the mutex released, from the background thread.  A worker busy with another job (a
        `compact_range` in another thread, another store's compaction) is not waited for.
        """

        def job(scratch: str) -> worker.FlushJob:
            return worker.FlushJob(
                scratch=scratch,
                memtable=mem,
                snapshots=snapshots,
                block_size=self.options.block_size,
                bits_per_key=self.options.bits_per_key,
            )

        try:
            return self._run_in_worker(job, numbers, self._abandon_if_closing, "flushing", wait=False)
        except ClosedError:
            raise  # abandoned by a close: the frozen memtable stays, and its log with it, for the next open
        except Exception as e:
            # Whatever went wrong there (a full disk, say) goes wrong here too and is reported as a failed flush.
            _log.warning("%s: the worker's flush failed (%s); flushing in-process", self.path, e)
            return None

    def _run_in_worker(
        self,
        job: Callable[[str], worker.CompactionJob | worker.FlushJob],
        numbers: list[int],
        meanwhile: Callable[[], None] | None,
        doing: str,
        wait: bool = True,
    ) -> list[TableMeta] | None:
        """Run ``job(scratch)`` in the worker and move its outputs from the scratch directory into the store.

        Returns the outputs, renumbered as the store's own tables, or None if the worker is unavailable (or
        busy, unless `wait`; or if a file operation of the job failed there).  Any other failure of the job
        itself raises, as in-process.  `doing` ("compacting",
        "flushing") names the work in the warning logged when the worker gives up.
        """
        fs = self._fs
        scratch = f"{self.path}/{worker.scratch_name()}"
        fs.makedirs(scratch)
        try:
            try:
                outputs = worker.shared_worker().run(job(scratch), meanwhile, stats=self._stats, wait=wait)
            except worker.WorkerUnavailableError as e:
                if not e.said:
                    _log.warning("%s: %s; %s in-process instead", self.path, e, doing)
                return None
            # Only the holder of the store's lock gives a table its name (see minilsm.worker).
            metas = []
            for m in outputs:
                n = self._output_number(numbers)
                fs.rename(f"{scratch}/{table_file_name(m.number)}", table_path(self.path, n))
                metas.append(dataclasses.replace(m, number=n))
            fs.sync_dir(self.path)
        finally:
            worker.remove_scratch(fs, scratch)
        return metas

    def _abandon_if_closing(self) -> None:
        """Asked every 20 ms while a job waits for the worker: once the store is closing, abandon the job.

        Raises `ClosedError`; `Worker.run` then ends the worker and the job's caller installs nothing, so that
        close() waits neither for the job nor for another store's job that keeps the worker busy, and a worker
        that is stuck (SIGSTOP) holds nothing up.
        """
        if self._closing:
            raise self._closed_error()

    def _flush_while_merging(self) -> None:
        """While a merge runs: flush a frozen memtable now, so that writers need not wait for the merge.

        LevelDB does the same in the middle of a long compaction.  Called by the
        background thread, between waits for the worker's merge or between the
        entries of its own (`_flushing_meanwhile`).  Only that thread flushes,
        and it is the one here, so a memtable is never flushed twice.  The
        flushed table is newer than everything the merge reads and stays in
        level 0; the merge's outputs are installed into the version of that
        moment.  Called with the mutex released.
        """
        if self._imm is None:  # a peek without the lock, as a read takes `_imm`
            return
        with _Relocked(self._mutex):
            if self._imm is not None and not self._closing and self._bg_error is None:
                self._flush_immutable(in_worker=False)  # the worker is busy with the merge, or not to be used
                self._cond.notify_all()

    def _flushing_meanwhile(self, entries: Iterator[Entry]) -> Iterator[Entry]:
        """`entries`, with a pause every `FLUSH_CHECK_ENTRIES` to flush a frozen memtable (`_flush_while_merging`).

        For a merge in the background thread itself (no worker), as LevelDB's compaction loop checks for an
        immutable memtable between keys: writers then wait for a flush, not for the whole merge.  The wrapper
        costs about 40 ns an entry (a generator step and a modulo), beside the 3 us the merge spends on each.
        """
        for n, entry in enumerate(entries):
            if not n % FLUSH_CHECK_ENTRIES:
                self._flush_while_merging()
            yield entry

    def _unlocked(self) -> _Unlocked:
        """Release the mutex around slow I/O in background mode; keep it inline (deterministic)."""
        return _Unlocked(self._mutex if self.options.background else None)

    def _number_lock(self) -> _Unlocked:
        # File numbers are taken under the mutex; in background mode the caller released it.
        return _Relocked(self._mutex if self.options.background else None)

    # -- files, versions and the manifest ------------------------------------------------

    def _new_file_number(self) -> int:
        n = self._next_file
        self._next_file = n + 1
        return n

    def _log_path(self, number: int) -> str:
        return f"{self.path}/{log_file_name(number)}"

    def _new_builder(self, number: int) -> TableBuilder:
        return TableBuilder(
            self._fs, self.path, number, block_size=self.options.block_size, bits_per_key=self.options.bits_per_key
        )

    def _open_table(self, number: int) -> TableReader:
        return TableReader.open(
            self._fs, self.path, number, self._stats, block_cache=self._block_cache, file_cache=self._file_cache
        )

    def _install_version(self, version: Version) -> None:
        old: Version | None = getattr(self, "_version", None)  # None while recovery installs the first
        if old is not None:
            old.superseded = True
        version.installed_at = self._last_seq  # under the mutex, so no write lands in between
        self._versions.add(version)
        self._version = version

    def _write_manifest(self) -> None:
        self._manifest.write(
            ManifestState(
                next_file_number=self._next_file,
                last_sequence=self._last_seq,
                log_number=self._log_floor(),
                levels=self._version.metas(),
                compact_pointers=list(self._compact_pointers),
            ),
        )

    def _log_floor(self) -> int:
        """The oldest log still holding writes that no table has: replay starts here."""
        return self._imm_log_number if self._imm is not None else self._log.number

    def _list_files(self, names: list[str] | None = None) -> Iterator[tuple[int, str, bool]]:
        """(number, "sst" or "log", temporary?) of each table or log file, by the names the store writes only,
        among `names` (the directory's, listed here if not given).

        A look-alike name (a copy saved as ``1.log``) is not the store's: replaying it as log 1 would
        apply that log twice.
        """
        for name in self._fs.listdir(self.path) if names is None else names:
            tmp = name.endswith(TEMP_SUFFIX)
            base = name.removesuffix(TEMP_SUFFIX)
            number = parse_table_file_name(base)
            if number is not None:
                yield number, "sst", tmp
            elif (number := parse_log_file_name(base)) is not None:
                yield number, "log", tmp

    def _delete_obsolete_files(self) -> None:
        """Remove tables no live Version holds, logs the manifest no longer needs, and crash leftovers.

        A Version stays alive while any read, iterator or the store itself holds it
        (CPython frees it the moment the last holder lets go), so a table is never
        deleted under a reader.  Nothing is deleted once a write-path operation has failed: the
        manifest on disk may then not be the one in memory (a flush whose manifest write failed
        still needs its log), and the next open sweeps against the manifest it reads.
        """
        if self._bg_error is not None:
            return
        live = set(self._pending_outputs)
        for v in list(self._versions):
            live |= v.numbers()
        keep_log = self._log_floor()
        fs = self._fs
        # Deleting garbage is never worth failing for: what stays now goes at the next
        # sweep or open (as LevelDB, which ignores these errors too).
        try:
            files = list(self._list_files())
        except OSError:
            return
        for number, kind, tmp in files:
            if kind == "sst" and (number in live and not tmp):
                continue
            if kind == "sst" and tmp and number in self._pending_outputs:
                continue
            if kind == "log" and not tmp and number >= keep_log:
                continue
            name = (table_file_name(number) if kind == "sst" else log_file_name(number)) + (TEMP_SUFFIX if tmp else "")
            with contextlib.suppress(OSError):
                fs.remove(f"{self.path}/{name}")
            if kind == "sst" and not tmp:
                self._file_cache.evict(table_path(self.path, number))
        with contextlib.suppress(OSError):
            if fs.exists(f"{self.path}/{MANIFEST_NAME}.tmp"):
                fs.remove(f"{self.path}/{MANIFEST_NAME}.tmp")

    # -- introspection (assembled by minilsm.report) ----------------------------------

    def stats(self, reset: bool = False, *, measure_space: bool = False) -> DBStats:
        """A frozen snapshot of the counters, per level and per table; with `reset`, also zero them all.

        A reset takes what the snapshot holds off the counters rather than zeroing them, so that a read
        other threads make while the snapshot is taken counts in the next one, not in neither.

        O(tables).  `measure_space` also scans the whole store for `live_bytes` and so
        `space_amplification`, O(data); that scan's block reads count after the snapshot.
        """
        version = self._version
        snap = report.snapshot(self._stats, version, self._memtable_bytes())
        if reset:
            report.reset(self._stats, version, snap)
        if measure_space:
            snap = dataclasses.replace(snap, live_bytes=report.live_bytes(self.iterator()))
        return snap

    def get_property(self, name: BytesLike | str) -> bytes | None:
        """A property of the store as text, as plyvel's `get_property` (LevelDB's ``GetProperty``); None for a
        name it does not know.

        The names, each with LevelDB's ``leveldb.`` prefix or ``minilsm.``: ``num-files-at-level<N>``;
        ``stats``, what ``minilsm stats`` prints (`db.stats()` as text); ``sstables``, what ``minilsm
        tables`` prints (`db.tables()`); ``approximate-memory-usage``, the bytes the memtables and the block
        cache hold (LevelDB counts the same two).  Returns bytes, as plyvel does.  O(tables).
        """
        if self._closed:
            raise self._closed_error()
        # Any bytes-like name, as a key may be (`str()` of a memoryview is its repr); another type is a
        # caller's mistake, which plyvel refuses too, not a name to answer None for.
        if isinstance(name, str):
            text = name
        elif isinstance(name, bytes | bytearray | memoryview):
            text = bytes(name).decode("utf-8", "replace")
        else:
            raise TypeError(f"a property name must be bytes or str, not {type(name).__name__}")
        family, _, prop = text.partition(".")
        if family not in ("leveldb", "minilsm"):
            return None
        if prop.startswith("num-files-at-level"):
            level = prop.removeprefix("num-files-at-level")
            levels = self._version.levels
            if not (level.isascii() and level.isdigit() and int(level) < len(levels)):  # no sign, space or "٣"
                return None
            answer = str(len(levels[int(level)]))
        elif prop == "stats":
            answer = report.format_stats(self.stats())
        elif prop == "sstables":
            answer = report.format_tables(self.tables())
        elif prop == "approximate-memory-usage":
            cache = self._block_cache
            answer = str(self._memtable_bytes() + (cache.usage if cache is not None else 0))
        else:
            return None
        return answer.encode()

    def _memtable_bytes(self) -> int:
        """What the memtable and the frozen one (if any) hold, by their own accounting.  O(1), lock-free.

        A memtable frozen between the two reads is both (`_freeze_memtable` names it frozen before it replaces
        it): counted once.  Without the mutex, so that a monitor's `stats()` never waits out an inline merge.
        """
        mem, imm = self._mem, self._imm
        if imm is None or imm is mem:
            return mem.approximate_size
        return mem.approximate_size + imm.approximate_size

    def tables(self) -> list[TableInfo]:
        """Every live table: level, file, size, entries, tombstones, key range, filter and its FPR.  O(tables)."""
        return report.table_infos(self._version)

    def explain(self, key: BytesLike) -> ReadTrace:
        """Read `key` and return the trace of that read: each memtable and table it looked at, and why.

        This is the real read path run with a trace list, so it counts in `stats()`
        like any `get` (the counters stay a true account of the work done).  It
        holds the write lock for the read so that no flush or compaction changes
        the tables under it, which lets each step name its table's level.

        Cost: a `get`'s, plus O(tables) to find each table's level; writes wait for it meanwhile.
        """
        key = check_key(key)
        trace: Trace = []
        with self._mutex:
            if self._closed:
                raise self._closed_error()
            version, seq = self._version, self._last_seq
            value = self._get(key, seq, None, trace)
        return report.read_trace(key, seq, value, trace, version)

    def approximate_sizes(self, *ranges: tuple[BytesLike | None, BytesLike | None]) -> list[int]:
        """About how many bytes of table data each ``(start, stop)`` range of keys takes (None: unbounded).

        As LevelDB's `GetApproximateSizes` and plyvel's `approximate_sizes`: from the tables' indexes in
        memory, to the granularity of a data block, with no block read; writes still in the memtable are
        not counted (flush first to count them).  O(tables) per range.
        """
        bounds = [(None if a is None else check_key(a), None if b is None else check_key(b)) for a, b in ranges]
        if self._closed:
            raise self._closed_error()
        version = self._version
        return [
            max(0, version.approximate_offset(stop) - version.approximate_offset(start))
            if start is not None
            else version.approximate_offset(stop)
            for start, stop in bounds
        ]

    def approximate_size(self, start: BytesLike | None, stop: BytesLike | None) -> int:
        """`approximate_sizes` of the one range [start, stop), as plyvel's `approximate_size`.  O(tables), no
        block read."""
        return self.approximate_sizes((start, stop))[0]

    def may_contain(self, key: BytesLike) -> bool:
        """False only if `key` is certainly absent, judged by the memtables and the filters: no data block is read.

        O(memtables + tables a read would probe); counts nothing in `stats()`.
        """
        key = check_key(key)
        if self._closed:
            raise self._closed_error()
        return report.may_contain(key, self._last_seq, (self._mem, self._imm), self._version)

    @property
    def version(self) -> Version:
        """The current set of live tables (immutable).  O(1).

        While held, its tables' files are not deleted, as an iterator's view keeps them."""
        return self._version

    @property
    def last_sequence(self) -> int:
        """The sequence number of the newest acknowledged write.  O(1)."""
        return self._last_seq


_open_stores: weakref.WeakSet[DB] = weakref.WeakSet()
"""Every store this process has opened and not yet collected, for the at-fork hook."""


class _BackgroundHold:
    """Whether a store's background thread holds it (for a job, or a look for one), and how often it let go.

    Apart from the store, so that the thread can say it holds the store before it takes it from its weak
    reference: then a store that is open, held by no one else and not held by its thread is never seen, as
    dropping it frees it.  An open refused by the store's lock reads this (`_wait_for_a_dropped_store`).
    """

    __slots__ = ("held", "let_go")

    def __init__(self) -> None:
        self.held = False
        self.let_go = 0


def _wait_for_a_dropped_store(path: str, may_wait: bool) -> bool | None:
    """Whether an open refused by the lock of a store of this process on `path` should ask again: yes once the
    store's background thread, which holds it (for a job, or a look for one), lets go (if `may_wait`), or once
    the store is gone; no, at once, if the store is open and its thread does not hold it (someone else does).
    None if no store is open there: freed since, or being freed (or open under another name, or opening).

    Waits `DROPPED_STORE_WAIT` seconds at most, holding the store only weakly, so that a store dropped without
    `close()` is freed as its thread lets go.
    """
    for db in list(_open_stores):
        if db.path == path and not db._closed:
            break
    else:
        return None
    hold, ref, cond, done = db._bg_hold, weakref.ref(db), db._cond, db._bg_done
    del db
    if ref() is None:
        return True  # the thread let go meanwhile, and this reference was the last: the store and its lock are gone
    if not may_wait or hold is None or done is None or not hold.held:
        return False
    let_go = hold.let_go
    deadline = time.monotonic() + DROPPED_STORE_WAIT
    with cond:
        while True:
            alive = ref()
            if alive is None or hold.let_go != let_go or done.is_set():
                return True
            del alive
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            cond.wait(min(left, 0.1))  # the thread notifies as each job ends; this only bounds a missed one


def _forget_stores_after_fork() -> None:
    for db in list(_open_stores):
        if not db._closed:
            db._forget_after_fork()


os.register_at_fork(after_in_child=_forget_stores_after_fork)


def _background_loop(
    ref: weakref.ref[DB], cond: threading.Condition, done: threading.Event, hold: _BackgroundHold
) -> None:
    """The background thread of the store `ref` names: flushes and compactions, until it closes or is collected;
    sets `done` as it ends.

    It holds the store only while it looks for work and runs one job, never while it waits or between jobs, so
    a store dropped without `close()` is freed as the job under way ends, or at once if none is (the flushes and
    compactions still due are left undone: the log holds what the store acknowledged, for the next open), and
    the thread ends then, or within `SEEK_CHECK_INTERVAL` if it was waiting.  That is also how often an idle
    thread looks again, since reads make a seek compaction due without notifying.  Its own failure is logged
    on the `minilsm` logger as it ends (a writer's, recorded meanwhile, is the writer's to raise).
    """
    try:
        failure: BaseException | None = None
        path = ""
        with cond:
            try:
                while True:
                    hold.held = True  # before it is taken: see _BackgroundHold
                    db = ref()
                    if db is None:
                        return
                    try:
                        path = db.path
                        if db._closing or db._bg_error is not None:
                            cond.notify_all()
                            break
                        idle = not db._has_background_work()
                        if not idle:
                            failure = db._do_one_background_job()
                            cond.notify_all()
                    finally:
                        # Let go between jobs too, not only while waiting: a store dropped during this job is freed
                        # here, and its lock with it, as LevelDB's destructor waits for the compaction under way
                        # but not for those due after it (an open or a tool waiting for that lock: `lock_store`).
                        del db
                        hold.let_go += 1
                        hold.held = False
                    if idle:
                        cond.wait(SEEK_CHECK_INTERVAL)
            except BaseException as e:
                # Raised outside a job (a bug in choosing the next one): this thread ends, and writers
                # waiting for it would wait forever unless they learn it is gone.
                failure = e
                alive = ref()
                if alive is not None and alive._bg_error is None:
                    alive._bg_error = e
                del alive
                cond.notify_all()
        if failure is not None:
            # Recorded for the next write to raise; but a store that takes no write after it (a reader, one
            # closed next) would never say, and a bug's traceback would go with it.  Logged outside the mutex.
            _log.error(
                "%s: background flush or compaction failed; the store is read-only until reopened: %s",
                path,
                failure,
                exc_info=failure,
            )
    finally:
        done.set()  # the last this thread does: nothing of the store's is touched after it


def _check_flag(name: str, value: object) -> None:
    """Refuse a call's flag that is neither bool nor None, as plyvel and `Options` do.

    Taken for its truth, ``sync="false"`` would sync and ``reverse="no"`` would reverse the scan.  None
    is `sync`'s "as the store's options say" and, as in plyvel, False for an iterator's flags.
    """
    if value is not None and value is not True and value is not False:
        raise TypeError(f"{name} must be bool, not {type(value).__name__}")


def _check_read_options(verify_checksums: object, fill_cache: object) -> bool:
    """Check plyvel's two read options (bool, or None for False); returns whether the read may fill the block cache.

    `verify_checksums` is only checked: every block read from a file is verified, asked or not.
    """
    _check_flag("verify_checksums", verify_checksums)
    _check_flag("fill_cache", fill_cache)
    return fill_cache is True


def _outcome(kind: int) -> str:
    return "found" if kind == KIND_VALUE else "tombstone"


_LARGEST: Final = attrgetter("largest")
_SMALLEST: Final = attrgetter("smallest")


def _meets(t: TableReader, start: bytes | None, stop: bytes | None) -> bool:
    return (start is None or t.largest >= start) and (stop is None or t.smallest < stop)


def _acquire(lock: threading.Lock, taken: list[bool]) -> None:
    """`lock.acquire()`, appending True to `taken` once the lock is held, before any signal handler can run.

    A KeyboardInterrupt (Ctrl-C) is raised in the main thread either while it
    waits (the lock is then not taken) or just after the acquire returns (it
    is).  Called from C through `map`, the acquire's result lands in `taken`
    with no bytecode in between, so `taken` tells the two apart.  (CPython runs
    signal handlers between bytecodes, and inside a lock wait only when the wait
    then gives up.)
    """
    taken.extend(map(lock.acquire, (True,)))


class _Unlocked:
    """Context manager that releases a held lock and takes it back (no-op for None).

    The caller's own ``with lock:`` releases the lock on the way out, so the lock
    must be held again whatever happens: an interrupt while waiting for it is
    raised only once it is held.  Otherwise the caller would release another
    thread's hold, and two threads would be inside the store's critical sections.
    """

    __slots__ = ("_lock",)

    def __init__(self, lock: threading.Lock | None) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def __exit__(self, *exc: object) -> None:
        if self._lock is None:
            return
        interrupt: BaseException | None = None
        taken: list[bool] = []
        while not taken:
            try:
                _acquire(self._lock, taken)
            except BaseException as e:
                interrupt = e
        if interrupt is not None:
            raise interrupt


class _Relocked(_Unlocked):
    """Context manager that takes a lock for a moment inside an `_Unlocked` block.

    If an interrupt leaves `__enter__`, the lock is not held, since `__exit__`
    will not run to release it (and the enclosing `_Unlocked` takes it back).
    """

    __slots__ = ()

    def __enter__(self) -> None:
        if self._lock is None:
            return
        taken: list[bool] = []
        try:
            _acquire(self._lock, taken)
        except BaseException:
            if taken:  # interrupted just after the acquire
                self._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            self._lock.release()


class _ClosedSteps:
    """A closed `DBIterator`'s steps: each raises `ClosedError`, where an iterator run out would stop, so that a
    closed iterator does not pass for an empty one.  A loop running over the iterator holds its merge itself,
    which `close` ends: such a loop stops."""

    __slots__ = ()

    def __iter__(self) -> _ClosedSteps:
        return self

    def __next__(self) -> NoReturn:
        raise ClosedError("the iterator is closed")


_CLOSED_STEPS: Final = _ClosedSteps()


class DBIterator(Generic[_Item]):
    """An ordered iterator over a fixed view of the store: `next`, and plyvel's `prev`, `seek`, `seek_to_start`
    and `seek_to_stop`.

    It stands between two keys, as plyvel's does: `next()` yields the item after that place and moves past it,
    `prev()` yields the one before it and moves back (a `reverse` iterator's `next` moves back and its `prev`
    forward), and the seeks move the place.  It stays within its range, and its view (the memtables and
    tables of the moment it was made) is held until it is closed or dropped, as a LevelDB iterator holds its
    version.

    `iter()` hands out the merging generator itself (or a C `map` over it for keys or values alone), so a loop
    over the iterator costs one generator step per key; `next()` costs one method call more.  A seek, and a
    step in the other direction than the last, starts a new merge at the iterator's place: O(sources), and a
    block read per source at its first step, as LevelDB's iterator re-seeks its sources when it changes
    direction.  A `for` loop over the iterator follows a move made in its body, as plyvel's loop does: its
    next step yields the item after the new place (from that move on, two generator steps more per item:
    `_follow`).  An exception in a step or a move (an interrupt, a failed read) leaves
    the iterator at its place, or at the move's: the next step goes on from there.  (An interrupt that lands as
    a step returns, once its item has left the merge, loses that item, as it would from any iterator's
    `next()`: CPython runs a signal handler right after a call returns, before the caller has the value.)
    Once the store closes, the next step raises `ClosedError` (a loop already running too), and so does every
    use of the iterator after that.
    """

    __slots__ = (
        "_closed", "_forward", "_gen", "_it", "_key_prefix", "_pick", "_pin", "_reverse", "_scan", "_start",
        "_stop",
    )  # fmt: skip
    _it: Iterator[_Item]

    def __init__(
        self,
        pin: _Pin,
        start: bytes | None,
        stop: bytes | None,
        reverse: bool,
        include_key: bool,
        include_value: bool,
        key_prefix: bytes = b"",
    ) -> None:
        self._pin = pin
        self._start = start  # the range [start, stop), None for unbounded, after the include_* flags
        self._stop = stop
        self._reverse = reverse
        self._key_prefix = key_prefix  # a `PrefixedDB`'s, which its keys leave off
        self._pick = _projection(include_key, include_value, len(key_prefix))
        self._closed = False
        self._open(stop if reverse else start or b"", not reverse)

    def _open(self, gap: bytes | None, forward: bool) -> None:
        """Start a merge at `gap` (a key the place lies just before; None: past every key), forward or backward."""
        start, stop = self._start, self._stop
        if forward:
            if gap is None:
                start = stop = b""  # nothing lies after the end
            elif start is None or gap > start:
                start = gap
        elif gap is not None and (stop is None or gap < stop):
            stop = gap
        gen, scan = self._pin.merge(start, stop, not forward)
        scan.origin, scan.forward = gap, forward
        it: Any  # an Iterator[_Item], `_Item` as `_Scans.iterator`'s overloads pick it from the same two flags
        it = gen if self._pick is None else map(self._pick, gen)
        # In one line, which an interrupt (KeyboardInterrupt) cannot cut in two: one cut short before it leaves the
        # old merge, cancelled as moved, which the next step replaces (`_step`).
        self._scan, self._forward, self._it, self._gen = scan, forward, it, gen  # `_forward`: in key order

    def _place(self) -> bytes | None:
        """The key the iterator stands just before (None: past every key): where its merge began, or by the key
        that merge yielded last."""
        scan = self._scan
        last = scan.last
        if last is None:
            return scan.origin
        return last + b"\x00" if scan.forward else last  # k + b"\x00" is the key right after k

    def _move(self, gap: bytes | None, forward: bool) -> None:
        """Stand just before `gap`, to step forward or backward from there; ends the merge under way (a loop
        stepping it goes on with the iterator, `_follow`)."""
        self._pin.check()  # first: once the store is closed, every move says so, as `next` does
        if self._closed:
            raise ClosedError("the iterator is closed")
        scan = self._scan
        scan.cancel(_MOVED, self._follow if scan.looped else None)
        self._open(gap, forward)

    def _turn(self, forward: bool) -> None:
        """Step `forward` (in key order) or back from here, in a new merge: `prev` after `next`, `next` after
        `prev`, or on from the place where the merge under way was lost (`_step`)."""
        if not self._closed:  # closed, the step ends the iteration as `next` does
            self._move(self._place(), forward)

    def __iter__(self) -> Iterator[_Item]:
        """The merge itself, for a loop: one generator step per item.  O(1), or a new merge at the place, as a
        seek, when the last step was `prev` (or an exception ended the merge)."""
        self._pin.check()
        self._resume(not self._reverse)
        self._scan.looped = True  # a move then hands the loop on to `_follow`
        return self._it

    def _resume(self, forward: bool) -> None:
        """Start a new merge at the place if the last step went the other way than `forward` (`prev`), or the
        merge was lost (see `_step`): a loop goes on from the place."""
        scan = self._scan
        lost = scan.message is not None or (getattr(self._gen, "gi_frame", None) is None and not scan.ended)
        if self._forward is not forward or lost:  # (a generator that is over has no frame)
            self._turn(forward)

    def _follow(self) -> Iterator[tuple[bytes, bytes]]:
        """The pairs a loop over this iterator goes on with once a move in its body (a seek, `prev`) superseded
        the merge it was stepping: on from the iterator's place, through the merge of each later move, as a
        plyvel loop steps its iterator.  Two generator steps more per pair (this one and the superseded merge's
        `yield from`), for the loops that moved."""
        while True:
            self._pin.check()
            if self._closed:
                return  # closed in the loop's body: the loop stops, as `close` says
            self._resume(not self._reverse)  # after `prev`, a move cut short, or a merge an exception ended
            gen, scan = self._gen, self._scan
            try:
                # Not `yield from`, which would close the iterator's own merge when the loop breaks off.
                for pair in gen:  # noqa: UP028
                    yield pair
            except ClosedError as e:
                restate_closed(e, self._pin.message)
                if e.args != (_MOVED,):
                    raise
                continue  # moved again
            if self._closed or scan.ended:
                return

    def __next__(self) -> _Item:
        """The item after the place (before it, reversed), moving past it; StopIteration at the end of the range.

        A loop's step and one method call more: O(log sources) per version passed over (a key's older
        versions, tombstones).  After `prev`, a new merge first, as a seek.
        """
        return self._step(not self._reverse)

    def prev(self) -> _Item:
        """Step back: the item before the iterator's place (after it, for a reverse iterator), as plyvel's `prev`.

        Raises StopIteration at the start of the range (the end, reversed).  After `next` yielded an item,
        `prev` yields that item again.  Cost: as `next`'s, O(log sources) per version passed over; after
        `next`, a new merge first, as a seek.
        """
        return self._step(self._reverse)

    def _step(self, forward: bool) -> _Item:
        """The next item `forward` (in key order) or back; turns first if the last step went the other way."""
        if self._forward is not forward:
            self._turn(forward)
        try:
            return next(self._it)
        except StopIteration:
            # A scan its store's close ended raised ClosedError once and is over: keep saying why.
            self._pin.check()
            if self._closed or self._scan.ended:
                raise
        except ClosedError as e:
            # The store's close wins over the scan's own reason: a move that a close in another thread cut
            # short leaves the old merge in place, cancelled as moved.
            restate_closed(e, self._pin.message)
            if e.args != (_MOVED,):
                raise
        # The merge was lost without running out: an exception in an earlier step (an interrupt, a failed read)
        # ended it, or an interrupt cut a move short after it cancelled the merge.  The place is still known:
        # go on from there rather than end the iteration in mid-range.
        self._turn(forward)
        return next(self._it)

    def seek(self, target: BytesLike) -> None:
        """Stand just before `target`: `next` then yields the first item at or after it, and `prev` the last one
        before it (the other way round for a reverse iterator), within the iterator's range, as plyvel's `seek`.

        Cost: a new merge at `target`, O(sources) (a deeper level's tables found by bisection); the next step
        then reads a block of each table source (unless cached) and sorts in the keys written to the
        memtable since its last scan.
        """
        self._move(self._key_prefix + check_key(target), not self._reverse)

    def seek_to_start(self) -> None:
        """Stand before the first key of the range, as plyvel's `seek_to_start`.  A new merge, O(sources), as
        `seek`'s."""
        self._move(self._start or b"", not self._reverse)

    def seek_to_stop(self) -> None:
        """Stand after the last key of the range, as plyvel's `seek_to_stop`.  A new merge, O(sources), as
        `seek`'s."""
        self._move(self._stop, not self._reverse)

    def close(self) -> None:
        """Release the view this iterator holds.  Loops already running over it stop; from then on every use (a
        step, a seek, a new loop) raises `ClosedError`, as plyvel's closed iterator raises `RuntimeError`.
        Closing twice is harmless.

        A step running in another thread at this moment cannot be stopped from here: that
        thread's loop runs on to its end, and the view is held until the iterator is dropped.

        Cost: O(sources); if a flush or compaction has replaced the view's tables since and no other iterator
        holds the view, also a sweep for the files no view holds any more (a directory listing, under the
        store's lock).
        """
        if self._closed:
            return
        self._closed = True
        self._it = _CLOSED_STEPS
        try:
            self._gen.close()
        except ValueError:  # "generator already executing"
            return
        self._scan.drop()  # the scan keeps its heap and sources in its handle, which this iterator keeps
        self._pin.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        # A copy would share the scan's generator and pin: closing either would end the other.
        raise TypeError("a minilsm.DBIterator cannot be pickled or copied; make another with iterator(start=...)")


class RawIterator:
    """plyvel's `RawIterator` (LevelDB's own ``Iterator``): it stands *on* an item, not between two.

    `valid()` says whether it does; `key()`, `value()` and `item()` read that item; `next()` and `prev()`
    move to the item after or before it, and leave the iterator not valid past either end; `seek_to_first()`,
    `seek_to_last()` and `seek(key)` (the first key at or after `key`) place it.  A new iterator is not valid
    until placed.  Reading or stepping one that is not valid raises `IteratorInvalidError`, as plyvel's does;
    once it or its store is closed, `ClosedError`.

    It is a `DBIterator` over the whole view with the item it last yielded: that iterator's place is just after
    the item, or just before it after a step back.  So a step costs what a `DBIterator` step does, and a step
    the other way than the last starts a new merge, as LevelDB's re-seeks its sources.
    """

    __slots__ = ("_after", "_closed", "_it", "_item", "_why")

    def __init__(self, it: DBIterator[tuple[bytes, bytes]]) -> None:
        self._it = it
        self._item: tuple[bytes, bytes] | None = None
        self._after = True  # whether `_it` stands after `_item` (else before it)
        self._why = "it was never placed; place it with a seek first"
        """Why it stands on no item, while it does not: for `IteratorInvalidError` to say."""
        self._closed = False

    def valid(self) -> bool:
        """Whether the iterator stands on an item.  O(1)."""
        self._check()
        return self._item is not None

    def key(self) -> bytes:
        """The key of the item it stands on; `IteratorInvalidError` if none.  O(1): the item is held."""
        return self._current()[0]

    def value(self) -> bytes:
        """The value of the item it stands on; `IteratorInvalidError` if none.  O(1)."""
        return self._current()[1]

    def item(self) -> tuple[bytes, bytes]:
        """The (key, value) pair it stands on; `IteratorInvalidError` if none.  O(1)."""
        return self._current()

    def seek_to_first(self) -> None:
        """Stand on the first item; not valid if the view holds none.  A new merge, O(sources), and a step, as
        `seek`."""
        self._check()
        self._it.seek_to_start()
        self._land(forward=True)

    def seek_to_last(self) -> None:
        """Stand on the last item; not valid if the view holds none.  A new merge (backward), O(sources), and a
        step, as `seek`."""
        self._check()
        self._it.seek_to_stop()
        self._land(forward=False)

    def seek(self, target: BytesLike) -> None:
        """Stand on the first item whose key is at or after `target`; not valid if there is none.

        Cost: a new merge over the sources at `target`, O(sources), and a step, which reads a block of each
        table source (unless cached): `DBIterator.seek`.
        """
        self._check()
        self._it.seek(target)
        self._land(forward=True)

    def next(self) -> None:
        """Move to the next item; not valid past the last.  A `DBIterator` step, O(log sources) per version
        passed over; after `prev` (or a seek to the last), a new merge first."""
        self._current()
        if not self._after:
            next(self._it)  # the current item again: the place moves past it
        self._land(forward=True)

    def prev(self) -> None:
        """Move to the item before; not valid before the first.  As `next`: a step, O(log sources) per version
        passed over, and a new merge first when the last move went forward (`next`, `seek` or `seek_to_first`)."""
        self._current()
        if self._after:
            self._it.prev()  # the current item again: the place moves before it
        self._land(forward=False)

    def _land(self, *, forward: bool) -> None:
        self._item = None  # until the step below succeeds: an exception leaves the iterator not valid
        self._after = forward
        # `_why` is set only when the step does not land, so that a step that does costs nothing more.
        try:
            self._item = next(self._it) if forward else self._it.prev()
        except StopIteration:  # past the end: not valid
            self._why = f"it moved {'past the last' if forward else 'before the first'} one; place it again with a seek"
        except BaseException:
            self._why = "its last move failed; place it again with a seek"
            raise

    def _current(self) -> tuple[bytes, bytes]:
        self._check()
        item = self._item
        if item is None:
            raise IteratorInvalidError(f"the raw iterator stands on no item: {self._why}")
        return item

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("the raw iterator is closed")
        self._it._pin.check()

    def close(self) -> None:
        """Release the view it holds; every later use raises `ClosedError`.  Closing twice is harmless.  Costs
        what `DBIterator.close` does."""
        self._closed = True
        self._item = None
        self._it.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        raise TypeError("a minilsm.RawIterator cannot be pickled or copied; make another with raw_iterator()")


def _projection(include_key: bool, include_value: bool, cut: int) -> Callable[[tuple[bytes, bytes]], Any] | None:
    """What an iterator yields of each (key, value) pair, its keys without their first `cut` bytes (a
    `PrefixedDB`'s prefix); None for the pair itself, which costs nothing per pair."""
    if not include_key:
        return itemgetter(1)
    if not cut:
        return None if include_value else itemgetter(0)
    if include_value:
        return lambda pair: (pair[0][cut:], pair[1])
    return lambda pair: pair[0][cut:]


_MOVED: Final = "the iterator moved (a seek, or a step the other way) while this merge was under way"
"""Why a merge that a move superseded ends; a loop over the iterator follows the move instead (`_follow`)."""


class _Pin:
    """What a `DBIterator` reads: the memtables and version of one moment, and the sequence number it reads at.

    Held until the iterator is closed (`release`) or dropped, so that it can seek and turn.  Each merge of
    the view is a `_Scan`, which holds the pin while a loop may step it; the pin refers to its latest scan
    weakly (no reference cycle: dropping an unclosed iterator frees the view at once).  The store lists
    its pins weakly, to `cancel` every live iterator when it closes.
    """

    __slots__ = ("__weakref__", "_db", "_scan", "at", "imm", "mem", "message", "version")

    def __init__(self, db: DB, at: int, mem: MemTable, imm: MemTable | None, version: Version) -> None:
        self._db: DB | None = db
        self.at = at
        self.mem: MemTable | None = mem
        self.imm = imm
        self.version: Version | None = version  # keeps the tables it reads from being deleted
        self.message: str | None = None  # set by `cancel`: the ClosedError's message
        self._scan: weakref.ref[_Scan] | None = None

    def merge(
        self, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> tuple[Generator[tuple[bytes, bytes], None, None], _Scan]:
        """A new scan of [start, stop) of the view (`DB._merge`) and its handle; `ClosedError` once closed."""
        db = self._db
        if db is None:
            raise ClosedError(self.message or "the iterator is closed")
        pairs, scan = db._merge(self, start, stop, reverse)
        self._scan = weakref.ref(scan)
        if self.message is not None:  # the store closed meanwhile, and `cancel` may have missed this scan
            scan.cancel(self.message)
        return pairs, scan

    def check(self) -> None:
        """Raise `ClosedError` once the store has closed.  O(1)."""
        if self.message is not None:
            raise ClosedError(self.message)

    def cancel(self, message: str) -> None:
        """The store is closing (its mutex held): end the scan, and drop the view without deleting anything."""
        self.message = message  # first, so a `merge` that the lines below miss sees it
        self._db = None  # `release` would take the mutex; and a closed store deletes nothing
        self.version = self.mem = self.imm = None
        scan = self._scan() if self._scan is not None else None
        if scan is not None:
            scan.cancel(message)

    def release(self) -> None:
        version, self.version = self.version, None
        self.mem = self.imm = None
        db = self._db  # read once: a close in another thread may clear it meanwhile
        if version is None or db is None:
            return
        # The store deletes files only no live Version holds, so let go of ours before
        # asking; and ask only if the store has moved on and no one else holds this
        # version (a sweep lists the directory, under the mutex): of many iterators on
        # one old view, the last to let go sweeps, not each.
        superseded = version.superseded
        held = weakref.ref(version)
        del version
        if superseded and held() is None:
            db._released_superseded_version()


class _Scan(ScanHandle):
    """The handle of one merge of a `_Pin`'s view, which it holds for as long as a loop may step the merge."""

    __slots__ = ("forward", "looped", "origin", "view")

    def __init__(self, sources: list[Iterator[Entry]], view: _Pin) -> None:
        super().__init__(sources)
        self.view = view
        self.origin: bytes | None = None  # the key the merge began just before (None: past every key)
        self.forward = True  # in key order
        self.looped = False  # handed to a loop (`DBIterator.__iter__`)


class Snapshot(_Scans):
    """A read-only view of the store at one sequence number: `get`, `iterator`, `in`, `[]`."""

    def __init__(self, db: DB, sid: int, seq: int) -> None:
        self._db = db
        self._sid = sid
        self.sequence = seq
        self._closed = False
        # Release the snapshot if it is dropped without close(), so compaction is not held back forever.
        self._finalizer = weakref.finalize(self, db._release_snapshot, sid)

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("the snapshot is closed")
        if self._db.closed:
            raise self._db._closed_error()

    def _check_still_held(self) -> None:
        """After a read: raise if another thread released the snapshot meanwhile.

        Reads take no lock.  Once released, the snapshot no longer holds back compaction, and a read that
        then met the tables of a compaction begun after the release may have missed versions only this
        snapshot kept; the release sets `_closed` before it lets go, so a read that finds it still unset
        here ran wholly while the snapshot was held, and its answer is the snapshot's.
        """
        if self._closed:
            raise ClosedError("the snapshot was closed during the read")

    @overload
    def get(self, key: BytesLike, **kw: Unpack[_ReadOptions]) -> bytes | None: ...
    @overload
    def get(self, key: BytesLike, default: _T, **kw: Unpack[_ReadOptions]) -> bytes | _T: ...
    def get(self, key: BytesLike, default: Any = None, verify_checksums: bool = False, fill_cache: bool = True) -> Any:
        """The value of `key` as of the snapshot, or `default` when it was absent or deleted then (the read
        options as `DB.get`'s).

        Cost: `DB.get`'s, but for a key written since the snapshot the memtable bisects its versions,
        O(log v).
        """
        self._check()
        if fill_cache is not True or verify_checksums is not False:  # as `DB.get`: one test on the usual call
            fill_cache = _check_read_options(verify_checksums, fill_cache)
        value = self._db._get(check_key(key), self.sequence, default, None, fill_cache)
        if self._closed:  # released by another thread during the read (one attribute test when not)
            self._check_still_held()
        return value

    def _new_iterator(self, *scan: Any, key_prefix: bytes = b"") -> DBIterator[Any]:
        self._check()
        it = self._db._iterator(*scan, seq=self.sequence, key_prefix=key_prefix)
        try:
            self._check_still_held()
        except ClosedError:
            it.close()
            raise
        return it  # its tables are fixed now: the snapshot's release no longer matters to it

    def close(self) -> None:
        """Release the snapshot: compaction may now drop the versions only it could see.

        A read of it running in another thread meanwhile gives the snapshot's answer or raises `ClosedError`;
        an iterator made before the release reads on, unchanged.  O(1): those versions go as later flushes and
        compactions reach them.
        """
        if not self._closed:
            self._closed = True
            self._finalizer()

    def release(self) -> None:
        """`close` under plyvel's other name for it.  O(1)."""
        self.close()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        # A copy would share this snapshot's id and finalizer: its close() would release this view, and
        # compaction could then drop versions this snapshot still reads (a wrong answer, not an error).
        raise TypeError("a minilsm.Snapshot cannot be pickled or copied; take another with db.snapshot()")


def _prefixed(prefix: bytes, key: BytesLike, what: str = "key") -> bytes:
    """`key` (or an iterator's bound, `what`) of a view with `prefix`, as the store takes it: the two joined.

    The store's key limit is the whole key's, which a key within it may pass once prefixed: the ValueError then
    says so, where the store's own check would give the caller's key a length it does not have.  O(len(key)).
    """
    whole = prefix + check_key(key, what)
    if len(whole) > MAX_KEY_SIZE:
        raise ValueError(
            f"{what} with the view's {len(prefix)}-byte prefix is {len(whole)} bytes; the maximum is {MAX_KEY_SIZE}"
        )
    return whole


class PrefixedDB(_Writes, _Scans):
    """The keys of `db` that begin with `prefix`, with the prefix left off: plyvel's `PrefixedDB`.

    A view, which holds nothing: each call adds the prefix to the keys it is given and takes it off the keys
    it yields, and an iterator's range (`start`, `stop`, `prefix`, its seeks) lies within the prefix.  So
    ``db.prefixed_db(b"user/").put(b"7", v)`` is ``db.put(b"user/7", v)``, and iterating the view yields
    b"7".  Its batches and snapshots are views too; `prefixed_db` nests.  The store's limits apply to the
    whole key, prefix included.  Each call costs the store's, plus the bytes of the prefix.
    """

    def __init__(self, db: DB, prefix: BytesLike) -> None:
        self.db = db
        self.prefix = check_key(prefix, "prefix")

    @overload
    def get(self, key: BytesLike, **kw: Unpack[_ReadOptions]) -> bytes | None: ...
    @overload
    def get(self, key: BytesLike, default: _T, **kw: Unpack[_ReadOptions]) -> bytes | _T: ...
    def get(self, key: BytesLike, default: Any = None, verify_checksums: bool = False, fill_cache: bool = True) -> Any:
        """`DB.get` of the prefixed key, at its cost plus O(len(prefix) + len(key)) to join the two."""
        return self.db.get(
            _prefixed(self.prefix, key), default, verify_checksums=verify_checksums, fill_cache=fill_cache
        )

    def _deletes_lock(self) -> threading.Lock:
        return self.db._item_deletes

    def put(self, key: BytesLike, value: BytesLike, *, sync: bool | None = None) -> None:
        """`DB.put` of the prefixed key, at its cost plus O(len(prefix) + len(key))."""
        self.db.put(_prefixed(self.prefix, key), value, sync=sync)

    def delete(self, key: BytesLike, *, sync: bool | None = None) -> None:
        """`DB.delete` of the prefixed key, at its cost plus O(len(prefix) + len(key))."""
        self.db.delete(_prefixed(self.prefix, key), sync=sync)

    def write_batch(self, *, transaction: bool = True, sync: bool | None = None) -> PrefixedWriteBatch:
        """A `write_batch` of the store whose keys take the prefix.  O(1)."""
        return PrefixedWriteBatch(self.db.write_batch(transaction=transaction, sync=sync), self.prefix)

    def snapshot(self) -> PrefixedSnapshot:
        """A snapshot of the store, seen through the prefix; close it (or use ``with``) as the store's.  O(1), and
        it keeps what `DB.snapshot` says."""
        return PrefixedSnapshot(self.db.snapshot(), self.prefix)

    def prefixed_db(self, prefix: BytesLike) -> PrefixedDB:
        """A view within this one: the two prefixes, one after the other.  O(len(self.prefix) + len(prefix))."""
        return PrefixedDB(self.db, _prefixed(self.prefix, prefix, "prefix"))

    def _new_iterator(self, *scan: Any) -> DBIterator[Any]:
        return self.db._iterator(*scan, key_prefix=self.prefix)

    def __repr__(self) -> str:
        return f"<minilsm.PrefixedDB {self.prefix!r} of {self.db!r}>"


class PrefixedWriteBatch:
    """A store's `WriteBatch` whose keys take a `PrefixedDB`'s prefix: `put`, `delete`, `clear`, `append`, `write`,
    `approximate_size`, ``with``."""

    def __init__(self, batch: WriteBatch, prefix: bytes) -> None:
        self.batch = batch
        self.prefix = prefix

    def put(self, key: BytesLike, value: BytesLike) -> None:
        """`WriteBatch.put` of the prefixed key: O(len(prefix) + len(key) + len(value))."""
        self.batch.put(_prefixed(self.prefix, key), value)

    def delete(self, key: BytesLike) -> None:
        """`WriteBatch.delete` of the prefixed key: O(len(prefix) + len(key))."""
        self.batch.delete(_prefixed(self.prefix, key))

    def clear(self) -> None:
        """`WriteBatch.clear`: drop every op, O(len(self))."""
        self.batch.clear()

    def append(self, source: WriteBatch | PrefixedWriteBatch) -> None:
        """`WriteBatch.append`: `source`'s ops as they are, their keys not prefixed again (as plyvel's).
        O(len(source))."""
        self.batch.append(source)

    def write(self) -> None:
        """`WriteBatch.write`: one log append for the whole batch (plus an fsync if syncing) and an O(1)
        memtable insert per op."""
        self.batch.write()

    @property
    def closed(self) -> bool:
        """`WriteBatch.closed`: True once written or discarded.  O(1)."""
        return self.batch.closed

    def __len__(self) -> int:
        """Number of ops.  O(1)."""
        return len(self.batch)

    def __repr__(self) -> str:
        return f"<minilsm.PrefixedWriteBatch {self.prefix!r} of {self.batch!r}>"

    @property
    def approximate_size(self) -> int:
        """`WriteBatch.approximate_size`: the encoded batch's bytes, the prefix in each key included.  O(1)."""
        return self.batch.approximate_size

    def __enter__(self) -> Self:
        self.batch.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.batch.__exit__(exc_type, exc, tb)


class PrefixedSnapshot(_Scans):
    """A `Snapshot` seen through a `PrefixedDB`'s prefix: `get`, `iterator`, `in`, `[]`, `close`, ``with``."""

    def __init__(self, snapshot: Snapshot, prefix: bytes) -> None:
        self.snapshot = snapshot
        self.prefix = prefix

    @overload
    def get(self, key: BytesLike, **kw: Unpack[_ReadOptions]) -> bytes | None: ...
    @overload
    def get(self, key: BytesLike, default: _T, **kw: Unpack[_ReadOptions]) -> bytes | _T: ...
    def get(self, key: BytesLike, default: Any = None, verify_checksums: bool = False, fill_cache: bool = True) -> Any:
        """`Snapshot.get` of the prefixed key, at its cost plus O(len(prefix) + len(key))."""
        return self.snapshot.get(
            _prefixed(self.prefix, key), default, verify_checksums=verify_checksums, fill_cache=fill_cache
        )

    def _new_iterator(self, *scan: Any) -> DBIterator[Any]:
        return self.snapshot._new_iterator(*scan, key_prefix=self.prefix)

    def close(self) -> None:
        """Release the snapshot (`Snapshot.close`, also as `release`).  O(1)."""
        self.snapshot.close()

    release = close

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
