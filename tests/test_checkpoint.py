"""`DB.checkpoint`: a copy of an open store in a new directory, whole or absent, independent once made."""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from faultfs import FaultFS
from faultworkload import Cut, PowerCuts
from storeutil import check_invariants, fast_tmp_dir, small_options

import minilsm
from minilsm.checkpoint import STAGING_SUFFIX
from minilsm.fs import FileLock, FileSystem


def _load(db: minilsm.DB, n: int, tag: bytes = b"v") -> dict[bytes, bytes]:
    model = {b"k%05d" % i: tag + b"%d" % i for i in range(n)}
    for k, v in model.items():
        db.put(k, v)
    return model


def test_a_checkpoint_holds_every_acknowledged_write_and_nothing_after(db_path: str) -> None:
    target = db_path + "-copy"
    with minilsm.DB(db_path, **small_options()) as db:
        model = _load(db, 1500)
        db.delete(b"k00007")
        del model[b"k00007"]
        db.put(b"unflushed", b"in the memtable")  # the checkpoint flushes it first
        model[b"unflushed"] = b"in the memtable"
        with db.snapshot():
            db.checkpoint(target)
        db.put(b"after", b"x")
        for k in list(model)[:700]:
            db.delete(k)
        db.compact_range()  # deletes the tables the checkpoint linked: its names keep them
        assert b"after" in db and len(list(db)) == len(model) - 700 + 1
    with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
        assert dict(copy.iterator()) == model
        check_invariants(copy)
        copy.put(b"only in the copy", b"y")
        copy.compact_range()
    assert minilsm.check_store(target).ok
    with minilsm.DB(db_path, **small_options()) as db:
        assert b"only in the copy" not in db and b"after" in db


def test_tables_are_hard_linked_not_copied(db_path: str) -> None:
    target = db_path + "-copy"
    with minilsm.DB(db_path, **small_options()) as db:
        _load(db, 500)
        db.checkpoint(target)
        tables = [n for n in os.listdir(target) if n.endswith(".sst")]
        assert tables and {n for n in os.listdir(db_path) if n.endswith(".sst")} >= set(tables)
        for n in tables:
            assert os.stat(f"{target}/{n}").st_ino == os.stat(f"{db_path}/{n}").st_ino


