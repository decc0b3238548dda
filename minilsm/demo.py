"""The reads-avoided demonstration: ``minilsm demo``, the README's first command.

It loads the same keys twice, into a store with Bloom filters and into one
built with ``bits_per_key=0`` (every filter probe says maybe), then runs the
same point reads on both and sets the counters side by side.

The missing keys are chosen as LevelDB's ``readmissing`` benchmark chooses
them: they fall *inside* the tables' key ranges (present keys are
``key%012d`` of even numbers, missing keys of odd ones), so a key-range check
cannot reject them and only a filter can spare the data-block read.  Keys are
loaded in a shuffled order, so that every level-0 table spans nearly the whole
key space and a read must consider a table in each level, as in a store that
took random writes.  The block cache is off, so every data block a read needs
is a read from the file; flushes and compactions run inline, so the two
stores are built identically and nothing runs during the reads.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from minilsm.db import DB
from minilsm.errors import ExistsError
from minilsm.manifest import MANIFEST_NAME
from minilsm.report import pct, size
from minilsm.stats import DBStats

DEFAULT_KEYS: Final = 100_000
DEFAULT_READS: Final = 20_000
VALUE_SIZE: Final = 100
"""Bytes per value, as LevelDB's db_bench."""
_MEMTABLES: Final = 36
"""Memtables' worth of data the demo loads: about 36 flushes, 4 of them left in level 0."""
_PROGRESS_EVERY: Final = 1.0  # seconds between progress lines within a phase
_STORE_NAMES: Final = ("with-filters", "without-filters")
"""The two stores' directories under the demo's path: with filters, then without."""

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ReadPhase:
    """One run of point reads on one store, and what the counters saw during it."""

    reads: int
    found: int
    seconds: float
    tables_considered: int
    tables_skipped_by_range: int
    filter_checks: int
    filter_negatives: int
    false_positives: int
    true_positives: int
    block_reads: int
    block_bytes_read: int
    measured_fpr: float | None
    expected_fpr: float | None

    @property
    def us_per_read(self) -> float:
        return self.seconds / self.reads * 1e6 if self.reads else 0.0

    @property
    def block_reads_per_read(self) -> float:
        return self.block_reads / self.reads if self.reads else 0.0

    @property
    def probes_per_read(self) -> float:
        """Tables whose key range held the key, per read: the tables a filter could speak for."""
        return self.filter_checks / self.reads if self.reads else 0.0

    @classmethod
    def from_stats(cls, reads: int, found: int, seconds: float, s: DBStats) -> ReadPhase:
        return cls(
            reads,
            found,
            seconds,
            s.tables_considered,
            s.tables_skipped_by_range,
            s.filter_checks,
            s.filter_negatives,
            s.false_positives,
            s.filter_true_positives,
            s.block_reads,
            s.block_bytes_read,
            s.measured_fpr,
            s.expected_fpr,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "us_per_read": self.us_per_read,
            "block_reads_per_read": self.block_reads_per_read,
            "probes_per_read": self.probes_per_read,
        }


