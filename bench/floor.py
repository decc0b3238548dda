"""The interpreter's floor: what the least work any pure-Python store must do per operation costs here.

Issue 8 sets its aims as fractions of LevelDB's rates.  Whether an aim can be
met by *any* pure-Python store, however clever, depends on what CPython itself
charges for the steps no such store can skip.  This benchmark times skeletons
that do only those steps, with none of minilsm's code and every shortcut a real
store cannot take, and prints them beside LevelDB (through plyvel, if it is
installed) doing the real operation on the same keys in the same run:

* put: check two `bytes`, frame a log record, checksum it, `os.write` it, set
  a dict entry.  No ordering, no flush, no compaction (a real store must also
  write each entry into a table at least once: the "table entry" row prices
  that step, and the load row adds it ``--write-amp`` times, 1 by default: a
  flush and no compaction; minilsm measured 1.96 at 200k keys and 5.66 at
  1M in fillrandom, bench/RESULTS.md).
* missing read: check the key, miss a dict, hash the key once, and test one
  filter bit in each of `--tables` tables (an absent key needs about two tests
  per table on average; one is charged).  The tested bit is clear in every
  filter, so each read tests all `--tables` and ends with nothing found.
* present read: check the key, miss a dict, hash it, test k=7 filter bits of
  one table, bisect an in-memory index, `pread` one 4 KiB block, checksum it,
  and take the value out through a one-byte hash bucket.  One table only.
* scan, decoded already: a generator yielding (key, value) tuples from a list
  that is already decoded and merged: the step alone, below what any store pays.
* scan: the same generator over one table whose 4 KiB blocks hold the pairs back
  to back (two lengths, the key, the value): one `pread` and one checksum per
  block, one header unpack and two slices per pair.  No index, no merge of
  several sources, no sequence numbers: the least a store that keeps its data
  in a file must do to hand a scanned pair out.

Each skeleton is written out inline, the same few lines again where two
operations share a step, because a helper call is itself a cost that a floor
must not add.

``floor / LevelDB`` is then the largest fraction of LevelDB's rate a pure-Python
store could reach on this machine; where it is below an aim, no pure-Python
design meets that aim here.  Run: ``python -m bench.floor [--num N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import struct
import tempfile
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

import xxhash

from bench.common import add_json_option, format_table, ns_per_call, print_header, write_json

_HEADER = struct.Struct("<II")
_CHECKSUM = struct.Struct("<Q")
_M64 = (1 << 64) - 1
_BLOCK = 4096
_K = 7
LOAD = "load (put + table entries)"
SCAN = "scan (per key)"
SCAN_DECODED = "scan step, decoded already (per key)"


def _keys(num: int, seed: int) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """Keys in random order, values, and absent keys that sort between present ones (as bench/workloads.py)."""
    rnd = random.Random(seed)
    order = list(range(num))
    rnd.shuffle(order)
    keys = [b"%016d" % (2 * i) for i in order]
    values = [rnd.randbytes(100) for _ in range(num)]
    missing = [b"%016d" % (2 * i + 1) for i in order]
    return keys, values, missing


def floor_put(fd: int) -> Callable[[bytes, bytes], None]:
    mem: dict[bytes, bytes] = {}
    pack = _HEADER.pack
    checksum = _CHECKSUM.pack
    digest = xxhash.xxh3_64_intdigest
    write = os.write

    def put(key: bytes, value: bytes) -> None:
        if type(key) is not bytes or type(value) is not bytes:
            raise TypeError("bytes only")
        record = pack(len(key), len(value)) + key + value
        write(fd, checksum(digest(record)) + record)
        mem[key] = value

    return put


def floor_table_entry() -> Callable[[bytes, bytes], None]:
    """One entry appended to a table block, and its key's k bits set in a filter."""
    buf = bytearray()
    bits = bytearray(1 << 20)
    m = len(bits) * 8
    pack = _HEADER.pack
    digest = xxhash.xxh3_128_intdigest

    def add(key: bytes, value: bytes) -> None:
        buf.extend(pack(len(key), len(value)) + key + value)
        h = digest(key)
        h1, h2 = h & _M64, h >> 64
        for i in range(_K):
            pos = (h1 + i * h2) % m
            bits[pos >> 3] |= 1 << (pos & 7)
        if len(buf) > _BLOCK:
            buf.clear()

    return add


