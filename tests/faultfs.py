"""`FaultFS`: a `FileSystem` that remembers what was made durable, fails chosen calls, and can "crash".

Modelled on LevelDB's ``FaultInjectionTestEnv`` and RocksDB's
``FaultInjectionTestFS``.  Files live on the real disk (so the store runs its
real code paths, and a test can look at the directory), and beside them the
file system keeps the model a power cut would apply:

* per file (per *inode*, so that renames carry it along): its content as of
  its last ``sync``.  Nothing is ever really fsynced, which keeps the tests fast;
* per directory: the names it held, and which inode each named, as of its last
  ``sync_dir``.  A creation, rename or removal is durable only after that.

`crash` rewrites the directory to the durable model: unsynced appends vanish
(or, with ``torn=True``, a random prefix of them survives, as a torn write
would leave), files whose creation was never made durable vanish, and unsynced
renames and removals are undone.  With ``dir_ops=True`` they may not all be:
a random number of a directory's changes since its last ``sync_dir`` survive,
in order, as a journaling file system, committing metadata on its own schedule,
may leave them (a store must not count on an unsynced removal staying undone).
Files the store did not create through this object (found in a directory the
first time it is used) count as durable.

`arm` makes the Nth later call of one kind fail with an `OSError` (EIO, ENOSPC,
...), once or, with ``sticky=True``, from then on (a full disk).  The kinds are
``open`` (open_writable/open_appendable/open_random), ``write`` (append),
``sync`` (file fsync), ``sync_dir``, ``rename``, ``remove``, ``read`` (pread,
read_file) and ``link`` (a hard link: a second name for the same inode).  A
failed append first writes half of its bytes, as a short write on a filling
disk does.  `counts` tallies every call by kind, so a dry run
says how many failure points a workload has.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from minilsm.fs import FileSystem, RandomAccessFile, WritableFile

STORE_KINDS = ("open", "write", "sync", "sync_dir", "rename", "remove", "read")
"""The kinds of call a store makes as it runs; a checkpoint also makes ``link``."""
KINDS = (*STORE_KINDS, "link")


@dataclass
class Fault:
    """One failure that fired: which call, on which path, with which errno."""

    kind: str
    path: str
    errno: int


class FaultFS(FileSystem):
    """A fault-injecting, crash-simulating file system over real files (see the module docstring).  Thread-safe."""

    def __init__(self, *, torn: bool = False, seed: int = 0, dir_ops: bool = False) -> None:
        self.torn = torn
        self.dir_ops = dir_ops
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self.counts: Counter[str] = Counter()
        self.faults: list[Fault] = []
        # kind, calls left before failing, errno, sticky, and the name the failing call's path ends with ("": any)
        self._armed: tuple[str, int, int, bool, str] | None = None
        self._next_inode = 0
        self._inode: dict[str, int] = {}  # current path -> inode
        self._content: dict[int, bytearray] = {}  # inode -> current bytes (what the page cache holds)
        self._synced: dict[int, bytes] = {}  # inode -> bytes as of its last sync
        self._dirs: dict[str, dict[str, int]] = {}  # directory -> {name: inode} as of its last sync_dir
        self._dir_changes: dict[str, list[dict[str, int]]] = {}  # directory -> {name: inode} after each change since
        self.generation = 0
        """Incremented by every crash; files opened before one refuse further use."""
        self.on_call: Callable[[str, str], None] | None = None
        """Called with each call's kind and path before the call acts or can fail, holding the lock that every
        change to the model takes: what `copy_durable` copies there is the state just before the call."""

    # -- failure injection -----------------------------------------------------------

    def arm(self, kind: str, nth: int, err: int = errno.EIO, *, sticky: bool = False, on: str = "") -> None:
        """Make the `nth` call of `kind` from now on (1-based) raise ``OSError(err)``; all later ones too if sticky.

        With `on`, only calls on a path whose last component is `on` count (``on="MANIFEST"``).
        """
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")
        if nth < 1:
            raise ValueError("nth counts from 1")
        with self._lock:
            self._armed = (kind, nth, err, sticky, on)

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def _call(self, kind: str, path: str) -> None:
        """Count one call; raise if it is the armed one."""
        with self._lock:
            if self.on_call is not None:
                self.on_call(kind, path)
            self.counts[kind] += 1
            armed = self._armed
            if armed is None or armed[0] != kind or (armed[4] and os.path.basename(path) != armed[4]):
                return
            _, left, err, sticky, on = armed
            if left > 1:
                self._armed = (kind, left - 1, err, sticky, on)
                return
            if not sticky:
                self._armed = None
            self.faults.append(Fault(kind, path, err))
        raise OSError(err, f"injected {kind} failure ({os.strerror(err)})", path)

    # -- the durable model -------------------------------------------------------------

    def _track(self, path: str) -> str:
        """Normalize `path`, adopting its directory (see `_adopt`)."""
        path = os.path.normpath(path)
        self._adopt(os.path.dirname(path))
        return path

    def _adopt(self, d: str) -> None:
        """The first time directory `d` is used, take every file in it as durable."""
        if d not in self._dirs:
            names: dict[str, int] = {}
            if os.path.isdir(d):
                for name in os.listdir(d):
                    p = os.path.join(d, name)
                    if os.path.isfile(p):
                        with open(p, "rb") as f:
                            data = f.read()
                        ino = self._new_inode(p, data)
                        self._synced[ino] = data
                        names[name] = ino
            self._dirs[d] = names

    def _new_inode(self, path: str, data: bytes = b"") -> int:
        self._next_inode += 1
        ino = self._next_inode
        self._inode[path] = ino
        self._content[ino] = bytearray(data)
        return ino

    def _names(self, d: str) -> dict[str, int]:
        return {os.path.basename(p): ino for p, ino in self._inode.items() if os.path.dirname(p) == d}

    def _dir_changed(self, d: str) -> None:
        """Note a creation, rename or removal in directory `d` (only needed with `dir_ops`)."""
        if self.dir_ops:
            self._dir_changes.setdefault(d, []).append(self._names(d))

    def _durable_names(self, d: str) -> dict[str, int]:
        """The names a power cut now would leave in directory `d`: as of its last sync_dir, or with `dir_ops`
        as after a random number of the changes since (in order, as a journaling file system commits them)."""
        changes = self._dir_changes.get(d)
        if self.dir_ops and changes:
            k = self._rng.randint(0, len(changes))
            if k:
                return changes[k - 1]
        return self._dirs.get(d, {})

    def _sync_file(self, ino: int) -> None:
        with self._lock:
            self._synced[ino] = bytes(self._content[ino])

    def _durable_bytes(self, ino: int) -> bytes:
        """What a power cut now would leave of inode `ino`: its bytes as of its last sync, and with `torn` a
        random prefix of the appends since (the store only appends, so those extend the synced bytes)."""
        synced = self._synced.get(ino, b"")
        now = self._content[ino]
        if self.torn and len(now) > len(synced) and now.startswith(synced):
            return bytes(now[: self._rng.randint(len(synced), len(now))])
        return synced

    def _write_durable(self, durable: dict[str, int], dst: str) -> int:
        """Write each of the `durable` names (name -> inode) into directory `dst` with its durable bytes.

        Returns how many unsynced bytes were left out.
        """
        dropped = 0
        if durable:
            os.makedirs(dst, exist_ok=True)
        for name, ino in durable.items():
            data = self._durable_bytes(ino)
            dropped += max(0, len(self._content[ino]) - len(data))
            with open(os.path.join(dst, name), "wb") as f:
                f.write(data)
        return dropped

    def crash(self) -> dict[str, int]:
        """Reduce every tracked directory to its durable state, as a power cut would; disarm.

        Call it only once the store using this file system has stopped touching
        it.  Returns counts of what was lost: unsynced bytes dropped, files that
        vanished, and names reverted to an older file.
        """
        with self._lock:
            self._armed = None
            lost = Counter[str]()
            for d in self._dirs:
                durable = self._durable_names(d)
                current = self._names(d)
                for name in current:
                    if name not in durable:
                        os.remove(os.path.join(d, name))
                        lost["files_vanished"] += 1
                for name, ino in durable.items():
                    if current.get(name) != ino:
                        lost["names_reverted"] += 1
                lost["bytes_dropped"] += self._write_durable(durable, d)
            # Start over: what is on disk now is, by definition, durable.
            self.generation += 1
            self._inode.clear()
            self._content.clear()
            self._synced.clear()
            self._dirs.clear()
            self._dir_changes.clear()
            return dict(lost)

    def copy_durable(self, d: str, dst: str) -> None:
        """Write into a new directory `dst` what a power cut now would leave of directory `d` (as `crash` would,
        torn or not), while `d` and the model stay as they are and the store using them runs on.

        A copy taken at every call (`on_call`) tests a power cut at every moment of one run.  `dst` holds no
        file if `d` has no durable name yet (never used, or not yet synced).
        """
        with self._lock:
            os.makedirs(dst)
            self._write_durable(self._durable_names(os.path.normpath(d)), dst)

    def unsynced_files(self) -> list[str]:
        """Paths whose content or directory entry would change in a crash now (for tests of this class)."""
        with self._lock:
            out = []
            for p, ino in self._inode.items():
                durable = self._dirs.get(os.path.dirname(p), {})
                if durable.get(os.path.basename(p)) != ino or self._synced.get(ino) != bytes(self._content[ino]):
                    out.append(p)
            return sorted(out)

    # -- the FileSystem interface ------------------------------------------------------

    def open_writable(self, path: str) -> WritableFile:
        return self._open_for_append(path, truncate=True)

    def open_appendable(self, path: str) -> WritableFile:
        return self._open_for_append(path, truncate=False)

    def _open_for_append(self, path: str, truncate: bool) -> WritableFile:
        with self._lock:
            path = self._track(path)
            self._call("open", path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0), 0o644)
            ino = self._inode.get(path)
            if ino is None:
                ino = self._new_inode(path)
                self._dir_changed(os.path.dirname(path))
            elif truncate:
                del self._content[ino][:]  # same inode; until a sync, the old bytes stay durable
            return _FaultWritableFile(self, path, fd, ino, self.generation)

    def open_random(self, path: str) -> RandomAccessFile:
        with self._lock:
            path = self._track(path)
            self._call("open", path)
            return _FaultRandomAccessFile(self, path, os.open(path, os.O_RDONLY))

    def read_file(self, path: str) -> bytes:
        path = self._track(path)
        self._call("read", path)
        return super().read_file(path)

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            src, dst = self._track(src), self._track(dst)
            self._call("rename", src)
            if os.path.isdir(src):
                self._rename_dir(src, dst)
                return
            os.replace(src, dst)
            ino = self._inode.pop(src, None)
            self._inode.pop(dst, None)
            if ino is None:  # a file this object does not know: adopt it as it is now
                with open(dst, "rb") as f:
                    ino = self._new_inode(dst, f.read())
            self._inode[dst] = ino
            for d in {os.path.dirname(src), os.path.dirname(dst)}:
                self._dir_changed(d)

    def _rename_dir(self, src: str, dst: str) -> None:
        """A directory renamed (a checkpoint's staging directory): its files keep their inodes and its model under
        the new name.  The model holds no entries for directories themselves, so the rename itself counts as
        durable at once: this serves tests of failures, not of crashes, around a directory's rename."""
        os.replace(src, dst)
        inside = src + os.sep
        for p in [p for p in self._inode if p.startswith(inside)]:
            self._inode[dst + p[len(src) :]] = self._inode.pop(p)
        for table in (self._dirs, self._dir_changes):
            for d in [d for d in table if d == src or d.startswith(inside)]:
                table[dst + d[len(src) :]] = table.pop(d)  # type: ignore[index]

    def link(self, src: str, dst: str) -> None:
        with self._lock:
            src, dst = self._track(src), self._track(dst)
            self._call("link", dst)
            os.link(src, dst)
            ino = self._inode.get(src)
            if ino is None:  # a file this object does not know: adopt it as it is now, as durable
                with open(src, "rb") as f:
                    ino = self._new_inode(src, f.read())
                self._synced[ino] = bytes(self._content[ino])
            self._inode[dst] = ino
            self._dir_changed(os.path.dirname(dst))

    def remove(self, path: str) -> None:
        with self._lock:
            path = self._track(path)
            self._call("remove", path)
            os.remove(path)
            self._inode.pop(path, None)
            self._dir_changed(os.path.dirname(path))

    def sync_dir(self, path: str) -> None:
        with self._lock:
            d = os.path.normpath(path)
            self._adopt(d)
            self._call("sync_dir", d)
            self._dirs[d] = self._names(d)
            self._dir_changes.pop(d, None)


class _FaultWritableFile:
    __slots__ = ("_fd", "_fs", "_generation", "_ino", "path")

    def __init__(self, fs: FaultFS, path: str, fd: int, ino: int, generation: int) -> None:
        self._fs = fs
        self.path = path
        self._fd = fd
        self._ino = ino
        self._generation = generation

    def _check(self) -> None:
        if self._fd < 0:
            raise ValueError(f"{self.path}: I/O operation on closed file")
        if self._generation != self._fs.generation:
            raise RuntimeError(f"{self.path}: file used after a simulated crash")

    def append(self, data: bytes) -> None:
        self._check()
        fs = self._fs
        try:
            fs._call("write", self.path)
        except OSError:
            data = data[: len(data) // 2]  # a short write: part of the data reached the file
            self._write(data)
            raise
        self._write(data)

    def _write(self, data: bytes) -> None:
        with self._fs._lock:
            os.write(self._fd, data)
            self._fs._content[self._ino] += data

    def flush(self) -> None:
        self._check()

    def sync(self) -> None:
        self._check()
        self._fs._call("sync", self.path)
        self._fs._sync_file(self._ino)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _FaultRandomAccessFile:
    __slots__ = ("_fd", "_fs", "_size", "path")

    def __init__(self, fs: FaultFS, path: str, fd: int) -> None:
        self._fs = fs
        self.path = path
        self._fd = fd
        self._size = os.fstat(fd).st_size

    def pread(self, offset: int, size: int) -> bytes:
        self._fs._call("read", self.path)
        return os.pread(self._fd, size, offset)

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()
