"""Counters, per-table figures, traced reads and may_contain, each checked against an independent count."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storeutil import fast_tmp_dir, flip_byte, small_options

import minilsm
from minilsm.db import DB
from minilsm.report import ReadTrace, format_tables
from minilsm.stats import COUNTER_NAMES, DERIVED_COUNTERS, DBStats, Stats


@pytest.fixture
def db_path() -> Iterator[str]:
    with fast_tmp_dir() as d:
        yield os.path.join(d, "db")


def key(n: int) -> bytes:
    return b"k%06d" % n


def load(db: DB, numbers: range | list[int], value: bytes = b"v" * 40) -> None:
    for n in numbers:
        db.put(key(n), value)


def shuffled(n: int) -> list[int]:
    return [(i * 7919) % n for i in range(n)]  # 7919 is prime: a permutation for n not a multiple of it


# -- the snapshot type -------------------------------------------------------------


def test_snapshot_is_frozen_and_carries_every_counter(db_path: str) -> None:
    with DB(db_path, **small_options()) as db:
        load(db, range(50))
        db.get(key(1))
        s = db.stats()
    assert isinstance(s, DBStats)
    assert {f.name for f in dataclasses.fields(Stats)} | set(DERIVED_COUNTERS) == set(COUNTER_NAMES)
    assert set(COUNTER_NAMES) <= {f.name for f in dataclasses.fields(DBStats)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.gets = 0  # type: ignore[misc]
    assert s.gets == 1 and s.found_in_tables + s.found_in_memtable == 1
    d = json.loads(json.dumps(s.to_dict()))
    assert d["gets"] == 1 and len(d["levels"]) == len(s.levels) and len(d["tables"]) == len(s.tables)


# -- counters against an independent count ---------------------------------------


def test_without_filters_every_probe_inside_a_range_reads_exactly_one_block(db_path: str) -> None:
    # bits_per_key=0: every filter says maybe, so each probe of a table whose range
    # holds the key must cost exactly one data-block read (no block cache).
    with DB(db_path, bits_per_key=0, block_cache_size=0, background=False) as db:
        load(db, range(0, 2000, 2))
        db.flush()
        assert len(db.tables()) == 1
        db.stats(reset=True)
        absent = [key(n) for n in range(1, 1999, 2)]  # odd: inside the table's range, never written
        assert all(db.get(k) is None for k in absent)
        s = db.stats(reset=True)
        n = len(absent)
        assert (s.gets, s.not_found, s.tables_considered, s.filter_checks) == (n, n, n, n)
        assert (s.block_reads, s.filter_positives, s.false_positives, s.filter_negatives) == (n, n, n, 0)
        assert s.measured_fpr == 1.0 and s.expected_fpr == 1.0
        present = [key(n) for n in range(0, 2000, 2)]
        assert all(db.get(k) is not None for k in present)
        s = db.stats()
        m = len(present)
        assert (s.block_reads, s.filter_true_positives, s.found_in_tables, s.false_positives) == (m, m, m, 0)
        (table,) = s.tables
        assert table.block_reads == m and table.filter.checks == m and table.expected_fpr == 1.0


def model_probe(db: DB, k: bytes) -> tuple[int, int, int]:
    """(checks, negatives, positives) a read of absent key `k` must cause, computed from the filters directly."""
    checks = negatives = 0
    for t in db.tables():
        if t.smallest <= k <= t.largest:
            reader = next(r for _, r in db.version.tables() if r.number == t.number)
            checks += 1
            negatives += not reader.filter.may_contain(k)
    return checks, negatives, checks - negatives


def test_filter_counters_match_the_filters_answers_for_absent_keys(db_path: str) -> None:
    with DB(db_path, **small_options(block_cache_size=0)) as db:
        load(db, [2 * n for n in shuffled(1500)])
        db.flush()
        levels = [lv.tables for lv in db.stats().levels]
        assert sum(1 for n in levels if n) >= 3, levels  # several levels, so reads probe several tables
        absent = [key(2 * n + 1) for n in range(1499)]
        expected = [model_probe(db, k) for k in absent]
        db.stats(reset=True)
        assert all(db.get(k) is None for k in absent)
        s = db.stats()
        checks, negatives, positives = (sum(e[i] for e in expected) for i in range(3))
        assert (s.filter_checks, s.filter_negatives, s.filter_positives) == (checks, negatives, positives)
        assert s.filter_true_positives == 0 and s.false_positives == positives
        assert s.filter_negatives + s.filter_positives == s.filter_checks
        assert s.tables_considered - s.tables_skipped_by_range == s.filter_checks
        assert s.block_reads == s.false_positives  # a false positive costs one block, a negative none
        assert s.measured_fpr == positives / checks
        # Per table and per level, the same counts partition the totals (no compaction ran during the reads).
        assert sum(t.filter.checks for t in s.tables) == s.filter_checks
        assert sum(lv.filter.negatives for lv in s.levels) == s.filter_negatives
        assert sum(t.block_reads for t in s.tables) == s.block_reads
        assert s.filter.checks == s.filter_checks and s.filter.false_positives == s.false_positives
        # Theory, from each table's own n, m and k, weighted by the absent-key probes it got.
        for t in s.tables:
            assert t.expected_fpr == pytest.approx(
                (1 - math.exp(-t.filter_k * t.filter_keys / t.filter_bits)) ** t.filter_k
            )
            assert t.filter.expected_false_positives == pytest.approx(t.expected_fpr * t.filter.absent_probes)
        assert 0.002 < s.expected_fpr < 0.02  # type: ignore[operator]


def test_present_keys_count_one_true_positive_per_read_from_tables(db_path: str) -> None:
    with DB(db_path, **small_options(block_cache_size=0)) as db:
        load(db, shuffled(1000))
        db.delete(key(7))
        db.flush()
        db.put(key(3), b"in the memtable")
        db.stats(reset=True)
        keys = [key(n) for n in range(1000)]
        values = [db.get(k) for k in keys]
        s = db.stats()
    assert values[7] is None and values[3] == b"in the memtable"
    # Every read but the memtable hit ends at its first true positive, the tombstone of key 7 included.
    assert s.filter_true_positives == 999
    assert s.found_in_memtable == 1 and s.found_in_tables == 998 and s.not_found == 1
    assert s.block_reads == s.filter_positives  # no block cache: every positive reads one block
    # The rate counts only the probes of tables that did not hold the key.
    assert s.measured_fpr == s.false_positives / (s.filter_negatives + s.false_positives)
    assert s.filter_checks > s.filter_negatives + s.false_positives


def test_a_block_that_fails_its_checksum_counts_as_read_in_its_table_too(db_path: str) -> None:
    # Was: the store counted the read in `read_block`, the table only once the block had passed its checks, so
    # after a damaged block the per-table rows no longer summed to the totals.
    with DB(db_path, **small_options(block_cache_size=0)) as db:
        load(db, range(200))
        db.compact_range()
        first = min((t for _, t in db.version.tables()), key=lambda t: t.smallest)
        flip_byte(first.path, 10)  # a byte of its first data block, which holds its smallest key
        db.stats(reset=True)
        with pytest.raises(minilsm.CorruptionError, match="checksum"):
            db.get(first.smallest)
        with pytest.raises(minilsm.CorruptionError, match="checksum"):
            list(db.iterator())
        s = db.stats()
        assert s.block_reads == 2  # the damaged block, once by each
        assert sum(t.block_reads for t in s.tables) == s.block_reads
        assert next(t for t in s.tables if t.number == first.number).block_reads == 2


def test_reset_zeroes_the_store_and_the_tables_and_returns_what_was_counted(db_path: str) -> None:
    with DB(db_path, **small_options()) as db:
        load(db, shuffled(400))
        db.flush()
        for n in range(400):
            db.get(key(n))
        before = db.stats(reset=True)
        after = db.stats()
    assert before.gets == 400 and before.filter.checks > 0
    assert all(getattr(after, name) == 0 for name in COUNTER_NAMES)
    assert all(t.filter.checks == 0 and t.filter.positives == 0 and t.block_reads == 0 for t in after.tables)


def test_a_read_landing_while_a_reset_snapshot_is_taken_counts_in_the_next_interval(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A monitoring thread calls stats(reset=True) while other threads read: the snapshot takes O(tables), and a
    # read may land between it and the reset.  That read must count once: not in the snapshot, so in the next.
    with DB(db_path, **small_options(bits_per_key=0, block_cache_size=0)) as db:
        load(db, shuffled(400))
        db.flush()
        snapshot = minilsm.report.snapshot

        def snapshot_then_a_read(*args: object, **kwargs: object) -> DBStats:
            s = snapshot(*args, **kwargs)  # type: ignore[arg-type]
            db.get(key(7))  # another thread's read, as the snapshot is handed back and before the reset
            return s

        db.stats(reset=True)  # the load's compactions read blocks too
        db.get(key(3))
        monkeypatch.setattr(minilsm.report, "snapshot", snapshot_then_a_read)
        before = db.stats(reset=True)
        monkeypatch.undo()
        after = db.stats()
        blocks = db.explain(key(7)).block_reads
    assert before.gets == 1 and after.gets == 1
    assert after.block_reads == blocks > 0
    # Per table too: the second read's probes and block reads stay with the tables, beside the totals.
    assert after.filter.checks == after.filter_checks > 0
    assert sum(t.block_reads for t in after.tables) == after.block_reads


def test_a_snapshot_taken_beside_a_reading_thread_adds_up(db_path: str) -> None:
    # The sums a snapshot reports (checks, tables considered, expected false positives) must be made of the same
    # reads as the counts beside them, even while another thread's reads change those counts.
    with DB(db_path, **small_options(bits_per_key=4, block_cache_size=0)) as db:
        load(db, shuffled(600))
        db.flush()
        stop = threading.Event()

        def reader() -> None:
            n = 0
            while not stop.is_set():
                db.get(key(n % 1200))
                n += 7

        interval = sys.getswitchinterval()
        thread = threading.Thread(target=reader)
        sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
        thread.start()
        try:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                s = db.stats()
                assert s.filter_checks == s.filter_negatives + s.filter_positives
                assert s.tables_considered == s.tables_skipped_by_range + s.filter_checks
                for t in s.tables:
                    assert t.filter.checks == t.filter.negatives + t.filter.positives
                    if t.filter.absent_probes:
                        assert t.filter.expected_fpr == pytest.approx(t.expected_fpr, rel=1e-12)
        finally:
            stop.set()
            thread.join()
            sys.setswitchinterval(interval)


def test_adding_and_taking_off_counts_covers_every_counter() -> None:
    names = [f.name for f in dataclasses.fields(Stats)]
    s = Stats(*range(1, len(names) + 1))
    s.add(s.copy())
    assert [getattr(s, n) for n in names] == [2 * i for i in range(1, len(names) + 1)]
    s.take_off(Stats(*range(1, len(names) + 1)))
    assert [getattr(s, n) for n in names] == list(range(1, len(names) + 1))


def test_write_and_space_amplification(db_path: str) -> None:
    with DB(db_path, **small_options()) as db:
        model: dict[bytes, bytes] = {}
        for round_ in range(3):
            for n in shuffled(500):
                db.put(key(n), b"%d" % round_ * 30)
                model[key(n)] = b"%d" % round_ * 30
        for n in range(0, 500, 3):
            db.delete(key(n))
            del model[key(n)]
        db.flush()
        s = db.stats(measure_space=True)
        assert s.user_bytes_written == 3 * 500 * (7 + 30) + len(range(0, 500, 3)) * 7
        assert s.write_amplification == (s.flush_bytes_written + s.compaction_bytes_written) / s.user_bytes_written
        assert s.live_bytes == sum(len(k) + len(v) for k, v in model.items())
        assert s.table_bytes == sum(t.file_size for t in db.tables())
        assert s.space_amplification == s.table_bytes / s.live_bytes
        db.compact_range()
        compacted = db.stats(measure_space=True)
    assert compacted.live_bytes == s.live_bytes
    assert 1.0 < compacted.space_amplification < s.space_amplification  # type: ignore[operator]


def test_stats_without_space_measurement_leaves_it_unknown(db_path: str) -> None:
    with DB(db_path, **small_options()) as db:
        s = db.stats()
        assert s.live_bytes is None and s.space_amplification is None
        assert s.write_amplification is None and s.measured_fpr is None  # nothing written or read yet


# -- tables() ------------------------------------------------------------------------


def test_tables_rows_describe_each_live_table(db_path: str) -> None:
    with DB(db_path, **small_options(bits_per_key=8)) as db:
        load(db, shuffled(600))
        db.delete(key(5))
        db.flush()
        rows = db.tables()
        readers = {r.number: (level, r) for level, r in db.version.tables()}
    assert len(rows) == len(readers) > 1
    for t in rows:
        level, r = readers[t.number]
        assert t.level == level and t.file_name == f"{t.number:06d}.sst" and t.file_size == r.file_size
        assert (t.entries, t.tombstones) == (r.props.num_entries, r.props.num_deletions)
        assert (t.smallest, t.largest) == (r.smallest, r.largest)
        assert t.filter_bits >= 64 and t.filter_k == round(8 * math.log(2)) and t.bits_per_key >= 8
        assert t.filter_bytes == r.props.filter_size
        # The bit array, the filter's 32-byte header and checksum, the block's 9-byte trailer (as RESULTS.md says).
        assert t.filter_bytes == (t.filter_bits + 7) // 8 + 41
    assert sum(t.tombstones for t in rows) == 1


def test_tables_text_names_the_probes_its_last_column_counts(db_path: str) -> None:
    # The last column is the measured rate's denominator: probes for keys the table does not hold.  Reads
    # that find their key probe the table too, so a bare "probes" would understate them.
    with DB(db_path, **small_options(memtable_size=1 << 20)) as db:
        load(db, range(0, 100, 2))
        db.flush()
        db.stats(reset=True)
        for n in range(0, 20, 2):
            db.get(key(n))
        for n in range(1, 7, 2):
            db.get(key(n))
        (row,) = db.tables()
        header, line = format_tables([row]).splitlines()
    assert row.filter.checks == 13 and row.filter.absent_probes == 3
    assert header.endswith("absent probes") and line.endswith(" 3")


# -- explain() ---------------------------------------------------------------------


def test_explain_walks_the_real_read_path(db_path: str) -> None:
    with DB(db_path, **small_options(block_cache_size=0)) as db:
        load(db, [2 * n for n in shuffled(800)])
        db.delete(key(10))
        db.flush()
        db.put(key(4), b"fresh")
        for k in (key(4), key(10), key(12), key(13), key(99999)):
            before = db.stats()
            trace = db.explain(k)
            after = db.stats()
            assert isinstance(trace, ReadTrace)
            assert trace.value == db.get(k)
            # It is a read: it counts like one, and its steps agree with the counters it moved.
            assert after.gets == before.gets + 1
            assert trace.block_reads == after.block_reads - before.block_reads
            assert trace.reads_avoided == after.filter_negatives - before.filter_negatives
            tables = [s for s in trace.steps if s.source == "table"]
            assert len(tables) == after.tables_considered - before.tables_considered
            assert trace.steps[0].source == "memtable"
        assert db.explain(key(4)).steps[0].outcome == "found" and len(db.explain(key(4)).steps) == 1
        deleted = db.explain(key(10))
        assert deleted.outcome == "deleted" and deleted.steps[-1].outcome == "tombstone"
        found = db.explain(key(12))
        assert found.outcome == "found" and found.steps[-1].outcome == "found" and found.steps[-1].blocks
        level_of = {r.number: level for level, r in db.version.tables()}
        assert all(s.level == level_of[s.number] for s in found.steps if s.source == "table")
        missing = db.explain(key(13))
        assert missing.outcome == "not found"
        assert {s.outcome for s in missing.steps[1:]} <= {"skipped_by_range", "filter_negative", "false_positive"}
        text = str(found)
        assert text.startswith("get k000012 at sequence") and "-> found" in text and "memtable: miss" in text
        assert ("filter: no (read avoided)" in str(missing)) == (missing.reads_avoided > 0)
        json.dumps(found.to_dict())
        # Was: a level whose tables all end before the key was left out of the trace, as if never looked at.
        past = db.explain(key(99999))
        deeper = sorted({level for level, _ in db.version.tables() if level > 0})
        assert deeper and [s.level for s in past.steps if s.source == "level"] == deeper
        assert all(s.outcome == "past_last_table" for s in past.steps if s.source == "level")
        last = max(r.largest for level, r in db.version.tables() if level == deeper[-1])
        assert f"L{deeper[-1]}: skipped by range (the level ends at {last.decode()})" in str(past)
        assert json.loads(json.dumps(past.to_dict()))["steps"][-1]["largest"] == last.hex()


def test_explain_tells_a_block_read_from_a_block_cache_hit(db_path: str) -> None:
    """A block enters the cache at its second read (the doorkeeper), and the third read finds it there."""
    with DB(db_path, **small_options(block_cache_size=1 << 20)) as db:
        load(db, range(300))
        db.flush()
        first = db.explain(key(150))
        second = db.explain(key(150))
        before = db.stats()
        third = db.explain(key(150))
        after = db.stats()
    assert first.block_reads == second.block_reads == 1 and "read -> found" in str(second)
    assert third.block_reads == 0 and after.block_reads == before.block_reads
    assert after.block_cache_hits == before.block_cache_hits + 1 and "from the block cache -> found" in str(third)


def test_a_read_with_fill_cache_false_uses_the_block_cache_but_adds_nothing_to_it(db_path: str) -> None:
    """plyvel's ``fill_cache=False``: a block read from the file is not offered to the cache (not even to its
    doorkeeper), and a block already cached is still used; a snapshot's and a prefixed view's reads alike."""
    with DB(db_path, **small_options(block_cache_size=1 << 20)) as db:
        load(db, range(300))
        db.flush()
        snap = db.snapshot()
        views = [db.get, snap.get, lambda k, **kw: db.prefixed_db(k[:-1]).get(k[-1:], **kw)]

        def read(get: Any, **kw: bool) -> tuple[int, int]:
            before = db.stats()
            assert get(key(150), **kw) == b"v" * 40
            after = db.stats()
            return after.block_reads - before.block_reads, after.block_cache_hits - before.block_cache_hits

        for get in views:
            assert [read(get, fill_cache=False) for _ in range(3)] == [(1, 0)] * 3
        assert [read(db.get) for _ in range(3)] == [(1, 0), (1, 0), (0, 1)]  # admitted at its second read
        for get in views:
            assert read(get, fill_cache=False, verify_checksums=True) == (0, 1)
        snap.close()


def test_explain_without_filters_reads_a_block_per_table_in_range(db_path: str) -> None:
    with DB(db_path, **small_options(bits_per_key=0, block_cache_size=0)) as db:
        load(db, [2 * n for n in shuffled(800)])
        db.flush()
        trace = db.explain(key(801))
        in_range = [s for s in trace.steps if s.source == "table" and s.outcome != "skipped_by_range"]
    assert in_range and all(s.outcome == "false_positive" and len(s.blocks) == 1 for s in in_range)
    assert trace.block_reads == len(in_range) and trace.reads_avoided == 0
    assert "no filter -> index -> block" in str(trace) and "not found (false positive)" in str(trace)


@settings(max_examples=25)
@given(
    ops=st.lists(st.tuples(st.sampled_from(["put", "delete", "flush"]), st.integers(0, 40)), max_size=60),
    probes=st.lists(st.integers(0, 45), min_size=1, max_size=10),
)
def test_explain_agrees_with_get(ops: list[tuple[str, int]], probes: list[int]) -> None:
    with fast_tmp_dir() as path, DB(path, **small_options(memtable_size=256)) as db:
        for op, n in ops:
            if op == "put":
                db.put(key(n), b"%d" % len(ops) * 5)
            elif op == "delete":
                db.delete(key(n))
            else:
                db.flush()
        for n in probes:
            trace = db.explain(key(n))
            value = db.get(key(n))
            assert trace.value == value
            assert (trace.outcome == "found") == (value is not None)
            # The read stops at the first place that holds a version of the key.
            settled = [s for s in trace.steps if s.outcome in ("found", "tombstone")]
            assert len(settled) <= 1 and (not settled or settled[0] is trace.steps[-1])


# -- may_contain() ---------------------------------------------------------------------


def test_may_contain_reads_no_data_and_never_misses_a_present_key(db_path: str) -> None:
    with DB(db_path, **small_options(block_cache_size=0)) as db:
        load(db, [2 * n for n in shuffled(800)])
        db.delete(key(20))
        db.flush()
        db.put(key(1), b"x")
        db.delete(key(2))
        before = db.stats()
        present = [db.may_contain(key(2 * n)) for n in range(800) if n not in (1, 10)]
        absent = [db.may_contain(key(2 * n + 1)) for n in range(1, 800)]
        after = db.stats()
        assert all(present)
        assert db.may_contain(key(1)) and not db.may_contain(key(2))  # the memtables answer exactly
        assert sum(absent) < 0.1 * len(absent)  # the filters reject most absent keys
        assert all(getattr(after, name) == getattr(before, name) for name in COUNTER_NAMES)  # counts nothing
    with DB(db_path, **small_options(bits_per_key=0)) as db:
        db.compact_range()  # rebuild every table without a filter
        s = db.stats()
        assert db.may_contain(key(501)) and not db.may_contain(b"zzz")  # in a range: maybe; outside: no
        assert db.stats().block_reads == s.block_reads


def test_introspection_of_a_closed_store_raises(db_path: str) -> None:
    db = DB(db_path, **small_options())
    db.close()
    with pytest.raises(minilsm.ClosedError):
        db.explain(b"k")
    with pytest.raises(minilsm.ClosedError):
        db.may_contain(b"k")


def test_get_property_answers_leveldbs_names_from_the_same_figures(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options(block_cache_size=1 << 20)) as db:
        for i in range(600):
            db.put(b"key%05d" % i, b"v" * 30)
        for _ in range(2):
            db.get(b"key00001")  # a block into the cache, which admits one at its second read
        levels = [lv.tables for lv in db.stats().levels]
        for family in ("leveldb", "minilsm"):
            for n, tables in enumerate(levels):
                assert db.get_property(f"{family}.num-files-at-level{n}".encode()) == str(tables).encode()
        assert sum(levels) > 1
        for unknown in (
            b"leveldb.num-files-at-level99",
            b"leveldb.num-files-at-level-1",
            b"leveldb.nope",
            b"rocksdb.stats",
            b"stats",
            b"\xff",
        ):
            assert db.get_property(unknown) is None
        assert db.get_property("minilsm.sstables") == format_tables(db.tables()).encode()
        assert db.get_property(b"leveldb.stats").startswith(b"point reads")
        memory = int(db.get_property(b"leveldb.approximate-memory-usage") or b"")
        cache = db._block_cache
        assert cache is not None and cache.usage > 0
        assert memory == db.stats().memtable_bytes + cache.usage > cache.usage
    with pytest.raises(minilsm.ClosedError):
        db.get_property(b"leveldb.stats")


class _FreezeOnRead:
    """`DB._mem` as a data descriptor whose first read, once armed, freezes the memtable from another thread, as a
    writer might between the two reads a memory figure makes."""

    def __init__(self) -> None:
        self.armed = False
        self.thread: threading.Thread | None = None

    def __get__(self, db: DB, owner: object = None) -> object:
        mem = db.__dict__["_mem_hooked"]
        if self.armed:
            self.armed = False

            def freeze() -> None:
                with db._mutex:
                    db._freeze_memtable()

            self.thread = t = threading.Thread(target=freeze)
            t.start()
            t.join(0.5)  # at once, unless the reader holds the mutex (correct too: the freeze then waits for it)
        return mem

    def __set__(self, db: DB, value: object) -> None:
        db.__dict__["_mem_hooked"] = value


def test_memory_figures_count_a_memtable_frozen_meanwhile_once(db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _FreezeOnRead()
    monkeypatch.setattr(DB, "_mem", hook, raising=False)
    with minilsm.DB(db_path, **small_options(background=False)) as db:
        db.put(b"k", b"v" * 100)
        held = db._memtable_bytes()
        assert held > 100 and db._imm is None
        hook.armed = True
        assert db.stats().memtable_bytes == held  # not twice: once as the memtable, once frozen
        assert hook.thread is not None
        hook.thread.join()
        assert db._imm is not None and db._imm.approximate_size == held
        assert db.get(b"k") == b"v" * 100


def test_get_property_takes_any_bytes_like_name_and_refuses_other_types(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        want = db.get_property(b"leveldb.num-files-at-level0")
        assert want is not None
        for name in (bytearray(b"leveldb.num-files-at-level0"), memoryview(b"leveldb.num-files-at-level0")):
            assert db.get_property(name) == want  # as a key may be: not read as its repr "<memory at 0x...>"
        for wrong in (None, 5, [b"leveldb.stats"]):
            with pytest.raises(TypeError, match="property name"):  # as plyvel's does; not None for "unknown"
                db.get_property(wrong)  # type: ignore[arg-type]
