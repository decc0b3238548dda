"""bench.reads_avoided at a tiny size: its probes are what it says, and its figures are the store's counts."""

from __future__ import annotations

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


def test_a_store_of_one_key_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        reads_avoided.main(["--num", "1", "--grow-to", "0"])
    assert "at least 2" in capsys.readouterr().err
