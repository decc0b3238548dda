"""Corruption: flip every byte and cut every length of every file of a small store, then open and read it all.

The store holds four tables over two levels, a log of unflushed writes and a
manifest.  For each damaged copy, opening the store and reading every key
(``get`` and a full scan) must either give exactly the right answers or raise
`CorruptionError` naming the damaged file, within a bounded time; never a
wrong value and never another exception type.  The one allowed loss: damage in
the log's last record looks exactly like a torn append, so that record may be
dropped (and with ``paranoid_checks=False`` recovery keeps exactly the records
before the damage).  ``minilsm check`` (`minilsm.check.check_store`) must
report every damage, and `TableReader.verify` every damaged table byte.

Tables are also attacked alone (open, get every key, scan, verify), which is
cheap enough to do for every byte in CI; through the whole store CI flips
every byte of the log and manifest and a stride of the table bytes, and
``--slow`` every byte of everything.  Each test prints its counts.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from storeutil import fast_tmp_dir, flip_byte, forge_block, small_options

import minilsm
from minilsm.bloom import key_hash
from minilsm.errors import CorruptionError
from minilsm.fs import FileSystem, WritableFile
from minilsm.keys import MAX_SEQUENCE
from minilsm.repair import repair_store
from minilsm.sstable import TableReader, parse_table_file_name
from minilsm.stats import Stats
from minilsm.wal import read_log

try:
    from minilsm.check import check_store
except ImportError:  # the checker is another module's work; the table-level checks below still run
    check_store = None  # type: ignore[assignment]

TIME_LIMIT = 5.0
"""Seconds one open-and-read-everything may take; a hang or a forged length that loops fails it."""

KEYS = [b"key%03d" % i for i in range(75)]


class _NoSyncFile:
    __slots__ = ("_f",)

    def __init__(self, f: WritableFile) -> None:
        self._f = f

    def append(self, data: bytes) -> None:
        self._f.append(data)

    def flush(self) -> None:
        self._f.flush()

    def sync(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class NoSyncFS(FileSystem):
    """The real file system without fsync: thousands of opens (each writing a manifest) in seconds."""

    def open_writable(self, path: str) -> WritableFile:
        return _NoSyncFile(super().open_writable(path))

    def sync_dir(self, path: str) -> None:
        pass


FS = NoSyncFS()


# -- the store under attack ---------------------------------------------------------------


@dataclass
class Store:
    path: str
    base: dict[bytes, bytes]
    """The data in the tables."""
    log_ops: list[tuple[bytes, bytes | None]]
    """One op per log record, in order: (key, value), value None for a delete."""
    log_name: str
    record_ends: list[int]
    """Offset just past each log record."""
    tables: list[str]
    written: dict[bytes, set[bytes]]
    """Every value ever written to each key, the tables' and the log's."""
    manifest: str = "MANIFEST"

    def model(self, records: int) -> dict[bytes, bytes]:
        """The store's content with the first `records` log records replayed."""
        m = dict(self.base)
        for k, v in self.log_ops[:records]:
            if v is None:
                m.pop(k, None)
            else:
                m[k] = v
        return m

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    path = str(tmp_path_factory.mktemp("pristine") / "db")
    base: dict[bytes, bytes] = {}
    written: dict[bytes, set[bytes]] = {}
    with minilsm.DB(path, **small_options(fs=FS)) as db:
        for i in range(160):
            k, v = b"key%03d" % (i % 70), b"value%d-" % i * 4
            db.put(k, v)
            base[k] = v
            written.setdefault(k, set()).add(v)
            if i % 9 == 0:
                k = b"key%03d" % ((i * 7) % 70)
                db.delete(k)
                base.pop(k, None)
        db.flush()
        assert len(db.version.levels[0]) >= 1 and sum(map(len, db.version.levels[1:])) >= 2
    log_ops: list[tuple[bytes, bytes | None]] = []
    with minilsm.DB(path, **small_options(fs=FS, memtable_size=1 << 20)) as db:  # close leaves these in the log
        for j in range(10):
            k = b"key%03d" % (j * 7 % 75)
            if j % 4 == 3:
                db.delete(k)
                log_ops.append((k, None))
            else:
                db.put(k, b"log%d" % j * 3)
                log_ops.append((k, b"log%d" % j * 3))
                written.setdefault(k, set()).add(b"log%d" % j * 3)
    names = sorted(os.listdir(path))
    (log_name,) = [n for n in names if n.endswith(".log")]
    with open(os.path.join(path, log_name), "rb") as f:
        data = f.read()
    records = read_log(data, log_name).records
    assert len(records) == len(log_ops)
    ends, pos = [], 0
    for r in records:
        pos += 16 + len(r)
        ends.append(pos)
    tables = [n for n in names if parse_table_file_name(n) is not None]
    s = Store(path, base, log_ops, log_name, ends, tables, written)
    check = path + ".check"
    shutil.copytree(path, check)  # opening replays the log: never open the pristine copy itself
    assert read_everything(check)[1] == s.model(len(log_ops))
    return s


