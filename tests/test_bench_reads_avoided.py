"""bench.reads_avoided at a tiny size: its probes are what it says, and its figures are the store's counts."""

from __future__ import annotations

from collections import Counter

import pytest

from bench import reads_avoided


def test_missing_keys_fall_between_present_keys() -> None:
    # Present keys are the even numbers 0 .. 2 * (below - 1); an absent key above the last of them lies in no
    # table's key range, so its probe would measure the range check, not the filter.
    for below in (2, 3, 10):
        keys = reads_avoided.missing_keys(below, 200, seed=1)
        numbers = {int(k) for k in keys}
        assert all(n % 2 == 1 for n in numbers)
        assert max(numbers) < 2 * (below - 1)
        assert numbers == set(range(1, 2 * (below - 1), 2))  # every gap is drawn from


def test_missing_keys_are_distinct_while_there_are_gaps_enough() -> None:
    # A filter answers a key the same every time: a repeated probe key adds nothing but weight, and the
    # binomial interval drawn around the measured rate (every probe independent) would be too narrow.
    keys = reads_avoided.missing_keys(20_001, 20_000, seed=12)  # 20,000 gaps
    assert len(set(keys)) == len(keys)
    # Past the gaps, each gap is drawn once before any is drawn twice.
    counts = Counter(reads_avoided.missing_keys(10, 50, seed=1))
    assert len(counts) == 9 and max(counts.values()) - min(counts.values()) <= 1


def test_the_interval_is_the_wilson_score_interval() -> None:
    lo, hi = reads_avoided.wilson_interval(0, 20_000)
    assert lo == 0.0 and 1.9e-4 < hi < 1.93e-4  # not empty at 0 hits: z^2 / (n + z^2)
    lo, hi = reads_avoided.wilson_interval(18, 20_000)
    assert 0.000569 < lo < 0.000570 and 0.001422 < hi < 0.001423  # asymmetric around 0.0009
    assert reads_avoided.wilson_interval(20_000, 20_000)[1] == 1.0


def test_a_store_of_one_key_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        reads_avoided.main(["--num", "1", "--grow-to", "0"])
    assert "at least 2" in capsys.readouterr().err
