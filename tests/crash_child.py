"""The child process of tests/test_crash.py: writes to a store until it is killed, reporting every acknowledgement.

Usage: ``python crash_child.py PATH SEED FIRST_OP STYLE BACKGROUND``.  It opens the
store (recovering whatever the previous kill left), then applies operations
``FIRST_OP, FIRST_OP + 1, ...`` of the deterministic sequence `make_op(SEED, i)`,
each with ``sync=True``, and after each one writes ``A <i>`` to stdout.  It also
reports ``I`` once Python and minilsm are loaded, ``O`` once the store is open,
and ``F+``/``F-`` and ``C+``/``C-`` around every flush and compaction, so that
the parent can aim its SIGKILL at them and count where the kills landed.  Each
line is written with one ``os.write``, so it reaches the pipe whole or not at all.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from typing import Any

Op = tuple[Any, ...]  # ("put", key, value) | ("delete", key) | ("batch", [(is_put, key, value), ...])
NUM_KEYS = 300


def make_op(seed: int, i: int) -> Op:
    """Operation `i` of the sequence for `seed` (each op from its own RNG, so any op can be rebuilt alone)."""
    rng = random.Random(seed * 1_000_003 + i)
    r = rng.random()

    def key() -> bytes:
        return b"key%04d" % rng.randrange(NUM_KEYS)

    def value(tag: str) -> bytes:
        return f"{i}{tag}:".encode() + bytes([97 + rng.randrange(26)]) * rng.randrange(5, 300)

    if r < 0.6:
        return ("put", key(), value(""))
    if r < 0.75:
        return ("delete", key())
    return ("batch", [(rng.random() < 0.8, key(), value(f".{j}")) for j in range(rng.randrange(1, 9))])


def apply(model: dict[bytes, bytes], op: Op) -> None:
    if op[0] == "put":
        model[op[1]] = op[2]
    elif op[0] == "delete":
        model.pop(op[1], None)
    else:
        for is_put, k, v in op[1]:
            if is_put:
                model[k] = v
            else:
                model.pop(k, None)


def options(style: str, background: bool) -> dict[str, Any]:
    """Small sizes, so that a few hundred writes flush and compact many times."""
    return dict(
        memtable_size=4096, block_size=512, target_file_size=4096, level1_max_bytes=16384,
        level_size_multiplier=2, level0_compaction_trigger=2, level0_stop_writes_trigger=6, max_levels=4,
        compaction_style=style, background=background, sync=True,
    )  # fmt: skip


def say(line: str) -> None:
    os.write(1, line.encode() + b"\n")


def instrument(cls: Any, name: str, tag: str) -> None:
    """Wrap method `name` of `cls` to report its start and end."""
    inner: Callable[..., Any] = getattr(cls, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        say(tag + "+")
        result = inner(*args, **kwargs)
        say(tag + "-")
        return result

    setattr(cls, name, wrapper)


def main() -> None:
    path, seed, first, style, background = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    import minilsm
    from minilsm.db import DB

    instrument(DB, "_write_level0_table", "F")
    instrument(DB, "_run_compaction", "C")
    say("I")
    db = minilsm.DB(path, **options(style, background == "1"))
    say("O")
    i = first
    while True:
        op = make_op(seed, i)
        if op[0] == "put":
            db.put(op[1], op[2])
        elif op[0] == "delete":
            db.delete(op[1])
        else:
            with db.write_batch() as wb:
                for is_put, k, v in op[1]:
                    if is_put:
                        wb.put(k, v)
                    else:
                        wb.delete(k)
        say(f"A {i}")
        i += 1


if __name__ == "__main__":
    main()
