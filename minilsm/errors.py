"""The error hierarchy: everything minilsm raises on purpose derives from `Error`.

Like plyvel and LevelDB's `Status`, a caller can catch one base class; the
subclasses say what went wrong without parsing messages.  Argument mistakes
(wrong type, oversized key) raise the built-in `TypeError`/`ValueError`
instead, as every Python API does.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every error minilsm raises deliberately."""


class CorruptionError(Error):
    """Stored bytes failed a check: bad checksum, bad magic, truncation, nonsense length.

    `path` names the damaged file (None when the bytes did not come from a file, as
    when a filter is decoded from a buffer); `detail` says what check failed.
    """

    def __init__(self, detail: str, path: str | None = None) -> None:
        self.detail = detail
        self.path = path
        super().__init__(f"{path}: {detail}" if path else detail)

    def __reduce__(self) -> tuple[type[CorruptionError], tuple[str, str | None]]:
        # Pickled whole (path and detail), as the compaction worker sends a job's failure back to the store.
        return (CorruptionError, (self.detail, self.path))

    def with_path(self, path: str) -> CorruptionError:
        """The same error, now naming the file it came from (keeps an existing name).  O(1)."""
        if self.path is not None:
            return self
        err = CorruptionError(self.detail, path)
        err.__cause__ = self.__cause__ or self
        return err


class LockError(Error):
    """The database directory is held by another `DB` object or process (the message says whether in this one)."""


class ClosedError(Error):
    """The `DB`, snapshot, iterator or batch was used after it was closed."""


class IteratorInvalidError(Error):
    """A `RawIterator` was read or stepped while it stood on no item (plyvel's ``IteratorInvalidError``)."""


class NotFoundError(Error):
    """The database does not exist and `create_if_missing` is false, or none can be made there (the path is a
    file, or a directory holding LevelDB's or RocksDB's store), or a checkpoint's target directory is in one that
    does not exist."""


class ExistsError(Error):
    """The database exists and `error_if_exists` is true, or a checkpoint's target path exists."""


class StoreIOError(Error):
    """A file operation failed (EIO, ENOSPC, ...) while the store did its work.

    The original `OSError` is chained as `__cause__`.  A failure on the write
    path (log append, flush, compaction, manifest) also turns the store
    read-only, as RocksDB does after a background error: nothing acknowledged
    is lost, but a half-finished write must not be built upon.
    """


class ReadOnlyError(Error):
    """A write was refused because an earlier I/O failure made the store read-only.

    So does an interrupt (a signal handler's `KeyboardInterrupt`, a `MemoryError`) in the middle of a write,
    which may have left part of it in the log.  Reads keep working.  A write that would need sequence numbers
    past `MAX_SEQUENCE` (2**56 - 1, which only a damaged or forged log or manifest brings near) is refused with
    it too, and leaves the store as it was.  Close and reopen the store once the
    cause (a full disk, say) is fixed; recovery then replays everything that was acknowledged.
    """
