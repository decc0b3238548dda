"""`repair_store` (``minilsm repair``): a store that does not open is rebuilt from what can still be read;
and `destroy_store`, which removes one.

A healthy store comes back exactly as it was; a lost or damaged manifest costs nothing when the tables and
logs are whole; a damaged block or table costs exactly its own versions (an older version of those keys,
read elsewhere, comes back in their place); a crash mid-repair leaves the store as it was.  What a repair
of every damaged byte of a small store gives is in test_corruption.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from storeutil import fast_tmp_dir, flip_byte, forge_block, small_options

import minilsm
from minilsm.check import check_store
from minilsm.cli import EXIT_ERROR, EXIT_NEGATIVE, EXIT_OK, main
from minilsm.destroy import destroy_store
from minilsm.repair import LOST_DIR, repair_store
from minilsm.sstable import TableReader
from minilsm.stats import Stats
from minilsm.wal import HEADER_SIZE, read_log


@pytest.fixture
def path() -> Iterator[str]:
    with fast_tmp_dir() as d:
        yield os.path.join(d, "db")


def history(path: str, rng: random.Random, steps: int = 1500) -> dict[bytes, bytes]:
    """Puts, overwrites and deletes over several levels, then some writes left in the log; the model."""
    model: dict[bytes, bytes] = {}
    with minilsm.DB(path, **small_options()) as db:
        for i in range(steps):
            k = b"k%04d" % rng.randrange(steps // 3)
            if rng.random() < 0.2:
                db.delete(k)
                model.pop(k, None)
            else:
                model[k] = b"v%d." % i * rng.randrange(1, 20)
                db.put(k, model[k])
    with minilsm.DB(path, **small_options(memtable_size=1 << 20)) as db:  # these stay in the log
        for i in range(20):
            k = b"k%04d" % rng.randrange(steps // 3)
            model[k] = b"late%d" % i
            db.put(k, model[k])
    return model


def contents(path: str, **kw: object) -> dict[bytes, bytes]:
    with minilsm.DB(path, **small_options(**kw)) as db:
        return dict(db.iterator())


def store_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith((".sst", ".log")))


def test_a_healthy_store_comes_back_as_it_was(path: str) -> None:
    model = history(path, random.Random(1))
    with minilsm.DB(path, **small_options()) as db:
        assert db.version.bottom_level_with_data() >= 2  # the premise: tables over several levels
        db.put(b"in the log", b"too")
    model[b"in the log"] = b"too"
    before = store_files(path)
    report = repair_store(path, **small_options())
    assert report.ok and report.manifest == "read" and report.findings == [] and report.moved == []
    assert report.keys_kept == len(model) and report.log_records_read == 1 and report.tables_read >= 3
    after = store_files(path)
    assert not set(before) & set(after), "the old tables and logs are gone, their versions rewritten"
    assert len([n for n in after if n.endswith(".log")]) == 1  # the new, empty one the manifest names
    assert not os.path.exists(os.path.join(path, LOST_DIR))
    assert contents(path) == model
    # New writes come after every version kept: a put now wins over all of them, through a reopen.
    key = next(iter(model))
    with minilsm.DB(path, **small_options()) as db:
        db.put(key, b"after the repair")
        db.compact_range()
    assert contents(path)[key] == b"after the repair"


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_lost_or_damaged_manifest_costs_nothing_when_the_rest_is_whole(path: str, damage: str) -> None:
    model = history(path, random.Random(2))
    manifest = os.path.join(path, "MANIFEST")
    if damage == "missing":
        os.remove(manifest)
    else:
        with open(manifest, "r+b") as f:
            f.write(b"\x00" * 40)
    with pytest.raises(minilsm.CorruptionError):
        minilsm.DB(path, **small_options())
    report = repair_store(path, **small_options())
    assert [f.file for f in report.findings] == ["MANIFEST"] and not report.ok
    assert report.moved == ([] if damage == "missing" else ["MANIFEST"])  # the damaged bytes kept, in lost/
    assert os.path.exists(os.path.join(path, LOST_DIR, "MANIFEST")) == (damage == "garbage")
    assert contents(path) == model


def bottom_tables(path: str) -> list[tuple[str, TableReader]]:
    fs = minilsm.Options().fs
    out = []
    for name in store_files(path):
        if name.endswith(".sst"):
            out.append((name, TableReader.open(fs, path, int(name[:-4]), Stats())))
    return out


MODEL = {b"k%04d" % i: b"v%d" % i * 7 for i in range(600)}


def one_version_a_key(path: str) -> tuple[str, set[bytes], int, int]:
    """A store of `MODEL`, one version a key, each in one table: the second table's name, the keys of its second
    data block, and that block's offset and size (with its trailer)."""
    with minilsm.DB(path, **small_options()) as db:
        for k, v in MODEL.items():
            db.put(k, v)
        db.compact_range()
    name, reader = bottom_tables(path)[1]
    keys = {k for k, _, _ in reader.block_entries(1)}
    offset, size = reader._offsets[1], reader._sizes[1]
    reader.close()
    return name, keys, offset, size


