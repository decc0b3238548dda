"""Iterators: merging sorted sources into one view of the store at a sequence number.

Every source (a memtable, a level-0 table, a deeper level read as one run)
yields *versions* ``(user_key, trailer, value)`` in internal order: user key
ascending, newest version first.

Scans use `merge_visible`, which keeps, for each user key, the newest version
visible at the read's sequence number and hides tombstones.  It merges in two
gears of one loop.  A short scan (a seek and a few steps) goes a version at a
time through a heap that compares whole entries in C (so its output is sorted
by user key only, a key's versions coming out together in no set order) and
picks the largest visible trailer of each such run.  Past `_SHORT_SCAN` keys
the scan counts as long and moves to rounds: every source's next few hundred
versions are pulled into a list (in C), a bisection cuts the lists at the
same key, `list.sort` (C timsort over a few sorted runs) merges the cut
pieces, and a dict keeps each key's newest version; a round that holds a
tombstone or a version newer than the snapshot goes through the
version-at-a-time loop instead, so that rule is written once.  Reverse scans
mirror both.

Compaction needs internal order proper, so it keeps `merge` (`heapq.merge`
keyed on the user key, with sources newest first; O(log s) per version for s
sources).
"""

from __future__ import annotations

import heapq
import sys
from bisect import bisect_left
from collections.abc import Callable, Generator, Iterable, Iterator
from heapq import heapify, heapreplace
from itertools import chain, islice, repeat
from operator import and_, itemgetter
from typing import Any, Final

# The max-heap helpers heapq.merge(reverse=True) uses: public from Python 3.14, private before.
if sys.version_info >= (3, 14):
    from heapq import heapify_max, heapreplace_max
else:
    from heapq import _heapify_max as heapify_max
    from heapq import _heapreplace_max as heapreplace_max  # type: ignore[attr-defined]

from minilsm.errors import StoreIOError
from minilsm.keys import KIND_DELETE, KIND_VALUE

Entry = tuple[bytes, int, bytes]
"""One version: (user_key, trailer, value)."""

_SHORT_SCAN: Final = 4096
"""Keys a scan yields a version at a time before it moves to rounds.  Moving costs about 0.1 ms (versions
decoded ahead, and the first, small rounds), which the rounds win back only over a few thousand keys; and
until then a seek followed by a few steps decodes only the versions it yields."""

_FIRST_ROUND: Final = 16
_ROUND: Final = 256
"""Versions a source reads on by when a round needs more of it: a round costs O(sources) Python steps,
which this amortizes (a round then merges about this many versions of its densest source).  A source's
first top-up asks for `_FIRST_ROUND` versions and each next one for twice as many, up to `_ROUND`, so a
scan that stops soon after moving to rounds has read ahead little."""

_ABOVE_TRAILERS: Final = 1 << 64
"""Larger than any trailer: ``(key, _ABOVE_TRAILERS)`` sorts after every version of `key`."""

_KEY, _TRAILER, _VALUE = itemgetter(0), itemgetter(1), itemgetter(2)

assert KIND_DELETE == 0 and KIND_VALUE == 1  # a round tests for tombstones as trailers with a zero low byte


def merge(sources: list[Iterator[Entry]]) -> Iterator[Entry]:
    """Merge sources, each in internal order and given newest first, into internal order.  Lazy.

    The heap compares user keys only (`itemgetter(0)`, a C call: no tuple built
    and no trailer negated per version), and heapq.merge breaks ties by source
    position, so for a user key present in several sources it yields all the
    first source's versions, then all the second's, and so on.  That is
    internal order because of the rule `Version.get` also relies on: for
    a user key, every version in a newer source has a larger sequence number
    than every version in an older one.  It holds for every compaction's
    sources, snapshots or not: level-0 tables (and tiered runs) hold disjoint
    sequence ranges and are listed newest first; level 1 gets level-0 data
    only by a compaction (or move) of every level-0 table then present, so a
    table still in level 0 holds newer versions than level 1 does; and a
    key's versions move down together (tables are cut only between user
    keys), so each level holds an older range of them than the level above.
    (tests/test_compaction.py checks the output of every compaction of a
    history with snapshots.)  O(log s) per version for s sources.
    """
    if len(sources) == 1:
        return sources[0]
    return heapq.merge(*sources, key=itemgetter(0))


def concat(runs: Iterable[Iterator[Entry]]) -> Iterator[Entry]:
    """Chain the iterators of a level's disjoint, sorted tables into one source.  Lazy; no Python frame per version."""
    return chain.from_iterable(runs)


