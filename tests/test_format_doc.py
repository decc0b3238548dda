"""docs/FORMAT.md, FORMAT-wal.md and BLOOM.md, executed: an independent decoder written from the documents alone.

The decoder below (the `doc_*` functions) uses only `struct`, `xxhash` and `json`, and follows the
three documents byte by byte: block framing, data blocks (entries, offset array, hash index),
the index, filter, properties blocks, the footer, the manifest, and a store's log.  The library is imported only
to build real files and to say what the decoder must find in them.  So a change to the format
that the documents do not follow, or a document that no longer tells the truth, fails here.

Learners can read it beside the documents: each decoder function names the section it follows.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import struct
from pathlib import Path
from typing import Any

import xxhash

import minilsm
from minilsm.fs import FileSystem
from minilsm.manifest import read_manifest
from minilsm.sstable import TableBuilder, TableReader
from minilsm.sstable.format import decode_index
from minilsm.stats import Stats

DOCS = Path(__file__).resolve().parent.parent / "docs"
FS = FileSystem()

# -- the decoder, from the documents only -------------------------------------------------

BLOCK_TYPES = {"data": 1, "filter": 2, "index": 3, "properties": 4}  # FORMAT.md, "Block framing and checksums"
FOOTER_SIZE = 68
HASH_COLLISION, HASH_EMPTY = 254, 255


def doc_block(file: bytes, handle: tuple[int, int], kind: str) -> bytes:
    """FORMAT.md, "Block framing": contents, then type u8 and xxh3_64(contents, seed=type) u64.

    A handle (offset, size) counts the 9-byte trailer in its size.
    """
    offset, size = handle
    raw = file[offset : offset + size]
    assert len(raw) == size >= 9
    contents, (type_byte, checksum) = raw[:-9], struct.unpack("<BQ", raw[-9:])
    assert type_byte == BLOCK_TYPES[kind]
    assert checksum == xxhash.xxh3_64_intdigest(contents, seed=type_byte)
    return contents


def doc_footer(file: bytes) -> dict[str, Any]:
    """FORMAT.md, "Footer": the last 68 bytes."""
    footer = file[-FOOTER_SIZE:]
    io, isz, fo, fsz, po, psz = struct.unpack_from("<6Q", footer, 0)
    (version,) = struct.unpack_from("<I", footer, 48)
    (checksum,) = struct.unpack_from("<Q", footer, 52)
    magic = footer[60:68]
    assert magic == b"minilsmT" and struct.unpack("<Q", magic)[0] == 0x546D736C696E696D
    assert checksum == xxhash.xxh3_64_intdigest(footer[:52])
    # The blocks tile the end of the file (check 5 of `read_footer`).
    assert fo + fsz == io and io + isz == po and po + psz == len(file) - FOOTER_SIZE
    return {"index": (io, isz), "filter": (fo, fsz), "properties": (po, psz), "version": version}


def key_hash(key: bytes) -> tuple[int, int]:
    """BLOOM.md, "Hashing": h1 is the low 64 bits of the XXH3-128 digest, h2 the high 64 bits."""
    digest = xxhash.xxh3_128_intdigest(key)
    return digest & (1 << 64) - 1, digest >> 64


def doc_data_block(contents: bytes) -> tuple[list[tuple[bytes, int, bytes]], list[int], bytes]:
    """FORMAT.md, "Data blocks": (entries, offset array, hash buckets), checking every stated relation."""
    size = len(contents)
    buckets, n = struct.unpack_from("<HI", contents, size - 6)
    assert n >= 1
    buckets_at = size - 6 - buckets
    limit = buckets_at - 4 * n
    offsets = list(struct.unpack_from(f"<{n}I", contents, limit))
    entries, pos = [], 0
    for i in range(n):
        assert offsets[i] == pos  # entry i+1 starts where entry i ends
        key_len, value_len, trailer = struct.unpack_from("<IIQ", contents, pos)
        key = contents[pos + 16 : pos + 16 + key_len]
        value = contents[pos + 16 + key_len : pos + 16 + key_len + value_len]
        pos += 16 + key_len + value_len
        entries.append((key, trailer, value))
    assert pos == limit  # the entries end exactly at the offset array
    return entries, offsets, contents[buckets_at : size - 6]


def doc_expected_buckets(entries: list[tuple[bytes, int, bytes]]) -> bytes:
    """FORMAT.md, "The hash index": what the buckets must hold, given the block's entries."""
    firsts: dict[bytes, int] = {}
    for i, (key, _, _) in enumerate(entries):
        firsts.setdefault(key, i)
    if max(firsts.values()) > 253:
        return b""  # B = 0: always binary-searched
    buckets = bytearray([HASH_EMPTY]) * math.ceil(len(firsts) / 0.25)
    for key, i in firsts.items():
        b = key_hash(key)[1] % len(buckets)
        buckets[b] = i if buckets[b] == HASH_EMPTY else HASH_COLLISION
    return bytes(buckets)


