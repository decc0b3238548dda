"""Every `minilsm` command, in process through `main([...])` and as a real process through ``python -m minilsm``."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from storeutil import fast_tmp_dir, small_options

import minilsm
from minilsm.cli import EXIT_ERROR, EXIT_NEGATIVE, EXIT_OK, EXIT_USAGE, main
from minilsm.keys import MAX_KEY_SIZE

ROOT = Path(__file__).resolve().parent.parent


def key(n: int) -> bytes:
    return b"key%05d" % n


def build(path: str, n: int = 600) -> None:
    """A store of n keys (even numbers) over several tables and levels, and a tombstone."""
    with minilsm.DB(path, **small_options()) as db:
        for i in range(n):
            db.put(key(2 * ((i * 7919) % n)), b"value %d" % i)
        db.delete(key(4))
        db.flush()


@pytest.fixture
def store() -> Iterator[str]:
    with fast_tmp_dir() as d:
        path = os.path.join(d, "store")
        build(path)
        yield path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def tables_of(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".sst"))


# -- in process ------------------------------------------------------------------------


def test_put_get_delete_scan(capsys: pytest.CaptureFixture[str]) -> None:
    with fast_tmp_dir() as d:
        s = os.path.join(d, "s")
        assert run(capsys, "put", s, "apple", "red") == (EXIT_OK, "", "")  # creates the store
        assert run(capsys, "put", s, "banana", "yellow")[0] == EXIT_OK
        assert run(capsys, "put", s, "--hex", "00ff", "0102")[0] == EXIT_OK
        assert run(capsys, "put", s, "pêche", "rose")[0] == EXIT_OK  # UTF-8 text
        assert run(capsys, "get", s, "apple") == (EXIT_OK, "red\n", "")
        assert run(capsys, "get", s, "--hex", "00ff") == (EXIT_OK, "0102\n", "")
        code, out, err = run(capsys, "get", s, "pear")
        assert (code, out) == (EXIT_NEGATIVE, "") and "pear: not found" in err
        code, out, _ = run(capsys, "get", s, "pear", "--json")
        assert code == EXIT_NEGATIVE and json.loads(out) == {"key": "pear", "found": False, "value": None}
        assert run(capsys, "scan", s)[1] == "0x00ff\t0x0102\napple\tred\nbanana\tyellow\npêche\trose\n"
        assert run(capsys, "scan", s, "--start", "b", "--reverse")[1] == "pêche\trose\nbanana\tyellow\n"
        assert run(capsys, "scan", s, "--prefix", "6261", "--hex")[1] == "62616e616e61\t79656c6c6f77\n"
        assert run(capsys, "scan", s, "--stop", "b", "--limit", "1")[1] == "0x00ff\t0x0102\n"
        assert json.loads(run(capsys, "scan", s, "--json", "--start", "p")[1]) == [{"key": "pêche", "value": "rose"}]
        assert run(capsys, "delete", s, "apple")[0] == EXIT_OK
        assert run(capsys, "get", s, "apple")[0] == EXIT_NEGATIVE
        with minilsm.DB(s) as db:  # what the commands wrote is what the library reads
            assert dict(db.iterator()) == {b"\x00\xff": b"\x01\x02", b"banana": b"yellow", "pêche".encode(): b"rose"}


def test_stats_tables_explain(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "stats", store)
    assert code == EXIT_OK
    for phrase in (
        "filters",
        "negatives (data-block reads avoided)",
        "write amplification",
        "space amplification",
        "levels",
    ):
        assert phrase in out
    stats = json.loads(run(capsys, "stats", store, "--json")[1])
    assert stats["space_amplification"] > 1 and stats["live_bytes"] > 0
    assert sum(lv["tables"] for lv in stats["levels"]) == len(tables_of(store))

    code, out, _ = run(capsys, "tables", store)
    # Two lines saying why the measured columns are empty here, the header, a line per table.
    assert code == EXIT_OK and "expected FPR" in out and len(out.splitlines()) == 3 + len(tables_of(store))
    assert "count the point reads since this command opened the store: none" in out
    rows = json.loads(run(capsys, "tables", store, "--json")[1])
    assert sorted(r["file_name"] for r in rows) == tables_of(store)
    assert sum(r["tombstones"] for r in rows) == 1

    code, out, _ = run(capsys, "explain", store, "key00006")
    assert code == EXIT_OK and out.startswith("get key00006 at sequence") and "-> found" in out
    trace = json.loads(run(capsys, "explain", store, "key00007", "--json")[1])
    assert trace["outcome"] == "not found" and trace["steps"][0]["text"] == "memtable: miss"
    trace = json.loads(run(capsys, "explain", store, "--hex", key(4).hex(), "--json")[1])
    assert trace["outcome"] == "deleted" and trace["key"] == key(4).hex()


def test_compact(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "compact", store, "--json")
    assert code == EXIT_OK
    result = json.loads(out)
    assert result["compactions"] > 0
    assert sum(1 for lv in result["after"] if lv["tables"]) == 1  # everything merged down to one level
    with minilsm.DB(store) as db:
        assert db.get(key(6)) is not None and db.get(key(4)) is None
        assert sum(t.tombstones for t in db.tables()) == 0  # the tombstone reached the bottom and was dropped
    code, out, _ = run(capsys, "compact", store)
    assert code == EXIT_OK and out.startswith("before:") and "after:" in out


def test_checkpoint(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    target = store + "-copy"
    code, out, _ = run(capsys, "checkpoint", store, target, "--json")
    assert code == EXIT_OK and json.loads(out) == {"checkpoint": target, "tables": len(tables_of(store))}
    assert tables_of(target) == tables_of(store)
    with minilsm.DB(store) as db, minilsm.DB(target, create_if_missing=False) as copy:
        assert list(copy.iterator()) == list(db.iterator())
    code, _, err = run(capsys, "checkpoint", store, target)  # a second time: the target exists
    assert code == EXIT_ERROR and "exists" in err
    code, _, err = run(capsys, "checkpoint", store, os.path.join(store, "backup"))  # inside the store: refused
    assert code == EXIT_USAGE and "own directory" in err and not os.path.exists(os.path.join(store, "backup"))


def test_a_tiered_store_keeps_its_shape_under_compaction_style_tiered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: every command opened the store leveled, so `put` or `compact` on a size-tiered store moved its runs
    into levels 1 and up (the store does not record its style).  `--compaction-style tiered` opens it as its
    application does; without it the command still works, leveled."""
    path = str(tmp_path / "tiered")
    with minilsm.DB(path, **small_options(compaction_style="tiered")) as db:
        for i in range(300):
            db.put(key(i), b"v" * 40)
        db.delete(key(7))
        db.flush()
        assert len(db.version.levels[0]) > 1
    for argv in (
        ("put", path, "new", "value"),
        ("delete", path, key(8).decode()),
        ("compact", path),
        ("get", path, key(9).decode()),
    ):
        assert run(capsys, *argv, "--compaction-style", "tiered")[0] == EXIT_OK
    with minilsm.DB(path, compaction_style="tiered") as db:
        assert [len(level) for level in db.version.levels[1:]] == [0] * (len(db.version.levels) - 1)
        assert len(db.version.levels[0]) == 1  # compact_range merged the runs into one, in level 0
        assert db.get(b"new") == b"value" and db.get(key(7)) is None and db.get(key(8)) is None
    assert run(capsys, "compact", path)[0] == EXIT_OK  # leveled, the default: moves the data down
    with minilsm.DB(path) as db:
        assert not db.version.levels[0] and db.get(key(9)) == b"v" * 40
    with pytest.raises(SystemExit) as exited:
        main(["get", path, "k", "--compaction-style", "sideways"])
    assert exited.value.code == EXIT_USAGE and "invalid choice" in capsys.readouterr().err