def floor_missing_read(tables: int) -> Callable[[bytes], object]:
    mem: dict[bytes, bytes] = {}
    # All bits clear: the one bit tested says "no" in every table, as a real filter's probes end up saying for an
    # absent key.  (Random bytes set half the bits, so half the reads stopped at the first table as a hit.)
    filters = [(bytearray(1 << 18), (1 << 18) * 8) for _ in range(tables)]
    digest = xxhash.xxh3_128_intdigest

    def get(key: bytes) -> object:
        if type(key) is not bytes:
            raise TypeError("bytes only")
        if key in mem:
            return mem[key]
        h1 = digest(key) & _M64
        for bits, m in filters:
            pos = h1 % m
            if bits[pos >> 3] & (1 << (pos & 7)):
                return b""  # a real store would read a block here; the floor counts it a hit
        return None

    return get


def floor_present_read(fd: int, file_size: int, index: list[bytes]) -> Callable[[bytes], object]:
    mem: dict[bytes, bytes] = {}
    bits = bytearray(b"\xff" * (1 << 18))  # every probe passes, as for a present key
    m = len(bits) * 8
    blocks = file_size // _BLOCK
    digest = xxhash.xxh3_128_intdigest
    check = xxhash.xxh3_64_intdigest
    pread = os.pread
    unpack = _HEADER.unpack_from

    def get(key: bytes) -> object:
        if type(key) is not bytes:
            raise TypeError("bytes only")
        if key in mem:
            return mem[key]
        h = digest(key)
        h1, h2 = h & _M64, h >> 64
        for i in range(_K):
            pos = (h1 + i * h2) % m
            if not bits[pos >> 3] & (1 << (pos & 7)):
                return None
        i = bisect_left(index, key) % blocks
        block = pread(fd, _BLOCK, i * _BLOCK)
        if check(block) == 0:  # never true: the checksum is computed, as a reader must
            raise ValueError("checksum")
        o = block[h2 & 0xFF] * 16  # the bucket names the entry
        key_len, value_len = unpack(block, o)
        stored = block[o + 8 : o + 8 + (key_len & 0x0F)]  # a reader must compare the stored key
        value = block[o + 24 : o + 24 + (value_len & 0x7F)]
        return value if stored != key else stored

    return get


def floor_scan(pairs: list[tuple[bytes, bytes]]) -> Callable[[], int]:
    def entries() -> Iterator[tuple[bytes, bytes]]:
        yield from pairs

    return _counting(entries)


def write_scan_table(path: str, pairs: list[tuple[bytes, bytes]]) -> list[tuple[int, int]]:
    """Write `pairs` (sorted) to `path` in blocks of about 4 KiB, each followed by its 8-byte checksum.

    Returns each block's (offset, size without the checksum).
    """
    extents: list[tuple[int, int]] = []
    offset = 0
    buf = bytearray()
    pack = _HEADER.pack
    with open(path, "wb") as f:

        def cut() -> None:
            nonlocal offset
            f.write(bytes(buf) + _CHECKSUM.pack(xxhash.xxh3_64_intdigest(buf)))
            extents.append((offset, len(buf)))
            offset += len(buf) + _CHECKSUM.size
            buf.clear()

        for key, value in pairs:
            buf += pack(len(key), len(value)) + key + value
            if len(buf) >= _BLOCK:
                cut()
        if buf:
            cut()
    return extents


def read_scan_table(fd: int, extents: list[tuple[int, int]]) -> Iterator[tuple[bytes, bytes]]:
    """The pairs of a table `write_scan_table` wrote, block by block: one pread, one checksum, then the pairs."""
    pread = os.pread
    check = xxhash.xxh3_64_intdigest
    stored = _CHECKSUM.unpack_from
    unpack = _HEADER.unpack_from
    for offset, size in extents:
        raw = pread(fd, size + _CHECKSUM.size, offset)
        block = raw[:size]
        if check(block) != stored(raw, size)[0]:
            raise ValueError("checksum")
        o = 0
        while o < size:
            key_len, value_len = unpack(block, o)
            k = o + 8 + key_len
            end = k + value_len
            yield block[o + 8 : k], block[k:end]
            o = end


def floor_scan_blocks(fd: int, extents: list[tuple[int, int]]) -> Callable[[], int]:
    return _counting(lambda: read_scan_table(fd, extents))


def _counting(entries: Callable[[], Iterator[tuple[bytes, bytes]]]) -> Callable[[], int]:
    """A scan as a benchmark runs one: a Python loop over the pairs, counting them."""

    def scan() -> int:
        n = 0
        for _key, _value in entries():
            n += 1
        return n

    return scan


def _per_op(op: Callable[[Any], object], args: list[Any]) -> float:
    def run() -> None:
        for a in args:
            op(a)

    return ns_per_call(run, len(args)) / 1000


