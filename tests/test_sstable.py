"""Table files (minilsm/sstable/, minilsm/cache.py): round trips, read accounting, caches, and damage."""

from __future__ import annotations

import os
import struct
import tempfile
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import chain, pairwise
from unittest import mock

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from storeutil import PreadLog

from minilsm.bloom import key_hash
from minilsm.cache import ClockCache, TableFileCache
from minilsm.errors import ClosedError, CorruptionError
from minilsm.fs import FileSystem, RandomAccessFile, WritableFile
from minilsm.keys import KIND_DELETE, KIND_VALUE, MAX_SEQUENCE
from minilsm.sstable import TableBuilder, TableMeta, TableReader, parse_table_file_name, table_file_name
from minilsm.sstable.block import Block
from minilsm.sstable.format import (
    BLOCK_DATA,
    BLOCK_FILTER,
    BLOCK_INDEX,
    BLOCK_TRAILER,
    BLOCK_TRAILER_SIZE,
    FOOTER,
    FOOTER_SIZE,
    BlockHandle,
    Readahead,
    encode_footer,
    read_block,
    table_path,
)
from minilsm.stats import Stats

Entry = tuple[bytes, int, bytes]
FS = FileSystem()


def trailer(seq: int, kind: int = KIND_VALUE) -> int:
    return seq << 8 | kind


def build(dirname: str, entries: list[Entry], number: int = 1, **kwargs: float) -> TableMeta:
    b = TableBuilder(FS, dirname, number, **kwargs)  # type: ignore[arg-type]
    for e in entries:
        b.add(*e)
    return b.finish()


def open_table(dirname: str, number: int = 1, stats: Stats | None = None, **kwargs: object) -> TableReader:
    return TableReader.open(FS, dirname, number, stats if stats is not None else Stats(), **kwargs)  # type: ignore[arg-type]


def reference_get(entries: list[Entry], key: bytes, seq: int) -> tuple[int, bytes] | None:
    """Newest version of key with seq <= seq, by brute force over entries in internal order."""
    for k, t, v in entries:
        if k == key and t >> 8 <= seq:
            return t & 0xFF, v
    return None


def simple_entries(n: int, versions: int = 1) -> list[Entry]:
    out = []
    seq = 1
    for i in range(n):
        key = b"key%05d" % (2 * i)  # odd numbers are absent keys inside the range
        for _ in range(versions):
            out.append((key, trailer(seq), b"value-%d" % seq))
            seq += 1
    # Within a key, newest first.
    out.sort(key=lambda e: (e[0], -e[1]))
    return out


@pytest.fixture
def tmp(tmp_path: object) -> str:
    return str(tmp_path)


# -- round trip ---------------------------------------------------------------------


@st.composite
def tables(draw: st.DrawFn) -> list[Entry]:
    """A table's versions in internal order: binary keys (the empty key too), tombstones, large values,
    and sometimes one key with enough versions to span several blocks."""
    keys = draw(st.lists(st.binary(max_size=10), min_size=1, max_size=30, unique=True))
    # Large values are a short random pattern repeated, so that they cost hypothesis few bytes of input.
    large = st.builds(lambda pattern, n: (pattern * n)[:n], st.binary(min_size=1, max_size=8), st.integers(300, 5000))
    value = st.one_of(st.binary(max_size=30), large)
    heavy = draw(st.sampled_from([None, *keys]))
    counts = [draw(st.integers(25, 60)) if key == heavy else draw(st.integers(1, 3)) for key in sorted(keys)]
    seqs = iter(draw(st.randoms(use_true_random=False)).sample(range(1, 4 * sum(counts) + 1), sum(counts)))
    entries: list[Entry] = []
    for key, nversions in zip(sorted(keys), counts, strict=True):
        for seq in sorted((next(seqs) for _ in range(nversions)), reverse=True):
            kind = draw(st.sampled_from([KIND_VALUE, KIND_VALUE, KIND_DELETE]))
            entries.append((key, trailer(seq, kind), b"" if kind == KIND_DELETE else draw(value)))
    return entries


