"""The observability layer: gathers what `db.stats()`, `db.tables()`, `db.explain()` and `db.may_contain()` return.

Nothing here counts or reads on its own account.  The counters are incremented
where things happen (see `stats`); the per-table filter counters live on each
`TableReader`; a traced read is the store's real read path run with a list
that each step appends a dict to (`DB._get` -> `Version.get` ->
`TableReader.get`).  This module only assembles those into the typed, frozen
values of `minilsm.stats` and into `ReadTrace`, and renders them as text for
the command line; and it describes a single table file for ``minilsm dump``.
`db.py` calls down into it, so it never imports `db.py`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final, cast

from minilsm.bloom import BloomFilter, key_hash
from minilsm.fs import FileSystem
from minilsm.keys import KIND_DELETE, KIND_VALUE
from minilsm.memtable import MemTable
from minilsm.sstable.format import (
    BLOCK_INDEX,
    TABLE_SUFFIX,
    Footer,
    Index,
    TableProperties,
    decode_index,
    parse_table_file_name,
    read_block,
    read_footer,
    table_file_name,
)
from minilsm.sstable.reader import TableReader
from minilsm.stats import COUNTER_NAMES, DBStats, FilterCounts, LevelStats, Stats, TableInfo
from minilsm.version import Trace, Version

ShowKey = Callable[[bytes], str]
"""How a report spells a key or value: `show_bytes` (text when it can be) or `bytes.hex`."""


def show_bytes(data: bytes) -> str:
    """`data` as text when it is printable UTF-8, else as ``0x`` and hex: ``b"apple"`` -> ``apple``.

    Text that itself begins with ``0x`` is spelled in hex too, so that ``0x...`` always means hex
    (``b"\\x00\\xff"`` -> ``0x00ff``, ``b"0x00ff"`` -> ``0x307830306666``), and the command line's ``--hex`` takes
    either back.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()
    return text if text.isprintable() and not text.startswith("0x") else "0x" + data.hex()


# -- counters and tables ----------------------------------------------------------


def table_info(level: int, t: TableReader) -> TableInfo:
    """The `TableInfo` row of table `t` at `level`, from its properties, filter and counters.  O(1)."""
    props, bloom = t.props, t.filter
    expected = bloom.expected_fpr()
    # Each counter read once, and the sums made of these reads (`FilterCounts.of`): a read in another thread that
    # lands meanwhile must not make `checks` or the expected false positives disagree with the counts beside them.
    counts = FilterCounts.of(t.filter_negatives, t.filter_positives, t.filter_true_positives, expected)
    return TableInfo(
        level=level,
        number=t.number,
        file_name=table_file_name(t.number),
        file_size=t.file_size,
        entries=props.num_entries,
        tombstones=props.num_deletions,
        smallest=t.smallest,
        largest=t.largest,
        min_seq=props.min_seq,
        max_seq=props.max_seq,
        data_blocks=props.num_data_blocks,
        filter_keys=bloom.num_keys,
        filter_bits=bloom.num_bits,
        filter_k=bloom.k,
        filter_bytes=props.filter_size,
        expected_fpr=expected,
        filter=counts,
        block_reads=t.block_reads,
    )


def table_infos(version: Version) -> list[TableInfo]:
    """Every live table of `version`, level 0 first (newest first there), then by key.  O(tables)."""
    return [table_info(level, t) for level, t in version.tables()]


def snapshot(stats: Stats, version: Version, memtable_bytes: int, live_bytes: int | None = None) -> DBStats:
    """A frozen `DBStats` of the counters in `stats` and the tables of `version`.  O(counters + tables)."""
    tables = table_infos(version)
    levels = []
    for level in range(len(version.levels)):
        rows = [t for t in tables if t.level == level]
        levels.append(
            LevelStats(
                level=level,
                tables=len(rows),
                bytes=sum(t.file_size for t in rows),
                entries=sum(t.entries for t in rows),
                tombstones=sum(t.tombstones for t in rows),
                filter=sum((t.filter for t in rows), FilterCounts()),
                block_reads=sum(t.block_reads for t in rows),
            )
        )
    counted = stats.copy()  # one read of each counter, which the sums (`filter_checks`, ...) are then made of
    counters = {name: getattr(counted, name) for name in COUNTER_NAMES}
    return DBStats(
        **counters, levels=tuple(levels), tables=tuple(tables), memtable_bytes=memtable_bytes, live_bytes=live_bytes
    )


