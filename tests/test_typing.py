"""The public API's type hints say what it does: checked by running mypy --strict on a user's snippet."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SNIPPET = """
from typing import assert_type
import minilsm

def use(db: minilsm.DB, snap: minilsm.Snapshot, wb: minilsm.WriteBatch) -> None:
    assert_type(db.get(b"k"), bytes | None)             # not Any: a missing key is None
    assert_type(db.get(b"k", b""), bytes)
    assert_type(db.get(b"k", 0), bytes | int)
    assert_type(snap.get(b"k"), bytes | None)
    assert_type(snap.get(b"k", b"?"), bytes)
    # README: keys (and values) may also be bytearray or memoryview
    db.put(bytearray(b"k"), memoryview(b"v"))
    db.get(memoryview(b"k"))
    db.delete(bytearray(b"k"))
    db[bytearray(b"k")] = bytearray(b"v")
    db.iterator(start=bytearray(b"a"), stop=memoryview(b"b"), prefix=bytearray(b""))
    db.compact_range(bytearray(b"a"), memoryview(b"z"))
    wb.put(bytearray(b"k"), memoryview(b"v"))
    wb.delete(memoryview(b"k"))
    # iterators yield what their flags ask for
    assert_type(db.iterator(), minilsm.DBIterator[tuple[bytes, bytes]])
    for k, v in db.iterator(prefix=b"a", reverse=True):
        assert_type(k, bytes)
        assert_type(v, bytes)
    assert_type(db.iterator(include_value=False), minilsm.DBIterator[bytes])
    assert_type(snap.iterator(b"a", include_key=False), minilsm.DBIterator[bytes])
    with snap.iterator() as it:
        assert_type(next(it), tuple[bytes, bytes])
        assert_type(it.prev(), tuple[bytes, bytes])
        it.seek(bytearray(b"k"))
    assert_type(db.iterator(include_key=False).prev(), bytes)
    assert_type(db.approximate_sizes((b"a", None), (None, bytearray(b"b"))), list[int])
    users: minilsm.PrefixedDB = db.prefixed_db(b"user/")
    assert_type(users.iterator(include_value=False), minilsm.DBIterator[bytes])
    assert_type(users.get(b"7", b""), bytes)
    assert_type(users.snapshot().get(b"7"), bytes | None)
    assert_type(list(db), list[bytes])
    assert_type(list(snap), list[bytes])
    flag: bool = bool(len(list(db)))
    db.iterator(include_value=flag)                     # not known until run time: still accepted
    # plyvel's read options and batch flag, as keywords
    assert_type(db.get(b"k", fill_cache=False), bytes | None)
    assert_type(db.get(b"k", b"", verify_checksums=True), bytes)
    assert_type(snap.get(b"k", fill_cache=flag), bytes | None)
    assert_type(users.get(b"7", b"", fill_cache=False), bytes)
    assert_type(db.iterator(fill_cache=False, verify_checksums=True), minilsm.DBIterator[tuple[bytes, bytes]])
    assert_type(db.iterator(include_key=False, fill_cache=False), minilsm.DBIterator[bytes])
    db.raw_iterator(fill_cache=False)
    db.write_batch(transaction=False, sync=True)
"""

BAD = """
import minilsm

def use(db: minilsm.DB) -> None:
    v: bytes = db.get(b"k")                             # may be None
    pair: tuple[bytes, bytes] = next(db.iterator(include_key=False))   # values alone
    db.get(b"k", None, True)                            # the read options are keywords, as plyvel's
"""


def _mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    f = tmp_path / "user.py"
    f.write_text(textwrap.dedent(code))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "c"), str(f)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        # The checkout's package, whether or not it is installed (an editable install hides it from mypy).
        env={**os.environ, "MYPYPATH": str(Path(__file__).resolve().parents[1])},
    )


def test_public_api_types(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    r = _mypy(tmp_path, SNIPPET)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _mypy(tmp_path, BAD)
    assert r.returncode == 1, r.stdout + r.stderr
    errors = [line for line in r.stdout.splitlines() if "incompatible types in assignment" in line.lower()]
    assert [e.split(":")[1] for e in errors] == ["5", "6"], r.stdout  # both lines of BAD, and nothing else
    assert [line.split(":")[1] for line in r.stdout.splitlines() if "no overload variant" in line.lower()] == ["7"]
