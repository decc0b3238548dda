"""Seek compaction: tables that reads keep probing in vain are merged downwards, and only then."""

from __future__ import annotations

import random
import time

import pytest
from storeutil import check_invariants, small_options

import minilsm
from minilsm import compaction
from minilsm.db import SEEK_CHECK_INTERVAL, SEEK_PACE


def options(**kw: object) -> dict[str, object]:
    """Small tables, and room for a few in level 0, so that a read probes several tables."""
    return small_options(**{"level0_compaction_trigger": 4, **kw})


def load(path: str, **kw: object) -> dict[bytes, bytes]:
    """A store with tables in level 0 and below, written with seek compaction off; its contents."""
    rng = random.Random(1)
    model: dict[bytes, bytes] = {}
    with minilsm.DB(path, **options(seek_compaction=False, **kw)) as db:
        for i in range(1700):
            k, v = b"k%05d" % rng.randrange(0, 4000, 2), b"v%d" % i
            db.put(k, v)
            model[k] = v
        db.flush()  # nothing for the reopen to flush
        shape = [len(level) for level in db.version.levels]
    assert shape[0] >= 1 and sum(shape) >= 2, shape  # some tables in level 0: a read probes several
    return model


def read_missing(db: minilsm.DB, n: int = 3000) -> float:
    """Filter probes per read of `n` absent keys that fall inside the stored key range."""
    rng = random.Random(2)
    db.stats(reset=True)
    for _ in range(n):
        assert db.get(b"k%05d" % rng.randrange(1, 4000, 2)) is None
    return db.stats().filter_checks / n


def shape(db: minilsm.DB) -> list[int]:
    return [len(level) for level in db.version.levels]


