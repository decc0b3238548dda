"""`FaultFS`: a `FileSystem` that remembers what was made durable, fails chosen calls, and can "crash".

Modelled on LevelDB's ``FaultInjectionTestEnv`` and RocksDB's
``FaultInjectionTestFS``.  Files live on the real disk (so the store runs its
real code paths, and a test can look at the directory), and beside them the
file system keeps the model a power cut would apply:

* per file (per *inode*, so that renames carry it along): its content as of
  its last ``sync``.  Nothing is ever really fsynced, which keeps the tests fast;
* per directory (per inode too, so that a directory renamed, or removed and
  made again under the same name, keeps its own model): the names it held, and
  which inode each named, as of its last ``sync_dir``.  A creation, rename or
  removal is durable only after that: of a file (``open_writable``, ``link``,
  ``rename``, ``remove``) and of a directory alike (``makedirs``, ``rename``,
  ``remove_dir``), as POSIX has it: a directory's own name lives in its parent,
  and only an fsync of the parent makes a new, renamed or removed name survive
  (ext4 commits them on its own schedule; nothing promises when).  What a
  directory holds is its own: a directory whose name a crash takes back keeps
  its files under the name it goes back to.

`crash` rewrites the directories to the durable model: unsynced appends vanish
(or, with ``torn=True``, a random prefix of them survives, as a torn write
would leave), files and directories whose creation was never made durable
vanish (a directory with everything in it), and unsynced renames and removals
are undone (a directory comes back, or goes back to its old name, with what it
durably held).  With ``dir_ops=True`` they may not all be:
a random number of a directory's changes since its last ``sync_dir`` survive,
in order, as a journaling file system, committing metadata on its own schedule,
may leave them (a store must not count on an unsynced removal staying undone).
Each directory's changes are drawn on their own, so a rename between two
directories may survive in one and not the other: a file then has both names
(as a hard link) or neither, and a directory keeps the first of them only (a
directory cannot have two) or vanishes with all it holds.  POSIX leaves that
open; ext4, XFS and btrfs journal a rename whole, so there it cannot happen.
Files and directories the store did not create through this object (found in a
directory the first time it is used) count as durable, and a directory found so
is left as it is, its contents unread until it is used itself; names that
appear behind the model's back are left alone.

`arm` makes the Nth later call of one kind fail with an `OSError` (EIO, ENOSPC,
...), once or, with ``sticky=True``, from then on (a full disk).  The kinds are
``open`` (open_writable/open_appendable/open_random), ``write`` (append),
``sync`` (file fsync), ``sync_dir``, ``rename``, ``remove``, ``read`` (pread,
read_file), ``link`` (a hard link: a second name for the same inode),
``mkdir`` (makedirs) and ``rmdir`` (remove_dir).  A
failed append first writes half of its bytes, as a short write on a filling
disk does.  `counts` tallies every call by kind, so a dry run
says how many failure points a workload has.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import tempfile
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from minilsm.fs import FileSystem, RandomAccessFile, WritableFile

STORE_KINDS = ("open", "write", "sync", "sync_dir", "rename", "remove", "read")
"""The kinds of call a store makes as it runs (besides one ``mkdir``, for a new store's directory); a checkpoint
also makes ``link``, ``mkdir`` and ``rmdir``."""
KINDS = (*STORE_KINDS, "link", "mkdir", "rmdir")


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
        self._inode: dict[str, int] = {}  # current path -> inode, of every file and directory the model knows
        self._directories: set[int] = set()  # the inodes that are directories
        self._content: dict[int, bytearray] = {}  # file inode -> current bytes (what the page cache holds)
        self._synced: dict[int, bytes] = {}  # file inode -> bytes as of its last sync
        # Directory inode -> {name: inode} as of its last sync_dir, for the directories whose contents the model
        # follows (made through it, or used); a directory only found in another has its name in that one alone.
        self._dirs: dict[int, dict[str, int]] = {}
        self._dir_changes: dict[int, list[dict[str, int]]] = {}  # directory inode -> {name: inode} after each change
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
        """Normalize `path` (absolute: the model is keyed by path), adopting its directory (see `_adopt`)."""
        path = os.path.abspath(path)
        self._adopt(os.path.dirname(path))
        return path

    def _adopt(self, d: str) -> None:
        """The first time directory `d` is used, take what it holds as durable: its files, read now, and its
        subdirectories, by name only (each is read when it is used itself).  A `d` that is no directory is left
        unknown."""
        ino = self._inode.get(d)
        if (ino is not None and ino in self._dirs) or not os.path.isdir(d):
            return
        names: dict[str, int] = {}
        for name in os.listdir(d):
            p = os.path.join(d, name)
            known = self._inode.get(p)  # a subdirectory used before this directory was
            if known is not None:
                names[name] = known
            elif os.path.isdir(p):
                names[name] = self._new_dir(p)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    data = f.read()
                names[name] = self._new_inode(p, data)
                self._synced[names[name]] = data
        self._dirs[self._new_dir(d) if ino is None else ino] = names

    def _new_inode(self, path: str, data: bytes = b"") -> int:
        """A new file at `path`, holding `data`."""
        self._next_inode += 1
        ino = self._next_inode
        self._inode[path] = ino
        self._content[ino] = bytearray(data)
        return ino

    def _new_dir(self, path: str) -> int:
        """A new directory at `path`; its contents are followed once it is in `_dirs`."""
        self._next_inode += 1
        ino = self._next_inode
        self._inode[path] = ino
        self._directories.add(ino)
        return ino

    def _names(self, d: str) -> dict[str, int]:
        return {os.path.basename(p): ino for p, ino in self._inode.items() if os.path.dirname(p) == d}

    def _dir_changed(self, d: str) -> None:
        """Note a creation, rename or removal in directory `d` (only needed with `dir_ops`)."""
        if self.dir_ops:
            self._dir_changes.setdefault(self._inode[d], []).append(self._names(d))

    def _durable_names(self, ino: int) -> dict[str, int]:
        """The names a power cut now would leave in directory `ino`: as of its last sync_dir, or with `dir_ops`
        as after a random number of the changes since (in order, as a journaling file system commits them)."""
        changes = self._dir_changes.get(ino)
        if self.dir_ops and changes:
            k = self._rng.randint(0, len(changes))
            if k:
                return changes[k - 1]
        return self._dirs[ino]

    def _dirs_on_disk(self) -> dict[int, str]:
        """Every directory whose contents the model follows, and which is on disk now: inode -> path."""
        return {ino: p for p, ino in self._inode.items() if ino in self._dirs and os.path.isdir(p)}

    def _placement(self, tops: dict[int, str], durable: dict[int, dict[str, int]]) -> dict[int, str]:
        """Where a power cut now leaves each directory under `tops` (inode -> path, which they keep): where the
        durable names of the directory above put it, parents first.

        `durable` (directory inode -> {name: inode}) holds `_durable_names` drawn so far, and gets those of each
        directory reached that it lacks.  A directory out of reach of those names vanishes, with all it holds.
        One with two durable names (a rename between two directories, each made durable apart) keeps the first.
        """
        place: dict[int, str] = {}
        queue = deque(tops.items())
        while queue:
            ino, d = queue.popleft()
            if ino in place:
                continue
            place[ino] = d
            if ino not in durable:
                durable[ino] = self._durable_names(ino)
            queue.extend((sub, os.path.join(d, name)) for name, sub in durable[ino].items() if sub in self._dirs)
        return place

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
        """Write each of the `durable` names (name -> inode) that is a file into directory `dst`, with its durable
        bytes (a subdirectory is the caller's).  Returns how many unsynced bytes were left out.
        """
        dropped = 0
        for name, ino in durable.items():
            if ino in self._directories:
                continue
            data = self._durable_bytes(ino)
            dropped += max(0, len(self._content[ino]) - len(data))
            with open(os.path.join(dst, name), "wb") as f:
                f.write(data)
        return dropped

    def crash(self) -> dict[str, int]:
        """Reduce every tracked directory to its durable state, as a power cut would; disarm.

        Call it only once the store using this file system has stopped touching
        it.  Returns counts of what was lost: unsynced bytes dropped, files and
        directories that vanished from a directory, and names reverted to an
        older file or directory.
        """
        with self._lock:
            self._armed = None
            durable = {ino: self._durable_names(ino) for ino in self._dirs}
            now = self._dirs_on_disk()
            lost = Counter[str]()
            for ino, d in now.items():
                current = self._names(d)
                for name, sub in current.items():
                    if name not in durable[ino]:
                        lost["dirs_vanished" if sub in self._directories else "files_vanished"] += 1
                lost["names_reverted"] += sum(current.get(name) != sub for name, sub in durable[ino].items())
            # The directories whose own directory the model does not follow stay where they are: the roots.
            followed = set(now.values())
            roots = {ino: d for ino, d in now.items() if os.path.dirname(d) not in followed}
            place = self._placement(roots, durable)
            # Every directory the cut puts elsewhere, or nowhere, first waits in a scratch directory in its root,
            # the deepest first, so that each has left its parent before the parent moves; then each goes to its
            # place, parents first, and what is left waiting vanishes.
            holds: dict[str, str] = {}  # root -> its scratch directory
            held: dict[int, str] = {}  # directory inode -> where it waits
            for ino, d in sorted(now.items(), key=lambda item: item[1].count(os.sep), reverse=True):
                if place.get(ino) != d:
                    root = next(r for r in roots.values() if d.startswith(r + os.sep))
                    if root not in holds:
                        holds[root] = tempfile.mkdtemp(prefix=".faultfs-crash-", dir=root)
                    held[ino] = os.path.join(holds[root], str(ino))
                    os.rename(d, held[ino])
            for ino, d in place.items():
                if ino in held:
                    os.rename(held[ino], d)
                elif ino not in now:
                    os.mkdir(d)  # its removal undone: what it durably held is written below
                current = self._names(now[ino]) if ino in now else {}
                for name, sub in current.items():
                    if sub not in self._directories and durable[ino].get(name) != sub:
                        os.remove(os.path.join(d, name))
                lost["bytes_dropped"] += self._write_durable(durable[ino], d)
            for hold in holds.values():
                shutil.rmtree(hold)
            # Start over: what is on disk now is, by definition, durable.
            self.generation += 1
            self._inode.clear()
            self._directories.clear()
            self._content.clear()
            self._synced.clear()
            self._dirs.clear()
            self._dir_changes.clear()
            return dict(lost)

    def copy_durable(self, d: str, dst: str) -> None:
        """Write into a new directory `dst` what a power cut now would leave of directory `d` (as `crash` would,
        torn or not), while `d` and the model stay as they are and the store using them runs on.

        A copy taken at every call (`on_call`) tests a power cut at every moment of one run.  `dst` holds no
        file if `d` has no durable name yet (never used, or not yet synced).  `d`'s own name is taken as it is:
        copy the directory above it to see whether a power cut would keep that.
        """
        with self._lock:
            os.makedirs(dst)
            ino = self._inode.get(os.path.abspath(d))
            if ino is None or ino not in self._dirs:
                return
            durable: dict[int, dict[str, int]] = {}
            for sub, path in self._placement({ino: dst}, durable).items():
                if sub != ino:
                    os.mkdir(path)
                self._write_durable(durable[sub], path)
                for name, found in durable[sub].items():
                    if found in self._directories and found not in self._dirs:  # found there, never used: as it is
                        shutil.copytree(next(p for p, i in self._inode.items() if i == found), f"{path}/{name}")

    def unsynced_files(self) -> list[str]:
        """Paths (of files and directories) whose content or directory entry would change in a crash now (for
        tests of this class)."""
        with self._lock:
            out = []
            for p, ino in self._inode.items():
                parent = self._inode.get(os.path.dirname(p))
                if parent is None or parent not in self._dirs:
                    continue  # a root: not the model's to change
                if self._dirs[parent].get(os.path.basename(p)) != ino or (
                    ino in self._content and self._synced.get(ino) != bytes(self._content[ino])
                ):
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

    def read_file_and_hole(self, path: str) -> tuple[bytes, int]:
        path = self._track(path)
        self._call("read", path)
        return super().read_file_and_hole(path)

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            src, dst = self._track(src), self._track(dst)
            self._call("rename", src)
            if os.path.isdir(src):
                self._rename_dir(src, dst)
            else:
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
        """A directory renamed (a checkpoint's staging directory): it keeps its inode, and so its model, and so
        does everything in it, under the new name."""
        self._adopt(src)  # from now on its contents are followed, as they are now
        os.replace(src, dst)
        self._inode.pop(dst, None)  # an empty directory that the rename replaced
        inside = src + os.sep
        for p in [p for p in self._inode if p == src or p.startswith(inside)]:
            self._inode[dst + p[len(src) :]] = self._inode.pop(p)

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

    def makedirs(self, path: str) -> None:
        with self._lock:
            path = os.path.abspath(path)
            new = []  # the directories this makes, the deepest first
            d = path
            while not os.path.lexists(d):
                new.append(d)
                d = os.path.dirname(d)
            if new:
                self._adopt(d)
            self._call("mkdir", path)
            os.makedirs(path, exist_ok=True)
            for d in reversed(new):
                self._dirs[self._new_dir(d)] = {}  # nothing in it is durable yet, and its own name not either
                self._dir_changed(os.path.dirname(d))

    def remove_dir(self, path: str) -> None:
        with self._lock:
            path = self._track(path)
            self._call("rmdir", path)
            self._adopt(path)  # so that a crash that undoes the removal brings it back with what it durably held
            os.rmdir(path)
            self._inode.pop(path, None)
            self._dir_changed(os.path.dirname(path))

    def sync_dir(self, path: str) -> None:
        with self._lock:
            d = os.path.abspath(path)
            self._adopt(d)
            self._call("sync_dir", d)
            ino = self._inode.get(d)
            if ino is None or ino not in self._dirs:
                raise FileNotFoundError(errno.ENOENT, "No such directory", d)
            self._dirs[ino] = self._names(d)
            self._dir_changes.pop(ino, None)


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