@settings(max_examples=60)
@given(
    tables(),
    st.sampled_from([64, 200, 1024, 65536]),
    st.sampled_from([0.0, 10.0]),
    st.lists(st.binary(max_size=10), max_size=6),
    st.data(),
)
def test_round_trip(
    entries: list[Entry], block_size: int, bits_per_key: float, probes: list[bytes], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as d:
        meta = build(d, entries, block_size=block_size, bits_per_key=bits_per_key)
        keys = sorted({e[0] for e in entries})
        assert (meta.smallest, meta.largest, meta.num_entries) == (keys[0], keys[-1], len(entries))
        assert meta.num_deletions == sum(1 for e in entries if e[1] & 0xFF == KIND_DELETE)
        stats = Stats()
        reader = open_table(d, stats=stats, block_cache=ClockCache(1 << 20) if data.draw(st.booleans()) else None)
        assert reader.filter.num_keys == len(keys)  # one filter key per distinct user key

        seqs = sorted({e[1] >> 8 for e in entries})
        snapshots = [0, MAX_SEQUENCE, *data.draw(st.lists(st.sampled_from(seqs), max_size=8))]
        snapshots += [s - 1 for s in snapshots[2:]]
        for key in keys + probes:
            h = key_hash(key)
            for snap in snapshots:
                before = stats.block_reads + stats.block_cache_hits
                assert reader.get(key, h, snap) == reference_get(entries, key, snap)
                assert stats.block_reads + stats.block_cache_hits - before <= 1  # never more than one block

        for _ in range(4):
            bounds = st.one_of(st.none(), st.sampled_from(keys), st.binary(max_size=10))
            start, stop = data.draw(bounds), data.draw(bounds)
            expect = [e for e in entries if (start is None or e[0] >= start) and (stop is None or e[0] < stop)]
            assert list(reader.iter(start, stop)) == expect
            assert list(reader.iter(start, stop, reverse=True)) == expect[::-1]
        assert list(reader.iter_entries()) == entries
        reader.verify()
        reader.close()


@pytest.mark.parametrize("nversions", [148, 149, 150])  # so that k's oldest version ends a block in one case
def test_versions_straddling_blocks_read_one_block_per_lookup(tmp: str, nversions: int) -> None:
    entries = [(b"a", trailer(1000), b"a")]
    entries += [(b"k", trailer(2 * i), b"v%03d" % (2 * i)) for i in range(nversions, 0, -1)]  # seqs 2, 4, ...
    entries += [(b"z", trailer(1), b"z")]
    meta = build(tmp, entries, block_size=64)
    stats = Stats()
    reader = open_table(tmp, stats=stats)
    assert reader.props.num_data_blocks > 40
    h = key_hash(b"k")
    for snap in range(2 * nversions + 3):
        before = stats.block_reads
        trace: list[dict[str, object]] = []
        got = reader.get(b"k", h, snap, trace)
        newest = min(snap - snap % 2, 2 * nversions)
        assert got == (None if newest < 2 else (KIND_VALUE, b"v%03d" % newest))
        assert trace[0]["outcome"] == ("not_visible" if newest < 2 else "found")
        assert stats.block_reads - before == 1
    assert stats.filter_true_positives == 2 * nversions + 3
    assert meta.min_seq == 1 and meta.max_seq == 1000


def test_not_visible_at_end_of_table_reads_no_block(tmp: str) -> None:
    build(tmp, [(b"k", trailer(seq), b"") for seq in range(50, 40, -1)], block_size=64)
    stats = Stats()
    reader = open_table(tmp, stats=stats)
    trace: list[dict[str, object]] = []
    assert reader.get(b"k", key_hash(b"k"), 10, trace) is None
    assert trace == [{"file": 1, "outcome": "not_visible", "blocks": [], "cached": []}]
    assert stats.block_reads == 0 and stats.filter_true_positives == 1


# -- building -----------------------------------------------------------------------


def build_by_add(dirname: str, entries: list[Entry], stop_size: int | None, **kwargs: float) -> list[bytes]:
    """The tables `add` and `estimated_size` make, cut as compaction always has: before the first version
    of a new user key once the table has reached `stop_size`."""
    files: list[bytes] = []
    b: TableBuilder | None = None
    last: bytes | None = None
    for key, t, value in entries:
        if b is not None and stop_size is not None and key != last and b.estimated_size() >= stop_size:
            files.append(read_finished(b))
            b = None
        if b is None:
            b = TableBuilder(FS, dirname, len(files) + 1, **kwargs)  # type: ignore[arg-type]
        b.add(key, t, value)
        last = key
    assert b is not None
    files.append(read_finished(b))
    return files


def build_by_add_run(dirname: str, entries: list[Entry], stop_size: int | None, **kwargs: float) -> list[bytes]:
    files: list[bytes] = []
    pending: Entry | None = entries[0]
    it = iter(entries[1:])
    while pending is not None:
        b = TableBuilder(FS, dirname, 100 + len(files), **kwargs)  # type: ignore[arg-type]
        # Each table's first version goes in through `add_run` itself, which never stops an empty table.
        pending = b.add_run(chain([pending], it), stop_size)
        files.append(read_finished(b))
    return files


def read_finished(b: TableBuilder) -> bytes:
    b.finish()
    with open(b.path, "rb") as f:
        return f.read()


@settings(max_examples=60)
@given(
    tables(),
    st.sampled_from([1, 64, 200, 4096]),
    st.sampled_from([None, 1, 150, 600, 3000]),
    st.sampled_from([0.0, 10.0]),
)
def test_add_run_writes_the_tables_add_writes(
    entries: list[Entry], block_size: int, stop_size: int | None, bits_per_key: float
) -> None:
    """Byte for byte, cut points included: tiny blocks and tables, a key's many versions, empty keys and values."""
    with tempfile.TemporaryDirectory() as d, mock.patch("minilsm.sstable.builder.time.time", return_value=1e9):
        expected = build_by_add(d, entries, stop_size, block_size=block_size, bits_per_key=bits_per_key)
        got = build_by_add_run(d, entries, stop_size, block_size=block_size, bits_per_key=bits_per_key)
    assert got == expected
    if stop_size is None:
        assert len(got) == 1


def test_add_run_stops_only_between_user_keys(tmp: str) -> None:
    b = TableBuilder(FS, tmp, 1, block_size=64)
    versions = [(b"a", trailer(s), b"x" * 50) for s in range(9, 0, -1)] + [(b"b", trailer(20), b"y")]
    rest = iter(versions)
    assert b.add_run(rest, stop_size=1) == (b"b", trailer(20), b"y")  # all of a's versions, however large
    assert b.num_entries == 9 and next(rest, None) is None
    assert b.add_run(iter([(b"b", trailer(20), b"y")])) is None  # no stop size: never stops
    assert b.finish().largest == b"b"


def test_add_run_rejects_like_add_and_keeps_what_came_before(tmp: str) -> None:
    class Huge(bytes):
        def __len__(self) -> int:
            return 1 << 32  # a value too long for the entry header, without allocating 4 GiB

    b = TableBuilder(FS, tmp, 1)
    b.add(b"b", trailer(5), b"")
    runs = [
        [(b"c", trailer(9), b"1"), (b"a", trailer(9), b"")],  # key out of order
        [(b"c", trailer(8), b"2"), (b"c", trailer(8), b"")],  # the same version twice
        [(b"d", trailer(9), b"3"), (b"e", trailer(9) | 0x7F, b"")],  # unknown kind
        [(b"d", trailer(8), b"4"), (b"e", -255, b"")],  # negative trailer of a known kind
        [(b"d", trailer(7), b"5"), (b"e", 1 << 64 | KIND_VALUE, b"")],  # trailer past 64 bits
        [(b"d", trailer(6), b"6"), (b"e", trailer(1), Huge())],  # value past 4 GiB
    ]
    for n, run in enumerate(runs, start=2):
        with pytest.raises(ValueError):
            b.add_run(iter(run))
        assert b.num_entries == n  # the good version before the bad one went in, the bad one did not
    b.add(b"d", trailer(5, KIND_DELETE), b"")  # still usable, from where it was
    b.add_run([(b"e", trailer(1), b"7")])
    meta = b.finish()
    assert (meta.num_entries, meta.num_deletions, meta.min_seq, meta.max_seq) == (9, 1, 1, 9)
    got = list(open_table(tmp).iter())
    assert [(k, t >> 8, v) for k, t, v in got] == [
        (b"b", 5, b""), (b"c", 9, b"1"), (b"c", 8, b"2"), (b"d", 9, b"3"), (b"d", 8, b"4"),
        (b"d", 7, b"5"), (b"d", 6, b"6"), (b"d", 5, b""), (b"e", 1, b"7"),
    ]  # fmt: skip


def test_out_of_order_add_raises_value_error(tmp: str) -> None:
    b = TableBuilder(FS, tmp, 1)
    b.add(b"b", trailer(5), b"")
    for key, t in [(b"a", trailer(9)), (b"b", trailer(5)), (b"b", trailer(6)), (b"b", trailer(5, KIND_DELETE) + 1)]:
        with pytest.raises(ValueError):
            b.add(key, t, b"")
    b.add(b"b", trailer(4, KIND_DELETE), b"")  # still usable: older version of the same key
    b.add(b"c", trailer(99), b"")
    assert b.num_entries == 3
    b.abandon()


def test_empty_builder_cannot_finish(tmp: str) -> None:
    b = TableBuilder(FS, tmp, 3)
    with pytest.raises(ValueError):
        b.finish()
    assert os.listdir(tmp) == ["000003.sst.tmp"]
    b.abandon()
    assert os.listdir(tmp) == []


def test_atomic_rename_and_syncs(tmp: str) -> None:
    calls: list[str] = []

    class RecordingFS(FileSystem):
        def open_writable(self, path: str) -> WritableFile:
            inner = super().open_writable(path)

            class Recorded:
                def append(self, data: bytes) -> None:
                    inner.append(data)

                def flush(self) -> None:
                    inner.flush()

                def sync(self) -> None:
                    calls.append("sync " + os.path.basename(path))
                    inner.sync()

                def close(self) -> None:
                    inner.close()

            return Recorded()

        def rename(self, src: str, dst: str) -> None:
            calls.append(f"rename {os.path.basename(src)} {os.path.basename(dst)}")
            super().rename(src, dst)

        def sync_dir(self, path: str) -> None:
            calls.append("sync_dir")
            super().sync_dir(path)

    b = TableBuilder(RecordingFS(), tmp, 12)
    assert os.listdir(tmp) == ["000012.sst.tmp"]
    b.add(b"k", trailer(1), b"v")
    assert b.estimated_size() > 0
    meta = b.finish()
    assert calls == ["sync 000012.sst.tmp", "rename 000012.sst.tmp 000012.sst", "sync_dir"]
    assert os.listdir(tmp) == ["000012.sst"]
    assert meta.file_size == os.path.getsize(os.path.join(tmp, "000012.sst"))
    with pytest.raises(ValueError):
        b.add(b"l", trailer(2), b"")


def test_abandon_removes_the_temporary_file(tmp: str) -> None:
    b = TableBuilder(FS, tmp, 7)
    b.add(b"k", trailer(1), b"v" * 10000)
    b.abandon()
    b.abandon()
    assert os.listdir(tmp) == []


def test_file_names() -> None:
    assert table_file_name(12) == "000012.sst"
    assert table_file_name(1234567) == "1234567.sst"
    assert parse_table_file_name("000012.sst") == 12
    assert parse_table_file_name("1234567.sst") == 1234567
    for name in ["000012.sst.tmp", "MANIFEST", "x.sst", "000012.log", ".sst", "١٢.sst", "12.sst", "0000012.sst"]:
        assert parse_table_file_name(name) is None


def test_properties_describe_the_file(tmp: str) -> None:
    entries = simple_entries(500)
    entries[3] = (entries[3][0], trailer(entries[3][1] >> 8, KIND_DELETE), b"")
    meta = build(tmp, entries, block_size=512, bits_per_key=8)
    p = open_table(tmp).props
    assert (p.num_entries, p.num_deletions, p.smallest, p.largest) == (500, 1, b"key00000", b"key00998")
    assert (p.min_seq, p.max_seq, p.bits_per_key, p.format_version) == (1, 500, 8.0, 2)
    assert p.filter_num_bits == 4000 and p.filter_k >= 1
    assert p.num_data_blocks > 1
    props_size = meta.file_size - FOOTER_SIZE - p.data_size - p.filter_size - p.index_size
    assert 0 < props_size < 1000
    assert abs(p.creation_time - __import__("time").time()) < 60


# -- read accounting ----------------------------------------------------------------


def test_open_reads_no_data_block(tmp: str) -> None:
    build(tmp, simple_entries(300), block_size=256)
    stats = Stats()
    reader = open_table(tmp, stats=stats)
    assert (stats.block_reads, stats.index_loads, stats.filter_loads) == (0, 1, 1)
    assert stats.block_bytes_read == reader.file_size - reader.props.data_size
    assert stats.file_reads == 4  # the footer, the index, the filter and the properties
    assert reader.block_reads == 0


def test_filter_negative_reads_nothing_and_positive_reads_one_block(tmp: str) -> None:
    build(tmp, simple_entries(1000), block_size=256, bits_per_key=10)
    stats = Stats()
    reader = open_table(tmp, stats=stats)
    negatives = 0
    for i in range(1999):  # keys from smallest to largest; the odd ones are absent
        key = b"key%05d" % i
        trace: list[dict[str, object]] = []
        before = stats.block_reads
        got = reader.get(key, key_hash(key), MAX_SEQUENCE, trace)
        outcome = trace[0]["outcome"]
        if i % 2 == 0:
            assert got == (KIND_VALUE, b"value-%d" % (i // 2 + 1)) and outcome == "found"
            assert stats.block_reads - before == 1
        elif outcome == "filter_negative":
            negatives += 1
            assert got is None and stats.block_reads == before
        else:
            assert got is None and outcome == "false_positive" and stats.block_reads - before == 1
    assert negatives > 900  # about 1% false positives at 10 bits per key
    assert stats.filter_checks == reader.filter_checks == 1999
    assert stats.filter_negatives == reader.filter_negatives == negatives
    assert stats.filter_positives == reader.filter_positives == 1999 - negatives
    assert stats.filter_true_positives == reader.filter_true_positives == 1000
    assert stats.block_reads == reader.block_reads == 1999 - negatives


def test_no_filter_means_exactly_one_block_per_probe_in_range(tmp: str) -> None:
    build(tmp, simple_entries(1000), block_size=128, bits_per_key=0)
    stats = Stats()
    reader = open_table(tmp, stats=stats)
    assert reader.filter.num_bits == 0
    for i in range(1999):  # every key from smallest to largest, present or not
        key = b"key%05d" % i
        before = stats.block_reads
        reader.get(key, key_hash(key), MAX_SEQUENCE)
        assert stats.block_reads - before == 1
    assert stats.filter_negatives == 0
    assert stats.filter_true_positives == 1000


def test_trace_outcomes(tmp: str) -> None:
    build(
        tmp, [(b"b", trailer(5, KIND_DELETE), b""), (b"d", trailer(7), b"dv"), (b"f", trailer(2), b"")], bits_per_key=0
    )
    stats = Stats()
    reader = open_table(tmp, stats=stats, block_cache=ClockCache(1 << 16))
    trace: list[dict[str, object]] = []
    assert reader.get(b"a", key_hash(b"a"), 10, trace) is None
    assert reader.get(b"d", key_hash(b"d"), 10, trace) == (KIND_VALUE, b"dv")
    assert reader.get(b"b", key_hash(b"b"), 10, trace) == (KIND_DELETE, b"")
    assert reader.get(b"c", key_hash(b"c"), 10, trace) is None
    assert reader.get(b"d", key_hash(b"d"), 6, trace) is None
    assert trace == [
        {"file": 1, "outcome": "skipped_by_range"},
        {"file": 1, "outcome": "found", "blocks": [0], "cached": [False]},
        {"file": 1, "outcome": "tombstone", "blocks": [0], "cached": [True]},
        {"file": 1, "outcome": "false_positive", "blocks": [0], "cached": [True]},
        {"file": 1, "outcome": "not_visible", "blocks": [0], "cached": [True]},
    ]
    assert (stats.tables_considered, stats.tables_skipped_by_range, stats.filter_checks) == (5, 1, 4)
    assert (stats.filter_positives, stats.filter_true_positives) == (4, 3)
    build(tmp, [(b"b", trailer(1), b"")], number=2, bits_per_key=10)
    trace.clear()
    assert open_table(tmp, 2).get(b"a", key_hash(b"a"), 10, trace) is None
    assert open_table(tmp, 2).get(b"b\x00", key_hash(b"b\x00"), 10, trace) is None
    assert trace == [{"file": 2, "outcome": "skipped_by_range"}, {"file": 2, "outcome": "skipped_by_range"}]


def test_read_block_counts_by_kind(tmp: str) -> None:
    build(tmp, simple_entries(50), block_size=256)
    reader = open_table(tmp)
    f = FS.open_random(reader.path)
    stats = Stats()
    data = read_block(f, 0, reader._sizes[0], stats, reader.path, kind=BLOCK_DATA)
    assert Block(data).count > 0
    assert (stats.block_reads, stats.block_bytes_read) == (1, reader._sizes[0])
    with pytest.raises(CorruptionError, match=r"type byte is 1 \(data\), not 3"):  # not an index block
        read_block(f, 0, reader._sizes[0], stats, reader.path, kind=BLOCK_INDEX)
    assert stats.index_loads == 1
    with pytest.raises(CorruptionError, match="does not fit") as e:
        read_block(f, 10, 1 << 40, stats, reader.path, kind=BLOCK_FILTER)
    assert e.value.path == reader.path and stats.filter_loads == 0
    f.close()


# -- caches -------------------------------------------------------------------------


def test_block_cache_hits_are_not_disk_reads(tmp: str) -> None:
    build(tmp, simple_entries(1000), block_size=256)
    stats = Stats()
    cache: ClockCache[tuple[int, int], Block] = ClockCache(1 << 20)
    reader = open_table(tmp, stats=stats, block_cache=cache)
    key = b"key00100"
    for _ in range(5):
        assert reader.get(key, key_hash(key), MAX_SEQUENCE) is not None
    assert (stats.block_reads, stats.block_cache_hits, len(cache)) == (1, 4, 1)
    assert 0 < cache.usage <= 512
    # Scans read through the cache but do not fill it.
    stats.reset()
    assert len(list(reader.iter(key))) == 950  # the cached block comes first
    assert stats.block_cache_hits == 1 and len(cache) == 1
    # Once a scan reads ahead (from its third block), its blocks come from the window it read: no cache hit.
    stats.reset()
    assert len(list(reader.iter())) == 1000
    assert stats.block_cache_hits == 0 and stats.block_reads == reader.props.num_data_blocks


def test_clock_cache_evicts_unreferenced_entries_by_charge() -> None:
    c: ClockCache[str, int] = ClockCache(10)
    c.put("a", 1, 4)
    c.put("b", 2, 4)
    assert c.get("a") == 1  # a is referenced now, b is not: the next eviction spares a
    c.put("c", 3, 4)
    assert (c.get("a"), c.get("b"), c.get("c"), c.usage, len(c)) == (1, None, 3, 8, 2)
    c.put("a", 9, 2)  # replacing re-charges
    assert (c.get("a"), c.usage) == (9, 6)
    c.put("huge", 0, 11)  # larger than the whole cache: not kept, evicts nothing
    assert (c.get("huge"), len(c)) == (None, 2)
    c.erase("a")
    c.erase("missing")
    assert (c.get("a"), c.usage) == (None, 4)
    c.clear()
    assert (len(c), c.usage) == (0, 0)
    off: ClockCache[str, int] = ClockCache(0)
    off.put("x", 1, 0)
    off.put("y", 1, 1)
    assert off.get("y") is None


def test_clock_cache_sweep_drops_the_oldest_once_every_flag_is_cleared() -> None:
    """When every entry was referenced, the hand clears them all and then drops the oldest, not the newcomer."""
    c: ClockCache[str, int] = ClockCache(3)
    for i, k in enumerate("xyz"):
        c.put(k, i)
    assert [c.get(k) for k in "xyz"] == [0, 1, 2]
    c.put("w", 3)
    assert [c.get(k) for k in "xyzw"] == [None, 1, 2, 3]
    c.put("v", 4)  # y, z and w were all referenced: the hand clears them, then drops y, the oldest
    assert c.get("y") is None
    assert c.get("z") == 2  # z is read again after its flag was cleared, w is not
    c.put("u", 5)
    assert ([c.get(k) for k in "zwvu"], len(c), c.usage) == ([2, None, 4, 5], 3, 3)


def test_clock_cache_doorkeeper_admits_a_key_at_its_second_put_within_the_window() -> None:
    c: ClockCache[str, int] = ClockCache(10, admit_window=2)
    c.put("a", 1)
    assert (c.get("a"), len(c)) == (None, 0)  # remembered, not kept
    c.put("a", 1)
    assert c.get("a") == 1
    c.put("a", 2)  # a key already held is replaced at once
    assert c.get("a") == 2
    c.put("b", 1)
    c.put("c", 1)
    c.put("d", 1)  # the window is full: b and c are forgotten together, and d remembered
    c.put("b", 1)  # b was forgotten: its first put again
    assert (c.get("b"), len(c)) == (None, 1)
    c.put("d", 1)
    assert c.get("d") == 1
    with pytest.raises(ValueError):
        ClockCache(10, admit_window=-1)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(0, 12),
    admit_window=st.integers(0, 3),
    ops=st.lists(
        st.tuples(st.sampled_from(["put", "get", "erase", "clear"]), st.integers(0, 6), st.integers(0, 5)),
        max_size=60,
    ),
)
def test_clock_cache_never_answers_wrong_and_keeps_its_charge(
    capacity: int, admit_window: int, ops: list[tuple[str, int, int]]
) -> None:
    """Against a dict of the last value put per key: a hit is always that value, and usage is the held charges."""
    c: ClockCache[int, tuple[int, int]] = ClockCache(capacity, admit_window)
    last: dict[int, tuple[int, int]] = {}
    for n, (op, key, charge) in enumerate(ops):
        if op == "put":
            c.put(key, (n, charge), charge)
            last[key] = (n, charge)
            assert c.get(key) in ((last[key], None) if admit_window else (last[key] if charge <= capacity else None,))
        elif op == "get":
            got = c.get(key)
            assert got is None or got == last[key]
        elif op == "erase":
            c.erase(key)
            assert c.get(key) is None
        else:
            c.clear()
        held = [v for k in range(7) if (v := c.get(k)) is not None]
        assert c.usage == sum(charge for _, charge in held) <= capacity
        assert len(c) == len(held)


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "pread"])
def test_random_access_files_read_alike_mapped_or_not(tmp: str, mapped: bool) -> None:
    """A mapped file answers every read as pread does: whole, short past the end, an error once closed."""
    open_file = FS.open_mapped if mapped else FS.open_random
    path = os.path.join(tmp, "f")
    data = bytes(range(256)) * 40
    with open(path, "wb") as f:
        f.write(data)
    r = open_file(path)
    assert r.size() == len(data)
    assert r.pread(0, 10) == data[:10] and r.pread(5000, 300) == data[5000:5300]
    assert r.pread(len(data) - 4, 10) == data[-4:] and r.pread(len(data) + 7, 3) == b""
    r.close()
    r.close()  # idempotent
    with pytest.raises(OSError):
        r.pread(0, 1)
    empty = os.path.join(tmp, "empty")
    open(empty, "wb").close()  # cannot be mapped: read with pread, and every read is short
    e = open_file(empty)
    assert (e.size(), e.pread(0, 5)) == (0, b"")
    e.close()


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "pread"])
def test_tables_read_and_fail_alike_mapped_or_not(tmp: str, mapped: bool) -> None:
    entries = simple_entries(500)
    meta = build(tmp, entries, block_size=256)
    files = TableFileCache(FS, 4, mapped=mapped)
    reader = TableReader.open(FS, tmp, 1, Stats(), file_cache=files)
    assert list(reader.iter()) == entries
    for key, t, value in entries[::37]:
        assert reader.get(key, key_hash(key), MAX_SEQUENCE) == (t & 0xFF, value)
    reader.close()
    files.close()
    path = table_path(tmp, 1)
    with open(path, "r+b") as f:
        f.truncate(meta.file_size - 1)
    with pytest.raises(CorruptionError) as e:
        TableReader.open(FS, tmp, 1, Stats(), file_cache=TableFileCache(FS, 4, mapped=mapped))
    assert e.value.path == path


