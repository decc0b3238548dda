"""The manifest: the one file that says which tables are live, and at which level.

A store's state on disk is its tables plus its logs; the manifest ties them
together with the next file number, the last sequence number and the number
of the oldest log that still holds unflushed writes.

It is a log in the write-ahead log's framing (`minilsm.wal`), of JSON records:
the first a *snapshot* of the whole state, each later one an *edit*, the change
that one flush or compaction made (tables removed and added, by level, and the
new counters), as LevelDB's version edits.  An edit writes O(tables it
changes).  The first minilsm manifests rewrote the whole state at every
change, O(live tables) each time: with 64 KiB keys, a 400 MiB load wrote
10.7 GiB of manifests.

When the edits outgrow their snapshot (and `REWRITE_AFTER`), the next change
starts a new file holding one snapshot of the state, written to
``MANIFEST.tmp``, synced and renamed over ``MANIFEST``.  The file thus stays
within about twice its snapshot (or its snapshot and 64 KiB of edits, while the
snapshot is smaller than that), recovery replays a bounded number of edits,
and all writes together cost O(changes).  Each open starts a fresh file too.

Crash safety.  An edit is appended in one write and synced before the store
acts on it (deletes the tables or logs it made obsolete), so a crash
mid-append leaves only the newest edit torn.  The reader drops a torn last
record, as `read_log` drops a log's, and recovers the state before it, which
nothing had yet been built on.  Damage anywhere else is `CorruptionError`.
The layout is in docs/FORMAT.md.
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import xxhash

from minilsm.errors import CorruptionError, NotFoundError
from minilsm.fs import FileSystem, WritableFile
from minilsm.keys import MAX_SEQUENCE
from minilsm.sstable.builder import TableMeta
from minilsm.wal import LogWriter, log_file_name, read_log

MANIFEST_NAME: Final = "MANIFEST"
LOCK_NAME: Final = "LOCK"
"""The store's lock file, which an open store holds a `FileSystem.lock` on (so does a checkpoint's staging
directory, whose copy of the store keeps it)."""
_FOREIGN_MANIFEST: Final = re.compile(r"MANIFEST-[0-9]+")
"""LevelDB's and RocksDB's manifests' names (`foreign_store`)."""
FORMAT_VERSION: Final = 2
"""Version 2 is the log of snapshot and edits; version 1 (one checksummed JSON body, rewritten whole) is still read."""
MAX_RECORD_SIZE: Final = 0xFFFF_FFFF
"""A record's length is a u32; the write-ahead log's cap of 128 MiB would refuse the snapshot of a store of about
500 tables with 64 KiB keys (each key takes 128 KiB of hex, twice per table)."""
REWRITE_AFTER: Final = 64 * 1024
"""Edits are appended until they take this many bytes and as many as the snapshot, then a new file starts."""

_V1_MAGIC: Final = b"MLSMMANI"
_V1_HEADER: Final = struct.Struct("<8sIIQ")  # magic, format version, body length, xxh64(body)


@dataclass
class ManifestState:
    """What the manifest records.  `levels[i]` lists level i's tables (a `Version` puts them in its order)."""

    next_file_number: int = 1
    last_sequence: int = 0
    log_number: int = 0
    """Logs numbered below this hold only flushed writes and may be deleted."""
    levels: list[list[TableMeta]] = field(default_factory=list)
    compact_pointers: list[bytes | None] = field(default_factory=list)
    """Per level, the largest key of the last table compacted out of it (round-robin, as LevelDB)."""

    def newest_table_sequence(self) -> int:
        """The highest sequence number in any listed table (0 if none): every log record to replay lies above it."""
        return max((m.max_seq for level in self.levels for m in level), default=0)


@dataclass
class ManifestRead:
    """What `read_manifest` found: the state, and how it was recorded."""

    state: ManifestState
    edits: int = 0
    """Edits replayed over the snapshot."""
    dropped_bytes: int = 0
    """A torn last record (a crash mid-append) that was not applied."""


# -- writing ------------------------------------------------------------------------------------


