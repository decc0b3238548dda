"""Huge and sparse files: a log, a manifest or a table extended to tens of GiB with ``truncate -s``, or a table
whose footer names a metadata block in the GiB range.  Open, check and repair must answer in well under a second
without reading or holding the file's size in memory: a hole that ends a log or manifest is read as the zero tail
it is (`FileSystem.read_file_and_hole`), and a table block too long for one read, or whose trailer is not of its
kind, is refused before it is read (`sstable.format.read_block`).  Found by the huge-files audit: before, a 64 GiB
sparse log or manifest made every one of them raise a bare `MemoryError` (a 3 GiB one took 9-17 s and 3 GiB of
memory), and so did a table whose footer's properties block ran to the end of a 64 GiB file.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator

import pytest
from storeutil import fast_tmp_dir

import minilsm
from minilsm.check import check_store
from minilsm.errors import CorruptionError
from minilsm.fs import DEFAULT_FS, HOLE_CHECK_SIZE
from minilsm.repair import repair_store
from minilsm.sstable import TableReader
from minilsm.sstable.format import FOOTER, FOOTER_SIZE, BlockHandle, encode_footer
from minilsm.stats import Stats
from minilsm.wal import HEADER_SIZE, LogWriter, read_log

HUGE = 64 << 30
"""What the files are extended to: far more than the machine's memory, so that reading it whole cannot succeed."""
LIMIT = 2.0
"""Seconds an open, check or repair of such a store may take (each takes a few ms)."""
KEYS = {b"k%04d" % i: b"v%04d" % i * 8 for i in range(600)}


def _holes_supported(dirname: str) -> bool:
    path = f"{dirname}/probe"
    with open(path, "wb") as f:
        f.write(b"x")
    os.truncate(path, 1 << 30)
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE) < 1 << 30
    except OSError:
        return False
    finally:
        os.close(fd)
        os.remove(path)


@pytest.fixture
def store() -> Iterator[str]:
    """A closed store of three tables, with writes in its log that no table holds."""
    with fast_tmp_dir() as tmp:
        if not _holes_supported(tmp):
            pytest.skip("the file system reports no holes (SEEK_HOLE)")
        path = f"{tmp}/db"
        with minilsm.DB(path, memtable_size=8 << 10, background=False, level0_compaction_trigger=8) as db:
            for k, v in KEYS.items():
                db.put(k, v)
        assert any(name.endswith(".log") and os.path.getsize(f"{path}/{name}") for name in os.listdir(path))
        yield path


def _log(path: str) -> str:
    return next(f"{path}/{n}" for n in os.listdir(path) if n.endswith(".log") and os.path.getsize(f"{path}/{n}"))


def _timed(call: object) -> object:
    start = time.monotonic()
    result = call()  # type: ignore[operator]
    assert time.monotonic() - start < LIMIT
    return result


@pytest.mark.parametrize("which", ["log", "MANIFEST"])
def test_a_sparse_huge_log_or_manifest_is_a_zero_tail(store: str, which: str) -> None:
    victim = _log(store) if which == "log" else f"{store}/MANIFEST"
    size = os.path.getsize(victim)
    os.truncate(victim, HUGE)

    report = _timed(lambda: check_store(store))
    assert report.ok, str(report)
    assert f"{HUGE - size} bytes" in str(report)  # the zero tail, noted

    db = _timed(lambda: minilsm.DB(store))
    try:
        assert dict(db.iterator()) == KEYS
        assert (db.recovery.dropped_bytes if which == "log" else db.recovery.manifest_dropped_bytes) == HUGE - size
    finally:
        db.close()
    assert dict(minilsm.DB(store).iterator()) == KEYS  # the open wrote a new log and manifest: no hole left


def test_repair_reads_a_sparse_huge_log(store: str) -> None:
    os.truncate(_log(store), HUGE)
    report = _timed(lambda: repair_store(store))
    assert report.ok, str(report)
    with minilsm.DB(store) as db:
        assert dict(db.iterator()) == KEYS


def _records(payloads: list[bytes]) -> bytes:
    with fast_tmp_dir() as tmp:
        path = f"{tmp}/000001.log"
        writer = LogWriter(DEFAULT_FS.open_writable(path), 1)
        for p in payloads:
            writer.add_record(p)
        writer.close()
        with open(path, "rb") as f:
            return f.read()


