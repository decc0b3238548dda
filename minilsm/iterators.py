"""Iterators: merging sorted sources into one view of the store at a sequence number.

Every source (a memtable, a level-0 table, a deeper level read as one run)
yields *versions* ``(user_key, trailer, value)`` in internal order: user key
ascending, newest version first.

Scans use `merge_visible`: one generator that merges the sources with a heap
and keeps, for each user key, the newest version visible at the read's
sequence number, hiding tombstones.  Its heap compares user keys, and whole
entries on a tie, which heapq does in C, instead of calling a Python key
function per version; so its output is sorted by user key only, a key's
versions coming out together in no set order, and it picks the largest
visible trailer of each such run.  Reverse scans merge the sources' reversed
streams (user key descending) the same way.  A `ScanHandle` lets the store end
a scan from outside when it closes, at no cost per key (see there).
Compaction needs internal order proper, so it keeps `merge` (`heapq.merge`
keyed on the user key, with sources newest first; O(log s) per version for s
sources).
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable, Generator, Iterable, Iterator
from heapq import heapify, heapreplace
from itertools import chain
from operator import itemgetter
from typing import Any, NoReturn

# The max-heap helpers heapq.merge(reverse=True) uses: public from Python 3.14, private before.
if sys.version_info >= (3, 14):
    from heapq import heapify_max, heapreplace_max
else:
    from heapq import _heapify_max as heapify_max
    from heapq import _heapreplace_max as heapreplace_max  # type: ignore[attr-defined]

from minilsm.errors import ClosedError, StoreIOError
from minilsm.keys import KIND_VALUE

Entry = tuple[bytes, int, bytes]
"""One version: (user_key, trailer, value)."""


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


class ScanHandle:
    """Ends a `merge_visible` scan from outside, in any thread: after `cancel`, its next step raises `ClosedError`.

    The scan keeps its heap here.  Each heap item carries the step function of
    its source, so `cancel` replaces every one with a function that raises,
    and drops the sources: the scan's loop tests nothing per key to notice, its
    next step just calls a different function.  The few moments when an item
    is outside the heap (the fill, a dry source being dropped) and the end of
    the scan check `message` instead, once per source or per scan.  Costs:
    `cancel` O(sources); nothing per key.

    A scan that its owner replaced with another (an iterator that moved) may
    be cancelled with a `follow` function: a loop still stepping the scan then
    goes on with what ``follow()`` yields instead of raising, as a plyvel loop
    follows a seek made in its body.  That too costs nothing per key: the scan
    only asks once it is cancelled.
    """

    __slots__ = ("__weakref__", "_heap", "ended", "follow", "last", "message", "sources")

    def __init__(self, sources: list[Iterator[Entry]]) -> None:
        self.sources = sources  # the scan's own list, which `cancel` empties
        self._heap: list[Any] = []
        self.message: str | None = None  # set by `cancel`: the ClosedError's message
        self.last: bytes | None = None
        """The key the scan yielded last (None before the first): where an iterator stepping it stands."""
        self.ended = False
        """The scan ran out (not ended by an exception, which leaves its generator over too)."""
        self.follow: Callable[[], Iterator[tuple[bytes, bytes]]] | None = None
        """Set by `cancel`: what the scan goes on with instead of raising."""

    def cancel(self, message: str, follow: Callable[[], Iterator[tuple[bytes, bytes]]] | None = None) -> None:
        """Make the scan's next step raise `ClosedError(message)`, and let go of its sources now.

        With `follow` (for a scan its owner has replaced with another), the
        next step yields from ``follow()`` instead.  Safe while the scan runs
        in another thread: the step under way finishes, and the next one
        raises (or follows).
        """
        self.follow = follow  # before `message`: a scan that sees the message sees this too
        self.message = message  # before the swap, so a scan that misses the swap below sees it at its next check

        def closed() -> NoReturn:
            raise ClosedError(message)

        # list() copies the heap in one C call: a scan stepping in another thread cannot move items under us.
        for item in list(self._heap):
            item[3] = closed
        self.sources.clear()

    def drop(self) -> None:
        """Let go of the heap and the sources of a scan that will not step again (its generator closed).  O(sources)."""
        self._heap.clear()
        self.sources.clear()

    def check(self) -> None:
        """Raise `ClosedError` if the handle was cancelled.  O(1)."""
        if self.message is not None:
            raise ClosedError(self.message)


def merge_visible(
    sources: list[Iterator[Entry]],
    seq: int,
    reverse: bool = False,
    handle: ScanHandle | None = None,
) -> Generator[tuple[bytes, bytes], None, None]:
    """(key, value) for each user key of the merged sources whose newest version with sequence <= `seq` is a value.

    Each source yields versions in internal order (each its exact reverse
    with `reverse`).  One generator does the heap merge and the choice of the
    visible version, so a key costs one generator step, one heap replace (C,
    O(log s) for s sources) and a few comparisons; a key's run of versions is
    decided when the run ends, shadowed versions and tombstones are skipped.
    A source is dropped from the heap once it runs dry.  An `OSError` from a
    source becomes `StoreIOError`.  A `handle` made from the
    same list (``ScanHandle(sources)``) can end the scan: once it is
    cancelled, the scan's next step raises `ClosedError` (or goes on with
    the `follow` the cancel gave).  The handle also holds the key
    yielded last (`ScanHandle.last`), where an iterator that seeks or turns
    around takes up from.
    """
    if handle is None:
        handle = ScanHandle(sources)
    elif handle.sources is not sources:
        raise ValueError("the handle was made for other sources")
    limit = (seq << 8) | 0xFF  # trailers above this belong to writes after the snapshot
    try:
        # Heap items are [user key, entry, source number, next], compared in C.  The key comes first
        # because two entries compare as tuples, which tests their keys for equality and then again
        # for order: with the key alone in front, the usual comparison is one of bytes (7% faster
        # scans of five sources, none lost with three).  Equal keys fall to the entries, equal
        # entries (a version seen both in a memtable and in the table a flush just wrote it to) to
        # the source number, so `next` is never compared.
        heap = handle._heap
        try:
            _fill(heap, sources)  # a cancel before it emptied `sources`
        except ClosedError as e:
            # A table the store's close closed under a step under way names itself: say why the scan ended.
            restate_closed(e, handle.message)
            raise
        except OSError as e:
            handle.check()  # (the same, for a file closed under a read)
            raise StoreIOError(f"a scan failed reading a table: {e}") from e
        check = handle.check
        check()  # cancelled before or during the fill: the handle may have missed items not yet in the heap
        if reverse:
            heapify_max(heap)
            replace = heapreplace_max
        else:
            heapify(heap)
            replace = heapreplace
        cur: bytes | None = None
        best = -1  # the largest trailer <= limit seen for `cur`; -1 for none
        best_value = b""
        while heap:
            top = heap[0]
            key, trailer, value = top[1]
            if key != cur:
                if best >= 0 and best & 0xFF == KIND_VALUE:
                    handle.last = cur
                    yield cur, best_value  # type: ignore[misc]  # cur is bytes whenever best >= 0
                cur, best = key, -1
            if best < trailer <= limit:
                best, best_value = trailer, value
            try:
                top[1] = entry = top[3]()
                top[0] = entry[0]  # after the call: a source that ends or fails leaves the item whole
            except ClosedError as e:
                restate_closed(e, handle.message)  # as at the fill
                raise
            except OSError as e:
                check()  # (the same, for a file closed under a read)
                raise StoreIOError(f"a scan failed reading a table: {e}") from e
            except StopIteration:
                # Drop the dry source: the heap's last item takes the top's place and sifts.
                last = heap.pop()
                if heap:
                    replace(heap, last)
                check()  # cancelled while `last` was out of the heap
                continue
            replace(heap, top)
        if best >= 0 and best & 0xFF == KIND_VALUE:
            handle.last = cur
            yield cur, best_value  # type: ignore[misc]
        check()  # cancelled after the last step
        handle.ended = True
        return
    except ClosedError:
        follow = handle.follow
        if follow is None:
            raise
    # Superseded (the iterator moved) while a loop steps this scan: the loop goes on where its owner says, from
    # outside the `except`, so that this error does not stay the context of every later one.
    yield from follow()


def restate_closed(e: ClosedError, message: str | None) -> None:
    """Raise ClosedError(`message`), from `e`, if `message` (why the scan was ended) is set and `e` says another
    thing: a table closed under a step names the table, where the reason is the store's close."""
    if message is not None and e.args != (message,):
        raise ClosedError(message) from e


def _fill(heap: list[Any], sources: list[Iterator[Entry]]) -> None:
    """Append each non-empty source's first version to `heap` (in a frame of its own, so no local keeps a source)."""
    for n, source in enumerate(sources):
        step = source.__next__
        for entry in source:
            heap.append([entry[0], entry, n, step])
            break


def prefix_bounds(prefix: bytes) -> tuple[bytes, bytes | None]:
    """[start, stop) covering exactly the keys that begin with `prefix`.

    stop is the prefix with its last non-0xFF byte incremented (and what follows
    dropped); a prefix of only 0xFF bytes has no upper bound.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return prefix, None
    return prefix, stripped[:-1] + bytes([stripped[-1] + 1])
