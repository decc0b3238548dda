"""Helpers shared by the store tests."""

from __future__ import annotations

import os
import tempfile
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import pytest
import xxhash

import minilsm
from minilsm.db import DB
from minilsm.fs import FileSystem, RandomAccessFile
from minilsm.sstable.format import BLOCK_DATA, BLOCK_TRAILER, BLOCK_TRAILER_SIZE


def crash(db: DB) -> None:
    """Drop a store as a killed process would: no close, no flush of the memtable.

    The log has already handed every acknowledged record to the OS (a process crash
    loses nothing the OS has), so what remains is to stop the background thread at
    its next pause and release the directory lock that the dead process held.
    """
    with db._mutex:
        db._closing = True
        db._cond.notify_all()
    if db._bg_thread is not None:
        db._bg_thread.join()
    db._file_lock.release()
    db._closed = True


def check_invariants(db: DB, sweep_first: bool = False) -> None:
    """Levels 1+ sorted and disjoint; every table file on disk is live or being written.

    `sweep_first` lets the store delete obsolete files before looking: with background
    work, a point read in flight may hold the replaced version for a moment, and its
    tables then wait for the next sweep (as in LevelDB).  Inline runs check strictly.
    """
    import os

    with db._mutex:  # the background thread changes files and versions only under the mutex
        if sweep_first:
            db._delete_obsolete_files()
        db.version.check_invariants()
        live = db.version.numbers() | db._pending_outputs
        for v in list(db._versions):
            live |= v.numbers()
        on_disk = {int(n.split(".")[0]) for n in os.listdir(db.path) if n.endswith(".sst")}
    assert on_disk <= live, f"orphan tables on disk: {sorted(on_disk - live)}"
    for n in db.version.numbers():
        assert n in on_disk, f"table {n} is in the version but not on disk"


def small_options(**kw: object) -> dict[str, object]:
    """Options that make a few hundred writes flush and compact many times."""
    opts: dict[str, object] = dict(
        memtable_size=2048,
        block_size=256,
        target_file_size=2048,
        level1_max_bytes=8192,
        level_size_multiplier=2,
        level0_compaction_trigger=2,
        level0_stop_writes_trigger=6,
        max_levels=4,
        background=False,
        block_cache_size=4096,
    )
    opts.update(kw)
    return opts


def flip_byte(path: str, pos: int) -> None:
    """Damage the file at `path`: invert every bit of its byte at `pos` (in place; open readers see it)."""
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))


def forge_block(path: str, offset: int, size: int, forge: Callable[[bytearray], None]) -> None:
    """Let `forge` change the contents of the data block at `offset` (`size` bytes with its trailer) of the table
    at `path`, then reseal the block's checksum: damage that no checksum catches, as a forged block would be."""
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        end = offset + size - BLOCK_TRAILER_SIZE
        contents = data[offset:end]
        forge(contents)
        assert len(contents) == end - offset, "a forge keeps the block's size"
        data[offset:end] = contents
        BLOCK_TRAILER.pack_into(data, end, BLOCK_DATA, xxhash.xxh3_64_intdigest(bytes(contents), BLOCK_DATA))
        f.seek(0)
        f.write(data)


def fast_tmp_dir() -> tempfile.TemporaryDirectory[str]:
    """A temporary directory in RAM (/dev/shm) when there is one: a real filesystem whose fsync costs nothing.

    For tests that must run on real files (subprocesses, the demo) yet fsync hundreds of times.
    """
    shm = "/dev/shm"
    return tempfile.TemporaryDirectory(prefix="minilsm-test-", dir=shm if os.access(shm, os.W_OK) else None)


class LoggedFile:
    """A file opened for reading that appends ``(path, offset, size)`` to `log` for every pread."""

    def __init__(self, file: RandomAccessFile, log: list[tuple[str, int, int]], path: str) -> None:
        self._file, self._log, self._path = file, log, path

    def pread(self, offset: int, size: int) -> bytes:
        self._log.append((self._path, offset, size))
        return self._file.pread(offset, size)

    def size(self) -> int:
        return self._file.size()

    def close(self) -> None:
        self._file.close()


class PreadLog(FileSystem):
    """Logs every pread of every file opened for reading, in `reads`: the ground truth of disk reads."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, int, int]] = []

    def open_random(self, path: str) -> RandomAccessFile:
        return LoggedFile(super().open_random(path), self.reads, path)


__all__ = ["LoggedFile", "PreadLog", "check_invariants", "crash", "fast_tmp_dir", "minilsm", "small_options"]


def move_alike(it: Any, model: Any, move: bytes | str, shaped: Callable[[Any], object] = lambda pair: pair) -> None:
    """Make one `move` on a `DBIterator` and on its model (a `Cursor`, or an oracle with its methods), and check
    that a step answers alike: a key seeks there, ``"start"`` and ``"stop"`` seek to the range's ends, ``"next"``
    and ``"prev"`` step (StopIteration where the model has nothing).  `shaped` turns the model's pair into what
    the iterator yields (a key or a value alone)."""
    if isinstance(move, bytes):
        it.seek(move)
        model.seek(move)
    elif move == "start":
        it.seek_to_start()
        model.seek(model.start)
    elif move == "stop":
        it.seek_to_stop()
        model.seek(model.stop)
    else:
        want = model.next() if move == "next" else model.prev()
        step = it.__next__ if move == "next" else it.prev
        if want is None:
            with pytest.raises(StopIteration):
                step()
        else:
            assert step() == shaped(want)


class Cursor:
    """The model of a `DBIterator` moved by `next`, `prev` and the seeks: plyvel's place between two keys.

    `items` are the (key, value) pairs of the iterator's range, in key order.  The place is a key `gap`
    that it stands just before (b"": before every key; None: after every key): a step forward takes the
    first pair at or after it and moves past that key, a step back takes the last pair before it and stands
    just before that key.  A reverse iterator's `next` steps back and its `prev` forward; a seek puts the
    place at its target either way.  plyvel 1.5.1's iterators over the whole store answer so (LevelDB 1.22;
    test_plyvel_parity.py checks the store against them); its bounded ones step out of their range after
    some seeks, and this model stands in for them there.
    """

    def __init__(self, items: list[tuple[bytes, bytes]], start: bytes | None, stop: bytes | None, reverse: bool):
        self.items = items
        self.keys = [k for k, _ in items]
        self.start = start or b""
        self.stop = stop
        self.reverse = reverse
        self.gap: bytes | None = stop if reverse else self.start

    def _forward(self) -> tuple[bytes, bytes] | None:
        i = len(self.keys) if self.gap is None else bisect_left(self.keys, self.gap)
        if i == len(self.keys):
            return None
        self.gap = self.keys[i] + b"\x00"
        return self.items[i]

    def _backward(self) -> tuple[bytes, bytes] | None:
        i = (len(self.keys) if self.gap is None else bisect_left(self.keys, self.gap)) - 1
        if i < 0:
            return None
        self.gap = self.keys[i]
        return self.items[i]

    def next(self) -> tuple[bytes, bytes] | None:
        """The pair `next` yields, or None where it raises StopIteration."""
        return self._backward() if self.reverse else self._forward()

    def prev(self) -> tuple[bytes, bytes] | None:
        return self._forward() if self.reverse else self._backward()

    def seek(self, target: bytes | None) -> None:
        """`seek(target)`; `seek_to_start` is ``seek(self.start)`` and `seek_to_stop` ``seek(self.stop)``."""
        self.gap = target
