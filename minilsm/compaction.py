"""Compaction: merging tables into fewer, larger ones and dropping dead data.

Two styles, as in RocksDB:

* **Leveled** (default; LevelDB, RocksDB).  Level 0 fills with flushed tables;
  when it holds `level0_compaction_trigger` of them they are all merged with
  the overlapping tables of level 1.  Level i >= 1 may hold
  ``level1_max_bytes * level_size_multiplier**(i-1)`` bytes; past that, one of
  its tables (round-robin by key) is merged into level i+1.  Reads probe few
  tables (one per level); a merge rewrites the overlapped tables of level i+1
  too, so a byte is rewritten each time the level above merges into its table,
  up to about `level_size_multiplier` times per level once the levels fill
  (write amplification up to ~ multiplier x levels).
* **Size-tiered** (Cassandra's STCS, RocksDB's universal).  Every table is a
  sorted run in level 0; once `tiered_min_threshold` runs *adjacent in age*
  have similar sizes (within `tiered_bucket_low`..`high` of their average;
  smaller runs among them, flushes of memtables not yet full, join too) they
  merge into one.  Writes are cheaper (each byte is rewritten about
  log(N) times), but reads probe more tables and dead data lives longer.
  Only runs adjacent in age merge, so "newest run first" stays a valid read
  order (Cassandra instead reconciles by timestamp on every read).

When no level is over its limit, leveled compaction also compacts tables
that are mostly tombstones (`tombstone_compaction`; tiered: a run that is, with
every older run), so that mass deletes give
their space back, and after that does LevelDB's **seek compaction**
(`seek_compaction`): a table that reads keep probing in vain is merged into the
level below, so that those reads ask one filter fewer.

What may be dropped is decided by `drop_dead`, which flushes use too.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from minilsm.errors import CorruptionError
from minilsm.iterators import Entry, concat, merge
from minilsm.keys import KIND_DELETE
from minilsm.options import Options
from minilsm.sstable.builder import TableBuilder, TableMeta
from minilsm.sstable.reader import TableReader
from minilsm.stats import Stats
from minilsm.version import KeyRanges, Version


@dataclass
class Compaction:
    """One unit of compaction work: merge `inputs` (level `level`) with `overlaps` (level `output_level`).

    (A tiered `compact_range` takes every table of the store as `inputs` of level 0, deeper levels' too:
    level 0's inputs are merged as a source each, whatever their level.)
    """

    level: int
    output_level: int
    inputs: list[TableReader]
    overlaps: list[TableReader]
    reason: str
    split_output: bool = True
    """Split output at target_file_size (leveled); a tiered run stays one table."""
    drops_all_tombstones: bool = False
    """True when nothing older than the inputs exists anywhere (tiered merge of the oldest runs)."""
    by_seek: bool = False
    """Set off by reads (seek compaction), not by the size of a level: the store paces these (see `db.SEEK_PACE`)."""

    @property
    def all_inputs(self) -> list[TableReader]:
        return self.inputs + self.overlaps

    def input_bytes(self) -> int:
        return sum(t.file_size for t in self.all_inputs)

    def is_trivial_move(self) -> bool:
        """Whether the inputs can move to `output_level` as they are, with nothing rewritten.

        True when nothing in the output level overlaps them and their key ranges
        are pairwise disjoint, so they form a valid sorted run there: one table of
        a level >= 1 (LevelDB's trivial move), or several level-0 tables from a
        load in key order, which would otherwise be merged and rewritten only to
        come out the same.  Nothing is dropped by a move (no version is shadowed
        across disjoint tables; tombstones stay until a real merge).  O(n log n)
        in the inputs.
        """
        if self.overlaps or self.output_level == self.level or not self.inputs:
            return False
        ordered = sorted(self.inputs, key=lambda t: t.smallest)
        return all(a.largest < b.smallest for a, b in pairwise(ordered))


SEEK_ALLOWANCE_MIN: Final = 100
"""Fewest vain probes a table is allowed before seek compaction takes it (LevelDB's ``allowed_seeks`` floor)."""
SEEK_ALLOWANCE_BYTES: Final = 16 << 10
"""Bytes of a table per allowed vain probe.  LevelDB (db/version_set.cc) reckons that one disk seek costs about
as much as compacting 40 KB (a compaction reads and writes ~25 times the bytes it moves), and allows, to be
conservative, one seek per 16 KiB: a table is compacted once its wasted seeks have cost about 2.5 times what
its compaction will.  That is tuned for disk seeks, not for minilsm's in-memory filter probes; minilsm keeps
LevelDB's figure for parity."""


def seek_allowance(t: TableReader) -> int:
    """Vain probes (`TableReader.seek_charge`) table `t` may take before seek compaction is due.  O(1)."""
    return max(SEEK_ALLOWANCE_MIN, t.file_size // SEEK_ALLOWANCE_BYTES)


def max_bytes_for_level(options: Options, level: int) -> int:
    """Size limit of level >= 1: level1_max_bytes * multiplier^(level-1)."""
    return int(options.level1_max_bytes * options.level_size_multiplier ** (level - 1))


def pick_compaction(
    version: Version,
    options: Options,
    pointers: Sequence[bytes | None],
    *,
    seek: bool = True,
    oldest_snapshot: int | None = None,
    quiet: bool = False,
) -> Compaction | None:
    """The most urgent compaction, or None when nothing is due.  O(tables).

    Leveled: the level most over its size limit; if none is, a table that is mostly tombstones (when
    `options.tombstone_compaction`; `oldest_snapshot` is the sequence number of the oldest live snapshot, and
    `quiet` says no writes wait in the memtables), then a seek
    compaction (when `options.seek_compaction` and `seek`: the store holds seek compactions back for a while
    after one, see `db.SEEK_PACE`).  Tiered: runs of similar size; if none are due and the store is `quiet`, a
    run that is mostly tombstones with every older run (`tiered_tombstone_compaction`).
    """
    if options.compaction_style == "tiered":
        c = _pick_tiered(version, options)
        if c is None and options.tombstone_compaction and quiet:
            c = tiered_tombstone_compaction(version, oldest_snapshot)
        return c
    best_level, best_score = -1, 1.0
    for level in range(options.max_levels - 1):  # the last level has no limit: nowhere to go
        if level == 0:
            score = len(version.levels[0]) / options.level0_compaction_trigger
        else:
            score = version.level_bytes(level) / max_bytes_for_level(options, level)
        if score >= best_score:
            best_level, best_score = level, score
    if best_level < 0:
        c = tombstone_compaction(version, oldest_snapshot, quiet) if options.tombstone_compaction else None
        if c is None and options.seek_compaction and seek:
            c = seek_compaction(version, options)
        return c
    if best_level == 0:
        return level0_compaction(version, "level 0 has too many tables")
    tables = version.levels[best_level]
    pointer = pointers[best_level] if best_level < len(pointers) else None
    # Round-robin over the key space, as LevelDB's compact_pointer: the first table
    # after the last one compacted, so that every key range gets its turn.
    chosen = next((t for t in tables if pointer is None or t.smallest > pointer), tables[0])
    overlaps = version.overlapping(best_level + 1, chosen.smallest, chosen.largest)
    return Compaction(best_level, best_level + 1, [chosen], overlaps, f"level {best_level} over its size limit")


TOMBSTONE_RATIO: Final = 0.5
"""A table whose entries are at least this fraction tombstones is compacted (`tombstone_compaction`) even when
its level is under its size limit (level 0: below its trigger)."""


def tombstone_compaction(version: Version, oldest_snapshot: int | None, quiet: bool) -> Compaction | None:
    """Tables that are mostly tombstones, compacted so that the tombstones and what they delete go; or None.

    After mass deletes, the tombstones wait in level 0 below its trigger, or in a
    level under its size limit, with the values they delete below them, until a
    merge from above reaches that key range: a store that deleted most of its keys
    would keep its space (LevelDB's behaviour; RocksDB's answer is to weigh
    deletions into the sizes that pick compactions, and to compact bottom tables
    with deletions once no snapshot needs them).  Here, at `TOMBSTONE_RATIO`
    tombstones among the entries:

    * level 0 is merged into level 1, as its trigger would, once one of its tables is, when `quiet` (no
      writes waiting in the memtables, as after a reopen): while deletes go on, each flush of them would
      set off a merge that the trigger makes one of four (at 1M keys deleting them all ran at 0.78 of
      the rate for it), and the trigger reaches them anyway (inline, `background=False`, the write that
      flushes finds the new memtable empty, so there it does run at each flush);
    * a table of a deeper level is merged into the level below when a deeper
      level overlaps its key range, where the tombstones drop the values they
      shadow, and go on down while anything older may hold their keys (as a size
      compaction would merge it; moved, not rewritten, when the level below has
      nothing in its range), even into a level at its size limit: unlike a seek
      compaction's (`_fits_below`), such a merge shrinks what it merges into by
      what the tombstones delete, and if they pass through, the size compaction
      it sets off carries them on down;
    * such a table is rewritten in place when nothing deeper overlaps it, which
      drops every tombstone, but only once no live snapshot is older than the
      table's newest version: one that is may need a tombstone to hide an older
      value, and a rewrite keeping it would be picked again and again.

    Each pick empties level 0, moves tombstones a level down or drops them, so
    the work ends.  O(tables), plus O(levels) bisections a table over the ratio.
    """
    for t in version.levels[0] if quiet else ():
        if t.meta.num_deletions >= TOMBSTONE_RATIO * t.meta.num_entries:
            return level0_compaction(version, f"level-0 table {t.number} is mostly tombstones")
    for level in range(1, len(version.levels)):
        for t in version.levels[level]:
            meta = t.meta
            if meta.num_deletions < TOMBSTONE_RATIO * meta.num_entries:
                continue
            reason = f"table {t.number} is {meta.num_deletions} tombstones of {meta.num_entries} entries"
            if _probed_after(version, level, t):  # an older table, in a deeper level, may hold its keys
                return Compaction(level, level + 1, [t], version.overlapping(level + 1, t.smallest, t.largest), reason)
            elif oldest_snapshot is None or oldest_snapshot >= meta.max_seq:
                return Compaction(level, level, [t], [], reason)
    return None


def seek_compaction(version: Version, options: Options) -> Compaction | None:
    """The table most over its seek allowance, merged into the level below; None if no table is over.

    LevelDB's seek compaction: a read that probes a table in vain and goes on to
    another has paid for a probe that merging the table downwards would save, so
    once a table's vain probes reach `seek_allowance` it is compacted (level 0:
    with every level-0 table, as for the size trigger).  LevelDB charges only the
    first table of a read that probes several; minilsm charges every table a read
    probes in vain (`TableReader.seek_charge`, kept by the read counters, so reads
    pay nothing more), so its tables reach the allowance sooner.  A table that no
    other table is probed after (nothing older overlaps its key range) is never
    chosen: LevelDB never charges it, and compacting it would save no probe.
    Nor is one whose merge could fill the level below past its size limit
    (`_fits_below`).  O(tables), plus up to O(tables) per table over its allowance: `_probed_after` lists the
    older tables that overlap it, level by level (a bisection, then every table its key range meets; a level-0
    table of a random load meets them all).
    """
    over = [(t.seek_charge / seek_allowance(t), level, t) for level, t in version.tables()]
    over = [o for o in over if o[0] >= 1.0]
    over.sort(key=lambda o: o[0], reverse=True)
    for _, level, t in over:
        if not _probed_after(version, level, t):
            continue
        reason = f"seek compaction: table {t.number} probed {t.seek_charge} times without a hit"
        if level == 0:
            c = level0_compaction(version, reason)
        else:
            c = Compaction(level, level + 1, [t], version.overlapping(level + 1, t.smallest, t.largest), reason)
        if c is not None and _fits_below(version, options, c):
            c.by_seek = True
            return c
    return None


def _fits_below(version: Version, options: Options, c: Compaction) -> bool:
    """Whether `c`'s output level stays within its size limit even if the merge drops nothing.

    The seek allowance weighs a table's vain probes against the price of one
    merge.  A merge that fills the level below past its limit sets off size
    compactions there, and in a store whose levels all sit at their limits (as
    a large load leaves them) those run down the whole tree: at 10M keys the
    first reads after a reopen set off 117 compactions and 1.6 GB of rewriting,
    and ran at a tenth of their rate for over a minute (bench/RESULTS.md, "Seek
    compaction at 10M keys").  Such a table waits until the level below has
    room.  Level 0 is the exception: every read probes its tables, and with
    LevelDB's sizes (four 4 MiB tables into a 10 MiB level 1) its merge never
    fits, yet it is the merge the next writes would run anyway; a read-only
    store would otherwise probe them forever (at 1M keys, 4.5 tables per read
    instead of about 2).  O(tables in the output level).
    """
    out = c.output_level
    if c.level == 0 or out >= options.max_levels - 1:  # the last level has no limit
        return True
    grown = version.level_bytes(out) + sum(t.file_size for t in c.inputs)
    return grown <= max_bytes_for_level(options, out)


def _probed_after(version: Version, level: int, t: TableReader) -> bool:
    """Whether a read missing in `t` may go on to another table: an older table overlaps `t`'s key range."""
    if level == 0:
        older = version.levels[0][version.levels[0].index(t) + 1 :]  # level 0 is newest first
        if any(o.smallest <= t.largest and t.smallest <= o.largest for o in older):
            return True
    return any(version.overlapping(n, t.smallest, t.largest) for n in range(level + 1, len(version.levels)))


def level0_compaction(version: Version, reason: str) -> Compaction | None:
    """Every level-0 table, merged with the level-1 tables its key range overlaps.

    All of them, not only those in some key range: level-0 tables overlap, and
    moving a newer one below an older one that shares a key would make the
    older version win reads.  (LevelDB expands its choice to every transitively
    overlapping level-0 table; taking them all is the simple superset.)
    """
    inputs = list(version.levels[0])
    if not inputs:
        return None
    lo = min(t.smallest for t in inputs)
    hi = max(t.largest for t in inputs)
    return Compaction(0, 1, inputs, version.overlapping(1, lo, hi), reason)


def _pick_tiered(version: Version, options: Options) -> Compaction | None:
    runs = version.levels[0]  # newest first
    n = len(runs)
    for i in range(n):
        total = runs[i].file_size  # of the runs in the bucket
        count = 1
        j = i + 1
        # Grow a window of age-adjacent runs while each older one stays within the bucket around the
        # average size of the window's runs, or is smaller than the bucket: a small run (a flush of a
        # memtable not yet full, as reopening or flush() makes) is cheap to merge, and left out it would
        # split its neighbours into windows too short to merge, for good.
        while j < n:
            size = runs[j].file_size
            avg = total / count
            if size > options.tiered_bucket_high * avg:
                break
            if size >= options.tiered_bucket_low * avg:
                total += size
                count += 1
            j += 1
        if j - i >= options.tiered_min_threshold:
            window = list(runs[i:j])
            return Compaction(
                0,
                0,
                window,
                [],
                f"{len(window)} runs of similar size",
                split_output=False,
                drops_all_tombstones=(j == n and version.bottom_level_with_data() == 0),
            )
    return None


def tiered_tombstone_compaction(version: Version, oldest_snapshot: int | None) -> Compaction | None:
    """Size-tiered: the newest run that is mostly tombstones, merged with every older run; or None.

    After mass deletes a tiered store keeps the tombstones in the newer runs and
    the values they delete in the older ones until runs of similar size happen to
    merge, which for the largest run may be never: deleting 90% of 200k keys left
    15.6 times the live data on disk (bench/RESULTS.md, "Space after mass
    deletes").  Only a merge that reaches the oldest run can drop a tombstone, so
    the run is merged with all the runs older than it, as RocksDB's universal
    compaction does with a file its deletion collector marked
    (``PickDeleteTriggeredCompaction``).  Two conditions keep that from running
    when it would not pay:

    * the run is at least `TOMBSTONE_RATIO` tombstones, as for leveled; and the
      runs merged are at least `TOMBSTONE_RATIO` / 2 tombstones among them.  Each
      tombstone deletes at most one older version, so the merge frees at most
      twice its tombstones: without the second test a queue's flushes (every key
      written and deleted again, runs of tombstones only) would rewrite the whole
      store for the little each flush deletes;
    * no live snapshot is older than the merge's newest version (one may need a
      tombstone to hide an older value, and a merge that keeps tombstones would be
      picked again and again), and the store has nothing in deeper levels (a store
      made leveled and reopened tiered), which may hold what a tombstone deletes.

    The caller asks only when `quiet` (no writes waiting in the memtables): while
    deletes go on, every flush of them would set off a merge of the whole store.
    Every tombstone of the merged runs goes, so the work ends.  O(runs²), and a store has few runs.
    """
    runs = version.levels[0]  # newest first
    if version.bottom_level_with_data() != 0:
        return None
    for i, run in enumerate(runs):
        meta = run.meta
        if meta.num_deletions < TOMBSTONE_RATIO * meta.num_entries:
            continue
        window = list(runs[i:])
        deletions = sum(t.meta.num_deletions for t in window)
        entries = sum(t.meta.num_entries for t in window)
        if deletions < TOMBSTONE_RATIO / 2 * entries:
            continue
        if oldest_snapshot is not None and oldest_snapshot < max(t.meta.max_seq for t in window):
            continue
        reason = f"run {run.number} is {meta.num_deletions} tombstones of {meta.num_entries} entries"
        return Compaction(0, 0, window, [], reason, split_output=False, drops_all_tombstones=True)
    return None


def manual_compaction(
    version: Version,
    smallest: bytes | None,
    largest: bytes | None,
    options: Options,
    fresh: Collection[int],
    from_level: int = 0,
) -> Compaction | None:
    """The next step of `compact_range`: push the data in [smallest, largest] down one level.

    Leveled: the range's tables in the shallowest level from `from_level` on that holds any, above the
    deepest level holding data.  The caller goes on from each step's output level, so the call ends
    after at most one step per level, as LevelDB's CompactRange, however many flushes land in the range
    meanwhile (starting again from level 0 each time, it could chase them for as long as writers write).
    Tiered: one step merges every run into one (runs must stay age-adjacent, so a
    key range cannot be merged alone), dropping every tombstone no snapshot needs.
    Tables of deeper levels (a store made leveled, reopened tiered; tiered merges
    never reach them) join that merge as sources of their own, so that
    `compact_range` reclaims their dead versions too.  A single run in `fresh`
    (written by an earlier such merge, under snapshots that all still live, as
    `bottom_compactions` takes it) is left as it is: it holds nothing more to drop.
    """
    if options.compaction_style == "tiered":
        # Level 0 first: its runs are newest first, and each deeper level is older than the one above.
        tables = [t for level in version.levels for t in level]
        if not tables:
            return None
        if len(tables) == 1:
            # Already one run: rewritten only to drop its tombstones or the versions a flush kept for
            # snapshots (more versions than keys; the filter counts each user key once), unless it is fresh:
            # then what it keeps, live snapshots need, and a rewrite would keep it all again, at every call.
            meta = tables[0].meta
            if tables[0].number in fresh or (meta.num_deletions == 0 and meta.num_entries == tables[0].filter.num_keys):
                return None
        # Every table of the store is an input, each merged as a source of its own (level 0's rule), so
        # nothing older than the output remains anywhere.
        return Compaction(0, 0, tables, [], "manual compaction", split_output=False, drops_all_tombstones=True)
    bottom = max(1, version.bottom_level_with_data())
    for level in range(from_level, bottom):
        if level == 0:
            if version.overlapping(0, smallest, largest):
                return level0_compaction(version, "manual compaction")
            continue
        inputs = version.overlapping(level, smallest, largest)
        if inputs:
            lo, hi = inputs[0].smallest, inputs[-1].largest
            return Compaction(level, level + 1, inputs, version.overlapping(level + 1, lo, hi), "manual compaction")
    return None


def bottom_compactions(
    version: Version, smallest: bytes | None, largest: bytes | None, fresh: Collection[int]
) -> list[Compaction]:
    """Rewrites in place of the deepest level's tables in [smallest, largest] (the last step of `compact_range`).

    Merging down leaves the bottom level's other tables untouched, yet they may still
    hold versions that were kept for snapshots since released; rewriting them drops
    those, as RocksDB's ``bottommost_level_compaction=kForce`` does.  The tables in
    `fresh` (those this or an earlier `compact_range` wrote, under snapshots that
    all still live) hold nothing more to drop and are left out: a full
    `compact_range` would otherwise write its last merge's outputs twice, and a
    second call would rewrite the whole bottom level again.  The
    others go as one rewrite per run of adjacent tables, whose outputs stay inside
    that run's key range and so between the fresh tables around it.
    """
    bottom = version.bottom_level_with_data()
    if bottom == 0:
        return []
    runs: list[list[TableReader]] = [[]]
    for t in version.overlapping(bottom, smallest, largest):  # a slice of the level, in key order
        if t.number in fresh:
            runs.append([])
        else:
            runs[-1].append(t)
    return [Compaction(bottom, bottom, run, [], "manual compaction of the bottom level") for run in runs if run]


def flush_entries(memtable_entries: Iterator[Entry], snapshots: Sequence[int], stats: Stats) -> Iterator[Entry]:
    """The versions a flush writes from a memtable: `drop_dead`'s, keeping every tombstone.

    A level-0 table lies above older tables that may hold the keys a tombstone deletes, so a flush
    never drops one (compaction drops them once nothing below can hold their keys).
    """
    return drop_dead(memtable_entries, snapshots, _keep_tombstones, stats)


def _keep_tombstones(key: bytes) -> bool:
    return False


def drop_dead(
    versions: Iterator[Entry],
    snapshots: Sequence[int],
    can_drop_tombstone: Callable[[bytes], bool],
    stats: Stats,
) -> Iterator[Entry]:
    """Keep only the versions some reader can still see.

    `versions` is in internal order; `snapshots` are the live snapshots' sequence
    numbers, ascending.  The snapshots cut the sequence axis into stripes; a
    reader at any sequence sees, per key, only the newest version of its stripe,
    so each stripe keeps its newest version and the rest are shadowed.  A
    tombstone left as the oldest kept version of its key is dropped too, when
    `can_drop_tombstone(key)` says nothing older can exist below.  O(1) per
    version without snapshots, O(log snapshots) with; a version is passed on as
    soon as it is known to stay, so the usual key, with one version, costs a
    few comparisons and no list.
    """
    cur: bytes | None = None
    last_stripe = -1
    # The kept tombstones of `cur` since its last kept value: passed on only if a value follows, or
    # if `can_drop_tombstone(cur)` says no; the versions are otherwise yielded as they come.
    tombstones: list[Entry] = []
    shadowed = dropped = 0
    try:
        for entry in versions:
            key = entry[0]
            stripe = bisect_left(snapshots, entry[1] >> 8) if snapshots else 0
            if key != cur:
                if tombstones:
                    if can_drop_tombstone(cur):  # type: ignore[arg-type]  # cur is a key once tombstones is non-empty
                        dropped += len(tombstones)
                    else:
                        yield from tombstones
                    tombstones.clear()
                cur, last_stripe = key, stripe
            elif stripe == last_stripe:
                shadowed += 1
                continue
            else:
                last_stripe = stripe
            if entry[1] & 0xFF == KIND_DELETE:
                tombstones.append(entry)
            else:
                if tombstones:
                    yield from tombstones
                    tombstones.clear()
                yield entry
        if tombstones:
            if can_drop_tombstone(cur):  # type: ignore[arg-type]
                dropped += len(tombstones)
            else:
                yield from tombstones
            tombstones.clear()
    finally:
        # Counted when the stream ends or is abandoned: exactly what was consumed.
        stats.entries_dropped_shadowed += shadowed
        stats.tombstones_dropped += dropped


def write_tables(
    entries: Iterator[Entry],
    new_builder: Callable[[], TableBuilder],
    target_file_size: int | None,
) -> list[TableMeta]:
    """Write `entries` into tables, starting a new one past `target_file_size` (None: one table).

    A split falls only between user keys, so every version of a key lands in one
    table and the tables of a level never share a key.  The per-version work is
    `TableBuilder.add_run`'s loop.
    """
    outputs: list[TableMeta] = []
    builder: TableBuilder | None = None
    it = iter(entries)
    try:
        # A table's first version goes in unconditionally; `add_run` then fills it up to the first
        # new user key past the target and hands that version back to start the next table.
        pending = next(it, None)
        while pending is not None:
            builder = new_builder()
            builder.add(*pending)
            pending = builder.add_run(it, target_file_size)
            outputs.append(builder.finish())
            builder = None
    finally:
        if builder is not None:
            builder.abandon()
    return outputs


def write_compaction_tables(
    c: Compaction,
    entries: Iterator[Entry],
    new_builder: Callable[[], TableBuilder],
    target_file_size: int | None,
) -> list[TableMeta]:
    """`write_tables` for compaction `c`'s merged stream (`compaction_entries`).

    The merge trusts each input's versions to be in order and of known kinds, as every read does once a block's
    checksum passed (`sstable.reader.check_versions`).  A version the builder refuses (ValueError) can only come
    from an input block forged or damaged with a valid checksum, so the inputs are verified and the first that
    fails is named: a `CorruptionError`, as any other damage.  Free until then.
    """
    try:
        return write_tables(entries, new_builder, target_file_size)
    except ValueError as e:
        for t in c.all_inputs:
            try:
                t.verify()
            except CorruptionError as damage:
                raise damage from e
        raise  # no input is damaged: the builder's refusal is a bug here, not damage


def compaction_entries(c: Compaction, below: KeyRanges, snapshots: Sequence[int], stats: Stats) -> Iterator[Entry]:
    """The merged, cleaned stream a compaction writes; `below` is the key ranges of the store's levels."""
    # Level-0 tables (and tiered runs) overlap, so each is its own source; a deeper level is one run.
    # Sources go newest first (level 0 is listed so), the order `merge` needs.
    sources = [t.iter() for t in c.inputs] if c.level == 0 else [concat(t.iter() for t in c.inputs)]
    if c.overlaps:
        sources.append(concat(t.iter() for t in c.overlaps))
    if c.drops_all_tombstones:

        def can_drop(key: bytes) -> bool:
            return True
    else:

        def can_drop(key: bytes) -> bool:
            return c.output_level > 0 and not below.key_may_exist_below(c.output_level, key)

    return drop_dead(merge(sources), snapshots, can_drop, stats)