def test_read_commands_leave_a_tiered_store_opened_leveled_as_it_was_and_writes_reshape_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: without `--compaction-style tiered` the read commands compact nothing, while `compact`, and
    `put` and `delete` when the open left a compaction due, move a size-tiered store's runs into levels.

    Commands open the store inline: a read command's open replays the log into one more level-0 table and
    stops there.  A write then runs the work the open left due, as an application's first write does (else an
    inline store reopened for a few writes at a time grew level 0 by a table per open).
    """
    path = str(tmp_path / "tiered")
    with minilsm.DB(path, **small_options(compaction_style="tiered", tiered_min_threshold=100)) as db:
        for i in range(300):
            db.put(key(i), b"v" * 40)
        db.flush()
        runs = len(db.version.levels[0])
    assert runs >= minilsm.Options().level0_compaction_trigger
    for argv in (
        ("get", path, key(9).decode()),
        ("scan", path, "--limit", "1"),
        ("stats", path),
        ("tables", path),
        ("explain", path, key(9).decode()),
    ):
        assert run(capsys, *argv)[0] == EXIT_OK
    with minilsm.DB(path, **small_options(compaction_style="tiered", tiered_min_threshold=100)) as db:
        assert not any(db.version.levels[1:]) and len(db.version.levels[0]) == runs
    assert run(capsys, "put", path, "new", "value")[0] == EXIT_OK
    with minilsm.DB(path, **small_options()) as db:
        assert len(db.version.levels[0]) < runs and any(db.version.levels[1:])
        assert db.get(b"new") == b"value" and all(db.get(key(i)) == b"v" * 40 for i in range(300))
    assert run(capsys, "compact", path)[0] == EXIT_OK
    with minilsm.DB(path, **small_options()) as db:
        assert not db.version.levels[0] and any(db.version.levels[1:])


def test_dump(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    table = os.path.join(store, tables_of(store)[0])
    code, out, _ = run(capsys, "dump", table)
    assert code == EXIT_OK
    for phrase in ("footer", "index block", "properties", "num_entries", "filter: m=", "fill ratio", "data blocks"):
        assert phrase in out
    assert "entries (first" not in out
    d = json.loads(run(capsys, "dump", table, "--entries", "--limit", "3", "--json")[1])
    assert len(d["entries"]) == min(3, d["properties"]["num_entries"])
    assert 0.0 < d["filter"]["fill_ratio"] < 1.0 and d["filter"]["k"] == 7
    assert next(b["offset"] for b in d["index"]) == 0 and len(d["index"]) == d["properties"]["num_data_blocks"]
    assert d["footer"]["filter_block"]["offset"] == d["properties"]["data_size"]


def test_check_finds_damage_and_says_where(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", store)
    assert code == EXIT_OK and out.rstrip().endswith("ok")
    name = tables_of(store)[len(tables_of(store)) // 2]
    with open(os.path.join(store, name), "r+b") as f:  # flip one byte of the first data block
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 0x40]))
    code, out, _ = run(capsys, "check", store)
    assert (
        code == EXIT_NEGATIVE
        and f"DAMAGE: {name}: data block at offset 0: checksum mismatch" in out
        and "1 problem found" in out
    )
    report = json.loads(run(capsys, "check", store, "--json")[1])
    assert not report["ok"] and [f["file"] for f in report["findings"] if f["damage"]] == [name]
    os.remove(os.path.join(store, name))
    code, out, _ = run(capsys, "check", store)
    assert code == EXIT_NEGATIVE and f"DAMAGE: {name}: missing" in out


def test_check_damaged_manifest_and_torn_log(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    logs = sorted(n for n in os.listdir(store) if n.endswith(".log"))
    with open(os.path.join(store, logs[-1]), "ab") as f:
        f.write(b"\x07\x00")  # a torn record: too short for its header
    code, out, _ = run(capsys, "check", store)
    assert code == EXIT_OK and "note" in out and "torn tail of 2 bytes" in out
    with open(os.path.join(store, "MANIFEST"), "r+b") as f:
        f.seek(30)
        f.write(b"#")
    code, out, _ = run(capsys, "check", store)
    assert code == EXIT_NEGATIVE and "DAMAGE: MANIFEST" in out


def test_check_lists_the_files_under_the_lock(tmp_path: Path) -> None:
    """Was: check listed the directory before taking the lock, so a store another process opened and closed in
    between was checked against stale names: its new log went unchecked, its deleted one was reported."""
    from minilsm.check import check_store

    path = str(tmp_path / "db")
    with minilsm.DB(path) as db:
        db.put(b"a", b"1")

    class ChangedMeanwhile(minilsm.fs.FileSystem):
        def lock(self, lock_path: str) -> minilsm.fs.FileLock:
            with minilsm.DB(path) as other:  # replays the log into a table, deletes it, starts a new one
                other.put(b"b", b"2")
            return super().lock(lock_path)

    report = check_store(path, ChangedMeanwhile())
    assert report.ok and report.logs_checked == 1 and report.log_records_checked == 1, report.render()
    assert not report.findings, report.render()


def test_a_key_a_report_spells_in_hex_goes_back_in_with_hex_and_never_looks_like_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with fast_tmp_dir() as d:
        s = os.path.join(d, "s")
        assert run(capsys, "put", s, "--hex", "00ff", "01")[0] == EXIT_OK  # not text
        assert run(capsys, "put", s, "0x00ff", "text")[0] == EXIT_OK  # text that looks like hex
        code, out, _ = run(capsys, "scan", s)
        assert code == EXIT_OK
        rows = dict(line.split("\t") for line in out.splitlines())
        assert rows == {"0x00ff": "0x01", "0x307830306666": "text"}  # two keys, two spellings
        for spelled, value in (("0x00ff", "01"), ("0x307830306666", "74657874")):  # each goes back with --hex
            assert run(capsys, "get", s, "--hex", spelled) == (EXIT_OK, value + "\n", "")
        assert run(capsys, "get", s, "--hex", "0x00ff") == (EXIT_OK, "01\n", "")
        assert run(capsys, "get", s, "0x00ff") == (EXIT_OK, "text\n", "")
        code, out, _ = run(capsys, "scan", s, "--json")
        assert code == EXIT_OK and {r["key"] for r in json.loads(out)} == set(rows)


def test_a_usage_error_names_an_oversized_key_clipped(capsys: pytest.CaptureFixture[str]) -> None:
    with fast_tmp_dir() as d:
        code, _, err = run(capsys, "put", os.path.join(d, "s"), "k" * 70000, "v")
    assert code == EXIT_USAGE and "maximum" in err
    assert len(err) < 200 and err.count("\n") == 1  # one readable line, not the 70,000-byte key


def test_no_store_hints_only_what_is_true_of_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: "(put creates one)" for every path without a store, though put makes none on or under a file (nor
    even when asked to: `put FILE` said it too), nor beside tables or logs whose MANIFEST is gone."""
    a_file = tmp_path / "file"
    a_file.write_text("not a store\n")
    orphans = tmp_path / "orphans"
    build(str(orphans), 50)
    (orphans / "MANIFEST").unlink()
    for argv, hint in (
        (["get", str(a_file), "k"], "it is not a directory"),
        (["put", str(a_file), "k", "v"], "it is not a directory"),
        (["get", str(a_file / "s"), "k"], f"{a_file} is not a directory"),
        (["put", str(a_file / "s"), "k", "v"], f"{a_file} is not a directory"),
        (["get", str(orphans), "k"], "it holds tables or logs but no MANIFEST: minilsm repair rebuilds one"),
        (["get", str(tmp_path / "new" / "s"), "k"], "put creates one"),
        (["get", str(tmp_path), "k"], "put creates one"),
    ):
        code, _, err = run(capsys, *argv)
        assert (code, err) == (EXIT_ERROR, f"minilsm {argv[0]}: no minilsm store at {argv[1]} ({hint})\n"), argv
    assert run(capsys, "put", str(tmp_path / "new" / "s"), "k", "v")[0] == EXIT_OK  # as the hint said
    assert run(capsys, "repair", str(orphans))[0] == EXIT_NEGATIVE  # the MANIFEST's loss, reported
    assert run(capsys, "get", str(orphans), "key00000")[0] == EXIT_OK


