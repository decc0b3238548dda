"""Bounded caches: an LRU map weighed in "charge" units, and the cache of open table files built on it.

The store keeps two: the block cache (``(table number, block offset)`` ->
decoded data block, charged by its bytes, LevelDB's ``block_cache``) and the
file cache (table path -> open `RandomAccessFile`, charged 1 each, LevelDB's
``max_open_files``).  Both are shared by every reader thread, so each operation
takes one lock; an `OrderedDict` keeps recency order, so every operation is O(1)
(eviction is O(1) per entry dropped).

Eviction only drops the cache's reference.  A reader that fetched a file or a
block a moment earlier keeps using it; CPython frees the block, and closes the
file (see `fs._PosixRandomAccessFile.__del__`), when its last holder lets go.
That is why nothing here calls ``close``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

from minilsm.fs import FileSystem, RandomAccessFile

K = TypeVar("K")
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """A thread-safe map of at most `capacity` charge units that evicts the least recently used entries.

    Each entry has a charge (its weight: bytes for blocks, 1 for files).  An
    entry whose charge alone exceeds the capacity is not kept, so a capacity of
    0 disables the cache.  `None` is not a storable value: `get` returns it for
    a miss.
    """

    __slots__ = ("_capacity", "_lock", "_map", "_usage")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._usage = 0
        self._map: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        """Total charge the cache may hold."""
        return self._capacity

    @property
    def usage(self) -> int:
        """Total charge of the entries held now."""
        return self._usage

    def __len__(self) -> int:
        return len(self._map)

    def get(self, key: K) -> V | None:
        """The value under `key`, now the most recently used; None on a miss.  O(1)."""
        with self._lock:
            entry = self._map.get(key)
            if entry is None:
                return None
            self._map.move_to_end(key)
            return entry[0]

    def put(self, key: K, value: V, charge: int = 1) -> None:
        """Store `value` under `key` (replacing any entry), then evict down to capacity.  O(1) amortized."""
        if charge < 0:
            raise ValueError(f"charge must be >= 0, got {charge}")
        with self._lock:
            old = self._map.pop(key, None)
            if old is not None:
                self._usage -= old[1]
            if charge > self._capacity:
                return
            self._map[key] = (value, charge)
            self._usage += charge
            while self._usage > self._capacity:
                _, (_, dropped) = self._map.popitem(last=False)
                self._usage -= dropped

    def erase(self, key: K) -> None:
        """Drop the entry under `key`, if any.  O(1)."""
        with self._lock:
            old = self._map.pop(key, None)
            if old is not None:
                self._usage -= old[1]

    def clear(self) -> None:
        """Drop every entry.  O(n)."""
        with self._lock:
            self._map.clear()
            self._usage = 0


class TableFileCache:
    """At most `capacity` open table files, opened on demand through `fs` and dropped least recently used first.

    Readers ask for their file on every block read instead of holding it, so
    that a store with more tables than file descriptors still works; a miss
    costs one `open`.  Call `evict` before a table file is deleted.
    """

    __slots__ = ("_closed", "_files", "_fs")

    def __init__(self, fs: FileSystem, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._fs = fs
        self._files: LRUCache[str, RandomAccessFile] = LRUCache(capacity)
        self._closed = False

    def get(self, path: str) -> RandomAccessFile:
        """The open file at `path`, opening it on a miss (outside the lock, so opens do not serialize readers).

        Once the cache is closed, a file opened for a read under way is not kept: it closes when that read
        lets go of it.
        """
        f = self._files.get(path)
        if f is None:
            f = self._fs.open_random(path)
            self._files.put(path, f)
            if self._closed:  # asked after the put: a close that began before it cleared nothing of it
                self._files.erase(path)
        return f

    def evict(self, path: str) -> None:
        """Forget `path`; the file closes once no reader holds it."""
        self._files.erase(path)

    def clear(self) -> None:
        self._files.clear()

    def close(self) -> None:
        """Drop every file, and keep none opened from now on (the owner closed).  O(files)."""
        self._closed = True
        self._files.clear()

    def __len__(self) -> int:
        return len(self._files)
