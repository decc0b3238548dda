"""The demo at a reduced size: it builds what it says, its figures agree with each other, and it renders."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from storeutil import fast_tmp_dir

import minilsm
from minilsm.check import check_store
from minilsm.demo import DemoResult, run_demo


@pytest.fixture(scope="module")
def result() -> DemoResult:
    with fast_tmp_dir() as d:
        r = run_demo(os.path.join(d, "demo"), keys=1200, reads=300)
        # The kept stores are whole: every checksum verifies.
        assert check_store(r.with_filters.path).ok and check_store(r.without_filters.path).ok
        return r


def test_both_stores_spread_over_several_tables_and_levels(result: DemoResult) -> None:
    for run in (result.with_filters, result.without_filters):
        assert sum(run.tables_per_level) > 10
        assert sum(1 for n in run.tables_per_level if n) >= 3
        assert run.tables_per_level[0] >= 2  # level 0 tables span the key space: several probes per read
    # Each key is in one table, and each table's filter has at least 10 bits per key it holds.
    assert result.with_filters.filter_bytes - result.without_filters.filter_bytes >= 1200 * 10 // 8


def test_missing_key_reads_fall_inside_ranges_and_only_filters_reject_them(result: DemoResult) -> None:
    a, b = result.with_filters.missing, result.without_filters.missing
    for phase in (a, b):
        assert phase.reads == 300 and phase.found == 0
        assert phase.filter_negatives + phase.false_positives == phase.filter_checks
        assert phase.true_positives == 0
        assert phase.block_reads == phase.false_positives  # no block cache: one read per false positive
    # Same keys, same layout: the same tables are in range; without filters each costs a block.
    assert a.filter_checks == b.filter_checks and a.probes_per_read > 2
    assert b.filter_negatives == 0 and b.block_reads == b.filter_checks and b.measured_fpr == 1.0
    assert b.expected_fpr == 1.0
    assert a.block_reads_per_read < 0.1 * b.block_reads_per_read
    assert a.measured_fpr is not None and a.measured_fpr < 0.05
    assert a.expected_fpr == pytest.approx(0.0082, abs=0.002)  # 10 bits per key, k = 7


def test_present_key_reads_find_every_key(result: DemoResult) -> None:
    for run in (result.with_filters, result.without_filters):
        assert run.present.found == run.present.reads == 300
        assert run.present.true_positives == 300
    assert result.with_filters.present.block_reads < result.without_filters.present.block_reads


def test_render_and_json(result: DemoResult) -> None:
    text = result.render()
    for phrase in (
        "bits_per_key=10",
        "bits_per_key=0",
        "reads of missing keys",
        "data-block reads per read",
        "measured false-positive rate",
        "expected false-positive rate",
        "µs per read",
        "minilsm tables",
    ):
        assert phrase in text
    d = json.loads(json.dumps(result.to_dict()))
    assert d["keys"] == 1200 and d["with_filters"]["missing"]["reads"] == 300


def test_an_existing_demo_directory_is_refused() -> None:
    with fast_tmp_dir() as d:
        run_demo(d, keys=50, reads=10)
        with pytest.raises(minilsm.ExistsError):
            run_demo(d, keys=50, reads=10)


def test_a_demo_path_in_use_is_refused_up_front_saying_what_to_do() -> None:
    with fast_tmp_dir() as d:
        os.mkdir(os.path.join(d, "without-filters"))  # the second store's place only: nothing may be loaded first
        with pytest.raises(minilsm.ExistsError, match="remove it or give another PATH") as e:
            run_demo(d, keys=50, reads=10)
        assert "error_if_exists" not in str(e.value)  # not an option the command line has
        assert not os.path.exists(os.path.join(d, "with-filters"))


def test_a_demo_path_that_is_a_store_is_refused() -> None:
    with fast_tmp_dir() as d:
        with minilsm.DB(d) as db:
            db.put(b"k", b"v")
        with pytest.raises(minilsm.ExistsError, match="holds a store"):
            run_demo(d, keys=50, reads=10)
        assert sorted(n for n in os.listdir(d) if n.endswith("filters")) == []
        with minilsm.DB(d) as db:
            assert db.get(b"k") == b"v"


def test_command_line_demo_json_and_progress() -> None:
    with fast_tmp_dir() as d:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run(
            [sys.executable, "-m", "minilsm", "demo", d, "--keys", "400", "--reads", "50", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["keys"] == 400 and out["without_filters"]["missing"]["measured_fpr"] == 1.0
    assert "loading 400 keys" in proc.stderr  # progress goes to stderr, never into the JSON
