"""Run one fuzz target under atheris (coverage-guided, libFuzzer), or replay files through it.

    pip install -e '.[fuzz]'                       # atheris
    python fuzz/run.py table_resealed -max_total_time=600 fuzz/corpus/table_resealed
    python fuzz/run.py --list                      # the targets
    python fuzz/run.py --replay log crash-1234...  # re-run saved inputs (no atheris needed)

The corpus directory is seeded with the target's valid sample on first use.
Everything after the target name goes to libFuzzer (``-runs=N``,
``-max_total_time=S``, ``-jobs=N``, ``-rss_limit_mb=M``, corpus directories).
A finding is an input on which the target raised anything but CorruptionError,
ran out of memory (rss_limit_mb, default 2048) or hung (``-timeout=S``);
libFuzzer saves it as ``crash-*``/``oom-*``/``timeout-*``.  Targets are in targets.py.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contextlib

from targets import SAMPLES, TARGETS, run_one


def seed_corpus(name: str, args: list[str]) -> None:
    """Put the valid sample in the first corpus directory given (created if missing)."""
    dirs = [a for a in args if not a.startswith("-")]
    if dirs:
        os.makedirs(dirs[0], exist_ok=True)
        if not os.listdir(dirs[0]):
            with open(os.path.join(dirs[0], "sample"), "wb") as f:
                f.write(SAMPLES[name]())


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if sys.argv[1] == "--list":
        print("\n".join(sorted(TARGETS)))
        return
    if sys.argv[1] == "--replay":
        name = sys.argv[2]
        for path in sys.argv[3:]:
            with open(path, "rb") as f:
                data = f.read()
            print(f"{path}: {'read' if run_one(name, data) else 'CorruptionError'}")
        return
    name, args = sys.argv[1], sys.argv[2:]
    if name not in TARGETS:
        sys.exit(f"unknown target {name!r}; one of: {', '.join(sorted(TARGETS))}")
    import atheris

    seed_corpus(name, args)
    target = TARGETS[name]
    from minilsm.errors import CorruptionError

    def one_input(data: bytes) -> None:
        with contextlib.suppress(CorruptionError):
            target(data)

    atheris.instrument_all()
    atheris.Setup([sys.argv[0], *args], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
