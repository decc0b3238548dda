"""The manifest: the one file that says which tables are live, and at which level.

A store's state on disk is its tables plus its logs; the manifest ties them
together with the next file number, the last sequence number and the number
of the oldest log that still holds unflushed writes.

It is replaced atomically (written to ``MANIFEST.tmp``, fsynced, renamed over
``MANIFEST``, directory fsynced) instead of being an append-only edit log with
a CURRENT pointer as in LevelDB.  A rewrite costs O(live tables) per flush or
compaction, a few kilobytes at the sizes minilsm targets, and buys a format a
learner can read in one glance and a recovery with no edit replay.  The layout
is in docs/FORMAT.md.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Final

import xxhash

from minilsm.errors import CorruptionError
from minilsm.fs import FileSystem
from minilsm.sstable.builder import TableMeta

MANIFEST_NAME: Final = "MANIFEST"
_MAGIC: Final = b"MLSMMANI"
_FORMAT_VERSION: Final = 1
_HEADER: Final = struct.Struct("<8sIIQ")  # magic, format version, body length, xxh64(body)


@dataclass
class ManifestState:
    """What the manifest records.  `levels[i]` lists level i's tables (level 0 newest first)."""

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


def encode_manifest(state: ManifestState) -> bytes:
    body = json.dumps(
        {
            "next_file_number": state.next_file_number,
            "last_sequence": state.last_sequence,
            "log_number": state.log_number,
            "levels": [[_meta_to_json(m) for m in level] for level in state.levels],
            "compact_pointers": [None if p is None else p.hex() for p in state.compact_pointers],
        },
        separators=(",", ":"),
    ).encode()
    return _HEADER.pack(_MAGIC, _FORMAT_VERSION, len(body), xxhash.xxh64_intdigest(body)) + body


def decode_manifest(data: bytes, path: str) -> ManifestState:
    """Parse a manifest; any damage raises `CorruptionError` naming `path`."""
    if len(data) < _HEADER.size:
        raise CorruptionError(f"manifest is {len(data)} bytes, shorter than its header", path)
    magic, version, length, checksum = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC:
        raise CorruptionError("not a minilsm manifest (bad magic)", path)
    if version != _FORMAT_VERSION:
        raise CorruptionError(f"unknown manifest format version {version}", path)
    body = data[_HEADER.size :]
    if length != len(body):
        raise CorruptionError(f"manifest body is {len(body)} bytes, header says {length}", path)
    if xxhash.xxh64_intdigest(body) != checksum:
        raise CorruptionError("manifest checksum mismatch", path)
    try:
        obj = json.loads(body)
        state = ManifestState(
            next_file_number=_int(obj["next_file_number"]),
            last_sequence=_int(obj["last_sequence"]),
            log_number=_int(obj["log_number"]),
            levels=[[_meta_from_json(m) for m in level] for level in obj["levels"]],
            compact_pointers=[None if p is None else bytes.fromhex(p) for p in obj["compact_pointers"]],
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:  # RecursionError: deep nesting
        # The checksum matched, so this is a manifest written by a different or broken
        # writer; still a corruption from the reader's point of view.
        raise CorruptionError(f"malformed manifest body: {e!r}", path) from e
    return state


def write_manifest(fs: FileSystem, dirname: str, state: ManifestState) -> None:
    """Atomically replace the manifest: tmp file, fsync, rename, directory fsync."""
    path = f"{dirname}/{MANIFEST_NAME}"
    tmp = path + ".tmp"
    f = fs.open_writable(tmp)
    try:
        f.append(encode_manifest(state))
        f.sync()
    finally:
        f.close()
    fs.rename(tmp, path)
    fs.sync_dir(dirname)


def read_manifest(fs: FileSystem, dirname: str) -> ManifestState:
    path = f"{dirname}/{MANIFEST_NAME}"
    return decode_manifest(fs.read_file(path), path)


def _int(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise ValueError(f"expected a non-negative integer, got {v!r}")
    return v


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
        min_seq=_int(d["min_seq"]),
        max_seq=_int(d["max_seq"]),
        num_entries=_int(d["num_entries"]),
        num_deletions=_int(d["num_deletions"]),
    )
