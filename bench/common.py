"""Shared helpers for every benchmark in bench/: the machine, timing, a text table, and --json output.

A figure without the machine it came from cannot be compared or reproduced, so
each benchmark prints `machine()` and its parameters before any number, and can
write the same report as JSON for plotting or diffing between runs.  Only the
standard library is used, so the helpers work wherever minilsm does.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def machine() -> dict[str, Any]:
    """Where the figures come from: CPU model, cores, RAM, Python, platform, date and load."""
    ram = _ram_bytes()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": round(ram / 2**30, 1) if ram else None,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average_1m": round(load[0], 2) if load else None,
    }


def print_header(title: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Print the title, the machine and the run's parameters; return the machine description."""
    info = machine()
    print(title)
    print("=" * len(title))
    for key, value in [*info.items(), *params.items()]:
        print(f"{key + ':':<17} {value}")
    print()
    return info


def ns_per_call(
    run: Callable[[], object], calls: int, repeat: int = 3, clock: Callable[[], int] = time.perf_counter_ns
) -> float:
    """Nanoseconds per call of a `run()` that makes `calls` calls: the best of `repeat` runs.

    The minimum is the figure least disturbed by other processes; each run
    should take long enough (tens of milliseconds) for the clock not to matter.
    `clock` is wall time by default; pass ``time.process_time_ns`` for pure-CPU
    work on a shared machine, where other processes stretch wall time but not
    the CPU time this process spends.
    """
    best = float("inf")
    for _ in range(repeat):
        start = clock()
        run()
        best = min(best, clock() - start)
    return best / calls


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table: numbers right-aligned, text left-aligned, columns as wide as their widest cell.

    Floats are shown as given: format them before passing (f"{x:.4f}") to choose the precision.
    """
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in cells)])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _is_number(value: object) -> bool:
    if value is None:  # a missing figure in a numeric column
        return True
    if isinstance(value, int | float):
        return True
    try:
        float(str(value).rstrip("%"))
    except ValueError:
        return False
    return True


def dir_bytes(path: str) -> int:
    """Bytes of every file under `path` (tables, logs, manifests: what a store costs on disk)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file removed meanwhile
                total += os.path.getsize(os.path.join(root, name))
    return total


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--json PATH``: also write the whole report there."""
    parser.add_argument("--json", metavar="PATH", help="also write the machine, parameters and results as JSON")


def write_json(path: str | None, report: Mapping[str, Any]) -> None:
    """Write `report` to `path` as indented JSON (nothing when path is None), and say so on stderr."""
    if path is None:
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, sort_keys=False)
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)
