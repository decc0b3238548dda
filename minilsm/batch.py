"""Write batches: several puts and deletes applied atomically, and their encoding as one log record.

Every write reaches the store as a batch (a single put is a batch of one op):
the batch is encoded with `encode_batch` into the payload of one log record, so
that it survives a crash whole or not at all, and operation i gets sequence
number ``seq + i``, which lets a later op on the same key shadow an earlier one.

Payload layout (all integers little-endian; docs/FORMAT-wal.md)::

    seq u64 | count u32 | count x (kind u8 | key_len u32 | value_len u32 | key | value)

Fixed-width fields rather than LevelDB's varints: a Python decoder reads one
op header with a single `struct` call, and the 6 bytes or so this costs per op
are small next to the 16-byte record header.  The payload carries no checksum
of its own; the log record around it has one.  `decode_batch` still validates
every field, so a payload damaged in a way the checksum cannot see (a bug, a
forged file) raises `CorruptionError` instead of producing a wrong write.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Final, Protocol

from minilsm.errors import ClosedError, CorruptionError
from minilsm.keys import (
    KIND_DELETE,
    KIND_VALUE,
    MAX_KEY_SIZE,
    MAX_SEQUENCE,
    MAX_VALUE_SIZE,
    BytesLike,
    check_key,
    check_value,
)
from minilsm.wal import MAX_RECORD_SIZE, damaged_end

Op = tuple[int, bytes, bytes]
"""One operation: ``(kind, key, value)``; the value of a `KIND_DELETE` op is ``b""``."""

_HEAD: Final = struct.Struct("<QI")
_OP: Final = struct.Struct("<BII")
_HEAD_ONE: Final = struct.Struct("<QIBII")
_SEQ: Final = struct.Struct("<Q")

BATCH_HEADER_SIZE: Final = _HEAD.size
"""Bytes of the payload header: seq u64, count u32 (12)."""

OP_HEADER_SIZE: Final = _OP.size
"""Bytes in front of each op's key and value: kind u8, key_len u32, value_len u32 (9)."""

SEQUENCE_ROOM_CHECKED_FROM: Final = MAX_SEQUENCE - MAX_RECORD_SIZE // OP_HEADER_SIZE
"""Up to this last sequence number, any batch's numbers stay within `MAX_SEQUENCE` (no batch holds more ops than
a log record holds op headers); from it on, a store checks each write against `sequences_left`."""


def sequences_left(last_seq: int) -> int:
    """How many more versions fit after `last_seq`: a trailer holds 56 bits of sequence number."""
    return MAX_SEQUENCE - last_seq


# Why a bound batch is closed, as its ClosedError says: a batch its block discarded must not be reported
# written, nor one whose write raised (the store was closed, say) without saying that the write raised.
_WRITTEN: Final = "was already written"
_FAILED: Final = "was spent by a write that raised (a batch is written at most once)"
_DISCARDED: Final = "was discarded: its with-block raised, and nothing of it was written"


def _spent(batch: WriteBatch) -> None:
    """A closed batch's writer, in place of its store's: never called, as every write tests `_closed` first."""
    raise batch._closed_error()


def encode_batch(seq: int, ops: Sequence[Op]) -> bytes:
    """The payload of a batch whose first op gets sequence number `seq`.  O(total size).

    `ops` must be valid, as `WriteBatch` makes them: kinds `KIND_VALUE` or
    `KIND_DELETE`, keys and values within their limits, deletes with an empty
    value.  A single op takes a fast path with one `struct` call and one join.
    """
    if len(ops) == 1:
        kind, key, value = ops[0]
        return b"".join((_HEAD_ONE.pack(seq, 1, kind, len(key), len(value)), key, value))
    parts = [_HEAD.pack(seq, len(ops))]
    append = parts.append
    pack_op = _OP.pack
    for kind, key, value in ops:
        append(pack_op(kind, len(key), len(value)))
        append(key)
        append(value)
    return b"".join(parts)


