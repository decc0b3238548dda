"""Rebuilding a damaged store from what can still be read: what ``minilsm repair`` runs (LevelDB's RepairDB).

A store whose manifest is lost or damaged, or one of whose logs or tables'
footers, indexes, filters or properties is, does not open: the open raises
`CorruptionError` naming the file, and never guesses (a damaged data block
fails the reads that need it).  `repair_store` is the guess, made on purpose
and reported in full:

* the versions: every data block of every table that reads back whole (a
  block failing its checksum is skipped; a table whose footer, index or filter
  is damaged is skipped whole), and every log record before a log's first
  damage.  With a readable manifest, the tables it lists and the logs it still
  needs; without one, every table and log in the directory, as LevelDB does;
* merged by sequence number, not by where they were found, so each key keeps
  its newest version read (a newer version lost with a damaged block leaves
  the one before it, as it must: nothing newer is known); tombstones go, since
  nothing older is left below them;
* written as new tables in one level (the lowest whose size limit holds them,
  and no deeper than a readable manifest's levels, which are as many as the
  store's last open had, its ``max_levels``; level 0 for a tiered store), under
  a new manifest whose last sequence number is the newest read, so new writes
  come after every version kept.

The new manifest replaces the old one in one rename, so a crash before it
leaves the store as it was (the new tables are orphans the next open deletes),
and a repair can simply run again.  A file that cannot be read counts as
damaged, but not for a failure that says nothing of its bytes (too many open
files, no memory, no permission): that stops the repair with `StoreIOError`
before its new manifest, which a repair run again once the cause is fixed
does not repeat.  The damaged files (a damaged manifest
among them) are kept in ``lost/`` before that rename, not after it: each is
hard-linked there (copied where a link cannot be made) and made durable while
it keeps its own name, since from the rename on the store names none of them
and the next open would delete them as obsolete.  A repair run again after a
crash finds the same damage, and each damaged file already in ``lost/`` with
the same bytes, and keeps it once.  Only after the rename are the old tables
and logs removed (the damaged ones by their names in the store: their bytes
stay in ``lost/``), by the repair or, after a crash, the next open.  A repair
run after such a crash finds the store whole, and reports no damage: what the
crashed run found is known only from what it left in ``lost/``, which the
report lists (`RepairReport.kept_before`).  A repaired
store keeps no snapshot's older versions, and a manifest that could not be
read may hide that some table was already replaced: such a table can bring
back values deleted since, as with LevelDB's repair.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import heapq
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from minilsm import compaction
from minilsm.batch import LogChain, decode_batch
from minilsm.cache import TableFileCache
from minilsm.check import Finding, closed_store, is_table_or_log
from minilsm.checkpoint import link_or_copy
from minilsm.db import store_path
from minilsm.errors import CorruptionError, Error
from minilsm.fs import FileSystem
from minilsm.iterators import Entry
from minilsm.manifest import MANIFEST_NAME, ManifestState, read_manifest, write_with_new_log
from minilsm.options import Options
from minilsm.sstable.builder import TableBuilder, TableMeta
from minilsm.sstable.format import parse_table_file_name, table_file_name
from minilsm.sstable.reader import TableReader
from minilsm.stats import Stats
from minilsm.wal import log_file_name, parse_log_file_name, read_log_file

LOST_DIR = "lost"
"""Where `repair_store` moves the files it could not read whole, inside the store's directory."""
_COMPARE_CHUNK = 1 << 20


