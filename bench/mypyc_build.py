"""A mypyc-compiled copy of minilsm, built outside the repository, to measure what compiling the same source gives.

The package stays pure Python: this is an experiment, not a build the project ships.  It copies ``minilsm/``,
``bench/``, ``tests/``, ``fuzz/``, ``pyproject.toml`` and the README into an empty directory ``OUT`` and compiles
the copy of the package there with mypyc (the same typed source; mypy and setuptools are needed at build time
only, and a C compiler with the Python headers).  ``OUT`` then holds a tree in which ``import minilsm`` gets the
compiled modules (an extension module is found before the ``.py`` of the same name, which stays beside it), so
the benchmark and the test suite run there unchanged::

    python -m bench.mypyc_build --out /tmp/minilsm-mypyc      # about a minute on 2 cores
    cd /tmp/minilsm-mypyc && python -m pytest -q -p no:cacheprovider
    cd /tmp/minilsm-mypyc && python -m bench --num 200000 --stores minilsm,leveldb

Run the commands from ``OUT``: ``python -m`` puts the current directory first on ``sys.path``, so from the
repository's root ``import minilsm`` gets the pure package whatever ``PYTHONPATH`` says.  The modules in
`INTERPRETED` stay Python (mypyc mixes compiled and interpreted modules); ``--interpreted MODULE`` adds one.
``OUT`` must not lie inside the repository, so the work tree never holds build products.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "minilsm"
COPIED = ("minilsm", "bench", "tests", "fuzz")
FILES = ("pyproject.toml", "README.md")  # pytest reads the first; setuptools, under mypyc, both
SKIP = shutil.ignore_patterns("__pycache__", "*.so", "out", "results", "*.png")
INTERPRETED = {
    "minilsm.__main__": "runpy needs a code object to run `python -m minilsm`",
    "minilsm.fs": "FileSystem is the seam users and tests subclass; compiled classes refuse Python subclasses",
    "minilsm.options": "Options checks its fields' types after construction; compiled, True is stored as 1.0 first",
    "minilsm.version": "the store tracks live Versions in a WeakSet; compiled classes take no weak references",
}
"""Modules left as Python by default, and why: each would change behaviour if compiled."""


def modules(root: Path) -> list[str]:
    """Every module of the package under `root`, dotted (``minilsm.sstable.block``), in a stable order."""
    return sorted(".".join(p.relative_to(root).with_suffix("").parts) for p in (root / PACKAGE).rglob("*.py"))


def mypyc_command(out: Path, interpreted: list[str]) -> list[str]:
    """The mypyc command run in `out`: every module of the package except `interpreted`, as files."""
    unknown = sorted(set(interpreted) - set(modules(REPO)))
    if unknown:
        raise SystemExit(f"not modules of {PACKAGE}: {', '.join(unknown)}")
    files = [m.replace(".", "/") + ".py" for m in modules(REPO) if m not in interpreted]
    return [sys.executable, "-m", "mypyc", *files]


def check_out(out: Path) -> Path:
    """`out`, made absolute, if it is outside the repository and empty or absent; else a SystemExit."""
    out = out.resolve()
    if out == REPO or REPO in out.parents:
        raise SystemExit(f"--out {out} lies inside the repository {REPO}: build products must stay out of it")
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"--out {out} is not empty: remove it or name another directory")
    return out


def build(out: Path, interpreted: list[str]) -> None:
    """Copy the tree into `out` and compile the package there.  Minutes: mypyc compiles ~7k lines of C per module."""
    command = mypyc_command(out, interpreted)
    out.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        shutil.copytree(REPO / name, out / name, ignore=SKIP)
    for name in FILES:
        shutil.copy2(REPO / name, out / name)
    start = time.monotonic()
    subprocess.run(command, cwd=out, check=True, stdout=subprocess.DEVNULL)
    missing = [m for m in modules(out) if m not in interpreted and not list(out.glob(m.replace(".", "/") + ".*.so"))]
    if missing:
        raise SystemExit(f"mypyc left no extension module for: {', '.join(missing)}")
    print(f"compiled {len(modules(out)) - len(interpreted)} modules of {PACKAGE} in {time.monotonic() - start:.0f} s")
    for name in interpreted:
        print(f"left interpreted: {name}" + (f" ({INTERPRETED[name]})" if name in INTERPRETED else ""))
    print(f"use it from {out} (python -m puts the current directory first on sys.path):")
    print(f"  cd {out} && {sys.executable} -c 'import minilsm.sstable.reader as r; print(r.__file__)'")
    print(f"  cd {out} && {sys.executable} -m pytest -q -p no:cacheprovider")
    print(f"  cd {out} && {sys.executable} -m bench --num 200000 --stores minilsm,leveldb")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mypyc_build", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="an empty or new directory outside the repository")
    parser.add_argument(
        "--interpreted",
        action="append",
        default=list(INTERPRETED),
        metavar="MODULE",
        help=f"leave this module as Python too (repeatable; always: {', '.join(INTERPRETED)})",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the mypyc command and stop")
    args = parser.parse_args(argv)
    out = check_out(args.out)
    if args.dry_run:
        print(f"cd {out} && " + " ".join(mypyc_command(out, args.interpreted)))
        return 0
    build(out, args.interpreted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