def decode_batch(payload: bytes, path: str | None = None) -> tuple[int, list[Op]]:
    """``(seq, ops)`` from an `encode_batch` payload.  O(len(payload)).

    Any malformed payload (truncated, trailing bytes, unknown kind, lengths that
    disagree with the size, sequence numbers past `MAX_SEQUENCE`) raises
    `CorruptionError` naming `path`.  The op count is checked against the bytes
    present before anything is built, so a forged count allocates nothing.
    """
    n = len(payload)
    if n < BATCH_HEADER_SIZE:
        raise CorruptionError(f"write batch of {n} bytes is shorter than its {BATCH_HEADER_SIZE}-byte header", path)
    seq, count = _HEAD.unpack_from(payload, 0)
    if count > (n - BATCH_HEADER_SIZE) // OP_HEADER_SIZE:
        raise CorruptionError(f"write batch claims {count} operations in {n} bytes", path)
    if seq + max(count, 1) - 1 > MAX_SEQUENCE:  # an empty batch's number still becomes the last sequence
        raise CorruptionError(f"write batch sequence numbers {seq}+{count} exceed the maximum {MAX_SEQUENCE}", path)
    ops: list[Op] = []
    append = ops.append
    unpack_op = _OP.unpack_from
    pos = BATCH_HEADER_SIZE
    for i in range(count):
        if pos + OP_HEADER_SIZE > n:
            raise CorruptionError(f"write batch op {i} at offset {pos} is truncated", path)
        kind, key_len, value_len = unpack_op(payload, pos)
        if kind == KIND_VALUE:
            if value_len > MAX_VALUE_SIZE:
                raise CorruptionError(f"write batch op {i}: value length {value_len} exceeds the maximum", path)
        elif kind == KIND_DELETE:
            if value_len:
                raise CorruptionError(f"write batch op {i}: a delete with a {value_len}-byte value", path)
        else:
            raise CorruptionError(f"write batch op {i}: unknown kind {kind}", path)
        if key_len > MAX_KEY_SIZE:
            raise CorruptionError(f"write batch op {i}: key length {key_len} exceeds the maximum", path)
        key_at = pos + OP_HEADER_SIZE
        value_at = key_at + key_len
        pos = value_at + value_len
        if pos > n:
            raise CorruptionError(f"write batch op {i} runs past the end of the payload", path)
        append((kind, payload[key_at:value_at], payload[value_at:pos]))
    if pos != n:
        raise CorruptionError(f"write batch has {n - pos} bytes after its last op", path)
    return seq, ops


def replayed_after(seq: int, count: int, last: int, record: int, path: str | None = None) -> int:
    """The last sequence number of a decoded batch ``(seq, count ops)`` replayed after sequence `last`.  O(1).

    Writes are logged in sequence order, each taking the numbers right after the write before it.  So
    each batch must start above `last` (the record before, or for a log's first record the tables'
    newest or the older log's end: `LogChain` checks that junction), and a record after the first of its
    log at exactly ``last + 1``.  Otherwise it raises `CorruptionError` naming `path` (`record` is the
    batch's index in the log): a record going back, forged or misplaced, would shadow newer writes, and
    one jumping ahead says records between are lost.
    """
    if seq <= last:
        raise CorruptionError(
            f"record {record} has sequence number {seq}, not above {last} (the tables' newest or the record before)",
            path,
        )
    if record and seq != last + 1:
        raise CorruptionError(f"record {record} has sequence number {seq}, not {last + 1}: records are lost", path)
    return seq + count - 1


def replay(
    payloads: Iterable[bytes],
    last: int,
    path: str | None = None,
    add: Callable[[bytes, int, int, bytes], None] | None = None,
) -> int:
    """Decode one log's record payloads in order, each checked by `replayed_after` (the first against `last`).

    With `add` (a `MemTable.add`), each operation is applied as ``add(key, seq, kind, value)``.  Returns
    the last sequence number replayed (`last` if there are no records).  Recovery and `minilsm check`
    both replay the logs through a `LogChain`, which calls this.  O(total payload size).
    """
    for r, payload in enumerate(payloads):
        seq, ops = decode_batch(payload, path)
        last = replayed_after(seq, len(ops), last, r, path)
        if add is not None:
            for kind, key, value in ops:
                add(key, seq, kind, value)
                seq += 1
    return last


