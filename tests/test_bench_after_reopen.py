"""bench.after_reopen must report what it claims: up to ten windows per setting, each from the same settled store."""

from __future__ import annotations

import json
from pathlib import Path

from bench import after_reopen


def test_each_setting_reports_windows_over_its_time_from_the_same_settled_store(tmp_path: Path) -> None:
    out = tmp_path / "reopen.json"
    assert after_reopen.main(["--num", "3000", "--seconds", "0.2", "--dir", str(tmp_path), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert list(report["runs"]) == ["on", "off"]
    settled = report["settled_tables_per_level"]
    for setting, rows in report["runs"].items():
        assert 1 <= len(rows) <= 10 and rows[-1]["until_s"] >= 0.2, setting  # a window holds a chunk of each kind
        assert all(r["present_per_sec"] > 0 and r["missing_per_sec"] > 0 for r in rows)
        assert [r["compactions"] for r in rows] == sorted(r["compactions"] for r in rows)  # counted from the open
    # With seek compaction off, reads never change the shape the load left.
    assert all(r["compactions"] == 0 and r["tables_per_level"] == settled for r in report["runs"]["off"])
    assert list(tmp_path.iterdir()) == [out]  # the stores are removed


def test_settings_other_than_on_and_off_are_refused(capsys: object) -> None:
    import pytest

    with pytest.raises(SystemExit):
        after_reopen.main(["--settings", "on,maybe"])