def extents(fs: PreadLog) -> list[tuple[int, int]]:
    """The (offset, size) of each pread logged so far."""
    return [(offset, size) for _, offset, size in fs.reads]


def test_read_ahead_serves_forward_reads_from_growing_windows_reading_no_byte_twice(tmp: str) -> None:
    path = os.path.join(tmp, "f")
    data = os.urandom(300_000)
    with open(path, "wb") as f:
        f.write(data)
    fs = PreadLog()
    base = fs.open_random(path)
    stats = Stats()
    ahead = Readahead(base, 200_000, stats)
    got = [ahead.read(offset, 4000) for offset in range(0, 196_000, 4000)]
    assert got == [data[o : o + 4000] for o in range(0, 196_000, 4000)]
    # Each refill keeps the window's tail that the missed read starts in (16000..16384 here) and reads on from
    # the window's end: the windows tile the file, growing from 16 KiB to 64 KiB, and stop at `end`.
    assert extents(fs) == [(0, 16384), (16384, 32384), (48768, 64768), (113536, 64000), (177536, 22464)]
    assert stats.block_bytes_read == sum(n for _, n in extents(fs)) == 200_000  # counted as read, once
    # Past `end` it reads only what is asked; past the file's end the answer is short, as pread's is.
    assert ahead.read(199_000, 5000) == data[199_000:204_000] and extents(fs)[-1] == (200_000, 4000)
    assert ahead.read(299_990, 100) == data[299_990:]
    assert stats.block_bytes_read == 200_000 + 4000 + 10  # the last pread asked for 100 and got 10
    base.close()