def test_a_damaged_block_costs_its_own_versions_and_no_more(path: str) -> None:
    """The keys of the damaged block go, every other key stays exact."""
    name, gone, offset, _ = one_version_a_key(path)
    flip_byte(os.path.join(path, name), offset + 5)
    report = repair_store(path, **small_options())
    assert [f.file for f in report.findings] == [name]
    assert f"data block at offset {offset}: checksum mismatch" in report.findings[0].message
    assert report.moved == [name] and os.path.exists(os.path.join(path, LOST_DIR, name))
    assert contents(path) == {k: v for k, v in MODEL.items() if k not in gone} and gone


@pytest.mark.parametrize("forgery", ["order", "kind", "behind"])
def test_a_block_forged_with_a_valid_checksum_costs_its_own_versions_and_no_more(path: str, forgery: str) -> None:
    """Was: ValueError from the table builder, and no repair.  A block resealed after its first key was raised past
    the next (order), its first version given an unknown kind (kind), or its first key lowered below the block
    before it (behind) is damage like any other: reported, its versions skipped, the rest kept exact."""
    name, gone, offset, size = one_version_a_key(path)

    def forge(block: bytearray) -> None:  # the first entry: key_len u32 | value_len u32 | trailer u64 | key | value
        if forgery == "kind":
            block[8] = 7
        else:  # past every key of the block, or before every key of the table
            block[16:21] = b"k9999" if forgery == "order" else b"k0000"

    forge_block(os.path.join(path, name), offset, size, forge)
    report = repair_store(path, **small_options())
    assert [f.file for f in report.findings] == [name]
    detail = {"order": "follows", "kind": "unknown kind 7", "behind": "follows"}[forgery]
    assert f"data block 1 at offset {offset}: " in report.findings[0].message
    assert detail in report.findings[0].message
    assert contents(path) == {k: v for k, v in MODEL.items() if k not in gone} and gone


def test_a_table_that_cannot_be_opened_is_skipped_whole_and_an_older_version_takes_its_place(path: str) -> None:
    with minilsm.DB(path, **small_options()) as db:
        for i in range(300):
            db.put(b"k%04d" % i, b"old")
        db.compact_range()
        db.put(b"k0007", b"new")
        db.put(b"k0008", b"new")
        db.flush()  # a level-0 table holding the two newest versions
        newest = max(db.version.numbers())
    name = f"{newest:06d}.sst"
    size = os.path.getsize(os.path.join(path, name))
    flip_byte(os.path.join(path, name), size - 1)  # the footer's magic
    report = repair_store(path, **small_options())
    assert [f.file for f in report.findings] == [name] and "none of its versions" in report.findings[0].message
    got = contents(path)
    # Nothing newer than "old" could be read for k0007 and k0008: the version before it comes back.
    assert got == {b"k%04d" % i: b"old" for i in range(300)}


def test_a_damaged_log_keeps_the_records_before_the_damage(path: str) -> None:
    with minilsm.DB(path, **small_options(memtable_size=1 << 20)) as db:
        for i in range(10):
            db.put(b"k%d" % i, b"v%d" % i)
    (log,) = [n for n in store_files(path) if n.endswith(".log")]
    with open(os.path.join(path, log), "rb") as f:
        records = read_log(f.read(), log).records
    fourth = sum(HEADER_SIZE + len(r) for r in records[:3])
    flip_byte(os.path.join(path, log), fourth + HEADER_SIZE + 2)  # its payload: damage, records follow it
    with pytest.raises(minilsm.CorruptionError):
        minilsm.DB(path, **small_options())
    report = repair_store(path, **small_options())
    assert [f.file for f in report.findings] == [log] and report.moved == [log]
    assert contents(path) == {b"k0": b"v0", b"k1": b"v1", b"k2": b"v2"}


def test_a_crash_mid_repair_leaves_the_store_as_it_was(path: str) -> None:
    model = history(path, random.Random(3))
    before = sorted(os.listdir(path))
    with (
        mock.patch("minilsm.manifest.write_manifest", side_effect=OSError(28, "No space left on device")),
        pytest.raises(minilsm.StoreIOError, match="No space"),
    ):
        repair_store(path, **small_options())
    assert set(os.listdir(path)) > set(before)  # the new tables, written before the manifest that failed
    assert contents(path) == model  # the old manifest still rules
    assert check_store(path).findings == []  # and the open deleted the new tables as orphans
    assert repair_store(path, **small_options()).ok
    assert contents(path) == model


def test_a_tiered_store_gets_one_run_in_level_0(path: str) -> None:
    model = {b"k%04d" % i: b"v" * (i % 50) for i in range(400)}
    with minilsm.DB(path, **small_options(compaction_style="tiered")) as db:
        for k, v in model.items():
            db.put(k, v)
    report = repair_store(path, **small_options(compaction_style="tiered"))
    assert report.level == 0 and len(report.tables_written) == 1
    assert contents(path, compaction_style="tiered") == model


