"""A `Version`: the immutable set of live tables, by level, that a read runs against.

Level 0 holds tables flushed from memtables (and, under size-tiered
compaction, every sorted run); they may overlap, so a read probes each one
whose key range holds the key, newest first.  Levels 1 and deeper each form one
sorted run of non-overlapping tables, so a read probes at most one table per
level, found by binary search over the tables' largest keys.

Flushes and compactions never change a Version: they build a new one and
install it.  A read or an iterator that holds the old one keeps using it, and
its files are not deleted until nothing holds it (see `db.py`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from itertools import pairwise

from minilsm.bloom import KeyHash
from minilsm.sstable.builder import TableMeta
from minilsm.sstable.reader import TableReader

Trace = list[dict[str, object]]


class KeyRanges:
    """Per level, its tables' smallest and largest keys (levels 1+ sorted by them): plain lists, so picklable.

    Enough to say whether a key may exist below a level, which is all a compaction
    needs to know of the rest of the tree; `minilsm.worker` ships it to the
    compaction worker process instead of the tables themselves.
    """

    __slots__ = ("largest", "smallest")

    def __init__(self, smallest: tuple[list[bytes], ...], largest: tuple[list[bytes], ...]) -> None:
        self.smallest = smallest
        self.largest = largest

    def key_may_exist_below(self, level: int, key: bytes) -> bool:
        """Whether a level deeper than `level` holds a table whose range covers `key`.

        Compaction may drop a tombstone only when this is False: otherwise an older
        value below would come back to life.  O(levels x log tables).
        """
        for n in range(level + 1, len(self.smallest)):
            i = bisect_right(self.smallest[n], key)
            if i and self.largest[n][i - 1] >= key:
                return True
        return False


class Version:
    """Live tables by level.  Build with `Version(levels, max_levels)` or `version.apply(...)`; never mutated."""

    __slots__ = (
        "__weakref__",
        "_largest",
        "_sorted_levels",
        "installed_at",
        "levels",
        "ranges",
        "superseded",
    )

    def __init__(self, levels: Iterable[Iterable[TableReader]], max_levels: int) -> None:
        lv = [list(level) for level in levels]
        lv += [[] for _ in range(max_levels - len(lv))]
        # Level 0 newest first: flushed tables hold disjoint, increasing sequence ranges,
        # so max_seq orders them by age (file number breaks ties for empty ranges).
        lv[0].sort(key=lambda t: (t.meta.max_seq, t.number), reverse=True)
        for level in lv[1:]:
            level.sort(key=lambda t: t.smallest)
        self.levels: tuple[tuple[TableReader, ...], ...] = tuple(tuple(level) for level in lv)
        self.superseded = False
        """Set when the store installs a newer Version: this one now only serves old readers."""
        self.installed_at = 0
        """The store's last sequence number when it installed this Version.  The flushes and compactions that
        made it dropped only versions shadowed at or below that number, so it answers any read at a sequence
        number at least this; an older read not protected by a snapshot may find a version missing."""
        # Per level, the tables' smallest and largest keys, to bisect on (built once: a Version never
        # changes, and compaction asks about every tombstone it sees).
        self.ranges = KeyRanges(
            tuple([t.smallest for t in level] for level in self.levels),
            tuple([t.largest for t in level] for level in self.levels),
        )
        """The key ranges alone, which compaction asks about tombstones (in a worker process too)."""
        self._largest = self.ranges.largest
        # For levels 1+, the largest keys of the tables, to bisect on; empty levels are left out
        # so that a read does not even loop over them.
        self._sorted_levels: tuple[tuple[list[bytes], tuple[TableReader, ...]], ...] = tuple(
            (self._largest[n], level) for n, level in enumerate(self.levels) if n > 0 and level
        )

    # -- the read path ------------------------------------------------------------

    def get(
        self, key: bytes, h: KeyHash, seq: int, trace: Trace | None = None, fill_cache: bool = True
    ) -> tuple[int, bytes] | None:
        """The newest version of `key` with sequence <= `seq` in any table: (kind, value), or None.

        Probes level-0 tables newest first, then at most one table per deeper level.
        Each table checks its key range, then its filter, and only then reads a block
        (offered to the block cache if `fill_cache`).
        At most one filter probe per level-0 table and one per deeper level, whose
        table is found by bisection: O(L0 tables + sum over levels of log(tables in level)).
        """
        for table in self.levels[0]:
            found = table.get(key, h, seq, trace, fill_cache)
            if found is not None:
                return found
        for largest, tables in self._sorted_levels:
            i = bisect_left(largest, key)
            if i < len(tables):
                found = tables[i].get(key, h, seq, trace, fill_cache)
                if found is not None:
                    return found
            elif trace is not None:
                self._trace_past_level(tables, trace)
        return None

    def _trace_past_level(self, tables: tuple[TableReader, ...], trace: Trace) -> None:
        """Say in `trace` that the key sorts after the last of `tables`, a level: no table of it is probed, which
        a trace says rather than leave the level out as if it had not been looked at.  A method of its own: its
        search would make `get` build a closure cell at every read, traced or not (+316 instructions a read)."""
        n = next(n for n, level in enumerate(self.levels) if level is tables)
        trace.append({"level": n, "outcome": "past_last_table", "largest": tables[-1].largest})

    def approximate_offset(self, key: bytes | None) -> int:
        """Bytes of table data that sort before `key` (None: all of it), summed over every table, as LevelDB's
        `ApproximateOffsetOf`: a table wholly below counts whole, one that holds the key up to the block that
        would hold it.  O(tables), no read."""
        total = 0
        for level in self.levels:
            for t in level:
                if key is None or t.largest < key:
                    total += t.props.data_size
                elif t.smallest < key:
                    total += t.approximate_offset(key)
        return total

    def tables_for_key(self, key: bytes) -> Iterator[tuple[int, TableReader]]:
        """(level, table) pairs a point read of `key` would consider, in probe order (for may_contain)."""
        yield from ((0, t) for t in self.levels[0])
        for level, tables in enumerate(self.levels[1:], start=1):
            i = bisect_left(self._largest[level], key)
            if i < len(tables):
                yield level, tables[i]

    # -- views for compaction and reporting -------------------------------------

    def tables(self) -> Iterator[tuple[int, TableReader]]:
        """Every (level, table), level 0 first."""
        for level, tables in enumerate(self.levels):
            for t in tables:
                yield level, t

    def numbers(self) -> set[int]:
        return {t.number for level in self.levels for t in level}

    def level_bytes(self, level: int) -> int:
        return sum(t.file_size for t in self.levels[level])

    def overlapping(self, level: int, smallest: bytes | None, largest: bytes | None) -> list[TableReader]:
        """Tables of `level` whose key range meets [smallest, largest] (None: unbounded)."""
        tables = self.levels[level]
        if level > 0 and smallest is not None:
            # Sorted, disjoint: skip the tables wholly below `smallest` by bisection.
            start = bisect_left(self._largest[level], smallest)
            tables = tables[start:]
        out = []
        for t in tables:
            if largest is not None and t.smallest > largest:
                if level > 0:
                    break
                continue
            if smallest is not None and t.largest < smallest:
                continue
            out.append(t)
        return out

    def bottom_level_with_data(self) -> int:
        """The deepest non-empty level (0 for an empty store)."""
        for level in range(len(self.levels) - 1, -1, -1):
            if self.levels[level]:
                return level
        return 0

    def apply(self, removed: Iterable[int], added: Iterable[tuple[int, TableReader]], max_levels: int) -> Version:
        """A new Version without the tables numbered in `removed` and with `added` (level, table) pairs."""
        gone = set(removed)
        levels = [[t for t in level if t.number not in gone] for level in self.levels]
        for level, t in added:
            levels[level].append(t)
        return Version(levels, max_levels)

    def metas(self) -> list[list[TableMeta]]:
        """The per-level table descriptions the manifest records."""
        return [[t.meta for t in level] for level in self.levels]

    def check_invariants(self) -> None:
        """Raise AssertionError unless levels 1+ are sorted and free of overlaps (recovery checks a manifest so)."""
        for level, tables in enumerate(self.levels[1:], start=1):
            for a, b in pairwise(tables):
                if not a.largest < b.smallest:
                    raise AssertionError(
                        f"level {level}: table {a.number} [{a.smallest!r}..{a.largest!r}] overlaps or precedes "
                        f"table {b.number} [{b.smallest!r}..{b.largest!r}]"
                    )
