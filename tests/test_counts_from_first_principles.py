"""The read counters and the demo's figures, recomputed without minilsm's own counters.

Ground truth comes from outside the counting code: block reads are the preads a
file system wrapper saw, and whether a filter probe was a false positive is
decided by the table's actual key set (every version, read by a scan) and the
filter's own answer.  Then the counters, the per-table rows and the demo must
agree with it exactly, through snapshots, tombstones and keys whose versions
span blocks.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from typing import Any

import pytest
from storeutil import LoggedFile, PreadLog, fast_tmp_dir

import minilsm.demo as demo
from minilsm.db import DB
from minilsm.fs import FileSystem, RandomAccessFile


def versions_by_table(db: DB) -> dict[int, dict[bytes, list[int]]]:
    """Per live table: user key -> sequence numbers of its versions (tombstones included), from a full scan."""
    out: dict[int, dict[bytes, list[int]]] = {}
    for _, t in db.version.tables():
        keys: dict[bytes, list[int]] = {}
        for k, trailer, _ in t.iter_entries():
            keys.setdefault(k, []).append(trailer >> 8)
        out[t.number] = keys
    return out


def expected_outcomes(db: DB, held: dict[int, dict[bytes, list[int]]], key: bytes, seq: int) -> list[tuple[int, str]]:
    """(table, outcome) of each table a read of `key` at `seq` meets, by definition, in probe order.

    A positive is true when the table holds any version of the key, even one too new for `seq`;
    the read stops at the first table holding a version it can see.
    """
    out = []
    for _, t in db.version.tables_for_key(key):
        if not t.smallest <= key <= t.largest:
            out.append((t.number, "range"))
        elif not t.filter.may_contain(key):
            out.append((t.number, "negative"))
        elif key not in held[t.number]:
            out.append((t.number, "false"))
        else:
            out.append((t.number, "true"))
            if min(held[t.number][key]) <= seq:
                break
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_counters_match_the_key_sets_and_the_preads(seed: int) -> None:
    rng = random.Random(seed)
    fs = PreadLog()
    with fast_tmp_dir() as d:
        opts: dict[str, Any] = dict(
            bits_per_key=3,  # many false positives to tell apart from true ones
            block_size=256,
            memtable_size=4096,
            target_file_size=4096,
            background=False,
            block_cache_size=0,
            seek_compaction=False,
        )
        with DB(os.path.join(d, "db"), fs=fs, **opts) as db:
            snapshots = []
            for _ in range(2500):
                k = b"k%03d" % rng.randrange(40)  # few keys, many versions each: versions span blocks
                if rng.random() < 0.15:
                    db.delete(k)
                else:
                    db.put(k, b"v" * rng.randrange(1, 50))
                if rng.random() < 0.03:
                    snapshots.append(db.snapshot())
            db.flush()
            held = versions_by_table(db)
            # Some key's versions run from one block into the next (the index names it as a block's last key
            # while the next block still holds its older versions).
            assert any(
                t._load_block(i + 1).key_at(0) == k
                for _, t in db.version.tables()
                for i, k in enumerate(t._last_keys[:-1])
            )
            assert sum(lv.tables for lv in db.stats().levels) >= 5
            db.stats(reset=True)
            per_table: dict[int, Counter[str]] = {n: Counter() for n in held}
            totals: Counter[str] = Counter()
            preads = 0
            for _ in range(1500):
                k = b"k%03d" % rng.randrange(45)
                snap = rng.choice([*snapshots, None])
                seq = db.last_sequence if snap is None else snap.sequence
                outcomes = expected_outcomes(db, held, k, seq)
                before = len(fs.reads)
                (db if snap is None else snap).get(k)
                preads += len(fs.reads) - before
                for number, outcome in outcomes:
                    per_table[number][outcome] += 1
                    totals[outcome] += 1
                    totals["newer only"] += outcome == "true" and min(held[number][k]) > seq
            s = db.stats()
    assert totals["false"] and totals["negative"] and totals["true"] and totals["newer only"]
    # Every positive reads exactly one block here (no block cache), except a true positive whose table ends
    # in versions too new for the read, which the index alone rules out: so reads <= positives.
    assert s.block_reads == s.file_reads == preads <= totals["false"] + totals["true"]
    assert s.tables_skipped_by_range == totals["range"]
    assert s.filter_negatives == totals["negative"]
    assert s.false_positives == totals["false"]
    assert s.filter_true_positives == totals["true"]
    assert s.measured_fpr == totals["false"] / (totals["false"] + totals["negative"])
    expected_fp = 0.0
    for t in s.tables:
        c = per_table[t.number]
        assert (t.filter.negatives, t.filter.false_positives, t.filter.true_positives) == (
            c["negative"],
            c["false"],
            c["true"],
        )
        theory = (1 - math.exp(-t.filter_k * t.filter_keys / t.filter_bits)) ** t.filter_k
        assert t.filter_keys == len(held[t.number]) and t.expected_fpr == pytest.approx(theory, rel=1e-12)
        expected_fp += theory * (c["negative"] + c["false"])
    assert s.expected_fpr == pytest.approx(expected_fp / (totals["false"] + totals["negative"]), rel=1e-12)


def test_file_reads_and_bytes_are_the_preads_through_opens_scans_and_compactions() -> None:
    """`file_reads` and `block_bytes_read` against every pread of a table file: opens, point reads, scans that
    read ahead (one stopped early, its window holding blocks it never took) and a compaction.  `block_reads`
    counts blocks taken, which a scan takes from its windows: more than its preads, and fewer than a window's
    blocks when it stops early."""
    fs = PreadLog()
    with fast_tmp_dir() as d:
        opts: dict[str, Any] = dict(block_size=512, memtable_size=64 << 10, background=False, block_cache_size=0)
        path = os.path.join(d, "db")
        with DB(path, fs=fs, **opts) as db:
            for i in range(3000):
                db.put(b"k%05d" % i, b"v" * 100)
        fs.reads.clear()
        with DB(path, fs=fs, **opts) as db:
            sizes = {f"{path}/{n}": os.path.getsize(f"{path}/{n}") for n in os.listdir(path) if n.endswith(".sst")}
            phases = {
                "reads": lambda: [db.get(b"k%05d" % i) for i in range(0, 3000, 7)],
                "early stop": lambda: [kv for kv, _ in zip(db.iterator(), range(40), strict=False)],
                "full scan": lambda: list(db.iterator()),
                "reverse": lambda: list(db.iterator(reverse=True)),
                "compaction": db.compact_range,
            }
            for phase, run in phases.items():
                before, counted = len(fs.reads), db.stats()
                run()
                sizes.update({f"{path}/{n}": os.path.getsize(f"{path}/{n}") for n in os.listdir(path)})
                made = [(p, o, n) for p, o, n in fs.reads[before:] if p.endswith(".sst")]
                got = len(made), sum(max(0, min(n, sizes[p] - o)) for p, o, n in made)
                now = db.stats()
                assert (now.file_reads - counted.file_reads, now.block_bytes_read - counted.block_bytes_read) == got
                blocks = now.block_reads - counted.block_reads
                if phase == "early stop":  # the windows held more blocks than the scan took, each over 512 bytes
                    assert 0 < len(made) < blocks and got[1] > 2 * 512 * blocks
                if phase == "full scan":
                    assert blocks > 2 * len(made)  # windows of several blocks


def test_demo_figures_match_the_key_sets_and_the_preads(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[tuple[str, int, int]] = []
    real_open = FileSystem.open_random

    def open_random(self: FileSystem, path: str) -> RandomAccessFile:
        return LoggedFile(real_open(self, path), reads, path)

    monkeypatch.setattr(FileSystem, "open_random", open_random)
    truth: list[dict[str, Any]] = []
    real_phase = demo._read_phase

    def read_phase(db: DB, numbers: list[int], hit: bool) -> demo.ReadPhase:
        held = versions_by_table(db)
        outcomes: Counter[str] = Counter()
        expected_fp = 0.0
        filters = {t.number: t.filter for _, t in db.version.tables()}
        for n in numbers:
            for number, outcome in expected_outcomes(db, held, demo._key(n), db.last_sequence):
                outcomes[outcome] += 1
                if outcome in ("negative", "false"):
                    expected_fp += filters[number].expected_fpr()
        before = len(reads)
        phase = real_phase(db, numbers, hit)
        truth.append({"outcomes": outcomes, "preads": len(reads) - before, "expected_fp": expected_fp})
        return phase

    monkeypatch.setattr(demo, "_read_phase", read_phase)
    result = demo.run_demo(keys=1500, reads=400)
    phases = [result.with_filters.missing, result.with_filters.present]
    phases += [result.without_filters.missing, result.without_filters.present]
    for phase, t in zip(phases, truth, strict=True):
        o = t["outcomes"]
        assert phase.block_reads == t["preads"] == o["false"] + o["true"]
        assert phase.filter_negatives == o["negative"] and phase.false_positives == o["false"]
        assert phase.true_positives == o["true"] and phase.tables_skipped_by_range == o["range"]
        assert phase.filter_checks == o["negative"] + o["false"] + o["true"]
        assert phase.measured_fpr == o["false"] / (o["false"] + o["negative"])
        assert phase.expected_fpr == pytest.approx(t["expected_fp"] / (o["false"] + o["negative"]), rel=1e-12)
    a, b = result.with_filters, result.without_filters
    assert a.present.true_positives == a.present.reads == 400  # each present key found in exactly one table
    # The stores have the same tables, so what the filters avoided is what the unfiltered store read more.
    for mine, other in ((a.missing, b.missing), (a.present, b.present)):
        assert other.block_reads - mine.block_reads == mine.filter_negatives
    text = result.render()
    avoided = 1 - a.missing.block_reads / b.missing.block_reads
    assert f"the filters avoided {100 * avoided:.1f}% of them" in text
    assert f"Measured false-positive rate {100 * a.missing.measured_fpr:.2f}%" in text
