"""The manifest as a log of a snapshot and edits (minilsm/manifest.py, docs/FORMAT.md "Manifest").

What must hold: reading the file back gives the last state written, whatever mix of edits and new files
wrote it; a file cut anywhere after its snapshot reads as a state that was written, never a mixture; a
change costs bytes in proportion to what it changed, not to the store; and a store reopens through all of it.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import xxhash
from faultfs import FaultFS
from hypothesis import given, settings
from hypothesis import strategies as st
from storeutil import fast_tmp_dir, small_options

import minilsm
from minilsm import manifest
from minilsm.check import check_store
from minilsm.errors import CorruptionError
from minilsm.fs import DEFAULT_FS
from minilsm.keys import MAX_SEQUENCE
from minilsm.manifest import MANIFEST_NAME, ManifestState, ManifestWriter, decode_manifest, read_manifest
from minilsm.sstable.builder import TableMeta
from minilsm.wal import LogWriter

LEVELS = 4


def meta(number: int) -> TableMeta:
    key = b"k%06d" % number
    return TableMeta(number, 1000 + number, key, key + b"~", number, number + 1, 10, number % 3)


def canonical(state: ManifestState) -> tuple[object, ...]:
    """A state's content: order within a level is the Version's business, not the manifest's."""
    return (
        state.next_file_number,
        state.last_sequence,
        state.log_number,
        [sorted(level, key=lambda m: m.number) for level in state.levels],
        state.compact_pointers,
    )


@st.composite
def histories(draw: st.DrawFn) -> list[ManifestState]:
    """States as a store records them: tables added at any level, removed, moved down a level."""
    levels: list[list[TableMeta]] = [[] for _ in range(LEVELS)]
    pointers: list[bytes | None] = [None] * LEVELS
    next_number, seq, out = 1, 0, []
    for _ in range(draw(st.integers(1, 25))):
        live = [(lv, m) for lv, level in enumerate(levels) for m in level]
        for lv, m in draw(st.lists(st.sampled_from(live), unique=True, max_size=4)) if live else []:
            levels[lv].remove(m)
            if lv + 1 < LEVELS and draw(st.booleans()):
                levels[lv + 1].append(m)  # a move down: the same table at its next level
        for _ in range(draw(st.integers(0, 4))):
            levels[draw(st.integers(0, LEVELS - 1))].append(meta(next_number))
            next_number += 1
        if draw(st.booleans()):
            pointers[draw(st.integers(0, LEVELS - 1))] = draw(st.one_of(st.none(), st.binary(max_size=8)))
        seq += draw(st.integers(0, 100))
        out.append(
            ManifestState(
                next_number, seq, draw(st.integers(0, next_number)), [list(lv) for lv in levels], list(pointers)
            )
        )
    return out


@pytest.fixture
def tmp() -> Iterator[str]:
    with fast_tmp_dir() as d:
        yield d


@settings(max_examples=60)
@given(history=histories(), rewrite_after=st.sampled_from([0, 300, 1 << 20]))
def test_reading_gives_the_last_state_written_and_every_cut_gives_a_state_written(
    history: list[ManifestState], rewrite_after: int
) -> None:
    with fast_tmp_dir() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(manifest, "REWRITE_AFTER", rewrite_after)
        writer = ManifestWriter(DEFAULT_FS, d)
        path = os.path.join(d, MANIFEST_NAME)
        for state in history:
            writer.write(state)
            read = read_manifest(DEFAULT_FS, d)
            assert canonical(read.state) == canonical(state) and read.dropped_bytes == 0
        writer.close()
        data = Path(path).read_bytes()
    # The file holds a snapshot of some state and edits to the states after it: a cut anywhere gives one of
    # them (the snapshot's at the least), or, inside the snapshot, a CorruptionError.
    written = [canonical(s) for s in history]
    snapshot_end = None
    for n in range(len(data) + 1):
        try:
            read = decode_manifest(data[:n], path)
        except CorruptionError as e:
            assert snapshot_end is None and e.path == path, f"a cut at {n} after the snapshot is not a torn edit"
            continue
        snapshot_end = snapshot_end or n
        assert canonical(read.state) in written
    assert snapshot_end is not None