def reset(stats: Stats, version: Version, counted: DBStats) -> None:
    """Take what `counted` (a `snapshot` of `stats` and `version`) holds off the store's and the tables' counters.

    Not a zeroing: a read that other threads make while the snapshot is taken (O(tables)) would then be in
    neither it nor the next one.  Taken off, such a read stays counted, for the next snapshot.  A table's seek
    charge is compaction's, not a report's: it survives (`TableReader.forget_counts`).
    """
    stats.take_off(counted)
    rows = {t.number: t for t in counted.tables}
    for _, t in version.tables():
        row = rows[t.number]
        t.forget_counts(row.filter, row.block_reads)


def live_bytes(pairs: Iterable[tuple[bytes, bytes]]) -> int:
    """Key plus value bytes of the visible (key, value) pairs a full scan yields.  O(data)."""
    return sum(len(k) + len(v) for k, v in pairs)


def may_contain(key: bytes, seq: int, memtables: Sequence[MemTable | None], version: Version) -> bool:
    """False only if a read of `key` at `seq` is certain to find nothing, using no data block.

    The memtables answer exactly (a tombstone there means certainly absent);
    otherwise each table a point read would consider answers with its key
    range and its filter.  Counts nothing: the counters describe reads, and
    this is not one.  O(memtables + tables probed x k).
    """
    for mem in memtables:
        if mem is not None:
            found = mem.get(key, seq)
            if found is not None:
                return found[0] == KIND_VALUE
    h = key_hash(key)
    return any(t.smallest <= key <= t.largest and t.filter.may_contain_hash(h) for _, t in version.tables_for_key(key))


# -- a traced read ------------------------------------------------------------------

