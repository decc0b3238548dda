"""Bad input at every public entry point: a clear error, and the data already written intact afterwards.

Wrong types, oversized keys and values, misuse of batches, iterators and
snapshots, a closed store, bad options, and directories that are missing,
foreign, not directories, hold an unreadable or foreign MANIFEST, or are held by
another process.  "Clear" means a `TypeError`/`ValueError` for an argument
mistake (as any Python API) and a `minilsm.Error` subclass for everything else,
never an `AttributeError` or a raw `OSError` from deep inside.
"""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import re
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from faultfs import FaultFS
from storeutil import crash, small_options

import minilsm
from minilsm.batch import encode_batch
from minilsm.check import check_store
from minilsm.fs import DEFAULT_FS
from minilsm.keys import KIND_VALUE, MAX_KEY_SIZE, MAX_SEQUENCE, MAX_VALUE_SIZE
from minilsm.wal import LogWriter

DATA = {b"key%03d" % i: b"value%d" % i * 20 for i in range(200)}


@pytest.fixture(params=[False, True], ids=["inline", "background"])
def db(request: pytest.FixtureRequest, db_path: str) -> Iterator[minilsm.DB]:
    d = minilsm.DB(db_path, **small_options(background=request.param))
    for k, v in DATA.items():
        d.put(k, v)
    yield d
    assert_intact(d)
    d.close()
    with minilsm.DB(db_path, **small_options()) as again:
        assert_intact(again)


def assert_intact(db: minilsm.DB) -> None:
    assert dict(db.iterator()) == DATA
    assert all(db.get(k) == v for k, v in DATA.items())


NOT_BYTES: list[Any] = ["str", 1, 1.5, None, [b"a"], (b"a",), {b"a": 1}, object(), True]


@pytest.mark.parametrize("bad", NOT_BYTES, ids=lambda b: type(b).__name__)
def test_wrong_types_raise_type_error_everywhere(db: minilsm.DB, bad: Any) -> None:
    calls: list[Callable[[], object]] = [
        lambda: db.get(bad),
        lambda: db.put(bad, b"v"),
        lambda: db.put(b"k", bad),
        lambda: db.delete(bad),
        lambda: db[bad],
        lambda: db.__setitem__(b"k", bad),
        lambda: db.__delitem__(bad),
        lambda: db.iterator(start=bad) if bad is not None else db.iterator(start=1),  # type: ignore[arg-type]
        lambda: db.iterator(stop=bad) if bad is not None else db.iterator(stop=1),  # type: ignore[arg-type]
        lambda: db.iterator(prefix=bad) if bad is not None else db.iterator(prefix=1),  # type: ignore[arg-type]
        lambda: db.compact_range(bad) if bad is not None else db.compact_range(1),  # type: ignore[arg-type]
        lambda: db.write(bad),
        lambda: bad in db,
    ]
    for i, call in enumerate(calls):
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"call {i} accepted {bad!r}")


def test_a_wrong_type_error_names_the_argument(db: minilsm.DB) -> None:
    """Was: "key must be ..." for a bad prefix, start or stop too, which named no argument the call had."""
    for call, what in (
        (lambda: db.iterator(prefix=1), "prefix"),
        (lambda: db.iterator(start="a"), "start"),
        (lambda: db.iterator(stop=1), "stop"),
        (lambda: db.prefixed_db(1), "prefix"),  # type: ignore[arg-type]
        (lambda: db.prefixed_db(b"p/").iterator(start=1), "start"),
        (lambda: db.compact_range(b"a", 1), "stop"),
        (lambda: db.get(1), "key"),
    ):
        with pytest.raises(TypeError, match=f"^{what} must be bytes, bytearray or memoryview, not "):
            call()
    with pytest.raises(ValueError, match=r"^prefix is 70000 bytes"):
        db.iterator(prefix=bytes(70_000))


def test_bytes_like_arguments_are_accepted_and_copied(db: minilsm.DB) -> None:
    key, value = bytearray(b"ba"), bytearray(b"mutable")
    db.put(key, value)
    value[:] = b"changed"  # the store copied it
    key[:] = b"zz"
    assert db.get(memoryview(b"ba")) == b"mutable"
    db.delete(memoryview(b"ba"))