@pytest.mark.parametrize(
    "payloads",
    [
        [b"first", b"ends in zeros" + bytes(5000)],  # a record whose last bytes a sparse copy made a hole
        [b"first", bytes(3000)],
        [b"only"],
    ],
)
@pytest.mark.parametrize("damage", [None, "second record's checksum", "first record's checksum"])
def test_read_log_with_a_hole_answers_as_the_whole_file(payloads: list[bytes], damage: str | None) -> None:
    """`read_log(data[:k], zeros_after=len(data) - k)` is `read_log(data)` wherever only zeros follow `k`."""
    data = bytearray(_records(payloads) + bytes(7000))
    if damage == "second record's checksum" and len(payloads) > 1:
        data[HEADER_SIZE + len(payloads[0]) + 8] ^= 1
    elif damage == "first record's checksum":
        data[8] ^= 1
    data = bytes(data)

    def read(k: int, paranoid: bool) -> object:
        try:
            r = read_log(data[:k], "LOG", paranoid=paranoid, zeros_after=len(data) - k)
        except CorruptionError as e:
            return str(e)
        return r.records, r.dropped_bytes, str(r.corruption)

    end = len(data.rstrip(b"\0"))
    for paranoid in (True, False):
        whole = read(len(data), paranoid)
        for k in sorted({end, end + 1, end + 5, end + 16, end + 100, len(data) - 1}):
            assert read(k, paranoid) == whole, (k, paranoid)


def _forge_footer(path: str, mode: str, total: int) -> None:
    """Extend the table at `path` to `total` bytes (sparse) and seal a footer whose metadata tiles the new end."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size - FOOTER_SIZE)
        io, isz, fo, fsz, po, psz, *_ = FOOTER.unpack(f.read(FOOTER_SIZE))
        end = total - FOOTER_SIZE
        if mode == "properties":  # the properties block runs on to the new end
            handles = (BlockHandle(io, isz), BlockHandle(fo, fsz), BlockHandle(po, end - po))
        else:  # the index block does, the properties moved behind it, into the hole
            handles = (BlockHandle(io, end - io - psz), BlockHandle(fo, fsz), BlockHandle(end - psz, psz))
        f.truncate(total)
        f.seek(total - FOOTER_SIZE)
        f.write(encode_footer(*handles))


@pytest.mark.parametrize("mode", ["properties", "index"])
@pytest.mark.parametrize("total", [HUGE, 3 << 29])  # past one read's limit; and under it, 1.5 GiB of zeros
def test_a_footer_naming_a_block_of_gigabytes_is_refused_unread(store: str, mode: str, total: int) -> None:
    table = min(n for n in os.listdir(store) if n.endswith(".sst"))
    _forge_footer(f"{store}/{table}", mode, total)
    stats = Stats()
    with pytest.raises(CorruptionError, match=f"{mode} block at offset") as caught:
        _timed(lambda: TableReader.open(DEFAULT_FS, store, int(table[:-4]), stats))
    assert caught.value.path == f"{store}/{table}"
    assert stats.block_bytes_read < 1 << 20, stats.block_bytes_read  # the footer and the index, not the zeros

    with pytest.raises(CorruptionError, match=table):
        _timed(lambda: minilsm.DB(store))
    report = _timed(lambda: check_store(store))
    assert not report.ok and table in str(report)


def test_a_log_too_large_to_hold_is_a_store_error_naming_it(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log that is data to its end (no hole) but larger than memory: `StoreIOError` ENOMEM naming the file, not a
    bare `MemoryError` from the middle of the open.  (Forged here: a real one needs that much disk.)"""
    log = _log(store)

    class TooLarge:
        def __init__(self, fd: int) -> None:
            self.fd = fd

        def read(self, size: int = -1) -> bytes:
            raise MemoryError

        def __enter__(self) -> TooLarge:
            return self

        def __exit__(self, *exc: object) -> None:
            os.close(self.fd)

    real_open = open
    monkeypatch.setattr(
        "minilsm.fs.open", lambda fd, *a, **k: TooLarge(fd) if fd_is(fd, log) else real_open(fd, *a, **k), raising=False
    )
    with pytest.raises(minilsm.StoreIOError, match="file too large to read into memory") as caught:
        minilsm.DB(store)
    assert log in str(caught.value)


def fd_is(fd: object, path: str) -> bool:
    return isinstance(fd, int) and os.path.samestat(os.fstat(fd), os.stat(path))


def test_a_log_of_usual_size_is_read_whole_whatever_seek_hole_says(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system may report a hole where data lies that it has not yet written out (OpenZFS issue 15526): a
    log's last writes, unsynced when the process died, would then read as a zero tail and be lost.  Logs and
    manifests under `HOLE_CHECK_SIZE` never ask; here every ``SEEK_DATA`` says the file is all hole."""
    real_lseek = os.lseek

    def lying_lseek(fd: int, pos: int, how: int) -> int:
        if how == os.SEEK_DATA:
            raise OSError(errno.ENXIO, "no data (a lie)")
        return real_lseek(fd, pos, how)

    monkeypatch.setattr("minilsm.fs.os.lseek", lying_lseek)
    assert os.path.getsize(_log(store)) <= HOLE_CHECK_SIZE
    with minilsm.DB(store) as db:
        assert dict(db.iterator()) == KEYS
        assert db.recovery.dropped_bytes == 0