class LogChain:
    """The logs recovery replays, oldest first, checked to hold one unbroken run of writes.

    A write takes the sequence numbers right after the write before it, and a log is synced when its
    memtable is frozen (which happens only to a memtable holding writes), before the next log exists.
    So once a log holds records, each older one must have ended whole, held a record, and ended at the
    number right before the newer one's first.  A torn-looking end, an empty older log, or a gap in the
    numbers each say that an older log lost records, which it cannot show alone: cut at a record
    boundary, or to nothing, a log looks whole.  Recovery and `minilsm check` both walk the logs with
    one: `lost_before` with each log read, then `replay`.  Not thread-safe.
    """

    __slots__ = ("_after", "_empty", "last", "torn")

    def __init__(self, last: int) -> None:
        self.last = last
        """The newest sequence number replayed; at first the tables' newest."""
        self.torn: tuple[str, int] | None = None
        """(log, bytes dropped) of a torn tail that no record has followed (yet): the crash's own tear."""
        self._empty: str | None = None  # a log with no record that no record has followed
        self._after: str | None = None  # the log whose last record ends at `last`; None: the tables

    def lost_before(self, records: Sequence[bytes], path: str) -> CorruptionError | None:
        """The error, naming the older log, if this log's `records` show that the logs before it lost records.

        None when they show nothing (or there are none).  O(1).
        """
        if not records:
            return None
        if self.torn is not None:
            return damaged_end(*self.torn)
        if self._empty is not None:
            return CorruptionError(
                "the log holds no record, yet a newer log holds records: its records are lost", self._empty
            )
        if self._after is not None and len(records[0]) >= BATCH_HEADER_SIZE:  # else replay reports the record
            (seq,) = _SEQ.unpack_from(records[0])
            if seq > self.last + 1:
                return CorruptionError(
                    f"it ends at sequence number {self.last}, yet the next log, {os.path.basename(path)}, starts "
                    f"at {seq}: the writes between are lost",
                    self._after,
                )
        return None

    def replay(
        self,
        records: Sequence[bytes],
        dropped_bytes: int,
        path: str,
        add: Callable[[bytes, int, int, bytes], None] | None = None,
    ) -> None:
        """Replay one log's `records` after the older logs' (`replay`); it becomes the older log of the next.

        `dropped_bytes` is its torn tail's size (`LogReadResult`).  O(total payload size).
        """
        self.last = replay(records, self.last, path, add)
        if records:
            self._after = path
            self._empty = None
            self.torn = None  # reported by `lost_before`, if the caller goes on past it
        elif self._empty is None:
            self._empty = path
        if dropped_bytes:
            self.torn = (path, dropped_bytes)

    def skip(self) -> None:
        """Go on past a log that could not be replayed (`minilsm check` reports it, then checks the rest).

        What lies before the next log is unknown now, so its start is checked only against `last`.
        """
        self.torn = self._empty = self._after = None


class BatchOwner(Protocol):
    """The store a bound batch belongs to (minilsm.db's `DB`): a batch of a closed store takes no more ops."""

    _closed: bool


class BatchView(Protocol):
    """A view of a `WriteBatch` that `WriteBatch.append` takes as the batch itself: minilsm.db's
    `PrefixedWriteBatch` (a layer above this module, which cannot name it)."""

    @property
    def batch(self) -> WriteBatch: ...