def test_repair_refuses_an_open_store_and_a_directory_that_holds_none(path: str, tmp_path: Path) -> None:
    with minilsm.DB(path) as db:
        db.put(b"k", b"v")
        with pytest.raises(minilsm.LockError, match="close it to repair it"):
            repair_store(path)
    with pytest.raises(minilsm.NotFoundError):
        repair_store(str(tmp_path / "nothing here"))
    with pytest.raises(TypeError, match="unknown option"):
        repair_store(path, bits_per_keys=3)


def test_the_offline_tools_turn_a_failed_file_operation_into_store_io_error(path: str) -> None:
    """Was: check_store, repair_store and destroy_store let the OSError out (a LOCK that is a directory, a full
    disk mid-repair: found by two audits), where an open store says StoreIOError naming the store."""
    with minilsm.DB(path) as db:
        db.put(b"k", b"v")
    os.remove(os.path.join(path, "LOCK"))
    os.mkdir(os.path.join(path, "LOCK"))
    for tool, doing in ((check_store, "check"), (repair_store, "repair"), (destroy_store, "destroy")):
        with pytest.raises(minilsm.StoreIOError, match=f"could not {doing} the store: taking its LOCK") as e:
            tool(path)
        assert str(e.value).startswith(path) and isinstance(e.value.__cause__, IsADirectoryError)
    os.rmdir(os.path.join(path, "LOCK"))
    assert contents(path) == {b"k": b"v"}


def test_a_directory_listing_that_fails_is_store_io_error_naming_the_store(path: str) -> None:
    """The first listing, before the lock, fails as every later file operation of the tools does: StoreIOError
    naming the store and what the tool would do (was a bare OSError only for this one call)."""
    with minilsm.DB(path) as db:
        db.put(b"k", b"v")

    class UnlistableFS(minilsm.fs.FileSystem):
        def listdir(self, p: str) -> list[str]:
            raise OSError(errno.EIO, "Input/output error", p)

    with pytest.raises(minilsm.StoreIOError, match=r"could not check the store: .*Input/output error") as e:
        check_store(path, fs=UnlistableFS())
    assert str(e.value).startswith(path)
    assert contents(path) == {b"k": b"v"}


@pytest.mark.parametrize(
    ("kind", "which", "err"),
    [
        ("open", "table", errno.EMFILE),  # the file cache's open of a table
        ("read", "table", errno.EACCES),  # its first read: the footer, as the table opens
        ("read", "table's last", errno.ENOMEM),  # its last: a data block, amid the merge that writes new tables
        ("read", "log", errno.ENFILE),
        ("read", "MANIFEST", errno.EPERM),  # unread, it would make the repair read every table, dead ones too
    ],
)
def test_a_read_failing_for_the_machine_not_the_file_stops_the_repair_and_damages_nothing(
    path: str, kind: str, which: str, err: int
) -> None:
    """Was: every OSError of a read counted as damage, so too many open files (or no memory, or no permission)
    took a whole, healthy table or log out of the store into lost/.  Now the repair stops with StoreIOError
    before its new manifest, and once the cause is gone a repair finds the store whole."""
    from faultfs import FaultFS

    model = history(path, random.Random(3))
    (log,) = [n for n in store_files(path) if n.endswith(".log")]
    table = store_files(path)[0]
    on = {"table": table, "table's last": table, "log": log, "MANIFEST": "MANIFEST"}[which]
    nth = 1
    if which == "table's last":
        counting = FaultFS()
        reads: list[str] = []
        counting.on_call = lambda k, p: reads.append(p) if k == "read" and os.path.basename(p) == on else None
        shutil.copytree(path, path + ".counted")
        repair_store(path + ".counted", **small_options(fs=counting))
        nth = len(reads)
        assert nth > 2  # the premise: the footer's read, then more
    before = {n: Path(path, n).read_bytes() for n in os.listdir(path) if n != "LOCK"}
    fs = FaultFS()
    fs.arm(kind, nth, err, sticky=True, on=on)
    with pytest.raises(minilsm.StoreIOError, match="could not repair the store") as raised:
        repair_store(path, **small_options(fs=fs))
    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.errno == err
    assert not os.path.exists(os.path.join(path, LOST_DIR))
    assert {n: Path(path, n).read_bytes() for n in before} == before  # new orphan tables aside, as a crash leaves
    report = repair_store(path, **small_options())
    assert report.ok and report.findings == [] and report.moved == []
    assert contents(path) == model


def test_the_cli_repairs_and_says_what_it_lost(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    history(path, random.Random(4), steps=300)
    assert main(["repair", path]) == EXIT_OK
    assert capsys.readouterr().out.rstrip().endswith("no damage found")
    os.remove(os.path.join(path, "MANIFEST"))
    assert main(["repair", path, "--json"]) == EXIT_NEGATIVE
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and report["manifest"] == "missing" and report["findings"][0]["file"] == "MANIFEST"
    assert main(["check", path]) == EXIT_OK  # what the repair wrote checks clean


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from(["keep", "remove"]))
def test_repair_keeps_what_a_random_history_left(seed: int, manifest: str) -> None:
    rng = random.Random(seed)
    with fast_tmp_dir() as d:
        path = os.path.join(d, "db")
        model = history(path, rng, steps=rng.randrange(200, 900))
        if manifest == "remove":
            os.remove(os.path.join(path, "MANIFEST"))
        repair_store(path, **small_options())
        assert contents(path) == model


