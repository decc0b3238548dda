"""Offline verification of a store directory: what ``minilsm check`` runs.

Opening a `DB` recovers (it replays the logs into a new table and deletes what
no one references), and it stops at the first damage.  A check must do
neither: it only reads, and it reports every problem it finds.  So it walks
the files itself: the manifest and its checksum, then every table the manifest
lists (`TableReader.open` checks footer, index, filter and properties;
`TableReader.verify` every data block and how it agrees with them) against
what the manifest says of it, the level invariants (levels 1 and deeper
sorted and disjoint; each key's versions older in each table a read probes
later, which no checksum covers), and every log that recovery would replay
(each record's checksums and its batch encoding).

Findings are *damage* (the store would not open, or would return wrong data)
or *notes* (what a crash leaves and the next open cleans up: a torn log tail,
an orphan or temporary file, a compaction worker's scratch directory).
`check_store` takes the store's lock, so a store open elsewhere is refused
rather than checked mid-change.
"""

from __future__ import annotations

import contextlib
import heapq
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from minilsm.batch import LogChain
from minilsm.cache import TableFileCache
from minilsm.db import lock_holder, lock_store, store_path
from minilsm.errors import CorruptionError, LockError, NotFoundError, StoreIOError
from minilsm.fs import DEFAULT_FS, FileSystem
from minilsm.manifest import LOCK_NAME, MANIFEST_NAME, ManifestState, read_manifest, refuse_foreign_store
from minilsm.options import Options
from minilsm.sstable.format import TEMP_SUFFIX, parse_table_file_name, table_file_name
from minilsm.sstable.reader import TableReader
from minilsm.stats import Stats
from minilsm.version import Version
from minilsm.wal import log_file_name, parse_log_file_name, read_log_file
from minilsm.worker import is_scratch_name


@dataclass(frozen=True, slots=True)
class Finding:
    file: str
    """The file's name in the store directory."""
    message: str
    damage: bool

    def __str__(self) -> str:
        return f"{'DAMAGE' if self.damage else 'note'}: {self.file}: {self.message}"


