"""Compaction: level shape, dead data dropped (but never what a snapshot needs), space reclaimed, crash safety."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storeutil import PreadLog, check_invariants, fast_tmp_dir, small_options

import minilsm
import minilsm.compaction
from minilsm import report
from minilsm.compaction import drop_dead, max_bytes_for_level, write_tables
from minilsm.fs import FileSystem
from minilsm.iterators import Entry, merge
from minilsm.keys import KIND_DELETE, KIND_VALUE, pack_trailer
from minilsm.sstable import TableBuilder, table_file_name
from minilsm.stats import Stats


def dir_table_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path) if n.endswith(".sst"))


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_invariants_hold_after_every_compaction(db_path: str, style: str) -> None:
    rng = random.Random(7)
    model: dict[bytes, bytes] = {}
    with minilsm.DB(db_path, **small_options(compaction_style=style)) as db:
        last = 0
        for i in range(3000):
            k = b"%04d" % rng.randrange(800)
            if rng.random() < 0.2:
                db.delete(k)
                model.pop(k, None)
            else:
                v = b"%d" % i * rng.randrange(1, 20)
                db.put(k, v)
                model[k] = v
            if db.stats().compactions != last:  # a compaction just ran inline: check the new shape
                last = db.stats().compactions
                check_invariants(db)
        assert last > 5
        assert list(db.iterator()) == sorted(model.items())
        if style == "leveled":
            levels = db.version.levels
            assert len(levels[0]) < db.options.level0_compaction_trigger
            for n in range(1, len(levels) - 1):
                # Levels are kept near their limit: one pick may leave a level just past it.
                assert sum(t.file_size for t in levels[n]) <= 2 * max_bytes_for_level(db.options, n)
        else:
            assert all(not level for level in db.version.levels[1:])


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_deletes_and_overwrites_are_physically_reclaimed(db_path: str, style: str) -> None:
    with minilsm.DB(db_path, **small_options(compaction_style=style)) as db:
        for i in range(2000):
            db.put(b"key%05d" % i, b"x" * 100)
        db.compact_range()
        loaded = dir_table_bytes(db_path)
        for round_ in range(3):
            for i in range(2000):
                db.put(b"key%05d" % i, b"y%d" % round_ * 50)
        for i in range(1000, 2000):
            db.delete(b"key%05d" % i)
        db.compact_range()
        check_invariants(db)
        after = dir_table_bytes(db_path)
        # 1000 live keys of ~100 bytes: about half of the first full load, nothing of the overwrites.
        assert after < 0.65 * loaded, (after, loaded)
        st = db.stats()
        assert st.entries_dropped_shadowed > 0 and st.tombstones_dropped > 0
        tables = [t for _, t in db.version.tables()]
        assert sum(t.meta.num_deletions for t in tables) == 0
        assert sum(t.meta.num_entries for t in tables) == 1000
        assert db.get(b"key00005") == b"y2" * 50 and db.get(b"key01500") is None


def test_snapshot_versions_survive_compaction(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        for i in range(300):
            db.put(b"k%03d" % i, b"one")
        s1 = db.snapshot()
        for i in range(300):
            db.put(b"k%03d" % i, b"two")
        s2 = db.snapshot()
        for i in range(0, 300, 2):
            db.delete(b"k%03d" % i)
        db.compact_range()
        check_invariants(db)
        assert s1.get(b"k000") == b"one" and s2.get(b"k000") == b"two" and db.get(b"k000") is None
        assert list(s1.iterator(include_key=False)) == [b"one"] * 300
        s1.close()
        s2.close()
        db.compact_range()
        assert db.get(b"k001") == b"two" and db.get(b"k000") is None
        tables = [t for _, t in db.version.tables()]
        assert sum(t.meta.num_entries for t in tables) == 150


def test_drop_dead_keeps_the_newest_version_of_each_snapshot_stripe() -> None:
    def v(key: bytes, seq: int, kind: int = KIND_VALUE) -> tuple[bytes, int, bytes]:
        return key, pack_trailer(seq, kind), b"%d" % seq

    versions = [
        v(b"a", 90, KIND_DELETE),
        v(b"a", 70),
        v(b"a", 50),
        v(b"a", 30, KIND_DELETE),
        v(b"a", 10),
        v(b"b", 40),
        v(b"b", 20, KIND_DELETE),
    ]
    stats = Stats()
    # Snapshots at 60 and 35: stripes (..35], (35..60], (60..].
    kept = list(drop_dead(iter(versions), [35, 60], lambda key: True, stats))
    # a@70 and a@10 are shadowed within their stripes; a@30 and b@20 are tombstones with nothing
    # older left beneath them, so a reader at 35 sees "absent" either way.
    assert [(k, t >> 8) for k, t, _ in kept] == [(b"a", 90), (b"a", 50), (b"b", 40)]
    assert stats.entries_dropped_shadowed == 2 and stats.tombstones_dropped == 2
    # Without snapshots only the newest version of each key remains, and a tombstone with nothing below goes.
    kept = list(drop_dead(iter(versions), [], lambda key: True, Stats()))
    assert [(k, t >> 8) for k, t, _ in kept] == [(b"b", 40)]
    # When an older version may exist below, the tombstone must stay.
    kept = list(drop_dead(iter(versions), [], lambda key: False, Stats()))
    assert [(k, t >> 8) for k, t, _ in kept] == [(b"a", 90), (b"b", 40)]


@given(
    keys=st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]), st.sampled_from([KIND_VALUE, KIND_DELETE])), max_size=40
    ),
    snapshots=st.lists(st.integers(0, 45), max_size=4, unique=True),
    droppable=st.frozensets(st.sampled_from([b"a", b"b", b"c", b"d"])),
)
def test_drop_dead_matches_the_stripe_model(
    keys: list[tuple[bytes, int]], snapshots: list[int], droppable: frozenset[bytes]
) -> None:
    # Versions with distinct sequence numbers, in internal order (key ascending, newest first).
    versions = sorted(
        ((key, pack_trailer(seq, kind), b"%d" % seq) for seq, (key, kind) in enumerate(keys, start=1)),
        key=lambda e: (e[0], -e[1]),
    )
    snapshots.sort()
    # The model: per key, the newest version of each stripe; then the oldest kept tombstones go
    # while the key is droppable.
    expected: list[tuple[bytes, int, bytes]] = []
    shadowed = dropped = 0
    for key in sorted({e[0] for e in versions}):
        stripes: dict[int, tuple[bytes, int, bytes]] = {}
        for e in (e for e in versions if e[0] == key):
            stripe = sum(1 for s in snapshots if s < e[1] >> 8)
            if stripe in stripes:
                shadowed += 1
            else:
                stripes[stripe] = e
        kept = list(stripes.values())
        while kept and kept[-1][1] & 0xFF == KIND_DELETE and key in droppable:
            kept.pop()
            dropped += 1
        expected += kept
    stats = Stats()
    assert list(drop_dead(iter(versions), snapshots, lambda key: key in droppable, stats)) == expected
    assert (stats.entries_dropped_shadowed, stats.tombstones_dropped) == (shadowed, dropped)


def test_tombstone_kept_while_a_deeper_level_holds_the_key(db_path: str) -> None:
    # Tombstone compaction off: this test moves the tombstone itself, one level down only.
    opts = small_options(level0_compaction_trigger=100, level0_stop_writes_trigger=200, tombstone_compaction=False)
    with minilsm.DB(db_path, **opts) as db:
        for i in range(500):
            db.put(b"k%03d" % i, b"old" * 20)
        db.compact_range()  # everything at the bottom level
        bottom = db.version.bottom_level_with_data()
        db.delete(b"k100")
        db.flush()
        # Move the tombstone one level down only: a level above the old value.
        from minilsm import compaction

        c = compaction.level0_compaction(db.version, "test")
        assert c is not None
        with db._mutex:
            db._run_compaction(c, manual=False)
        if bottom > 1:
            assert any(t.meta.num_deletions for t in db.version.levels[1])
        assert db.get(b"k100") is None
        db.compact_range()
        assert db.get(b"k100") is None


def test_a_leveled_store_reopened_tiered_keeps_its_tombstones_over_deeper_levels(db_path: str) -> None:
    """Was: a tiered compact_range dropped every tombstone, though a store made leveled still has tables
    below level 0, and a deleted key came back from them."""
    with minilsm.DB(db_path, **small_options()) as db:
        db.put(b"k", b"old")
        db.put(b"other", b"x")
        db.compact_range()
        assert db.version.bottom_level_with_data() > 0
    with minilsm.DB(db_path, **small_options(compaction_style="tiered")) as db:
        db.delete(b"k")
        db.compact_range()
        assert db.get(b"k") is None
        assert list(db) == [b"other"]


def test_a_leveled_store_reopened_tiered_reclaims_its_deeper_levels_at_compact_range(db_path: str) -> None:
    """Was: tiered merges take only level-0 runs, so the tables a leveled past left below level 0 stayed for
    good, with every version a later tombstone deleted: compact_range promised to reclaim deleted space and
    did not (a store of 900 deleted keys kept its 43 deeper tables)."""
    keys = [b"k%04d" % i for i in range(900)]
    with minilsm.DB(db_path, **small_options()) as db:
        for k in keys:
            db.put(k, b"v" * 40)
        db.compact_range()
        assert db.version.bottom_level_with_data() > 0
    with minilsm.DB(db_path, **small_options(compaction_style="tiered")) as db:
        for k in keys[100:]:
            db.delete(k)
        # The deeper levels may hold what the tombstones delete, so tombstone compaction leaves the runs alone
        # rather than merge, again and again, tombstones it may not drop.
        db.flush()
        db.wait_for_compactions()
        done = db.stats().compactions
        db.flush()
        db.wait_for_compactions()
        assert db.stats().compactions == done and list(db) == keys[:100]
        db.put(keys[0], b"new")
        db.compact_range()
        (run,) = db.tables()  # one run, at level 0, holding the live keys alone
        assert (run.level, run.entries, run.tombstones) == (0, 100, 0)
        assert dict(db.iterator()) == {k: b"new" if k == keys[0] else b"v" * 40 for k in keys[:100]}
        for k in keys[:100]:
            db.delete(k)
        db.compact_range()
        assert db.tables() == [] and list(db) == []
    assert not [n for n in os.listdir(db_path) if n.endswith(".sst")]


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_compact_range_drops_versions_kept_for_snapshots_since_released(db_path: str, style: str) -> None:
    """Was: a tiered compact_range left a single run alone unless it held tombstones, so the versions a flush had
    kept for snapshots stayed after the snapshots were released (60 entries for 20 keys), though compact_range
    promises a range with no shadowed version that no snapshot needs, and leveled delivered it."""
    with minilsm.DB(db_path, **small_options(compaction_style=style, memtable_size=1 << 20)) as db:
        snapshots = []
        for r in range(3):
            for i in range(20):
                db.put(b"k%02d" % i, b"v%d" % r)
            snapshots.append(db.snapshot())
        db.flush()
        assert [t.entries for t in db.tables()] == [60]
        for s in snapshots:
            s.close()
        db.compact_range()
        assert [t.entries for t in db.tables()] == [20]
        assert db.stats().entries_dropped_shadowed == 40
        compactions = db.stats().compactions
        db.compact_range()  # nothing left to drop: not rewritten again
        assert db.stats().compactions == compactions
        assert dict(db.iterator()) == {b"k%02d" % i: b"v2" for i in range(20)}


@pytest.mark.parametrize("background", [False, True])  # with the merges in the compaction worker, and inline
def test_a_tiered_compact_range_rewrites_a_run_kept_for_held_snapshots_only_once_one_is_released(
    db_path: str, background: bool
) -> None:
    """Was: with one run and a snapshot held, every compact_range rewrote the run, dropping nothing (the versions
    kept for the snapshot looked like versions to drop), as leveled never rewrites what its own merges wrote."""
    options = small_options(compaction_style="tiered", memtable_size=1 << 20, background=background)
    with minilsm.DB(db_path, **options) as db:
        snapshots = []
        for r in range(3):
            for i in range(20):
                db.put(b"k%02d" % i, b"v%d" % r)
            snapshots.append(db.snapshot())
        for i in range(5):
            db.delete(b"k%02d" % i)  # tombstones the snapshots need: they see values beneath
        db.compact_range()  # merges the flushed run: its tombstones might have gone
        assert [(t.entries, t.tombstones) for t in db.tables()] == [(65, 5)]

        def written() -> int:
            return db.stats().compaction_bytes_written

        before = written()
        db.compact_range()
        db.compact_range()
        assert written() == before  # nothing more to drop, nothing written
        snapshots.pop(0).close()  # the oldest: what only it saw may go
        db.compact_range()
        assert [(t.entries, t.tombstones) for t in db.tables()] == [(45, 5)] and written() > before
        before = written()
        db.compact_range()
        assert written() == before
        newer = db.snapshot()  # taken since: it sees nothing the run lost, so the run stays settled
        db.compact_range()
        assert written() == before
        for s in [*snapshots, newer]:
            s.close()
        db.compact_range()
        assert [(t.entries, t.tombstones) for t in db.tables()] == [(15, 0)]
        assert dict(db.iterator()) == {b"k%02d" % i: b"v2" for i in range(5, 20)}


@pytest.mark.parametrize("background", [False, True])
def test_a_leveled_compact_range_leaves_what_an_earlier_call_settled_until_a_snapshot_it_kept_for_is_released(
    db_path: str, background: bool
) -> None:
    """Was: every leveled compact_range rewrote the range's whole bottom level, though an earlier call had left it
    with nothing more to drop (as a tiered one leaves its run): a second call over 200 keys wrote it all again."""
    options = small_options(memtable_size=1 << 20, level1_max_bytes=1 << 20, background=background)
    with minilsm.DB(db_path, **options) as db:  # level 1 roomy: only the calls move tables
        for r in range(2):
            for i in range(200):
                db.put(b"k%03d" % i, b"v%d-%d" % (r, i) * 4)
            if r == 0:
                old = db.snapshot()  # the first round's versions stay for it
        db.compact_range()
        bottom = [t for t in db.tables() if t.level > 0]
        assert len(bottom) > 1 and sum(t.entries for t in bottom) == 400

        def written() -> int:
            return db.stats().compaction_bytes_written

        before = written()
        db.compact_range()
        db.compact_range(b"k050", b"k150")
        assert written() == before  # nothing more to drop, nothing written
        db.put(b"k100", b"late")  # merged down into the one table that holds it; the others stay settled
        db.compact_range()
        rewritten = {t.number for t in db.tables()} - {t.number for t in bottom}
        assert 1 <= len(rewritten) < len(bottom)
        before = written()
        db.compact_range()
        assert written() == before
        old.close()  # what only it saw may go now
        db.compact_range()
        assert sum(t.entries for t in db.tables()) == 200 and written() > before
        assert dict(db.iterator()) == {b"k%03d" % i: b"late" if i == 100 else b"v1-%d" % i * 4 for i in range(200)}
        before = written()
        db.compact_range()
        assert written() == before


def test_a_leveled_compact_range_remembers_as_settled_only_tables_at_the_bottom(db_path: str) -> None:
    """Was: it remembered every table its merges wrote, also those above the bottom when it returned (here the first
    call's, moved down by the merges that followed it).  A merge's outputs that fall outside the range stay above
    the bottom, where they may keep tombstones for the levels below; moved down later, they would have been
    skipped by the next call's rewrites as if settled.  (The helper audit of 5d595e3 noticed.)"""
    with minilsm.DB(db_path, **small_options(memtable_size=1 << 20)) as db:
        for i in range(400):
            db.put(b"k%03d" % i, b"v" * 30)
        db.compact_range()  # level 1 was the bottom; the merges that follow move its tables down
        for i in range(0, 160, 2):
            db.delete(b"k%03d" % i)
        db.compact_range(b"k000", b"k010")
        version = db.version
        bottom = {t.number for t in version.levels[version.bottom_level_with_data()]}
        remembered = db._range_compacted[0]
        assert remembered and remembered <= bottom, (remembered, bottom)


def test_an_inline_compact_range_leaves_no_obsolete_table_behind(db_path: str) -> None:
    """Was (f68de30, found by the state machine under --slow): compact_range kept the version of its last step in
    a local while it ran the inline background work that was due, so a table that work compacted away (here a
    lone tombstone, by tombstone compaction) stayed on disk until some later job swept."""
    with minilsm.DB(db_path, **small_options()) as db:
        db.delete(b"\x00")
    with minilsm.DB(db_path, **small_options()) as db:  # the open writes the log's tombstone as a level-0 table
        assert [t.entries for t in db.tables()] == [1]
        db.compact_range(None, b"")  # holds nothing of the range; the table goes in the work due after it
        assert db.tables() == []
        check_invariants(db)


@pytest.mark.parametrize("during", ["nothing", "a snapshot taken", "a snapshot released"])
def test_a_leveled_compact_range_rewrites_its_own_outputs_only_once_a_snapshot_they_kept_for_is_released(
    during: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bottom-level rewrites at the end of a leveled compact_range leave out the tables its merges wrote while
    every snapshot those merges kept versions for still lives.  Was: any change in the set of snapshots during the
    call rewrote them, a snapshot taken meanwhile too, though it is newer than every version they hold.

    A snapshot taken or released between the call's first and second merge, as another thread would (set here
    in the store's table of snapshots: the call holds the mutex that `snapshot()` takes)."""
    from minilsm.db import DB

    def run(during: str) -> tuple[int, dict[bytes, bytes], list[int], int]:
        with fast_tmp_dir() as d, minilsm.DB(os.path.join(d, "db"), **small_options(memtable_size=1 << 20)) as db:
            for r in range(3):
                for i in range(0, 200, 1 + r):
                    db.put(b"k%03d" % i, b"v%d-%d" % (r, i) * 4)
                if r == 0:
                    old = db.snapshot()  # the first round's versions stay for it
            db.flush()
            db.compact_range(b"k000", b"k099")  # a bottom level to merge into
            run_compaction = DB._run_compaction
            merges: list[int] = []

            def step(self: DB, c: minilsm.compaction.Compaction, manual: bool) -> list[int]:
                out = run_compaction(self, c, manual)
                merges.append(c.level)
                if len(merges) == 1 and during == "a snapshot taken":
                    self._snapshots[-1] = self._last_seq
                elif len(merges) == 1 and during == "a snapshot released":
                    del self._snapshots[old._sid]
                return out

            for i in range(0, 200, 7):
                db.put(b"k%03d" % i, b"late")
            db.flush()
            monkeypatch.setattr(DB, "_run_compaction", step)
            before = db.stats().compaction_bytes_written
            db.compact_range()
            monkeypatch.undo()
            entries = sum(t.entries for t in db.tables())
            return db.stats().compaction_bytes_written - before, dict(db.iterator()), merges, entries

    quiet, data, merges, kept = run("nothing")
    assert len(merges) >= 2 and kept > len(data), (merges, kept)  # versions kept for the snapshot
    written, same, _, entries = run(during)
    assert same == data
    if during == "a snapshot released":
        assert entries == len(data)  # the versions only it saw went, from the first merge's outputs too
    else:
        assert (written, entries) == (quiet, kept)  # a newer snapshot needs nothing more rewritten


def test_write_amplification_is_accounted(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        for i in range(3000):
            db.put(b"k%05d" % (i * 7919 % 3000), b"v" * 50)
        st = db.stats()
        assert st.user_bytes_written == 3000 * (6 + 50)
        assert st.flush_bytes_written > 0 and st.compaction_bytes_written > 0
        assert st.flushes > 0 and st.compactions > 0


class TableRemovalLog(FileSystem):
    """Adds up the size of every table file the store deletes, in `removed_table_bytes`."""

    def __init__(self) -> None:
        self.removed_table_bytes = 0

    def remove(self, path: str) -> None:
        if path.endswith(".sst"):
            self.removed_table_bytes += os.path.getsize(path)
        super().remove(path)


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_compaction_bytes_read_are_the_bytes_of_the_tables_merged_away(db_path: str, style: str) -> None:
    """`compaction_bytes_read` counts every table a compaction merges, whole, and nothing for a table a trivial
    move only relabels (no byte of it is read).  Ground truth from outside the counters: a merged table is
    deleted, a moved one is not, and no other table file is ever deleted, so once the store is closed the
    sizes of the table files it deleted add up to the count.  Likewise every table file written is deleted or
    still live, so the bytes flushes and compactions wrote add up to those two sizes together."""
    fs = TableRemovalLog()
    with minilsm.DB(db_path, **small_options(fs=fs, compaction_style=style)) as db:
        for i in range(2000):  # a load in key order: leveled compaction only moves its tables down
            db.put(b"k%05d" % i, b"v" * 50)
        if style == "leveled":
            st = db.stats()
            assert st.compactions > 0 and st.compaction_bytes_read == st.compaction_bytes_written == 0
        for i in range(2000):  # then overwrites at random, which merge
            db.put(b"k%05d" % (i * 7919 % 2000), b"w" * 40)
        db.compact_range()
        st = db.stats()
    assert st.compaction_bytes_read > 0
    assert st.compaction_bytes_read == fs.removed_table_bytes
    live = sum(os.path.getsize(os.path.join(db_path, n)) for n in os.listdir(db_path) if n.endswith(".sst"))
    assert st.flush_bytes_written + st.compaction_bytes_written == fs.removed_table_bytes + live


def test_compaction_bytes_read_is_input_bytes_not_the_reads_and_says_so(db_path: str) -> None:
    """Inline, a compaction reads only its inputs' data blocks (their index and filter are in memory): the
    preads of the merge fall short of `compaction_bytes_read`, which is the inputs' size, and the report's
    label says which of the two it shows."""
    fs = PreadLog()
    opts = small_options(fs=fs, block_cache_size=0, level0_compaction_trigger=100, level0_stop_writes_trigger=200)
    with minilsm.DB(db_path, **opts) as db:
        for i in range(1500):
            db.put(b"k%05d" % (i * 7919 % 1500), b"v" * 50)
        db.flush()
        inputs = {t.path: t.file_size for _, t in db.version.tables()}
        db.stats(reset=True)
        fs.reads.clear()
        db.compact_range()
        st = db.stats()
        text = report.format_stats(st)
    read = sum(size for path, _, size in fs.reads if path in inputs)
    assert st.compaction_bytes_read >= sum(inputs.values()) > read > 0
    assert "compaction input bytes" in text and "compaction bytes read" not in text


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_kill_9_during_compaction_heavy_load_reopens_exactly(db_path: str, style: str) -> None:
    child = textwrap.dedent(f"""
        import minilsm, random
        rng = random.Random(1)
        db = minilsm.DB({db_path!r}, memtable_size=2048, block_size=256, target_file_size=2048,
                        level1_max_bytes=8192, level_size_multiplier=2, level0_compaction_trigger=2,
                        compaction_style={style!r})
        i = 0
        while True:
            k = b"%04d" % rng.randrange(500)
            if rng.random() < 0.2:
                db.delete(k, sync=True)
                print("d", k.decode(), flush=True)
            else:
                db.put(k, b"%d" % i * 10, sync=True)
                print("p", k.decode(), i, flush=True)
            i += 1
    """)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    model: dict[bytes, bytes] = {}
    rng = random.Random(3)
    for _round in range(4):
        # `with` closes our end of the pipe (else a ResourceWarning) and waits for the child, which writes forever:
        # it is killed in `finally`, so that a failure in the loop cannot leave that wait hanging.
        with subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, env=env) as proc:
            assert proc.stdout is not None
            stop_after = rng.randrange(200, 700)
            acked: list[list[str]] = []
            try:
                for line in proc.stdout:
                    acked.append(line.split())
                    if len(acked) >= stop_after:
                        break
            finally:
                proc.kill()
                proc.wait()
            # Lines still in the pipe were acknowledged before the kill landed: they count too.
            # A last line without its newline was cut by the kill: that op is the one in flight.
            rest = proc.stdout.read()
        acked += [line.split() for line in rest.split("\n")[:-1] if line.strip()]
        # The child restarts its random sequence each round, so replay its acknowledgements onto the model.
        for op in acked:
            if op[0] == "d":
                model.pop(op[1].encode(), None)
            else:
                model[op[1].encode()] = b"%d" % int(op[2]) * 10
        with minilsm.DB(db_path) as db:
            check_invariants(db)
            got = dict(db.iterator())
            # The op in flight when the kill landed may or may not be there; everything acknowledged must be.
            diff = {k for k in set(got) | set(model) if got.get(k) != model.get(k)}
            assert len(diff) <= 1, sorted(diff)[:5]
            model = got


def test_a_load_in_key_order_moves_tables_down_without_rewriting_them(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        for i in range(3000):
            db.put(b"k%05d" % i, b"v" * 50)
        st = db.stats()
        check_invariants(db)
        # Level-0 tables of a sequential load are disjoint, so compactions only relabel them.
        assert st.compactions > 0 and st.compaction_bytes_written == 0
        assert sum(len(level) for level in db.version.levels[1:]) > 0
        assert all(db.get(b"k%05d" % i) == b"v" * 50 for i in range(3000))
        assert [k for k, _ in db.iterator()] == [b"k%05d" % i for i in range(3000)]


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_every_compaction_merges_sources_that_obey_the_age_rule(
    db_path: str, style: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`merge` breaks user-key ties by source age, so its output is internal order only if, for a key, a
    newer source's versions are all newer than an older source's: check the output of every compaction of
    a history with level 0, snapshots holding many versions per key, deletes and manual compactions."""
    merges: list[int] = []

    def checked_merge(sources: list[Iterator[Entry]]) -> Iterator[Entry]:
        prev: tuple[bytes, int] | None = None
        for entry in merge(sources):
            here = (entry[0], -entry[1])
            assert prev is None or prev < here, f"{entry!r} after {prev!r}: not internal order"
            prev = here
            yield entry
        merges.append(len(sources))

    monkeypatch.setattr(minilsm.compaction, "merge", checked_merge)
    rng = random.Random(11)
    model: dict[bytes, bytes] = {}
    with minilsm.DB(db_path, **small_options(compaction_style=style)) as db:
        snapshots: list[tuple[minilsm.Snapshot, dict[bytes, bytes]]] = []
        for i in range(2500):
            k = b"%03d" % rng.randrange(150)  # few keys: many versions of each
            if rng.random() < 0.2:
                db.delete(k)
                model.pop(k, None)
            else:
                db.put(k, b"%d" % i)
                model[k] = b"%d" % i
            if rng.random() < 0.01:
                snapshots.append((db.snapshot(), dict(model)))
            if snapshots and rng.random() < 0.005:
                snapshots.pop(0)[0].close()
            if rng.random() < 0.002:
                db.compact_range(b"%03d" % rng.randrange(150), None)
        db.compact_range()
        assert list(db.iterator()) == sorted(model.items())
        for snap, seen in snapshots:
            assert list(snap.iterator()) == sorted(seen.items())
            snap.close()
    assert sum(n > 1 for n in merges) >= 5  # merges of several sources were checked


@settings(max_examples=50)
@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(0, 300)), min_size=1, max_size=40),
    st.sampled_from([1, 100, 1000]),
    st.sampled_from([None, 1, 200, 1500]),
)
def test_write_tables_cuts_where_the_size_is_first_reached_between_keys(
    shape: list[tuple[int, int]], block_size: int, target: int | None
) -> None:
    """The tables `write_tables` makes are the ones adding version by version and cutting before the first
    version of a new key once `estimated_size()` reaches the target would make, byte for byte."""
    entries = [
        (b"%04d" % n, pack_trailer(1000 - v, KIND_VALUE), b"v" * size)
        for n, (versions, size) in enumerate(shape)
        for v in range(versions)
    ]
    with fast_tmp_dir() as d, mock.patch("minilsm.sstable.builder.time.time", return_value=1e9):
        fs = FileSystem()
        numbers = itertools.count(1)
        metas = write_tables(iter(entries), lambda: TableBuilder(fs, d, next(numbers), block_size=block_size), target)
        got: list[bytes] = []
        for m in metas:
            with open(os.path.join(d, table_file_name(m.number)), "rb") as f:
                got.append(f.read())
        expected: list[bytes] = []
        b: TableBuilder | None = None
        last = b""
        for key, t, value in entries:
            if b is not None and target is not None and key != last and b.estimated_size() >= target:
                expected.append(finish_and_read(b))
                b = None
            if b is None:
                b = TableBuilder(fs, d, next(numbers), block_size=block_size)
            b.add(key, t, value)
            last = key
        assert b is not None
        expected.append(finish_and_read(b))
    assert got == expected
    assert all(a.largest < b.smallest for a, b in itertools.pairwise(metas))  # no key straddles two tables


def finish_and_read(b: TableBuilder) -> bytes:
    b.finish()
    with open(b.path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("make_run", ["flush", "reopen"])
def test_tiered_runs_stay_few_when_small_runs_come_between_them(db_path: str, make_run: str) -> None:
    """Was: a run smaller than half its neighbours' average (a memtable flushed before it was full, as
    `flush()` and every reopen make) ended every window of age-adjacent runs around it, so neither it nor its
    neighbours could ever merge: a tiered store reopened or flushed now and then kept every run it made.  A
    session store (2000 keys overwritten) reopened 300 times had 396 runs and 26 MB on disk for 0.8 MB of live
    data, every read probing all of them.  A smaller run now joins the window without counting in its average."""
    rng = random.Random(3)
    # Inline, the compaction a reopen makes due waits for the next full memtable; the background thread runs it.
    opts = small_options(compaction_style="tiered", background=make_run == "reopen")
    keys = [b"k%03d" % i for i in range(100)]
    model: dict[bytes, bytes] = {}
    db = minilsm.DB(db_path, **opts)
    most = 0
    try:
        for r in range(150 if make_run == "flush" else 60):
            for _ in range(rng.randrange(1, 40)):
                k = rng.choice(keys)
                model[k] = b"v%d." % r + bytes(20)
                db.put(k, model[k])
            if make_run == "flush":
                db.flush()
            else:
                db.close()
                db = minilsm.DB(db_path, **opts)
                db.wait_for_compactions()
            most = max(most, len(db.version.levels[0]))
        assert dict(db.iterator()) == model
    finally:
        db.close()
    # A few tiers of fewer than tiered_min_threshold runs each, plus those waiting to merge.
    assert most <= 16, f"{most} runs at once"


def test_an_inline_store_reopened_for_a_few_writes_at_a_time_keeps_level_0_bounded(db_path: str) -> None:
    """Was: an inline (`background=False`) store compacted only after a memtable filled, and every reopen writes
    the log it recovers as a level-0 table, so an application that opened the store for a few writes at a time
    left one more level-0 table per run (60 runs: 60 tables, each probed by every read).  Now the first write
    after an open runs the work the open left due, as the background thread would at once; a store opened only
    to read is left as it was."""
    opts = dict(background=False, level0_compaction_trigger=4)
    runs = 32  # every open adds the table of the last run's log; the next open's would be the fourth
    for run in range(runs):
        with minilsm.DB(db_path, **opts) as db:
            for i in range(5):
                db.put(b"k%02d-%d" % (run, i), b"v%d" % run)
            assert len(db._version.levels[0]) <= 4
    with minilsm.DB(db_path, **opts) as db:  # opened to read: the recovered log is one more table, nothing else
        shape = [len(level) for level in db._version.levels]
        assert shape[0] == 4  # a compaction is due
        assert all(db.get(b"k%02d-%d" % (run, i)) == b"v%d" % run for run in range(runs) for i in range(5))
    with minilsm.DB(db_path, **opts) as db:
        assert [len(level) for level in db._version.levels] == shape
        db.put(b"late", b"v")
        assert len(db._version.levels[0]) == 0
        check_invariants(db)


def _run_tombstones(db: minilsm.DB) -> list[int]:
    """Tombstones in each tiered run, newest first."""
    return [t.meta.num_deletions for t in db.version.levels[0]]


def _tombstone_heavy(db: minilsm.DB) -> list[tuple[int, int]]:
    """(level, table) of every table of level 1 or deeper that is at least `TOMBSTONE_RATIO` tombstones."""
    ratio = minilsm.compaction.TOMBSTONE_RATIO
    return [
        (level, t.number)
        for level, t in db.version.tables()
        if level > 0 and t.meta.num_deletions >= ratio * t.meta.num_entries
    ]


@pytest.mark.parametrize("style", ["leveled", "tiered"])
@pytest.mark.parametrize("background", [False, True])
def test_tables_of_mostly_tombstones_go_down_and_take_the_deleted_values_with_them(
    db_path: str, background: bool, style: str
) -> None:
    # Mass deletes over a settled store: the tombstones reach level 1, under its size limit, with the values
    # they delete below.  Size compaction alone would leave both there (LevelDB does); each table that is
    # mostly tombstones is merged down instead, and its tombstones and the values they delete go.  Tiered, the
    # tombstones flush into runs small beside the one that holds the values, so no runs of similar size merge
    # them; the newest run of mostly tombstones is merged with every older run instead.
    opts = small_options(
        background=background, level1_max_bytes=64 << 10, target_file_size=8 << 10, compaction_style=style
    )
    with minilsm.DB(db_path, **opts) as db:
        for i in range(3000):
            db.put(b"key%05d" % i, b"v" * 100)
        db.compact_range()
        loaded = dir_table_bytes(db_path)
        deleted = random.Random(5).sample(range(3000), 2700)
        for i in deleted:
            db.delete(b"key%05d" % i)
        db.flush()
        db.wait_for_compactions()
        if style == "leveled":
            assert _tombstone_heavy(db) == []
            assert not db.version.levels[0]
        else:
            # Inline, a merge is picked at each flush as the deletes go, and the last few tombstones, beside what
            # remains, do not pay for another: a few dozen may wait.
            assert sum(_run_tombstones(db)) < 100 and len(db.version.levels[0]) <= 2
        after = dir_table_bytes(db_path)
        # 300 live keys: about a tenth of the load, where keeping the deleted values would be all of it and more.
        assert after < 0.25 * loaded, (after, loaded)
        assert db.stats().tombstones_dropped > 0
        live = sorted(set(range(3000)) - set(deleted))
        assert list(db.iterator(include_value=False)) == [b"key%05d" % i for i in live]
        check_invariants(db)


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_a_snapshot_older_than_a_bottom_table_of_tombstones_keeps_it_and_the_store_still_settles(
    db_path: str, style: str
) -> None:
    # A rewrite in place of a table whose tombstones a snapshot may need would keep them, and be picked again
    # and again: such a table waits for the snapshot's release.  So does a tiered merge of such runs.
    with minilsm.DB(db_path, **small_options(level1_max_bytes=64 << 10, compaction_style=style)) as db:
        for i in range(1000):
            db.put(b"key%05d" % i, b"v" * 100)
        db.compact_range()
        snap = db.snapshot()
        for i in range(1000):
            db.delete(b"key%05d" % i)
        db.flush()
        db.wait_for_compactions()
        done = db.stats().compactions
        db.wait_for_compactions()
        assert db.stats().compactions == done  # settled: nothing picked again
        assert list(db) == [] and snap.get(b"key00007") == b"v" * 100
        assert len(list(snap.iterator())) == 1000
        snap.close()
        db.flush()  # a write path event, as the background thread or a next write would run it
        db.wait_for_compactions()
        assert _tombstone_heavy(db) == [] and list(db) == []
        assert sum(t.meta.num_entries for _, t in db.version.tables()) < (1 if style == "tiered" else 200)
        check_invariants(db)


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_with_tombstone_compaction_off_the_tombstones_wait_as_in_leveldb(db_path: str, style: str) -> None:
    opts = small_options(
        level1_max_bytes=64 << 10, target_file_size=8 << 10, tombstone_compaction=False, compaction_style=style
    )
    with minilsm.DB(db_path, **opts) as db:
        for i in range(3000):
            db.put(b"key%05d" % i, b"v" * 100)
        db.compact_range()
        loaded = dir_table_bytes(db_path)
        for i in random.Random(5).sample(range(3000), 2700):
            db.delete(b"key%05d" % i)
        db.flush()
        db.wait_for_compactions()
        if style == "leveled":
            assert _tombstone_heavy(db)  # in level 1, over the values they delete, until a merge reaches them
        else:
            assert sum(_run_tombstones(db)) == 2700 and dir_table_bytes(db_path) > loaded
        assert len(list(db)) == 300
        db.compact_range()
        assert sum(t.tombstones for t in db.tables()) == 0 and len(list(db)) == 300


def test_tiered_a_few_tombstones_over_much_more_data_wait_for_the_runs_to_merge(db_path: str) -> None:
    # A queue: each key written and deleted again before a flush, so runs of tombstones alone, each deleting
    # nothing below.  Merging one into the whole store would rewrite it all for the little it frees.
    with minilsm.DB(db_path, **small_options(compaction_style="tiered")) as db:
        for i in range(3000):
            db.put(b"key%05d" % i, b"v" * 100)
        db.compact_range()
        (big,) = db.version.levels[0]
        for i in range(100):
            db.put(b"queue%03d" % i, b"job")
            db.delete(b"queue%03d" % i)
        db.flush()
        db.wait_for_compactions()
        runs = db.version.levels[0]
        assert runs[-1] is big and sum(_run_tombstones(db)) == 100
        assert len(list(db)) == 3000


def _spread_over_levels(db: minilsm.DB, versions: int = 1) -> None:
    """Keys in every level from 1 down, so that a full compact_range merges through each."""
    for v in range(versions):
        for i in range(1500):
            db.put(b"key%05d" % i, b"%d" % v * 60)
    db.flush()
    db.wait_for_compactions()


def test_compact_range_does_not_rewrite_the_tables_its_own_merges_just_wrote(db_path: str) -> None:
    # Was: after merging every level down, compact_range rewrote the whole bottom level in place, the tables its
    # last merge had just written included, though those held nothing more to drop: written twice at the end.
    with minilsm.DB(db_path, **small_options(tombstone_compaction=False)) as db:
        _spread_over_levels(db, versions=2)
        assert sum(1 for level in db.version.levels[1:] if level) >= 2
        written: set[int] = set()
        rewritten: list[int] = []
        run = db._run_compaction

        def spy(c: minilsm.compaction.Compaction, manual: bool) -> list[int]:
            if c.level == c.output_level:  # the bottom level rewritten in place
                rewritten.extend(t.number for t in c.inputs)
            before = db.version.numbers()
            outputs = run(c, manual)
            written.update(db.version.numbers() - before)
            return outputs

        with mock.patch.object(db, "_run_compaction", spy):
            db.compact_range()
        bottom = db.version.bottom_level_with_data()
        assert written & {t.number for t in db.version.levels[bottom]}  # the last merge wrote into the bottom
        assert not written & set(rewritten), (sorted(written), rewritten)
        assert [len(level) > 0 for level in db.version.levels] == [i == bottom for i in range(len(db.version.levels))]
        assert sum(t.meta.num_entries for _, t in db.version.tables()) == 1500
        assert dict(db.iterator()) == {b"key%05d" % i: b"1" * 60 for i in range(1500)}


def test_a_snapshot_released_during_compact_range_lets_its_versions_go_too(db_path: str) -> None:
    # The merges keep what a snapshot of their moment may see; one released after the last of them leaves such
    # versions in tables compact_range has just written, so then those are rewritten as well.
    with minilsm.DB(db_path, **small_options(tombstone_compaction=False)) as db:
        _spread_over_levels(db)
        snap = db.snapshot()
        for i in range(1500):
            db.put(b"key%05d" % i, b"new")
        pick = minilsm.compaction.manual_compaction

        def release_after_the_last_merge(*args: Any) -> minilsm.compaction.Compaction | None:
            c = pick(*args)
            if c is None:
                snap.close()
            return c

        with mock.patch.object(minilsm.compaction, "manual_compaction", release_after_the_last_merge):
            db.compact_range()
        with pytest.raises(minilsm.ClosedError):
            snap.get(b"key00001")  # released after the last merge, as arranged
        assert sum(t.meta.num_entries for _, t in db.version.tables()) == 1500  # one version a key
        assert dict(db.iterator()) == {b"key%05d" % i: b"new" for i in range(1500)}


def test_compact_range_ends_however_many_flushes_land_in_its_range_meanwhile(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: compact_range looked for the next step from level 0 again after each merge, so the flushes that
    writers in other threads land in its range meanwhile could keep it going for as long as they write (the
    thread-stress test saw a call pass 30 s).  Now, as LevelDB's CompactRange, each level is merged down once,
    top to bottom: what was written before the call ends at the bottom, what lands during it may stay above.

    Here every merge is followed, before the call looks for its next step, by a level-0 table with a write in
    the range, as a background flush would install it."""
    from minilsm.db import DB
    from minilsm.keys import KIND_VALUE
    from minilsm.memtable import MemTable

    db = minilsm.DB(db_path, **small_options())
    data = {b"key%03d" % i: b"value %d" % i for i in range(300)}
    for k, v in data.items():
        db.put(k, v)
    run_compaction = DB._run_compaction
    merges: list[int] = []

    def merge_then_a_flush_lands(self: DB, c: minilsm.compaction.Compaction, manual: bool) -> list[int]:
        out = run_compaction(self, c, manual)
        if manual and c.output_level != c.level:  # compact_range's merge down, not a bottom rewrite
            merges.append(c.level)
            if len(merges) < 50:
                key, seq = b"key%03d" % (len(merges) * 5), self._last_seq + 1
                mem = MemTable()
                mem.add(key, seq, KIND_VALUE, b"late %d" % len(merges))
                self._last_seq = seq
                self._write_level0_table(mem)
                data[key] = b"late %d" % len(merges)
        return out

    monkeypatch.setattr(DB, "_run_compaction", merge_then_a_flush_lands)
    db.compact_range(b"key000", b"key299")
    monkeypatch.undo()
    assert merges == sorted(set(merges)) and len(merges) < db.options.max_levels, merges
    assert dict(db.iterator()) == data
    db.close()
    with minilsm.DB(db_path, **small_options()) as db:
        assert dict(db.iterator()) == data
