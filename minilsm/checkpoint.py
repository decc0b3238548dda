"""Checkpoints: a consistent copy of an open store in a new directory, as RocksDB's ``Checkpoint``.

`DB.checkpoint` flushes the memtable and takes the live tables and counters under the store's mutex; this
module writes the copy from them.  Tables are immutable once written, so the copy does not copy them: each
is hard-linked into the new directory (an O(1) name, not O(bytes)), or copied where a link cannot be made (another
file system).  The store may delete its own name of a table later, after a compaction; the checkpoint's name
keeps the file.  The copy gets a manifest of its own listing those tables and an empty log, so that it opens as
an ordinary store, from then on independent of the one it came from.

The copy is built in a staging directory beside the target (``<target>.checkpoint.tmp``) and renamed into
place once every file in it is durable, so a crash or a failure leaves either no target or a whole one; a
staging directory that a crash left behind is cleared by the next checkpoint to the same target.  A checkpoint
holds a lock on the staging directory's ``LOCK`` (the store's lock file, which the copy keeps) from before it
clears it until it is done, so a second checkpoint to a target that one is still writing, in this process or
another, is refused, as if the target existed: clearing the first's staging directory under it would let the
first rename a part of a copy into place.  (RocksDB does not keep two processes apart there.)  The lock goes
with the directory into place, so until the checkpoint returns, an open of the new store is refused as an open
of a store open elsewhere is.  O(tables).
"""

from __future__ import annotations

import contextlib
import errno
import os

from minilsm.errors import ExistsError, NotFoundError
from minilsm.fs import FileLock, FileSystem, LockedInThisProcessError
from minilsm.manifest import LOCK_NAME, ManifestState, write_with_new_log
from minilsm.sstable.format import table_file_name

STAGING_SUFFIX = ".checkpoint.tmp"
_COPY_CHUNK = 1 << 20

_STAGING_TRIES = 3
"""Makings of the staging directory before a checkpoint gives up on one removed each time before it was locked."""

_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP})
"""Why ``link(2)`` may refuse where a copy would do: another file system, one without hard links, a link count
at its limit."""


def write_checkpoint(fs: FileSystem, source: str, target: str, state: ManifestState) -> None:
    """Make `target` (a directory that must not exist) a store holding `state`'s tables from `source`.

    `state` is the source's manifest as of the checkpoint: its tables must stay on disk until this returns
    (the caller holds their `Version`).  Raises `ExistsError` if `target` exists or another checkpoint holds its
    staging directory, `NotFoundError` if its parent directory does not, `ValueError` if it lies in the store's
    directory, and lets an `OSError` out (the target is then absent; or whole, if the sync of its parent failed
    after its rename into place and renaming it back failed too).
    """
    if fs.exists(target):
        raise _exists(target)
    parent = os.path.dirname(target)
    if not fs.is_dir(parent):
        # Made here, it would outlive a checkpoint that fails, and a mistyped path would quietly grow a tree of
        # directories.  RocksDB refuses too.
        raise NotFoundError(f"{target}: a checkpoint goes into a directory that exists, and {parent} is not one")
    staging = target + STAGING_SUFFIX
    # The staging directory is cleared of a crash's leftovers first, which would delete a store named like one;
    # and a target among the store's files could take a name the store reads as its own (a log, replayed).
    real_source = os.path.realpath(source)
    if os.path.commonpath([os.path.realpath(staging), real_source]) == real_source:
        raise ValueError(f"{target}: a checkpoint cannot be made in the store's own directory {source}")
    lock = _lock_staging(fs, target, staging)
    try:
        _write(fs, source, target, staging, parent, state)
    finally:
        lock.release()


def _lock_staging(fs: FileSystem, target: str, staging: str) -> FileLock:
    """The staging directory made, or found as an earlier checkpoint left it, and its LOCK taken.

    Raises `ExistsError` if another checkpoint holds it, or has renamed it into place meanwhile."""
    for _ in range(_STAGING_TRIES):
        try:
            fs.makedirs(staging)
            return fs.lock(f"{staging}/{LOCK_NAME}")
        except (FileExistsError, FileNotFoundError):
            # Another checkpoint that held it removed it (it failed) or renamed it into place (then the target
            # exists) between this one's mkdir and its look at what the mkdir met (`os.makedirs` then says the
            # directory exists), or between the mkdir and the lock: make it again, or be refused as the target
            # exists.
            if fs.exists(target):
                raise _exists(target) from None
            if fs.exists(staging) and not fs.is_dir(staging):
                raise  # a file by that name, in the way: not another checkpoint's
        except BlockingIOError as e:
            whose = "in this process" if isinstance(e, LockedInThisProcessError) else "in another process"
            raise ExistsError(f"{target}: another checkpoint is being written there, {whose}") from None
    raise ExistsError(f"{target}: another checkpoint there removed its staging directory {staging} each time")


