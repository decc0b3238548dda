"""Adapters that give minilsm and the stores a Python user would pick instead one shape for the workloads.

Each adapter opens one store in a directory and exposes its operations as
plain callables (``put(key, value)``, ``get(key) -> bytes | None``,
``delete(key)``), bound directly to the store's own method wherever its API
already has that shape, so that no store pays for a wrapper it does not need.
Where a wrapper is unavoidable (SQL statements, LMDB transactions) it is the
least a user would write.

Every store runs with durability matched to minilsm's default ``sync=False``:
each write is handed to the operating system before the call returns (it
survives the process being killed) but is not fsynced (a power cut may lose
the last writes).  `Peer.durability` states each store's setting; `Peer.config`
states everything else that differs from its defaults.  Compression is off in
LevelDB and RocksDB because minilsm does not compress: with it on they would do
other work than minilsm on the same bytes.

A peer whose package is missing is reported with the pip command to install it
(``pip install -e '.[bench]'`` installs them all), never an error.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, cast

import minilsm

Pairs = Iterator[tuple[bytes, bytes]]


class Store:
    """One open store.  `put`, `get`, `delete` are callables set by the adapter; `seek`/`scan` may be None.

    `seek(key, n)` reads up to `n` pairs at and after `key` in key order and
    returns how many it read; `scan()` yields every pair in key order.  Stores
    without ordered iteration leave them None and those workloads skip them.
    """

    put: Callable[[bytes, bytes], object]
    get: Callable[[bytes], bytes | None]
    delete: Callable[[bytes], object]
    seek: Callable[[bytes, int], int] | None = None
    scan: Callable[[], Pairs] | None = None
    thread_safe = True
    """False: the mixed workload serializes the two threads' calls with a lock."""

    def close(self) -> None:
        raise NotImplementedError

    def settle(self) -> float:
        """Wait until background work started by earlier writes is done; returns the seconds waited."""
        return 0.0

    def counters(self, reset: bool = False) -> dict[str, Any] | None:
        """The store's own read counters (minilsm only), optionally zeroing them."""
        return None


@dataclass(frozen=True)
class Peer:
    """A store the benchmark can run: how to open it, and what it is configured to do."""

    name: str
    dist: str
    """The pip distribution that provides it ('' for the standard library)."""
    opener: Callable[[str], Store]
    durability: str
    config: str
    module: str = ""
    """The module to import to check availability ('' when always available)."""
    on_request: bool = False
    """True: run only when named in ``--stores`` (a variant of a store, not a peer a user would pick)."""

    def available(self) -> str | None:
        """None if it can run here, else a note saying why not and how to fix it."""
        if not self.module:
            return None
        try:
            __import__(self.module)
        except ImportError as e:
            return f"{self.name} skipped: {self.module} is not importable ({e}); pip install {self.dist}"
        return None

    def version(self) -> str:
        if self.name.startswith("minilsm"):
            return f"{minilsm.__version__} (this checkout)"
        if not self.dist:
            import platform

            return f"stdlib (Python {platform.python_version()})"
        try:
            return importlib.metadata.version(self.dist)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    def open(self, path: str) -> Store:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return self.opener(path)


# -- minilsm --------------------------------------------------------------------------


def _bind_plyvel_style(store: Store, db: Any) -> None:
    """Point a store's operations at a plyvel-style handle (put/get/delete, iterator(start=...)).

    minilsm follows plyvel's API, so both adapters are the same few bound methods.
    """
    store.put = db.put
    store.get = db.get
    store.delete = db.delete
    iterator = db.iterator

    def seek(key: bytes, n: int) -> int:
        it = iterator(start=key)
        count = len(list(islice(it, n)))
        it.close()
        return count

    store.seek = seek
    store.scan = db.iterator


class MiniLSMStore(Store):
    def __init__(self, path: str, **options: Any) -> None:
        self.db = db = minilsm.DB(path, **options)
        _bind_plyvel_style(self, db)

    def close(self) -> None:
        self.db.close()

    def settle(self) -> float:
        start = time.perf_counter()
        self.db.wait_for_compactions()
        return time.perf_counter() - start

    def counters(self, reset: bool = False) -> dict[str, Any]:
        st = self.db.stats(reset=reset)
        names = (
            "gets",
            "tables_considered",
            "tables_skipped_by_range",
            "filter_checks",
            "filter_negatives",
            "filter_positives",
            "filter_true_positives",
            "block_reads",
            "block_cache_hits",
            "flushes",
            "compactions",
            "user_bytes_written",
            "flush_bytes_written",
            "compaction_bytes_written",
        )
        out = {name: getattr(st, name, None) for name in names}
        out["write_amplification"] = getattr(st, "write_amplification", None)
        levels = getattr(st, "levels", None)
        if levels is not None:
            out["tables_per_level"] = [getattr(level, "tables", None) for level in levels]
        return out


