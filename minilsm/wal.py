"""The write-ahead log: every write is appended here before it is acknowledged.

A log file ``NNNNNN.log`` is a plain sequence of records, each a 16-byte header
and an opaque payload (a write batch, see `minilsm.batch`); docs/FORMAT-wal.md
gives the layout byte by byte.  On open the store replays the log into a fresh
memtable, so the log is all that stands between an acknowledged write and its
loss until a flush has made it a table.

Framing.  LevelDB cuts its log into 32 KiB blocks and splits records into
fragments, each with a CRC over its type and data, so that a reader can skip a
damaged block and resynchronize at the next one.  minilsm writes each record
whole, with one header holding two checks:

* a *header check*, xxh32 of the four length bytes alone.  A damaged length is
  caught before it is trusted, so a bit flip in the middle of the log can never
  pass for "the last record runs past the end of the file" and silently drop
  everything after it;
* a *payload checksum*, xxh3_64 of the payload.  Once the length is known good,
  a bad payload marks exactly one record, and the reader knows where the next
  one starts.

Without blocks there is no resynchronization, and none is wanted: recovery
stops at the first damaged record (RocksDB's "point in time" recovery), because
replaying later writes over a hole would produce a state that never existed.
In exchange a record costs one slice and two hashes to read and one
``write(2)`` to append, with no padding and no fragment bookkeeping.

Torn tail or damage?  A crash during an append leaves at most the last record
incomplete: too short for its header, shorter than its length claims, failing
its checksum, or (when the file system extended the file but never wrote the
data) zero bytes.  `read_log` drops such a tail and counts it.  Anything else,
that is a damaged record with an intact record somewhere after it, or a damaged
header followed by anything but zero bytes, is corruption.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Final

import xxhash

from minilsm.errors import ClosedError, CorruptionError
from minilsm.fs import FileSystem, WritableFile

HEADER_SIZE: Final = 16
"""Bytes in front of every payload: length u32, header check u32, payload checksum u64."""

MAX_RECORD_SIZE: Final = 128 * 1024 * 1024
"""Largest payload a record may hold.  A longer length is damage, never an allocation."""

_HEADER: Final = struct.Struct("<IIQ")
_LENGTH: Final = struct.Struct("<I")
_CHECKS: Final = struct.Struct("<IQ")
_header_check = xxhash.xxh32_intdigest
_payload_checksum = xxhash.xxh3_64_intdigest

_LOG_NAME: Final = re.compile(r"([0-9]{6,})\.log")


def log_file_name(number: int) -> str:
    """The name of log file `number`: at least six digits, e.g. ``000042.log``."""
    return f"{number:06d}.log"


def parse_log_file_name(name: str) -> int | None:
    """The number of a log file's name, or None if `name` is not one (the inverse of `log_file_name`)."""
    m = _LOG_NAME.fullmatch(name)
    if m is None:
        return None
    number = int(m.group(1))
    # Only the canonical spelling: "0000042.log" is not a name the store wrote.
    return number if log_file_name(number) == name else None