def test_destroy_removes_the_store_and_nothing_else(path: str) -> None:
    """plyvel's destroy_db: the store's files go, and the directory with them once it is empty."""
    history(path, random.Random(5), steps=300)
    with minilsm.DB(path, **small_options()) as db:
        with pytest.raises(minilsm.LockError, match="close it to destroy it"):
            destroy_store(path)
        assert dict(db.iterator())  # and the open store lost nothing
    destroy_store(path)
    assert not os.path.exists(path)
    destroy_store(path)  # nothing there: nothing to do, as LevelDB's DestroyDB
    history(path, random.Random(6), steps=300)
    Path(path, "notes.txt").write_text("the application's")
    os.makedirs(os.path.join(path, LOST_DIR))
    destroy_store(path)
    assert sorted(os.listdir(path)) == [LOST_DIR, "notes.txt"]
    with pytest.raises(minilsm.NotFoundError, match="no minilsm store"):
        destroy_store(path)  # no store left: a directory of other things is refused, untouched
    assert sorted(os.listdir(path)) == [LOST_DIR, "notes.txt"]


def test_a_second_damaged_manifest_does_not_replace_the_first_in_lost(path: str) -> None:
    """Every damaged manifest is named MANIFEST: a second one moved into lost/ must leave the first there."""
    model = {b"k%04d" % i: b"v%d" % i for i in range(300)}
    with minilsm.DB(path, **small_options()) as db:
        for k, v in model.items():
            db.put(k, v)
    manifest = os.path.join(path, "MANIFEST")
    damaged = []
    for damage in (b"first damage", b"second damage"):
        with open(manifest, "r+b") as f:
            f.write(damage * 4)
        with open(manifest, "rb") as f:
            damaged.append(f.read())
        repair_store(path, **small_options())
    assert repair_store(path, **small_options()).moved == []  # a third repair finds nothing to move
    lost = os.path.join(path, LOST_DIR)
    kept = {}
    for name in os.listdir(lost):
        with open(os.path.join(lost, name), "rb") as f:
            kept[name] = f.read()
    assert kept == {"MANIFEST": damaged[0], "MANIFEST.1": damaged[1]}
    assert contents(path) == model