@pytest.fixture
def work() -> Iterator[str]:
    """Where damaged copies are made: in RAM where possible (thousands of copies)."""
    with fast_tmp_dir() as d:
        yield os.path.join(d, "db")


# -- damaging and reading -------------------------------------------------------------------


def damaged_copies(store: Store, work: str, name: str, positions: Iterator[int], truncate: bool) -> Iterator[int]:
    """For each position: a fresh copy of the store in `work` with byte `pos` of `name` flipped (or cut there)."""
    for pos in positions:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(store.path, work)
        damage(os.path.join(work, name), pos, truncate)
        yield pos


def damage(path: str, pos: int, truncate: bool) -> None:
    with open(path, "r+b") as f:
        if truncate:
            f.truncate(pos)
        else:
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ 0xFF]))


Outcome = dict[bytes, Any]


def read_everything(path: str, paranoid: bool = True) -> tuple[Outcome, Any, minilsm.RecoveryReport]:
    """Open and read every key and a full scan.  Reads that fail with CorruptionError give the error instead."""
    start = time.monotonic()
    with minilsm.DB(path, **small_options(fs=FS, paranoid_checks=paranoid, memtable_size=1 << 20)) as db:
        gets: Outcome = {}
        for k in KEYS:
            try:
                v = db.get(k)
            except CorruptionError as e:
                v = e
            if v is not None:
                gets[k] = v
        try:
            scan: Any = dict(db.iterator())
        except CorruptionError as e:
            scan = e
        recovery = db.recovery
    assert time.monotonic() - start < TIME_LIMIT
    return gets, scan, recovery


def names(e: CorruptionError, name: str) -> bool:
    return e.path is not None and os.path.basename(e.path) == name


def assert_right_or_corruption(got: Outcome, scan: Any, expect: dict[bytes, bytes], name: str, where: str) -> int:
    """Every answer is right or a CorruptionError naming `name`; returns how many were errors."""
    errors = 0
    for k in KEYS:
        v = got.get(k)
        if isinstance(v, CorruptionError):
            assert names(v, name), f"{where}: {k!r}: {v} does not name {name}"
            errors += 1
        else:
            assert v == expect.get(k), f"{where}: WRONG VALUE for {k!r}: {v!r}, expected {expect.get(k)!r}"
    if isinstance(scan, CorruptionError):
        assert names(scan, name), f"{where}: scan: {scan} does not name {name}"
        errors += 1
    else:
        assert scan == expect, f"{where}: WRONG SCAN"
    return errors


def checker_finds(path: str, name: str, *, allow_note: bool = False) -> None:
    """`minilsm check` reports damage in file `name` (or, when allowed, a note on it: a torn log tail)."""
    if check_store is None:
        return
    report = check_store(path)
    found = [f for f in report.findings if f.file == name and (f.damage or allow_note)]
    assert found, f"minilsm check missed the damage to {name}: {report.findings}"