class ManifestWriter:
    """Records each new state of a store: an edit appended to ``MANIFEST``, or a new file when one is due.

    The writer remembers the last state it recorded, to write the next as the
    difference.  If a write fails, the file may end in part of a record: the
    writer then leaves it, and its next write starts a new file.  Not
    thread-safe: the store writes its manifest under its mutex.
    """

    __slots__ = ("_dir", "_fs", "_log", "_placed", "_pointers", "_snapshot_bytes")

    def __init__(self, fs: FileSystem, dirname: str) -> None:
        self._fs = fs
        self._dir = dirname
        self._log: LogWriter | None = None
        self._snapshot_bytes = 0
        self._placed: set[tuple[int, int]] = set()
        """(level, table number) of each table the last recorded state lists."""
        self._pointers: list[bytes | None] = []

    def write(self, state: ManifestState) -> None:
        """Make `state` the durable one: when this returns, a crash recovers it (or a later state).

        Cost: an edit, O(live tables) to compare and O(tables changed) to write, plus one
        ``fsync``; or, when due, a new file, O(live tables) and two ``fsync`` calls.
        """
        log = self._log
        if (
            log is None
            or log.size >= max(self._snapshot_bytes, REWRITE_AFTER)
            # An edit names levels by number: a store reopened with another max_levels starts a new file.
            or len(state.levels) != len(self._pointers)
            or len(state.compact_pointers) != len(self._pointers)
        ):
            self._start_file(state)
            return
        placed = _placed(state)
        record = _encode(_edit(self._placed, self._pointers, placed, state))
        try:
            log.add_record(record, sync=True)
        except BaseException:
            # The file may now end in part of this record; a record appended after it would bury the damage.
            with contextlib.suppress(OSError):  # the append's own failure is the one to report
                self.close()
            raise
        self._placed = set(placed)
        self._pointers = list(state.compact_pointers)

    def _start_file(self, state: ManifestState) -> None:
        """Write `state` as the snapshot of a new file: temporary name, fsync, rename, directory fsync."""
        self.close()
        fs = self._fs
        path = f"{self._dir}/{MANIFEST_NAME}"
        tmp = path + ".tmp"
        log = self._new_log(fs.open_writable(tmp))
        try:
            self._snapshot_bytes = log.add_record(_encode(_snapshot(state)), sync=True)
        except BaseException:
            with contextlib.suppress(OSError):
                log.close()
            raise
        log.close()
        fs.rename(tmp, path)
        fs.sync_dir(self._dir)
        self._log = self._new_log(fs.open_appendable(path))
        self._placed = set(_placed(state))
        self._pointers = list(state.compact_pointers)

    @staticmethod
    def _new_log(file: WritableFile) -> LogWriter:
        return LogWriter(file, 0, name=MANIFEST_NAME, max_record_size=MAX_RECORD_SIZE)

    def close(self) -> None:
        """Close the file; the next `write` starts a new one.  Idempotent."""
        log, self._log = self._log, None
        if log is not None:
            log.close()


def foreign_store(names: Iterable[str]) -> str | None:
    """What other engine's store a directory holding `names` is, said for a message; None if it is none.

    LevelDB's and RocksDB's ``CURRENT`` file names their ``MANIFEST-NNNNNN``.  Their logs are named as minilsm's
    (``000003.log``), and RocksDB's tables too: taken for a damaged minilsm store, such a directory would be
    repaired (its logs moved into ``lost/``) or destroyed.  One whose ``MANIFEST-NNNNNN`` is lost still has its
    ``CURRENT`` and the info log ``LOG`` that both engines write (or LevelDB's ``.ldb`` tables), none of which
    minilsm writes: that is their store too, a damaged one for their own repair.  O(len(names)).
    """
    names = set(names)
    if "CURRENT" not in names:
        return None
    manifests = sorted(n for n in names if _FOREIGN_MANIFEST.fullmatch(n))
    if manifests:
        return f"a LevelDB or RocksDB store (CURRENT, {manifests[-1]})"
    if "LOG" in names or any(n.endswith(".ldb") for n in names):
        return "a LevelDB or RocksDB store (CURRENT, with no MANIFEST-NNNNNN: damaged, for their own repair)"
    return None


def refuse_foreign_store(dirname: str, names: Iterable[str]) -> None:
    """Raise `NotFoundError` if the directory `dirname`, holding `names` and no ``MANIFEST``, is another engine's
    store (`foreign_store`)."""
    other = foreign_store(names)
    if other is not None:
        raise NotFoundError(f"no minilsm store at {dirname}: it holds {other}, which minilsm cannot read")


def write_manifest(fs: FileSystem, dirname: str, state: ManifestState) -> None:
    """Replace the manifest of the store in `dirname` with one holding `state` alone."""
    writer = ManifestWriter(fs, dirname)
    try:
        writer.write(state)
    finally:
        writer.close()