def _per_pair(op: Callable[[bytes, bytes], object], pairs: list[tuple[bytes, bytes]]) -> float:
    def run() -> None:
        for k, v in pairs:
            op(k, v)

    return ns_per_call(run, len(pairs), repeat=1) / 1000


def measure_floor(num: int, tables: int, write_amp: float, root: str, seed: int) -> dict[str, float]:
    keys, values, missing = _keys(num, seed)
    pairs = list(zip(keys, values, strict=True))
    out: dict[str, float] = {}
    log = os.path.join(root, "floor.log")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        out["put"] = _per_pair(floor_put(fd), pairs)
    finally:
        os.close(fd)
    out["table entry"] = _per_pair(floor_table_entry(), pairs)
    out[LOAD] = out["put"] + write_amp * out["table entry"]
    data = os.path.join(root, "floor.data")
    with open(data, "wb") as f:
        f.write(random.Random(seed).randbytes(max(num * 120, 64 * _BLOCK)))
    index = sorted(keys)[:: max(1, num // 4096)]
    fd = os.open(data, os.O_RDONLY)
    try:
        out["present read"] = _per_op(floor_present_read(fd, os.fstat(fd).st_size, index), keys)
    finally:
        os.close(fd)
    out["missing read"] = _per_op(floor_missing_read(tables), missing)
    ordered = sorted(pairs)
    out[SCAN_DECODED] = ns_per_call(floor_scan(ordered), num) / 1000
    table = os.path.join(root, "floor.table")
    extents = write_scan_table(table, ordered)
    fd = os.open(table, os.O_RDONLY)
    try:
        out[SCAN] = ns_per_call(floor_scan_blocks(fd, extents), num) / 1000
    finally:
        os.close(fd)
    return out


def measure_leveldb(num: int, root: str, seed: int) -> dict[str, float] | None:
    try:
        import plyvel  # noqa: F401
    except ImportError:
        return None
    from bench.peers import LevelDBStore

    keys, values, missing = _keys(num, seed)
    pairs = list(zip(keys, values, strict=True))
    path = os.path.join(root, "leveldb")
    store = LevelDBStore(path)  # the benchmark's LevelDB: bloom_filter_bits=10, compression=None
    try:
        out = {LOAD: _per_pair(store.put, pairs)}
    finally:
        store.close()
    # Reads as `python -m bench` times them: on the store closed, reopened and settled, not on one still
    # compacting its load in the background.
    store = LevelDBStore(path)
    db = store.db
    try:
        store.settle()
        out["present read"] = _per_op(db.get, keys)
        out["missing read"] = _per_op(db.get, missing)

        def scan() -> int:
            n = 0
            for _key, _value in db.iterator():
                n += 1
            return n

        out[SCAN] = out[SCAN_DECODED] = ns_per_call(scan, num) / 1000
        return out
    finally:
        store.close()


AIMS = {LOAD: 0.5, "present read": 0.5, "missing read": 0.5, SCAN: 1 / 3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--num", type=int, default=200_000, help="keys (default 200,000)")
    parser.add_argument("--tables", type=int, default=2, help="tables a missing read probes (default 2)")
    parser.add_argument("--write-amp", type=float, default=1.0, help="table entries written per put (default 1)")
    parser.add_argument("--dir", help="where to put the files (default: a new temporary directory)")
    parser.add_argument("--seed", type=int, default=1)
    add_json_option(parser)
    args = parser.parse_args(argv)
    params = {"num": args.num, "tables": args.tables, "write_amp": args.write_amp, "seed": args.seed}
    info = print_header("The pure-Python floor beside LevelDB", params)
    root = tempfile.mkdtemp(prefix="minilsm-floor-", dir=args.dir)
    try:
        floor = measure_floor(args.num, args.tables, args.write_amp, root, args.seed)
        leveldb = measure_leveldb(args.num, root, args.seed)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = []
    for name, us in floor.items():
        ref = leveldb.get(name) if leveldb else None
        bound = ref / us if ref else None
        aim = AIMS.get(name)
        verdict = None if bound is None or aim is None else ("reachable" if bound >= aim else "out of reach")
        rows.append(
            [
                name,
                f"{us:.2f}",
                None if ref is None else f"{ref:.2f}",
                None if bound is None else f"{bound:.2f}",
                None if aim is None else f"{aim:.2f}",
                verdict,
            ]
        )
    print(
        format_table(["operation", "floor us/op", "LevelDB us/op", "floor/LevelDB", "aim", "aim for pure Python"], rows)
    )
    if leveldb is None:
        print("\nLevelDB not measured: pip install plyvel (the bench extra) to compare.")
    write_json(args.json, {"machine": info, "params": params, "floor_us": floor, "leveldb_us": leveldb})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
