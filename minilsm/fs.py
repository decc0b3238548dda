"""The filesystem seam (LevelDB's `Env`): every file operation of the store goes through here.

The store never calls `open`, `os.write` or `os.fsync` itself.  It asks a
`FileSystem` object, so that tests can substitute one that fails the Nth call
or forgets everything that was not synced (see tests/faultfs.py).  The real
implementation below is a thin layer over `os`, kept free of extra work because
the write and read paths run through it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import stat
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

_R = TypeVar("_R")
_WRITE_BUFFER: Final = 64 * 1024
"""Bytes of appends a writable file collects before it writes them out without being asked."""

# From Python 3.13 an mmap need not keep a duplicate of the file's descriptor, which only its resize() and size()
# use; a mapped table then holds no descriptor at all.
_UNTRACKED: Final[dict[str, bool]] = {"trackfd": False} if sys.version_info >= (3, 13) else {}


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


class LockedInThisProcessError(BlockingIOError):
    """`FileSystem.lock` refused a lock that this process itself holds (through another open of the file)."""


class FileSystem:
    """The real filesystem.  Subclass or replace to inject faults in tests."""

    def open_writable(self, path: str) -> WritableFile:
        """Create (or truncate) `path` for appending.  `OSError` naming `path` if it is a symlink (not followed) or
        anything but a regular file."""
        return _PosixWritableFile(path)

    def open_appendable(self, path: str) -> WritableFile:
        """Open an existing `path` for appending at its end (created if missing).  `OSError` naming `path` if it is
        anything but a regular file."""
        return _PosixWritableFile(path, append=True)

    def open_random(self, path: str) -> RandomAccessFile:
        """Open `path` for positioned reads, each one ``os.pread``."""
        fd, st = _open_regular(path)
        return _PosixRandomAccessFile(path, fd, st.st_size)

    def open_mapped(self, path: str) -> RandomAccessFile:
        """Open `path` for positioned reads from a read-only memory mapping of it (`Options.mmap_reads`).

        A read is then a copy out of the OS page cache with no system call,
        as LevelDB reads tables on 64-bit systems.  Two prices, which is why it
        is not the default.  A read no longer releases the interpreter lock,
        so a thread reading a cached store keeps it for the whole switch
        interval (5 ms), and a thread that writes waits that long after each
        of its own system calls (bench/RESULTS.md, "Point reads": a writer
        beside a reader ran 2-27x slower).  And, as in LevelDB, a file that
        another program cuts short while it is mapped ends the process with
        SIGBUS at the next read of the lost part, where ``pread`` returns a
        short read that the store reports as `CorruptionError` (a store never
        shortens its own tables: they are written once, then only deleted,
        which leaves a mapping intact; a file already short when opened is
        caught by the usual checks).  A file that cannot be mapped (an empty
        one, a filesystem without mmap) is read with ``pread``.
        """
        fd, st = _open_regular(path)
        try:
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ, **_UNTRACKED) if st.st_size else None
        except (OSError, ValueError):
            mapped = None
        if mapped is None:
            return _PosixRandomAccessFile(path, fd, st.st_size)
        os.close(fd)  # the mapping keeps the file (and before Python 3.13, a duplicate descriptor of it)
        return _MappedFile(path, mapped, st.st_size)

    def read_file(self, path: str) -> bytes:
        """The whole content of a small file (log, manifest, CURRENT).  A file too large to hold in memory is
        `OSError` ENOMEM naming `path`, not a bare `MemoryError`."""
        fd, _ = _open_regular(path)
        with open(fd, "rb") as f:
            return _read_all(f, path, -1)

    def read_file_and_hole(self, path: str) -> tuple[bytes, int]:
        """The content of a log or manifest up to the hole that ends it, and that hole's length in bytes.

        A hole reads as zero bytes that were never written (a file extended with ``truncate -s``): a log or
        manifest of more than `HOLE_CHECK_SIZE` bytes that ends in one is read as `read_log` reads a zero tail,
        without reading the zeros, so that a 50 GiB sparse log costs two ``lseek`` calls, not 50 GiB of memory.
        A smaller file, which every log and manifest the store writes is unless its memtable is that large, is
        read whole and its hole is 0: recovery never rests on ``SEEK_HOLE`` for the writes it must not lose (see
        `HOLE_CHECK_SIZE`).  The hole is 0 too where the file has none or the file system cannot say.  O(the file's
        data); ENOMEM as `read_file`.  A file system that overrides `read_file` overrides this too
        (tests/faultfs.py does).
        """
        fd, st = _open_regular(path)
        with open(fd, "rb") as f:
            end = _data_end(fd, st.st_size) if st.st_size > HOLE_CHECK_SIZE else st.st_size
            return _read_all(f, path, end), st.st_size - end

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace `dst` by `src` (POSIX rename).  Call `sync_dir` to make it durable."""
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def link(self, src: str, dst: str) -> None:
        """Give the file `src` a second name `dst` (a hard link: the same file, not a copy).  Call `sync_dir`
        to make it durable."""
        os.link(src, dst)

    def remove_dir(self, path: str) -> None:
        """Remove an empty directory (a compaction worker's scratch directory)."""
        os.rmdir(path)

    def remove_dir_and_files(self, path: str) -> None:
        """Remove directory `path` and the files in it (a worker's scratch directory: no subdirectories), in the
        order listed, through `remove` and `remove_dir`, so a subclass that overrides those sees each removal.  (A
        checkpoint's staging directory goes by `checkpoint._remove_dir`, its LOCK last.)"""
        for name in self.listdir(path):
            self.remove(f"{path}/{name}")
        self.remove_dir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def is_regular_file(self, path: str) -> bool:
        """Whether `path` is a regular file itself, not a symlink (to one or not), a directory, a FIFO or a device."""
        try:
            return stat.S_ISREG(os.lstat(path).st_mode)
        except OSError:
            return False

    def makedirs(self, path: str) -> None:
        """Make directory `path` and any missing above it.  Call `sync_dir` on the directory above each new one to
        make its name durable (`makedirs_synced`)."""
        os.makedirs(path, exist_ok=True)

    def makedirs_synced(self, path: str) -> None:
        """`makedirs`, then sync the directory above each directory it made: a new directory's name, as a new
        file's, survives a power cut only once the directory holding it is synced.  If it made none, the one above
        `path` is synced too (an earlier call may have made `path` and failed before its sync), unless it may not
        be read (`PermissionError`: a directory given to a service in a parent of mode 711), as LevelDB and
        RocksDB, which sync no parent, would open there.  Through `exists`, `makedirs` and `sync_dir`, so a
        subclass that overrides those sees each call."""
        made = []  # the deepest first
        d = os.path.abspath(path)
        while not self.exists(d):
            made.append(d)
            d = os.path.dirname(d)
        self.makedirs(path)
        if not made:
            with contextlib.suppress(PermissionError):
                self.sync_dir(os.path.dirname(os.path.abspath(path)))
        for d in reversed(made):
            self.sync_dir(os.path.dirname(d))

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

        The lock is on the file that `path` names once it is taken: a file that
        its last holder removed or replaced meanwhile is let go, and `path`
        opened again (`OSError` EBUSY after `_LOCK_TRIES` opens, each of a file
        removed or replaced so).  Raises `BlockingIOError` at once when the
        lock is held: `LockedInThisProcessError` when this process holds it (a
        lock an override does not say that of is taken for another process's).
        """
        return _PosixFileLock(path)


class _PosixWritableFile:
    """Appends wait in a list until `flush` hands them to the OS in one write(2), or 64 KiB of them wait.

    The log flushes after every record, so for it an append and a flush are a
    list append and one ``os.write`` of the record itself, with no copy into a
    buffer: about 0.3 us less per store write than `io.BufferedWriter`.  Tables
    append whole blocks and are written out 64 KiB at a time, as before.

    A copy of the object in a child process forked while it was open writes
    nothing when it closes: what waits in it is the parent's to write (through
    the shared descriptor, the child would write it a second time).

    A write that fails drops the bytes it did not write, as LevelDB's
    ``FlushBuffer`` does, rather than keep them for a later flush: the file's
    end is then unknown and its writer is abandoned, so the only later flush
    is the one `close` makes, which would write a log record its caller was
    told had failed (and had read back as absent) for the next open to replay.
    """

    __slots__ = ("_fd", "_pending", "_pending_bytes", "_pid", "path")

    def __init__(self, path: str, append: bool = False) -> None:
        self.path = path
        # Every field before the open, for close() in __del__ if the open raises (or an interrupt lands after it).
        self._fd = -1
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pid = os.getpid()
        # A name the store writes anew (a table, a log, MANIFEST.tmp) is never a symlink of its own making: one
        # found there is not followed, so that nothing outside the store is created or truncated through it.
        # O_NONBLOCK (no effect on a regular file's writes) makes a FIFO found there an error, not a wait for a
        # reader that never comes; `_check_regular` refuses it, and a device, at once.
        # O_NOCTTY: a terminal found there must not become the process's controlling terminal before it is refused.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
        flags |= os.O_APPEND if append else os.O_TRUNC | os.O_NOFOLLOW
        self._fd = os.open(path, flags, 0o666)  # the mode open() uses; the umask applies
        try:
            _check_regular(self._fd, path)
        except OSError:
            self.close()
            raise

    def append(self, data: bytes) -> None:
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= _WRITE_BUFFER:
            self.flush()

    def flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        # Taken out before the write, not after: an interrupt (a signal handler's KeyboardInterrupt) landing
        # as os.write returns would otherwise leave written bytes pending, for the next flush to write again.
        pending.clear()
        self._pending_bytes = 0
        try:
            written = os.write(self._fd, data)
            if written < len(data):
                self._write_rest(data, written)
        except OSError as e:
            _name_file(e, self.path)
            raise

    def _write_rest(self, data: bytes, written: int) -> None:
        # A short write (a signal, a nearly full disk): write the rest, until done or a write fails.
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(self._fd, view) :]

    def sync(self) -> None:
        self.flush()
        _named(os.fsync, self.path, self._fd)

    def close(self) -> None:
        """Flush and close (idempotent); the descriptor is closed even if the flush fails."""
        fd = self._fd
        if fd < 0:
            return
        try:
            if self._pid == os.getpid():
                self.flush()
            else:
                self._pending.clear()  # a forked child's copy: the parent writes these itself
                self._pending_bytes = 0
        finally:
            self._fd = -1
            os.close(fd)

    def __del__(self) -> None:
        # Like a dropped io.BufferedWriter: flush what waits, close, and say nothing.
        with contextlib.suppress(OSError):
            self.close()


def _name_file(e: OSError, path: str) -> None:
    """Make `e` name `path` if it names no file: an error of a call on a descriptor (``write``, ``fsync``,
    ``pread``) names none, and a `StoreIOError` that quotes it must say which file failed."""
    if e.filename is None:
        e.filename = path


def _named(call: Callable[..., _R], path: str, *args: Any) -> _R:
    """``call(*args)``, its `OSError` naming `path` (`_name_file`)."""
    try:
        return call(*args)
    except OSError as e:
        _name_file(e, path)
        raise


HOLE_CHECK_SIZE: Final = 256 << 20
"""Logs and manifests larger than this are read up to the hole that ends them (`FileSystem.read_file_and_hole`).
Smaller ones are read whole, holes and all, because a file system may report a hole where written data lies
that it has not yet put on disk (OpenZFS issue 15526, which corrupted copies made by ``cp``): a log's last writes,
unsynced when the process died, would read as a zero tail, acknowledged writes lost.  A log holds one memtable
(4 MiB by default), so only a forged or damaged file, or a store with a memtable near this size, is ever that
large; reading 256 MiB costs a fraction of a second."""


NO_WRITE_ACCESS: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
"""The errors of a write refused for want of access (a file or directory of another user's, a read-only mount),
not for the file's state."""


def _read_all(f: Any, path: str, size: int) -> bytes:
    """``f.read(size)``, a `MemoryError` turned into `OSError` ENOMEM naming `path` (a file too large to hold)."""
    try:
        data: bytes = f.read(size)
    except MemoryError:
        raise OSError(errno.ENOMEM, "file too large to read into memory", path) from None
    return data


def _data_end(fd: int, size: int) -> int:
    """Where the hole that ends the file `fd` (of `size` bytes) begins: `size` if it ends in data, or if the system
    cannot tell (``SEEK_DATA``/``SEEK_HOLE`` unsupported).  One ``lseek`` pair per data extent; two for a file
    without holes."""
    end = pos = 0
    try:
        while True:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # no data at or after `pos`: the rest is a hole
                    return end
                raise
            end = pos = os.lseek(fd, start, os.SEEK_HOLE)
            if end >= size:
                return size
    except (OSError, AttributeError):  # EINVAL, EOPNOTSUPP: no hole reporting here; AttributeError: no SEEK_DATA
        return size
    finally:
        with contextlib.suppress(OSError):
            os.lseek(fd, 0, os.SEEK_SET)


def _check_regular(fd: int, path: str) -> os.stat_result:
    """The stat of the descriptor `fd` of `path`; `OSError` naming `path` unless it is a regular file (a directory, a
    FIFO, a device found where the store keeps a file), which the caller closes."""
    st = _named(os.fstat, path, fd)
    if not stat.S_ISREG(st.st_mode):
        code = errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL
        raise OSError(code, os.strerror(code) if code == errno.EISDIR else "not a regular file", path)
    return st


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of `path` and its stat, refusing anything but a regular file with `path` in the error.

    os.open takes a directory, whose first read then fails with an error naming no file, and
    blocks on a FIFO until a writer comes: O_NONBLOCK (no effect on a regular file's reads) and
    the type check turn both into an error at once.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # O_NOCTTY: as `_PosixWritableFile`
    try:
        return fd, _check_regular(fd, path)
    except OSError:
        os.close(fd)
        raise


class _PosixRandomAccessFile:
    __slots__ = ("_fd", "_size", "path")

    def __init__(self, path: str, fd: int, size: int) -> None:
        self.path = path
        self._fd = fd
        self._size = size

    def pread(self, offset: int, size: int) -> bytes:
        try:  # free in CPython 3.11+ unless it raises: every block read comes here
            return os.pread(self._fd, size, offset)
        except OSError as e:
            _name_file(e, self.path)
            raise

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


class _MappedFile:
    """A table file mapped read-only: `pread` is a slice of the mapping (one copy, no system call)."""

    __slots__ = ("_map", "_size", "path")

    def __init__(self, path: str, mapped: mmap.mmap, size: int) -> None:
        self.path = path
        self._map: mmap.mmap | None = mapped
        self._size = size

    def pread(self, offset: int, size: int) -> bytes:
        # Past the end a slice comes back short, as pread's result would: the caller checks the length.
        try:
            return self._map[offset : offset + size]  # type: ignore[index]
        except (TypeError, ValueError):  # None after close(), or a mapping closed under us
            raise OSError(errno.EBADF, "read of a closed table file", self.path) from None

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        mapped, self._map = self._map, None
        if mapped is not None:
            mapped.close()


def is_mapped(file: RandomAccessFile) -> bool:
    """Whether `file` reads are slices of a memory mapping (`FileSystem.open_mapped`), which need no readahead."""
    return isinstance(file, _MappedFile)


_LOCK_TRIES: Final = 8
"""Opens of a lock file before `FileSystem.lock` gives up on one removed or replaced each time it was locked."""

_held: weakref.WeakValueDictionary[tuple[int, int], _PosixFileLock] = weakref.WeakValueDictionary()
"""The `_PosixFileLock` this process holds on each file, by its (st_dev, st_ino), so that a refusal can say whose
the lock is, and a forked child can let go of its copies.  A file's, not its name's: a LOCK deleted and made again
is another file, whose lock is another lock.  Its file stays open while it is here, so its number is not given to
another file meanwhile.  Weak: a store dropped without close() lets its lock be collected, which releases it."""
_held_mutex = threading.RLock()
"""Guards `_held` and every lock and unlock with it, so that a refusal never sees a lock taken or let go but
not yet (or no longer) listed.  Reentrant: an allocation while it is held may collect a dropped store, whose
lock's `__del__` then releases it in this same thread."""


def _forget_held_after_fork() -> None:
    # A child's copies of the parent's locks are the parent's: the child closes its descriptors of them, which
    # leaves the locks held (they belong to the open file description, which the parent's descriptor keeps),
    # and no longer keeps them held once the parent has closed its own, or died: a child that outlives a crashed
    # parent leaves the store free to open.  A thread of the parent may have held the mutex at the fork: the
    # child has no thread to release it.
    global _held_mutex
    for lock in list(_held.values()):
        lock._forget_in_child()
    _held.clear()
    _held_mutex = threading.RLock()


os.register_at_fork(after_in_child=_forget_held_after_fork)


class _PosixFileLock:
    """An exclusive `flock` on a file, held until `release` (or until the object is collected).

    flock locks belong to the open file description, which a forked child shares
    with its parent: an unlock in the child would release the parent's lock, and
    another process could then open the store under the parent.  So a child's
    copy of the lock only closes its own descriptor.
    """

    __slots__ = ("__weakref__", "_fd", "_file", "_pid")

    def __init__(self, path: str) -> None:
        self._fd = -1  # for __del__ if the lock below is refused
        for _ in range(_LOCK_TRIES):
            if self._take(path):
                return
        # Not a BlockingIOError: no one may hold the lock, and a refusal would say someone does.
        raise OSError(errno.EBUSY, f"{path} was removed or replaced each time it was locked")

    def _take(self, path: str) -> bool:
        """Lock the file at `path`; False if, once locked, it was no longer the file there (removed or replaced
        between the open and the flock: a lock on it would guard nothing that another open can see)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            if e.errno not in NO_WRITE_ACCESS:
                raise
            # A LOCK this user may only read (another user's store, a read-only mount): flock needs no write
            # access, so an offline tool that only reads (`minilsm check`) may still hold it; an open of the store
            # then fails at its first write, naming that file.  Found by the permissions audit.
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                raise e from None
        try:
            st = os.fstat(fd)
            file = (st.st_dev, st.st_ino)
            with _held_mutex:
                try:
                    # flock locks belong to the open file description, so a second open
                    # in the same process is refused too (fcntl/POSIX locks would not be).
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                    if file in _held:
                        raise LockedInThisProcessError(e.errno, f"{path} is locked by this process") from e
                    raise BlockingIOError(e.errno, f"{path} is locked by another process") from e
                # The holder before this one may have removed the file as its last act (a destroyed store's
                # LOCK, a failed checkpoint's staging directory), between this open and this flock.  The next
                # open of `path` makes a new file, whose lock is free: this one would guard nothing.
                try:
                    now = os.stat(path)
                except FileNotFoundError:
                    now = None
                stale = now is None or (now.st_dev, now.st_ino) != file
                if not stale:
                    _held[file] = self
        except OSError:
            os.close(fd)
            raise
        if stale:
            os.close(fd)  # and with it the lock
            return False
        self._fd = fd
        self._file = file
        self._pid = os.getpid()
        return True

    def release(self) -> None:
        fd = self._fd
        if fd >= 0:
            if self._pid == os.getpid():
                with _held_mutex:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    _held.pop(self._file, None)
            # Forgotten before it is closed: a release again after an interrupt here must not close the number
            # twice (by then it may be another file's).
            self._fd = -1
            os.close(fd)

    def _forget_in_child(self) -> None:
        """In a forked child: close this copy of the parent's lock, which stays the parent's (see `release`)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        # A store dropped without close() lets its directory go when it is collected, as a dropped file closes.
        with contextlib.suppress(OSError):
            self.release()


DEFAULT_FS = FileSystem()