@dataclass(frozen=True, slots=True)
class StoreRun:
    """One of the two stores: its shape after loading, and its two read phases."""

    bits_per_key: float
    path: str
    load_seconds: float
    tables_per_level: tuple[int, ...]
    table_bytes: int
    filter_bytes: int
    missing: ReadPhase
    present: ReadPhase

    def to_dict(self) -> dict[str, Any]:
        return {
            "bits_per_key": self.bits_per_key,
            "path": self.path,
            "load_seconds": self.load_seconds,
            "tables_per_level": list(self.tables_per_level),
            "table_bytes": self.table_bytes,
            "filter_bytes": self.filter_bytes,
            "missing": self.missing.to_dict(),
            "present": self.present.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class DemoResult:
    keys: int
    reads: int
    value_size: int
    with_filters: StoreRun
    without_filters: StoreRun
    seconds: float
    kept: bool
    """Whether the stores were left in place (a PATH was given) for ``minilsm tables``/``explain``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "keys": self.keys,
            "reads": self.reads,
            "value_size": self.value_size,
            "seconds": self.seconds,
            "with_filters": self.with_filters.to_dict(),
            "without_filters": self.without_filters.to_dict(),
        }

    def render(self) -> str:
        a, b = self.with_filters, self.without_filters
        rows: list[tuple[str, str, str]] = []

        def section(title: str) -> None:
            rows.append((title, "", ""))

        def row(name: str, f: Callable[[StoreRun], str]) -> None:
            rows.append(("  " + name, f(a), f(b)))

        section("store")
        row("tables per level (L0/L1/...)", lambda r: "/".join(map(str, _trim(r.tables_per_level))))
        row("table bytes", lambda r: size(r.table_bytes))
        row("of which filters", lambda r: size(r.filter_bytes))
        row("load time", lambda r: f"{r.load_seconds:.1f} s")
        section(f"{a.missing.reads:,} reads of missing keys (inside the tables' key ranges)")
        row("tables whose range holds the key, per read", lambda r: f"{r.missing.probes_per_read:.2f}")
        row("filter negatives = block reads avoided", lambda r: f"{r.missing.filter_negatives:,}")
        row("false positives", lambda r: f"{r.missing.false_positives:,}")
        row("measured false-positive rate", lambda r: pct(r.missing.measured_fpr))
        row("expected false-positive rate", lambda r: pct(r.missing.expected_fpr))
        row("data-block reads per read", lambda r: f"{r.missing.block_reads_per_read:.3f}")
        row("µs per read", lambda r: f"{r.missing.us_per_read:.1f}")
        section(f"{a.present.reads:,} reads of present keys")
        row("filter negatives = block reads avoided", lambda r: f"{r.present.filter_negatives:,}")
        row("data-block reads per read", lambda r: f"{r.present.block_reads_per_read:.3f}")
        row("µs per read", lambda r: f"{r.present.us_per_read:.1f}")

        head = ("", f"bits_per_key={_num(a.bits_per_key)}", f"bits_per_key={_num(b.bits_per_key)}")
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(head[1]), *(len(r[1]) for r in rows))
        w2 = max(len(head[2]), *(len(r[2]) for r in rows))
        lines = [
            f"minilsm demo: {self.keys:,} keys ({len(_key(0))}-byte keys, {self.value_size}-byte values, written "
            "in shuffled order) loaded twice,",
            "into a store with Bloom filters and into one without.  Block cache off: every data block a read needs "
            "is read from its file.",
            "",
            f"{head[0]:<{w0}}  {head[1]:>{w1}}  {head[2]:>{w2}}",
        ]
        lines += [f"{n:<{w0}}  {x:>{w1}}  {y:>{w2}}".rstrip() for n, x, y in rows]
        m_a, m_b = a.missing, b.missing
        avoided = 1 - m_a.block_reads / m_b.block_reads if m_b.block_reads else 0.0
        lines += [
            "",
            f"A missing-key read cost {m_a.block_reads_per_read:.3f} data-block reads with filters and "
            f"{m_b.block_reads_per_read:.2f} without: the filters avoided {pct(avoided, 1)} of them, and "
            f"{m_b.us_per_read / m_a.us_per_read if m_a.us_per_read else 0:.1f}x the time.",
            f"Measured false-positive rate {pct(m_a.measured_fpr)}; the tables' own (1 - e^(-kn/m))^k predicts "
            f"{pct(m_a.expected_fpr)}.  Done in {self.seconds:.1f} s.",
        ]
        if self.kept:
            lines += [
                "",
                "Look inside:",
                f"  minilsm tables {a.path}",
                f"  minilsm explain {a.path} {_key(self.keys | 1).decode()}",
                f"  minilsm explain {b.path} {_key(self.keys | 1).decode()}",
            ]
        return "\n".join(lines)

    __str__ = render


def _trim(levels: Sequence[int]) -> Sequence[int]:
    n = len(levels)
    while n > 1 and not levels[n - 1]:
        n -= 1
    return levels[:n]


def _num(x: float) -> str:
    return f"{x:g}"


def _key(n: int) -> bytes:
    return b"key%012d" % n


def _value(n: int) -> bytes:
    return (b"%012d|" % n * (VALUE_SIZE // 13 + 1))[:VALUE_SIZE]


def store_options(keys: int) -> dict[str, Any]:
    """Options that spread `keys` over about 36 memtables' worth of tables on three levels.

    Level 0 is compacted at 8 tables, so the store ends with four or five there,
    as a busy store between compactions has; level 1 holds 4 memtables' worth,
    level 2 ten times that, more than all the data.
    """
    total = keys * (len(_key(0)) + VALUE_SIZE + 16)
    memtable = max(2048, total // _MEMTABLES)
    return {
        "memtable_size": memtable,
        "target_file_size": memtable,
        "level0_compaction_trigger": 8,
        "level1_max_bytes": 4 * memtable,
        "block_size": min(4096, max(256, memtable // 16)),
        "block_cache_size": 0,
        "background": False,
    }


def run_demo(
    path: str | None = None,
    keys: int = DEFAULT_KEYS,
    reads: int = DEFAULT_READS,
    bits_per_key: float = 10.0,
    progress: Progress | None = None,
    seed: int = 1,
) -> DemoResult:
    """Build both stores under `path` (a temporary directory, removed afterwards, when None) and measure.

    Under a given `path` the stores go to ``with-filters`` and ``without-filters``
    and are kept; they must not exist yet, nor may `path` itself be a store
    (`ExistsError`, raised before anything is loaded).  Raises `RuntimeError` if a read returns a wrong answer.  O(keys)
    writes and 4 x `reads` reads.
    """
    if keys < 2 or reads < 1:
        raise ValueError("the demo needs at least 2 keys and 1 read")
    if path is not None:
        if os.path.lexists(os.path.join(path, MANIFEST_NAME)) or os.path.lexists(os.path.join(path, "CURRENT")):
            # Two stores built inside a store's directory would sit among its files, to be copied, checked and
            # destroyed with it; a PATH that is a store was most likely meant for `minilsm tables` or `explain`.
            raise ExistsError(f"{path} holds a store: the demo builds its two stores in a directory of their own")
        for name in _STORE_NAMES:
            if os.path.lexists(os.path.join(path, name)):
                raise ExistsError(
                    f"{os.path.join(path, name)} already exists (an earlier demo's?): the demo builds new stores; "
                    "remove it or give another PATH"
                )
    say = progress or (lambda message: None)
    start = time.perf_counter()
    rng = random.Random(seed)
    order = list(range(keys))
    rng.shuffle(order)
    missing = [2 * rng.randrange(keys - 1) + 1 for _ in range(reads)]  # odd, between two present keys
    present = [2 * rng.randrange(keys) for _ in range(reads)]
    with contextlib.ExitStack() as cleanup:
        root = path if path is not None else cleanup.enter_context(tempfile.TemporaryDirectory(prefix="minilsm-demo-"))
        runs = []
        for bpk, name in zip((bits_per_key, 0.0), _STORE_NAMES, strict=True):
            runs.append(_run_store(os.path.join(root, name), bpk, order, missing, present, say))
        return DemoResult(keys, reads, VALUE_SIZE, runs[0], runs[1], time.perf_counter() - start, path is not None)


def _run_store(
    path: str, bits_per_key: float, order: list[int], missing: list[int], present: list[int], say: Progress
) -> StoreRun:
    label = f"bits_per_key={_num(bits_per_key)}"
    with DB(path, bits_per_key=bits_per_key, error_if_exists=True, **store_options(len(order))) as db:
        say(f"{label}: loading {len(order):,} keys into {path}")
        # Batches of at most 1/20 of a memtable, so that memtables fill evenly and the flush count holds.
        batch = max(1, min(100, len(order) // (20 * _MEMTABLES)))
        t0 = last = time.perf_counter()
        for i in range(0, len(order), batch):
            with db.write_batch() as wb:
                for n in order[i : i + batch]:
                    wb.put(_key(2 * n), _value(2 * n))
            now = time.perf_counter()
            if now - last >= _PROGRESS_EVERY:
                last = now
                say(f"{label}:   {min(i + batch, len(order)):,} of {len(order):,} keys loaded ({now - t0:.0f} s)")
        db.flush()
        load_seconds = time.perf_counter() - t0
        shape = db.stats()
        say(f"{label}: loaded in {load_seconds:.1f} s; reading {len(missing):,} missing keys")
        phases = [_read_phase(db, missing, False)]
        say(f"{label}: reading {len(present):,} present keys")
        phases.append(_read_phase(db, present, True))
    return StoreRun(
        bits_per_key,
        path,
        load_seconds,
        tuple(level.tables for level in shape.levels),
        shape.table_bytes,
        sum(t.filter_bytes for t in shape.tables),
        *phases,
    )


def _read_phase(db: DB, numbers: list[int], hit: bool) -> ReadPhase:
    keys = [_key(n) for n in numbers]
    get = db.get
    db.stats(reset=True)
    t0 = time.perf_counter()
    answers = [get(k) for k in keys]
    seconds = time.perf_counter() - t0
    s = db.stats(reset=True)
    expected = [_value(n) for n in numbers] if hit else [None] * len(numbers)
    if answers != expected:
        wrong = next(k for k, a, e in zip(keys, answers, expected, strict=True) if a != e)
        raise RuntimeError(f"{db.path}: the store returned a wrong answer for {wrong!r}")
    return ReadPhase.from_stats(len(keys), sum(a is not None for a in answers), seconds, s)