def doc_index(contents: bytes) -> list[tuple[bytes, int, int, int]]:
    """FORMAT.md, "Index block": n u32, then per block (last trailer, offset, size, key_len) and the last user key."""
    (n,) = struct.unpack_from("<I", contents, 0)
    out, pos = [], 4
    for _ in range(n):
        trailer, offset, size, key_len = struct.unpack_from("<QQII", contents, pos)
        key = contents[pos + 24 : pos + 24 + key_len]
        pos += 24 + key_len
        out.append((key, trailer, offset, size))
    assert pos == len(contents)  # no bytes follow the last entry
    return out


def doc_filter(contents: bytes) -> dict[str, Any]:
    """BLOOM.md, "Serialized layout": a 24-byte header, P bytes of bits, XXH64 (seed 0) of all before it."""
    magic, version, scheme, k, param, num_bits, num_keys = struct.unpack_from("<4sBBBBQQ", contents, 0)
    payload_len = math.ceil(num_bits / 8)
    assert len(contents) == 24 + payload_len + 8
    (checksum,) = struct.unpack_from("<Q", contents, 24 + payload_len)
    assert checksum == xxhash.xxh64_intdigest(contents[: 24 + payload_len], seed=0)
    assert (magic, version, scheme, param) == (b"MLBF", 1, 2, 0)
    assert (k == 0) == (num_bits == 0) and k <= 30
    bits = contents[24 : 24 + payload_len]
    if num_bits % 8:
        assert bits[-1] >> (num_bits % 8) == 0  # padding bits are 0
    return {"k": k, "num_bits": num_bits, "num_keys": num_keys, "bits": bits}


