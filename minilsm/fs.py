"""The filesystem seam (LevelDB's `Env`): every file operation of the store goes through here.

The store never calls `open`, `os.write` or `os.fsync` itself.  It asks a
`FileSystem` object, so that tests can substitute one that fails the Nth call
or forgets everything that was not synced (see tests/faultfs.py).  The real
implementation below is a thin layer over `os`, kept free of extra work because
the write and read paths run through it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Protocol


class WritableFile(Protocol):
    """A file opened for appending: a log, a table being built, a manifest."""

    def append(self, data: bytes) -> None: ...
    def flush(self) -> None: ...
    def sync(self) -> None: ...
    def close(self) -> None: ...


class RandomAccessFile(Protocol):
    """A file opened for positioned reads: an SSTable."""

    def pread(self, offset: int, size: int) -> bytes: ...
    def size(self) -> int: ...
    def close(self) -> None: ...


class FileLock(Protocol):
    def release(self) -> None: ...


class FileSystem:
    """The real filesystem.  Subclass or replace to inject faults in tests."""

    def open_writable(self, path: str) -> WritableFile:
        """Create (or truncate) `path` for appending."""
        return _PosixWritableFile(path)

    def open_appendable(self, path: str) -> WritableFile:
        """Open an existing `path` for appending at its end (created if missing)."""
        return _PosixWritableFile(path, append=True)

    def open_random(self, path: str) -> RandomAccessFile:
        """Open `path` for positioned reads (`os.pread`; no mmap, so every read is visible)."""
        return _PosixRandomAccessFile(path)

    def read_file(self, path: str) -> bytes:
        """The whole content of a small file (log, manifest, CURRENT)."""
        with open(path, "rb") as f:
            return f.read()

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace `dst` by `src` (POSIX rename).  Call `sync_dir` to make it durable."""
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def file_size(self, path: str) -> int:
        return os.path.getsize(path)

    def sync_dir(self, path: str) -> None:
        """fsync a directory, so that creations, renames and removals in it survive a crash."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock(self, path: str) -> FileLock:
        """Take an exclusive, non-blocking OS lock on `path` (created if missing).

        Raises `BlockingIOError` at once when another process, or another open
        file description in this process, holds it.
        """
        return _PosixFileLock(path)


class _PosixWritableFile:
    __slots__ = ("_f", "path")

    def __init__(self, path: str, append: bool = False) -> None:
        self.path = path
        # A Python-level buffer batches small appends into few write(2) calls;
        # flush() pushes them to the OS, sync() to the disk.
        self._f = open(path, "ab" if append else "wb", buffering=64 * 1024)  # noqa: SIM115

    def append(self, data: bytes) -> None:
        self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


class _PosixRandomAccessFile:
    __slots__ = ("_fd", "_size", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size

    def pread(self, offset: int, size: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        # Table caches drop files without closing them, because a concurrent
        # read may still hold one; CPython closes it when the last holder lets go.
        self.close()


class _PosixFileLock:
    __slots__ = ("_fd",)

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # flock locks belong to the open file description, so a second open
            # in the same process is refused too (fcntl/POSIX locks would not be).
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise BlockingIOError(e.errno, f"{path} is locked by another process") from e
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


DEFAULT_FS = FileSystem()