def test_missing_reads_compact_level0_away_in_the_background(db_path: str) -> None:
    model = load(db_path)
    with minilsm.DB(db_path, **options(background=True)) as db:
        time.sleep(0.2)  # the background thread now waits: only its own timeout can show it the reads' charge
        before = read_missing(db)
        # Reads never wake the background thread; it finds the seek compaction within SEEK_CHECK_INTERVAL.
        deadline = time.monotonic() + 10 * SEEK_CHECK_INTERVAL
        while db.version.levels[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert db.version.levels[0] == ()
        db.wait_for_compactions()
        # Nothing due by size; more seek compactions may wait for their pace (SEEK_PACE).
        assert compaction.pick_compaction(db.version, db.options, db._compact_pointers, seek=False) is None
        assert db.stats().compactions >= 1
        after = read_missing(db)
        assert after < before
        assert {k: db.get(k) for k in model} == model
        check_invariants(db, sweep_first=True)


def test_without_seek_compaction_reads_never_change_the_shape(db_path: str) -> None:
    model = load(db_path)
    with minilsm.DB(db_path, **options(background=True, seek_compaction=False)) as db:
        first = shape(db)
        read_missing(db)
        time.sleep(2 * SEEK_CHECK_INTERVAL)
        db.wait_for_compactions()
        assert shape(db) == first
        assert db.stats().compactions == 0
        assert {k: db.get(k) for k in model} == model


def test_inline_reads_alone_never_compact_the_next_writes_background_work_does(db_path: str) -> None:
    model = load(db_path)
    with minilsm.DB(db_path, **options()) as db:
        version = db.version
        read_missing(db)
        assert db.version is version and db.stats().compactions == 0
        db.put(b"k00000", b"new")  # a write that does not fill the memtable runs no background work
        assert db.version is version
        db.flush()
        assert db.stats().compactions >= 1  # a seek compaction: one level-0 table more is below the size trigger
        model[b"k00000"] = b"new"
        assert {k: db.get(k) for k in model} == model
        check_invariants(db)


def test_a_stats_reset_keeps_the_seek_charge(db_path: str) -> None:
    load(db_path)
    with minilsm.DB(db_path, **options()) as db:
        read_missing(db)
        charges = {t.number: t.seek_charge for _, t in db.version.tables()}
        db.stats(reset=True)
        assert all(t.misses == 0 for _, t in db.version.tables())
        assert {t.number: t.seek_charge for _, t in db.version.tables()} == charges
        db.wait_for_compactions()  # inline: runs the background work now
        assert db.stats().compactions >= 1


def test_the_seek_pick_charges_vain_probes_against_the_allowance(db_path: str) -> None:
    load(db_path)
    # Levels twice the size the load had: room below every table (see the next test for a full level).
    with minilsm.DB(db_path, **options(level1_max_bytes=16384)) as db:
        v, opts = db.version, db.options
        assert compaction.pick_compaction(v, opts, db._compact_pointers) is None
        (_, t), *_ = v.tables()  # the newest level-0 table
        t.seek_charge_base = compaction.seek_allowance(t) - 1
        assert compaction.pick_compaction(v, opts, db._compact_pointers) is None
        t.seek_charge_base += 1
        c = compaction.pick_compaction(v, opts, db._compact_pointers)
        assert c is not None and c.level == 0 and c.inputs == list(v.levels[0])
        assert c.reason == f"seek compaction: table {t.number} probed {t.seek_charge} times without a hit"
        # A table of the deepest level has nowhere to go.
        t.seek_charge_base = 0
        bottom = v.levels[v.bottom_level_with_data()][0]
        bottom.seek_charge_base = 10**6
        assert compaction.pick_compaction(v, opts, db._compact_pointers) is None
        # A level-1 table goes with what overlaps it in level 2.
        bottom.seek_charge_base = 0
        mid = next(t for t in v.levels[1] if v.overlapping(2, t.smallest, t.largest))
        mid.seek_charge_base = 10**6
        c = compaction.pick_compaction(v, opts, db._compact_pointers)
        below = v.overlapping(2, mid.smallest, mid.largest)
        assert c is not None and (c.level, c.inputs, c.overlaps) == (1, [mid], below)


def test_a_seek_compaction_waits_until_the_level_below_has_room(db_path: str) -> None:
    """A merge that would fill the level below past its limit would set off size compactions down the tree."""
    load(db_path)
    with minilsm.DB(db_path, **options()) as db:
        v, opts = db.version, db.options
        mid = next(t for t in v.levels[1] if v.overlapping(2, t.smallest, t.largest))
        mid.seek_charge_base = 10**6
        room = compaction.max_bytes_for_level(opts, 2) - v.level_bytes(2)
        assert room < mid.file_size  # the load left level 2 too full for it
        assert compaction.pick_compaction(v, opts, db._compact_pointers) is None
        # Level 0 is the exception: its merge never fits level 1 and is due at the next writes anyway.
        level0_bytes = sum(t.file_size for t in v.levels[0])
        assert v.level_bytes(1) + level0_bytes > compaction.max_bytes_for_level(opts, 1)
        v.levels[0][0].seek_charge_base = 10**6
        c = compaction.pick_compaction(v, opts, db._compact_pointers)
        assert c is not None and c.by_seek and c.level == 0
    # The same store and charge, with level 2 allowed just what the merge could make it: now it is picked.
    with minilsm.DB(db_path, **options(level1_max_bytes=(v.level_bytes(2) + mid.file_size) // 2)) as db:
        v, opts = db.version, db.options
        assert compaction.max_bytes_for_level(opts, 2) >= v.level_bytes(2) + mid.file_size
        assert compaction.pick_compaction(v, opts, db._compact_pointers, seek=False) is None  # nothing due by size
        mid = next(t for t in v.levels[1] if t.number == mid.number)
        mid.seek_charge_base = 10**6
        c = compaction.pick_compaction(v, opts, db._compact_pointers)
        assert c is not None and c.by_seek and (c.level, c.inputs) == (1, [mid])


def test_tiered_never_picks_a_seek_compaction(db_path: str) -> None:
    load(db_path, compaction_style="tiered")
    with minilsm.DB(db_path, **options(compaction_style="tiered", background=True)) as db:
        read_missing(db)
        for _, t in db.version.tables():
            t.seek_charge_base = 10**6
        c = compaction.pick_compaction(db.version, db.options, db._compact_pointers)
        assert c is None or not c.reason.startswith("seek")


def test_the_option_is_a_bool() -> None:
    with pytest.raises(TypeError, match="seek_compaction"):
        minilsm.Options(seek_compaction=1)  # type: ignore[arg-type]


def test_seek_compactions_are_paced_and_size_compactions_are_not(db_path: str) -> None:
    """Seek compactions share the interpreter lock with the reads that set them off: they take at most a quarter."""
    load(db_path)
    with minilsm.DB(db_path, **options(level1_max_bytes=16384)) as db:
        for _, t in db.version.tables():
            t.seek_charge_base = 10**6  # every table over its allowance: one seek compaction after another is due
        before = db.stats().compactions
        started = time.monotonic()
        db.wait_for_compactions()  # inline: runs what is due now
        took = time.monotonic() - started
        assert db.stats().compactions == before + 1  # then the next seek compaction waits
        assert started < db._seek_resume_at <= time.monotonic() + SEEK_PACE * took
        assert compaction.pick_compaction(db.version, db.options, db._compact_pointers) is not None  # still due
        db._seek_resume_at = 0.0  # as if the pause were over
        db.wait_for_compactions()
        assert db.stats().compactions == before + 2
        # Size-triggered compactions run at once, paced or not: the writes' own background work does them.
        db._seek_resume_at = time.monotonic() + 3600
        rng = random.Random(5)
        for _ in range(3000):
            db.put(b"k%05d" % rng.randrange(4000), b"x" * 200)
            assert compaction.pick_compaction(db.version, db.options, db._compact_pointers, seek=False) is None
        assert db.stats().compactions > before + 2