# -- LevelDB (plyvel) -----------------------------------------------------------------


class LevelDBStore(Store):
    def __init__(self, path: str) -> None:
        import plyvel

        self.db = db = plyvel.DB(path, create_if_missing=True, bloom_filter_bits=10, compression=None)
        _bind_plyvel_style(self, db)  # sync=False is plyvel's default

    def settle(self) -> float:
        # LevelDB reports no pending-work flag: wait until its per-level compaction stats stop changing.
        return _settle(lambda: self.db.get_property(b"leveldb.stats"))

    def close(self) -> None:
        self.db.close()


def _settle(state: Callable[[], object], quiet: float = 1.0, limit: float = 600.0) -> float:
    """Poll `state()` until it has not changed for `quiet` seconds (or `limit` passed); returns the seconds waited."""
    start = time.perf_counter()
    last, since = state(), start
    while time.perf_counter() - start < limit:
        time.sleep(0.1)
        now, current = time.perf_counter(), state()
        if current != last:
            last, since = current, now
        elif now - since >= quiet:
            break
    return time.perf_counter() - start


# -- RocksDB (rocksdict) ----------------------------------------------------------------


class RocksDBStore(Store):
    def __init__(self, path: str, leveldb_sizes: bool = False) -> None:
        import rocksdict

        opts = rocksdict.Options(raw_mode=True)  # keys and values are bytes, not pickled objects
        opts.create_if_missing(True)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)  # 10 bits per key, full (not block-based) filter
        if leveldb_sizes:
            # LevelDB's (and minilsm's) sizes instead of RocksDB's larger defaults (a 32 MiB block cache, 64 MiB
            # memtable, 256 MiB level 1, 64 MiB tables): RocksDB's own design at the memory the others get.
            table.set_block_cache(rocksdict.Cache(8 << 20))
            opts.set_write_buffer_size(4 << 20)
            opts.set_max_bytes_for_level_base(10 << 20)
            opts.set_target_file_size_base(2 << 20)
        opts.set_block_based_table_factory(table)
        opts.set_compression_type(rocksdict.DBCompressionType.none())
        self.db = db = rocksdict.Rdict(path, opts)  # WriteOptions default: WAL on, sync off
        self.put = db.put
        self.get = db.get
        self.delete = db.delete
        items = db.items

        def seek(key: bytes, n: int) -> int:
            return len(list(islice(items(from_key=key), n)))

        def scan() -> Pairs:
            # rocksdict's stubs type an item as tuple[Any, Any]; with bytes keys and values it is bytes.
            return cast(Pairs, iter(db.items()))

        self.seek = seek
        self.scan = scan

    def settle(self) -> float:
        names = ("rocksdb.compaction-pending", "rocksdb.num-running-compactions", "rocksdb.num-running-flushes")
        start = time.perf_counter()
        while any(self.db.property_int_value(name) for name in names) and time.perf_counter() - start < 600:
            time.sleep(0.05)
        return time.perf_counter() - start

    def close(self) -> None:
        self.db.close()


# -- sqlite3 --------------------------------------------------------------------------


