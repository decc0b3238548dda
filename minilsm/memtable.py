"""The memtable: recent writes, held sorted in memory until they are flushed to a table.

Shape.  A sorted dict maps each user key to the list of its versions
``(trailer, value)``, oldest first.  Writes arrive with increasing sequence
numbers, so a new version is always the newest of its key and is appended: a
write to a known key is a dict lookup plus `list.append`.  A point read is one
dict lookup and a look at that key's newest version; only a snapshot's read of
a key written since bisects the key's versions.  LevelDB keeps one skiplist of
internal keys instead; grouping versions under their user key is what makes
reads O(1) here.

The sorted dict is spelled out as what `sortedcontainers.SortedDict` is inside:
a plain dict beside a `SortedList` of its keys, except that a new key is not
sorted in when it is written.  It waits in a plain list until an iterator next
needs the order, and is then merged in by `SortedList.update`: one C sort when
many keys wait (a flush, or the first scan after a load), one O(log n)
insertion each when few do (scans between writes).  Only point reads and
writes happen on the load path, so a write of a new key costs a dict insert
and a list append (about 0.7 us less than inserting into the SortedList).

Concurrency.  One writer at a time (the store serializes `add` under its lock);
any number of readers, without the store's lock.  `get` needs nothing: a dict
lookup and a list read are atomic under the GIL, and a version is appended only
once complete.  An iterator never holds a live cursor into the sorted key list,
whose internal sublists an insertion shifts and splits: it copies the keys a
chunk at a time, each chunk a slice starting (by bisection) strictly after the
last key it returned, so keys added while it is suspended are neither skipped nor
duplicated, nor a cause of "changed size during iteration".  Only chunk copies
touch the sorted list, one at a time under a small lock of the memtable's own;
each first moves the keys waiting in the pending list into it.  The writer
takes no lock: it stores a new key's versions in the dict before it appends
the key to the pending list (so a copy that finds the key finds its versions),
and an append is atomic under the GIL, as is the copy's removal of the keys it
moved (a key appended meanwhile lands behind them and waits for the next
copy).  Versions added after an iterator started may or may not show up in
it: they carry sequence numbers above any snapshot the reader took, so the
store's snapshot filter hides them either way.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Iterator
from operator import itemgetter
from typing import Final

from sortedcontainers import SortedList  # type: ignore[import-untyped]  # no stubs or py.typed

VERSION_OVERHEAD: Final = 16
"""Bytes `approximate_size` charges per version on top of its key and value.