@dataclass
class CheckReport:
    """What `check_store` found; `ok` is True when there is no damage (notes are fine)."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    tables_checked: int = 0
    table_bytes_checked: int = 0
    logs_checked: int = 0
    log_records_checked: int = 0

    @property
    def ok(self) -> bool:
        """True when no finding is damage.  O(findings)."""
        return not any(f.damage for f in self.findings)

    def damage(self, file: str, message: str) -> None:
        """Record damage in `file` (the check's own step; it makes `ok` False).  O(1)."""
        self.findings.append(Finding(file, message, True))

    def note(self, file: str, message: str) -> None:
        """Record a harmless finding in `file`, such as a crash's leftover the next open deletes.  O(1)."""
        self.findings.append(Finding(file, message, False))

    def render(self) -> str:
        """The findings, one a line, and a summary line: what ``minilsm check`` prints.  O(findings)."""
        lines = [str(f) for f in self.findings]
        problems = sum(f.damage for f in self.findings)
        lines.append(
            f"{self.path}: {_count(self.tables_checked, 'table')} ({self.table_bytes_checked:,} bytes) and "
            f"{_count(self.logs_checked, 'log')} ({_count(self.log_records_checked, 'record')}) checked: "
            + ("ok" if self.ok else f"{_count(problems, 'problem')} found")
        )
        return "\n".join(lines)

    __str__ = render

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON types: what ``minilsm check --json`` prints.  O(findings)."""
        return {
            "path": self.path,
            "ok": self.ok,
            "tables_checked": self.tables_checked,
            "table_bytes_checked": self.table_bytes_checked,
            "logs_checked": self.logs_checked,
            "log_records_checked": self.log_records_checked,
            "findings": [{"file": f.file, "message": f.message, "damage": f.damage} for f in self.findings],
        }


def check_store(path: str | os.PathLike[str], fs: FileSystem = DEFAULT_FS) -> CheckReport:
    """Verify every checksum of every live file of the store at `path`, reading only.  O(store size): every
    table is read twice, once for its blocks and once to merge its versions with every other table's, in
    O(versions * log(tables)), to check that each key's versions grow older in the order reads probe them.

    `path` is taken as `DB` takes it (str, bytes or path-like, made absolute).  Raises `NotFoundError` if `path`
    holds no store, `LockError` if the store is open, `ValueError` if `path` is empty (not the working directory).
    """
    path = store_path(path)
    with closed_store(fs, path, "check") as names:
        report = CheckReport(path)
        state = _check_manifest(fs, path, names, report)
        live = _check_tables(fs, path, state, report) if state is not None else set()
        _check_logs(fs, path, names, state, report)
        for name in sorted(names):
            number = parse_table_file_name(name)
            if number is not None and state is not None and number not in live:
                report.note(name, "table not in the manifest (left by a crash; the next open deletes it)")
            elif is_scratch_name(name):
                report.note(name, "a compaction worker's scratch directory (left by a crash; the next open deletes it)")
            elif is_store_temp_file(name):
                if fs.is_regular_file(f"{path}/{name}"):
                    report.note(name, "temporary file (left by a crash; the next open deletes it)")
                else:
                    # The open writes through this name before it sweeps leftovers, and refuses to write
                    # through anything but a file of its own (`FileSystem.open_writable`): it would fail.
                    report.damage(
                        name, "not a regular file: the store cannot write its temporary file there (remove it)"
                    )
        return report


@contextlib.contextmanager
def closed_store(fs: FileSystem, path: str, doing: str) -> Iterator[list[str]]:
    """Hold the lock of the store at `path` for an offline tool (check, repair, destroy), and give the names of
    its directory, listed under the lock (the store may change until then).

    Raises `NotFoundError` if `path` holds no store, and `LockError` (saying what it would `doing`) if the
    store is open, by this process or another.  A file operation that fails, here or in the tool's own work
    (a full disk, a LOCK that is a directory, too many open files), is a `StoreIOError` naming the store, as
    for an open store; the tool leaves what it did not finish as its own docstring says.
    """
    try:
        names = fs.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    except OSError as e:
        raise StoreIOError(f"{path}: could not {doing} the store: {e}") from e
    if MANIFEST_NAME not in names:
        refuse_foreign_store(path, names)  # which a repair would take for a damaged store, and a destroy remove
        if not any(map(is_table_or_log, names)):
            raise NotFoundError(f"no minilsm store at {path}")
    try:
        # As `DB` takes it: a store of this process dropped a moment ago, whose background thread still ends its
        # job, or that a reference cycle holds, is waited for, not taken for one open (destroy right after del).
        lock = lock_store(fs, path)
    except BlockingIOError as e:
        raise LockError(f"{path} is open {lock_holder(e)}; close it to {doing} it") from None
    except OSError as e:
        raise StoreIOError(f"{path}: could not {doing} the store: taking its {LOCK_NAME}: {e}") from e
    try:
        yield sorted(fs.listdir(path))
    except OSError as e:
        raise StoreIOError(f"{path}: could not {doing} the store: {e}") from e
    finally:
        lock.release()


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def is_table_or_log(name: str) -> bool:
    """Whether `name` is a table's or a log's file name, as the store writes them."""
    return parse_table_file_name(name) is not None or parse_log_file_name(name) is not None


def is_store_temp_file(name: str) -> bool:
    """A temporary name of the store's (a table or manifest being made, or a log's name + .tmp), which an open deletes.

    Any other ``.tmp`` file is not the store's, and the store leaves it alone, as every foreign file.
    """
    base = name.removesuffix(TEMP_SUFFIX)
    return base != name and (base == MANIFEST_NAME or is_table_or_log(base))


def _check_manifest(fs: FileSystem, path: str, names: list[str], report: CheckReport) -> ManifestState | None:
    if MANIFEST_NAME not in names:
        report.damage(MANIFEST_NAME, "missing: the store's table and log files have no manifest")
        return None
    try:
        read = read_manifest(fs, path)
    except (CorruptionError, OSError) as e:  # OSError: a directory, a FIFO or a dangling link by that name
        report.damage(MANIFEST_NAME, _detail(e))
        return None
    if read.dropped_bytes:
        state = read.state
        needed = [table_file_name(m.number) for level in state.levels for m in level]
        needed += [log_file_name(state.log_number)] if state.log_number else []
        if missing := [name for name in needed if name not in names]:
            # As at an open: a torn edit was never acted on, so a file the state before it names is missing
            # only if that edit was whole once, and acted on.  The open refuses the store, so nothing of the
            # state before it (missing files, tables the next open would delete) is the store's.
            report.damage(
                MANIFEST_NAME,
                f"{', '.join(missing)} missing once the torn last record of {read.dropped_bytes} bytes is "
                "dropped: an edit the store acted on is damaged",
            )
            return None
        report.note(
            MANIFEST_NAME,
            f"torn last record of {read.dropped_bytes} bytes (a crash mid-append; the next open drops it)",
        )
    return read.state


def _check_tables(fs: FileSystem, path: str, state: ManifestState, report: CheckReport) -> set[int]:
    """Open and verify each table the manifest lists, and the order of its levels; returns their numbers."""
    readers: list[list[TableReader]] = []
    seen: set[int] = set()
    stats = Stats()
    # Readers that fetch their file for each read, as the store's do: the level order is checked with every
    # table at hand, and a store may have more tables than this process may open files.
    files = TableFileCache(fs, Options().max_open_files)
    try:
        _verify_tables(fs, path, state, report, readers, seen, stats, files)
        try:
            version = Version(readers, max(len(readers), 2))
            version.check_invariants()
        except AssertionError as e:
            report.damage(MANIFEST_NAME, f"levels are inconsistent: {e}")
        else:
            _check_level_order(version, report)
    finally:
        for reader in (r for level in readers for r in level):
            reader.close()
        files.clear()
    return seen


def _verify_tables(
    fs: FileSystem,
    path: str,
    state: ManifestState,
    report: CheckReport,
    readers: list[list[TableReader]],
    seen: set[int],
    stats: Stats,
    files: TableFileCache,
) -> None:
    """Verify each table the manifest lists, adding each whole one to `readers` (open) and each number to `seen`."""
    for level, metas in enumerate(state.levels):
        readers.append([])
        for meta in metas:
            name = table_file_name(meta.number)
            if meta.number in seen:
                report.damage(name, f"listed twice in the manifest (again at level {level})")
                continue
            seen.add(meta.number)
            if not fs.exists(f"{path}/{name}"):
                report.damage(name, f"missing (the manifest lists it at level {level})")
                continue
            try:
                reader = TableReader.open(fs, path, meta.number, stats, file_cache=files)
            except (CorruptionError, OSError) as e:
                report.damage(name, _detail(e))
                continue
            try:
                reader.verify()
                report.tables_checked += 1
                report.table_bytes_checked += reader.file_size
                if reader.meta != meta:
                    report.damage(name, f"the manifest says {meta}, the table holds {reader.meta}")
                readers[level].append(reader)
            except (CorruptionError, OSError) as e:
                reader.close()
                files.evict(reader.path)
                report.damage(name, _detail(e))


def _versions_ranked(tables: list[TableReader], rank: int) -> Iterator[tuple[bytes, int, int, int]]:
    """``(user_key, rank, -sequence, table number)`` of each version of `tables` (sorted and disjoint), in
    internal order: one table read at a time."""
    for table in tables:
        number = table.number
        for key, trailer, _ in table.iter_entries():
            yield key, rank, -(trailer >> 8), number


def _check_level_order(version: Version, report: CheckReport) -> None:
    """Damage unless each key's versions grow older in the order a read probes the tables (level 0's newest
    first, then each deeper level): a read takes the first version it meets, so a newer one deeper down is
    never read.  No checksum covers this: a manifest written whole that places tables wrongly (two backups
    mixed, a writer's bug) reads back whole, and the open trusts it.  One merge of every table's versions:
    O(versions * log(tables)), beside the O(store size) of the reads."""
    # Each table of level 0 a rank of its own, in the order reads probe them; each deeper level one rank.
    runs = [[t] for t in version.levels[0]] + [list(level) for level in version.levels[1:] if level]
    level_of = {t.number: level for level, t in version.tables()}
    last_key: bytes | None = None
    rank_now = oldest = 0  # the rank of the versions of `last_key` being read, and the oldest sequence there
    above: tuple[int, int] | None = None  # the oldest version above that rank: (sequence, table number)
    where = 0
    for key, rank, minus_seq, number in heapq.merge(*(_versions_ranked(run, rank) for rank, run in enumerate(runs))):
        seq = -minus_seq
        if key != last_key:
            last_key, rank_now, above = key, rank, None
        elif rank != rank_now:
            if above is None or oldest < above[0]:
                above = (oldest, where)
            rank_now = rank
        oldest, where = seq, number  # a table's versions of a key come newest first
        if above is not None and seq > above[0]:
            newer, older = table_file_name(number), table_file_name(above[1])
            report.damage(
                MANIFEST_NAME,
                f"levels out of order: {key!r} has a newer version (sequence {seq}) in {newer} at level "
                f"{level_of[number]} than in {older} at level {level_of[above[1]]} (sequence {above[0]}), which a "
                "read meets first",
            )
            return  # one says it: a misplaced table puts every key it shares out of order


def _check_logs(fs: FileSystem, path: str, names: list[str], state: ManifestState | None, report: CheckReport) -> None:
    """Check every log recovery would replay (all of them when the manifest is unreadable)."""
    floor = state.log_number if state is not None else 0
    if floor and log_file_name(floor) not in names:
        report.damage(log_file_name(floor), "missing (the manifest needs it: it holds writes no table has)")
    # As recovery replays them: in number order, sequence numbers going on from the tables' newest.
    chain = LogChain(state.newest_table_sequence() if state is not None else 0)
    for number, name in sorted((n, name) for name in names if (n := parse_log_file_name(name)) is not None):
        if number < floor:
            report.note(name, "obsolete log, already flushed to tables (the next open deletes it)")
            continue
        log_path = f"{path}/{name}"
        try:
            result = read_log_file(fs, log_path, paranoid=True)
            lost = chain.lost_before(result.records, log_path)
            chain.replay(result.records, result.dropped_bytes, log_path)
        except (CorruptionError, OSError) as e:
            report.damage(name, _detail(e))
            chain.skip()
            continue
        if lost is not None:  # an older log's end, found by this one's records
            report.damage(os.path.basename(lost.path or ""), lost.detail)
        report.logs_checked += 1
        report.log_records_checked += len(result.records)
    if chain.torn is not None:
        name, dropped = chain.torn
        report.note(
            os.path.basename(name), f"torn tail of {dropped} bytes (a crash mid-append; the next open drops it)"
        )


def _detail(e: CorruptionError | OSError) -> str:
    return e.detail if isinstance(e, CorruptionError) else f"cannot be read: {e}"
