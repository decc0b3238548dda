"""Iterators: merging sorted sources into one view of the store at a sequence number.

Every source (a memtable, a level-0 table, a deeper level read as one run)
yields *versions* ``(user_key, trailer, value)`` in internal order: user key
ascending, newest version first.

Scans use `merge_visible`, which takes each source as a stream of lists of
versions (a decoded block, or a chunk of the memtable) and works a batch at a
time: C sorts the sources' slices together and a dict comprehension keeps the
newest visible version of each key, so that a version costs no Python bytecode
of the merge when no tombstone or snapshot-hidden version is near it.
Compaction needs every version in internal order, so it keeps `merge`, a heap
merge (`heapq.merge`, O(log s) per version for s sources).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any, Final

from minilsm.keys import KIND_VALUE

Entry = tuple[bytes, int, bytes]
"""One version: (user_key, trailer, value)."""


def _order(e: Entry) -> tuple[bytes, int]:
    # Internal order is (user key, -trailer) ascending; a reversed source is the same key
    # descending, which is what heapq.merge(reverse=True) expects of each input.
    return e[0], -e[1]


def merge(sources: list[Iterator[Entry]], reverse: bool = False) -> Iterator[Entry]:
    """Merge sources that are each in internal order (or each its exact reverse).  Lazy."""
    if len(sources) == 1:
        return sources[0]
    return heapq.merge(*sources, key=_order, reverse=reverse)


def concat(runs: Iterable[Iterator[Entry]]) -> Iterator[Entry]:
    """Chain the iterators of a level's disjoint, sorted tables into one source.  Lazy; no Python frame per version."""
    return chain.from_iterable(runs)


Chunk = list[Entry]
"""Consecutive versions of one source, in internal order (never empty)."""

_AFTER_TRAILERS: Final = 1 << 64
"""Above every trailer: ``(key, _AFTER_TRAILERS)`` sorts after every version of `key`."""
_DUE: Final = object()
"""`merge_visible`'s first bound: every source is due for its first chunk."""


def merge_visible(
    sources: list[Iterator[tuple[Chunk, bool]]], seq: int, reverse: bool = False
) -> Iterator[dict[bytes, bytes]]:
    """The visible pairs of the merged sources at `seq`, as dicts of consecutive keys: ``{key: value}`` in key order.

    Each source yields ``(chunk, clean)`` pairs in scan order (ascending keys;
    descending with `reverse`, the versions inside each chunk still in internal
    order).  `clean` promises that every version of the chunk has sequence
    <= `seq` and none is a tombstone.  Each dict holds, for a run of keys, the
    newest version visible at `seq` of each, tombstoned keys left out; the
    dicts come in scan order and each lists its keys ascending (read it
    reversed for a reverse scan).

    How: every round takes, from every source, the versions that sort before
    the smallest last key of the sources' current chunks (after the largest
    first key, reversed): none of the sources can hold a version of those keys
    beyond its current chunk.  The taken slices are sorted as one list (C
    timsort merging a few sorted runs; whole tuples, so a key's versions come
    out oldest first) and turned into the dict by one comprehension, where a
    newer version overwrites an older one.  A round whose versions are not all
    clean instead walks them in Python, dropping versions above `seq` and
    keys whose newest visible version is a tombstone.  When the next dict is
    asked for, the sources whose chunk ended at the bound append their next
    chunk to what they have left (a source is read only that late).  Per
    version: one slice copy, ~1.6 tuple comparisons and one dict store, all in
    C for clean chunks; per round O(sources) Python steps.  A short seek pays
    for the rounds and for decoding a few versions past what it reads, which
    a heap merge would not; a long scan gains far more.
    """
    limit = (seq << 8) | 0xFF
    # Per source [chunk, lo, hi, clean, source or None once it has no more chunks, key that ends
    # chunk[lo:hi] in scan order]; chunk[lo:hi] is unread.  Every source starts out due for a chunk.
    live: list[list[Any]] = [[[], 0, 0, True, source, _DUE] for source in sources]
    bound: object = _DUE
    while True:
        # Refill the sources whose chunk set the last bound (reading no block before the
        # versions below that bound are consumed); then the new bound: no version of a
        # key beyond it may be waiting in any source's next chunk.
        new_bound: bytes | None = None
        finished = False
        for s in live:
            source = s[4]
            if source is None:
                finished = finished or s[1] == s[2]
                continue
            last = s[5]
            if last == bound:
                more = next(source, None)
                if more is None:
                    s[4] = None
                    finished = finished or s[1] == s[2]
                    continue
                chunk, lo, hi = s[0], s[1], s[2]
                # What is left of the old chunk (versions of the bound key) goes first in scan order.
                rest = chunk[lo:hi]
                chunk = more[0] if not rest else more[0] + rest if reverse else rest + more[0]
                last = chunk[0][0] if reverse else chunk[-1][0]
                s[:] = chunk, 0, len(chunk), (s[3] or lo == hi) and more[1], source, last
            if new_bound is None or (last > new_bound if reverse else last < new_bound):
                new_bound = last
        if finished:
            live = [s for s in live if s[1] < s[2]]
            if not live:
                return
        bound = new_bound
        # Take, from every source, the versions of keys below the bound (above it, reversed).
        batch: list[Entry] = []
        parts = 0
        all_clean = True
        for s in live:
            chunk, lo, hi, clean = s[0], s[1], s[2], s[3]
            if reverse:
                if bound is None:
                    cut = lo
                elif chunk[hi - 1][0] <= bound:  # nothing to take: skip the search
                    continue
                else:
                    cut = bisect_right(chunk, (bound, _AFTER_TRAILERS), lo, hi)
                batch += chunk[cut:hi]
                s[2] = cut
            else:
                if bound is None:
                    cut = hi
                elif chunk[lo][0] >= bound:  # nothing to take: skip the search
                    continue
                else:
                    cut = bisect_left(chunk, (bound,), lo, hi)
                batch += chunk[lo:cut]
                s[1] = cut
            parts += 1
            all_clean = all_clean and clean
        if parts > 1:
            batch.sort()
        if all_clean:
            pairs = {key: value for key, _, value in batch}
            if parts == 1 and len(pairs) < len(batch):
                # One source's versions of a key come newest first: redo them oldest first.
                batch.sort()
                pairs = {key: value for key, _, value in batch}
        else:
            if parts == 1:
                batch.sort()
            pairs = {}
            for key, trailer, value in batch:
                if trailer <= limit:  # a key's versions come oldest first: the last visible one wins
                    if trailer & 0xFF == KIND_VALUE:
                        pairs[key] = value
                    else:
                        pairs.pop(key, None)
        if pairs:
            yield pairs
        if bound is None:
            return


def prefix_bounds(prefix: bytes) -> tuple[bytes, bytes | None]:
    """[start, stop) covering exactly the keys that begin with `prefix`.

    stop is the prefix with its last non-0xFF byte incremented (and what follows
    dropped); a prefix of only 0xFF bytes has no upper bound.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return prefix, None
    return prefix, stripped[:-1] + bytes([stripped[-1] + 1])
