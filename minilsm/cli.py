"""`minilsm`: the command line (``minilsm ...`` and ``python -m minilsm ...`` both run `main`).

Every command is a thin layer over the library: it opens the store, calls one
method (`DB.get`, `DB.stats`, `DB.explain`, ...) or one tool (`run_demo`,
`check_store`, `dump_table`), and prints the result as text or, with
``--json``, as JSON.  Keys and values on the command line are UTF-8 text (any
bytes the shell passed come through unchanged), or hex with ``--hex``; reports
print them as text when they are printable UTF-8 not beginning with ``0x``,
else as ``0x`` and hex, which ``--hex`` takes back (all hex with ``--hex``).

Read commands open the store with flushes and compactions inline
(``background=False``), so they change nothing on disk beyond what opening
does: the writes in the log become a level-0 table (a close does not flush
the memtable, so after ``minilsm put`` the next command writes one), and a
new log and a new manifest file replace the old ones.

Exit status: 0 success; 1 a negative answer (``get``: no such key; ``check``:
damage found); 2 a usage error (bad arguments, an invalid key); 3 the store
could not be used (a `minilsm.Error`, such as damage, a held lock, a
missing store or table file, or an OS error), with the reason on stderr and no
traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from minilsm import __version__
from minilsm.check import check_store, is_table_or_log
from minilsm.db import DB, store_path
from minilsm.demo import DEFAULT_KEYS, DEFAULT_READS, run_demo
from minilsm.errors import Error, NotFoundError
from minilsm.fs import DEFAULT_FS
from minilsm.keys import check_key, check_value
from minilsm.manifest import MANIFEST_NAME, foreign_store, manifest_records, replay_manifest
from minilsm.options import Options
from minilsm.repair import repair_store
from minilsm.report import ShowKey, clip, dump_table, format_manifest, format_stats, format_tables, show_bytes, size

EXIT_OK: Final = 0
EXIT_NEGATIVE: Final = 1
EXIT_USAGE: Final = 2
EXIT_ERROR: Final = 3


class UsageError(Exception):
    """A command-line argument that argparse could not judge (an invalid hex key, ...)."""


# -- helpers ----------------------------------------------------------------------


def _show(args: argparse.Namespace) -> ShowKey:
    return bytes.hex if args.hex else show_bytes


def _arg_bytes(args: argparse.Namespace, text: str, what: str = "key") -> bytes:
    """A key or value from the command line: hex with --hex, else the bytes the shell passed (UTF-8 text).

    With --hex a leading ``0x`` is allowed, so that a key a report spelled ``0x00ff`` can be passed back as it is.
    """
    try:
        data = bytes.fromhex(text.removeprefix("0x")) if args.hex else os.fsencode(text)
        return check_value(data) if what == "value" else check_key(data)
    except ValueError as e:
        # The argument is named clipped: a key past the size limit is tens of KiB.
        shown = clip(repr(text), 40)
        raise UsageError(f"{what} {shown}: {'not valid hex' if args.hex and 'hex' in str(e) else e}") from None


def _optional_bytes(args: argparse.Namespace, text: str | None, what: str) -> bytes | None:
    return None if text is None else _arg_bytes(args, text, what)


def _print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2))


def _open(args: argparse.Namespace, *, create: bool = False, **options: Any) -> DB:
    try:
        return DB(
            args.path,
            create_if_missing=create,
            background=False,
            compaction_style=args.compaction_style,
            **options,
        )
    except NotFoundError:
        # The library's message names its create_if_missing option, which the command line has not got.
        raise _no_store(args.path) from None
    except ValueError as e:
        # The options are valid (argparse checked them), so the store refused them: one with tables
        # below the default max_levels.  The store cannot be used with this command's options.
        raise Error(str(e)) from None


def _no_store(path: str) -> NotFoundError:
    """That `path` holds no store, with a hint that is true of it: `put` makes a store only in a directory, or
    where one can be made, and not beside tables or logs whose MANIFEST is gone (it would refuse them)."""
    path = os.path.abspath(path)
    there = path  # the path, or else the nearest name above it that exists, under which `put` would make it
    while not os.path.exists(there):
        there = os.path.dirname(there)
    try:
        names = os.listdir(path) if there == path and os.path.isdir(path) else []
    except OSError:
        names = []  # not listable (no permission): permissions are left to `put`'s own error to name
    if not os.path.isdir(there):
        hint = "it is not a directory" if there == path else f"{there} is not a directory"
    elif (other := foreign_store(names)) is not None:
        hint = f"it holds {other}, which minilsm cannot read"
    elif any(map(is_table_or_log, names)):
        hint = "it holds tables or logs but no MANIFEST: minilsm repair rebuilds one"
    else:
        hint = "put creates one"
    return NotFoundError(f"no minilsm store at {path} ({hint})")


# -- commands ---------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    if args.keys < 2:
        raise UsageError("--keys must be at least 2")
    t0 = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - t0:5.1f} s] {message}", file=sys.stderr, flush=True)

    result = run_demo(args.path, args.keys, args.reads, args.bits_per_key, None if args.quiet else progress)
    if args.json:
        _print_json(result.to_dict())
    else:
        print(result.render())
    return EXIT_OK


def cmd_get(args: argparse.Namespace) -> int:
    key = _arg_bytes(args, args.key)
    with _open(args) as db:
        value = db.get(key)
    show = _show(args)
    if args.json:
        _print_json({"key": show(key), "found": value is not None, "value": None if value is None else show(value)})
    elif value is not None:
        print(show(value))
    else:
        print(f"{show(key)}: not found", file=sys.stderr)
    return EXIT_OK if value is not None else EXIT_NEGATIVE


def cmd_put(args: argparse.Namespace) -> int:
    key, value = _arg_bytes(args, args.key), _arg_bytes(args, args.value, "value")
    with _open(args, create=True, bits_per_key=args.bits_per_key) as db:
        db.put(key, value, sync=True)
    if args.json:
        _print_json({"key": _show(args)(key), "written": True})
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    key = _arg_bytes(args, args.key)
    with _open(args, bits_per_key=args.bits_per_key) as db:
        db.delete(key, sync=True)
    if args.json:
        _print_json({"key": _show(args)(key), "deleted": True})
    return EXIT_OK


def cmd_scan(args: argparse.Namespace) -> int:
    show = _show(args)
    start = _optional_bytes(args, args.start, "start key")
    stop = _optional_bytes(args, args.stop, "stop key")
    prefix = _optional_bytes(args, args.prefix, "prefix")
    rows = []
    with _open(args) as db, db.iterator(start, stop, prefix=prefix, reverse=args.reverse) as it:
        for i, (key, value) in enumerate(it):
            if args.limit is not None and i >= args.limit:
                break
            if args.json:
                rows.append({"key": show(key), "value": show(value)})
            else:
                print(f"{show(key)}\t{show(value)}")
    if args.json:
        _print_json(rows)
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as db:
        stats = db.stats(measure_space=True)
    if args.json:
        _print_json(stats.to_dict(_show(args)))
    else:
        print("(counters count since this command opened the store: no point reads or user writes, so no")
        print(" measured FPR or write amplification; a running application's are in its own db.stats().")
        print(" The shape and the space amplification below are the store's.)")
        print(format_stats(stats))
    return EXIT_OK


def cmd_tables(args: argparse.Namespace) -> int:
    with _open(args) as db:
        rows = db.tables()
    show = _show(args)
    if args.json:
        _print_json([t.to_dict(show) for t in rows])
    else:
        if rows:
            print("(measured FPR and absent probes count the point reads since this command opened the store: none;")
            print(" a running application's are in its own db.tables())")
        print(format_tables(rows, show))
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    key = _arg_bytes(args, args.key)
    with _open(args) as db:
        trace = db.explain(key)
    show = _show(args)
    if args.json:
        _print_json(trace.to_dict(show))
    else:
        print(trace.render(show))
    return EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    start = _optional_bytes(args, args.start, "start key")
    stop = _optional_bytes(args, args.stop, "stop key")
    with _open(args, bits_per_key=args.bits_per_key) as db:
        before = db.stats()
        db.compact_range(start, stop)
        after = db.stats()
    if args.json:
        _print_json(
            {
                "before": [{"level": lv.level, "tables": lv.tables, "bytes": lv.bytes} for lv in before.levels],
                "after": [{"level": lv.level, "tables": lv.tables, "bytes": lv.bytes} for lv in after.levels],
                "compactions": after.compactions - before.compactions,
            }
        )
    else:

        def shape(levels: Sequence[Any]) -> str:
            parts = [f"L{lv.level} {lv.tables}" for lv in levels if lv.tables]
            return ", ".join(parts) or "no tables"

        print(f"before: {shape(before.levels)} ({size(before.table_bytes)})")
        print(
            f"after:  {shape(after.levels)} ({size(after.table_bytes)}), "
            f"{after.compactions - before.compactions} compactions"
        )
    return EXIT_OK


def cmd_checkpoint(args: argparse.Namespace) -> int:
    target = os.path.abspath(args.target)
    with _open(args) as db:
        try:
            db.checkpoint(target)
        except ValueError as e:  # a target in the store's own directory
            raise UsageError(str(e)) from None
        tables = len(db.tables())
    if args.json:
        _print_json({"checkpoint": target, "tables": tables})
    else:
        print(f"{target}: a copy of {db.path}, {tables} tables")
    return EXIT_OK


def cmd_dump(args: argparse.Namespace) -> int:
    try:
        dump = dump_table(DEFAULT_FS, args.file, entries=args.entries, limit=args.limit)
    except ValueError as e:  # not a table file name
        raise UsageError(str(e)) from None
    except (FileNotFoundError, NotADirectoryError):
        # Said as a missing store is, not as the bare "[Errno 2]" of the open.
        raise NotFoundError(f"no table file at {os.path.abspath(args.file)}") from None
    show = _show(args)
    if args.json:
        _print_json(dump.to_dict(show))
    else:
        print(dump.render(show))
    return EXIT_OK


def cmd_manifest(args: argparse.Namespace) -> int:
    # Read as a file, without opening the store: an open would start a new manifest, without the edits.
    path = os.path.join(_store_path(args.path), MANIFEST_NAME)
    try:
        data, hole = DEFAULT_FS.read_file_and_hole(path)
    except (FileNotFoundError, NotADirectoryError):
        raise _no_store(args.path) from None  # as the commands that open the store say it
    records, dropped = manifest_records(data, path, hole)
    replay_manifest(records, path)  # damage is an error here, as at an open
    if args.json:
        _print_json({"records": records, "torn_bytes": dropped})
    else:
        print(format_manifest(records, dropped, _show(args)))
    return EXIT_OK


def _store_path(path: str) -> str:
    """PATH as the offline tools take it; an empty one is refused as `_open` refuses it, not taken for the working
    directory."""
    try:
        return store_path(path)
    except ValueError as e:
        raise Error(str(e)) from None


def cmd_check(args: argparse.Namespace) -> int:
    report = check_store(_store_path(args.path))
    if args.json:
        _print_json(report.to_dict())
    else:
        print(report.render())
    return EXIT_OK if report.ok else EXIT_NEGATIVE


def cmd_repair(args: argparse.Namespace) -> int:
    report = repair_store(
        _store_path(args.path), bits_per_key=args.bits_per_key, compaction_style=args.compaction_style
    )
    if args.json:
        _print_json(report.to_dict())
    else:
        print(report.render())
    return EXIT_OK if report.ok else EXIT_NEGATIVE


# -- the parser -------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    # Only where keys or values go in or come out: accepted elsewhere, it would say it did something.
    hexed = argparse.ArgumentParser(add_help=False)
    hexed.add_argument(
        "--hex", action="store_true", help="keys and values are hex (a leading 0x allowed), on input and output"
    )
    bpk = argparse.ArgumentParser(add_help=False)
    bpk.add_argument(
        "--bits-per-key",
        type=_bits_per_key,
        default=10.0,
        metavar="B",
        help="Bloom filter bits per key of the tables this writes (0: no filters; default 10)",
    )

    # A store does not record its compaction style (LevelDB's options are not stored either), and `compact`
    # on a size-tiered store opened leveled would move its runs into levels; so would `put` and `delete`,
    # whose write runs any compaction the open left due, as an application's first write does.  The read
    # commands compact nothing, but take it too, to open a store as its application does.
    style = argparse.ArgumentParser(add_help=False)
    style.add_argument(
        "--compaction-style",
        choices=("leveled", "tiered"),
        default="leveled",
        help="open the store with this compaction style, as its application does (default leveled)",
    )

    parser = argparse.ArgumentParser(
        prog="minilsm",
        description="minilsm: an LSM key-value store with Bloom filters you can measure.",
        epilog="Exit status: 0 ok, 1 not found or damage found, 2 usage error, 3 the store could not be used.",
    )
    parser.add_argument("--version", action="version", version=f"minilsm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str,
        func: Callable[[argparse.Namespace], int],
        help: str,
        parents: Sequence[argparse.ArgumentParser] = (),
        keys: bool = True,
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[common, *([hexed] if keys else []), *parents])
        p.set_defaults(func=func)
        return p

    p = command(
        "demo", cmd_demo, "measure the data-block reads Bloom filters avoid, with and without filters", keys=False
    )
    p.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="keep the two stores under PATH (default: a temporary directory, removed afterwards)",
    )
    p.add_argument("--keys", type=_positive, default=DEFAULT_KEYS, help=f"keys to load (default {DEFAULT_KEYS:,})")
    p.add_argument(
        "--reads",
        type=_positive,
        default=DEFAULT_READS,
        help=f"reads of each kind, missing and present (default {DEFAULT_READS:,})",
    )
    p.add_argument(
        "--bits-per-key",
        type=_bits_per_key,
        default=10.0,
        metavar="B",
        help="filter bits per key of the store with filters (default 10)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")

    p = command("get", cmd_get, "print the value of KEY (exit status 1 if absent)", [style])
    p.add_argument("path", metavar="PATH")
    p.add_argument("key", metavar="KEY")

    p = command("put", cmd_put, "set KEY to VALUE (creates the store if missing; synced)", [bpk, style])
    p.add_argument("path", metavar="PATH")
    p.add_argument("key", metavar="KEY")
    p.add_argument("value", metavar="VALUE")

    p = command("delete", cmd_delete, "delete KEY (synced)", [bpk, style])
    p.add_argument("path", metavar="PATH")
    p.add_argument("key", metavar="KEY")

    p = command("scan", cmd_scan, "print key<TAB>value lines in key order", [style])
    p.add_argument("path", metavar="PATH")
    p.add_argument("--start", metavar="KEY", help="first key (inclusive)")
    p.add_argument("--stop", metavar="KEY", help="end key (exclusive)")
    p.add_argument("--prefix", metavar="P", help="only keys beginning with P")
    p.add_argument("--reverse", action="store_true", help="descending order")
    p.add_argument("--limit", type=_positive, metavar="N", help="at most N pairs")

    p = command(
        "stats",
        cmd_stats,
        "levels and space amplification; counters (filters, block reads, writes) of this command's own open",
        [style],
    )
    p.add_argument("path", metavar="PATH")

    p = command("tables", cmd_tables, "every live table: level, keys, filter, expected vs measured FP rate", [style])
    p.add_argument("path", metavar="PATH")

    p = command("explain", cmd_explain, "read KEY and show each step: memtables, key ranges, filters, blocks", [style])
    p.add_argument("path", metavar="PATH")
    p.add_argument("key", metavar="KEY")

    p = command(
        "compact", cmd_compact, "compact the store (or [--start, --stop]) down to the bottom level", [bpk, style]
    )
    p.add_argument("path", metavar="PATH")
    p.add_argument("--start", metavar="KEY", help="first key of the range")
    p.add_argument("--stop", metavar="KEY", help="last key of the range")

    p = command(
        "checkpoint",
        cmd_checkpoint,
        "copy the store into a new directory (its tables hard-linked)",
        [style],
        keys=False,
    )
    p.add_argument("path", metavar="PATH")
    p.add_argument("target", metavar="TARGET", help="the new directory (must not exist)")

    p = command("dump", cmd_dump, "one table file: footer, properties, index, filter, and optionally its entries")
    p.add_argument("file", metavar="FILE.sst")
    p.add_argument("--entries", action="store_true", help="also list the versions it stores")
    p.add_argument("--limit", type=_positive, metavar="N", help="with --entries: the first N only")

    p = command(
        "manifest",
        cmd_manifest,
        "the MANIFEST's snapshot and its edits: each table a flush or compaction added or removed",
    )
    p.add_argument("path", metavar="PATH")

    p = command("check", cmd_check, "verify every checksum of every live file (exit status 1 on damage)", keys=False)
    p.add_argument("path", metavar="PATH")

    p = command(
        "repair",
        cmd_repair,
        "rebuild a store that does not open from what can still be read (exit status 1 if damage was found)",
        [bpk, style],
        keys=False,
    )
    p.add_argument("path", metavar="PATH")
    return parser


def _positive(text: str) -> int:
    try:
        n = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return n


def _bits_per_key(text: str) -> float:
    # Judged by `Options` itself, so the command line accepts exactly what the library does.
    try:
        return Options(bits_per_key=float(text)).bits_per_key
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in `argv` (default: ``sys.argv[1:]``) and return its exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UsageError as e:
        print(f"minilsm {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (Error, OSError) as e:
        if isinstance(e, BrokenPipeError):
            # The reader of our output went away (`minilsm scan ... | head`): not an error.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
        print(f"minilsm {args.command}: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"minilsm {args.command}: interrupted", file=sys.stderr)
        return 130