def test_oversized_keys_and_values_raise_value_error(db: minilsm.DB) -> None:
    big_key = b"k" * (MAX_KEY_SIZE + 1)
    for call in (
        lambda: db.put(big_key, b"v"),
        lambda: db.put(b"k", b"v" * (MAX_VALUE_SIZE + 1)),
        lambda: db.get(big_key),
        lambda: db.delete(big_key),
        lambda: db.iterator(start=big_key),
        lambda: db.compact_range(big_key),
    ):
        with pytest.raises(ValueError, match="maximum"):
            call()
    db.put(b"k" * MAX_KEY_SIZE, b"at the limit")  # the limits themselves are fine
    assert db.get(b"k" * MAX_KEY_SIZE) == b"at the limit"
    db.delete(b"k" * MAX_KEY_SIZE)


def test_a_key_and_a_value_at_their_limits_survive_the_log_tables_compaction_and_reopen(db_path: str) -> None:
    """A gap: the limits were only read back from the memtable."""
    key, value = b"\xff" * MAX_KEY_SIZE, b"v" * MAX_VALUE_SIZE
    with minilsm.DB(db_path, **small_options()) as db:
        db.put(key, value)
        db.put(b"", b"empty key")
    with minilsm.DB(db_path, **small_options()) as db:  # replayed from the log into a table
        assert db.get(key) == value
        db.put(key[:-1], b"shorter")
        db.compact_range()
        assert db.get(key) == value and db.get(key[:-1]) == b"shorter"
        assert [k for k, _ in db.iterator(prefix=key[:-1])] == [key[:-1], key]
        assert [k for k, _ in db.iterator(start=b"\xff", reverse=True)] == [key, key[:-1]]
        db.delete(key)
        db.compact_range()
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(key) is None and list(db) == [b"", key[:-1]]


def test_batch_misuse(db: minilsm.DB) -> None:
    with pytest.raises(TypeError), db.write_batch() as wb:
        wb.put(b"half", b"applied")
        wb.put("str", b"v")  # type: ignore[arg-type]
    assert db.get(b"half") is None  # the batch was discarded whole
    with db.write_batch() as wb:
        wb.put(b"once", b"1")
    with pytest.raises(minilsm.ClosedError):
        wb.put(b"again", b"2")
    with pytest.raises(minilsm.ClosedError):
        wb.write()
    db.delete(b"once")
    loose = minilsm.WriteBatch()
    with pytest.raises(ValueError):
        loose.write()  # not bound to a store
    with pytest.raises(ValueError), loose:
        pass
    db.write(loose)  # an empty batch is a no-op
    with pytest.raises(TypeError):
        db.write([(1, b"k", b"v")])  # type: ignore[arg-type]


def test_iterator_and_range_misuse(db: minilsm.DB) -> None:
    with pytest.raises(ValueError):
        db.iterator(include_key=False, include_value=False)
    assert list(db.iterator(start=b"key150", stop=b"key100")) == []  # an empty range, not an error
    assert list(db.iterator(prefix=b"nothing")) == []
    db.compact_range(b"key150", b"key100")  # an inverted range compacts nothing
    it = db.iterator()
    next(it)
    it.close()
    with pytest.raises(minilsm.ClosedError, match="the iterator is closed"):
        list(it)  # an error, as plyvel's: a closed iterator must not pass for an empty one