def test_long_forward_scans_read_ahead_within_their_range_and_count_each_block(tmp: str) -> None:
    entries = simple_entries(2000)
    build(tmp, entries, block_size=256)
    fs = PreadLog()
    stats = Stats()
    reader = TableReader.open(fs, tmp, 1, stats)
    offsets, sizes = reader._offsets, reader._sizes
    blocks = len(offsets)
    assert blocks > 100
    fs.reads.clear()
    assert list(reader.iter()) == entries
    # Every block is read, checked and counted once; the file is read in far fewer, larger reads.
    assert (stats.block_reads, reader.block_reads) == (blocks, blocks)
    assert extents(fs)[:3] == [(offsets[0], sizes[0]), (offsets[1], sizes[1]), (offsets[2], 16384)]
    assert len(fs.reads) < blocks / 10
    assert max(o + n for o, n in extents(fs)) == offsets[-1] + sizes[-1]  # never into the filter or index

    # A scan of a middle range reads nothing outside the blocks it covers.
    lo, hi = entries[500][0], entries[1500][0]
    first, last = bisect_left(reader._last_keys, lo), bisect_left(reader._last_keys, hi)
    fs.reads.clear()
    assert list(reader.iter(lo, hi)) == entries[500:1500]
    assert min(o for o, _ in extents(fs)) == offsets[first]
    assert max(o + n for o, n in extents(fs)) == offsets[last] + sizes[last]
    assert len(fs.reads) < (last - first) / 5

    # Reverse scans and short scans read block by block.
    fs.reads.clear()
    assert list(reader.iter(lo, hi, reverse=True)) == entries[500:1500][::-1]
    assert extents(fs) == [(offsets[i], sizes[i]) for i in range(last, first - 1, -1)]
    fs.reads.clear()
    assert next(reader.iter(lo)) == entries[500]
    assert extents(fs) == [(offsets[first], sizes[first])]
    reader.close()


