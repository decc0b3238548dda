"""The memtable: recent writes, held sorted in memory until they are flushed to a table.

Shape.  A sorted dict maps each user key to its newest version ``(trailer,
value)``, and a second dict maps a key written more than once to the list of
its older versions, oldest first.  Writes arrive with increasing sequence
numbers, so a new version is always the newest of its key: it replaces the
newest, which is appended to the older ones.  A point read is one dict lookup;
only a snapshot's read of a key written since bisects the key's older versions.
LevelDB keeps one skiplist of internal keys instead; grouping versions under
their user key is what makes reads O(1) here.  The newest version is kept
apart, not as the last of a list per key, because a list per key is a Python
object the cyclic garbage collector must walk at every full collection, and
there was one per key: loading 1M keys ran 28 full collections (0.47 s of
10.5 s), now 1 or 2, and a version of a new key takes 148 bytes of Python
objects beyond its key and value instead of 212.

The sorted dict is spelled out as what `sortedcontainers.SortedDict` is inside:
a plain dict beside a `SortedList` of its keys, except that a new key is not
sorted in when it is written.  It waits in a plain list until an iterator next
needs the order, and is then merged in by `SortedList.update`: one C sort when
many keys wait (a flush, or the first scan after a load), one O(log n)
insertion each when few do (scans between writes).  Only point reads and
writes happen on the load path, so a write of a new key costs a dict insert
and a list append (about 0.7 us less than inserting into the SortedList).

Concurrency.  One writer at a time (the store serializes `add` under its lock);
any number of readers, without the store's lock.  Dict lookups, list reads and
appends are each atomic under the GIL, and a version is stored only once
complete.  An overwrite appends the newest version to the older ones before the
new version replaces it, and a reader looks at the newest first, then at the
older ones: so whatever it read as the newest, the older versions it reads next
hold every version before that one (and may hold that one too, and later ones,
at their end, which it skips by trailer).

An iterator never holds a live cursor into the sorted key list, whose internal
sublists an insertion shifts and splits: it copies the keys a chunk at a time,
each chunk a slice starting (by bisection) strictly after the last key it
returned, so keys added while it is suspended are neither skipped nor
duplicated, nor a cause of "changed size during iteration".  Only chunk copies
touch the sorted list, one at a time under a small lock of the memtable's own;
each first moves the keys waiting in the pending list into it.  The writer
takes no lock: it stores a new key's version in the dict before it appends
the key to the pending list (so a copy that finds the key finds its version),
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
200 bytes per version of a new key (measured with tracemalloc for 16-byte keys:
2.4x `approximate_size` at 100-byte values, 1.2x at 1000-byte values).
"""

_TRAILER: Final = itemgetter(0)
_State = tuple[dict[bytes, tuple[int, bytes]], dict[bytes, list[tuple[int, bytes]]], int, int]
_FIRST_CHUNK: Final = 16
_MAX_CHUNK: Final = 1024


class MemTable:
    """Sorted in-memory versions of user keys.

    Versions are ``(user_key, trailer, value)`` with ``trailer = seq << 8 | kind``
    (see `minilsm.keys`); iteration order is the internal order: user key
    ascending, then trailer descending (newest first).
    """

    __slots__ = ("_count", "_keys", "_keys_lock", "_latest", "_lookup", "_older", "_older_of", "_pending", "_size")

    def __init__(self) -> None:
        self._latest: dict[bytes, tuple[int, bytes]] = {}  # key -> its newest version
        self._older: dict[bytes, list[tuple[int, bytes]]] = {}  # key -> its older versions, oldest first
        self._keys = SortedList()
        self._pending: list[bytes] = []  # new keys not yet in `_keys`, in arrival order
        # Bound methods, looked up once: `add` and `get` are the hottest paths.
        self._lookup = self._latest.get
        self._older_of = self._older.get
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
        newest = self._lookup(key)
        if newest is None:
            self._latest[key] = ((seq << 8) | kind, value)
            self._pending.append(key)  # after the dict entry: see the module docstring
        else:
            older = self._older_of(key)
            if older is None:
                self._older[key] = [newest]
            else:
                older.append(newest)
            self._latest[key] = ((seq << 8) | kind, value)  # once `_older` holds the version it replaces
        self._count += 1
        self._size += len(key) + len(value) + VERSION_OVERHEAD

    def get(self, key: bytes, seq: int) -> tuple[int, bytes] | None:
        """``(kind, value)`` of the newest version of `key` with sequence number <= `seq`, else None.

        O(1) at the latest sequence number; an older `seq` (a snapshot's) bisects
        the key's versions, O(log v), so a key overwritten many times since the
        snapshot costs no more.  A tombstone is returned as ``(KIND_DELETE, b"")``:
        it answers the read, which must not look further in older tables.
        """
        newest = self._lookup(key)
        if newest is None:
            return None
        # The largest trailer whose sequence number is <= seq.
        limit = (seq << 8) | 0xFF
        trailer, value = newest
        if trailer <= limit:
            return trailer & 0xFF, value
        # Read after `newest`, so it holds every version before it.  Trailers ascend (appended oldest first);
        # versions moved in meanwhile go past the end, and are newer than `limit` too.
        older = self._older_of(key)
        if older is None:
            return None
        i = bisect_right(older, limit, key=_TRAILER)
        if i == 0:
            return None
        trailer, value = older[i - 1]
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
        newest_of = self._latest.__getitem__
        older_of = self._older_of
        while True:
            keys = self._chunk(lo, hi, bounds, reverse, chunk)
            # Per key, `newest` first and then the older versions, which then hold every version before it;
            # those moved in meanwhile (at the end, trailers >= `newest`'s) are left out.
            if reverse:
                for key in keys:
                    trailer, value = newest_of(key)
                    older = older_of(key)
                    if older is not None:
                        for t, v in older:
                            if t >= trailer:
                                break
                            yield key, t, v
                    yield key, trailer, value
            else:
                for key in keys:
                    trailer, value = newest_of(key)
                    yield key, trailer, value
                    older = older_of(key)
                    if older is not None:
                        for t, v in reversed(older):
                            if t < trailer:
                                yield key, t, v
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

        O(log n + n) per chunk, plus the merge of the m waiting keys into the n
        sorted ones: O(m log n) inserted one by one, or a C sort of all keys when m is
        a quarter of them or more.
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
        """Every version in internal order: what a flush writes to a table.  O(n log n) for keys added since the
        last sort (the first chunk sorts them in), O(n) for the rest."""
        return self.iter()

    def __getstate__(self) -> _State:
        """For pickling a frozen memtable (the compaction worker's flush): its versions, unsorted.  O(1).

        The keys are sorted again where it is unpickled, by the first iterator there.  Pickle only a
        memtable no one writes to any more.
        """
        return self._latest, self._older, self._count, self._size

    def __setstate__(self, state: _State) -> None:
        self.__init__()  # type: ignore[misc]  # a fresh lock and key list, then the versions
        self._latest, self._older, self._count, self._size = state
        self._lookup = self._latest.get
        self._older_of = self._older.get
        self._pending = list(self._latest)

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
        return len(self._latest)

    @property
    def empty(self) -> bool:
        """True before the first `add`.  O(1)."""
        return self._count == 0

    def __repr__(self) -> str:
        return f"MemTable(versions={self._count}, keys={len(self._latest)}, approximate_size={self._size})"