def doc_may_contain(f: dict[str, Any], key: bytes) -> bool:
    """BLOOM.md: probes g_i = (h1 + i*h2 + (i^3 - i)/6) mod m; bit p is bit p mod 8 of byte p // 8."""
    m, bits = f["num_bits"], f["bits"]
    if m == 0:
        return True  # "no filter" answers maybe
    h1, h2 = key_hash(key)
    probes = ((h1 + i * h2 + (i**3 - i) // 6) % m for i in range(f["k"]))
    return all(bits[p // 8] >> (p % 8) & 1 for p in probes)


def doc_properties(contents: bytes) -> list[tuple[str, int, Any]]:
    """FORMAT.md, "Properties block": n u16, then (name_len u8, name, tag u8, value) in the builder's order."""
    (n,) = struct.unpack_from("<H", contents, 0)
    out, pos = [], 2
    for _ in range(n):
        name_len = contents[pos]
        name = contents[pos + 1 : pos + 1 + name_len].decode("ascii")
        tag = contents[pos + 1 + name_len]
        pos += 2 + name_len
        value: Any
        if tag == 3:
            (length,) = struct.unpack_from("<I", contents, pos)
            value = contents[pos + 4 : pos + 4 + length]
            pos += 4 + length
        else:
            (value,) = struct.unpack_from("<Q" if tag == 1 else "<d", contents, pos)
            pos += 8
        out.append((name, tag, value))
    assert pos == len(contents)
    return out


def doc_table(file: bytes) -> dict[str, Any]:
    """The whole table, from the footer inwards, as FORMAT.md "Layout" draws it."""
    footer = doc_footer(file)
    index = doc_index(doc_block(file, footer["index"], "index"))
    blocks, expect = [], 0
    for last_key, last_trailer, offset, size in index:
        assert offset == expect  # data blocks tile [0, filter offset)
        entries, offsets, buckets = doc_data_block(doc_block(file, (offset, size), "data"))
        assert entries[-1][:2] == (last_key, last_trailer)  # the index names each block's last version
        assert buckets == doc_expected_buckets(entries)
        blocks.append({"entries": entries, "offsets": offsets, "buckets": buckets, "size": size})
        expect = offset + size
    assert expect == footer["filter"][0]
    return {
        "footer": footer,
        "index": index,
        "blocks": blocks,
        "filter": doc_filter(doc_block(file, footer["filter"], "filter")),
        "properties": doc_properties(doc_block(file, footer["properties"], "properties")),
    }


def doc_manifest(data: bytes) -> list[dict[str, Any]]:
    """FORMAT.md, "Manifest": records in FORMAT-wal.md's framing (length u32, xxh32 of the length bytes,
    xxh3_64 of the payload, payload), each payload a JSON object; here every record must be intact."""
    records = []
    pos = 0
    while pos < len(data):
        length, header_check, checksum = struct.unpack_from("<IIQ", data, pos)
        assert header_check == xxhash.xxh32_intdigest(data[pos : pos + 4])
        payload = data[pos + 16 : pos + 16 + length]
        assert len(payload) == length and checksum == xxhash.xxh3_64_intdigest(payload)
        records.append(json.loads(payload.decode("utf-8")))
        pos += 16 + length
    return records


def doc_manifest_state(records: list[dict[str, Any]]) -> dict[str, Any]:
    """FORMAT.md, "Manifest": the snapshot with each edit applied in order (tables keyed by number per level)."""
    first = records[0]
    assert (first["kind"], first["format_version"]) == ("snapshot", 2)
    state = {**first, "levels": [{t["number"]: t for t in level} for level in first["levels"]]}
    for edit in records[1:]:
        assert edit["kind"] == "edit"
        for key in ("next_file_number", "last_sequence", "log_number"):
            state[key] = edit[key]
        for level, number in edit["removed"]:
            del state["levels"][level][number]
        for level, table in edit["added"]:
            assert table["number"] not in state["levels"][level]
            state["levels"][level][table["number"]] = table
        for level, pointer in edit["compact_pointers"]:
            state["compact_pointers"][level] = pointer
    return state


def doc_log(data: bytes) -> list[tuple[int, list[tuple[int, bytes, bytes]]]]:
    """FORMAT-wal.md, "Record" and "Write-batch payload": (seq, [(kind, key, value)]) per record, all intact."""
    batches, pos = [], 0
    while pos < len(data):
        length, header_check, checksum = struct.unpack_from("<IIQ", data, pos)
        assert header_check == xxhash.xxh32_intdigest(data[pos : pos + 4]) and length <= 128 << 20
        payload = data[pos + 16 : pos + 16 + length]
        assert len(payload) == length and checksum == xxhash.xxh3_64_intdigest(payload)
        seq, count = struct.unpack_from("<QI", payload, 0)
        ops, at = [], 12
        for _ in range(count):
            kind, key_len, value_len = struct.unpack_from("<BII", payload, at)
            key = payload[at + 9 : at + 9 + key_len]
            ops.append((kind, key, payload[at + 9 + key_len : at + 9 + key_len + value_len]))
            at += 9 + key_len + value_len
            assert kind in (0, 1) and (kind == 1 or value_len == 0)  # a delete carries no value
        assert at == len(payload) == 12 + sum(9 + len(k) + len(v) for _, k, v in ops)
        batches.append((seq, ops))
        pos += 16 + length
    return batches


# -- reading the documents themselves -----------------------------------------------------


def doc_section(doc: str, heading: str) -> str:
    """The text of the section under `heading` (up to the next heading of any level)."""
    text = (DOCS / doc).read_text()
    start = text.index(heading + "\n")
    end = text.find("\n#", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def doc_table_rows(section: str) -> list[list[str]]:
    """The cells of every Markdown table row in `section` (outside code blocks), header and separator skipped."""
    prose = re.sub(r"```.*?```", "", section, flags=re.S)
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in prose.splitlines()
        if line.startswith("|") and not set(line.strip()) <= set("|-: ")
    ]
    return rows[1:]


# -- building real files with the library ---------------------------------------------------


def trailer(seq: int, kind: int = 1) -> int:
    return seq << 8 | kind


def versions() -> list[tuple[bytes, int, bytes]]:
    """Internal order: user key ascending, then trailer descending.  Some keys have many versions,
    enough that one key's versions span blocks; every fifth key has a tombstone on top."""
    out, seq = [], 1000
    for i in range(120):
        key = b"key%04d" % i
        count = 12 if i in (7, 60) else 1 + i % 3
        for j in range(count):
            seq -= 1
            deleted = j == 0 and i % 5 == 0
            out.append((key, trailer(seq + 100 * j, 0 if deleted else 1), b"" if deleted else b"v%d.%d" % (i, j)))
    # Sort into internal order (the seq arithmetic above is only to vary trailers).
    return sorted(out, key=lambda e: (e[0], -e[1]))


def build(dirname: str, entries: list[tuple[bytes, int, bytes]], **kwargs: Any) -> bytes:
    builder = TableBuilder(FS, dirname, 1, **kwargs)
    for e in entries:
        builder.add(*e)
    builder.finish()
    return (Path(dirname) / "000001.sst").read_bytes()


# -- the tests ------------------------------------------------------------------------------


def check_table_against_reader(dirname: str, file: bytes, block_size: int) -> dict[str, Any]:
    """Decode `file` from the documents and compare every part with what the library reads."""
    t = doc_table(file)
    reader = TableReader.open(FS, dirname, 1, Stats())
    try:
        # Every version, in order.
        decoded = [e for block in t["blocks"] for e in block["entries"]]
        assert decoded == list(reader.iter_entries())
        keys = [k for k, _, _ in decoded]
        assert keys == sorted(keys) and all(
            a[1] > b[1] for a, b in itertools.pairwise(decoded) if a[0] == b[0]
        )  # internal order: trailer descending within a key
        for _, tr, value in decoded:
            assert tr & 0xFF in (0, 1) and (tr & 0xFF == 1 or value == b"")  # a tombstone's value is empty
        # The cut rule: every block but the last has reached block_size.
        assert all(len(b["offsets"]) >= 1 for b in t["blocks"])
        for b in t["blocks"][:-1]:
            assert b["size"] - 9 >= block_size
        # The index, against the library's own decoder.
        footer = t["footer"]
        lib_index = decode_index(doc_block(file, footer["index"], "index"), footer["filter"][0])
        assert t["index"] == list(
            zip(lib_index.last_keys, lib_index.last_trailers, lib_index.offsets, lib_index.sizes, strict=True)
        )
        # The filter: header fields, sizing, and every distinct user key passes the documented probes.
        f = t["filter"]
        assert (f["k"], f["num_bits"], f["num_keys"]) == (reader.filter.k, reader.filter.num_bits, len(set(keys)))
        assert all(doc_may_contain(f, k) for k in set(keys))
        absent = [b"absent%d" % i for i in range(300)]
        assert [doc_may_contain(f, k) for k in absent] == [reader.filter.may_contain(k) for k in absent]
        # The properties: names, order and tags as the document's table lists them, values as the reader has them.
        props = t["properties"]
        rows = doc_table_rows(doc_section("FORMAT.md", "### Properties block"))
        tags = {"u64": 1, "f64": 2, "bytes": 3}
        assert [(name, tag) for name, tag, _ in props] == [(r[0].strip("`"), tags[r[1]]) for r in rows]
        values = {name: value for name, _, value in props}
        assert values == dataclasses.asdict(reader.props)
        # The cross-checks the document states.
        assert values["largest"] == t["index"][-1][0]
        assert (values["filter_k"], values["filter_num_bits"]) == (f["k"], f["num_bits"])
        assert values["num_data_blocks"] == len(t["index"])
        assert values["data_size"] == footer["filter"][0]
        assert (values["index_size"], values["filter_size"]) == (footer["index"][1], footer["filter"][1])
        assert values["format_version"] == footer["version"] == 2
        assert values["num_entries"] == len(decoded)
        assert values["num_deletions"] == sum(1 for _, tr, _ in decoded if tr & 0xFF == 0)
        seqs = [tr >> 8 for _, tr, _ in decoded]
        assert (values["min_seq"], values["max_seq"]) == (min(seqs), max(seqs))
        assert (values["smallest"], values["largest"]) == (keys[0], keys[-1])
    finally:
        reader.close()
    return t


def test_a_table_decodes_as_documented(tmp_path: Path) -> None:
    entries = versions()
    file = build(str(tmp_path), entries, block_size=512, bits_per_key=10)
    t = check_table_against_reader(str(tmp_path), file, 512)
    assert [e for block in t["blocks"] for e in block["entries"]] == entries
    assert len(t["blocks"]) > 3
    # Some key's versions span blocks, and the next block enters it in its hash index again.
    assert any(a["entries"][-1][0] == b["entries"][0][0] for a, b in itertools.pairwise(t["blocks"]))
    # BLOOM.md, "Sizing in minilsm": num_bits = max(64, ceil(n * bits_per_key)), k = round(bits_per_key * ln 2).
    n = len({k for k, _, _ in entries})
    assert (t["filter"]["num_bits"], t["filter"]["k"]) == (max(64, math.ceil(n * 10)), round(10 * math.log(2)))


def test_no_filter_and_no_hash_index(tmp_path: Path) -> None:
    """bits_per_key = 0 still writes a 32-byte filter with no bits; a block whose keys start past
    entry 253 has no hash index (B = 0)."""
    entries = [(b"%03d" % i, trailer(1), b"") for i in range(300)]
    file = build(str(tmp_path), entries, block_size=1 << 16, bits_per_key=0)
    t = check_table_against_reader(str(tmp_path), file, 1 << 16)
    assert t["footer"]["filter"][1] == 32 + 9
    assert (t["filter"]["k"], t["filter"]["num_bits"], t["filter"]["bits"]) == (0, 0, b"")
    assert len(t["blocks"]) == 1 and t["blocks"][0]["buckets"] == b""


def test_the_worked_example(tmp_path: Path) -> None:
    """FORMAT.md, "Worked example": the table's length, its hex dump, and the table of its bytes."""
    file = build(str(tmp_path), [(b"apple", trailer(2), b"red"), (b"apple", trailer(1, 0), b"")])
    section = doc_section("FORMAT.md", "### Worked example")
    length = int(re.search(r"It is (\d+) bytes long", section).group(1))  # type: ignore[union-attr]
    assert len(file) == length
    dump = re.findall(r"^([0-9a-f]{8}): ((?:[0-9a-f]{2,4} )+)", section, re.MULTILINE)
    assert len(dump) == 10
    for offset, hexbytes in dump:
        chunk = bytes.fromhex(hexbytes)
        assert file[int(offset, 16) : int(offset, 16) + len(chunk)] == chunk, offset
    t = check_table_against_reader(str(tmp_path), file, 4096)
    (block,) = t["blocks"]
    assert block["entries"] == [(b"apple", 0x201, b"red"), (b"apple", 0x100, b"")]
    assert block["offsets"] == [0, 24]
    assert block["buckets"] == bytes([HASH_EMPTY, 0, HASH_EMPTY, HASH_EMPTY])  # bucket 1 holds entry 0
    assert block["size"] - 9 == 63
    handles = re.findall(
        r"filter block \((\d+), (\d+) bytes\), index block \((\d+), (\d+)\), properties block \((\d+), (\d+)\)", section
    )
    fo, fsz, io, isz, po, psz = map(int, handles[0])
    assert t["footer"] == {"index": (io, isz), "filter": (fo, fsz), "properties": (po, psz), "version": 2}
    assert fo == 0x48 and po + psz == 0x1E6 == len(file) - FOOTER_SIZE


def test_the_manifest_decodes_as_documented(db_path: str) -> None:
    with minilsm.DB(db_path, background=False) as db:
        for i in range(200):
            db.put(b"k%05d" % i, b"v" * 20)
        db.flush()
        for i in range(0, 200, 3):
            db.delete(b"k%05d" % i)
        db.flush()
        db.compact_range()
        db.put(b"late", b"x")
        db.flush()
    records = doc_manifest(Path(db_path, "MANIFEST").read_bytes())
    assert len(records) >= 4  # the open's snapshot, then a flush, a compaction and a flush since
    section = doc_section("FORMAT.md", "## Manifest")
    snapshot_table, edit_table = (doc_table_rows(t) for t in section.split("\nAn edit:\n"))
    snapshot_keys = [r[0].strip("`") for r in snapshot_table]
    edit_keys = [k.strip("` ") for r in edit_table for k in r[0].split(",")]
    assert list(records[0]) == snapshot_keys
    assert all(list(edit) == edit_keys for edit in records[1:])
    assert any(edit["removed"] for edit in records[1:]) and any(edit["compact_pointers"] for edit in records[1:])
    obj = doc_manifest_state(records)
    table_keys = re.findall(r"`(\w+)`", re.search(r"A table object: (.*?)\.\n", section, re.S).group(1))  # type: ignore[union-attr]
    state = read_manifest(FS, db_path).state
    assert (obj["next_file_number"], obj["last_sequence"], obj["log_number"]) == (
        state.next_file_number,
        state.last_sequence,
        state.log_number,
    )
    assert obj["compact_pointers"] == [None if p is None else p.hex() for p in state.compact_pointers]
    listed = [t for level in obj["levels"] for t in level.values()]
    assert len(listed) >= 2 and [len(level) for level in obj["levels"]] == [len(level) for level in state.levels]
    for level, lib_level in zip(obj["levels"], state.levels, strict=True):
        for meta in lib_level:
            table = level[meta.number]
            assert list(table) == table_keys
            assert table["number"] < obj["next_file_number"]
            # The manifest's record of the table agrees with the library and with the table file itself.
            assert {
                **table,
                "smallest": bytes.fromhex(table["smallest"]),
                "largest": bytes.fromhex(table["largest"]),
            } == (dataclasses.asdict(meta))
            file = Path(db_path, f"{table['number']:06d}.sst").read_bytes()
            assert table["file_size"] == len(file)
            props = {name: value for name, _, value in doc_table(file)["properties"]}
            for name in ("min_seq", "max_seq", "num_entries", "num_deletions"):
                assert props[name] == table[name]
            assert (props["smallest"].hex(), props["largest"].hex()) == (table["smallest"], table["largest"])
    # The document's example records have the same shape.
    example = doc_manifest_example(section)
    assert list(example[0]) == snapshot_keys and all(list(edit) == edit_keys for edit in example[1:])
    assert all(list(t) == table_keys for edit in example[1:] for _, t in edit["added"])


def doc_manifest_example(section: str) -> list[dict[str, Any]]:
    """The example's payloads: one JSON object per record, a record's lines indented past its first."""
    text = re.search(r"```json\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    return [json.loads(record) for record in re.split(r"\n(?=\{)", text.strip())]


def test_the_manifest_example_is_what_its_store_writes(db_path: str) -> None:
    """FORMAT.md's example manifest, made as it says: 1000 puts of 10-byte values into a new store, one flush.

    It used to show table 2 with log number 3: a flush freezes the memtable and starts the next log
    before it numbers its table, so the table is 3 and the log 2.
    """
    section = doc_section("FORMAT.md", "## Manifest")
    assert "1000 puts, `k00000` to `k00999` with 10-byte values, and one flush" in section
    with minilsm.DB(db_path, background=False) as db:
        for i in range(1000):
            db.put(b"k%05d" % i, b"v" * 10)
        db.flush()
        assert doc_manifest(Path(db_path, "MANIFEST").read_bytes()) == doc_manifest_example(section)


def test_a_store_log_decodes_as_documented(db_path: str) -> None:
    """FORMAT-wal.md on the log a real store leaves: one record per write or batch, op i at seq + i."""
    with minilsm.DB(db_path, background=False) as db:
        db.put(b"apple", b"red")
        db.delete(b"pear")
        with db.write_batch() as wb:
            wb.put(b"a", b"1")
            wb.delete(b"apple")
            wb.put(b"", b"empty key")
        db.put(b"big", b"v" * 1000, sync=True)
    (log,) = [p for p in Path(db_path).iterdir() if re.fullmatch(r"\d{6}\.log", p.name)]  # close flushes nothing
    batches = doc_log(log.read_bytes())
    assert batches == [
        (1, [(1, b"apple", b"red")]),
        (2, [(0, b"pear", b"")]),
        (3, [(1, b"a", b"1"), (0, b"apple", b""), (1, b"", b"empty key")]),
        (6, [(1, b"big", b"v" * 1000)]),
    ]
    with minilsm.DB(db_path, background=False) as db:  # and the store reads back what the decoder found
        assert list(db.iterator()) == [(b"", b"empty key"), (b"a", b"1"), (b"big", b"v" * 1000)]


def test_both_readings_of_the_digest_agree() -> None:
    """BLOOM.md, "Hashing": h2 is the first 8 bytes of the canonical (big-endian) digest, h1 the last 8."""
    for key in (b"", b"apple", b"k%05d" % 42):
        digest = xxhash.xxh3_128_digest(key)
        assert key_hash(key) == (int.from_bytes(digest[8:], "big"), int.from_bytes(digest[:8], "big"))


def test_table_file_names() -> None:
    """FORMAT.md, "Naming": table n lives in "%06d.sst" % n."""
    from minilsm.sstable import table_file_name

    assert [table_file_name(n) for n in (12, 999999, 1234567)] == ["000012.sst", "999999.sst", "1234567.sst"]