class _NoLinks(FaultFS):
    """A file system where `link(2)` fails as it does across file systems, so the tables are copied (through
    FaultFS, so that the failure sweep below can fail each call of the copy too)."""

    def link(self, src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link", src)


def test_where_a_link_cannot_be_made_the_tables_are_copied(db_path: str) -> None:
    target = db_path + "-copy"
    with minilsm.DB(db_path, **small_options(fs=_NoLinks())) as db:
        model = _load(db, 500)
        db.checkpoint(target)
    tables = [n for n in os.listdir(target) if n.endswith(".sst")]
    assert tables and all(os.stat(f"{target}/{n}").st_nlink == 1 for n in tables)
    with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
        assert dict(copy.iterator()) == model


class _CompactsAtFirstLink(FileSystem):
    """Runs a full compaction of `db` just before the first link a checkpoint makes."""

    db: minilsm.DB | None = None

    def link(self, src: str, dst: str) -> None:
        db, self.db = self.db, None
        if db is not None:
            db.compact_range()  # replaces, and would delete, every table the checkpoint is about to link
        super().link(src, dst)


def test_a_compaction_during_the_checkpoint_deletes_none_of_its_tables(db_path: str) -> None:
    fs = _CompactsAtFirstLink()
    target = db_path + "-copy"
    with minilsm.DB(db_path, **small_options(fs=fs)) as db:
        model = _load(db, 1000)
        model.update(_load(db, 300, b"newer"))  # versions for the compaction to drop
        fs.db = db
        db.checkpoint(target)
        assert fs.db is None  # the compaction ran
    with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
        assert dict(copy.iterator()) == model
        check_invariants(copy)


@pytest.mark.parametrize("existing", ["file", "empty dir", "store"])
def test_an_existing_target_is_refused_and_left_as_it_was(
    db_path: str, tmp_path: os.PathLike[str], existing: str
) -> None:
    target = os.path.join(tmp_path, "target")
    if existing == "file":
        with open(target, "wb") as f:
            f.write(b"mine")
    elif existing == "empty dir":
        os.mkdir(target)
    with minilsm.DB(db_path, **small_options()) as db:
        _load(db, 100)
        if existing == "store":
            db.checkpoint(target)
            before = sorted(os.listdir(target))
        with pytest.raises(minilsm.ExistsError, match="target"):
            db.checkpoint(target)
        db.put(b"still", b"writable")
    if existing == "file":
        with open(target, "rb") as f:
            assert f.read() == b"mine"
    elif existing == "empty dir":
        assert os.listdir(target) == []
    else:
        assert sorted(os.listdir(target)) == before
    assert not os.path.exists(target + STAGING_SUFFIX)


def test_a_closed_store_is_refused(db_path: str) -> None:
    db = minilsm.DB(db_path, **small_options())
    db.close()
    with pytest.raises(minilsm.ClosedError):
        db.checkpoint(db_path + "-copy")
    assert not os.path.exists(db_path + "-copy")


class _FailingLink(FileSystem):
    """`link(2)` fails with EIO at its `nth` call."""

    def __init__(self, nth: int) -> None:
        self.calls = 0
        self.nth = nth

    def link(self, src: str, dst: str) -> None:
        self.calls += 1
        if self.calls == self.nth:
            raise OSError(errno.EIO, "Input/output error", dst)
        super().link(src, dst)


def test_a_failure_midway_leaves_no_target_and_the_next_checkpoint_succeeds(db_path: str) -> None:
    target = db_path + "-copy"
    fs = _FailingLink(nth=2)
    with minilsm.DB(db_path, **small_options(fs=fs)) as db:
        model = _load(db, 1000)
        with pytest.raises(minilsm.StoreIOError, match="checkpoint") as e:
            db.checkpoint(target)
        assert target in str(e.value)
        assert not os.path.exists(target) and not os.path.exists(target + STAGING_SUFFIX)
        assert dict(db.iterator()) == model  # the store goes on
        db.checkpoint(target)
    with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
        assert dict(copy.iterator()) == model


def test_a_staging_directory_a_crash_left_is_cleared(db_path: str) -> None:
    target = db_path + "-copy"
    staging = target + STAGING_SUFFIX
    os.mkdir(staging)
    for name in ("000003.sst", "MANIFEST.tmp"):
        with open(f"{staging}/{name}", "wb") as f:
            f.write(b"half a checkpoint")
    with minilsm.DB(db_path, **small_options()) as db:
        model = _load(db, 300)
        db.checkpoint(target)
    assert not os.path.exists(staging)
    with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
        assert dict(copy.iterator()) == model


@pytest.mark.parametrize("style", ["leveled", "tiered"])
def test_checkpoints_taken_while_a_writer_and_compactions_run_are_each_a_prefix_of_the_writes(
    db_path: str, style: str
) -> None:
    # One writer puts k0, k1, ... in order while the background thread flushes and compacts; each checkpoint
    # must hold every key acknowledged before it was asked for, and then only a gapless run of later ones.
    opts = small_options(background=True, compaction_style=style)
    done = threading.Event()
    acknowledged = [0]
    with minilsm.DB(db_path, **opts) as db:

        def writer() -> None:
            i = 0
            while not done.is_set() and i < 20000:
                db.put(b"k%06d" % i, b"v" * 50)
                i += 1
                acknowledged[0] = i

        t = threading.Thread(target=writer)
        t.start()
        try:
            copies = []
            for n in range(6):
                before = acknowledged[0]
                target = f"{db_path}-copy{n}"
                db.checkpoint(target)
                copies.append((target, before))
        finally:
            done.set()
            t.join()
    for target, before in copies:
        with minilsm.DB(target, create_if_missing=False, **small_options(compaction_style=style)) as copy:
            got = list(copy.iterator(include_value=False))
            assert got == [b"k%06d" % i for i in range(len(got))] and len(got) >= before
            check_invariants(copy)


@pytest.mark.parametrize("links", [True, False])
def test_a_failure_at_any_call_of_a_checkpoint_leaves_no_target_and_loses_nothing(db_path: str, links: bool) -> None:
    # Every file system call the checkpoint makes (after its flush), failed in turn: each failure surfaces as
    # StoreIOError, leaves neither the target nor its staging directory, and the store reads and writes on.
    # Was: a failed sync of the target's parent, after the rename, raised but left the target in place.
    fs = FaultFS() if links else _NoLinks()
    with minilsm.DB(db_path, **small_options(fs=fs)) as db:
        model = _load(db, 400)
        db.flush()
        before = fs.counts.copy()
        db.checkpoint(db_path + "-dry")
        calls = fs.counts - before  # the calls of one checkpoint, by kind
        assert calls["rename"] and calls["sync_dir"] and (calls["write"] if not links else True)
        failed = 0
        for kind, count in calls.items():
            for nth in range(1, count + 1):
                target = f"{db_path}-{kind}-{nth}"
                db.flush()  # so that the checkpoint's own flush has nothing to write, as in the dry run
                fs.arm(kind, nth)
                with pytest.raises(minilsm.StoreIOError, match="checkpoint"):
                    db.checkpoint(target)
                failed += 1
                assert not os.path.exists(target) and not os.path.exists(target + STAGING_SUFFIX)
                db.put(b"k%05d" % nth, b"after %d" % nth)  # the store writes on
                model[b"k%05d" % nth] = b"after %d" % nth
        assert failed == sum(calls.values())  # the last, the sync of the target's parent, takes the target back


class _NoWayBack(FileSystem):
    """Once the target is renamed into place, the sync of its parent fails, and so does renaming it back."""

    def __init__(self, target: str) -> None:
        self.target = target

    def sync_dir(self, path: str) -> None:
        if os.path.exists(self.target) and path == os.path.dirname(self.target):
            raise OSError(errno.EIO, "Input/output error", path)
        super().sync_dir(path)

    def rename(self, src: str, dst: str) -> None:
        if src == self.target:
            raise OSError(errno.EIO, "Input/output error", src)
        super().rename(src, dst)


def test_a_target_that_cannot_be_taken_back_is_left_whole(db_path: str) -> None:
    # Its files are not removed where it stands: a power cut midway could leave a part of a copy as the target.
    target = db_path + "-copy"
    with minilsm.DB(db_path, **small_options(fs=_NoWayBack(target))) as db:
        model = _load(db, 300)
        with pytest.raises(minilsm.StoreIOError, match="checkpoint"):
            db.checkpoint(target)
    assert not os.path.exists(target + STAGING_SUFFIX)
    with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
        assert dict(copy.iterator()) == model


@pytest.mark.parametrize(
    "where",
    [
        "the store is the staging directory",
        "a directory in the store",
        "a log's name",
        "the store opened through a symlink",
    ],
)
def test_a_target_in_the_store_s_own_directory_is_refused_and_the_store_is_untouched(db_path: str, where: str) -> None:
    # Was: a store named like a staging directory lost every file to the clearing of a crash's leftovers, and a
    # target inside the store sat among its files (one named like a log made the store fail to open: replayed).
    # A store opened by a symlink's name has its directory compared by its real path, not by the names given.
    path, target = db_path, os.path.join(db_path, "backup")
    if where == "the store opened through a symlink":
        os.makedirs(db_path)
        path = db_path + "-link"
        os.symlink(db_path, path)
    elif where == "the store is the staging directory":
        target = os.path.join(os.path.dirname(db_path), "backup")
        path = target + STAGING_SUFFIX
    elif where == "a log's name":
        target = os.path.join(db_path, "999999.log")
    with minilsm.DB(path, **small_options()) as db:
        model = _load(db, 300)
        with pytest.raises(ValueError, match="the store's own directory"):
            db.checkpoint(target)
        db.put(b"still", b"writable")
        model[b"still"] = b"writable"
    assert not os.path.exists(target)
    with minilsm.DB(path, create_if_missing=False, **small_options()) as db:
        assert dict(db.iterator()) == model


def test_an_empty_target_is_refused_not_taken_for_the_working_directory(
    db_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: ExistsError naming the working directory, where `DB`, `destroy_store` and the other tools refuse an
    empty path as such (a checkpoint target read from an unset setting, say)."""
    monkeypatch.chdir(tmp_path)
    with minilsm.DB(db_path, **small_options()) as db:
        db.put(b"k", b"v")
        for empty in ("", b""):
            with pytest.raises(ValueError, match="path is empty"):
                db.checkpoint(empty)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


class _PausesTwoCheckpoints(FileSystem):
    """Holds the first checkpoint at its last sync of the staging directory (every file in place) and the second
    at its second link, each until let go, so that the second clears and refills the first's staging meanwhile."""

    def __init__(self) -> None:
        self.first: threading.Thread | None = None
        self.first_paused, self.first_go = threading.Event(), threading.Event()
        self.second_paused, self.second_go = threading.Event(), threading.Event()
        self.second_links = 0

    def sync_dir(self, path: str) -> None:
        if threading.current_thread() is self.first and path.endswith(STAGING_SUFFIX):
            self.first_paused.set()
            self.first_go.wait(10)
        super().sync_dir(path)

    def link(self, src: str, dst: str) -> None:
        if self.first is not None and threading.current_thread() is not self.first:
            self.second_links += 1
            if self.second_links == 2:
                self.second_paused.set()
                self.second_go.wait(10)
        super().link(src, dst)


def test_two_checkpoints_to_one_target_at_once_leave_it_whole(db_path: str) -> None:
    # Was: the second cleared the first's staging directory as a crash's leftovers and began to fill it; the
    # first then renamed that into place and returned, leaving a target without most of its tables.
    fs = _PausesTwoCheckpoints()
    target = db_path + "-copy"
    outcomes: dict[str, str] = {}
    with minilsm.DB(db_path, **small_options(fs=fs)) as db:
        model = _load(db, 1000)

        def checkpoint(name: str) -> None:
            try:
                db.checkpoint(target)
                outcomes[name] = "made"
            except minilsm.Error as e:
                outcomes[name] = f"{type(e).__name__}: {str(e).removeprefix(target)}"
            finally:
                if name == "second":
                    fs.second_paused.set()  # refused before its second link: nothing to wait for

        first = fs.first = threading.Thread(target=checkpoint, args=("first",))
        second = threading.Thread(target=checkpoint, args=("second",))
        first.start()
        assert fs.first_paused.wait(10)
        second.start()
        assert fs.second_paused.wait(10)
        fs.first_go.set()
        first.join()
        fs.second_go.set()
        second.join()
    with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
        assert dict(copy.iterator()) == model
        check_invariants(copy)
    assert outcomes == {
        "first": "made",
        "second": "ExistsError: : another checkpoint is being written there, in this process",
    }


def test_a_checkpoint_another_process_is_writing_to_the_target_is_left_alone(db_path: str) -> None:
    # Was: known only within a process, so a checkpoint cleared another process's staging directory as a crash's
    # leftovers and filled it, and the other then renamed a part of a copy into place.
    target = db_path + "-copy"
    staging = target + STAGING_SUFFIX
    other = (
        "import os, sys\n"
        "from minilsm.fs import DEFAULT_FS\n"
        f"os.mkdir({staging!r})\n"
        f"lock = DEFAULT_FS.lock({staging!r} + '/LOCK')\n"
        f"open({staging!r} + '/000009.sst', 'wb').write(b'its table')\n"
        "print('writing', flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(minilsm.__file__))}
    with minilsm.DB(db_path, **small_options()) as db:
        model = _load(db, 300)
        with subprocess.Popen(
            [sys.executable, "-c", other], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
        ) as proc:
            assert proc.stdout is not None and proc.stdin is not None
            try:
                assert proc.stdout.readline() == "writing\n"
                with pytest.raises(minilsm.ExistsError, match="another checkpoint is being written there, in another"):
                    db.checkpoint(target)
                assert sorted(os.listdir(staging)) == ["000009.sst", "LOCK"]  # left as the other has it
                assert not os.path.exists(target)
            finally:
                proc.stdin.close()
        # The other is gone, its lock with it: what it left is a crash's leftovers, cleared.
        db.checkpoint(target)
    assert not os.path.exists(staging)
    with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
        assert dict(copy.iterator()) == model
        check_invariants(copy)


class _AnotherCheckpointActs(FileSystem):
    """Does once what another checkpoint that held the staging directory may do between two calls of this one:
    remove the directory (it failed) or rename it into place as the target.  `when`: before this one locks the
    directory's LOCK, or under its mkdir, which meets the directory that is gone when `os.makedirs` looks again
    (it then raises FileExistsError)."""

    def __init__(self, when: str, act: str) -> None:
        self.when, self.act = when, act
        self.done = False

    def makedirs(self, path: str) -> None:
        if self.when == "under its mkdir" and path.endswith(STAGING_SUFFIX) and not self.done:
            os.mkdir(path)  # the other's
            self._act(path)
            raise FileExistsError(errno.EEXIST, "File exists", path)
        super().makedirs(path)

    def lock(self, path: str) -> FileLock:
        staging = os.path.dirname(path)
        if self.when == "before its lock" and staging.endswith(STAGING_SUFFIX) and not self.done:
            self._act(staging)
        return super().lock(path)

    def _act(self, staging: str) -> None:
        self.done = True
        if self.act == "removed":
            os.rmdir(staging)
        else:
            os.rename(staging, staging[: -len(STAGING_SUFFIX)])


@pytest.mark.parametrize("act", ["removed", "renamed into place"])
@pytest.mark.parametrize("when", ["before its lock", "under its mkdir"])
def test_a_staging_directory_another_checkpoint_takes_away_is_made_again_or_refused_as_the_target(
    db_path: str, when: str, act: str
) -> None:
    # Was, under the mkdir: StoreIOError "File exists", where the target existed (ExistsError) or nothing was in
    # the way any more.
    target = db_path + "-copy"
    fs = _AnotherCheckpointActs(when, act)
    with minilsm.DB(db_path, **small_options(fs=fs)) as db:
        model = _load(db, 300)
        if act == "removed":
            db.checkpoint(target)
        else:
            with pytest.raises(minilsm.ExistsError, match="this path exists"):
                db.checkpoint(target)
        assert fs.done
    assert not os.path.exists(target + STAGING_SUFFIX)
    if act == "removed":
        with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
            assert dict(copy.iterator()) == model


class _FailedCleanupMeetsTheNext(FileSystem):
    """The first checkpoint (thread `failer`) fails at its rename into place; once its cleanup has removed the
    staging directory's LOCK, it waits until a second checkpoint has locked a new one, filled the directory and
    reached its own rename, which waits in turn for the cleanup to end.  Listings name LOCK first, as ext4's hash
    order can (tmpfs, where the tests run, lists it last)."""

    def __init__(self) -> None:
        self.failer: threading.Thread | None = None
        self.lock_gone, self.second_at_rename, self.cleanup_done = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )

    def listdir(self, path: str) -> list[str]:
        return sorted(super().listdir(path), key=lambda name: name != "LOCK")

    def rename(self, src: str, dst: str) -> None:
        if src.endswith(STAGING_SUFFIX):
            if threading.current_thread() is self.failer:
                raise OSError(errno.EIO, "injected rename failure", dst)
            self.second_at_rename.set()
            self.cleanup_done.wait(10)
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        super().remove(path)
        if threading.current_thread() is self.failer and path.endswith(f"{STAGING_SUFFIX}/LOCK"):
            self.lock_gone.set()
            self.second_at_rename.wait(10)

    def remove_dir(self, path: str) -> None:
        try:
            super().remove_dir(path)
        finally:
            if threading.current_thread() is self.failer:
                self.cleanup_done.set()


def test_a_failed_checkpoints_cleanup_leaves_the_next_checkpoints_files_alone(db_path: str) -> None:
    # Was: the cleanup removed the staging directory's files in the order listed, LOCK among them; once LOCK was
    # gone a second checkpoint locked a new one and filled the directory, the cleanup went on to remove files of
    # that one's by the names it had listed, and the second renamed what was left into place and returned: a
    # target whose manifest was missing (seen on ext4 with three processes checkpointing to one target).
    fs = _FailedCleanupMeetsTheNext()
    target = db_path + "-copy"
    failed: list[BaseException] = []
    with minilsm.DB(db_path, **small_options(fs=fs)) as db:
        model = _load(db, 1000)

        def first() -> None:
            try:
                db.checkpoint(target)
            except minilsm.StoreIOError as e:
                failed.append(e)

        fs.failer = threading.Thread(target=first)
        fs.failer.start()
        assert fs.lock_gone.wait(10)
        db.checkpoint(target)
        fs.failer.join()
    assert len(failed) == 1 and "injected rename failure" in str(failed[0])
    assert minilsm.check_store(target).ok
    with minilsm.DB(target, create_if_missing=False, **small_options()) as copy:
        assert dict(copy.iterator()) == model
    assert not os.path.exists(target + STAGING_SUFFIX)


def test_a_target_made_while_the_checkpoint_fills_its_staging_directory_is_not_replaced(db_path: str) -> None:
    """An empty directory made at the target while the tables are linked (another program's, or a mkdir -p)
    would be replaced silently by the rename into place: the checkpoint refuses it as an existing target, leaves
    it as it is, and leaves no staging directory."""
    target = db_path + "-copy"

    class MakesTheTarget(minilsm.fs.FileSystem):
        def link(self, src: str, dst: str) -> None:
            if not os.path.exists(target):
                os.mkdir(target)
            super().link(src, dst)

    with minilsm.DB(db_path, **small_options(fs=MakesTheTarget())) as db:
        _load(db, 300)
        assert db.tables(), "no table to link: the test needs the target made meanwhile"
        with pytest.raises(minilsm.ExistsError, match="this path exists"):
            db.checkpoint(target)
    assert os.listdir(target) == [] and not os.path.exists(target + STAGING_SUFFIX)


def test_a_file_where_the_staging_directory_goes_is_named_in_the_error_and_left_alone(db_path: str) -> None:
    """A file of someone else's by the staging directory's name is in the way: the checkpoint fails at once naming
    it (File exists), leaves it as it was, and does not say another checkpoint is at work there."""
    target = db_path + "-copy"
    in_the_way = target + STAGING_SUFFIX
    Path(in_the_way).write_bytes(b"not ours")
    with minilsm.DB(db_path, **small_options()) as db:
        _load(db, 50)
        with pytest.raises(minilsm.StoreIOError, match="File exists") as e:
            db.checkpoint(target)
        assert in_the_way in str(e.value) and "another checkpoint" not in str(e.value)
    assert Path(in_the_way).read_bytes() == b"not ours" and not os.path.exists(target)


def test_a_target_in_a_directory_that_does_not_exist_is_refused(db_path: str) -> None:
    # Was: the missing directories were made and never synced, so a power cut could take away a checkpoint that
    # had returned; and a checkpoint that failed left them behind.
    parent = db_path + "-backups"
    with minilsm.DB(db_path, **small_options()) as db:
        _load(db, 100)
        with pytest.raises(minilsm.NotFoundError, match="backups"):
            db.checkpoint(os.path.join(parent, "copy"))
        db.put(b"still", b"writable")
    assert not os.path.exists(parent)


# -- power cuts during a checkpoint ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CutConfig:
    links: bool
    """Tables hard-linked, or (False) copied, as across file systems."""
    dir_ops: bool
    """`FaultFS.dir_ops`: some of a directory's unsynced changes survive the cut, in order."""
    torn: bool
    """`FaultFS.torn`: a random part of a file's unsynced appends survives the cut."""
    leftover: bool
    """A staging directory an earlier, crashed checkpoint left, for this one to clear first."""
    seed: int = 0

    def __str__(self) -> str:
        return (
            f"{'links' if self.links else 'copies'}{' dir_ops' if self.dir_ops else ''}{' torn' if self.torn else ''}"
            f"{' leftover' if self.leftover else ''} seed={self.seed}"
        )


def _open(path: str, label: str) -> minilsm.DB:
    try:
        return minilsm.DB(path, create_if_missing=False, **small_options())
    except minilsm.Error as e:
        raise AssertionError(f"{label}: {path} does not open: {e!r}") from e


def _check_cut(copy: str, model: dict[bytes, bytes], returned: bool, label: str) -> Counter[str]:
    """What a power cut left in `copy` (the directory holding the store and its checkpoint's target): the store
    whole, the target absent or whole (and present if the checkpoint had returned), and a new checkpoint to an
    absent target made in spite of what the cut left of the staging directory."""
    source, target = f"{copy}/db", f"{copy}/copy"
    checked = Counter[str]()
    if os.path.exists(target):
        try:
            report = minilsm.check_store(target)
        except minilsm.Error as e:
            raise AssertionError(f"{label}: the target is no store: {e!r}") from e
        assert report.ok, f"{label}: the target is damaged: {report}"
        with _open(target, label) as db:
            assert dict(db.iterator()) == model, f"{label}: the target holds other data than the checkpoint's"
            check_invariants(db)
        checked["target whole"] += 1
    else:
        assert not returned, f"{label}: the checkpoint returned, and the power cut took its target away"
    with _open(source, label) as db:
        assert dict(db.iterator()) == model, f"{label}: the store lost acknowledged writes"
        if not os.path.exists(target):
            checked["staging left"] += os.path.exists(target + STAGING_SUFFIX)
            db.checkpoint(target)
            assert not os.path.exists(target + STAGING_SUFFIX)
            with _open(target, label) as again:
                assert dict(again.iterator()) == model, f"{label}: the next checkpoint holds other data"
            checked["target absent, made again"] += 1
    return checked


@dataclass(frozen=True)
class Failure:
    """One call of a checkpoint, to fail."""

    number: int
    """Its number among the checkpoint's calls, reads not counted (as `PowerCuts` numbers them)."""
    kind: str
    nth: int
    """Its number among the checkpoint's calls of its kind (as `FaultFS.arm` counts)."""
    path: str


def _failures(cuts: list[Cut]) -> list[Failure]:
    """Every call that `cuts`, taken before every call of a checkpoint (reads aside), were taken before."""
    seen = Counter[str]()
    out = []
    for cut in cuts:
        seen[cut.kind] += 1
        out.append(Failure(cut.number, cut.kind, seen[cut.kind], cut.path))
    return out


_LEFTOVER = ("000905.sst", "000909.log", "MANIFEST")
"""What a crashed checkpoint left in its staging directory, for `CutConfig.leftover`: names the store's own calls
never remove, so that a removal of one is the clearing of the leftovers."""


def _cut_sweep(root: str, cfg: CutConfig, fail: Failure | None = None) -> tuple[Counter[str], list[Cut]]:
    """One checkpoint of a store of several tables and a memtable, with a copy of what a power cut would leave of
    the directory holding both taken before every call it makes (`PowerCuts`) and once it has returned (or raised);
    each copy checked by `_check_cut`.  With `fail`, that call fails, and the copies are taken from the next call
    on (before it, the run is the one without a failure).  Returns what was checked, and the cuts."""
    parent = f"{root}/parent"
    os.makedirs(parent)
    source, target = f"{parent}/db", f"{parent}/copy"
    if cfg.leftover:
        os.mkdir(target + STAGING_SUFFIX)
        for name in _LEFTOVER:
            with open(f"{target}{STAGING_SUFFIX}/{name}", "wb") as f:
                f.write(b"half a checkpoint")
    fs = (FaultFS if cfg.links else _NoLinks)(dir_ops=cfg.dir_ops, torn=cfg.torn, seed=cfg.seed)
    with minilsm.DB(source, **small_options(fs=fs)) as db:
        model = _load(db, 600)
        for i in range(5):  # left in the memtable for the checkpoint to flush; synced, so every write is durable
            db.put(b"memtable%d" % i, b"m", sync=True)
            model[b"memtable%d" % i] = b"m"
        assert len(db.version.numbers()) >= 4
        power = PowerCuts(fs, parent, f"{root}/cuts", None if fail is None else range(fail.number + 1, sys.maxsize))
        returned = True
        if fail is not None:
            fs.arm(fail.kind, fail.nth)
        try:
            db.checkpoint(target)
        except minilsm.StoreIOError:
            if fail is None:
                raise
            returned = False  # a failed removal of garbage (after the checkpoint's flush) raises nothing
        fs.on_call = None
        after = f"{root}/cuts/after"
        fs.copy_durable(parent, after)
    if fail is None:
        kinds = {kind for kind, _ in power.calls}
        assert {"rename", "sync_dir", "mkdir", "link" if cfg.links else "write"} <= kinds, power.calls
        cleared = {name for kind, name in power.calls if kind == "remove"} & set(_LEFTOVER)
        assert cleared == (set(_LEFTOVER) if cfg.leftover else set()), power.calls
    else:
        failed = os.path.basename(fs.faults[0].path) if fs.faults else None
        assert failed == os.path.basename(fail.path), f"{cfg}: {fail} is not the call that failed"
    label = f"{cfg}{f', {fail.kind} #{fail.nth} failed' if fail else ''}"
    checked = Counter[str]()
    for cut in power.cuts:
        checked += _check_cut(cut.copy, model, False, f"{label}: {cut.label(power.number)}")
        shutil.rmtree(cut.copy)
    checked += _check_cut(
        after, model, returned, f"{label}: cut once the checkpoint {'returned' if returned else 'raised'}"
    )
    checked["cut points"] = len(power.cuts) + 1
    return checked, power.cuts


@pytest.fixture
def tmp() -> Iterator[str]:
    """A scratch directory in RAM where possible: a sweep writes a copy of two stores per cut point."""
    with fast_tmp_dir() as d:
        yield d


@pytest.mark.parametrize(
    "cfg",
    [
        CutConfig(links=True, dir_ops=False, torn=False, leftover=True),
        CutConfig(links=True, dir_ops=True, torn=False, leftover=False),
        CutConfig(links=False, dir_ops=True, torn=True, leftover=False),
    ],
    ids=str,
)
def test_a_power_cut_at_any_call_of_a_checkpoint_leaves_the_store_and_no_target_or_a_whole_one(
    tmp: str, cfg: CutConfig
) -> None:
    checked, cuts = _cut_sweep(f"{tmp}/run", cfg)
    print(f"{cfg}: {dict(checked)}")
    assert checked["target whole"] and checked["target absent, made again"]
    # The target's parent fails to sync, so the checkpoint takes the target back, and the power goes meanwhile.
    # Was: the target's files were removed one by one where it stood, and a journaling file system that had
    # committed the rename and some of the removals left a part of a copy as the target.
    (last,) = (f for f in _failures(cuts) if f.kind == "sync_dir" and os.path.basename(f.path) == "parent")
    checked, _ = _cut_sweep(f"{tmp}/failed", cfg, last)
    print(f"{cfg}, the parent's sync failed: {dict(checked)}")


# -- --slow: every configuration, and a power cut after a failure at any call --------------------------------------

SLOW = [
    CutConfig(links, dir_ops, torn, leftover, seed)
    for links, dir_ops, torn, leftover in itertools.product((True, False), repeat=4)
    for seed in ((1, 2, 3) if dir_ops or torn else (0,))
]


@pytest.mark.slow
@pytest.mark.parametrize("cfg", SLOW, ids=str)
def test_a_power_cut_at_any_call_of_a_checkpoint_in_every_configuration(tmp: str, cfg: CutConfig) -> None:
    checked, _ = _cut_sweep(f"{tmp}/run", cfg)
    print(f"{cfg}: {dict(checked)}")


@pytest.mark.slow
@pytest.mark.parametrize(
    "cfg",
    [
        CutConfig(links=True, dir_ops=True, torn=False, leftover=True, seed=4),
        CutConfig(links=False, dir_ops=True, torn=True, leftover=True, seed=5),
    ],
    ids=str,
)
def test_a_failure_at_any_call_of_a_checkpoint_then_a_power_cut_at_any_later_one(tmp: str, cfg: CutConfig) -> None:
    total = Counter[str]()
    _, cuts = _cut_sweep(f"{tmp}/dry", cfg)
    for fail in _failures(cuts):
        checked, _ = _cut_sweep(f"{tmp}/{fail.number}", cfg, fail)
        shutil.rmtree(f"{tmp}/{fail.number}")
        total += checked
        total["failures"] += 1
    print(f"{cfg}: {dict(total)}")
    assert total["failures"] == len(cuts)
