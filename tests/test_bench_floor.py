"""The floor benchmark's scan skeleton must decode exactly what it wrote, or its timing means nothing."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from bench import floor


def pairs(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    rnd = random.Random(seed)
    return sorted((b"%016d" % i, rnd.randbytes(rnd.randrange(0, 300))) for i in range(n))


@pytest.mark.parametrize("n", [0, 1, 37, 2000])
def test_the_scan_skeleton_reads_back_every_pair_from_its_blocks(tmp_path: Path, n: int) -> None:
    data = pairs(n, n)
    path = str(tmp_path / "t")
    extents = floor.write_scan_table(path, data)
    assert sum(size for _, size in extents) + 8 * len(extents) == os.path.getsize(path)
    assert all(size >= 4096 for _, size in extents[:-1])  # full blocks, as a store's would be
    fd = os.open(path, os.O_RDONLY)
    try:
        assert floor.floor_scan_blocks(fd, extents)() == n  # the timed scan counts what it reads
        seen = list(floor.read_scan_table(fd, extents))
    finally:
        os.close(fd)
    assert seen == data


def test_the_scan_skeleton_checks_each_block(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    extents = floor.write_scan_table(path, pairs(100, 1))
    with open(path, "r+b") as f:
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 1]))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="checksum"):
            floor.floor_scan_blocks(fd, extents)()
    finally:
        os.close(fd)