def _write(fs: FileSystem, source: str, target: str, staging: str, parent: str, state: ManifestState) -> None:
    """Fill the staging directory, whose LOCK the caller holds, and rename it into place as `target`, durably."""
    try:
        if fs.exists(target):  # made since it was first looked for, by the checkpoint that held the lock before
            raise _exists(target)
        _remove_files(fs, staging)  # what an earlier checkpoint to the same target left when it crashed
        _fill(fs, source, staging, state)
        if fs.exists(target):  # made meanwhile: a rename could replace it if it is an empty directory
            raise _exists(target)
        fs.rename(staging, target)
    except BaseException:
        with contextlib.suppress(OSError):
            _remove_dir(fs, staging)
        raise
    try:
        fs.sync_dir(parent)
    except BaseException:
        # Whole, but perhaps not durable, and the caller is told it failed: take it back, so that a failure
        # leaves no target and trying again does not meet one.  Its name goes first, durably, and only then its
        # files: removed where it stood, a power cut midway could leave a part of a copy as the target (a
        # journaling file system may commit the rename and the first removals, in order, but not the rest).  If
        # the name cannot go for good, the files stay: the target, if a power cut keeps it, is whole, and a
        # staging directory left is cleared by the next checkpoint.
        with contextlib.suppress(OSError):
            fs.rename(target, staging)
            fs.sync_dir(parent)
            _remove_dir(fs, staging)
        raise


def _exists(target: str) -> ExistsError:
    return ExistsError(f"{target}: a checkpoint needs a new directory, and this path exists")


def _fill(fs: FileSystem, source: str, staging: str, state: ManifestState) -> None:
    """The tables linked or copied, an empty log and a manifest, all durable in `staging`."""
    for level in state.levels:
        for meta in level:
            name = table_file_name(meta.number)
            link_or_copy(fs, f"{source}/{name}", f"{staging}/{name}")
    # An empty log for the manifest to name, numbered past every table, as a new store's first log is.
    log_number = state.next_file_number
    write_with_new_log(
        fs,
        staging,
        ManifestState(log_number + 1, state.last_sequence, log_number, state.levels, state.compact_pointers),
    )


def link_or_copy(fs: FileSystem, src: str, dst: str) -> None:
    """Give the file `src` the new name `dst`: a hard link, or a synced copy where a link cannot be made (a copy
    cut short by a failure is left at `dst`).  Call `sync_dir` on `dst`'s directory to make the name durable."""
    try:
        fs.link(src, dst)
    except OSError as e:
        if e.errno not in _NO_LINK:
            raise
        _copy(fs, src, dst)


def _copy(fs: FileSystem, src: str, dst: str) -> None:
    """`src` copied to a new file `dst`, synced: a megabyte a read, through the file system seam."""
    reader = fs.open_random(src)
    try:
        writer = fs.open_writable(dst)
        try:
            size = reader.size()
            for offset in range(0, size, _COPY_CHUNK):
                writer.append(reader.pread(offset, min(_COPY_CHUNK, size - offset)))
            writer.sync()
        finally:
            writer.close()
    finally:
        reader.close()


def _remove_files(fs: FileSystem, path: str) -> None:
    """Remove the files in a checkpoint's directory but its LOCK, which the caller holds (no subdirectory)."""
    for name in fs.listdir(path):
        if name != LOCK_NAME:
            fs.remove(f"{path}/{name}")


def _remove_dir(fs: FileSystem, path: str) -> None:
    """Remove a checkpoint's directory (staging, or one taken back), whose LOCK the caller holds, if it exists.

    The LOCK goes after the other files, not in the order a listing gives: once its name is gone, another
    checkpoint may lock a new LOCK there and fill the directory, and a file removed after that could be one of its
    files, which it would rename into place without."""
    if fs.exists(path):
        _remove_files(fs, path)
        fs.remove(f"{path}/{LOCK_NAME}")
        fs.remove_dir(path)