@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.parametrize("taken", [None, 40, 300])
def test_a_scan_read_ahead_counts_every_byte_it_read_and_no_cache_hit_for_it(
    tmp: str, cache: bool, taken: int | None
) -> None:
    """Was: the window's refills read the file outside the counting, so a scan that stopped early, or whose window
    re-read a block straddling its end, read more than `block_bytes_read` said; and with the cache warm, blocks
    read ahead from the file were served from the cache and counted as hits, no disk read at all."""
    entries = simple_entries(2000)
    build(tmp, entries, block_size=256)
    fs = PreadLog()
    stats = Stats()
    blocks: ClockCache[tuple[int, int], Block] | None = ClockCache(1 << 20) if cache else None
    reader = TableReader.open(fs, tmp, 1, stats, block_cache=blocks)
    if blocks is not None:
        for k, _, _ in entries[::7]:  # every few blocks cached, by point reads
            reader.get(k, key_hash(k), 1 << 40)
        assert stats.block_reads > 0 and len(blocks) > 0
    stats.block_bytes_read = stats.block_reads = stats.block_cache_hits = 0
    fs.reads.clear()
    scan = reader.iter()
    got = list(scan) if taken is None else [next(scan) for _ in range(taken)]
    assert got == entries[: len(got)]
    assert stats.block_bytes_read == sum(n for _, n in extents(fs))  # what the file gave, exactly
    read_ranges = sorted(extents(fs))
    assert all(a + n <= b for (a, n), (b, _) in pairwise(read_ranges))  # and no byte twice
    if taken is None:
        # Blocks 0 and 1 come before the window and may be cache hits; every later one is read ahead.
        assert stats.block_cache_hits <= 2 and stats.block_reads + stats.block_cache_hits == len(reader._offsets)
    reader.close()