class LogWriter:
    """Appends records to one open log file.

    Every `add_record` hands its bytes to the operating system before it
    returns, so a process crash (even SIGKILL) loses no acknowledged record;
    only a machine crash can lose records appended with ``sync=False`` since the
    last sync.  If an append or sync raises `OSError`, the file's content is
    unknown: abandon the writer (the store turns read-only) and let recovery
    read what reached the disk.  Not thread-safe: the store appends under its
    write lock.
    """

    __slots__ = ("_file", "max_record_size", "name", "number", "size")

    def __init__(
        self, file: WritableFile, number: int, *, name: str | None = None, max_record_size: int = MAX_RECORD_SIZE
    ) -> None:
        self._file: WritableFile | None = file
        self.number = number
        """The log's file number (its name is `log_file_name(number)`; 0 for the manifest, which has no number)."""
        self.name = log_file_name(number) if name is None else name
        """The file's name, for messages."""
        self.max_record_size = max_record_size
        """Largest payload `add_record` takes; `read_log` must be given the same."""
        self.size = 0
        """Bytes appended through this writer."""

    def add_record(self, payload: bytes, sync: bool = False) -> int:
        """Append one record holding `payload`; returns the bytes written (16 + len(payload)).

        The record goes out in one `append`, so that a process crash can only cut it short.
        Cost: O(len(payload)) for the checksum plus one ``write(2)``, and one
        ``fsync(2)`` when `sync` is true.
        """
        f = self._file
        if f is None:
            raise ClosedError(f"log {self.name} is closed")
        n = len(payload)
        if n > self.max_record_size:
            raise ValueError(f"log record of {n} bytes exceeds the maximum of {self.max_record_size}")
        length = _LENGTH.pack(n)
        f.append(b"".join((length, _CHECKS.pack(_header_check(length), _payload_checksum(payload)), payload)))
        if sync:
            f.sync()
        else:
            f.flush()
        n += HEADER_SIZE
        self.size += n
        return n

    def sync(self) -> None:
        """Make every record appended so far durable (``fsync(2)``)."""
        if self._file is None:
            raise ClosedError(f"log {self.name} is closed")
        self._file.sync()

    def close(self) -> None:
        """Close the file (without syncing it).  Idempotent."""
        f, self._file = self._file, None
        if f is not None:
            f.close()

    def __repr__(self) -> str:
        state = "closed" if self._file is None else "open"
        return f"LogWriter({self.name}, size={self.size}, {state})"


@dataclass(slots=True)
class LogReadResult:
    """What `read_log` recovered from one log file."""

    records: list[bytes] = field(default_factory=list)
    """Payloads of the intact records before the first damaged byte, in order."""
    dropped_bytes: int = 0
    """Bytes after the last intact record that were not recovered (a torn tail, or
    everything from a damaged record on when `corruption` is set)."""
    corruption: CorruptionError | None = None
    """Set only with ``paranoid=False``, when damage was found before intact data;
    recovery stopped there and `records` is the prefix before it."""


def read_log(
    data: bytes, path: str, paranoid: bool = True, max_record_size: int = MAX_RECORD_SIZE, zeros_after: int = 0
) -> LogReadResult:
    """Split the whole content of a log file into record payloads, checking every one.

    A torn tail (see the module docstring) is dropped and counted in
    `dropped_bytes`.  Damage followed by intact data raises `CorruptionError`
    naming `path` when `paranoid`; otherwise the records before it are returned
    with the error in `corruption`.  A length over `max_record_size` (the
    writer's) is damage.  O(len(data)); never allocates beyond `data`'s size,
    whatever the lengths claim.

    `zeros_after` is a hole that ends the file after `data` (`FileSystem.read_file_and_hole`), read as that many
    zero bytes without making them: no record header of zeros passes its check, so they are a zero tail, unless
    a record runs from `data` into them (`_run_into_hole`).  The answer is the one the whole file would give.
    """
    if zeros_after:
        result = read_log(data, path, paranoid, max_record_size)
        into = _run_into_hole(data, len(data) - result.dropped_bytes, zeros_after, max_record_size)
        if into == 0:
            result.dropped_bytes += zeros_after
            return result
        # A record whose checksum passes with the hole's zeros as its last bytes (a file copied sparse): read again
        # with them, as many as it covers (at most `max_record_size`, a record the file holds), the rest a tail.
        result = read_log(data + bytes(into), path, paranoid, max_record_size)
        result.dropped_bytes += zeros_after - into
        return result
    n = len(data)
    records: list[bytes] = []
    append = records.append
    unpack = _HEADER.unpack_from
    pos = 0
    problem = ""
    while n - pos >= HEADER_SIZE:
        length, hcheck, checksum = unpack(data, pos)
        if hcheck != _header_check(data[pos : pos + 4]):
            problem = "header check mismatch"
            break
        if length > max_record_size:
            problem = f"length {length} exceeds the maximum {max_record_size}"
            break
        end = pos + HEADER_SIZE + length
        if end > n:
            break
        payload = data[pos + HEADER_SIZE : end]
        if _payload_checksum(payload) != checksum:
            problem = "payload checksum mismatch"
            break
        append(payload)
        pos = end
    result = LogReadResult(records, n - pos)
    if pos == n or _is_torn_tail(data, pos, max_record_size):
        return result
    err = CorruptionError(f"log record at offset {pos}: {problem}, and what follows is not a torn tail", path)
    if paranoid:
        raise err
    result.corruption = err
    return result


