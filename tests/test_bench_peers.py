"""bench.peers: each adapter does what its durability and config strings say, from every thread the workloads use."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bench.peers import SQLiteStore


def test_sqlite_writes_from_another_thread_use_that_threads_own_connection(tmp_path: Path) -> None:
    """Was: puts and deletes always went through the main thread's connection, so readwhilewriting's writer
    thread and its reader shared one connection and sqlite's mutex serialized them, against the adapter's own
    comment (its reads in another thread already had their own connection)."""
    store = SQLiteStore(str(tmp_path / "s"))
    try:
        store.put(b"a", b"1")
        main_changes = store.conn.total_changes
        seen: list[object] = []

        def writer() -> None:
            store.put(b"b", b"2")
            store.delete(b"a")
            conn = store._conn()
            seen.append(conn)
            seen.append(conn.execute("PRAGMA synchronous").fetchone()[0])

        t = threading.Thread(target=writer)
        t.start()
        t.join()
        conn, synchronous = seen
        assert conn is not store.conn
        assert store.conn.total_changes == main_changes  # nothing the other thread wrote went through it
        assert synchronous == 1  # NORMAL, as the durability string says: no fsync per commit on that connection
        assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 1
        assert store.get(b"b") == b"2"
        assert store.get(b"a") is None
    finally:
        store.close()


def test_the_rocksdb_variant_at_leveldb_sizes_has_them(tmp_path: Path) -> None:
    """`rocksdb-small` runs RocksDB with LevelDB's and minilsm's 8 MiB block cache, not its 32 MiB default, and
    flushes its memtable at 4 MiB, not 64: a load of ~6 MiB flushes the small one and not the default one."""
    pytest.importorskip("rocksdict")
    from bench.peers import RocksDBStore

    for sized, cache, flushed in ((False, 32 << 20, False), (True, 8 << 20, True)):
        store = RocksDBStore(str(tmp_path / str(sized)), leveldb_sizes=sized)
        try:
            assert store.db.property_int_value("rocksdb.block-cache-capacity") == cache
            for i in range(50_000):
                store.put(b"%016d" % i, b"v" * 100)
            store.settle()
            files = store.db.property_int_value("rocksdb.num-files-at-level0") or 0
            files += sum(store.db.property_int_value(f"rocksdb.num-files-at-level{n}") or 0 for n in range(1, 7))
            assert (files > 0) == flushed
        finally:
            store.close()