def test_file_cache_bounds_open_files(tmp: str) -> None:
    opened: list[str] = []

    class CountingFS(FileSystem):
        def open_random(self, path: str) -> RandomAccessFile:
            opened.append(os.path.basename(path))
            return super().open_random(path)

    fs = CountingFS()
    for n in (1, 2):
        build(tmp, simple_entries(100), number=n, block_size=128)
    files = TableFileCache(fs, 1)
    stats = Stats()
    readers = [TableReader.open(fs, tmp, n, stats, file_cache=files) for n in (1, 2)]
    assert len(files) == 1
    for _ in range(2):
        for r in readers:
            assert r.get(b"key00010", key_hash(b"key00010"), MAX_SEQUENCE) == (KIND_VALUE, b"value-6")
    assert opened == ["000001.sst", "000002.sst", "000001.sst", "000002.sst", "000001.sst", "000002.sst"]
    files.evict(readers[1].path)
    assert len(files) == 0
    readers[0].close()
    with pytest.raises(ClosedError):
        readers[0].get(b"key00010", key_hash(b"key00010"), MAX_SEQUENCE)


# -- damage -------------------------------------------------------------------------


class _BytesFile:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def pread(self, offset: int, size: int) -> bytes:
        assert size <= len(self.data), "read longer than the file: a forged length was trusted"
        return self.data[offset : offset + size]

    def size(self) -> int:
        return len(self.data)

    def close(self) -> None:
        pass