def _run_into_hole(data: bytes, pos: int, zeros_after: int, max_record_size: int) -> int:
    """How many of the `zeros_after` zero bytes after `data` an intact record needs: the record `read_log` stopped
    at (`pos`), or one after it along the chain of trusted lengths, whose extent runs past `data` into them and whose
    checksum passes with them.  0 if there is none: what `read_log` found in `data` alone stands, the zeros a tail.

    Records of the chain that end inside `data` are not checked again: one that passed would have been read
    (or have made what came before it damage) by `read_log` already.  The zeros are hashed a MiB at a time, never
    made: O(the record's length) time, O(1) memory.
    """
    n = len(data)
    while pos < n:
        head = data[pos : pos + HEADER_SIZE]
        if len(head) < HEADER_SIZE:
            head += bytes(HEADER_SIZE - len(head))  # a header cut by the hole: its last bytes are zeros
        length, hcheck, checksum = _HEADER.unpack(head)
        if hcheck != _header_check(head[:4]) or length > max_record_size:
            return 0
        end = pos + HEADER_SIZE + length
        if end <= n:
            pos = end
            continue
        if end > n + zeros_after:
            return 0
        digest = xxhash.xxh3_64(data[pos + HEADER_SIZE :])
        left = end - max(n, pos + HEADER_SIZE)
        zeros = bytes(min(left, 1 << 20))
        while left:
            step = min(left, len(zeros))
            digest.update(zeros[:step])
            left -= step
        return end - n if digest.intdigest() == checksum else 0
    return 0


def read_log_file(fs: FileSystem, path: str, paranoid: bool = True) -> LogReadResult:
    """`read_log` of the log file at `path`, a hole that ends it not read (`FileSystem.read_file_and_hole`).

    `OSError` as `FileSystem.read_file_and_hole` raises it (ENOMEM for a file too large to hold)."""
    data, hole = fs.read_file_and_hole(path)
    return read_log(data, path, paranoid=paranoid, zeros_after=hole)


def damaged_end(path: str, dropped_bytes: int) -> CorruptionError:
    """The error for a log whose torn-looking end (`dropped_bytes` by `read_log`) a newer log's records follow.

    A log is synced when its memtable is frozen, before the next log exists, so a crash tears only the
    newest record of all: such an end is damage, and replaying the newer log after it would reorder history.
    """
    return CorruptionError(f"the last {dropped_bytes} bytes are a damaged record, yet a newer log holds records", path)


def _is_torn_tail(data: bytes, pos: int, max_record_size: int) -> bool:
    """Whether the bad record at `pos` and everything after it can be what a crash mid-append leaves.

    True unless an intact record follows along the chain of trusted lengths.
    A header failing its check cannot say where a next record starts, so it
    counts as a tail only when nothing but zero bytes follows it (a file the
    file system extended but never wrote).  A record cut short by the end of
    the file is a tail; a complete record failing its checksum is one if what
    follows is.
    """
    n = len(data)
    unpack = _HEADER.unpack_from
    while n - pos >= HEADER_SIZE:
        length, hcheck, checksum = unpack(data, pos)
        if hcheck != _header_check(data[pos : pos + 4]) or length > max_record_size:
            return data.count(0, pos) == n - pos
        end = pos + HEADER_SIZE + length
        if end > n:
            return True
        if _payload_checksum(data[pos + HEADER_SIZE : end]) == checksum:
            return False
        pos = end
    return True