def test_closed_store_and_snapshot(db_path: str) -> None:
    db = minilsm.DB(db_path, **small_options())
    for k, v in DATA.items():
        db.put(k, v)
    snap = db.snapshot()
    batch = db.write_batch()
    batch.put(b"late", b"write")
    prefixed = db.prefixed_db(b"p").write_batch()
    it = db.iterator()
    db.close()
    with pytest.raises(minilsm.ClosedError):
        list(it)  # regression: it reopened the closed store's table files and went on reading
    calls: list[Callable[[], object]] = [
        lambda: db.get(b"k"), lambda: db.put(b"k", b"v"), lambda: db.delete(b"k"), lambda: db[b"key001"],
        lambda: db.__setitem__(b"k", b"v"), lambda: db.__delitem__(b"key001"), lambda: b"key001" in db,
        lambda: list(db), lambda: db.iterator(), lambda: db.snapshot(), lambda: db.flush(),
        lambda: db.compact_range(), lambda: db.write(minilsm.WriteBatch()),
        # A batch made before the close takes no more ops, as plyvel's (was: only its write raised).
        lambda: batch.put(b"more", b"x"), lambda: batch.delete(b"k"), lambda: prefixed.put(b"k", b"v"),
        lambda: batch.append(minilsm.WriteBatch()), lambda: batch.write(),
        lambda: snap.get(b"key001"), lambda: snap.iterator(), lambda: snap[b"key001"],
        lambda: db.__delitem__(b"absent"),  # was KeyError: the check read the memtables of the closed store
    ]  # fmt: skip
    for i, call in enumerate(calls):
        try:
            call()
        except minilsm.ClosedError:
            continue
        if i == 12:  # an empty batch does nothing, closed store or not
            continue
        pytest.fail(f"call {i} on a closed store did not raise ClosedError")
    snap.close()
    with minilsm.DB(db_path, **small_options()) as db:
        assert_intact(db)


def test_a_write_that_loses_the_race_for_a_batch_says_it_was_written_not_that_the_store_is_closed(
    db: minilsm.DB,
) -> None:
    """Was: the second of two threads writing one batch at once, refused while the first still wrote it (the
    batch not yet closed), raised ClosedError "write batch of a closed store", of a store open and well."""
    batch = db.write_batch()
    batch.put(b"k", b"v")
    next(batch._claims)  # another thread's write has claimed the batch and is writing it
    with pytest.raises(minilsm.ClosedError, match=r"^write batch was already written$"):
        batch.write()
    assert not db.closed


