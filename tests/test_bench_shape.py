"""bench.shape must report what it claims: minilsm's shape before and after compact_range, every part of the reads."""

from __future__ import annotations

import json
from pathlib import Path

from bench import shape


def test_the_shape_run_reports_each_stage_and_compact_range_leaves_one_level(tmp_path: Path) -> None:
    out = tmp_path / "shape.json"
    assert shape.main(["--num", "3000", "--reads", "400", "--json", str(out)]) == 0
    runs = [r for r in json.loads(out.read_text())["runs"] if r["store"] == "minilsm"]
    assert [(r["stage"], r["reads"]) for r in runs] == [
        ("as settled", "present"),
        ("as settled", "missing"),
        ("after compact_range", "present"),
        ("after compact_range", "missing"),
    ]
    assert all(len(r["parts"]) == 4 and all(p["ops_per_sec"] > 0 for p in r["parts"]) for r in runs)
    compacted = runs[2]["tables_before"]
    assert sum(1 for n in compacted if n) == 1 and compacted[0] == 0  # one sorted run below level 0
    # One sorted run in the bottom level is what seek compaction never touches: the reads leave that shape.
    assert all(p["tables"] == r["tables_before"] for r in runs[2:] for p in r["parts"])