@dataclass
class RepairReport:
    """What `repair_store` read and kept, and the damage it found; `ok` is True when it found none."""

    path: str
    manifest: str = "read"
    """How the manifest was found: "read", "missing", or what was wrong with it."""
    tables_read: int = 0
    logs_read: int = 0
    log_records_read: int = 0
    versions_read: int = 0
    keys_kept: int = 0
    level: int = 0
    tables_written: list[TableMeta] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    """Files moved into ``lost/``, by their names there: ``name.1``, ``name.2``, ... when it already held another
    ``name`` (one with the same bytes, kept by a run of the repair that a crash cut short, is not kept twice)."""
    kept_before: list[str] = field(default_factory=list)
    """What ``lost/`` held before this repair: an earlier one's finds, which a repair run again after a crash
    past its new manifest no longer sees as damage (the store it finds is whole)."""

    @property
    def ok(self) -> bool:
        """True when the repair found no damage.  O(1)."""
        return not self.findings

    def render(self) -> str:
        """The findings and moves, one a line, and a summary line: what ``minilsm repair`` prints.  O(findings +
        files moved + tables written)."""
        lines = [str(f) for f in self.findings]
        lines += [f"moved to {LOST_DIR}/: {name}" for name in self.moved]
        if self.kept_before:
            lines.append(f"{LOST_DIR}/ already held, from an earlier repair: {', '.join(self.kept_before)}")
        written = sum(m.file_size for m in self.tables_written)
        lines.append(
            f"{self.path}: manifest {self.manifest}; read {self.tables_read} tables and {self.logs_read} logs "
            f"({self.log_records_read:,} records), {self.versions_read:,} versions; kept {self.keys_kept:,} keys "
            f"in {len(self.tables_written)} tables ({written:,} bytes) at level {self.level}: "
            + ("no damage found" if self.ok else f"{len(self.findings)} problem{'s' * (len(self.findings) > 1)} found")
        )
        return "\n".join(lines)

    __str__ = render

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON types, tables by file name: what ``minilsm repair --json`` prints.  O(findings
        + files moved + tables written)."""
        d = dataclasses.asdict(self)  # the findings become dicts too
        d["ok"] = self.ok
        d["tables_written"] = [table_file_name(m.number) for m in self.tables_written]
        return d

    def _damage(self, file: str, message: str) -> None:
        self.findings.append(Finding(file, message, True))


def repair_store(path: str | os.PathLike[str], options: Options | None = None, **kwargs: Any) -> RepairReport:
    """Rebuild the store at `path` from every version that can still be read (see the module docstring).

    `options` (or keyword arguments, as `DB` takes them) give the new tables' sizes, filters and level
    layout (``compaction_style="tiered"`` for a tiered store); other sizes than the store's own give other
    tables, as readable, which the store's compactions reshape.  Raises `NotFoundError` if `path` holds no
    store, `LockError` if the store is open, `ValueError` if `path` is empty (as `DB` does: not the working
    directory), and `Error` if something that is not a directory is named ``lost``, before anything changes.
    O(store size): every table and log is read once, and every kept version written once.
    """
    opts = Options.make(options, **kwargs)
    path = store_path(path)
    with closed_store(opts.fs, path, "repair") as names:
        return _repair(opts.fs, path, opts, names)


def _repair(fs: FileSystem, path: str, opts: Options, names: list[str]) -> RepairReport:
    lost = f"{path}/{LOST_DIR}"
    if LOST_DIR in names and not fs.is_dir(lost):
        # Found now, before anything changes, not when the first damaged file has nowhere to go.
        raise Error(f"{lost} is in the way: repair moves damaged files into a directory of that name; move it")
    report = RepairReport(path)
    if LOST_DIR in names:
        report.kept_before = sorted(fs.listdir(lost))
    stats = Stats()
    state = _read_manifest(fs, path, names, report)
    tables = sorted(n for name in names if (n := parse_table_file_name(name)) is not None)
    logs = sorted(n for name in names if (n := parse_log_file_name(name)) is not None)
    next_number = max([*tables, *logs, state.next_file_number if state else 0], default=0) + 1
    last_seq = state.last_sequence if state else 0
    if state is not None:  # what the manifest still needs; the rest is what the next open would delete
        tables = sorted(m.number for level in state.levels for m in level)
        logs = [n for n in logs if n >= state.log_number]
    damaged: list[str] = []
    sources: list[Iterator[Entry]] = []
    readers: list[TableReader] = []
    # Every table is read at once (merged), so each fetches its file from a cache of max_open_files, as the
    # store's readers do: holding one descriptor a table, a store of more tables than the process may open
    # files failed to repair, after reporting the tables whose opens failed as damaged.
    files = TableFileCache(fs, opts.max_open_files)
    try:
        for number in tables:
            name = table_file_name(number)
            try:
                reader = TableReader.open(fs, path, number, stats, file_cache=files)
            except (CorruptionError, OSError) as e:
                report._damage(name, f"{_detail(e)}: none of its versions could be read")
                _add(damaged, name)
                continue
            readers.append(reader)
            report.tables_read += 1
            last_seq = max(last_seq, reader.props.max_seq)
            sources.append(_table_versions(reader, report, damaged))
        # The logs as the open replays them, in one unbroken run of sequence numbers going on from the tables'
        # newest: a log the manifest needs but that is missing, a torn or empty older log, or a gap between
        # two logs is damage the open refuses, though every record read stays readable.
        if state is not None and state.log_number and state.log_number not in logs:
            name = log_file_name(state.log_number)
            report._damage(name, "missing (the manifest needs it: it held writes no table has)")
        chain = LogChain(state.newest_table_sequence() if state is not None else 0)
        for number in logs:
            versions, newest = _log_versions(fs, path, number, chain, report, damaged)
            last_seq = max(last_seq, newest)
            sources.append(iter(versions))
        # Merged by (key, newest first): a version's place is its sequence number, not the file it was found in.
        merged = heapq.merge(*sources, key=_internal_order)
        kept = compaction.drop_dead(merged, [], lambda key: True, stats)
        numbers = itertools.count(next_number)  # unbounded: a foreign file may bear any number
        written: list[int] = []

        def new_builder() -> TableBuilder:
            written.append(next(numbers))
            return TableBuilder(fs, path, written[-1], block_size=opts.block_size, bits_per_key=opts.bits_per_key)

        tiered = opts.compaction_style == "tiered"
        metas = compaction.write_tables(kept, new_builder, None if tiered else opts.target_file_size)
    finally:
        for reader in readers:
            reader.close()
        files.close()
    report.tables_written = metas
    report.keys_kept = sum(m.num_entries for m in metas)
    report.versions_read = report.keys_kept + stats.entries_dropped_shadowed + stats.tombstones_dropped
    # A manifest lists as many levels as the store's last open had (its max_levels): the tables go no deeper,
    # or the store's application, opening with that many, would be refused.  The new manifest lists as many, so
    # that a repair of the repaired store knows it too.
    max_levels = opts.max_levels if state is None else min(opts.max_levels, max(len(state.levels), 2))
    report.level = 0 if tiered else _level_for(opts, max_levels, sum(m.file_size for m in metas))
    levels: list[list[TableMeta]] = [[] for _ in range(max_levels)]
    levels[report.level] = metas
    # A new, empty log for the manifest to name: every old log lies below it, so none is replayed over the
    # tables that now hold its writes (and the next open deletes any that a crash leaves behind).
    log_number = max(written, default=next_number - 1) + 1
    # The damaged files get their names in lost/ before the new manifest goes in, not after it: from its rename
    # on, the store names none of them, so a crash would leave them to the next open, which deletes them as
    # obsolete (or to the next repair, which removes them as old files), and their bytes would be gone.
    unread = [MANIFEST_NAME] if state is None and MANIFEST_NAME in names else []
    _keep_in_lost(fs, path, unread + [name for name in damaged if name in names], report)
    write_with_new_log(fs, path, ManifestState(log_number + 1, last_seq, log_number, levels, []))
    _remove_old_files(fs, path, names)
    return report


def _read_manifest(fs: FileSystem, path: str, names: list[str], report: RepairReport) -> ManifestState | None:
    if MANIFEST_NAME not in names:
        report.manifest = "missing"
        report._damage(MANIFEST_NAME, "missing: every table and log in the directory was read")
        return None
    try:
        read = read_manifest(fs, path)
    except (CorruptionError, OSError) as e:
        report.manifest = f"unreadable ({_detail(e)})"
        report._damage(MANIFEST_NAME, f"{_detail(e)}: every table and log in the directory was read")
        return None
    return read.state


def _table_versions(reader: TableReader, report: RepairReport, damaged: list[str]) -> Iterator[Entry]:
    """The versions of `reader`'s data blocks, a block at a time; a damaged block is reported and skipped."""
    name = table_file_name(reader.number)
    last: tuple[bytes, int] | None = None  # the last version kept: the merge needs each table's in order
    for i in range(reader.props.num_data_blocks):
        try:
            entries = reader.block_entries(i, last)
        except (CorruptionError, OSError) as e:
            report._damage(name, f"{_detail(e)}: the versions of that block were skipped")
            _add(damaged, name)
            continue
        if entries:
            last = entries[-1][:2]
        yield from entries