_TABLE_OUTCOMES: Final = {
    "found": "found",
    "tombstone": "tombstone (the key was deleted)",
    "false_positive": "not found (false positive)",
    "not_visible": "only versions newer than the read",
}


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One place a read looked: the memtables, one table, or a level none of whose tables can hold the key, and
    what happened there.

    `outcome` is the read path's own word: for the memtables ``miss``, ``found``
    or ``tombstone``; for a table ``skipped_by_range``, ``filter_negative``,
    ``found``, ``tombstone``, ``false_positive`` or ``not_visible``; for a level
    ``past_last_table`` (the key sorts after its last table's largest key, so
    no table of it is probed and no table counts as considered).
    """

    source: str
    """``memtable``, ``immutable memtable`` (the frozen one), ``memtables`` (both missed), ``table`` or ``level``."""
    outcome: str
    level: int | None = None
    number: int | None = None
    smallest: bytes = b""
    largest: bytes = b""
    has_filter: bool = True
    blocks: tuple[int, ...] = ()
    """Data blocks the table looked in (at most one)."""
    cached: tuple[bool, ...] = ()
    """Per block: True if it came from the block cache rather than the file."""

    @property
    def file_name(self) -> str | None:
        return None if self.number is None else table_file_name(self.number)

    def render(self, show_key: ShowKey = show_bytes) -> str:
        """One line, such as ``L2 000015.sst: filter: maybe -> index -> block 3 read -> found``."""
        if self.source == "level":
            return f"L{self.level}: skipped by range (the level ends at {show_key(self.largest)})"
        if self.source != "table":
            where = "memtable, immutable memtable" if self.source == "memtables" else self.source
            return f"{where}: {self.outcome}"
        head = f"L{self.level} {self.file_name}"
        if self.outcome == "skipped_by_range":
            return f"{head}: skipped by range [{show_key(self.smallest)} .. {show_key(self.largest)}]"
        if self.outcome == "filter_negative":
            return f"{head}: filter: no (read avoided)"
        parts = ["filter: maybe" if self.has_filter else "no filter", "index"]
        parts += [
            f"block {b} {'from the block cache' if c else 'read'}"
            for b, c in zip(self.blocks, self.cached, strict=True)
        ]
        parts.append(_TABLE_OUTCOMES.get(self.outcome, self.outcome))
        return f"{head}: {' -> '.join(parts)}"

    def to_dict(self, show_key: ShowKey = bytes.hex) -> dict[str, Any]:
        d: dict[str, Any] = {"source": self.source, "outcome": self.outcome, "text": self.render(show_key)}
        if self.source == "level":
            d.update(level=self.level, largest=show_key(self.largest))
        if self.source == "table":
            d.update(
                level=self.level,
                file=self.file_name,
                smallest=show_key(self.smallest),
                largest=show_key(self.largest),
                has_filter=self.has_filter,
                blocks=list(self.blocks),
                cached=list(self.cached),
            )
        return d


@dataclass(frozen=True, slots=True)
class ReadTrace:
    """One point read, step by step: what ``db.explain(key)`` returns.  ``str()`` gives the readable form."""

    key: bytes
    sequence: int
    """The read saw every write up to this sequence number."""
    value: bytes | None
    """What the read returned (None: not found or deleted)."""
    steps: tuple[TraceStep, ...]

    @property
    def outcome(self) -> str:
        """``found``, ``deleted`` (a tombstone answered the read) or ``not found``."""
        if self.value is not None:
            return "found"
        return "deleted" if self.steps and self.steps[-1].outcome == "tombstone" else "not found"

    @property
    def block_reads(self) -> int:
        """Data blocks read from table files (block-cache hits excluded)."""
        return sum(not c for s in self.steps for c in s.cached)

    @property
    def reads_avoided(self) -> int:
        """Tables whose filter said no: each a data-block read avoided."""
        return sum(s.outcome == "filter_negative" for s in self.steps)

    def render(self, show_key: ShowKey = show_bytes) -> str:
        lines = [
            f"get {show_key(self.key)} at sequence {self.sequence}: {self.outcome}"
            + ("" if self.value is None else f" = {clip(show_key(self.value))}")
        ]
        lines += ["  " + s.render(show_key) for s in self.steps]
        lines.append(
            f"{_plural(self.block_reads, 'data block')} read, {_plural(self.reads_avoided, 'read')} avoided by filters"
        )
        return "\n".join(lines)

    __str__ = render

    def to_dict(self, show_key: ShowKey = bytes.hex) -> dict[str, Any]:
        return {
            "key": show_key(self.key),
            "sequence": self.sequence,
            "outcome": self.outcome,
            "value": None if self.value is None else show_key(self.value),
            "block_reads": self.block_reads,
            "reads_avoided": self.reads_avoided,
            "steps": [s.to_dict(show_key) for s in self.steps],
        }


def read_trace(key: bytes, seq: int, value: bytes | None, trace: Trace, version: Version) -> ReadTrace:
    """Type the dicts a traced read appended; `version` must be the one the read ran against (for levels)."""
    tables = {t.number: (level, t) for level, t in version.tables()}
    steps = []
    for d in trace:
        outcome = str(d["outcome"])
        if "level" in d:  # a level none of whose tables can hold the key
            steps.append(TraceStep("level", outcome, cast(int, d["level"]), largest=cast(bytes, d["largest"])))
            continue
        if "file" not in d:
            source = str(d["where"])
            steps.append(TraceStep("memtables" if source != "memtable" and outcome == "miss" else source, outcome))
            continue
        level, t = tables[cast(int, d["file"])]
        steps.append(
            TraceStep(
                "table",
                outcome,
                level,
                t.number,
                t.smallest,
                t.largest,
                t.filter.num_bits > 0,
                tuple(cast(list[int], d.get("blocks", []))),
                tuple(cast(list[bool], d.get("cached", []))),
            )
        )
    return ReadTrace(key, seq, value, tuple(steps))


# -- text -----------------------------------------------------------------------------


def _plural(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def pct(x: float | None, digits: int = 2) -> str:
    """A rate as a percentage, ``-`` when unknown."""
    return "-" if x is None else f"{x * 100:.{digits}f}%"


def size(n: float) -> str:
    """Bytes in binary units: ``size(1536) == "1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def clip(text: str, width: int = 48) -> str:
    """`text` cut to `width` characters, marking the cut."""
    return text if len(text) <= width else text[: width - 3] + "..."


KEY_CELL_WIDTH: Final = 48
"""Widest key the text reports of tables (``minilsm tables``, ``dump``) show; `--json` has every key whole.  A
column is as wide as its widest cell, so one key near the 64 KiB limit (128 Ki characters in hex) would push
the columns after it, on every row, past any screen."""