def write_with_new_log(fs: FileSystem, dirname: str, state: ManifestState) -> None:
    """End a store rebuilt in `dirname` (a repair's, a checkpoint's): a new, empty log numbered `state.log_number`,
    synced and its name made durable with every other name in the directory, then a manifest of `state` alone
    that names it.  The manifest's rename is the moment the directory becomes that store."""
    log = fs.open_writable(f"{dirname}/{log_file_name(state.log_number)}")
    try:
        log.sync()
    finally:
        log.close()
    fs.sync_dir(dirname)
    write_manifest(fs, dirname, state)


def _placed(state: ManifestState) -> dict[tuple[int, int], TableMeta]:
    return {(level, m.number): m for level, metas in enumerate(state.levels) for m in metas}


def _snapshot(state: ManifestState) -> dict[str, Any]:
    return {
        "kind": "snapshot",
        "format_version": FORMAT_VERSION,
        **_counters(state),
        "levels": [[_meta_to_json(m) for m in level] for level in state.levels],
        "compact_pointers": [_key_to_json(p) for p in state.compact_pointers],
    }


def _edit(
    placed_before: set[tuple[int, int]],
    pointers_before: list[bytes | None],
    placed: dict[tuple[int, int], TableMeta],
    state: ManifestState,
) -> dict[str, Any]:
    return {
        "kind": "edit",
        **_counters(state),
        "removed": [[level, number] for level, number in sorted(placed_before - placed.keys())],
        "added": [
            [level, _meta_to_json(m)] for (level, number), m in placed.items() if (level, number) not in placed_before
        ],
        "compact_pointers": [
            [level, _key_to_json(p)]
            for level, (p, was) in enumerate(zip(state.compact_pointers, pointers_before, strict=True))
            if p != was
        ],
    }


def _counters(state: ManifestState) -> dict[str, int]:
    return {
        "next_file_number": state.next_file_number,
        "last_sequence": state.last_sequence,
        "log_number": state.log_number,
    }


def _encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# -- reading ------------------------------------------------------------------------------------


def read_manifest(fs: FileSystem, dirname: str) -> ManifestRead:
    path = f"{dirname}/{MANIFEST_NAME}"
    data, hole = fs.read_file_and_hole(path)  # a hole that ends it is not read (a sparse 50 GiB MANIFEST)
    return decode_manifest(data, path, hole)


def decode_manifest(data: bytes, path: str, zeros_after: int = 0) -> ManifestRead:
    """Parse a whole manifest file; any damage but a torn last edit raises `CorruptionError` naming `path`.

    `zeros_after`: a hole that ends the file after `data`, as `wal.read_log` takes it.
    O(len(data)): the snapshot, then each edit in turn.
    """
    records, dropped = manifest_records(data, path, zeros_after)
    return ManifestRead(replay_manifest(records, path), len(records) - 1, dropped)


def manifest_records(data: bytes, path: str, zeros_after: int = 0) -> tuple[list[Any], int]:
    """A manifest file's records as parsed JSON, and the bytes of a torn last record (not parsed).

    Checks the framing and the JSON, not what the records say (`replay_manifest` does).  A format-1
    file's body comes back as one snapshot record.  `zeros_after`: a hole that ends the file after `data`
    (`FileSystem.read_file_and_hole`).  O(len(data)).
    """
    v1 = data.startswith(_V1_MAGIC)
    if v1:
        payloads, dropped = [_v1_body(data, path, zeros_after)], 0
    else:
        result = read_log(data, path, paranoid=True, max_record_size=MAX_RECORD_SIZE, zeros_after=zeros_after)
        if not result.records:
            size = len(data) + zeros_after
            raise CorruptionError(f"not a minilsm manifest: no intact first record in {size} bytes", path)
        payloads, dropped = result.records, result.dropped_bytes
    try:
        records = [json.loads(payload) for payload in payloads]
    except (ValueError, RecursionError) as e:  # RecursionError: deep nesting
        raise CorruptionError(f"malformed manifest record: {e!r}", path) from e
    first = records[0]
    if isinstance(first, dict):
        # Each format in its own framing: format 1 behind its magic, format 2 as a log.
        if v1:
            records[0] = {**first, "kind": "snapshot", "format_version": 1}
        elif first.get("kind") == "snapshot" and first.get("format_version") != FORMAT_VERSION:
            raise CorruptionError(f"unknown manifest format version {first.get('format_version')!r}", path)
    return records, dropped