It stands for the 8-byte trailer and the length fields a version costs once
encoded in a log record or table, so `approximate_size` tracks the size of the
table a flush will write, not the memory it holds: Python objects add about
280 bytes per version (measured with tracemalloc for 16-byte keys: 3x
`approximate_size` at 100-byte values, 1.25x at 1000-byte values).
"""

_TRAILER: Final = itemgetter(0)
_FIRST_CHUNK: Final = 16
_MAX_CHUNK: Final = 1024


class MemTable:
    """Sorted in-memory versions of user keys.

    Versions are ``(user_key, trailer, value)`` with ``trailer = seq << 8 | kind``
    (see `minilsm.keys`); iteration order is the internal order: user key
    ascending, then trailer descending (newest first).
    """

    __slots__ = ("_count", "_keys", "_keys_lock", "_lookup", "_pending", "_size", "_versions")

    def __init__(self) -> None:
        self._versions: dict[bytes, list[tuple[int, bytes]]] = {}
        self._keys = SortedList()
        self._pending: list[bytes] = []  # new keys not yet in `_keys`, in arrival order
        # Bound method, looked up once: `add` and `get` are the hottest paths.
        self._lookup = self._versions.get
        self._count = 0
        self._size = 0
        # Serializes chunk copies, the only users of `_keys` (see the module docstring).
        self._keys_lock = threading.Lock()

    def add(self, key: bytes, seq: int, kind: int, value: bytes) -> None:
        """Record version ``(seq, kind)`` of `key`.  O(1) (a new key is sorted in when an iterator next needs it).

        `seq` must exceed every sequence number added before, and calls must not
        overlap (the store adds under its write lock).  `key` and `value` are
        stored as given, not copied: pass immutable `bytes`.
        """
        versions = self._lookup(key)
        if versions is None:
            self._versions[key] = [((seq << 8) | kind, value)]
            self._pending.append(key)  # after the dict entry: see the module docstring
        else:
            versions.append(((seq << 8) | kind, value))
        self._count += 1
        self._size += len(key) + len(value) + VERSION_OVERHEAD

    def get(self, key: bytes, seq: int) -> tuple[int, bytes] | None:
        """``(kind, value)`` of the newest version of `key` with sequence number <= `seq`, else None.

        O(1) at the latest sequence number; an older `seq` (a snapshot's) bisects
        the key's versions, O(log v), so a key overwritten many times since the
        snapshot costs no more.  A tombstone is returned as ``(KIND_DELETE, b"")``:
        it answers the read, which must not look further in older tables.
        """
        versions = self._lookup(key)
        if versions is None:
            return None
        # The largest trailer whose sequence number is <= seq.
        limit = (seq << 8) | 0xFF
        trailer, value = versions[-1]
        if trailer <= limit:
            return trailer & 0xFF, value
        # Trailers ascend (versions are appended oldest first); a version appended meanwhile goes past the end.
        i = bisect_right(versions, limit, key=_TRAILER)
        if i == 0:
            return None
        trailer, value = versions[i - 1]
        return trailer & 0xFF, value

    def iter(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, int, bytes]]:
        """Versions ``(user_key, trailer, value)`` with ``start <= user_key < stop``, lazily.

        In internal order (user key ascending, newest version first), or exactly
        the reverse of it when `reverse` is true.  None leaves a bound open.
        Costs O(log n) per chunk of up to 1024 keys (chunks start at 16 keys, so a
        short scan copies little) plus O(1) per version.  Safe against `add` from
        another thread between and during steps; see the module docstring.
        """
        chunk = _FIRST_CHUNK
        lo, hi = start, stop
        bounds = (True, False)
        versions_of = self._versions.__getitem__
        while True:
            keys = self._chunk(lo, hi, bounds, reverse, chunk)
            if reverse:
                for key in keys:
                    for trailer, value in versions_of(key):
                        yield key, trailer, value
            else:
                for key in keys:
                    versions = versions_of(key)
                    if len(versions) == 1:  # the usual case: no reversed() iterator to build
                        trailer, value = versions[0]
                        yield key, trailer, value
                    else:
                        for trailer, value in reversed(versions):
                            yield key, trailer, value
            if len(keys) < chunk:
                return
            # Continue strictly past the last key returned; keys inserted in
            # the meantime behind the cursor are (correctly) not revisited.
            if reverse:
                hi = keys[-1]
            else:
                lo = keys[-1]
                bounds = (False, False)
            chunk = min(chunk * 2, _MAX_CHUNK)

    def _chunk(
        self, lo: bytes | None, hi: bytes | None, bounds: tuple[bool, bool], reverse: bool, n: int
    ) -> list[bytes]:
        """Up to `n` keys of the range, after sorting in the keys added since the last copy.

        O(log n + n) per chunk, plus the merge of waiting keys: O(m log m) for m of
        them, or a C sort of all keys when m is a quarter of them or more.
        """
        with self._keys_lock:
            pending = self._pending
            if pending:
                moved = len(pending)
                self._keys.update(pending[:moved])
                del pending[:moved]  # keys the writer appended meanwhile stay, behind these
            keys = self._keys
            # Positions, then one slice: SortedList copies whole runs of its sublists in C,
            # where `irange` would step a Python generator per key.
            first = 0 if lo is None else keys.bisect_left(lo) if bounds[0] else keys.bisect_right(lo)
            end = len(keys) if hi is None else keys.bisect_left(hi)
            if end <= first:
                return []
            if reverse:
                out: list[bytes] = keys[max(first, end - n) : end]
                out.reverse()
                return out
            return keys[first : min(end, first + n)]  # type: ignore[no-any-return]

    def entries(self) -> Iterator[tuple[bytes, int, bytes]]:
        """Every version in internal order: what a flush writes to a table.  O(n) in total."""
        return self.iter()

    def __getstate__(self) -> tuple[dict[bytes, list[tuple[int, bytes]]], int, int]:
        """For pickling a frozen memtable (the compaction worker's flush): its versions, unsorted.  O(1).

        The keys are sorted again where it is unpickled, by the first iterator there.  Pickle only a
        memtable no one writes to any more.
        """
        return self._versions, self._count, self._size

    def __setstate__(self, state: tuple[dict[bytes, list[tuple[int, bytes]]], int, int]) -> None:
        self.__init__()  # type: ignore[misc]  # a fresh lock and key list, then the versions
        self._versions, self._count, self._size = state
        self._lookup = self._versions.get
        self._pending = list(self._versions)

    @property
    def approximate_size(self) -> int:
        """Sum over versions of key + value + `VERSION_OVERHEAD` bytes.  O(1)."""
        return self._size

    def __len__(self) -> int:
        """Number of versions (not keys).  O(1)."""
        return self._count

    @property
    def num_keys(self) -> int:
        """Number of distinct user keys.  O(1)."""
        return len(self._versions)

    @property
    def empty(self) -> bool:
        """True before the first `add`.  O(1)."""
        return self._count == 0

    def __repr__(self) -> str:
        return f"MemTable(versions={self._count}, keys={len(self._versions)}, approximate_size={self._size})"