def test_an_edit_costs_what_it_changes_not_what_the_store_holds(db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: every flush and compaction rewrote the whole manifest, O(live tables): with 64 KiB keys a 400 MiB
    load wrote 10.7 GiB of manifests.  Here the store holds 200+ tables and each flush appends a record of one."""
    written = [0]
    add_record = LogWriter.add_record

    def counted(log: LogWriter, payload: bytes, sync: bool = False) -> int:
        n = add_record(log, payload, sync)
        if log.name == MANIFEST_NAME:
            written[0] += n
        return n

    monkeypatch.setattr(LogWriter, "add_record", counted)
    with minilsm.DB(db_path, **small_options(target_file_size=512)) as db:
        for i in range(3000):
            db.put(b"key%06d" % (i * 7919 % 3000), b"v" * 40)
        db.compact_range()
        tables = sum(len(level) for level in db.version.levels)
        snapshot = len(manifest._encode(manifest._snapshot(read_manifest(DEFAULT_FS, db_path).state)))
        assert tables > 200 and snapshot > 200 * 150
        written[0] = 0
        for i in range(20):
            db.put(b"late%02d" % i, b"x")
            db.flush()
        # 20 edits of one table each (about 250 bytes), the compactions they set off, perhaps a new file.
        assert written[0] < 20 * 600 + 2 * snapshot < 20 * snapshot


def _store_with_edits(path: str) -> dict[bytes, bytes]:
    """A closed store whose manifest holds a snapshot and several edits (flushes and compactions)."""
    data = {}
    with minilsm.DB(path, **small_options(memtable_size=1024)) as db:
        for i in range(120):
            k, v = b"key%03d" % (i * 37 % 90), b"value%d" % i * 3
            db.put(k, v)
            data[k] = v
    assert len(manifest.read_manifest(DEFAULT_FS, path).state.levels) and _edits(path) >= 5
    return data


def _edits(path: str) -> int:
    return read_manifest(DEFAULT_FS, path).edits


def test_every_cut_or_flip_of_a_closed_stores_manifest_is_reported_or_harmless(
    tmp: str, request: pytest.FixtureRequest
) -> None:
    """A cut (or a flipped byte) in the last edit looks like a crash mid-append, and is dropped.  The store had
    acted on that edit (deleted the log or the tables it made obsolete), so the state before it names a
    missing file, and the open must say the manifest is damaged; only an edit that made nothing obsolete (a
    table moved down a level) may go, and then the store holds the same data.  Anything else is damage named
    against the manifest, but a cut exactly between two records, which is not torn: the open then names the
    missing file.  Every byte of the last two records; with --slow, every byte of the file."""
    pristine = os.path.join(tmp, "pristine")
    expect = _store_with_edits(pristine)
    data = Path(pristine, MANIFEST_NAME).read_bytes()
    ends = sorted(_record_ends(data))
    tail = ends[-3] if len(ends) >= 3 else 0
    slow = request.config.getoption("--slow")
    work = os.path.join(tmp, "work")
    counts = {"reported": 0, "harmless": 0}
    for how in ("cut", "flipped"):
        for pos in range(len(data)):
            if not (slow or pos >= tail or pos % 11 == 0 or pos in ends):
                continue
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(pristine, work)
            damaged = data[:pos] if how == "cut" else data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :]
            Path(work, MANIFEST_NAME).write_bytes(damaged)
            try:
                with minilsm.DB(work, **small_options()) as db:
                    assert pos >= ends[-2] and dict(db.iterator()) == expect, f"{how} at {pos}"
                    counts["harmless"] += 1
                continue
            except CorruptionError as e:
                named = os.path.basename(e.path or "")
                if how == "cut" and pos in ends:
                    # Cut at a record's edge, it reads as an older manifest, which may name a table deleted since:
                    # the message says the manifest may have lost edits, and how to rebuild.
                    said = "listed in the manifest is missing (deleted, or the manifest lost edits at its end"
                    assert named == MANIFEST_NAME or (said in str(e) and "minilsm repair" in str(e)), e
                else:
                    assert named == MANIFEST_NAME, f"{how} at {pos}: {e}"
            counts["reported"] += 1
    assert counts["reported"] > len(data) // 11


def _record_ends(data: bytes) -> set[int]:
    ends, pos = set(), 0
    while pos < len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        pos += 16 + length
        ends.add(pos)
    return ends


def test_check_blames_the_manifest_as_the_open_does_when_its_torn_last_edit_was_acted_on(tmp_path: Path) -> None:
    """Was: `minilsm check` called such a tail a harmless crash mid-append that the next open drops, reported
    the files the edit had made obsolete as missing, and the live tables it had added as crash leftovers that
    the next open deletes, while that open refuses the store, naming the manifest.  A tail torn by a real
    crash (an edit never acted on) stays a note."""
    path = str(tmp_path / "db")
    _store_with_edits(path)
    manifest_path = os.path.join(path, MANIFEST_NAME)
    data = Path(manifest_path).read_bytes()
    Path(manifest_path).write_bytes(data[:-5])
    with pytest.raises(CorruptionError) as e:
        minilsm.DB(path, **small_options())
    assert os.path.basename(e.value.path or "") == MANIFEST_NAME
    report = check_store(path)
    assert [f.file for f in report.findings if f.damage] == [MANIFEST_NAME], report
    assert not any("next open" in f.message for f in report.findings), report

    torn = str(tmp_path / "torn")
    fs = FaultFS()
    db = minilsm.DB(torn, **small_options(fs=fs, memtable_size=1 << 20))
    db.put(b"k", b"v")
    fs.arm("write", 1, on=MANIFEST_NAME)
    with pytest.raises(minilsm.StoreIOError):
        db.flush()
    db.close()
    report = check_store(torn)
    assert report.ok and any(f.file == MANIFEST_NAME and "torn" in f.message for f in report.findings), report


def test_check_blames_a_torn_last_edit_whose_log_the_store_deleted_as_the_open_does(tmp_path: Path) -> None:
    """A flush's edit torn after it was acted on: the state before it names every table still there, but the log
    the flush made obsolete is gone.  The open refuses the store naming the manifest; check must say the same,
    not that a crash tore a tail that the next open drops."""
    path = str(tmp_path / "db")
    with minilsm.DB(path, **small_options(memtable_size=1 << 20)) as db:
        db.put(b"k", b"v")
        db.flush()  # the last edit: a table added, the log moved on, the old log deleted
    manifest_path = os.path.join(path, MANIFEST_NAME)
    Path(manifest_path).write_bytes(Path(manifest_path).read_bytes()[:-5])
    with pytest.raises(CorruptionError, match="log") as e:
        minilsm.DB(path, **small_options())
    assert os.path.basename(e.value.path or "") == MANIFEST_NAME
    report = check_store(path)
    damage = [f for f in report.findings if f.damage]
    assert [f.file for f in damage] == [MANIFEST_NAME] and ".log missing" in damage[0].message, report


def test_an_edit_cut_short_by_a_failed_write_is_dropped_and_nothing_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A short write of an edit (half of it reached the file) leaves the file as a crash mid-append would.
    The store turns read-only and deletes nothing; the next open drops the torn edit, says so, and finds
    every acknowledged write."""
    fs = FaultFS()
    path = str(tmp_path / "db")
    data = {b"k%03d" % i: b"v%d" % i * 8 for i in range(50)}
    db = minilsm.DB(path, **small_options(fs=fs, memtable_size=1 << 20))
    for k, v in data.items():
        db.put(k, v)
    fs.arm("write", 1, on=MANIFEST_NAME)
    with pytest.raises(minilsm.StoreIOError):
        db.flush()
    db.close()
    with caplog.at_level(logging.WARNING, logger="minilsm"), minilsm.DB(path, **small_options()) as db:
        assert db.recovery.manifest_dropped_bytes > 0
        assert all(db.get(k) == v for k, v in data.items())
    assert "torn record" in caplog.text and "manifest" in caplog.text
    assert read_manifest(DEFAULT_FS, path).dropped_bytes == 0  # the open started a new file without it


def test_a_store_with_a_version_1_manifest_opens_and_is_upgraded(db_path: str) -> None:
    """Format 1, written by minilsm before the edit log: one checksummed JSON body, rewritten whole."""
    with minilsm.DB(db_path, **small_options()) as db:
        for i in range(200):
            db.put(b"k%03d" % i, b"v%d" % i)
        db.flush()
    state = read_manifest(DEFAULT_FS, db_path).state
    snapshot = manifest._snapshot(state)
    del snapshot["kind"], snapshot["format_version"]
    body = manifest._encode(snapshot)
    v1 = struct.pack("<8sIIQ", b"MLSMMANI", 1, len(body), xxhash.xxh64_intdigest(body)) + body
    Path(db_path, MANIFEST_NAME).write_bytes(v1)
    assert canonical(decode_manifest(v1, MANIFEST_NAME).state) == canonical(state)
    for cut in range(0, len(v1), 7):
        with pytest.raises(CorruptionError):
            decode_manifest(v1[:cut], MANIFEST_NAME)
    # Each format only in its own framing: a format-1 snapshot as the first record of a log is not a manifest.
    log = LogWriter(DEFAULT_FS.open_writable(os.path.join(db_path, "framed")), 0)
    log.add_record(manifest._encode({"kind": "snapshot", "format_version": 1, **snapshot}))
    log.close()
    with pytest.raises(CorruptionError, match="unknown manifest format version 1"):
        decode_manifest(Path(db_path, "framed").read_bytes(), MANIFEST_NAME)
    os.remove(os.path.join(db_path, "framed"))
    with minilsm.DB(db_path, **small_options()) as db:
        assert [db.get(b"k%03d" % i) for i in range(200)] == [b"v%d" % i for i in range(200)]
    assert not Path(db_path, MANIFEST_NAME).read_bytes().startswith(b"MLSMMANI")
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(b"k199") == b"v199"


def test_each_open_starts_a_new_file_and_a_new_max_levels_is_recorded(db_path: str) -> None:
    _store_with_edits(db_path)
    assert _edits(db_path) > 0
    with minilsm.DB(db_path, **small_options(max_levels=9)):
        assert _edits(db_path) == 0
    read = read_manifest(DEFAULT_FS, db_path)
    assert len(read.state.levels) == len(read.state.compact_pointers) == 9


def test_a_state_with_another_number_of_levels_starts_a_new_file(tmp: str) -> None:
    writer = ManifestWriter(DEFAULT_FS, tmp)
    writer.write(ManifestState(2, 0, 1, [[], []], [None, None]))
    writer.write(ManifestState(3, 5, 1, [[meta(2)], []], [None, None]))
    assert _edits(tmp) == 1
    three = ManifestState(3, 5, 1, [[meta(2)], [], []], [None, None, None])
    writer.write(three)
    read = read_manifest(DEFAULT_FS, tmp)
    assert read.edits == 0 and canonical(read.state) == canonical(three)
    writer.close()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"removed": [[1, 2]]}, "which level 1 does not hold"),
        ({"added": [[0, manifest._meta_to_json(meta(2))]]}, "which level 0 already holds"),
        ({"added": [[7, manifest._meta_to_json(meta(9))]]}, "IndexError"),
        ({"compact_pointers": [[5, None]]}, "IndexError"),
        ({"kind": "snapshot"}, "not an edit"),
        ({"log_number": -1}, "non-negative"),
        ({"last_sequence": MAX_SEQUENCE + 1}, "past the maximum"),  # was accepted: writes then failed
        ({"added": [[1, manifest._meta_to_json(meta(9)) | {"max_seq": 1 << 64}]]}, "past the maximum"),
    ],
)
def test_an_edit_that_does_not_fit_its_state_is_corruption(tmp: str, change: dict[str, object], message: str) -> None:
    path = os.path.join(tmp, MANIFEST_NAME)
    writer = ManifestWriter(DEFAULT_FS, tmp)
    writer.write(ManifestState(3, 0, 1, [[meta(2)], []], [None, None]))
    writer.close()
    edit: dict[str, object] = {"kind": "edit", "next_file_number": 10, "last_sequence": 0, "log_number": 1}
    edit |= {"removed": [], "added": [], "compact_pointers": [], **change}
    log = LogWriter(DEFAULT_FS.open_appendable(path), 0)
    log.add_record(manifest._encode(edit))
    log.close()
    with pytest.raises(CorruptionError, match=message) as e:
        read_manifest(DEFAULT_FS, tmp)
    assert e.value.path == path