def test_a_missing_manifest_or_table_file_is_said_as_a_missing_store_is(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: `manifest` and `dump` printed the bare "[Errno 2] No such file or directory" of their read, where the
    commands that open the store say "no minilsm store at ..."."""
    a_file = tmp_path / "file"
    a_file.write_text("not a store\n")
    nowhere = str(tmp_path / "nowhere")
    for argv, said in (
        (["manifest", nowhere], f"no minilsm store at {nowhere} (put creates one)"),
        (["manifest", str(a_file)], f"no minilsm store at {a_file} (it is not a directory)"),
        (["dump", f"{nowhere}/999999.sst"], f"no table file at {nowhere}/999999.sst"),
        (["dump", f"{a_file}/999999.sst"], f"no table file at {a_file}/999999.sst"),
        (["dump", f"{store}/999999.sst"], f"no table file at {store}/999999.sst"),
    ):
        assert run(capsys, *argv) == (EXIT_ERROR, "", f"minilsm {argv[0]}: {said}\n"), argv
    assert run(capsys, "get", nowhere, "k")[2] == f"minilsm get: no minilsm store at {nowhere} (put creates one)\n"


def test_errors_are_one_line_with_an_exit_status(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    with fast_tmp_dir() as d:
        code, _, err = run(capsys, "get", os.path.join(d, "nothing"), "k")
        assert code == EXIT_ERROR and "no minilsm store" in err and "(put creates one)" in err
        assert "create_if_missing" not in err  # an option of the library, not of the command line
        code, _, err = run(capsys, "check", d)
        assert code == EXIT_ERROR and "no minilsm store" in err
    with minilsm.DB(store):
        code, _, err = run(capsys, "get", store, "k")  # the store is open: its lock is held
        assert code == EXIT_ERROR and "already open" in err
        code, _, err = run(capsys, "check", store)
        assert code == EXIT_ERROR and "is open" in err
    for command in ("get", "check", "repair", "manifest"):  # "" is no store, not the working directory
        args = [command, "", "k"] if command == "get" else [command, ""]
        assert run(capsys, *args) == (EXIT_ERROR, "", f"minilsm {command}: the store's path is empty; name a "
                                      "directory (os.curdir for the working directory)\n")  # fmt: skip
    for command in ("demo", "check", "repair", "checkpoint"):  # no key goes in or comes out: --hex would say it did
        with pytest.raises(SystemExit) as usage:
            main([command, "--hex", store, *([store + "-copy"] if command == "checkpoint" else [])])
        assert usage.value.code == EXIT_USAGE and "unrecognized arguments: --hex" in capsys.readouterr().err
    code, _, err = run(capsys, "get", store, "--hex", "zz")
    assert code == EXIT_USAGE and "not valid hex" in err
    code, _, err = run(capsys, "put", store, "k" * 70000, "v")
    assert code == EXIT_USAGE and "maximum" in err
    code, _, err = run(capsys, "dump", os.path.join(store, "MANIFEST"))
    assert code == EXIT_USAGE and "not a table file name" in err
    table = os.path.join(store, tables_of(store)[0])
    with open(table, "r+b") as f:
        f.truncate(os.path.getsize(table) - 1)
    code, _, err = run(capsys, "dump", table)
    assert code == EXIT_ERROR and tables_of(store)[0] in err
    with pytest.raises(SystemExit) as e:
        main(["get", store])  # missing KEY: argparse's usage error
    assert e.value.code == EXIT_USAGE
    with pytest.raises(SystemExit):
        main(["demo", "--keys", "0"])


def test_console_script_points_at_main() -> None:
    with open(ROOT / "pyproject.toml", "rb") as f:
        assert tomllib.load(f)["project"]["scripts"]["minilsm"] == "minilsm.cli:main"


# -- as real processes -----------------------------------------------------------------


def test_every_command_through_python_dash_m(store: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))

    def start(*argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "minilsm", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )

    def finish(p: subprocess.Popen[str]) -> tuple[int, str, str]:
        out, err = p.communicate(timeout=60)
        assert "Traceback" not in err
        return p.returncode, out, err

    table = os.path.join(store, tables_of(store)[0])
    with fast_tmp_dir() as d, ThreadPoolExecutor(1) as pool:
        # The commands that write run one after another, beside the others.
        w = os.path.join(d, "written")
        writes = [("put", w, "a", "1"), ("put", w, "b", "2"), ("delete", w, "a"), ("compact", w), ("scan", w)]
        chain = pool.submit(lambda: [finish(start(*argv)) for argv in writes])
        # Commands that only read run side by side, each on a copy (they would refuse each other's lock).
        copies = {}
        for name in ("get", "missing", "scan", "stats", "tables", "explain", "check"):
            copies[name] = os.path.join(d, name)
            subprocess.run(["cp", "-r", store, copies[name]], check=True)
        procs = {
            "get": start("get", copies["get"], "key00006"),
            "missing": start("get", copies["missing"], "key00007"),
            "scan": start("scan", copies["scan"], "--prefix", "key0000", "--json"),
            "stats": start("stats", copies["stats"], "--json"),
            "tables": start("tables", copies["tables"]),
            "explain": start("explain", copies["explain"], "key00008"),
            "check": start("check", copies["check"]),
            "dump": start("dump", table, "--entries", "--limit", "2"),
            "version": start("--version"),
            "nostore": start("stats", os.path.join(d, "nothing")),
        }
        results = {name: finish(p) for name, p in procs.items()}
        assert results["get"][:2] == (EXIT_OK, f"value {next(i for i in range(600) if (i * 7919) % 600 == 3)}\n")
        assert results["missing"][0] == EXIT_NEGATIVE
        assert [r["key"] for r in json.loads(results["scan"][1])] == ["key00000", "key00002", "key00006", "key00008"]
        assert json.loads(results["stats"][1])["levels"]
        assert results["tables"][0] == EXIT_OK and "measured FPR" in results["tables"][1]
        assert results["explain"][0] == EXIT_OK and "-> found" in results["explain"][1]
        assert results["check"][0] == EXIT_OK and results["check"][1].rstrip().endswith("ok")
        assert results["dump"][0] == EXIT_OK and "entries (first 2 of" in results["dump"][1]
        assert results["version"][1].startswith("minilsm ")
        assert results["nostore"][0] == EXIT_ERROR and results["nostore"][2].startswith("minilsm stats: ")
        *done, scan = chain.result()
        assert [code for code, _, _ in done] == [EXIT_OK] * 4 and scan == (EXIT_OK, "b\t2\n", "")


@pytest.mark.parametrize("bits", ["-1", "nan", "1000"])
@pytest.mark.parametrize("command", ["put", "delete", "compact", "demo"])
def test_an_out_of_range_bits_per_key_is_a_usage_error(command: str, bits: str, tmp_path: Path) -> None:
    """Regression: an out-of-range --bits-per-key escaped as a ValueError traceback with exit status 1,
    the status that means "not found" or "damage found"."""
    path = str(tmp_path / "s")
    argv = {"put": [path, "k", "v"], "delete": [path, "k"], "compact": [path], "demo": ["--keys", "10"]}[command]
    with pytest.raises(SystemExit) as e:
        main([command, *argv, "--bits-per-key", bits])
    assert e.value.code == EXIT_USAGE
    assert not os.path.exists(path)  # refused before anything was created


def test_a_store_deeper_than_the_default_max_levels_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: every command that opens the store died with a ValueError traceback and exit status 1
    (the status of "not found") on a store an application made with max_levels=10 and filled below level 6."""
    path = str(tmp_path / "deep")
    with minilsm.DB(path, **small_options(max_levels=10, level1_max_bytes=1)) as db:
        for i in range(200):
            db.put(key(i), b"v" * 20)
        assert db.version.bottom_level_with_data() >= 7
    before = sorted(os.listdir(path))
    for argv in (["get", path, "key00001"], ["scan", path], ["stats", path], ["put", path, "k", "v"]):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (EXIT_ERROR, "")
        assert err.startswith(f"minilsm {argv[0]}: ") and "max_levels" in err
    assert sorted(os.listdir(path)) == before
    code, _, _ = run(capsys, "check", path)
    assert code == EXIT_OK


def test_dump_describes_the_file_it_is_given(store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: a name such as 5.sst passed as a table name (parse_table_file_name took any digits), and dump
    then read the metadata and entries of 000005.sst, the table the number spells, beside the footer of 5.sst."""
    first, second = (os.path.join(store, n) for n in tables_of(store)[:2])
    subprocess.run(["cp", first, str(tmp_path / "000005.sst")], check=True)
    subprocess.run(["cp", second, str(tmp_path / "5.sst")], check=True)
    code, _, err = run(capsys, "dump", str(tmp_path / "5.sst"))
    assert code == EXIT_USAGE and "not a table file name" in err
    expected = json.loads(run(capsys, "dump", second, "--json", "--entries")[1])
    got = json.loads(run(capsys, "dump", str(tmp_path / "000005.sst"), "--json", "--entries")[1])
    assert got["entries"] != expected["entries"]  # the copies differ: the test tells them apart


def test_a_table_that_is_a_directory_is_named_in_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: a table file replaced by a directory opened (os.open of a directory succeeds) and failed at its first
    read, whose error has no file name: ``opening the store failed: [Errno 21] Is a directory``, naming nothing.
    (On tmpfs a directory is a few bytes long and reads as a too-short table instead: hence tmp_path.)"""
    store = str(tmp_path / "store")
    build(store, 50)
    name = tables_of(store)[0]
    table = os.path.join(store, name)
    os.remove(table)
    os.mkdir(table)
    for argv in (["scan", store], ["dump", table]):
        code, _, err = run(capsys, *argv)
        assert code == EXIT_ERROR
        assert name in err and "Is a directory" in err, err  # what it is, not only "not a regular file"


@pytest.mark.parametrize("victim", ["table", "MANIFEST"])
def test_a_fifo_in_place_of_a_store_file_is_an_error_naming_it_not_a_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], victim: str
) -> None:
    """Was: opening a FIFO for reading blocks until a writer comes, so a table file or MANIFEST replaced by a
    FIFO hung every command (and DB()) forever.  Now only a regular file is opened, and the error names it."""
    store = str(tmp_path / "store")
    build(store, 50)
    name = tables_of(store)[0] if victim == "table" else "MANIFEST"
    os.remove(os.path.join(store, name))
    os.mkfifo(os.path.join(store, name))
    outcome: list[tuple[int, str, str]] = []
    command = threading.Thread(target=lambda: outcome.append(run(capsys, "scan", store)), daemon=True)
    command.start()
    command.join(20)
    assert outcome, "the command hung on the FIFO"
    code, _, err = outcome[0]
    assert code == EXIT_ERROR and name in err, err


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling link"])
def test_check_reports_an_unreadable_manifest_as_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Was: a table or log that could not be read was damage in the report, but a MANIFEST that could not
    (a directory, a FIFO, a dangling link by that name) made check_store raise the bare OSError, so the
    library call failed with no report and the command exited 3 instead of listing the damage."""
    from minilsm.check import check_store

    store = str(tmp_path / "store")
    build(store, 50)
    manifest = os.path.join(store, "MANIFEST")
    os.remove(manifest)
    if kind == "directory":
        os.mkdir(manifest)
    elif kind == "fifo":
        os.mkfifo(manifest)
    else:
        os.symlink(os.path.join(store, "nowhere"), manifest)
    report = check_store(store)
    assert [(f.file, f.damage) for f in report.findings if f.damage] == [("MANIFEST", True)]
    code, out, _ = run(capsys, "check", store)
    assert code == EXIT_NEGATIVE and "DAMAGE: MANIFEST: cannot be read" in out


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/null", "dangling link", "link to a file", "directory"])
def test_a_temporary_name_that_is_no_file_of_the_stores_is_damage_and_never_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Was, for a MANIFEST.tmp that is no regular file (every open writes that name before it sweeps leftovers):
    a FIFO hung the open forever; a link to /dev/null failed it with "[Errno 22] Invalid argument", naming no
    file (an fsync's error names none); a dangling link made the open create the file it points to, outside the
    store; and `check` said "ok", the next open would delete it.  Now the open refuses to write through any of
    them, naming the file, writes nothing elsewhere, and `check` reports it as damage."""
    store = str(tmp_path / "store")
    build(store, 50)
    scanned = run(capsys, "scan", store)
    leftover, elsewhere = os.path.join(store, "MANIFEST.tmp"), str(tmp_path / "elsewhere")
    if kind == "link to a file":
        Path(elsewhere).write_bytes(b"another program's file")
    if kind == "fifo":
        os.mkfifo(leftover)
    elif kind == "directory":
        os.mkdir(leftover)
    else:
        os.symlink("/dev/null" if kind == "link to /dev/null" else elsewhere, leftover)
    outcome: list[BaseException | None] = []

    def open_store() -> None:
        try:
            minilsm.DB(store).close()
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    opener = threading.Thread(target=open_store, daemon=True)
    opener.start()
    opener.join(20)
    assert outcome, "the open hung"
    assert isinstance(outcome[0], minilsm.StoreIOError) and repr(leftover) in str(outcome[0]), outcome
    if kind == "link to a file":
        assert Path(elsewhere).read_bytes() == b"another program's file"  # not truncated through the link
    else:
        assert not os.path.exists(elsewhere)
    code, out, _ = run(capsys, "check", store)
    assert code == EXIT_NEGATIVE and "DAMAGE: MANIFEST.tmp: not a regular file" in out, out
    (os.rmdir if kind == "directory" else os.remove)(leftover)
    assert run(capsys, "check", store)[0] == EXIT_OK
    assert run(capsys, "scan", store) == scanned