class _BytesFS(FileSystem):
    """Serves one table's (damaged) bytes for every open_random."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def open_random(self, path: str) -> RandomAccessFile:
        return _BytesFile(self.data)


def _read_everything(fs: FileSystem, dirname: str, probes: list[bytes]) -> Iterator[object]:
    reader = TableReader.open(fs, dirname, 1, Stats())
    for key in probes:
        yield reader.get(key, key_hash(key), MAX_SEQUENCE)
        yield reader.get(key, key_hash(key), 3)
    yield list(reader.iter())
    yield list(reader.iter(b"key00004", b"key00010", reverse=True))


def test_every_flipped_byte_and_truncation_is_detected(tmp: str) -> None:
    entries = simple_entries(12, versions=2)
    build(tmp, entries, block_size=96)
    path = os.path.join(tmp, table_file_name(1))
    good = FS.read_file(path)
    probes = [b"key%05d" % i for i in range(26)]
    expect = list(_read_everything(_BytesFS(good), tmp, probes))
    assert len(good) > 500

    damaged = [good[:i] + bytes([good[i] ^ 0xFF]) + good[i + 1 :] for i in range(len(good))]
    damaged += [good[:n] for n in range(len(good))]
    for data in damaged:
        fs = _BytesFS(data)
        # Reads give the right answer or stop with CorruptionError naming the file ...
        got = []
        with pytest.raises(CorruptionError) as e:
            for result in _read_everything(fs, tmp, probes):
                assert result == expect[len(got)]
                got.append(result)
            # ... and since every byte is checksummed, a full check always finds the damage.
            TableReader.open(fs, tmp, 1, Stats()).verify()
        assert e.value.path == path


def test_foreign_and_forged_files_are_corruption(tmp: str) -> None:
    path = os.path.join(tmp, table_file_name(1))
    for data in [b"", b"hello", os.urandom(4096), b"\x00" * 100]:
        with pytest.raises(CorruptionError, match=r"too short|magic") as e:
            TableReader.open(_BytesFS(data), tmp, 1, Stats())
        assert e.value.path == path
    # A footer with a valid checksum whose handles claim terabytes: refused before any read.
    forged = b"\x00" * 64 + encode_footer(BlockHandle(1 << 40, 1 << 40), BlockHandle(0, 1 << 40), BlockHandle(0, 9))
    with pytest.raises(CorruptionError, match="tile") as e:
        TableReader.open(_BytesFS(forged), tmp, 1, Stats())
    assert e.value.path == path


def test_a_table_of_format_version_1_is_refused_by_name(tmp: str) -> None:
    # Version 1 data blocks had no hash index; nothing released wrote them, so they are refused, not read.
    build(tmp, simple_entries(10))
    path = os.path.join(tmp, "000001.sst")
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        foot = len(data) - FOOTER_SIZE
        struct.pack_into("<I", data, foot + 48, 1)
        struct.pack_into("<Q", data, foot + 52, xxhash.xxh3_64_intdigest(bytes(data[foot : foot + 52])))
        f.seek(0)
        f.write(data)
    with pytest.raises(CorruptionError, match="unsupported table format version 1") as e:
        open_table(tmp)
    assert e.value.path == path


def forge_first_block(tmp: str, entries: list[Entry], forge: Callable[[bytearray, Block], None]) -> bytes:
    """Write `entries` as table 1 in one block, let `forge` change that block, reseal its checksum; its contents."""
    build(tmp, entries, block_size=1 << 16)
    path = table_path(tmp, 1)
    reader = open_table(tmp)
    size = reader._sizes[0] - BLOCK_TRAILER_SIZE
    reader.close()
    with open(path, "r+b") as f:
        data = bytearray(f.read())
    forge(data, Block(bytes(data[:size])))
    BLOCK_TRAILER.pack_into(data, size, BLOCK_DATA, xxhash.xxh3_64_intdigest(bytes(data[:size]), BLOCK_DATA))
    with open(path, "wb") as f:
        f.write(data)
    return bytes(data[:size])


def test_verify_finds_a_forged_hash_bucket(tmp: str) -> None:
    # A bucket that points at another key's entry, in a block resealed so its checksum passes:
    # reads stay safe (the key is missed, nothing raises another error) and verify reports it.
    entries = simple_entries(20)
    key = entries[5][0]

    def point_elsewhere(data: bytearray, block: Block) -> None:
        bucket = block.buckets_at + key_hash(key)[1] % block.num_buckets
        assert data[bucket] == 5
        data[bucket] = 6

    forge_first_block(tmp, entries, point_elsewhere)
    reader = open_table(tmp)
    assert reader.get(entries[6][0], key_hash(entries[6][0]), MAX_SEQUENCE) == (KIND_VALUE, entries[6][2])
    reader.get(key, key_hash(key), MAX_SEQUENCE)
    with pytest.raises(CorruptionError, match="hash index differs") as e:
        reader.verify()
    assert e.value.path == table_path(tmp, 1)


def test_verify_finds_a_forged_offset_array(tmp: str) -> None:
    # An offset that points at the next entry, in a block resealed so its checksum passes: a whole-block
    # scan does not read the array, so `verify` must find it by rebuilding the block.
    entries = simple_entries(20)

    def skip_an_entry(data: bytearray, block: Block) -> None:
        struct.pack_into("<I", data, block.limit + 4 * 5, block.offsets[6])

    contents = forge_first_block(tmp, entries, skip_an_entry)
    assert Block(contents).entries() == entries
    with pytest.raises(CorruptionError, match="offset array or hash index differs") as e:
        open_table(tmp).verify()
    assert e.value.path == table_path(tmp, 1)


@pytest.mark.parametrize(
    "forged", [(1 << 40) << 8 | KIND_VALUE, KIND_VALUE, 7 << 8 | 9], ids=["newer", "older", "kind"]
)
def test_an_index_trailer_outside_the_tables_versions_is_refused_at_open(tmp: str, forged: int) -> None:
    """Was: accepted.  A read skips a block, unread, whose index trailer names a version too new for it, so a
    trailer forged past the table's newest version (the index block resealed) hid that block: get() gave None
    for a key the table holds, with no error.  The open now checks every trailer against the properties'
    sequence range and the known kinds."""
    entries = simple_entries(40)  # sequence numbers 1..40
    build(tmp, entries, block_size=256)
    path = table_path(tmp, 1)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    index_offset, index_size = FOOTER.unpack_from(data, len(data) - FOOTER_SIZE)[:2]
    end = index_offset + index_size - BLOCK_TRAILER_SIZE
    struct.pack_into("<Q", data, index_offset + 4, forged)  # the first entry's trailer, after the count
    contents = bytes(data[index_offset:end])
    BLOCK_TRAILER.pack_into(data, end, BLOCK_INDEX, xxhash.xxh3_64_intdigest(contents, BLOCK_INDEX))
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptionError, match="outside the table's sequence range") as e:
        open_table(tmp)
    assert e.value.path == path


@settings(max_examples=40)
@given(tables(), st.sampled_from([64, 200, 4096]), st.lists(st.binary(max_size=10), max_size=6), st.data())
def test_trace_outcomes_and_filter_counts_match_a_reference(
    entries: list[Entry], block_size: int, probes: list[bytes], data: st.DataObject
) -> None:
    """Every probe's outcome, through the hash index or binary search, keys straddling blocks and snapshots
    older than a key's newest version included: a filter true positive is exactly a key the table holds."""
    with tempfile.TemporaryDirectory() as d:
        build(d, entries, block_size=block_size, bits_per_key=0)  # no filter: every probe in range reads a block
        stats = Stats()
        reader = open_table(d, stats=stats)
        keys = sorted({e[0] for e in entries})
        seqs = sorted({e[1] >> 8 for e in entries})
        snapshots = [0, MAX_SEQUENCE, *data.draw(st.lists(st.sampled_from(seqs), max_size=6))]
        snapshots += [s - 1 for s in snapshots[2:]]
        for key in keys + probes:
            for snap in snapshots:
                found = reference_get(entries, key, snap)
                if not keys[0] <= key <= keys[-1]:
                    expect = "skipped_by_range"
                elif found is not None:
                    expect = "found" if found[0] == KIND_VALUE else "tombstone"
                else:
                    expect = "not_visible" if key in keys else "false_positive"
                trace: list[dict[str, object]] = []
                before = stats.copy()
                reader.get(key, key_hash(key), snap, trace)
                assert [t["outcome"] for t in trace] == [expect]
                true_positive = expect in ("found", "tombstone", "not_visible")
                assert stats.filter_true_positives - before.filter_true_positives == true_positive
                assert reader.filter_checks == stats.filter_checks
                assert stats.tables_considered - before.tables_considered == 1


