"""bench.mass_delete must report what it claims: the space each store keeps after most of its keys are deleted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import mass_delete


@pytest.mark.parametrize(
    "on_name, off_name", [("minilsm", "minilsm-notomb"), ("minilsm-tiered", "minilsm-tiered-notomb")]
)
def test_mass_delete_reports_the_space_kept_and_tombstone_compaction_gives_it_back(
    tmp_path: Path, on_name: str, off_name: str
) -> None:
    out = tmp_path / "mass.json"
    args = ["--num", "20000", "--fraction", "0.9", "--stores", f"{on_name},{off_name}", "--json", str(out)]
    assert mass_delete.main(args) == 0
    results = json.loads(out.read_text())["results"]
    on, off = results[on_name], results[off_name]
    for r in (on, off):
        assert r["deletes"] == 18000 and r["live_bytes"] == 2000 * 116 and r["loaded_bytes"] > 10 * r["live_bytes"]
    # Without tombstone compaction the deleted values stay; with it the store comes down near its live data.
    assert on["after_bytes"] < 0.5 * off["after_bytes"], (on, off)
    assert on["space_over_live"] < 3