@pytest.mark.parametrize("bad", ["no", "false", 1, 0, 1.0, b""], ids=repr)
def test_a_flag_that_is_not_bool_is_a_type_error(db: minilsm.DB, bad: Any) -> None:
    """Was: any object was taken for its truth, as `Options` and plyvel refuse: ``sync="false"`` synced and
    ``reverse="no"`` reversed the scan, with no error."""
    wb = db.write_batch()
    wb.put(b"late", b"write")
    calls: list[Callable[[], object]] = [
        lambda: db.put(b"k", b"v", sync=bad),
        lambda: db.delete(b"key000", sync=bad),
        lambda: db.write_batch(sync=bad),
        lambda: db.write(wb, sync=bad),
        lambda: db.write(minilsm.WriteBatch(), sync=bad),
        *(
            lambda name=name: db.iterator(**{name: bad})
            for name in ("reverse", "include_key", "include_value", "include_start", "include_stop")
        ),
        lambda: db.snapshot().iterator(reverse=bad),
        lambda: db.write_batch(transaction=bad),
        lambda: db.prefixed_db(b"p").write_batch(transaction=bad),
        *(
            call
            for name in ("verify_checksums", "fill_cache")
            for call in (
                lambda name=name: db.get(b"key000", **{name: bad}),
                lambda name=name: db.snapshot().get(b"key000", **{name: bad}),
                lambda name=name: db.prefixed_db(b"key").get(b"000", **{name: bad}),
                lambda name=name: db.iterator(**{name: bad}),
                lambda name=name: db.raw_iterator(**{name: bad}),
            )
        ),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(TypeError, match="must be bool"):
            call()
            pytest.fail(f"call {i} accepted {bad!r}")
    assert not wb.closed  # refused before it was spent
    assert db.get(b"k") is None
    wb.write()
    db.delete(b"late", sync=None)  # None is each flag's default
    assert list(db.iterator(reverse=None)) == sorted(DATA.items())
    assert db.get(b"key000", verify_checksums=None, fill_cache=None) == DATA[b"key000"]  # plyvel's False


def test_an_empty_path_is_refused_and_leaves_the_working_directory_alone(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: os.path.abspath("") is the working directory, so DB("") (an unset setting, say) made a store of it:
    LOCK, MANIFEST and a log among the user's files.  plyvel raises (LevelDB's NotFound)."""
    monkeypatch.chdir(tmp_path)
    for empty in ("", b""):
        with pytest.raises(ValueError, match="empty"):
            minilsm.DB(empty)
    assert os.listdir(tmp_path) == []
    with minilsm.DB(os.curdir, **small_options()) as db:  # the working directory, when asked for by name
        db.put(b"k", b"v")
        assert db.path == str(tmp_path)


def test_the_offline_tools_refuse_an_empty_path_and_leave_the_store_in_the_working_directory_alone(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: check_store, repair_store and destroy_store took "" for the working directory, which DB("") refuses: so
    destroy_store(os.environ.get("STORE", "")) removed the store the program ran in, and the directory with it
    (plyvel's destroy_db("") leaves it).  check_store also took no bytes path, and named a relative one as given."""
    with minilsm.DB(str(tmp_path), **small_options()) as db:
        db.put(b"k", b"v")
    monkeypatch.chdir(tmp_path)
    names = sorted(os.listdir(tmp_path))
    for tool in (minilsm.check_store, minilsm.repair_store, minilsm.destroy_store):
        for empty in ("", b""):
            with pytest.raises(ValueError, match="empty"):
                tool(empty)  # type: ignore[operator]
    assert sorted(os.listdir(tmp_path)) == names
    with minilsm.DB(os.curdir, **small_options()) as db:
        assert db.get(b"k") == b"v"
    report = minilsm.check_store(os.fsencode(os.curdir))
    assert report.ok and report.path == str(tmp_path)  # by name, as DB takes it, and absolute


def test_a_store_its_snapshots_and_iterators_cannot_be_pickled_or_copied(db: minilsm.DB) -> None:
    """Was: copy.copy of a Snapshot shared its id, and closing the copy released the original's view: after a
    compaction it read None for a key it saw.  A copy of the DB shared its lock and log, and closing the copy
    made the original's next put fail (ClosedError on "log ... is closed") and turned it read-only."""
    db.put(b"snap", b"old")
    snap = db.snapshot()
    db.put(b"snap", b"new")
    it = db.iterator()
    next(it)
    for obj in (db, snap, it):
        for how in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match="cannot be pickled or copied"):
                how(obj)
    db.compact_range()
    assert snap.get(b"snap") == b"old"
    assert next(it) == (b"key001", DATA[b"key001"])
    snap.close()
    it.close()
    db.delete(b"snap")


# -- options ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"bits_per_key": "10"}, TypeError),
        ({"bits_per_key": True}, TypeError),
        ({"bits_per_key": -1}, ValueError),
        ({"bits_per_key": float("nan")}, ValueError),
        ({"bits_per_key": 1e9}, ValueError),
        ({"block_size": 4096.5}, TypeError),
        ({"block_size": 10}, ValueError),
        ({"block_size": 3 << 30}, ValueError),  # a block past 2 GiB reads short: "corrupt" (one pread; Linux cuts it)
        ({"max_levels": 2.5}, TypeError),
        ({"max_levels": 50}, ValueError),
        ({"memtable_size": 0}, ValueError),
        ({"max_open_files": 0}, ValueError),
        ({"sync": "no"}, TypeError),
        ({"background": 1}, TypeError),
        ({"fs": None}, TypeError),
        ({"compaction_style": "universal"}, ValueError),
        ({"compaction_style": 5}, TypeError),  # was ValueError: a wrong type is a TypeError, as for the others
        ({"compaction_style": None}, TypeError),
        ({"level0_stop_writes_trigger": 1, "level0_compaction_trigger": 4}, ValueError),
        ({"no_such_option": 1}, TypeError),
    ],
)
def test_bad_options_are_refused_before_anything_is_created(options: dict[str, Any], error: type, db_path: str) -> None:
    """Regression: a float max_levels or memtable_size, a str sync, fs=None or a huge bits_per_key used to be
    accepted, then crash (TypeError, AttributeError) halfway through creating the store, or fill memory."""
    with pytest.raises(error):
        minilsm.DB(db_path, **options)
    assert not os.path.exists(db_path)