@pytest.mark.parametrize("reads", ["pread", "mmap"])
def test_regression_a_table_file_replaced_after_open_by_another_table_is_corruption(tmp: str, reads: str) -> None:
    """Regression: every data block is checked against its checksum, which vouches for the bytes but not for
    whose they are.  A table overwritten after open by another table of the same layout (fixed-size records,
    so every block lies at the same offset with the same size) passed every check, and a read answered from
    the other table's block: a wrong value, and scans yielded the other table's keys.  A block read from disk
    must now end in the version the index (read at open) says."""
    a = [(b"a%04d" % i, trailer(i + 1), b"x" * 20) for i in range(60)]
    b = [(b"b%04d" % i, trailer(i + 100), b"y" * 20) for i in range(60)]
    build(tmp, a, 1, block_size=256)
    other = os.path.join(tmp, "other")
    os.mkdir(other)
    build(other, b, 1, block_size=256)
    files = TableFileCache(FS, 1, mapped=reads == "mmap")
    reader = open_table(tmp, 1, file_cache=files)
    assert reader.get(b"a0000", key_hash(b"a0000"), MAX_SEQUENCE) == (KIND_VALUE, b"x" * 20)
    with open(os.path.join(other, table_file_name(1)), "rb") as f:
        data = f.read()
    path = os.path.join(tmp, table_file_name(1))
    assert os.path.getsize(path) == len(data)
    with open(path, "r+b") as f:  # in place: the file the reader holds now has the other table's bytes
        f.write(data)
    if reads == "mmap":
        files.evict(path)  # a mapping made before may keep the old pages; a new one sees the new bytes
    with pytest.raises(CorruptionError, match="not the one the index names") as e:
        reader.get(b"a0030", key_hash(b"a0030"), MAX_SEQUENCE)
    assert e.value.path == path
    with pytest.raises(CorruptionError) as e:
        list(reader.iter())
    assert e.value.path == path
    with pytest.raises(CorruptionError) as e:
        list(reader.iter(reverse=True))
    assert e.value.path == path