def stride(n: int, step: int, slow: bool) -> range:
    return range(0, n, 1 if slow else step)


@pytest.fixture
def slow(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--slow"))


# -- the manifest ----------------------------------------------------------------------------


def test_every_manifest_byte_flipped_or_cut_is_reported(store: Store, work: str) -> None:
    size = os.path.getsize(store.file(store.manifest))
    counts = {"flipped": 0, "truncated": 0}
    for truncate in (False, True):
        for pos in damaged_copies(store, work, store.manifest, iter(range(size)), truncate):
            with pytest.raises(CorruptionError) as e:
                minilsm.DB(work, **small_options(fs=FS))
            assert names(e.value, store.manifest), e.value
            if pos % 16 == 0:
                checker_finds(work, store.manifest)
            counts["truncated" if truncate else "flipped"] += 1
    print(f"manifest ({size} bytes): {counts}")


# -- the log -----------------------------------------------------------------------------------


def test_every_log_byte_flipped_gives_right_answers_or_corruption(store: Store, work: str) -> None:
    size = os.path.getsize(store.file(store.log_name))
    n = len(store.log_ops)
    outcomes = {"corruption": 0, "last record dropped": 0, "checked": 0}
    for paranoid in (True, False):
        for pos in damaged_copies(store, work, store.log_name, iter(range(size)), truncate=False):
            damaged_record = next(i for i, end in enumerate(store.record_ends) if pos < end)
            where = f"log byte {pos} (record {damaged_record}) paranoid={paranoid}"
            try:
                got, scan, recovery = read_everything(work, paranoid)
            except CorruptionError as e:
                # (The last record too: a torn append cannot damage a header that is followed by more bytes.)
                assert paranoid and names(e, store.log_name), f"{where}: {e}"
                outcomes["corruption"] += 1
                continue
            # Paranoid or not, recovery keeps exactly the records before the damage: the damaged one can
            # only be the torn last record when paranoid, and later ones are never replayed past a hole.
            assert paranoid is False or damaged_record == n - 1, f"{where}: damage mid-log was not reported"
            assert_right_or_corruption(got, scan, store.model(damaged_record), "-", where)
            assert recovery.corruption is not None or damaged_record == n - 1
            outcomes["last record dropped" if damaged_record == n - 1 else "checked"] += 1
            if paranoid and pos % 8 == 0:
                shutil.rmtree(work)
                shutil.copytree(store.path, work)
                damage(os.path.join(work, store.log_name), pos, truncate=False)
                checker_finds(work, store.log_name, allow_note=damaged_record == n - 1)
    print(f"log ({size} bytes, {n} records), every byte flipped, both paranoid modes: {outcomes}")


def test_every_log_truncation_keeps_exactly_the_whole_records(store: Store, work: str) -> None:
    size = os.path.getsize(store.file(store.log_name))
    for pos in damaged_copies(store, work, store.log_name, iter(range(size)), truncate=True):
        whole = sum(1 for end in store.record_ends if end <= pos)
        got, scan, recovery = read_everything(work)
        assert_right_or_corruption(got, scan, store.model(whole), "-", f"log cut at {pos}")
        assert recovery.dropped_bytes == pos - (store.record_ends[whole - 1] if whole else 0)
    print(f"log: {size} truncations")


# -- the tables ---------------------------------------------------------------------------------


def attack_table(path: str, number: int, entries: list[tuple[bytes, int, bytes]]) -> str:
    """Open the (damaged) table alone, get every key, scan it, verify it.  Returns what caught the damage."""
    start = time.monotonic()
    dirname = os.path.dirname(path)
    try:
        t = TableReader.open(FS, dirname, number, Stats())
    except CorruptionError as e:
        assert e.path == path, e
        return "open"
    try:
        caught = ""
        for key in dict.fromkeys(k for k, _, _ in entries):
            want = next((t_ & 0xFF, v) for k, t_, v in entries if k == key)
            try:
                got = t.get(key, key_hash(key), MAX_SEQUENCE)
            except CorruptionError as e:
                assert e.path == path, e
                caught = caught or "get"
                continue
            assert got == want, f"WRONG VALUE for {key!r}: {got!r}, expected {want!r}"
        try:
            assert list(t.iter()) == entries, "WRONG SCAN"
        except CorruptionError as e:
            assert e.path == path, e
            caught = caught or "scan"
        with pytest.raises(CorruptionError) as err:
            t.verify()
        assert err.value.path == path
        return caught or "verify"
    finally:
        t.close()
        assert time.monotonic() - start < TIME_LIMIT


def test_every_table_byte_flipped_is_caught_alone(store: Store, work: str) -> None:
    """Each table alone: every byte flipped; reads are right or CorruptionError, and verify() catches it."""
    caught: dict[str, int] = {}
    total = 0
    for name in store.tables:
        number = parse_table_file_name(name)
        assert number is not None
        src = store.file(name)
        t = TableReader.open(FS, store.path, number, Stats())
        entries = list(t.iter())
        t.close()
        os.makedirs(work, exist_ok=True)
        dst = os.path.join(work, name)
        shutil.copy(src, dst)
        for pos in range(os.path.getsize(src)):
            damage(dst, pos, truncate=False)
            by = attack_table(dst, number, entries)
            caught[by] = caught.get(by, 0) + 1
            damage(dst, pos, truncate=False)  # flip it back
            total += 1
        for cut in range(os.path.getsize(src)):
            shutil.copy(src, dst)
            damage(dst, cut, truncate=True)
            with pytest.raises(CorruptionError) as e:
                TableReader.open(FS, work, number, Stats())
            assert e.value.path == dst
            total += 1
    print(f"tables {store.tables}: {total} damaged copies; flips first caught by {caught}, every cut at open")


def test_table_damage_through_the_store(store: Store, work: str, slow: bool) -> None:
    """Flips and cuts in the store's tables: opening and reading everything is right or names the table."""
    expect = store.model(len(store.log_ops))
    counts = {"flipped": 0, "truncated": 0, "open refused": 0, "reads refused": 0, "unharmed": 0}
    for name in store.tables:
        size = os.path.getsize(store.file(name))
        for truncate in (False, True):
            for pos in damaged_copies(store, work, name, iter(stride(size, 7 if truncate else 3, slow)), truncate):
                counts["truncated" if truncate else "flipped"] += 1
                where = f"{name} {'cut' if truncate else 'byte'} {pos}"
                try:
                    got, scan, _ = read_everything(work)
                except CorruptionError as e:
                    assert names(e, name), f"{where}: {e}"
                    counts["open refused"] += 1
                else:
                    errors = assert_right_or_corruption(got, scan, expect, name, where)
                    counts["reads refused" if errors else "unharmed"] += 1
                if pos % 5 == 0:
                    shutil.rmtree(work)
                    shutil.copytree(store.path, work)
                    damage(os.path.join(work, name), pos, truncate)
                    checker_finds(work, name)
    print(f"tables through the store: {counts}")


def test_a_repair_of_any_damage_opens_and_invents_no_value(store: Store, work: str, slow: bool) -> None:
    """`minilsm repair` of each damaged copy: the store then opens and reads back whole, each key with a value
    it was once given (or none), and the repair reports the damage; a damaged manifest costs nothing, the
    tables and the log being whole.  Every byte of the manifest and the log; a stride of the tables'."""
    expect = store.model(len(store.log_ops))
    counts = {"repaired": 0, "exact": 0, "keys lost or older": 0}
    for name in [store.manifest, store.log_name, *store.tables]:
        size = os.path.getsize(store.file(name))
        step = 1 if slow or not name.endswith(".sst") else 11
        for truncate in (False, True):
            positions = iter(range(0, size, step if truncate else step + 2))
            for pos in damaged_copies(store, work, name, positions, truncate):
                where = f"{name} {'cut' if truncate else 'byte'} {pos}"
                report = repair_store(work, **small_options(fs=FS))
                counts["repaired"] += 1
                assert report.ok or {f.file for f in report.findings} <= {name, store.manifest}, where
                got, scan, _ = read_everything(work)
                assert scan == got, where
                assert all(v in store.written[k] for k, v in got.items()), f"{where}: a value never written"
                if name == store.manifest:
                    assert got == expect, where
                counts["exact" if got == expect else "keys lost or older"] += 1
    print(f"repairs: {counts}")


def test_the_cli_check_reports_damage_with_exit_status_1(store: Store, work: str, capsys: Any) -> None:
    cli: Callable[[list[str]], int] | None
    try:
        from minilsm.cli import main as cli
    except ImportError:
        pytest.skip("minilsm.cli is not there yet")
    shutil.copytree(store.path, work)
    assert cli(["check", work]) == 0
    for name in (store.tables[0], store.manifest):
        shutil.rmtree(work)
        shutil.copytree(store.path, work)
        damage(os.path.join(work, name), os.path.getsize(os.path.join(work, name)) // 2, truncate=False)
        assert cli(["check", work]) == 1
        assert name in capsys.readouterr().out


@pytest.mark.parametrize("options", [{}, {"verify_checksums": False}, {"verify_checksums": False, "fill_cache": False}])
def test_a_damaged_data_block_is_an_error_whatever_the_read_asks(work: str, options: dict[str, bool]) -> None:
    """plyvel's ``verify_checksums=False`` (its default) turns off no check here: a data block that fails its
    checksum is a CorruptionError naming its table, for a read, a scan and a raw iterator alike."""
    with minilsm.DB(work, **small_options(block_cache_size=0)) as db:
        for i in range(50):
            db.put(b"k%03d" % i, b"v" * 20)
        db.flush()
        (table,) = [t.file_name for t in db.tables()]
        flip_byte(os.path.join(work, table), 10)  # inside the first data block, which holds k000
        reads: list[Callable[[], object]] = [
            lambda: db.get(b"k000", **options),
            lambda: db.snapshot().get(b"k000", **options),
            lambda: list(db.iterator(**options)),
            lambda: db.raw_iterator(**options).seek_to_first(),
        ]
        for read in reads:
            with pytest.raises(CorruptionError) as raised:
                read()
            assert names(raised.value, table)


@pytest.mark.parametrize("mode", ["inline", "thread", "worker"])
@pytest.mark.parametrize("forgery", ["order", "kind"])
def test_a_compaction_that_meets_a_block_forged_with_a_valid_checksum_names_its_table(
    work: str, forgery: str, mode: str
) -> None:
    """Was: ValueError from the table builder (ReadOnlyError caused by it, in the background), naming no file.
    Reads trust a block whose checksum passed; the merge finds the damage when the builder refuses a version,
    and `verify` of its inputs names the table, as for any other damage."""
    opts = small_options(background=mode != "inline", compaction_worker=mode == "worker", level0_compaction_trigger=4)
    with minilsm.DB(work, **opts) as db:
        for batch in ((b"key1", b"key2"), (b"key3",)):
            for k in batch:
                db.put(k, b"value")
            db.flush()
        first = min(t.file_name for t in db.tables())
        reader = TableReader.open(FS, work, int(first[:-4]), Stats())
        offset, size = reader._offsets[0], reader._sizes[0]
        reader.close()

    def forge(block: bytearray) -> None:  # the first entry: key_len u32 | value_len u32 | trailer u64 | key | value
        if forgery == "kind":
            block[8] = 7
        else:
            block[16:20] = b"key9"  # key9, key2: out of order

    forge_block(os.path.join(work, first), offset, size, forge)
    with minilsm.DB(work, **opts) as db:
        with pytest.raises(minilsm.Error) as raised:
            db.compact_range()
        damage = raised.value if isinstance(raised.value, CorruptionError) else raised.value.__cause__
        assert isinstance(damage, CorruptionError) and names(damage, first), raised.value
        assert ("unknown kind 7" if forgery == "kind" else "follows") in str(damage)