def columns(header: Sequence[str] | None, rows: Iterable[Sequence[object]], left: Sequence[int] = (0,)) -> str:
    """Rows under a header (None: none), each column aligned to its widest cell: right, except those in `left`."""
    cells = ([] if header is None else [list(header)]) + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in cells
    )


def format_tables(rows: Sequence[TableInfo], show_key: ShowKey = show_bytes) -> str:
    """``minilsm tables``: one line per live table."""
    if not rows:
        return "no tables (everything is still in the memtable, or the store is empty)"
    return columns(
        (
            "level",
            "file",
            "size",
            "entries",
            "tombstones",
            "smallest",
            "largest",
            "bits/key",
            "k",
            "filter",
            "expected FPR",
            "measured FPR",
            "absent probes",
        ),
        (
            (
                f"L{t.level}",
                t.file_name,
                size(t.file_size),
                f"{t.entries:,}",
                f"{t.tombstones:,}",
                clip(show_key(t.smallest), KEY_CELL_WIDTH),
                clip(show_key(t.largest), KEY_CELL_WIDTH),
                f"{t.bits_per_key:.1f}",
                t.filter_k,
                size(t.filter_bytes),
                pct(t.expected_fpr),
                pct(t.measured_fpr),
                f"{t.filter.absent_probes:,}",
            )
            for t in rows
        ),
    )


def format_manifest(records: Sequence[Any], dropped_bytes: int, show_key: ShowKey = show_bytes) -> str:
    """``minilsm manifest``: the snapshot, then each edit (``+`` a table added, ``-`` one removed).

    `records` as `manifest.manifest_records` returns them, already checked by `manifest.replay_manifest`.
    """
    first = records[0]
    lines = [
        f"format {first['format_version']}: a snapshot and {_plural(len(records) - 1, 'edit')}"
        # Whether an open may drop it (a crash tore it) or must refuse the store (it was acted on) depends on the
        # files the state before it names: `minilsm check` says which.
        + (f", then a torn record of {dropped_bytes:,} bytes" if dropped_bytes else "")
    ]
    for i, record in enumerate(records):
        if i == 0:
            changes = [("", level, t) for level, tables in enumerate(record["levels"]) for t in tables]
            pointers = [(level, p) for level, p in enumerate(record["compact_pointers"]) if p is not None]
        else:
            changes = [("-", level, {"number": n}) for level, n in record["removed"]]
            changes += [("+", level, t) for level, t in record["added"]]
            pointers = record["compact_pointers"]
        lines.append(
            f"{'snapshot' if i == 0 else f'edit {i}'}: next file {record['next_file_number']}, "
            f"last sequence {record['last_sequence']:,}, log {record['log_number']}"
        )
        rows = [_manifest_row(sign, level, t, show_key) for sign, level, t in changes]
        if rows:
            lines.append(columns(None, rows, left=(0, 1, 4, 5, 6)))
        for level, p in pointers:
            shown = "none" if p is None else clip(show_key(bytes.fromhex(p)), KEY_CELL_WIDTH)
            lines.append(f"  compact pointer of L{level}: {shown}")
    return "\n".join(lines)


def _manifest_row(sign: str, level: int, t: dict[str, Any], show_key: ShowKey) -> tuple[str, ...]:
    """One table of a manifest record: a removed one is named by its number alone."""
    head = (f"  {sign:1} L{level}", table_file_name(t["number"]))
    if "file_size" not in t:
        return (*head, "", "", "", "", "")
    smallest, largest = (clip(show_key(bytes.fromhex(t[k])), KEY_CELL_WIDTH) for k in ("smallest", "largest"))
    return (*head, size(t["file_size"]), f"{t['num_entries']:,} entries", smallest, "..", largest)