def test_a_store_of_more_tables_than_the_process_may_open_files_repairs_whole(path: str) -> None:
    """The repair reads every table at once: each must fetch its file from a cache of max_open_files, as the
    store's readers do, or a store that opens would fail to repair (and call the tables it could not open
    damaged)."""
    import subprocess
    import sys

    with minilsm.DB(path, **small_options()) as db:
        for i in range(2500):
            db.put(b"k%05d" % i, b"v%d" % i * 5)
        model = dict(db.iterator())
        assert len(db.version.numbers()) > 50
    code = (
        "import json, resource, sys\n"
        "from minilsm.repair import repair_store\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "r = repair_store(sys.argv[1], max_open_files=10, target_file_size=2048)\n"
        "print(json.dumps([str(f) for f in r.findings]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(minilsm.__file__))])}
    done = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == []
    assert contents(path) == model


def test_a_foreign_file_of_a_huge_number_does_not_stop_the_repair(path: str) -> None:
    """New files are numbered after every file in the directory, however large its number."""
    model = {b"k%04d" % i: b"v%d" % i for i in range(200)}
    with minilsm.DB(path, **small_options()) as db:
        for k, v in model.items():
            db.put(k, v)
    os.remove(os.path.join(path, "MANIFEST"))
    with open(os.path.join(path, f"{1 << 70}.sst"), "wb") as f:
        f.write(b"not a table")
    report = repair_store(path, **small_options())
    assert [f.file for f in report.findings] == ["MANIFEST", f"{1 << 70}.sst"]
    assert contents(path) == model


def two_logs(path: str, damage: str) -> None:
    """A store whose manifest needs log 1, which holds one write, and a log 2 after it holding the next."""
    from minilsm.batch import encode_batch
    from minilsm.fs import DEFAULT_FS
    from minilsm.keys import KIND_VALUE
    from minilsm.wal import LogWriter, log_file_name

    with minilsm.DB(path, **small_options(memtable_size=1 << 20)) as db:
        db.put(b"a", b"1")  # in log 1: closing does not flush
    assert store_files(path) == ["000001.log"]
    first = os.path.join(path, "000001.log")
    second = LogWriter(DEFAULT_FS.open_writable(os.path.join(path, log_file_name(2))), 2)
    second.add_record(encode_batch(3 if damage == "gap" else 2, [(KIND_VALUE, b"b", b"2")]), sync=True)
    second.close()
    if damage == "torn":
        with open(first, "ab") as f:
            f.write(b"\x05\x00\x00\x00torn")
    elif damage == "empty":
        open(first, "wb").close()
    elif damage == "missing":
        os.remove(first)


@pytest.mark.parametrize("damage", ["torn", "gap", "empty", "missing"])
def test_repair_reports_the_damage_to_the_logs_that_makes_the_open_refuse_the_store(path: str, damage: str) -> None:
    """An older log that ends torn or empty, a gap between two logs, a log the manifest needs gone: the open
    refuses each (`LogChain`), so the repair must report it, not say "no damage found" and exit 0."""
    two_logs(path, damage)
    with pytest.raises(minilsm.CorruptionError, match=r"000001\.log"):
        minilsm.DB(path, **small_options())
    report = repair_store(path, **small_options())
    assert not report.ok and [f.file for f in report.findings] == ["000001.log"]
    assert report.moved == ([] if damage == "missing" else ["000001.log"])  # kept in lost/, not deleted
    # Every record read is kept, as from a log damaged in its middle.
    assert contents(path) == ({b"b": b"2"} if damage in ("empty", "missing") else {b"a": b"1", b"b": b"2"})


def test_an_old_file_that_cannot_be_removed_does_not_fail_a_repair_that_took_effect(path: str) -> None:
    """Once the new manifest is in place, removing an old table or log only tidies up (the next open sweeps what
    stays, and fails for none of it): a foreign directory named like a table must not make the repair raise."""
    model = {b"k%04d" % i: b"v%d" % i for i in range(300)}
    with minilsm.DB(path, **small_options()) as db:
        for k, v in model.items():
            db.put(k, v)
    os.mkdir(os.path.join(path, "000001.sst"))  # not listed in the manifest: an old table to the repair
    with minilsm.DB(path, **small_options()) as db:
        assert dict(db.iterator()) == model  # the store opens with it
    report = repair_store(path, **small_options())
    assert report.ok
    assert contents(path) == model


def test_a_file_named_lost_stops_the_repair_before_it_changes_anything(path: str) -> None:
    """Found by the repair's audit (by reading): the first damaged file to move raised FileExistsError, with the
    repair half done.  Now the repair refuses at once, naming the file, and the store stays as it was."""
    history(path, random.Random(8), steps=300)
    with open(os.path.join(path, "MANIFEST"), "r+b") as f:
        f.write(b"\x00" * 40)  # damaged: the repair would move it into lost/ first
    Path(path, LOST_DIR).write_text("the application's")
    before = sorted(os.listdir(path))
    with pytest.raises(minilsm.Error, match="is in the way"):
        repair_store(path, **small_options())
    assert sorted(os.listdir(path)) == before


def leveldb_directory(path: str) -> dict[str, bytes]:
    """A directory as LevelDB leaves one (plyvel's, when plyvel is installed; else its file names by hand): its
    files' bytes, by name."""
    try:
        import plyvel  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        os.makedirs(path)
        for name, data in [("CURRENT", b"MANIFEST-000002\n"), ("MANIFEST-000002", b"\x00" * 50),
                           ("000003.log", b"\x01" * 60), ("000005.ldb", b"\x02" * 70), ("LOCK", b""),
                           ("LOG", b"log text\n")]:  # fmt: skip
            Path(path, name).write_bytes(data)
    else:
        db = plyvel.DB(path, create_if_missing=True)
        for i in range(3000):
            db.put(b"%06d" % i, b"v" * 50)
        db.close()
    return {n: Path(path, n).read_bytes() for n in os.listdir(path)}


def test_a_leveldb_directory_is_refused_by_the_store_and_every_tool_and_left_as_it_was(
    path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: LevelDB's logs are named as minilsm's, so its directory looked like a minilsm store with a lost
    manifest: the open said CorruptionError, whose answer is a repair, and the repair moved LevelDB's logs into
    lost/ and wrote a store of its own there; a destroy removed its logs and LOCK."""
    before = leveldb_directory(path)
    assert "CURRENT" in before and any(n.endswith(".log") for n in before)
    refused = f"no minilsm store at {path}: it holds a LevelDB or RocksDB store (CURRENT, MANIFEST-"
    for call in (minilsm.DB, repair_store, check_store, destroy_store):
        with pytest.raises(minilsm.NotFoundError, match=re.escape(refused)):
            call(path)
    for command in ("repair", "check"):
        assert main([command, path]) == EXIT_ERROR
        assert refused in capsys.readouterr().err
    for args in (["get", path, "k"], ["put", path, "k", "v"], ["manifest", path]):  # the CLI's own message
        assert main(args) == EXIT_ERROR
        assert "(it holds a LevelDB or RocksDB store (CURRENT, MANIFEST-" in capsys.readouterr().err
    assert {n: Path(path, n).read_bytes() for n in os.listdir(path)} == before


def test_a_leveldb_directory_that_lost_its_manifest_is_refused_too_and_left_as_it_was(path: str) -> None:
    """Was (found by the corruption audit): with its MANIFEST-NNNNNN gone, LevelDB's directory was no foreign
    store any more, by the rule that needed one: the open called it a minilsm store with no MANIFEST, the answer to
    which is a repair, and the repair moved LevelDB's log into lost/ and wrote a minilsm store there.  Its CURRENT
    and its info log LOG (which minilsm never writes) still say whose it is."""
    leveldb_directory(path)
    for name in os.listdir(path):
        if name.startswith("MANIFEST-"):
            os.remove(os.path.join(path, name))
    before = {n: Path(path, n).read_bytes() for n in os.listdir(path)}
    assert "LOG" in before and any(n.endswith(".log") for n in before)
    refused = f"no minilsm store at {path}: it holds a LevelDB or RocksDB store (CURRENT, with no MANIFEST-NNNNNN"
    for call in (minilsm.DB, repair_store, check_store, destroy_store):
        with pytest.raises(minilsm.NotFoundError, match=re.escape(refused)):
            call(path)
    assert {n: Path(path, n).read_bytes() for n in os.listdir(path)} == before


def test_check_finds_levels_a_whole_manifest_puts_out_of_order_and_repair_mends_them(path: str) -> None:
    """Was (found by the corruption audit): a manifest written whole, checksums and all, that places a table of
    newer versions below one of older versions of the same keys (two backups mixed, a writer's bug) passed every
    check, and `get` answered the older value where a scan gave the newer.  Now check reports it as damage, naming
    a key and both tables; a repair, which keeps each key's newest version, mends it."""
    from minilsm.fs import DEFAULT_FS
    from minilsm.manifest import read_manifest, write_manifest

    opts = small_options(memtable_size=1 << 20)
    with minilsm.DB(path, **opts) as db:
        for i in range(200):
            db.put(b"k%03d" % i, b"old")
        db.compact_range()  # every old version in the bottom level
        for i in range(0, 200, 2):
            db.put(b"k%03d" % i, b"new")
        db.flush()  # the new ones in a level-0 table above them
        truth = dict(db.iterator())
    assert check_store(path).ok
    state = read_manifest(DEFAULT_FS, path).state
    deepest = len(state.levels) - 1
    assert len(state.levels[0]) == 1 and state.levels[1] and not state.levels[deepest]
    state.levels[deepest], state.levels[0] = state.levels[0], []  # the new versions below every old one
    write_manifest(DEFAULT_FS, path, state)
    with minilsm.DB(path, **opts) as db:  # what the damage does: reads disagree with the scan
        assert db.get(b"k000") == b"old" and dict(db.iterator()) == truth
    report = check_store(path)
    damage = [str(f) for f in report.findings if f.damage]
    assert len(damage) == 1 and re.fullmatch(
        r"DAMAGE: MANIFEST: levels out of order: b'k000' has a newer version \(sequence \d+\) in \d{6}\.sst at "
        rf"level {deepest} than in \d{{6}}\.sst at level [12] \(sequence \d+\), which a read meets first",
        damage[0],
    ), damage
    repair_store(path, **opts)
    assert check_store(path).ok
    with minilsm.DB(path, **opts) as db:
        assert {k: db.get(k) for k in truth} == truth == dict(db.iterator())


def test_check_compares_a_version_with_the_oldest_a_read_meets_before_it_not_the_newest(path: str) -> None:
    """Three tables of one key, placed newest (level 0), oldest (level 1), middle (level 2): the level-2 version is
    older than the level-0 one but newer than the level-1 one a read meets before it: the order check_store
    verifies (each key's versions older in each table a read probes later) is broken, though level 0's version
    hides it from reads today.  The check must compare with the oldest version met above, not the newest, and
    name the two tables out of order."""
    from minilsm.fs import DEFAULT_FS
    from minilsm.manifest import read_manifest, write_manifest

    opts = small_options(level0_compaction_trigger=10, level0_stop_writes_trigger=20)
    with minilsm.DB(path, **opts) as db:
        for n in range(3):
            db.put(b"k", b"%d" % n)
            db.flush()
    state = read_manifest(DEFAULT_FS, path).state
    oldest, middle, newest = sorted(state.levels[0], key=lambda m: m.max_seq)
    state.levels[0], state.levels[1], state.levels[2] = [newest], [oldest], [middle]
    write_manifest(DEFAULT_FS, path, state)
    damage = [str(f) for f in check_store(path).findings if f.damage]
    assert len(damage) == 1 and re.fullmatch(
        rf"DAMAGE: MANIFEST: levels out of order: b'k' has a newer version \(sequence {middle.max_seq}\) in "
        rf"{middle.number:06d}\.sst at level 2 than in {oldest.number:06d}\.sst at level 1 \(sequence "
        rf"{oldest.max_seq}\), which a read meets first",
        damage[0],
    ), damage


def test_destroy_removes_the_temporary_files_a_crash_left_and_then_the_directory(path: str) -> None:
    """A crash leaves a table, a log or the manifest half made under a temporary name: those are the store's too,
    and go with it, so the directory, empty then, goes as well."""
    with minilsm.DB(path, **small_options()) as db:
        db.put(b"k", b"v")
    for leftover in ("MANIFEST.tmp", "000099.sst.tmp", "000098.log.tmp"):
        Path(path, leftover).write_bytes(b"half made")
    destroy_store(path)
    assert not os.path.exists(path)


def test_check_ranks_each_level0_table_of_its_own_in_the_order_reads_probe_them(path: str) -> None:
    """Level 0's tables overlap, so each is a rank of its own, probed newest first (by their newest sequence
    numbers).  Forged here: a level-0 table holding an old version of `k` and a newer `z`, beside a table with
    the newer `k`; reads probe the first first and answer the old value.  Taken as one rank, level 0 hides it
    (the mutation audit's survivor C4: every test had one table a level)."""
    from minilsm.fs import DEFAULT_FS
    from minilsm.keys import KIND_VALUE
    from minilsm.manifest import read_manifest, write_manifest
    from minilsm.sstable.builder import TableBuilder

    opts = small_options(level0_compaction_trigger=10, level0_stop_writes_trigger=20)
    with minilsm.DB(path, **opts) as db:
        for key, value in ((b"k", b"old"), (b"k", b"new"), (b"z", b"z")):
            db.put(key, value)
            db.flush()
    state = read_manifest(DEFAULT_FS, path).state
    old_k, new_k, z = sorted(state.levels[0], key=lambda m: m.max_seq)
    builder = TableBuilder(DEFAULT_FS, path, state.next_file_number)
    builder.add(b"k", old_k.max_seq << 8 | KIND_VALUE, b"old")
    builder.add(b"z", z.max_seq << 8 | KIND_VALUE, b"z")
    forged = builder.finish()
    for meta in (old_k, z):
        os.remove(os.path.join(path, f"{meta.number:06d}.sst"))
    state.levels[0] = [forged, new_k]
    state.next_file_number += 1
    write_manifest(DEFAULT_FS, path, state)
    with minilsm.DB(path, **opts) as db:
        assert db.get(b"k") == b"old"  # the damage is real: the newer value is hidden
    damage = [str(f) for f in check_store(path).findings if f.damage]
    assert len(damage) == 1 and "levels out of order: b'k'" in damage[0], damage
    assert f"{new_k.number:06d}.sst" in damage[0] and f"{forged.number:06d}.sst" in damage[0], damage


def test_destroy_leaves_a_foreign_directory_named_like_a_table_and_removes_the_rest(path: str) -> None:
    """The store opens with a directory named like a table (it is no table of its manifest), so destroy must
    remove the store around it: removing it raised IsADirectoryError after the tables that sort before it were
    gone, the manifest left naming them, and every later destroy raised there again."""
    history(path, random.Random(9), steps=300)
    os.mkdir(os.path.join(path, "000099.sst"))
    with minilsm.DB(path, **small_options()) as db:
        assert dict(db.iterator())  # the store opens with it
    destroy_store(path)
    assert os.listdir(path) == ["000099.sst"]  # anything else stays, and so does the directory then


def damaged_store(path: str, manifest: str) -> dict[str, bytes]:
    """A store over several tables, one of them with a damaged data block, a log damaged in its middle and, with
    `manifest` "damaged", a manifest of garbage: the damaged files' bytes, by name, which a repair must keep."""
    with minilsm.DB(path, **small_options()) as db:
        for i in range(300):
            db.put(b"k%04d" % i, b"v%d" % i * 7)
        db.compact_range()
    with minilsm.DB(path, **small_options(memtable_size=1 << 20)) as db:  # these stay in the log
        for i in range(6):
            db.put(b"late%d" % i, b"in the log")
    table, reader = bottom_tables(path)[1]
    offset = reader._offsets[1]
    reader.close()
    flip_byte(os.path.join(path, table), offset + 5)  # a data block: the table still opens
    (log,) = [n for n in store_files(path) if n.endswith(".log")]
    flip_byte(os.path.join(path, log), HEADER_SIZE + 2)  # the first record's payload: the store does not open
    damaged = [table, log]
    if manifest == "damaged":
        with open(os.path.join(path, "MANIFEST"), "r+b") as f:
            f.write(b"\x00" * 40)
        damaged.append("MANIFEST")
    out = {}
    for name in damaged:
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


def lost_bytes(path: str) -> list[bytes]:
    """The bytes of every file in the store's lost/, sorted (a file kept twice shows twice)."""
    lost = os.path.join(path, LOST_DIR)
    out = []
    for name in os.listdir(lost) if os.path.isdir(lost) else []:
        with open(os.path.join(lost, name), "rb") as f:
            out.append(f.read())
    return sorted(out)


class Crash(BaseException):
    """The process dies here (not an `Exception`: nothing may catch it and go on)."""


@pytest.mark.parametrize("manifest", ["read", "damaged"])
def test_a_crash_right_after_the_new_manifest_loses_no_damaged_file(path: str, manifest: str) -> None:
    """The new manifest no longer names the damaged files, so once it is in place the next open deletes them
    as obsolete: they must already be in lost/ by then, not moved there after it."""
    damaged = damaged_store(path, manifest)
    real = minilsm.manifest.write_manifest

    def then_crash(*args: object, **kwargs: object) -> None:
        real(*args, **kwargs)  # type: ignore[arg-type]
        raise Crash

    with mock.patch("minilsm.manifest.write_manifest", then_crash), pytest.raises(Crash):
        repair_store(path, **small_options())
    got = contents(path)  # the open deletes the files the new manifest does not name
    assert sorted(damaged.values()) == lost_bytes(path)
    assert b"k0000" in got and b"late0" not in got  # the repaired store: the log's first record was damaged
    # A repair run again finds the store whole, and says what the crashed one left in lost/.
    report = repair_store(path, **small_options())
    assert report.ok and report.moved == []
    assert report.kept_before == sorted(os.listdir(os.path.join(path, LOST_DIR))) != []
    assert f"{LOST_DIR}/ already held, from an earlier repair: " in report.render()


@pytest.mark.parametrize(
    ("manifest", "links", "dir_ops"), [("read", True, False), ("damaged", True, True), ("damaged", False, True)]
)
def test_a_power_cut_at_any_moment_of_a_repair_then_a_repair_keeps_each_damaged_file_once(
    path: str, manifest: str, links: bool, dir_ops: bool
) -> None:
    """A power cut before each of a repair's file-system calls (but its reads), as `FaultFS.copy_durable` writes
    what it would leave; each copy then opened (which deletes what its manifest does not name) and repaired
    again: the store ends repaired, and every damaged file's bytes are in lost/ exactly once.  Where `links`
    is False, every hard link fails as across file systems, and the damaged files are copied into lost/;
    `dir_ops` lets some unsynced creations, renames and removals survive the cut."""
    from faultfs import FaultFS
    from faultworkload import PowerCuts

    damaged = damaged_store(path, manifest)
    reference = path + ".reference"
    shutil.copytree(path, reference)
    repair_store(reference, **small_options())
    expected = contents(reference)
    assert lost_bytes(reference) == sorted(damaged.values())
    fs = FaultFS(dir_ops=dir_ops, seed=len(manifest))
    if not links:
        fs.arm("link", 1, errno.EXDEV, sticky=True)
    power = PowerCuts(fs, path, path + ".cuts", None)  # lost/ with each, as far as a cut would keep it
    repair_store(path, **small_options(fs=fs))
    fs.on_call = None
    fs.copy_durable(path, path + ".end")
    copies = [c.copy for c in power.cuts] + [path + ".end"]
    for copy in copies:
        with contextlib.suppress(minilsm.CorruptionError):
            minilsm.DB(copy, **small_options()).close()  # before the new manifest, the store does not open
        repair_store(copy, **small_options())
        assert contents(copy) == expected, copy
        assert lost_bytes(copy) == sorted(damaged.values()), (copy, os.listdir(os.path.join(copy, LOST_DIR)))
    assert len(copies) > 20
    # Each damaged file was linked, or with `links` False copied after the link failed.
    assert fs.counts["link"] == len(damaged) and len(fs.faults) == (0 if links else len(damaged))


def test_a_repair_failing_at_any_call_then_run_again_keeps_each_damaged_file_once(path: str) -> None:
    """An EIO at each of a repair's file-system calls in turn, and the repair run again: the store ends repaired
    and every damaged file's bytes are in lost/ exactly once, whatever the failed run left (a copy or link under
    its temporary name, a file kept, the new manifest in place).  Not the reads, nor the opens of the files the
    repair reads: a file that cannot be read (EIO) is damage, by design, and lost/ keeps it."""
    from faultfs import KINDS, FaultFS

    damaged = damaged_store(path, "damaged")
    before = set(os.listdir(path))
    reference = path + ".reference"
    shutil.copytree(path, reference)
    opens: list[str] = []
    fs = FaultFS()
    fs.on_call = lambda kind, p: opens.append(os.path.basename(p)) if kind == "open" else None
    repair_store(reference, **small_options(fs=fs))
    expected = contents(reference)
    calls = [(kind, nth) for kind in KINDS if kind not in ("read", "open") for nth in range(1, fs.counts[kind] + 1)]
    calls += [("open", nth) for nth, name in enumerate(opens, 1) if name not in before]
    for kind, nth in calls:
        work = f"{path}.{kind}{nth}"
        shutil.copytree(path, work)
        fs = FaultFS()
        fs.arm(kind, nth)
        with contextlib.suppress(minilsm.StoreIOError):  # some failures come after the repair took effect, or tidy up
            repair_store(work, **small_options(fs=fs))
        assert fs.faults, (kind, nth)
        repair_store(work, **small_options())
        assert contents(work) == expected, (kind, nth)
        assert lost_bytes(work) == sorted(damaged.values()), (kind, nth, os.listdir(os.path.join(work, LOST_DIR)))


def test_the_tables_go_no_deeper_than_the_levels_the_store_was_opened_with(path: str) -> None:
    """A store's manifest lists as many levels as its last open had (its max_levels).  A repair not told that
    (`minilsm repair` takes no --max-levels) placed the tables at the level of its own max_levels that holds
    them, and the store's application, opening with fewer levels, was refused: "the store has tables at level
    4; open it with max_levels > 4"."""
    model = {b"k%04d" % i: b"v%d" % i * 10 for i in range(800)}  # about 40 KB: level 4 of 8, 16, 32, 64 KiB
    with minilsm.DB(path, **small_options(max_levels=3)) as db:
        for k, v in model.items():
            db.put(k, v)
    for _ in range(2):  # and a repair of the repaired store: its manifest lists the store's levels too
        report = repair_store(path, **small_options(max_levels=7))
        assert report.ok and report.level == 2, report.level
        assert contents(path, max_levels=3) == model
