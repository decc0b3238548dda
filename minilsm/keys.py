"""Internal keys: a user key plus the sequence number and kind of one write.

Every write gets a sequence number from one counter.  Tables and memtables
store *versions* ``(user_key, seq, kind)``; a read at snapshot ``s`` sees, for
each user key, the newest version with ``seq <= s``.  A deletion is a version
too (a tombstone), so that it can shadow older values in older tables.

As in LevelDB, seq and kind pack into one 64-bit *trailer* ``seq << 8 | kind``,
and versions sort by user key ascending, then trailer descending (newest first).
"""

from __future__ import annotations

from typing import Final, TypeAlias

BytesLike: TypeAlias = bytes | bytearray | memoryview
"""What the public API takes for a key or a value: `bytes`, or a `bytearray`/`memoryview` (copied to bytes)."""

KIND_DELETE: Final = 0
KIND_VALUE: Final = 1

MAX_SEQUENCE: Final = (1 << 56) - 1
"""Largest sequence number; a read 'at MAX_SEQUENCE' sees every version."""

MAX_KEY_SIZE: Final = 64 * 1024
"""Largest user key in bytes.  Keys live in index blocks and memory, so keep them small."""

MAX_VALUE_SIZE: Final = 64 * 1024 * 1024
"""Largest value in bytes; a value is held whole in memory and in one log record."""


def pack_trailer(seq: int, kind: int) -> int:
    """The 64-bit trailer of a version.  O(1)."""
    return (seq << 8) | kind


def trailer_seq(trailer: int) -> int:
    """The sequence number inside a trailer.  O(1)."""
    return trailer >> 8


def trailer_kind(trailer: int) -> int:
    """The kind (KIND_VALUE or KIND_DELETE) inside a trailer.  O(1)."""
    return trailer & 0xFF


def check_key(key: object, what: str = "key") -> bytes:
    """Validate a user key from the public API; returns it as immutable bytes.

    `bytes`, `bytearray` and `memoryview` are accepted (copied to `bytes`); `str` is
    refused with a hint, since silently picking an encoding would be a guess.  An error
    names the argument as `what` (``"prefix"``, an iterator's ``"start"``).
    """
    if type(key) is bytes:
        if len(key) > MAX_KEY_SIZE:
            raise ValueError(f"{what} is {len(key)} bytes; the maximum is {MAX_KEY_SIZE}")
        return key
    return check_key(_as_bytes(key, what), what)


def check_value(value: object) -> bytes:
    """Validate a value from the public API; returns it as immutable bytes."""
    if type(value) is bytes:
        if len(value) > MAX_VALUE_SIZE:
            raise ValueError(f"value is {len(value)} bytes; the maximum is {MAX_VALUE_SIZE}")
        return value
    return check_value(_as_bytes(value, "value"))


def _as_bytes(obj: object, what: str) -> bytes:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    # Each type `BytesLike` takes is named: "must be bytes" would wrongly refuse the other two.
    accepted = f"{what} must be bytes, bytearray or memoryview"
    if isinstance(obj, str):
        raise TypeError(f"{accepted}, not str; encode it first, e.g. {what}.encode()")
    raise TypeError(f"{accepted}, not {type(obj).__name__}")