class SQLiteStore(Store):
    def __init__(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self._file = os.path.join(path, "kv.sqlite")
        conn = self.conn = self._connect()
        conn.execute("PRAGMA journal_mode=WAL")  # kept in the file: every later connection is in WAL mode too
        conn.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        self._local = threading.local()

        # Every operation goes through its thread's own connection (`_conn`): readwhilewriting's writer is the
        # other thread, and sharing the main connection with the reader would serialize the two in it.
        def put(key: bytes, value: bytes) -> None:
            self._conn().execute("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (key, value))

        def get(key: bytes) -> bytes | None:
            row = self._conn().execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
            value: bytes | None = None if row is None else row[0]
            return value

        def delete(key: bytes) -> None:
            self._conn().execute("DELETE FROM kv WHERE k = ?", (key,))

        def seek(key: bytes, n: int) -> int:
            rows = self._conn().execute("SELECT k, v FROM kv WHERE k >= ? ORDER BY k LIMIT ?", (key, n))
            return len(rows.fetchall())

        def scan() -> Pairs:
            rows: Pairs = iter(conn.execute("SELECT k, v FROM kv ORDER BY k"))
            return rows

        self.put, self.get, self.delete, self.seek, self.scan = put, get, delete, seek, scan
        self._main = threading.get_ident()
        self._others: list[Any] = []

    def _conn(self) -> Any:
        # A thread other than the one that opened the store gets its own connection, as WAL mode intends (one
        # connection used by two threads would serialize them in sqlite's mutex), for its writes as for its reads.
        if threading.get_ident() == self._main:
            return self.conn
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
            self._others.append(conn)
        return conn

    def _connect(self) -> Any:
        import sqlite3

        # isolation_level=None: autocommit, so every statement is its own transaction.
        conn = sqlite3.connect(self._file, isolation_level=None, check_same_thread=False)
        # Per connection, not kept in the file: WAL + NORMAL, no fsync per commit, only at checkpoints.  (A
        # connection left at the default FULL would fsync every commit it makes.)
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def close(self) -> None:
        for conn in self._others:
            conn.close()
        self.conn.close()


# -- LMDB -----------------------------------------------------------------------------


class LMDBStore(Store):
    def __init__(self, path: str, map_size: int) -> None:
        import lmdb

        # sync=False: a commit writes the pages but does not fsync; metasync is moot then.
        self.env = env = lmdb.open(path, map_size=map_size, sync=False, metasync=False)
        begin = env.begin

        def put(key: bytes, value: bytes) -> None:
            with begin(write=True) as txn:
                txn.put(key, value)

        def get(key: bytes) -> bytes | None:
            with begin() as txn:
                value: bytes | None = txn.get(key)
                return value

        def delete(key: bytes) -> None:
            with begin(write=True) as txn:
                txn.delete(key)

        def seek(key: bytes, n: int) -> int:
            with begin() as txn:
                cur = txn.cursor()
                if not cur.set_range(key):
                    return 0
                return len(list(islice(cur.iternext(), n)))

        def scan() -> Pairs:
            with begin() as txn:
                yield from txn.cursor().iternext()

        self.put, self.get, self.delete, self.seek, self.scan = put, get, delete, seek, scan

    def close(self) -> None:
        self.env.close()


# -- dbm (standard library) -----------------------------------------------------------


def dbm_backend() -> str:
    """The best dbm backend this Python has: what ``dbm.open`` would create."""
    for name in ("dbm.gnu", "dbm.ndbm", "dbm.dumb"):
        try:
            __import__(name)
        except ImportError:
            continue
        return name
    return "none"


class DBMStore(Store):
    thread_safe = False  # none of the dbm backends may be used from two threads at once

    def __init__(self, path: str) -> None:
        import dbm

        os.makedirs(path, exist_ok=True)
        self.db = db = dbm.open(os.path.join(path, "kv"), "c")  # noqa: SIM115 - closed by close()
        self.put = db.__setitem__
        self.get = db.get
        self.delete = self._delete

    def _delete(self, key: bytes) -> None:
        with contextlib.suppress(KeyError):
            del self.db[key]

    def close(self) -> None:
        self.db.close()


# -- diskcache ------------------------------------------------------------------------


class DiskCacheStore(Store):
    def __init__(self, path: str) -> None:
        import diskcache

        # No eviction and no size limit: a cache that dropped keys would not be a store.
        self.cache = cache = diskcache.Cache(path, eviction_policy="none", size_limit=2**62)
        self.put = cache.set
        self.get = cache.get
        self.delete = cache.delete

    def close(self) -> None:
        self.cache.close()


def peers(num: int) -> list[Peer]:
    """minilsm first, then every peer, for a run of `num` keys (LMDB's map is sized from it)."""
    map_size = max(1 << 30, num * 1024)
    backend = dbm_backend()
    return [
        Peer(
            "minilsm",
            "",
            MiniLSMStore,
            "sync=False: each write's log record is handed to the OS (write(2)) before put returns; no fsync",
            "defaults: 10 bits/key filters, 4 KiB blocks, 8 MiB block cache, 4 MiB memtable, leveled, "
            "background thread, compactions merged in the worker process",
        ),
        Peer(
            "minilsm-thread",
            "",
            lambda path: MiniLSMStore(path, compaction_worker=False),
            "as minilsm",
            "as minilsm, but compactions merged in the background thread (compaction_worker=False), sharing the "
            "interpreter lock with reads and writes; run only when named in --stores",
            on_request=True,
        ),
        Peer(
            "minilsm-tiered",
            "",
            lambda path: MiniLSMStore(path, compaction_style="tiered"),
            "as minilsm",
            "as minilsm, but size-tiered compaction (compaction_style='tiered'): fewer rewrites, more runs "
            "to probe; run only when named in --stores",
            on_request=True,
        ),
        Peer(
            "minilsm-nocache",
            "",
            lambda path: MiniLSMStore(path, block_cache_size=0),
            "as minilsm",
            "as minilsm, but no block cache (block_cache_size=0): what the cache costs and saves; "
            "run only when named in --stores",
            on_request=True,
        ),
        Peer(
            "minilsm-mmap",
            "",
            lambda path: MiniLSMStore(path, mmap_reads=True),
            "as minilsm",
            "as minilsm, but tables read through memory mappings (mmap_reads=True, as LevelDB): no system call "
            "per block read, and none to let go of the interpreter lock; run only when named in --stores",
            on_request=True,
        ),
        Peer(
            "minilsm-noseek",
            "",
            lambda path: MiniLSMStore(path, seek_compaction=False),
            "as minilsm",
            "as minilsm, but no seek compaction (seek_compaction=False, as RocksDB): the shape comes from the "
            "writes alone; run only when named in --stores",
            on_request=True,
        ),
        Peer(
            "minilsm-notomb",
            "",
            lambda path: MiniLSMStore(path, tombstone_compaction=False),
            "as minilsm",
            "as minilsm, but no tombstone compaction (tombstone_compaction=False, as LevelDB): tables of mostly "
            "tombstones wait for a merge from above; run only when named in --stores",
            on_request=True,
        ),
        Peer(
            "minilsm-tiered-notomb",
            "",
            lambda path: MiniLSMStore(path, compaction_style="tiered", tombstone_compaction=False),
            "as minilsm",
            "as minilsm-tiered, but no tombstone compaction (tombstone_compaction=False): runs of mostly "
            "tombstones wait for runs of similar size to merge with them; run only when named in --stores",
            on_request=True,
        ),
        Peer(
            "minilsm-large",
            "",
            lambda path: MiniLSMStore(
                path, memtable_size=16 << 20, level1_max_bytes=64 << 20, target_file_size=8 << 20
            ),
            "as minilsm",
            "as minilsm, but four times LevelDB's sizes (16 MiB memtable, 64 MiB level 1, 8 MiB tables; RocksDB's "
            "defaults are 64, 256 and 64): fewer rewrites per byte, for about twice the memory; "
            "run only when named in --stores",
            on_request=True,
        ),
        Peer(
            "leveldb",
            "plyvel",
            LevelDBStore,
            "sync=False (plyvel default): log write(2) per put, no fsync",
            "bloom_filter_bits=10, compression=None; otherwise defaults (4 KiB blocks, 8 MiB cache, 4 MiB memtable)",
            "plyvel",
        ),
        Peer(
            "rocksdb",
            "rocksdict",
            RocksDBStore,
            "WriteOptions.sync=False (default): WAL write per put, no fsync",
            "raw_mode=True, full 10 bits/key Bloom filter, compression none; otherwise defaults, which are larger "
            "than minilsm's and LevelDB's: 32 MiB block cache (not 8), 64 MiB memtable (not 4), 64 MiB tables",
            "rocksdict",
        ),
        Peer(
            "rocksdb-small",
            "rocksdict",
            lambda path: RocksDBStore(path, leveldb_sizes=True),
            "as rocksdb",
            "as rocksdb, but at LevelDB's and minilsm's sizes: 8 MiB block cache, 4 MiB memtable, 10 MiB level 1, "
            "2 MiB tables; run only when named in --stores",
            "rocksdict",
            on_request=True,
        ),
        Peer(
            "sqlite3",
            "",
            SQLiteStore,
            "journal_mode=WAL, synchronous=NORMAL: each autocommit writes the WAL, fsync only at checkpoints",
            "WITHOUT ROWID table kv(k BLOB PRIMARY KEY, v BLOB), autocommit, one statement per op",
        ),
        Peer(
            "lmdb",
            "lmdb",
            lambda path: LMDBStore(path, map_size),
            "sync=False, metasync=False: each commit writes its pages, no fsync",
            f"one transaction per op, map_size={map_size >> 20} MiB",
            "lmdb",
        ),
        Peer(
            "dbm",
            "",
            DBMStore,
            f"{backend}: "
            + (
                "each put writes the value to the data file; the key index is written on close"
                if backend == "dbm.dumb"
                else "writes go to the OS page cache, no fsync"
            ),
            f"backend {backend} (the best this Python was built with); no ordered iteration, so no seeks or scans",
        ),
        Peer(
            "diskcache",
            "diskcache",
            DiskCacheStore,
            "SQLite underneath with journal_mode=WAL, synchronous=NORMAL (its defaults)",
            "Cache(eviction_policy='none', size_limit=2**62); no ordered iteration of pairs, so no seeks or scans",
            "diskcache",
        ),
    ]
