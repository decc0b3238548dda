"""`Options`: every tunable of a store in one documented place, with LevelDB-like defaults.

`DB(path, **kwargs)` builds an `Options` from keyword arguments, so
``DB(path, bits_per_key=8)`` and ``DB(path, Options(bits_per_key=8))`` are the same.
The sizes (memtable, level 1, table files) are LevelDB's, so that a store
reaches several levels with data sets that fit a laptop benchmark and a
Python process holds little in memory.  Larger sizes trade memory for fewer
rewrites: bench/RESULTS.md ("Sizing") measures four times these.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from minilsm.fs import DEFAULT_FS, FileSystem

MAX_BLOCK_SIZE: Final = 1 << 30
"""Largest `block_size`.  A block is read with one ``pread``, which Linux cuts at 2 GiB - 4 KiB (a longer block
would read short and be reported as corrupt), and its entries' offsets are u32; a block exceeds `block_size` by
at most one entry (64 MiB and 64 KiB), so 1 GiB keeps every block well inside both."""


_PLYVEL_NAMES: Final = {
    "write_buffer_size": "plyvel's name; here memtable_size",
    "lru_cache_size": "plyvel's name; here block_cache_size",
    "bloom_filter_bits": "plyvel's name; here bits_per_key, 10 by default",
    "max_file_size": "plyvel's name; here target_file_size",
    "compression": "plyvel's; minilsm does not compress",
    "block_restart_interval": "plyvel's; minilsm's blocks keep whole keys",
    "comparator": "plyvel's; keys always sort bytewise here",
    "comparator_name": "plyvel's; keys always sort bytewise here",
}
"""plyvel's `DB` keywords that `Options` has not got, with what a port should pass instead (README.md, "Coming
from plyvel")."""