def replay_manifest(records: Sequence[Any], path: str) -> ManifestState:
    """The state `records` (from `manifest_records`) describe: the snapshot with each edit applied in turn.

    A record that does not fit (an edit removing a table its level does not hold, a missing field) raises
    `CorruptionError` naming `path`.  O(records and the tables they name).
    """
    try:
        first = records[0]
        if not isinstance(first, dict) or first.get("kind") != "snapshot":
            raise ValueError("the first record is not a snapshot")
        state = _state_from_json(first)
        tables = [{m.number: m for m in level} for level in state.levels]
        for i, record in enumerate(records[1:], start=1):
            _apply_edit(record, state, tables, i)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        # The checksums matched, so a writer made these records as they are: a different or broken
        # one, still a corruption from the reader's point of view.
        raise CorruptionError(f"malformed manifest record: {e!r}", path) from e
    state.levels = [list(level.values()) for level in tables]
    return state


def _apply_edit(obj: Any, state: ManifestState, tables: list[dict[int, TableMeta]], i: int) -> None:
    if obj["kind"] != "edit":
        raise ValueError(f"record {i} is a {obj['kind']!r}, not an edit")
    _set_counters(state, obj)
    for level, number in obj["removed"]:
        if tables[_int(level)].pop(_int(number), None) is None:
            raise ValueError(f"record {i} removes table {number}, which level {level} does not hold")
    for level, table in obj["added"]:
        meta = _meta_from_json(table)
        if meta.number in tables[_int(level)]:
            raise ValueError(f"record {i} adds table {meta.number}, which level {level} already holds")
        tables[level][meta.number] = meta
    for level, pointer in obj["compact_pointers"]:
        state.compact_pointers[_int(level)] = _key_from_json(pointer)


def _v1_body(data: bytes, path: str, zeros_after: int = 0) -> bytes:
    """The body of a format-1 manifest: a 24-byte header (magic, version, length, xxh64), then one JSON object.

    `zeros_after`: a hole that ends the file after `data`, part of the body as its length counts it."""
    if len(data) < _V1_HEADER.size:
        raise CorruptionError(f"manifest is {len(data)} bytes, shorter than its header", path)
    _, version, length, checksum = _V1_HEADER.unpack_from(data, 0)
    if version != 1:
        raise CorruptionError(f"unknown manifest format version {version}", path)
    body = data[_V1_HEADER.size :]
    if length != len(body) + zeros_after:
        raise CorruptionError(f"manifest body is {len(body) + zeros_after} bytes, header says {length}", path)
    if zeros_after:  # JSON ends in no zero byte: damage, whatever the checksum would say
        raise CorruptionError(f"manifest body ends in {zeros_after} zero bytes never written (a hole)", path)
    if xxhash.xxh64_intdigest(body) != checksum:
        raise CorruptionError("manifest checksum mismatch", path)
    return body


def _state_from_json(obj: Any) -> ManifestState:
    state = ManifestState(
        levels=[[_meta_from_json(m) for m in level] for level in obj["levels"]],
        compact_pointers=[_key_from_json(p) for p in obj["compact_pointers"]],
    )
    _set_counters(state, obj)
    return state


def _set_counters(state: ManifestState, obj: Any) -> None:
    """The counters a snapshot or an edit records (`_counters` writes them)."""
    state.next_file_number = _int(obj["next_file_number"])
    state.last_sequence = _seq(obj["last_sequence"])
    state.log_number = _int(obj["log_number"])


def _int(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise ValueError(f"expected a non-negative integer, got {v!r}")
    return v


def _seq(v: Any) -> int:
    """A sequence number: past `MAX_SEQUENCE` no version can be written (a trailer holds 56 bits of it)."""
    n = _int(v)
    if n > MAX_SEQUENCE:
        raise ValueError(f"sequence number {n} is past the maximum {MAX_SEQUENCE}")
    return n


def _key_to_json(key: bytes | None) -> str | None:
    return None if key is None else key.hex()


def _key_from_json(v: Any) -> bytes | None:
    return None if v is None else bytes.fromhex(v)


def _meta_to_json(m: TableMeta) -> dict[str, Any]:
    return {
        "number": m.number,
        "file_size": m.file_size,
        "smallest": m.smallest.hex(),
        "largest": m.largest.hex(),
        "min_seq": m.min_seq,
        "max_seq": m.max_seq,
        "num_entries": m.num_entries,
        "num_deletions": m.num_deletions,
    }


def _meta_from_json(d: Any) -> TableMeta:
    return TableMeta(
        number=_int(d["number"]),
        file_size=_int(d["file_size"]),
        smallest=bytes.fromhex(d["smallest"]),
        largest=bytes.fromhex(d["largest"]),
        min_seq=_seq(d["min_seq"]),
        max_seq=_seq(d["max_seq"]),
        num_entries=_int(d["num_entries"]),
        num_deletions=_int(d["num_deletions"]),
    )
