"""bench.peers: each adapter does what its durability and config strings say, from every thread the workloads use."""

from __future__ import annotations

import threading
from pathlib import Path

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
