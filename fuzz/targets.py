"""Fuzz targets: every reader of an on-disk structure, fed arbitrary bytes.  Shared by tests/test_fuzz.py and run.py.

Each target takes the bytes of one structure and runs its reader the way the
store does (a table: open, point reads, a scan, verify).  The contract is that
the only exception to come out is `CorruptionError`: the targets let it
propagate and the harnesses treat it as a pass, and anything else (struct.error,
IndexError, UnicodeDecodeError, MemoryError, RecursionError, a hang) as a bug.

Random bytes rarely get past a checksum, so each checksummed structure also
has a ``*_resealed`` target that first recomputes every checksum over the bytes
it is given (`reseal_*`): mutations of a valid sample then reach the decoders
behind the checksums, the code a bug in the writer or a forged file would hit.
`SAMPLES` holds one valid input per target, the seeds of both harnesses.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import struct
from collections.abc import Callable

import xxhash

from minilsm.batch import decode_batch, encode_batch
from minilsm.bloom import BloomFilter, key_hash
from minilsm.counting_bloom import CountingBloomFilter
from minilsm.errors import CorruptionError
from minilsm.fs import FileSystem, RandomAccessFile, WritableFile
from minilsm.keys import KIND_DELETE, KIND_VALUE, MAX_SEQUENCE
from minilsm.manifest import MANIFEST_NAME, ManifestState, ManifestWriter, decode_manifest
from minilsm.sstable import TableBuilder, TableMeta, TableReader, table_file_name
from minilsm.sstable.block import Block, BlockBuilder
from minilsm.sstable.format import (
    _FOOTER_HEAD,
    BLOCK_TRAILER,
    BLOCK_TRAILER_SIZE,
    FOOTER,
    FOOTER_SIZE,
    decode_index,
    decode_properties,
)
from minilsm.stats import Stats
from minilsm.wal import HEADER_SIZE, read_log

DIR = "/fuzz"
TABLE_NUMBER = 7
TABLE_PATH = f"{DIR}/{table_file_name(TABLE_NUMBER)}"


# -- an in-memory file system, so that a table can be built and read without a disk ------------------


class _MemWritable:
    __slots__ = ("_buf",)

    def __init__(self, buf: bytearray) -> None:
        self._buf = buf

    def append(self, data: bytes) -> None:
        self._buf += data

    def flush(self) -> None:
        pass

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


class _MemRandom:
    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def pread(self, offset: int, size: int) -> bytes:
        return self._data[offset : offset + size]

    def size(self) -> int:
        return len(self._data)

    def close(self) -> None:
        pass


class MemFS(FileSystem):
    """Files in a dict: enough of the seam for `TableBuilder` and `TableReader`."""

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}

    def open_writable(self, path: str) -> WritableFile:
        self.files[path] = bytearray()
        return _MemWritable(self.files[path])

    def open_appendable(self, path: str) -> WritableFile:
        return _MemWritable(self.files.setdefault(path, bytearray()))

    def open_random(self, path: str) -> RandomAccessFile:
        if path not in self.files:
            raise FileNotFoundError(path)
        return _MemRandom(bytes(self.files[path]))

    def rename(self, src: str, dst: str) -> None:
        self.files[dst] = self.files.pop(src)

    def remove(self, path: str) -> None:
        del self.files[path]

    def exists(self, path: str) -> bool:
        return path in self.files

    def sync_dir(self, path: str) -> None:
        pass


# -- valid samples ---------------------------------------------------------------------------------


def sample_entries() -> list[tuple[bytes, int, bytes]]:
    """Versions in internal order: several keys, some with older versions and tombstones."""
    out = []
    seq = 1000
    for i in range(60):
        key = b"key%03d" % i
        for v in range(1 + i % 3):
            kind = KIND_DELETE if (i + v) % 7 == 0 else KIND_VALUE
            out.append((key, (seq - v) << 8 | kind, b"" if kind == KIND_DELETE else b"value-%d-%d" % (i, v) * 3))
        seq -= 5
    return out


def build_table(entries: list[tuple[bytes, int, bytes]], block_size: int = 256) -> tuple[bytes, TableMeta]:
    fs = MemFS()
    b = TableBuilder(fs, DIR, TABLE_NUMBER, block_size=block_size, bits_per_key=10)
    for e in entries:
        b.add(*e)
    meta = b.finish()
    return bytes(fs.files[TABLE_PATH]), meta


def sample_block() -> bytes:
    b = BlockBuilder()
    for key, trailer, value in sample_entries()[:20]:
        b.add(key, trailer, value, key_hash(key))
    return b.finish()


def sample_log() -> bytes:
    from minilsm.wal import LogWriter

    buf = bytearray()
    w = LogWriter(_MemWritable(buf), 1)
    seq = 1
    for i in range(8):
        ops = [(KIND_VALUE, b"k%d" % j, b"v%d" % i * j) for j in range(i % 3 + 1)] + [(KIND_DELETE, b"d%d" % i, b"")]
        w.add_record(encode_batch(seq, ops))
        seq += len(ops)
    return bytes(buf)


def sample_manifest() -> bytes:
    """A snapshot and two edits: a compaction from level 0 to 1 that moves a compact pointer, then a flush."""
    _, meta = build_table(sample_entries())

    def table(number: int) -> TableMeta:
        return dataclasses.replace(meta, number=number)

    fs = MemFS()
    writer = ManifestWriter(fs, "mem")
    pointers: list[bytes | None] = [None, None, None]
    writer.write(ManifestState(6, 1000, 4, [[table(5)], [], [table(3)]], pointers))
    writer.write(ManifestState(8, 1000, 4, [[], [table(7)], [table(3)]], [b"key010", None, None]))
    writer.write(ManifestState(9, 1200, 8, [[table(8)], [table(7)], [table(3)]], [b"key010", None, None]))
    return bytes(fs.files[f"mem/{MANIFEST_NAME}"])


# -- resealing: recompute every checksum, so that mutations reach the decoders behind them -------------


def reseal_table(data: bytes) -> bytes:
    """Recompute the footer checksum and every block trailer the footer and index lead to (best effort)."""
    buf = bytearray(data)
    if len(buf) < FOOTER_SIZE:
        return data
    foot = len(buf) - FOOTER_SIZE
    fields = list(FOOTER.unpack_from(buf, foot))
    head = _FOOTER_HEAD.pack(*fields[:7])
    struct.pack_into("<Q", buf, foot + _FOOTER_HEAD.size, xxhash.xxh3_64_intdigest(head))
    handles = [(fields[0], fields[1]), (fields[2], fields[3]), (fields[4], fields[5])]

    def reseal(offset: int, size: int) -> bytes | None:
        if size < BLOCK_TRAILER_SIZE or offset + size > foot:
            return None
        end = offset + size - BLOCK_TRAILER_SIZE
        kind = buf[end]
        contents = bytes(buf[offset:end])
        BLOCK_TRAILER.pack_into(buf, end, kind, xxhash.xxh3_64_intdigest(contents, kind))
        return contents

    index = reseal(*handles[0])
    for h in handles[1:]:
        reseal(*h)
    if index is not None:
        try:
            decoded = decode_index(index, fields[2])
        except CorruptionError:
            return bytes(buf)
        for offset, size in zip(decoded.offsets, decoded.sizes, strict=True):
            reseal(offset, size)
    return bytes(buf)


def reseal_filter(data: bytes) -> bytes:
    if len(data) < 8:
        return data
    return data[:-8] + struct.pack("<Q", xxhash.xxh64_intdigest(data[:-8]))


def reseal_log(data: bytes) -> bytes:
    """Recompute both checks of every record along the chain of lengths."""
    buf = bytearray(data)
    pos = 0
    while len(buf) - pos >= HEADER_SIZE:
        (length,) = struct.unpack_from("<I", buf, pos)
        end = pos + HEADER_SIZE + length
        if end > len(buf):
            break
        checks = (
            xxhash.xxh32_intdigest(bytes(buf[pos : pos + 4])),
            xxhash.xxh3_64_intdigest(bytes(buf[pos + 16 : end])),
        )
        struct.pack_into("<IQ", buf, pos + 4, *checks)
        pos = end
    return bytes(buf)


# -- the targets ------------------------------------------------------------------------------------

PROBE_KEYS = [b"", b"key000", b"key001", b"key013", b"key030", b"key059", b"key999", b"\xff" * 8]


def table(data: bytes) -> None:
    """Open a table from `data`, read a few keys at several sequence numbers, scan both ways, verify."""
    fs = MemFS()
    fs.files[TABLE_PATH] = bytearray(data)
    t = TableReader.open(fs, DIR, TABLE_NUMBER, Stats())
    for key in [*PROBE_KEYS, t.smallest, t.largest]:
        for seq in (MAX_SEQUENCE, 990, 0):
            t.get(key, key_hash(key), seq)
    for _ in t.iter():
        pass
    for _ in t.iter(b"key010", b"key040", reverse=True):
        pass
    t.verify()


def table_resealed(data: bytes) -> None:
    table(reseal_table(data))


def block(data: bytes) -> None:
    b = Block(data)
    for key in PROBE_KEYS:
        for seq in (MAX_SEQUENCE, 990, 0):
            b.get(key, key_hash(key), seq << 8 | 0xFF)
    b.entries()


def bloom(data: bytes) -> None:
    f = BloomFilter.from_bytes(data)
    for key in PROBE_KEYS:
        f.may_contain(key)


def bloom_resealed(data: bytes) -> None:
    bloom(reseal_filter(data))


def counting_bloom(data: bytes) -> None:
    f = CountingBloomFilter.from_bytes(data)
    for key in PROBE_KEYS:
        f.may_contain(key)


def counting_bloom_resealed(data: bytes) -> None:
    counting_bloom(reseal_filter(data))


def log(data: bytes) -> None:
    """Read a log both ways and decode every recovered record, as recovery does."""
    for paranoid in (True, False):
        for payload in read_log(data, "fuzz.log", paranoid=paranoid).records:
            decode_batch(payload, "fuzz.log")


def log_resealed(data: bytes) -> None:
    log(reseal_log(data))


def batch(data: bytes) -> None:
    decode_batch(data, "fuzz.log")


def manifest(data: bytes) -> None:
    decode_manifest(data, "MANIFEST")


def manifest_resealed(data: bytes) -> None:
    manifest(reseal_log(data))  # a manifest is a log of JSON records


def index(data: bytes) -> None:
    decode_index(data, _sample_footer()[2])  # the sample table's data blocks end where its filter starts


def properties(data: bytes) -> None:
    decode_properties(data)


@functools.cache
def _table_sample() -> bytes:
    return build_table(sample_entries())[0]


@functools.cache
def _sample_footer() -> tuple[int, ...]:
    """The sample table's footer fields: index, filter and properties handles, version, checksum, magic."""
    data = _table_sample()
    return tuple(FOOTER.unpack_from(data, len(data) - FOOTER_SIZE))


