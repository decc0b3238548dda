"""bench.small_filters, which makes docs/BLOOM.md's small-filter table: its walks and its output."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench import small_filters
from minilsm.bloom import BloomFilter, key_hash


def test_the_enhanced_walk_is_the_filters_own_and_the_plain_walks_are_progressions() -> None:
    """The benchmark's third column must measure the walk minilsm's filter uses, or the table compares nothing."""
    keys = [b"k%d" % i for i in range(5)]
    f = BloomFilter(num_bits=64, k=7)
    for key in keys:
        f.add(key)
    walk = small_filters.WALKS["enhanced (minilsm)"]
    bits = {p for key in keys for p in walk(key_hash(key), 64, 7)}
    rng = random.Random(3)
    for _ in range(500):
        h = key_hash(rng.randbytes(9))
        assert f.may_contain_hash(h) == all(p in bits for p in walk(h, 64, 7))
    h1, h2 = 5, 64 * 3 + 10
    assert small_filters.WALKS["plain, any h2"]((h1, h2), 64, 4) == [5, 15, 25, 35]
    assert small_filters.WALKS["plain, h2 forced odd"]((h1, h2), 64, 3) == [5, 16, 27]


def test_a_short_run_prints_the_table_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "small.json"
    assert small_filters.main(["--sets", "2", "--probes", "50", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "plain, h2 forced odd" in text and "enhanced (minilsm)" in text and "k:" in text
    rows = json.loads(out.read_text())["results"]
    assert [r["keys"] for r in rows] == list(small_filters.SIZES) and rows[0]["bits"] == 64
    assert all(0 <= r[w] <= 1 for r in rows for w in small_filters.WALKS)