def _log_versions(
    fs: FileSystem, path: str, number: int, chain: LogChain, report: RepairReport, damaged: list[str]
) -> tuple[list[Entry], int]:
    """The versions of log `number`'s intact records, in internal order, and the newest sequence number.

    `chain` holds the logs read before (`LogChain`): what this one's records show of an older log's damage is
    reported against that log.
    """
    name = log_file_name(number)
    log_path = f"{path}/{name}"
    versions: list[Entry] = []
    newest = 0
    try:
        result = read_log_file(fs, log_path, paranoid=False)
    except OSError as e:
        report._damage(name, f"{_detail(e)}: none of its records could be read")
        _add(damaged, name)
        chain.skip()
        return versions, newest
    report.logs_read += 1
    lost = chain.lost_before(result.records, log_path)
    if lost is not None:
        older = os.path.basename(lost.path or "")
        report._damage(older, lost.detail)
        _add(damaged, older)
    whole = True
    for payload in result.records:
        try:
            seq, ops = decode_batch(payload, log_path)
        except CorruptionError as e:
            report._damage(name, f"{e.detail}: that record was skipped")
            _add(damaged, name)
            whole = False
            continue
        report.log_records_read += 1
        versions += [(key, (seq + i) << 8 | kind, value) for i, (kind, key, value) in enumerate(ops)]
        newest = max(newest, seq + len(ops) - 1)
    if result.corruption is not None:
        report._damage(name, f"{result.corruption.detail}: the last {result.dropped_bytes:,} bytes were skipped")
        _add(damaged, name)
        whole = False
    if whole:
        try:  # the sequence numbers, record after record, as the open checks them
            chain.replay(result.records, result.dropped_bytes, log_path)
        except CorruptionError as e:
            report._damage(name, f"{e.detail}: its records were kept")
            _add(damaged, name)
            whole = False
    if not whole:
        chain.skip()  # what lies before the next log is unknown now
    versions.sort(key=_internal_order)
    return versions, newest


