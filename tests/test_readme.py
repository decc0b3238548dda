"""README.md's Python example, run as written (on a temporary directory), so that it stays true to the API."""

from __future__ import annotations

import re
from pathlib import Path

import minilsm

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_readme_example_runs_and_leaves_what_it_says(tmp_path: Path) -> None:
    (example,) = python_blocks()
    assert '"/tmp/store"' in example
    path = str(tmp_path / "store")
    # Every path the example names ("/tmp/store", "/tmp/store-backup") moves into tmp_path.
    exec(compile(example.replace('"/tmp/store', '"' + path), "README.md", "exec"), {})

    with minilsm.DB(path + "-backup", create_if_missing=False) as backup:  # the checkpoint, before the last writes
        assert backup.get(b"a") == b"1" and backup.get(b"k") == b"v"
    with minilsm.DB(path) as db:  # what the example's writes left behind
        assert db.get(b"apple") is None and db.get(b"a") == b"1" and db.get(b"b") is None
        assert db.get(b"k") is None  # put, then deleted by the last line