def test_plyvels_option_names_are_refused_with_what_to_pass_instead(db_path: str) -> None:
    """Was: "unknown option(s): write_buffer_size", where the README maps plyvel's names to minilsm's, so that a
    port from plyvel had to look each one up."""
    with pytest.raises(TypeError) as e:
        minilsm.DB(db_path, create_if_missing=True, write_buffer_size=1 << 20, lru_cache_size=1 << 20, nope=1)
    assert str(e.value) == (
        "unknown option(s): lru_cache_size (plyvel's name; here block_cache_size), nope, "
        "write_buffer_size (plyvel's name; here memtable_size)"
    )
    for name, said in (("bloom_filter_bits", "bits_per_key"), ("compression", "does not compress")):
        with pytest.raises(TypeError, match=f"^unknown option\\(s\\): {name} \\(plyvel's.*{said}"):
            minilsm.DB(db_path, **{name: None})
    assert not os.path.exists(db_path)


def test_a_float_option_given_an_int_too_large_for_a_float_is_refused(db_path: str) -> None:
    """Regression: tiered_bucket_high=10**400 passed validation (an int is a valid float option), then the
    first tiered pick multiplied it by a float: OverflowError out of put(), and the store was read-only."""
    with pytest.raises(ValueError, match="tiered_bucket_high"):
        minilsm.DB(db_path, compaction_style="tiered", tiered_bucket_high=10**400)
    assert not os.path.exists(db_path)
    # An unbounded bucket stays expressible, as infinity.
    with minilsm.DB(db_path, **small_options(compaction_style="tiered", tiered_bucket_high=float("inf"))) as db:
        for i in range(300):
            db.put(b"k%03d" % i, b"v" * 20)
        assert db.stats().compactions > 0
        assert db.get(b"k123") == b"v" * 20


@pytest.mark.parametrize("options", ["fast", {"sync": True}, 3])
def test_an_options_argument_that_is_not_options_is_a_type_error(options: Any, db_path: str) -> None:
    """Regression: DB(path, "fast") or a dict raised AttributeError: 'str' object has no attribute 'fs'."""
    with pytest.raises(TypeError, match="Options"):
        minilsm.DB(db_path, options)


def test_a_bytes_path_names_the_same_directory(db_path: str) -> None:
    """Regression: a bytes path was formatted as "b'...'/LOCK" and the open failed with an odd StoreIOError."""
    with minilsm.DB(os.fsencode(db_path)) as db:
        db.put(b"k", b"v")
        assert db.path == db_path
    with minilsm.DB(db_path) as db:
        assert db.get(b"k") == b"v"
    with pytest.raises(TypeError):
        minilsm.DB(3)  # type: ignore[arg-type]


# -- directories ---------------------------------------------------------------------------


def test_missing_directory_and_path_under_a_file(tmp_path: Any) -> None:
    with pytest.raises(minilsm.NotFoundError):
        minilsm.DB(os.path.join(str(tmp_path), "nowhere"), create_if_missing=False)
    f = os.path.join(str(tmp_path), "file")
    with open(f, "w") as fh:
        fh.write("x")
    with pytest.raises(minilsm.NotFoundError, match="not a directory"):
        minilsm.DB(f)
    for under in ("db", "a/db"):  # was StoreIOError "[Errno 20] Not a directory", where a file itself is NotFoundError
        with pytest.raises(minilsm.NotFoundError, match=f"no store can be made there, {re.escape(f)} is not a dir"):
            minilsm.DB(os.path.join(f, under))
    with open(f) as fh:
        assert fh.read() == "x"


def test_a_directory_of_unrelated_files_gets_a_store_and_keeps_its_files(tmp_path: Any) -> None:
    d = str(tmp_path)
    theirs = {"notes.txt": b"mine", "data.bin": bytes(range(256)), "LOCKS": b"", "MANIFEST.bak": b"old"}
    for name, data in theirs.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    with minilsm.DB(d, **small_options()) as db:
        for k, v in DATA.items():
            db.put(k, v)
        db.compact_range()
    with minilsm.DB(d, **small_options()) as db:
        assert_intact(db)
    for name, data in theirs.items():
        with open(os.path.join(d, name), "rb") as f:
            assert f.read() == data