def merge_visible(
    sources: list[Iterator[Entry]],
    seq: int,
    reverse: bool = False,
    on_end: Callable[[], None] | None = None,
    clean: Callable[[], list[bool]] | None = None,
) -> Generator[tuple[bytes, bytes], None, None]:
    """(key, value) for each user key of the merged sources whose newest version with sequence <= `seq` is a value.

    Each source yields versions in internal order (each its exact reverse with
    `reverse`).  The rule, for each user key: the version with the largest
    trailer <= ``seq << 8 | 0xFF``; none if it is a tombstone.

    The first `_SHORT_SCAN` keys: one heap step per version (C, O(log s) for
    s sources) and a few comparisons; a key's run of versions is decided when
    the run ends.  The rest goes in rounds (`_rounds`): per version one pull
    into a list, a bisected slice, a share of a C sort and a dict store, no
    Python bytecode, plus O(s) Python steps per round of a few hundred
    versions.  A round that holds a tombstone or a version above the
    snapshot is fed through the version-at-a-time loop.  `clean`, called once
    when a scan moves to rounds, may name the sources known (from table
    properties) to hold only values with sequence <= `seq`, one flag per
    source: their versions are not checked.  An `OSError` from a source becomes
    `StoreIOError`.  `on_end` is called once every source is exhausted (not
    when the consumer stops early).
    """
    limit = (seq << 8) | 0xFF  # trailers above this belong to writes after the snapshot
    # Heap items are [entry, source number, next]: entries compare as whole tuples in C.  Equal
    # entries (a version seen both in a memtable and in the table a flush just wrote it to) fall
    # to the source number, so `next` is never compared.
    heap: list[Any] = []
    try:
        for n, source in enumerate(sources):
            step = source.__next__
            for entry in source:
                heap.append([entry, n, step])
                break
    except OSError as e:
        raise StoreIOError(f"a scan failed reading a table: {e}") from e
    if reverse:
        heapify_max(heap)
        replace = heapreplace_max
    else:
        heapify(heap)
        replace = heapreplace
    short = _SHORT_SCAN  # keys left before the scan moves to rounds; never 0 again once it has
    rounds: Iterator[tuple[bool, Iterable[Any]]] | None = None
    cur: bytes | None = None
    best = -1  # the largest trailer <= limit seen for `cur`; -1 for none
    best_value = b""
    while True:
        while heap:
            top = heap[0]
            key, trailer, value = top[0]
            if key != cur:
                if best >= 0 and best & 0xFF == KIND_VALUE:
                    yield cur, best_value  # type: ignore[misc]  # cur is bytes whenever best >= 0
                cur, best = key, -1
                short -= 1
                if not short:
                    break  # between two keys: every key before `key` is out, none of `key`'s versions is
            if best < trailer <= limit:
                best, best_value = trailer, value
            try:
                top[0] = top[2]()
            except OSError as e:
                raise StoreIOError(f"a scan failed reading a table: {e}") from e
            except StopIteration:
                # Drop the dry source: the heap's last item takes the top's place and sifts.
                last = heap.pop()
                if heap:
                    replace(heap, last)
                continue
            replace(heap, top)
        if heap:  # the scan is long: every live source, its head version first, goes to rounds
            known = [False] * len(sources) if clean is None else clean()
            rounds = _rounds([(item[0], sources[item[1]], known[item[1]]) for item in heap], limit, reverse)
            heap = []
        elif best >= 0 and best & 0xFF == KIND_VALUE:
            yield cur, best_value  # type: ignore[misc]
        cur, best = None, -1
        if rounds is None:
            break
        for decided, versions in rounds:
            if decided:
                yield from versions
            else:  # through the loop above, as a heap of one source
                it = iter(versions)
                heap = [[next(it), 0, it.__next__]]
                break
        else:
            break
    if on_end is not None:
        on_end()