class WriteBatch:
    """Puts and deletes to apply atomically, in order: a later op on a key wins.

    Standalone, a batch is built and handed to ``db.write(batch)``, and may be
    written again or cleared and reused.  A batch bound to a store (the store
    sets `_writer`, as ``db.write_batch()`` does) also works as a context
    manager that writes on a clean exit and discards everything if the block
    raises, like plyvel's ``write_batch(transaction=True)`` (with
    ``transaction=False``, plyvel's default, the block's end writes the batch
    even when the block raised, and the exception goes on)::

        with db.write_batch() as batch:
            batch.put(b"k1", b"v1")
            batch.delete(b"k2")

    Once a bound batch is written (at the block's end, by its `write`, or by
    ``db.write(batch)``; a write that raises counts, as the log may hold it)
    or discarded it is closed: changing or writing it again raises
    `ClosedError`; reading it stays allowed.  A block whose batch was already
    written inside it writes nothing more at its end.

    Costs: `put`/`delete` amortized O(1), plus O(len(key) + len(value)) to copy
    a key or value that is not `bytes`; `len`, `approximate_size` O(1).
    """

    __slots__ = ("_claims", "_closed", "_ops", "_owner", "_size", "_spent", "_sync", "_transaction", "_writer")

    def __init__(
        self,
        *,
        _writer: Callable[[WriteBatch], None] | None = None,
        _sync: bool | None = None,
        _owner: BatchOwner | None = None,
        _transaction: bool = True,
    ) -> None:
        self._ops: list[Op] = []
        self._size = BATCH_HEADER_SIZE
        self._writer = _writer
        self._sync = _sync  # a bound batch's `sync=` from ``db.write_batch``: how it is written unless told otherwise
        self._owner = _owner  # the store a bound batch belongs to
        self._transaction = _transaction  # False: the block's end writes the batch even when the block raised
        self._closed = False
        self._spent = _WRITTEN  # why a closed batch is closed, set before `_closed`: its ClosedError says so
        self._claims = itertools.count()  # a bound batch's writes, counted atomically (see `_apply`)

    def put(self, key: BytesLike, value: BytesLike) -> None:
        """Set `key` to `value`.  TypeError for str or other non-bytes, ValueError if oversized, `ClosedError` once
        the batch is spent or its store closed.  Amortized O(1), plus O(len(key) + len(value)) to copy a
        `bytearray` or `memoryview` to bytes; the store sees it at `write`."""
        if self._closed or (self._owner is not None and self._owner._closed):
            raise self._refused()
        key = check_key(key)
        value = check_value(value)
        self._add(KIND_VALUE, key, value)

    def delete(self, key: BytesLike) -> None:
        """Remove `key` (a no-op on the data if it is absent, but still an op with a sequence number).  As `put`:
        amortized O(1), plus O(len(key)) to copy a key that is not `bytes`."""
        if self._closed or (self._owner is not None and self._owner._closed):
            raise self._refused()
        self._add(KIND_DELETE, check_key(key), b"")

    def _add(self, kind: int, key: bytes, value: bytes) -> None:
        size = self._size + OP_HEADER_SIZE + len(key) + len(value)
        if size > MAX_RECORD_SIZE:
            raise ValueError(f"write batch would grow to {size} bytes, over the log record limit {MAX_RECORD_SIZE}")
        self._ops.append((kind, key, value))
        self._size = size

    def append(self, source: WriteBatch | BatchView) -> None:
        """Add `source`'s ops after this batch's, as plyvel's `append` (LevelDB's `WriteBatch::Append`).

        `source` is only read: it may be closed, and stays as it was.  A prefixed view's batch gives its ops
        as they are, whole keys, as plyvel's does.  All or none: ValueError, with this batch unchanged, if the
        ops together would outgrow a log record; `ClosedError`, as `put`'s, once this batch is spent or its store
        closed.  O(len(source)).
        """
        if self._closed or (self._owner is not None and self._owner._closed):
            raise self._refused()
        if not isinstance(source, WriteBatch):
            # plyvel's prefixed batches are WriteBatches, which any batch appends; here one wraps a WriteBatch.
            batch = getattr(source, "batch", None)
            if not isinstance(batch, WriteBatch):
                raise TypeError(f"source must be a WriteBatch, not {type(source).__name__}")
            source = batch
        size = self._size + source._size - BATCH_HEADER_SIZE
        if size > MAX_RECORD_SIZE:
            raise ValueError(f"write batch would grow to {size} bytes, over the log record limit {MAX_RECORD_SIZE}")
        self._ops += source._ops  # `+=` takes a copy when source is self
        self._size = size

    def clear(self) -> None:
        """Drop every op, to reuse the batch.  O(len(self))."""
        if self._closed:
            raise self._closed_error()
        self._ops.clear()
        self._size = BATCH_HEADER_SIZE

    @property
    def ops(self) -> Sequence[Op]:
        """The ops in order, ready for `encode_batch` (a live view: do not modify it).  O(1): no copy."""
        return self._ops

    def __iter__(self) -> Iterator[Op]:
        """The ops ``(kind, key, value)`` in order; value is ``b""`` for a delete.  O(1) per op."""
        return iter(self._ops)

    def __len__(self) -> int:
        """Number of ops.  O(1)."""
        return len(self._ops)

    @property
    def approximate_size(self) -> int:
        """Bytes of the encoded payload, exactly: 12 + sum of (9 + key + value) over the ops.  O(1): kept as ops
        are added."""
        return self._size

    @property
    def closed(self) -> bool:
        """True once a bound batch was written or discarded.  O(1)."""
        return self._closed

    def write(self) -> None:
        """Apply the batch atomically through the store it is bound to, then close it (even if the write raises).

        Cost: `DB.write`'s, one log append for the whole batch (plus an fsync if syncing) and an O(1) memtable
        insert per op.
        """
        if self._writer is None:
            raise ValueError("this WriteBatch is not bound to a store; pass it to db.write(batch)")
        self._apply(self._writer)

    def _apply(self, apply: Callable[[WriteBatch], None]) -> None:
        """Hand the batch to `apply` (a store's write); a bound batch is spent by it, a standalone one stays open.

        How every write of a batch goes, ``db.write(batch)`` included: a spent
        batch raises `ClosedError`, since applying it again would put its old
        values back over newer writes.
        """
        if self._closed:
            raise self._closed_error()
        if self._writer is None:
            apply(self)
            return
        # The test above and the flag set below are apart: two threads writing the batch at once would both
        # pass the test.  One C call hands out the write: only the first caller gets 0.
        if next(self._claims):
            raise self._closed_error()
        try:
            apply(self)
        except BaseException:
            self._spent = _FAILED
            raise
        finally:
            # Written or failed, the batch is spent: "exactly once" is simpler
            # to reason about than a retry that might apply it twice.
            self._close()

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"write batch {self._spent}")

    def _refused(self) -> ClosedError:
        """Why an op is refused: the batch is spent, or it is open but its store is closed (plyvel's batch refuses
        ops then too).  Apart from `_closed_error`, which a write that lost the race to another thread's write of
        the batch raises while the batch is still open: that batch was written, its store is not closed."""
        return self._closed_error() if self._closed else ClosedError("write batch of a closed store")

    def __enter__(self) -> WriteBatch:
        if self._closed:
            raise self._closed_error()
        if self._writer is None:
            raise ValueError("this WriteBatch is not bound to a store; use `with db.write_batch() as batch:`")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._closed:
            return  # written inside the block (its `write`, or ``db.write``): nothing is left to write or discard
        if exc_type is None or not self._transaction:
            self.write()
        else:
            self._ops.clear()
            self._size = BATCH_HEADER_SIZE
            self._spent = _DISCARDED
            self._close()

    def _close(self) -> None:
        # A spent batch lets go of its store: one left in a variable must not keep a store it outlives open (and
        # its directory locked).  Not None: `_writer is None` means a standalone batch, whose answers differ.
        self._owner = None
        self._writer = _spent
        self._closed = True

    def __copy__(self) -> WriteBatch:
        """A batch of the same ops, in a list of its own: bound to the same store (and open, or spent, as this one
        is) or standalone, as this one.  Written, either leaves the other as it was.  O(len(self))."""
        twin = WriteBatch(_writer=self._writer, _sync=self._sync, _owner=self._owner, _transaction=self._transaction)
        twin._ops = self._ops.copy()
        twin._size, twin._spent, twin._closed = self._size, self._spent, self._closed
        return twin

    def __deepcopy__(self, memo: dict[int, object]) -> WriteBatch:
        return self.__copy__()  # its ops are tuples of an int and bytes: nothing in them to copy deeper

    def __reduce__(self) -> tuple[Callable[[list[Op]], WriteBatch], tuple[list[Op]]]:
        """A standalone batch pickles as its ops.  A store's cannot: the store does not go with it."""
        if self._writer is not None:
            raise TypeError("a store's write batch cannot be pickled; a standalone WriteBatch can (append() this one)")
        return _unpickled, (self._ops,)

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"WriteBatch(ops={len(self._ops)}, approximate_size={self._size}{state})"


def _unpickled(ops: list[Op]) -> WriteBatch:
    """A pickled batch's ops, checked again as `put` and `delete` check them: a pickle is bytes from anywhere."""
    batch = WriteBatch()
    for kind, key, value in ops:
        if kind == KIND_VALUE:
            batch.put(key, value)
        elif kind == KIND_DELETE:
            batch.delete(key)
        else:
            raise ValueError(f"a pickled write batch holds an op of unknown kind {kind!r}")
    return batch
