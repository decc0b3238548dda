"""Iterators: merging sorted sources into one view of the store at a sequence number.

Every source (a memtable, a level-0 table, a deeper level read as one run)
yields *versions* ``(user_key, trailer, value)`` in internal order: user key
ascending, newest version first.  A scan merges them with a heap
(`heapq.merge`, O(log s) per version for s sources) and then keeps, for each
user key, the newest version visible at the read's sequence number, hiding
tombstones.  Reverse scans merge the sources' reversed streams (user key
descending, oldest version first) and keep the *last* visible version of each key.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

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
    """Chain the iterators of a level's disjoint, sorted tables into one source."""
    for run in runs:
        yield from run


def visible(versions: Iterator[Entry], seq: int, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) for each user key whose newest version with sequence <= `seq` is a value.

    `versions` is a merged stream in internal order (or its reverse, with `reverse`).
    O(1) work per version; shadowed versions and tombstones are skipped, not yielded.
    """
    limit = (seq << 8) | 0xFF  # trailers above this belong to writes after the snapshot
    if not reverse:
        last: bytes | None = None
        for key, trailer, value in versions:
            if trailer > limit or key == last:
                continue
            last = key
            if trailer & 0xFF == KIND_VALUE:
                yield key, value
        return
    # Reverse: a key's versions arrive oldest first, so the visible one is the last
    # with trailer <= limit before the key changes.
    cur: bytes | None = None
    cur_trailer = -1
    cur_value = b""
    for key, trailer, value in versions:
        if key != cur:
            if cur_trailer >= 0 and cur_trailer & 0xFF == KIND_VALUE:
                yield cur, cur_value  # type: ignore[misc]  # cur is bytes whenever cur_trailer >= 0
            cur, cur_trailer = key, -1
        if trailer <= limit:
            cur_trailer, cur_value = trailer, value
    if cur_trailer >= 0 and cur_trailer & 0xFF == KIND_VALUE:
        yield cur, cur_value  # type: ignore[misc]


def prefix_bounds(prefix: bytes) -> tuple[bytes, bytes | None]:
    """[start, stop) covering exactly the keys that begin with `prefix`.

    stop is the prefix with its last non-0xFF byte incremented (and what follows
    dropped); a prefix of only 0xFF bytes has no upper bound.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return prefix, None
    return prefix, stripped[:-1] + bytes([stripped[-1] + 1])