def _rounds(
    starts: list[tuple[Entry, Iterator[Entry], bool]], limit: int, reverse: bool
) -> Iterator[tuple[bool, Iterable[Any]]]:
    """The rest of a long scan, a round at a time: ``(True, (key, value) pairs)`` or ``(False, versions to decide)``.

    `starts` holds, per source, the version it has handed over but the merge
    has not used, the source, and whether it is known to hold only values at
    or below `limit`.  Each source keeps its unread versions as one list in
    internal order (ascending, whichever the direction); before every round,
    a source whose unread versions are all of one key (or none) reads on by
    `_ROUND` more (fewer in its first rounds).  The round's
    bound is the smallest last key among the sources that have more to come
    (the largest first key, in reverse): what a source yields later sorts after
    what it has yielded, so no version of a key before the bound is still to
    come.  Every source gives up its versions of the keys before
    the bound (one bisection and one slice each); the pieces are concatenated
    and sorted (C timsort merging sorted runs; whole tuples, so a key's versions
    come oldest first).  If every trailer is at most `limit` and none is a
    tombstone (two C passes over the pieces of sources not known to be clean),
    each key's newest version is its last, and one dict built in C keeps
    exactly that: the round is clean, and its pairs need no Python bytecode.
    Otherwise the round's versions, sorted in scan order, go back for the
    per-version rule.  O(1) C work per version, O(s log n) Python per round
    for s sources.
    """
    # Per source: [versions, lo, hi, source or None once it has run dry, known clean, versions to hold];
    # versions[lo:hi] are unread.
    live: list[list[Any]] = [[[v], 0, 1, s, c, _FIRST_ROUND] for v, s, c in starts]
    while live:
        bound: bytes | None = None
        for s in live:
            versions, lo, hi, source = s[0], s[1], s[2], s[3]
            # Read on only when the unread versions are all of one key (or none): the last round's bound
            # was this source's last key.  Sources the bound did not reach keep what they hold.
            while source is not None and (hi == lo or versions[lo][0] == versions[hi - 1][0]):
                want = s[5]
                s[5] = min(2 * want, _ROUND)
                try:
                    more = list(islice(source, want))
                except OSError as e:
                    raise StoreIOError(f"a scan failed reading a table: {e}") from e
                if len(more) < want:
                    source = s[3] = None
                if reverse:  # the lists stay in internal order; a reverse scan takes from their ends
                    more.reverse()
                    versions = more + versions[lo:hi]
                else:
                    versions = versions[lo:hi] + more
                lo, hi = 0, len(versions)
                s[0], s[1], s[2] = versions, lo, hi
            if source is not None:
                edge = versions[lo][0] if reverse else versions[hi - 1][0]
                if bound is None or (edge > bound if reverse else edge < bound):
                    bound = edge
        pieces = []
        unchecked = []  # the pieces of sources not known to be clean
        for s in live:
            versions, lo, hi = s[0], s[1], s[2]
            if reverse:
                cut = lo if bound is None else bisect_left(versions, (bound, _ABOVE_TRAILERS), lo, hi)
                if cut < hi:
                    pieces.append(versions[cut:hi])
                    s[2] = cut
                    if not s[4]:
                        unchecked.append(pieces[-1])
            else:
                cut = hi if bound is None else bisect_left(versions, (bound,), lo, hi)
                if cut > lo:
                    pieces.append(versions[lo:cut])
                    s[1] = cut
                    if not s[4]:
                        unchecked.append(pieces[-1])
        live = [s for s in live if s[1] < s[2] or s[3] is not None]
        if not pieces:
            continue
        clean = all(_values_at_most(piece, limit) for piece in unchecked)
        batch = pieces[0]  # one source: in internal order, so a key's versions come newest first
        if len(pieces) > 1:
            for piece in pieces[1:]:
                batch += piece
            batch.sort()
        if clean:
            newest = dict(zip(map(_KEY, batch), map(_VALUE, batch), strict=True))  # the last version of a key wins
            if len(newest) < len(batch) and len(pieces) == 1:  # two versions in one source: oldest first, then
                batch.sort()
                newest = dict(zip(map(_KEY, batch), map(_VALUE, batch), strict=True))
            yield True, reversed(newest.items()) if reverse else newest.items()
        else:
            if reverse:
                batch.reverse()
            yield False, batch


def _values_at_most(versions: list[Entry], limit: int) -> bool:
    """Whether every version is a value with trailer <= `limit`.  Two C passes."""
    return max(map(_TRAILER, versions)) <= limit and all(map(and_, map(_TRAILER, versions), repeat(0xFF)))


def prefix_bounds(prefix: bytes) -> tuple[bytes, bytes | None]:
    """[start, stop) covering exactly the keys that begin with `prefix`.

    stop is the prefix with its last non-0xFF byte incremented (and what follows
    dropped); a prefix of only 0xFF bytes has no upper bound.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return prefix, None
    return prefix, stripped[:-1] + bytes([stripped[-1] + 1])