@dataclass(frozen=True, slots=True)
class Options:
    """Options of one store.  Immutable; use `dataclasses.replace` to vary one."""

    # -- filters and tables --
    bits_per_key: float = 10.0
    """Bloom filter bits per key in each new table; 0 disables filters (every probe says maybe)."""
    block_size: int = 4096
    """Target size in bytes of a table's data block (the unit of a disk read); at most `MAX_BLOCK_SIZE` (1 GiB)."""
    block_cache_size: int = 8 << 20
    """Bytes of decoded data blocks kept in memory (0 disables the cache).  Hits are counted apart from disk reads."""
    max_open_files: int = 500
    """Table files kept open at once; past that, the file cache closes those not read lately (CLOCK).  Filters and
    indexes stay in memory regardless."""
    mmap_reads: bool = False
    """Read tables through a memory mapping of each file instead of ``pread`` (RocksDB's ``allow_mmap_reads``;
    LevelDB maps up to 1000 table files on 64-bit systems): a point read costs about 1-2 us less.  Off by default
    because a read then never releases the interpreter lock, so other threads of the process (a writer, the store's
    own flush thread) wait up to the switch interval for it after each of their system calls; and because a mapped
    table that another program cuts short ends the process with SIGBUS instead of a `CorruptionError` (see
    `FileSystem.open_mapped`).  For a process that mostly reads, from one thread."""

    # -- write path --
    memtable_size: int = 4 << 20
    """Approximate bytes of the memtable before it is frozen and flushed to a table.  Counted as encoded bytes:
    the memtable's Python objects take about 2.4x that with 100-byte values (see `minilsm.memtable`), and a full
    memtable being flushed sits beside the next one.  With `compaction_worker`, the worker process holds its own
    copy while it flushes one: it peaked at 341 MiB for a 64 MiB memtable of 100-byte values, and lets it go
    once done."""
    sync: bool = False
    """fsync the log before acknowledging every write (per-call `sync=` overrides)."""
    background: bool = True
    """Run flushes and compactions in a background thread (False: inline, deterministic: in the writing thread, at
    the start of the first write that finds the memtable full, before that write is logged, or at the first write
    after an open that left work due)."""
    compaction_worker: bool = True
    """With `background`: merge compactions in a helper process (`minilsm.worker`, one for all the stores of this
    Python process) instead of the background thread, so that they run on a second core and do not share the
    interpreter lock with reads and writes, as LevelDB's compaction thread runs beside the writer.  A flush goes to
    the worker too when no merge is due (the frozen memtable sent pickled); while the worker merges, the thread
    flushes.  Used only with the real file system (`fs` a plain `FileSystem`); if the worker cannot start or dies,
    the job runs in the thread instead.  bench/RESULTS.md ("The compaction worker", "Loads: flushes in the worker")
    measures what it buys."""

    # -- opening --
    create_if_missing: bool = True
    error_if_exists: bool = False
    paranoid_checks: bool = True
    """A damaged log record followed by good ones is an error (True) or the end of recovery (False)."""

    # -- compaction --
    compaction_style: Literal["leveled", "tiered"] = "leveled"
    level0_compaction_trigger: int = 4
    """Level-0 tables that start a compaction into level 1."""
    level0_stop_writes_trigger: int = 12
    """Level-0 tables at which writes wait for compaction to catch up."""
    level1_max_bytes: int = 10 << 20
    level_size_multiplier: int = 10
    target_file_size: int = 2 << 20
    """Compaction output is split into tables of about this many bytes."""
    max_levels: int = 7
    """Levels of the tree (LevelDB's fixed 7).  A store opens with fewer only while no table sits at or below
    the new limit; else the open raises `ValueError`, as a bad option does (RocksDB: InvalidArgument)."""
    seek_compaction: bool = True
    """Leveled: when no level is over its size, compact a table that reads keep probing in vain into the level
    below (LevelDB's seek compaction; RocksDB removed it), if the level below has room for it (level 0 always goes),
    paced to at most a quarter of the time.  Reads then ask fewer filters, for compaction work that reads cause:
    at 1M keys, missing-key reads ran 1.5x and seeks 1.6x as fast once it had drained levels 0 and 1; loads were
    unaffected (bench/RESULTS.md, "Seek compaction on and off").  Present-key reads ran 1.35x slower while it ran
    in the background thread, and at 0.99 of their rate with `compaction_worker` ("The compaction worker").  Turn
    it off for a shape that depends on the writes alone, or when compactions run in the thread and the process
    reads only briefly after opening."""
    tombstone_compaction: bool = True
    """Leveled: when no level is over its size, compact level 0 or a deeper table when at least half of its
    entries are tombstones, so that after mass deletes the tombstones and the values they delete go without
    `compact_range` (`compaction.tombstone_compaction`; LevelDB keeps both until a merge from above reaches them;
    RocksDB weighs deletions into its compaction scores).  Size-tiered: once no writes are pending, merge the
    newest run that is at least half tombstones with every older run, when enough of what it merges is tombstones
    (`compaction.tiered_tombstone_compaction`; RocksDB's universal compaction does so with a file its deletion
    collector marks).  Off: LevelDB's behaviour, with no compaction work that deletes set off.  bench/RESULTS.md
    ("Space after mass deletes") measures both."""
    tiered_min_threshold: int = 4
    """Size-tiered: tables of similar size merged once this many exist."""
    tiered_bucket_low: float = 0.5
    tiered_bucket_high: float = 1.5

    fs: FileSystem = field(default=DEFAULT_FS, repr=False, compare=False)
    """The filesystem seam; tests pass a fault-injecting one."""

    def __post_init__(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(msg)

        kinds: dict[object, tuple[type, ...]] = {"int": (int,), "float": (int, float), "bool": (bool,)}
        for f in dataclasses.fields(self):
            want = kinds.get(f.type)  # the annotation's text: `from __future__ import annotations`
            v = getattr(self, f.name)
            # Caught here, not as a crash halfway through creating the store (bool is an int: refused).
            if want is not None and (not isinstance(v, want) or (isinstance(v, bool) and bool not in want)):
                raise TypeError(f"{f.name} must be {f.type}, not {type(v).__name__}")
            if f.type == "float" and isinstance(v, int):
                # Such an int is used in float arithmetic: past float's range it would raise
                # OverflowError there, in the middle of a compaction.
                try:
                    float(v)
                except OverflowError:
                    raise ValueError(f"{f.name} is too large for a float (a {v.bit_length()}-bit int)") from None
        if not isinstance(self.fs, FileSystem):
            raise TypeError(f"fs must be a minilsm.fs.FileSystem, not {type(self.fs).__name__}")
        if not isinstance(self.compaction_style, str):  # a wrong type, as for the numbers; a wrong name below
            raise TypeError(f"compaction_style must be a str, not {type(self.compaction_style).__name__}")
        # Past ~43 bits per key k stays at 30 (MAX_K): more bits still lower the rate (1e-9 at 43, 3e-18 at 100),
        # just less than they would at the optimal k; far past it, a filter exhausts memory.
        need(0 <= self.bits_per_key <= 100, f"bits_per_key must be in [0, 100], got {self.bits_per_key}")
        need(
            64 <= self.block_size <= MAX_BLOCK_SIZE,
            f"block_size must be in [64, {MAX_BLOCK_SIZE}], got {self.block_size}",
        )
        need(self.block_cache_size >= 0, "block_cache_size must be >= 0")
        need(self.max_open_files >= 1, "max_open_files must be >= 1")
        need(self.memtable_size >= 1, "memtable_size must be >= 1")
        need(self.compaction_style in ("leveled", "tiered"), "compaction_style must be 'leveled' or 'tiered'")
        need(self.level0_compaction_trigger >= 1, "level0_compaction_trigger must be >= 1")
        need(
            self.level0_stop_writes_trigger >= self.level0_compaction_trigger,
            "level0_stop_writes_trigger must be >= level0_compaction_trigger",
        )
        need(self.level1_max_bytes >= 1, "level1_max_bytes must be >= 1")
        need(self.level_size_multiplier >= 2, "level_size_multiplier must be >= 2")
        need(self.target_file_size >= 1, "target_file_size must be >= 1")
        need(2 <= self.max_levels <= 20, "max_levels must be in 2..20")
        need(self.tiered_min_threshold >= 2, "tiered_min_threshold must be >= 2")
        need(
            0 < self.tiered_bucket_low <= 1 <= self.tiered_bucket_high,
            "tiered buckets must satisfy 0 < low <= 1 <= high",
        )

    @classmethod
    def make(cls, options: Options | None = None, **kwargs: Any) -> Options:
        """Options from an optional base plus keyword overrides; unknown names are a TypeError.  O(fields): the
        overrides make one new `Options`, checked whole."""
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options must be an Options, not {type(options).__name__} (or pass keyword arguments)")
        base = options if options is not None else cls()
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            # A port from plyvel passes plyvel's names: say what each is here, not only that it is unknown.
            said = [f"{name} ({_PLYVEL_NAMES[name]})" if name in _PLYVEL_NAMES else name for name in unknown]
            raise TypeError(f"unknown option(s): {', '.join(said)}")
        return dataclasses.replace(base, **kwargs) if kwargs else base