def test_a_directory_with_files_named_like_ours_is_refused_untouched(tmp_path: Any) -> None:
    d = str(tmp_path)
    for name in ("000001.log", "000007.sst"):
        with open(os.path.join(d, name), "wb") as f:
            f.write(b"someone else's")
    with pytest.raises(minilsm.CorruptionError, match="no MANIFEST"):
        minilsm.DB(d)
    assert sorted(n for n in os.listdir(d) if n != "LOCK") == ["000001.log", "000007.sst"]


@pytest.mark.parametrize("content", [b"", b"{}", b"not a manifest at all", b"MLSMMANI" + bytes(100)])
def test_a_foreign_manifest_is_corruption_and_nothing_is_deleted(db_path: str, content: bytes) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        for k, v in DATA.items():
            db.put(k, v)
        db.flush()
    before = sorted(os.listdir(db_path))
    with open(os.path.join(db_path, "MANIFEST"), "wb") as f:
        f.write(content)
    with pytest.raises(minilsm.CorruptionError) as e:
        minilsm.DB(db_path)
    assert e.value.path is not None and e.value.path.endswith("MANIFEST")
    assert sorted(os.listdir(db_path)) == before


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        b'{"a":' * 100_000,
        b"[]",
        b'{"next_file_number": 1e400}',
        b"\xff",
        b"null",
        b'{"kind": "edit", "format_version": 2}',
        b'{"kind": "snapshot", "format_version": 2, "levels": []}',
    ],
)
@pytest.mark.parametrize("version", [1, 2])
def test_a_forged_manifest_body_behind_a_valid_checksum_is_corruption(db_path: str, body: bytes, version: int) -> None:
    """Was: a deeply nested JSON body raised RecursionError out of the decoder instead of CorruptionError.

    Format 1 is one checksummed body; format 2 a log of records, here one record holding `body`."""
    import xxhash

    from minilsm.manifest import MANIFEST_NAME, decode_manifest
    from minilsm.wal import LogWriter

    with minilsm.DB(db_path, **small_options()):
        pass
    path = os.path.join(db_path, MANIFEST_NAME)
    if version == 1:
        data = struct.pack("<8sIIQ", b"MLSMMANI", 1, len(body), xxhash.xxh64_intdigest(body)) + body
    else:
        log = LogWriter(DEFAULT_FS.open_writable(path), 0)
        log.add_record(body)
        log.close()
        data = Path(path).read_bytes()
    with pytest.raises(minilsm.CorruptionError, match="malformed manifest"):
        decode_manifest(data, MANIFEST_NAME)
    with open(os.path.join(db_path, MANIFEST_NAME), "wb") as f:
        f.write(data)
    with pytest.raises(minilsm.CorruptionError) as e:
        minilsm.DB(db_path)
    assert e.value.path is not None and e.value.path.endswith(MANIFEST_NAME)


@pytest.mark.parametrize("forgery", ["listed_twice", "overlapping_in_a_level", "files_swapped"])
def test_a_manifest_that_disagrees_with_the_tables_is_corruption(db_path: str, forgery: str) -> None:
    """Regression: DB() trusted the manifest's table list as long as its checksum matched, so a manifest
    from a buggy writer or a restore that mixed two backups opened, and reads ran against impossible levels:
    a table listed twice, two overlapping tables in one level (an older value then wins reads), or table
    files whose contents are not what the manifest says.  `minilsm check` already called each of them damage."""
    from minilsm.manifest import read_manifest, write_manifest

    with minilsm.DB(db_path, **small_options()) as db:
        for r in range(2):
            for i in range(300):
                db.put(b"key%03d" % i, b"value %d %d" % (r, i))
        db.flush()
        levels = db.version.levels
        upper = levels[1][0]
        lower = db.version.overlapping(2, upper.smallest, upper.largest)[0]
        other = next(t for t in levels[2] if t.number != lower.number)
    state = read_manifest(DEFAULT_FS, db_path).state
    by_level = [[m.number for m in level] for level in state.levels]
    assert upper.number in by_level[1] and lower.number in by_level[2]
    if forgery == "listed_twice":
        state.levels[3].append(next(m for m in state.levels[2] if m.number == other.number))
    elif forgery == "overlapping_in_a_level":
        meta = next(m for m in state.levels[2] if m.number == lower.number)
        state.levels[2].remove(meta)
        state.levels[1].append(meta)
    else:
        a, b = (os.path.join(db_path, f"{t.number:06d}.sst") for t in (lower, other))
        os.rename(a, a + ".x")
        os.rename(b, a)
        os.rename(a + ".x", b)
    write_manifest(DEFAULT_FS, db_path, state)
    before = sorted(os.listdir(db_path))
    with pytest.raises(minilsm.CorruptionError) as e:
        minilsm.DB(db_path, **small_options())
    assert e.value.path is not None and os.path.basename(e.value.path) in ("MANIFEST", *before)
    assert sorted(os.listdir(db_path)) == before  # nothing recovered or deleted over it


