"""The write-ahead log: round trips through real files, torn tails, and damage anywhere."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from minilsm import wal
from minilsm.batch import decode_batch, encode_batch
from minilsm.errors import ClosedError, CorruptionError
from minilsm.fs import DEFAULT_FS
from minilsm.keys import KIND_DELETE, KIND_VALUE
from minilsm.wal import HEADER_SIZE, LogWriter, log_file_name, parse_log_file_name, read_log

PATH = "/db/000009.log"


def encode(payloads: list[bytes]) -> tuple[bytes, list[int]]:
    """A log holding `payloads` (built by a real LogWriter) and the offset of each record."""
    chunks: list[bytes] = []

    class Memory:
        def append(self, data: bytes) -> None:
            chunks.append(data)

        def flush(self) -> None:
            pass

        def sync(self) -> None:
            pass

        def close(self) -> None:
            pass

    w = LogWriter(Memory(), 9)
    offsets = []
    for p in payloads:
        offsets.append(w.size)
        w.add_record(p)
    return b"".join(chunks), offsets


# A few records of varied sizes, including an empty one; small enough to damage every byte.
RECORDS = [b"first record", b"", b"x" * 40, bytes(range(7)), b"the last one"]
LOG, OFFSETS = encode(RECORDS)


def test_file_names() -> None:
    assert log_file_name(7) == "000007.log"
    assert log_file_name(12345678) == "12345678.log"
    for n in (0, 7, 999999, 1000000, 12345678):
        assert parse_log_file_name(log_file_name(n)) == n
    for name in ("7.log", "0000007.log", "000007.log.tmp", "000007.sst", "abcdef.log", "٠٠٠٠٠٧.log", "LOCK"):
        assert parse_log_file_name(name) is None


def test_record_layout_byte_by_byte() -> None:
    """Pins docs/FORMAT-wal.md: length u32 | xxh32(length bytes) u32 | xxh3_64(payload) u64 | payload."""
    data, _ = encode([b"hello"])
    length = struct.pack("<I", 5)
    assert (
        data
        == length
        + struct.pack("<I", xxhash.xxh32_intdigest(length))
        + struct.pack("<Q", xxhash.xxh3_64_intdigest(b"hello"))
        + b"hello"
    )
    # A zero-filled header never passes: zero fill is recognizable as "never written".
    assert xxhash.xxh32_intdigest(bytes(4)) != 0


def test_worked_example_of_the_format_doc() -> None:
    """The hex dump in docs/FORMAT-wal.md, so that the document stays true to the code."""
    ops = [(KIND_VALUE, b"key", b"value"), (KIND_DELETE, b"old", b"")]
    data, _ = encode([encode_batch(1, ops)])
    assert data == bytes.fromhex(
        "29 00 00 00 22 e6 a7 98 f7 4c ff 9e ef d1 9a 58"
        "01 00 00 00 00 00 00 00 02 00 00 00 01 03 00 00"
        "00 05 00 00 00 6b 65 79 76 61 6c 75 65 00 03 00"
        "00 00 00 00 00 00 6f 6c 64"
    )
    assert decode_batch(read_log(data, PATH).records[0]) == (1, ops)


def test_round_trip_through_a_real_file(tmp_path: Path) -> None:
    path = str(tmp_path / log_file_name(3))
    payloads = [os.urandom(n) for n in (0, 1, 15, 16, 17, 100, 4096, 70_000)] + [b"k%d" % i for i in range(500)]
    w = LogWriter(DEFAULT_FS.open_writable(path), 3)
    total = 0
    for i, p in enumerate(payloads):
        written = w.add_record(p, sync=(i % 100 == 0))
        assert written == HEADER_SIZE + len(p)
        total += written
    assert w.size == total
    w.sync()
    w.close()
    w.close()  # idempotent
    assert DEFAULT_FS.file_size(path) == total
    result = read_log(DEFAULT_FS.read_file(path), path)
    assert result.records == payloads
    assert result.dropped_bytes == 0 and result.corruption is None


def test_every_record_reaches_the_os_before_add_record_returns(tmp_path: Path) -> None:
    """A process crash right after add_record returns (sync=False) must not lose the record."""
    path = str(tmp_path / log_file_name(1))
    w = LogWriter(DEFAULT_FS.open_writable(path), 1)
    for i in range(5):
        w.add_record(b"record %d" % i)
        # Read through a separate file description, as the next process would.
        assert read_log(DEFAULT_FS.read_file(path), path).records == [b"record %d" % j for j in range(i + 1)]
    w.close()


def test_closed_writer_and_oversized_record(tmp_path: Path) -> None:
    w = LogWriter(DEFAULT_FS.open_writable(str(tmp_path / log_file_name(2))), 2, max_record_size=10)
    with pytest.raises(ValueError, match="exceeds the maximum"):
        w.add_record(bytes(11))
    assert w.add_record(bytes(10)) == 26
    w.close()
    with pytest.raises(ClosedError):
        w.add_record(b"late")
    with pytest.raises(ClosedError):
        w.sync()
    assert repr(w) == "LogWriter(000002.log, size=26, closed)"


def test_a_writer_given_a_name_says_it(tmp_path: Path) -> None:
    """The manifest is written through a LogWriter numbered 0: its errors and repr name it MANIFEST, not a log
    000000.log that does not exist."""
    w = LogWriter(DEFAULT_FS.open_writable(str(tmp_path / "MANIFEST")), 0, name="MANIFEST")
    w.close()
    with pytest.raises(ClosedError, match="log MANIFEST is closed"):
        w.add_record(b"late")
    assert repr(w) == "LogWriter(MANIFEST, size=0, closed)"


def test_empty_log() -> None:
    assert read_log(b"", PATH) == wal.LogReadResult([], 0, None)


def test_every_truncation_is_a_torn_tail() -> None:
    """A crash mid-append can cut the file anywhere: the complete records before the cut survive."""
    for cut in range(len(LOG) + 1):
        complete = sum(1 for i, off in enumerate(OFFSETS) if off + HEADER_SIZE + len(RECORDS[i]) <= cut)
        end_of_complete = OFFSETS[complete] if complete < len(RECORDS) else len(LOG)
        result = read_log(LOG[:cut], PATH)
        assert result.records == RECORDS[:complete]
        assert result.dropped_bytes == cut - end_of_complete
        assert result.corruption is None


@pytest.mark.parametrize("zeros", [1, 15, 16, 17, 100, 5000])
def test_zero_filled_tail_is_torn(zeros: int) -> None:
    """A file system may extend the file without writing its data: zero bytes, after any record."""
    result = read_log(LOG + bytes(zeros), PATH)
    assert result.records == RECORDS and result.dropped_bytes == zeros
    # The last record's payload never written (zeros) is torn too...
    last = OFFSETS[-1]
    torn = LOG[: last + HEADER_SIZE] + bytes(len(RECORDS[-1]))
    result = read_log(torn + bytes(zeros), PATH)
    assert result.records == RECORDS[:-1] and result.dropped_bytes == len(torn) + zeros - last
    # ...and so is a zeroed header of the last record.
    result = read_log(LOG[:last] + bytes(zeros), PATH)
    assert result.records == RECORDS[:-1] and result.dropped_bytes == zeros


def test_garbage_after_the_log_is_corruption() -> None:
    tail = b"\x01" * HEADER_SIZE
    with pytest.raises(CorruptionError, match="header check") as info:
        read_log(LOG + tail, PATH)
    assert info.value.path == PATH
    result = read_log(LOG + tail, PATH, paranoid=False)
    assert result.records == RECORDS and result.dropped_bytes == len(tail)
    # Shorter than a header, it could be a torn header: dropped.
    assert read_log(LOG + tail[:-1], PATH).dropped_bytes == HEADER_SIZE - 1


def damaged_record(i: int) -> int:
    """Index of the record holding byte `i` of LOG."""
    return max(k for k, off in enumerate(OFFSETS) if off <= i)


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_byte_flip_is_detected_and_never_returns_a_wrong_record(mask: int) -> None:
    last = len(RECORDS) - 1
    for i in range(len(LOG)):
        data = bytearray(LOG)
        data[i] ^= mask
        k = damaged_record(i)
        in_header = i - OFFSETS[k] < 8  # the length or its check: the length cannot be trusted

        # paranoid=False never raises: it returns exactly the records before the damage.
        lenient = read_log(bytes(data), PATH, paranoid=False)
        assert lenient.records == RECORDS[:k], i
        assert lenient.dropped_bytes == len(LOG) - OFFSETS[k]
        if k < last or in_header:
            assert lenient.corruption is not None and lenient.corruption.path == PATH, i
        else:
            assert lenient.corruption is None, i  # damage confined to the last record: a torn tail

        if lenient.corruption is None:
            strict = read_log(bytes(data), PATH)
            assert strict == lenient
        else:
            with pytest.raises(CorruptionError) as info:
                read_log(bytes(data), PATH)
            assert info.value.path == PATH and f"offset {OFFSETS[k]}" in str(info.value)


def test_flipped_length_in_the_middle_never_passes_for_a_torn_tail() -> None:
    """A length made huge would 'run past the end'; the header check must catch it first."""
    data = bytearray(LOG)
    data[OFFSETS[1] + 3] = 0x01  # length of the (empty) second record becomes 16 MiB
    with pytest.raises(CorruptionError, match="header check"):
        read_log(bytes(data), PATH)


def test_forged_huge_length_allocates_nothing() -> None:
    length = struct.pack("<I", 0xFFFFFFFF)
    forged = length + struct.pack("<IQ", xxhash.xxh32_intdigest(length), 0) + b"tail"
    with pytest.raises(CorruptionError, match="exceeds the maximum"):
        read_log(LOG + forged, PATH)
    result = read_log(LOG + forged, PATH, paranoid=False)
    assert result.records == RECORDS and result.corruption is not None


def test_damaged_record_followed_only_by_a_torn_record_is_a_tail() -> None:
    """Several unsynced records torn at once: the last complete one is bad, the next is cut short."""
    data = bytearray(LOG)
    data[OFFSETS[-2] + HEADER_SIZE] ^= 0xFF  # payload of the second-to-last record
    cut = bytes(data[: len(LOG) - 1])  # and the last record cut short
    result = read_log(cut, PATH)
    assert result.records == RECORDS[:-2] and result.corruption is None
    assert result.dropped_bytes == len(cut) - OFFSETS[-2]


@settings(max_examples=60)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=8), st.data())
def test_random_logs_truncated_or_damaged(payloads: list[bytes], data: st.DataObject) -> None:
    log, offsets = encode(payloads)
    assert read_log(log, PATH).records == payloads
    cut = data.draw(st.integers(0, len(log)))
    result = read_log(log[:cut], PATH)
    assert payloads[: len(result.records)] == result.records
    assert len(result.records) == sum(
        1 for off, p in zip(offsets, payloads, strict=True) if off + HEADER_SIZE + len(p) <= cut
    )
    # Arbitrary damage: a run of random bytes written over the log.
    at = data.draw(st.integers(0, len(log) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=40))
    damaged = (log[:at] + junk + log[at + len(junk) :])[: len(log)]
    try:
        result = read_log(damaged, PATH, paranoid=data.draw(st.booleans()))
    except CorruptionError as e:
        assert e.path == PATH
        return
    n = len(result.records)
    assert result.records == payloads[:n]
    assert n == len(payloads) or offsets[n] + HEADER_SIZE + len(payloads[n]) > at or damaged == log