def _properties_sample() -> bytes:
    offset, size = _sample_footer()[4:6]
    return _table_sample()[offset : offset + size - BLOCK_TRAILER_SIZE]


def _index_sample() -> bytes:
    offset, size = _sample_footer()[0:2]
    return _table_sample()[offset : offset + size - BLOCK_TRAILER_SIZE]


TARGETS: dict[str, Callable[[bytes], None]] = {
    "table": table,
    "table_resealed": table_resealed,
    "block": block,
    "bloom": bloom,
    "bloom_resealed": bloom_resealed,
    "counting_bloom": counting_bloom,
    "counting_bloom_resealed": counting_bloom_resealed,
    "log": log,
    "log_resealed": log_resealed,
    "batch": batch,
    "manifest": manifest,
    "manifest_resealed": manifest_resealed,
    "index": index,
    "properties": properties,
}


def _counting_sample() -> bytes:
    f = CountingBloomFilter.for_keys(40)
    for i in range(40):
        f.add(b"key%03d" % i)
    return f.to_bytes()


def _bloom_sample() -> bytes:
    return BloomFilter.from_keys((b"key%03d" % i for i in range(40)), 40).to_bytes()


SAMPLES: dict[str, Callable[[], bytes]] = {
    "table": _table_sample,
    "table_resealed": _table_sample,
    "block": sample_block,
    "bloom": _bloom_sample,
    "bloom_resealed": _bloom_sample,
    "counting_bloom": _counting_sample,
    "counting_bloom_resealed": _counting_sample,
    "log": sample_log,
    "log_resealed": sample_log,
    "batch": lambda: encode_batch(
        5, [(KIND_VALUE, b"a", b"1"), (KIND_DELETE, b"b", b""), (KIND_VALUE, b"", b"x" * 40)]
    ),
    "manifest": sample_manifest,
    "manifest_resealed": sample_manifest,
    "index": _index_sample,
    "properties": _properties_sample,
}


def run_one(name: str, data: bytes) -> bool:
    """Run target `name` on `data`: True if it read the data, False if it raised CorruptionError."""
    try:
        TARGETS[name](data)
    except CorruptionError:
        return False
    return True


__all__ = ["SAMPLES", "TARGETS", "MemFS", "run_one"]

if __name__ == "__main__":  # smoke check: every sample reads cleanly
    for name, make in SAMPLES.items():
        assert run_one(name, make()), name
    print(f"{len(TARGETS)} targets OK in {os.path.dirname(os.path.abspath(__file__))}")