def format_stats(s: DBStats) -> str:
    """``minilsm stats``: the counters in groups, then one line per non-empty level."""
    f = s.filter

    def ratio_text(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    groups: list[tuple[str, list[tuple[str, object]]]] = [
        (
            "point reads",
            [
                ("gets", s.gets),
                ("found in memtable", s.found_in_memtable),
                ("found in tables", s.found_in_tables),
                ("not found", s.not_found),
            ],
        ),
        (
            "tables probed",
            [
                ("considered", s.tables_considered),
                ("skipped by key range", s.tables_skipped_by_range),
            ],
        ),
        (
            "filters",
            [
                ("checks", s.filter_checks),
                ("negatives (data-block reads avoided)", s.filter_negatives),
                ("positives", s.filter_positives),
                ("true positives", s.filter_true_positives),
                ("false positives", s.false_positives),
                ("measured false-positive rate", pct(s.measured_fpr)),
                ("expected false-positive rate (live tables)", pct(f.expected_fpr)),
            ],
        ),
        (
            "table file I/O",
            [
                ("data-block reads", s.block_reads),
                ("bytes read", size(s.block_bytes_read)),
                ("file reads", s.file_reads),
                ("block cache hits", s.block_cache_hits),
                ("index loads", s.index_loads),
                ("filter loads", s.filter_loads),
            ],
        ),
        (
            "writes and compaction",
            [
                ("user bytes written", size(s.user_bytes_written)),
                ("log bytes written", size(s.log_bytes_written)),
                ("flush bytes written", size(s.flush_bytes_written)),
                ("compaction input bytes (tables merged)", size(s.compaction_bytes_read)),
                ("compaction bytes written", size(s.compaction_bytes_written)),
                ("flushes", s.flushes),
                ("compactions", s.compactions),
                ("shadowed versions dropped", s.entries_dropped_shadowed),
                ("tombstones dropped", s.tombstones_dropped),
                ("write amplification", ratio_text(s.write_amplification)),
            ],
        ),
        (
            "space",
            [
                ("table bytes", size(s.table_bytes)),
                ("memtable bytes", size(s.memtable_bytes)),
                ("live bytes", "-" if s.live_bytes is None else size(s.live_bytes)),
                ("space amplification", ratio_text(s.space_amplification)),
            ],
        ),
    ]
    width = max(len(name) for _, items in groups for name, _ in items)
    out = []
    for title, items in groups:
        out.append(title)
        out += [f"  {name:<{width}}  {v:,}" if isinstance(v, int) else f"  {name:<{width}}  {v}" for name, v in items]
    levels = [lv for lv in s.levels if lv.tables]
    if levels:
        out.append("levels")
        out.append(
            "  "
            + columns(
                (
                    "level",
                    "tables",
                    "size",
                    "entries",
                    "tombstones",
                    "filter checks",
                    "negatives",
                    "false positives",
                    "measured FPR",
                    "expected FPR",
                    "block reads",
                ),
                (
                    (
                        f"L{lv.level}",
                        lv.tables,
                        size(lv.bytes),
                        f"{lv.entries:,}",
                        f"{lv.tombstones:,}",
                        f"{lv.filter.checks:,}",
                        f"{lv.filter.negatives:,}",
                        f"{lv.filter.false_positives:,}",
                        pct(lv.filter.measured_fpr),
                        pct(lv.filter.expected_fpr),
                        f"{lv.block_reads:,}",
                    )
                    for lv in levels
                ),
            ).replace("\n", "\n  ")
        )
    return "\n".join(out)


# -- one table file: ``minilsm dump`` ---------------------------------------------


@dataclass(frozen=True, slots=True)
class TableDump:
    """Everything a table file says about itself, checked (footer, properties, index, filter), and maybe its entries."""

    path: str
    file_size: int
    footer: Footer
    props: TableProperties
    index: Index
    filter: BloomFilter
    entries: tuple[tuple[bytes, int, bytes], ...] | None
    """Versions ``(user key, trailer, value)`` in file order, when asked for (up to the limit)."""

    def render(self, show_key: ShowKey = show_bytes) -> str:
        f, p, bloom = self.footer, self.props, self.filter
        lines = [f"{self.path}: {self.file_size:,} bytes, table format version {f.version}", "footer"]
        lines += [
            f"  {what:<17} offset {h.offset:>10,}  size {h.size:>9,}"
            for what, h in (
                ("index block", f.index_block),
                ("filter block", f.filter_block),
                ("properties block", f.properties_block),
            )
        ]
        lines.append("properties")
        for name in TableProperties.__dataclass_fields__:
            value = getattr(p, name)
            lines.append(f"  {name:<17} {clip(show_key(value), KEY_CELL_WIDTH) if isinstance(value, bytes) else value}")
        lines.append(
            f"filter: m={bloom.num_bits:,} bits, k={bloom.k}, n={bloom.num_keys:,} keys, "
            f"{bloom.bits_per_key:.2f} bits/key, {bloom.nbytes:,} bytes, fill ratio {pct(bloom.fill_ratio(), 1)}, "
            f"expected FPR {pct(bloom.expected_fpr())}"
        )
        lines.append(f"index: {len(self.index.offsets)} data blocks")
        lines.append(
            "  "
            + columns(
                ("block", "offset", "size", "last key", "last seq", "kind"),
                (
                    (i, f"{o:,}", f"{s:,}", clip(show_key(k), KEY_CELL_WIDTH), t >> 8, _KINDS.get(t & 0xFF, "?"))
                    for i, (k, t, o, s) in enumerate(zip(*self.index, strict=True))
                ),
            ).replace("\n", "\n  ")
        )
        if self.entries is not None:
            lines.append(f"entries (first {len(self.entries):,} of {p.num_entries:,})")
            lines.append(
                "  "
                + columns(
                    ("key", "seq", "kind", "value"),
                    (
                        (clip(show_key(k), KEY_CELL_WIDTH), t >> 8, _KINDS.get(t & 0xFF, "?"), clip(show_key(v)))
                        for k, t, v in self.entries
                    ),
                    left=(0, 3),
                ).replace("\n", "\n  ")
            )
        return "\n".join(lines)

    __str__ = render

    def to_dict(self, show_key: ShowKey = bytes.hex) -> dict[str, Any]:
        f, bloom = self.footer, self.filter
        props = {name: getattr(self.props, name) for name in TableProperties.__dataclass_fields__}
        props.update(smallest=show_key(self.props.smallest), largest=show_key(self.props.largest))
        return {
            "path": self.path,
            "file_size": self.file_size,
            "footer": {
                "version": f.version,
                **{
                    what: {"offset": h.offset, "size": h.size}
                    for what, h in (
                        ("index_block", f.index_block),
                        ("filter_block", f.filter_block),
                        ("properties_block", f.properties_block),
                    )
                },
            },
            "properties": props,
            "filter": {
                "num_bits": bloom.num_bits,
                "k": bloom.k,
                "num_keys": bloom.num_keys,
                "bits_per_key": bloom.bits_per_key,
                "bytes": bloom.nbytes,
                "fill_ratio": bloom.fill_ratio(),
                "expected_fpr": bloom.expected_fpr(),
            },
            "index": [
                {
                    "offset": o,
                    "size": s,
                    "last_key": show_key(k),
                    "last_seq": t >> 8,
                    "last_kind": _KINDS.get(t & 0xFF, "?"),
                }
                for k, t, o, s in zip(*self.index, strict=True)
            ],
            "entries": None
            if self.entries is None
            else [
                {"key": show_key(k), "seq": t >> 8, "kind": _KINDS.get(t & 0xFF, "?"), "value": show_key(v)}
                for k, t, v in self.entries
            ],
        }


_KINDS: Final = {KIND_VALUE: "value", KIND_DELETE: "delete"}


def dump_table(fs: FileSystem, path: str, *, entries: bool = False, limit: int | None = None) -> TableDump:
    """Open the table file at `path` (named ``NNNNNN.sst``), check its metadata, and describe it.

    O(index + filter), plus O(entries) up to `limit` when `entries` is set.
    Damage raises `CorruptionError` naming the file; a name that is not a
    table's raises `ValueError`.
    """
    dirname, name = os.path.split(path)
    number = parse_table_file_name(name)
    if number is None:
        raise ValueError(f"{path}: not a table file name (expected NNNNNN{TABLE_SUFFIX})")
    stats = Stats()
    reader = TableReader.open(fs, dirname or ".", number, stats)  # checks every metadata block and cross-checks them
    try:
        file = fs.open_random(path)
        try:
            footer = read_footer(file, stats, path)
            index = decode_index(
                read_block(file, *footer.index_block, stats, path, kind=BLOCK_INDEX), footer.filter_block.offset
            )
        finally:
            file.close()
        rows = tuple(islice(reader.iter_entries(), limit)) if entries else None
        return TableDump(path, reader.file_size, footer, reader.props, index, reader.filter, rows)
    finally:
        reader.close()
