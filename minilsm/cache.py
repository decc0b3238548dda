"""Bounded caches: a CLOCK map weighed in "charge" units, and the cache of open table files built on it.

The store keeps two: the block cache (``(table number, block offset)`` ->
decoded data block, charged by its bytes, LevelDB's ``block_cache``) and the
file cache (table path -> open `RandomAccessFile`, charged 1 each, LevelDB's
``max_open_files``).  Both are shared by every reader thread.

Why CLOCK and not LRU.  A point read asks the block cache for each block it
needs, and the file cache for each block it must read from disk, so a hit must
be cheap.  An LRU moves the entry to the front on
every hit, which needs a lock around a map update; CLOCK (second chance, the
policy of RocksDB's ``HyperClockCache`` and of most kernels' page caches) only
sets the entry's "referenced" flag, one store into a list that needs no lock.
Insertions take the lock and evict: the oldest entry goes unless it was
referenced since it was last passed over, in which case its flag is cleared
and it goes to the back of the queue.  Measured on a 1M-key store read at
random (bench/RESULTS.md, "Point reads"), this took about 0.8 us off each
read against the LRU it replaced.

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

# An entry is a 3-item list, mutable so that a hit can mark it in place: value, charge, referenced.
_VALUE, _CHARGE, _REFERENCED = 0, 1, 2


class ClockCache(Generic[K, V]):
    """A thread-safe map of at most `capacity` charge units that evicts by CLOCK (second chance).

    Each entry has a charge (its weight: bytes for blocks, 1 for files).  An
    entry whose charge alone exceeds the capacity is not kept, so a capacity of
    0 disables the cache.  `None` is not a storable value: `get` returns it for
    a miss.

    `get` takes no lock: under the interpreter lock one dictionary lookup and
    one list store are each atomic.  A `get` that runs while `put` is moving
    the very entry it wants to the back of the queue may miss it; the caller
    then reads the block again, which is a cost, never a wrong answer.

    With `admit_window` > 0 a key not in the cache is admitted only at its
    second `put` while it is remembered among the last `admit_window` keys
    refused (the "doorkeeper" of TinyLFU, Einziger et al., 2017): a block
    read once and never again costs a set insertion instead of an insertion,
    an eviction and keeping 4 KiB alive.  Uniform point reads of a store
    far larger than the cache are almost all such reads.
    """

    __slots__ = ("_admit_window", "_capacity", "_lock", "_map", "_refused", "_usage")

    def __init__(self, capacity: int, admit_window: int = 0) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        if admit_window < 0:
            raise ValueError(f"admit_window must be >= 0, got {admit_window}")
        self._capacity = capacity
        self._admit_window = admit_window
        self._refused: set[K] = set()  # the doorkeeper: keys put once lately and not kept
        self._usage = 0
        # Oldest first: the front is where the clock's hand points.
        self._map: OrderedDict[K, list[object]] = OrderedDict()
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
        """The value under `key`, marked referenced so that the next eviction pass spares it; None on a miss.

        O(1), lock-free.
        """
        entry = self._map.get(key)
        if entry is None:
            return None
        entry[_REFERENCED] = True
        return entry[_VALUE]  # type: ignore[return-value]

    def put(self, key: K, value: V, charge: int = 1) -> None:
        """Store `value` under `key` (replacing any entry), evicting first to make room.

        The new entry starts unreferenced, so a block read once and never again
        is the first to go.  With a doorkeeper (`admit_window`), a key not yet
        cached is only remembered at its first put.  O(1) amortized: each
        eviction pass over an entry either drops it or clears its flag, which
        only a later `get` sets again.
        """
        if charge < 0:
            raise ValueError(f"charge must be >= 0, got {charge}")
        with self._lock:
            m = self._map
            if self._admit_window and key not in m:
                refused = self._refused
                if key not in refused:
                    if len(refused) >= self._admit_window:
                        refused.clear()  # forget them all at once: O(1) amortized, and the window stays bounded
                    refused.add(key)
                    return
                refused.discard(key)
            usage = self._usage
            old = m.pop(key, None)
            if old is not None:
                usage -= old[_CHARGE]  # type: ignore[operator]
            if charge <= self._capacity:
                # Evict before inserting, so that the hand, having cleared every flag, drops the oldest entry
                # rather than the one being added.
                room = self._capacity - charge
                while usage > room:
                    k, entry = m.popitem(last=False)
                    if entry[_REFERENCED]:
                        entry[_REFERENCED] = False
                        m[k] = entry
                    else:
                        usage -= entry[_CHARGE]  # type: ignore[operator]
                m[key] = [value, charge, False]
                usage += charge
            self._usage = usage

    def erase(self, key: K) -> None:
        """Drop the entry under `key`, if any.  O(1)."""
        with self._lock:
            old = self._map.pop(key, None)
            if old is not None:
                self._usage -= old[_CHARGE]  # type: ignore[operator]

    def clear(self) -> None:
        """Drop every entry.  O(n)."""
        with self._lock:
            self._map.clear()
            self._refused.clear()
            self._usage = 0


class TableFileCache:
    """At most `capacity` open table files, opened on demand through `fs` and dropped by CLOCK.

    Readers ask for their file on every block read instead of holding it, so
    that a store with more tables than file descriptors still works; a miss
    costs one `open` (with `mapped`, `FileSystem.open_mapped`: an open and an
    mmap).  Call `evict` before a table file is deleted.
    """

    __slots__ = ("_closed", "_files", "_open")

    def __init__(self, fs: FileSystem, capacity: int, mapped: bool = False) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._open = fs.open_mapped if mapped else fs.open_random
        self._files: ClockCache[str, RandomAccessFile] = ClockCache(capacity)
        self._closed = False

    def get(self, path: str) -> RandomAccessFile:
        """The open file at `path`, opening it on a miss (outside the lock, so opens do not serialize readers).

        Once the cache is closed, a file opened for a read under way is not kept: it closes when that read
        lets go of it.
        """
        f = self._files.get(path)
        if f is None:
            f = self._open(path)
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
