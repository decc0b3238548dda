"""Iterators: merging sorted sources into one view of the store at a sequence number.

Every source (a memtable, a level-0 table, a deeper level read as one run)
yields *versions* ``(user_key, trailer, value)`` in internal order: user key
ascending, newest version first.  A scan merges them with a heap
(`heapq.merge`, O(log s) per version for s sources) and then keeps, for each
user key, the newest version visible at the read's sequence number, hiding
tombstones.  Reverse scans merge the sources' reversed streams (user key
descending, oldest version first) and keep the *last* visible version of each key.

Scans use `interleave` rather than `merge`: it compares whole entries, which
heapq does in C, instead of calling a Python key function per version (about
600 -> 400 ns per version with three sources).  Its output is sorted by user
key only, a key's versions coming out together in no set order, which is all
`visible` needs: it picks the newest visible version of each run of equal keys.
Compaction needs internal order proper, so it keeps `merge`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from itertools import chain

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


def interleave(sources: list[Iterator[Entry]], reverse: bool = False) -> Iterator[Entry]:
    """Merge sources sorted by user key (each ascending, or each descending with `reverse`) by user key.  Lazy.

    The versions of one user key come out next to each other, in no particular
    order: whole entries are compared, so ties on the key fall to the trailer
    ascending, whatever order each source keeps them in.  Every heap pop still
    yields the least (greatest) key left, since each source is sorted by key.
    Feed the result to `visible`, never to code that needs internal order.
    """
    if len(sources) == 1:
        return sources[0]
    return heapq.merge(*sources, reverse=reverse)


def concat(runs: Iterable[Iterator[Entry]]) -> Iterator[Entry]:
    """Chain the iterators of a level's disjoint, sorted tables into one source.  Lazy; no Python frame per version."""
    return chain.from_iterable(runs)


def visible(versions: Iterator[Entry], seq: int, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) for each user key whose newest version with sequence <= `seq` is a value.

    `versions` is sorted by user key, ascending (or descending: `reverse` only
    documents the direction), with each key's versions next to each other in any
    order, as `merge` and `interleave` give them.  Each key is yielded once its
    run of versions ends.  O(1) work per version; shadowed versions and
    tombstones are skipped, not yielded.
    """
    limit = (seq << 8) | 0xFF  # trailers above this belong to writes after the snapshot
    cur: bytes | None = None
    best = -1  # the largest trailer <= limit seen for `cur`; -1 for none
    best_value = b""
    for key, trailer, value in versions:
        if key != cur:
            if best >= 0 and best & 0xFF == KIND_VALUE:
                yield cur, best_value  # type: ignore[misc]  # cur is bytes whenever best >= 0
            cur, best = key, -1
        if best < trailer <= limit:
            best, best_value = trailer, value
    if best >= 0 and best & 0xFF == KIND_VALUE:
        yield cur, best_value  # type: ignore[misc]


def prefix_bounds(prefix: bytes) -> tuple[bytes, bytes | None]:
    """[start, stop) covering exactly the keys that begin with `prefix`.

    stop is the prefix with its last non-0xFF byte incremented (and what follows
    dropped); a prefix of only 0xFF bytes has no upper bound.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return prefix, None
    return prefix, stripped[:-1] + bytes([stripped[-1] + 1])