def test_an_error_of_a_call_on_an_open_file_names_the_file(tmp_path: Path) -> None:
    """Was: `os.write`, `os.fsync` and `os.pread` take a descriptor, and their errors name no file, so a
    StoreIOError quoting one (an EIO on a flush, say) could not say which file failed."""
    from minilsm.fs import DEFAULT_FS

    path = str(tmp_path / "f")
    writable = DEFAULT_FS.open_writable(path)
    writable.append(b"x")
    readable = DEFAULT_FS.open_random(path)
    for f in (writable, readable):
        os.close(f._fd)  # type: ignore[attr-defined]  # every call on it now fails, EBADF
    with pytest.raises(OSError) as e:
        writable.sync()
    assert e.value.errno == errno.EBADF and e.value.filename == path
    with pytest.raises(OSError) as e:
        readable.pread(0, 1)
    assert e.value.errno == errno.EBADF and e.value.filename == path
    writable._fd = readable._fd = -1  # type: ignore[attr-defined]  # closed already: their finalizers skip it


def test_a_sync_with_nothing_to_write_names_the_file_its_fsync_failed_on(tmp_path: Path) -> None:
    """The fsync of a log or table whose appends were all written out already (a flush before the sync): its
    error, too, names the file (the test above fails in the write that precedes it)."""
    from minilsm.fs import DEFAULT_FS

    path = str(tmp_path / "f")
    writable = DEFAULT_FS.open_writable(path)
    writable.append(b"x")
    writable.flush()
    os.close(writable._fd)  # type: ignore[attr-defined]  # the fsync now fails, EBADF
    with pytest.raises(OSError) as e:
        writable.sync()
    assert e.value.errno == errno.EBADF and e.value.filename == path
    writable._fd = -1  # type: ignore[attr-defined]  # closed already: its finalizer skips it


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_file_the_store_reads_that_is_no_regular_file_is_refused_with_its_descriptor_closed(tmp_path: Path) -> None:
    """A directory or a FIFO where the store reads a file opens (O_NONBLOCK) before its type is seen: the refusal
    closes that descriptor at once, not when the error that holds the frame is dropped (a store that reports
    many such files, or a caller that keeps the error, must not run out of descriptors)."""
    from minilsm.fs import DEFAULT_FS

    fifo = str(tmp_path / "000007.sst")
    os.mkfifo(fifo)
    before = _open_descriptors()
    for path, read in ((str(tmp_path), DEFAULT_FS.open_random), (fifo, DEFAULT_FS.open_mapped)):
        with pytest.raises(OSError) as e:
            read(path)
        assert e.value.filename == path
        assert _open_descriptors() == before, f"the refused {path}'s descriptor is still open"
    with pytest.raises(OSError) as e:
        DEFAULT_FS.read_file(fifo)
    assert _open_descriptors() == before


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_file_the_store_appends_to_or_writes_anew_that_is_a_device_is_refused_naming_it(tmp_path: Path) -> None:
    """The store appends to its MANIFEST by its name, following a symlink there (a store may keep it elsewhere),
    and must never append its edits to /dev/null through one; a device found by the name of a file written anew
    (not a link: O_NOFOLLOW refuses those) is refused too.  Each error names the file, and no descriptor stays
    open while the caller holds the error."""
    from minilsm.fs import DEFAULT_FS

    link = str(tmp_path / "MANIFEST")
    os.symlink(os.devnull, link)
    before = _open_descriptors()
    with pytest.raises(OSError) as e:
        DEFAULT_FS.open_appendable(link)
    assert e.value.filename == link and "not a regular file" in str(e.value)
    assert _open_descriptors() == before, "the refused file's descriptor is still open"
    device = str(tmp_path / "MANIFEST.tmp")
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.stat(os.devnull).st_rdev)
    except OSError:
        return  # no right to make a device here (CAP_MKNOD): the link above is the case left to test
    with pytest.raises(OSError) as e:
        DEFAULT_FS.open_writable(device)
    assert e.value.filename == device and "not a regular file" in str(e.value)
    assert _open_descriptors() == before, "the refused file's descriptor is still open"