def _add(names: list[str], name: str) -> None:
    if name not in names:
        names.append(name)


def _internal_order(entry: Entry) -> tuple[bytes, int]:
    return entry[0], -entry[1]


def _level_for(opts: Options, max_levels: int, size: int) -> int:
    """The lowest level from 1 whose size limit holds `size` bytes (the deepest of `max_levels`, if none)."""
    level = 1
    while level < max_levels - 1 and compaction.max_bytes_for_level(opts, level) < size:
        level += 1
    return level


def _keep_in_lost(fs: FileSystem, path: str, names: list[str], report: RepairReport) -> None:
    """Give each of the damaged files `names` a second name in lost/, durable, while it keeps its own.

    A hard link (or a copy, where a link cannot be made), so that until the new manifest is in place the store
    is as it was, and a crash leaves it to a repair run again, which reads every file as this one does.  That
    repair finds these files in lost/ already, holding the same bytes, and keeps each once, not again as
    ``name.1``.
    """
    if not names:
        return
    lost = f"{path}/{LOST_DIR}"
    fs.makedirs_synced(lost)  # its own name durable too, before anything is kept in it
    for name in names:
        src = f"{path}/{name}"
        # A file an earlier repair kept may have the same name (every damaged manifest is MANIFEST): the newcomer
        # takes the first free "name.N", as a link over it would replace the bytes it kept.
        kept = name
        n = 0
        while fs.exists(f"{lost}/{kept}"):
            if _same_bytes(fs, src, f"{lost}/{kept}"):
                break  # kept there by a run of this repair that a crash cut short
            n += 1
            kept = f"{name}.{n}"
        else:
            if fs.is_dir(src):
                # Named like a table, a log or the manifest, but no file: nothing in it is read, so a crash after
                # its move changes nothing a repair would read, and it has no bytes to link or copy.
                fs.rename(src, f"{lost}/{kept}")
            else:
                # Linked or copied under a name of its own, then renamed: a copy cut short by a crash is never
                # taken for the file kept, and the run that repeats it writes it again.
                staged = f"{lost}/{kept}.tmp"
                if fs.exists(staged):
                    fs.remove(staged)
                link_or_copy(fs, src, staged)
                fs.rename(staged, f"{lost}/{kept}")
        report.moved.append(kept)
    fs.sync_dir(lost)


def _same_bytes(fs: FileSystem, a: str, b: str) -> bool:
    """Whether the files `a` and `b` hold the same bytes; False if either cannot be read (keeping a second copy is
    the safe side)."""
    try:
        if fs.file_size(a) != fs.file_size(b):
            return False
        with contextlib.closing(fs.open_random(a)) as fa, contextlib.closing(fs.open_random(b)) as fb:
            size = fa.size()
            return all(
                fa.pread(offset, _COMPARE_CHUNK) == fb.pread(offset, _COMPARE_CHUNK)
                for offset in range(0, size, _COMPARE_CHUNK)
            )
    except OSError:
        return False


def _remove_old_files(fs: FileSystem, path: str, names: list[str]) -> None:
    """Once the new manifest is in place: remove the old tables and logs, whose versions the new tables hold or
    whose bytes lost/ keeps (or the next open deletes them)."""
    for name in names:
        if is_table_or_log(name):
            # Garbage now, which the next open sweeps as well: never worth failing a repair that has taken effect
            # for (a directory named like a table, say), as the store's own sweep does not fail for it.
            with contextlib.suppress(OSError):
                fs.remove(f"{path}/{name}")
    fs.sync_dir(path)


# Failures of a read that are the machine's, not the file's: counted as damage, they would take a whole table or
# log out of the store (into lost/) for want of a descriptor.
_NOT_DAMAGE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.EACCES, errno.EPERM})


def _detail(e: CorruptionError | OSError) -> str:
    """What a finding says of the damage `e`; raises `e` again if it is no damage of the file's (`_NOT_DAMAGE`)."""
    if isinstance(e, CorruptionError):
        return e.detail
    if e.errno in _NOT_DAMAGE:
        raise e
    return f"cannot be read: {e}"