@pytest.mark.parametrize(
    ("seq", "ops"),
    [(2**60, []), (1, [(1, b"key003", b"old")]), (5, [(0, b"key009", b"")])],
    ids=["empty_batch_past_the_last_sequence", "sequence_back_to_the_start", "sequence_inside_the_last_record"],
)
def test_a_forged_log_record_behind_valid_checksums_is_corruption(db_path: str, seq: int, ops: list[Any]) -> None:
    """Was: decode_batch left the sequence number of an empty batch unchecked, so 2**60 became the store's last
    sequence and the next put and flush failed with ValueError (trailer out of range); and recovery took a
    record whose sequence numbers go back as written, so b"old" at sequence 1 shadowed the newer value of
    key003 for good (or, for a key with one version, flushes failed with ValueError)."""
    from minilsm.batch import encode_batch
    from minilsm.wal import LogWriter

    db = minilsm.DB(db_path, **small_options(memtable_size=1 << 20))
    for k, v in list(DATA.items())[:10]:
        db.put(k, v)
    crash(db)
    (log,) = (n for n in os.listdir(db_path) if n.endswith(".log"))
    writer = LogWriter(DEFAULT_FS.open_appendable(os.path.join(db_path, log)), 0)
    writer.add_record(encode_batch(seq, ops))
    writer.close()
    with pytest.raises(minilsm.CorruptionError) as e:
        minilsm.DB(db_path, **small_options())
    assert e.value.path is not None and e.value.path.endswith(log)
    report = check_store(db_path)  # the checker agrees
    assert [(f.file, f.damage) for f in report.findings] == [(log, True)]