def test_tables_and_dump_clip_keys_at_the_size_limit(capsys: pytest.CaptureFixture[str]) -> None:
    # A column is as wide as its widest cell: one 64 KiB key (128 Ki characters in hex) pushed every row's
    # later columns past the screen, in a 787 KB `tables` for three tables.  --json keeps the keys whole.
    big = b"\xff" * MAX_KEY_SIZE
    with fast_tmp_dir() as d:
        s = os.path.join(d, "s")
        with minilsm.DB(s, background=False) as db:
            db.put(b"a", b"1")
            db.put(big, b"2")
            db.flush()
            db.put(b"b", b"3")
            db.flush()
        table = os.path.join(s, tables_of(s)[0])
        for argv in (("tables", s), ("dump", table, "--entries")):
            code, out, _ = run(capsys, *argv)
            assert code == EXIT_OK and max(map(len, out.splitlines())) < 300, argv
        assert "0x" + big.hex() in {t["largest"] for t in json.loads(run(capsys, "tables", s, "--json")[1])}
        entries = json.loads(run(capsys, "dump", table, "--entries", "--json")[1])["entries"]
        assert "0x" + big.hex() in {e["key"] for e in entries}


def test_manifest_shows_the_snapshot_and_each_edit(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    from minilsm.manifest import manifest_records

    # build() closed the store; its next open started a new manifest, so make edits to show.
    with minilsm.DB(store, **small_options()) as db:
        for i in range(300):
            db.put(key(2 * i + 1), b"odd %d" % i)
    data = Path(store, "MANIFEST").read_bytes()
    records, torn = manifest_records(data, "MANIFEST")
    assert torn == 0 and len(records) > 3
    code, out, _ = run(capsys, "manifest", store)
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0] == f"format 2: a snapshot and {len(records) - 1} edits"
    assert lines[1].startswith("snapshot: next file ")
    assert sum(line.startswith("edit ") for line in lines) == len(records) - 1
    added = [t for r in records[1:] for _, t in r["added"]]
    removed = [n for r in records[1:] for _, n in r["removed"]]
    assert added and removed
    assert sum(line.startswith("  + L") for line in lines) == len(added)
    assert sum(line.startswith("  - L") for line in lines) == len(removed)
    assert all(f"{t['number']:06d}.sst" in out for t in added)
    assert all("key" in line for line in lines if line.startswith("  + L"))  # keys shown as text
    code, out, _ = run(capsys, "manifest", store, "--json")
    assert code == EXIT_OK and json.loads(out) == {"records": records, "torn_bytes": 0}
    # A torn last record is shown; damage elsewhere is an error naming the file, as at an open.
    last = 16 + len(json.dumps(records[-1], separators=(",", ":")))
    Path(store, "MANIFEST").write_bytes(data + data[-last:][:30])  # the last record again, cut short
    code, out, _ = run(capsys, "manifest", store)
    assert code == EXIT_OK and out.splitlines()[0].endswith("then a torn record of 30 bytes")
    Path(store, "MANIFEST").write_bytes(data[:20] + bytes([data[20] ^ 1]) + data[21:])
    code, _, err = run(capsys, "manifest", store)
    assert code == EXIT_ERROR and "MANIFEST" in err
    code, _, err = run(capsys, "manifest", os.path.join(store, "nowhere"))
    assert code == EXIT_ERROR and "nowhere" in err
