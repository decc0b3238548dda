"""bench.run: the workload benchmark end to end on tiny data, and how rounds are summarised.

Nothing here times anything: it checks that the report and its JSON say what the runs measured.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench import run
from bench import workloads as w
from bench.workloads import Result


def result(name: str, rate: float | None) -> Result:
    return Result(name, 100, rate, 1.0, 2.0, 10)


def test_ratios_are_paired_within_each_round() -> None:
    # minilsm is slower in round 2, but so is the peer: the paired ratio stays 0.5 in both rounds,
    # while the ratio of the two medians would not be.
    rounds: run.Rounds = [
        {"minilsm": {"results": {"scan": result("scan", 100.0)}}, "peer": {"results": {"scan": result("scan", 200.0)}}},
        {"minilsm": {"results": {"scan": result("scan", 50.0)}}, "peer": {"results": {"scan": result("scan", 100.0)}}},
        {"minilsm": {"results": {"scan": result("scan", 90.0)}}, "peer": {"results": {"scan": result("scan", 120.0)}}},
    ]
    assert run.paired_ratios(rounds, "minilsm", "peer", "scan") == [0.5, 0.5, 0.75]
    assert run.fmt_ratios(run.paired_ratios(rounds, "minilsm", "peer", "scan")) == "0.50 (0.50-0.75)"
    assert run.fmt_ratios([0.25]) == "0.25"
    assert run.fmt_ratios([]) is None
    # A round in which either store has no rate contributes no ratio.
    rounds[1]["peer"]["results"]["scan"] = result("scan", None)
    assert run.paired_ratios(rounds, "minilsm", "peer", "scan") == [0.5, 0.75]
    table = run.headline(rounds, ["scan"])
    assert "0.62 (0.50-0.75)" in table


def test_two_rounds_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    argv = ["--num", "400", "--stores", "minilsm,sqlite3", "--workloads", "fillrandom,readrandom,scan"]
    assert run.main([*argv, "--rounds", "2", "--dir", str(tmp_path / "stores"), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["params"]["rounds"] == 2
    assert len(report["rounds"]) == 2
    assert report["results"] == report["rounds"][0]
    for name in ("fillrandom", "readrandom", "scan"):
        rates = [r[s]["workloads"][name]["ops_per_sec"] for r in report["rounds"] for s in ("minilsm", "sqlite3")]
        assert all(rate > 0 for rate in rates)
        entry = report["summary"]["sqlite3"][name]
        mine = [r["minilsm"]["workloads"][name]["ops_per_sec"] for r in report["rounds"]]
        theirs = entry["ops_per_sec"]
        assert entry["minilsm_over_store"] == pytest.approx([a / b for a, b in zip(mine, theirs, strict=True)])
        assert entry["minilsm_over_store_median"] == pytest.approx(statistics.median(entry["minilsm_over_store"]))
        low, high = min(entry["minilsm_over_store"]), max(entry["minilsm_over_store"])
        assert f"{entry['minilsm_over_store_median']:.2f} ({low:.2f}-{high:.2f})" in text
    # Every store's directory is removed after its round.
    assert not any(p.is_file() for p in (tmp_path / "stores").rglob("*"))


def test_rounds_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        run.main(["--rounds", "0"])
    assert e.value.code == 2
    assert "--rounds must be positive" in capsys.readouterr().err


def test_the_tiered_variant_runs_only_when_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.peers import peers

    assert [p.name for p in peers(100) if p.on_request] == [
        "minilsm-thread",
        "minilsm-tiered",
        "minilsm-nocache",
        "minilsm-mmap",
        "minilsm-noseek",
        "minilsm-notomb",
        "minilsm-tiered-notomb",
        "minilsm-large",
        "rocksdb-small",
    ]
    out = tmp_path / "report.json"
    argv = ["--num", "400", "--stores", "minilsm,minilsm-tiered", "--workloads", "fillrandom,readmissing"]
    assert run.main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"minilsm", "minilsm-tiered"}
    assert "compaction_style='tiered'" in report["stores"]["minilsm-tiered"]["config"]
    assert report["results"]["minilsm-tiered"]["workloads"]["readmissing"]["ops_per_sec"] > 0
    assert "minilsm-tiered" in capsys.readouterr().out


def test_the_counters_table_says_readwhilewriting_counts_the_writers_compactions() -> None:
    # Its block counters also hold the compactions the writer caused during the reads, so they can exceed one
    # block per read with no false positive: the table must not pass them off as the reads' own.
    per_read = {"tables_probed": 1.66, "filter_negatives": 0.7, "false_positives": 0.0048}
    rows = {}
    for name, blocks in (("readrandom", 0.624), ("readwhilewriting", 0.654)):
        r = result(name, 1.0)
        r.extra["per_read"] = {**per_read, "block_reads": blocks, "cache_hits": 0.422}
        rows[name] = r
    text = run.counters_table({"results": rows})
    assert "writer's compactions" in text
    assert "writer's compactions" not in run.counters_table({"results": {"readrandom": rows["readrandom"]}})


def test_readmissing_reads_only_absent_keys_between_present_ones() -> None:
    """Was: key 2i+1 was drawn for i up to num-1, so about one read in `num` sorted after the last present key,
    where a table's key range, not its filter, turns it away (the issue: keys inside the tables' ranges)."""
    num = 3
    data = w.Data(w.Params(num=num, reads=2000, seeks=1))
    asked: list[bytes] = []

    class Recorder:
        def get(self, key: bytes) -> None:
            asked.append(key)

    w.read(Recorder(), data, "readmissing")  # type: ignore[arg-type]
    present = [w.present_key(i) for i in range(num)]
    assert len(asked) == 2000
    assert all(present[0] < k < present[-1] and k not in present for k in asked)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 9, 13, 100, 101, 150, 2496, 25000])
def test_latency_percentiles_are_nearest_rank(n: int) -> None:
    """Was: round(q * n) - 1, which rounds x.5 to even: the p50 of 5, 9 or 13 samples was one rank low, and the
    p99 of 150 was the 148th, not the 149th."""
    samples = [1000 * (i + 1) for i in range(n)]  # the r-th smallest is r us
    for q in (0.5, 0.99):
        rank = max(1, -(-int(q * 100) * n // 100))  # ceil(q * n) in integers
        assert w.percentile(samples, q) == rank
    assert w.percentile([], 0.5) is None