def test_an_unreadable_manifest_is_a_store_io_error(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        for k, v in DATA.items():
            db.put(k, v)
    fs = FaultFS()
    fs.arm("read", 1, sticky=True)  # EIO on every read: what a permission or media error looks like
    with pytest.raises(minilsm.StoreIOError, match="MANIFEST"):
        minilsm.DB(db_path, fs=fs)
    if os.geteuid() != 0:  # root reads through any permission bits
        os.chmod(os.path.join(db_path, "MANIFEST"), 0)
        with pytest.raises(minilsm.StoreIOError):
            minilsm.DB(db_path)
        os.chmod(os.path.join(db_path, "MANIFEST"), 0o644)
    manifest = os.path.join(db_path, "MANIFEST")
    os.rename(manifest, manifest + ".moved")
    os.mkdir(manifest)  # a MANIFEST that cannot be read as a file
    with pytest.raises(minilsm.Error):
        minilsm.DB(db_path)
    os.rmdir(manifest)
    os.rename(manifest + ".moved", manifest)
    with minilsm.DB(db_path, **small_options()) as db:
        assert_intact(db)


def test_a_store_held_by_another_process_is_refused_and_left_working(db_path: str) -> None:
    with minilsm.DB(db_path, **small_options()) as db:
        for k, v in DATA.items():
            db.put(k, v)
    holder = textwrap.dedent(f"""
        import sys, minilsm
        db = minilsm.DB({db_path!r})
        db.put(b"holder", b"was here")
        print("open", flush=True)
        sys.stdin.readline()
        db.put(b"holder", b"still works")
        db.close()
        print("closed", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                            text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "open"
        for _ in range(3):
            with pytest.raises(minilsm.LockError, match="already open"):
                minilsm.DB(db_path)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "closed"
    finally:
        proc.kill()
        proc.wait()
        # Close our ends of its pipes (else ResourceWarnings).  A "go" left unflushed by a failure above cannot
        # reach the dead child: closing still closes the pipe, then raises BrokenPipeError, which is not the news.
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        proc.stdout.close()
    with minilsm.DB(db_path, **small_options()) as db:
        assert db.get(b"holder") == b"still works"
        del db[b"holder"]
        assert_intact(db)


@pytest.mark.parametrize("error_if_exists", [False, True])
def test_a_store_another_process_creates_while_this_one_opens(db_path: str, error_if_exists: bool) -> None:
    """Was: whether the store existed was decided before taking the lock, so a store another process created
    in between was taken for a directory of stray files (CorruptionError) instead of being opened."""

    class CreatedMeanwhile(minilsm.fs.FileSystem):
        def lock(self, path: str) -> minilsm.fs.FileLock:
            with minilsm.DB(db_path) as other:  # another process, between our check and our lock
                other.put(b"other", b"process")
            return super().lock(path)

    fs = CreatedMeanwhile()
    if error_if_exists:
        with pytest.raises(minilsm.ExistsError):
            minilsm.DB(db_path, fs=fs, error_if_exists=True)
        fs = minilsm.fs.FileSystem()
    with minilsm.DB(db_path, fs=fs) as db:
        assert db.get(b"other") == b"process"


def test_a_store_reopens_with_fewer_levels_unless_tables_sit_below(db_path: str) -> None:
    """Regression: a store created with the default max_levels=7 could not be reopened with max_levels=4 even
    with its deeper levels empty ("CorruptionError: manifest has 7 levels"), a wrong diagnosis of a legal open."""
    with minilsm.DB(db_path, **small_options(max_levels=7)) as db:
        for k, v in DATA.items():
            db.put(k, v)
        db.compact_range()
        deepest = max(i for i, level in enumerate(db.version.levels) if level)
    with minilsm.DB(db_path, **small_options(max_levels=deepest + 1)) as db:
        assert_intact(db)
        db.put(b"key000", b"new")
        db.compact_range()
        del db[b"key000"]
        db.put(b"key000", DATA[b"key000"])
    with pytest.raises(ValueError, match=f"max_levels > {deepest}"):
        minilsm.DB(db_path, **small_options(max_levels=deepest))
    with minilsm.DB(db_path, **small_options(max_levels=7)) as db:
        assert_intact(db)


def test_a_write_past_the_last_sequence_number_is_refused_and_loses_nothing(db_path: str) -> None:
    """Was: acknowledged, then its flush failed with the builder's ValueError (struct.error past 2**64) and the
    reopen refused the log.  No store writes 2**56 versions, but a log or manifest can say it did: a record
    written to the new log after a flush takes the store to one short of `MAX_SEQUENCE`."""
    with minilsm.DB(db_path, **small_options()) as db:
        db.put(b"a", b"1")
        db.flush()
        (log,) = [os.path.join(db_path, f) for f in os.listdir(db_path) if f.endswith(".log")]
        assert os.path.getsize(log) == 0
    writer = LogWriter(DEFAULT_FS.open_appendable(log), os.path.getsize(log))
    writer.add_record(encode_batch(MAX_SEQUENCE - 1, [(KIND_VALUE, b"b", b"2")]))
    writer.close()
    for reopen in range(2):
        with minilsm.DB(db_path, **small_options()) as db:
            assert db.last_sequence == MAX_SEQUENCE - 1 + reopen
            with pytest.raises(minilsm.ReadOnlyError, match="past the maximum"), db.write_batch() as wb:
                wb.put(b"c", b"3")
                wb.put(b"d", b"4")  # two numbers: one too many
            if not reopen:
                db.put(b"c", b"3")  # the last one
            with pytest.raises(minilsm.ReadOnlyError, match="past the maximum"):
                db.put(b"e", b"5")
            assert dict(db.iterator()) == {b"a": b"1", b"b": b"2", b"c": b"3"}
            db.flush()
