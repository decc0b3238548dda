"""bench.mypyc_build's arguments: what it would compile, and where it refuses to write.  Nothing is compiled here."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import mypyc_build


def test_dry_run_names_every_module_but_the_interpreted_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "build"
    assert mypyc_build.main(["--out", str(out), "--interpreted", "minilsm.demo", "--dry-run"]) == 0
    command = capsys.readouterr().out.split()
    files = {f for f in command if f.endswith(".py")}
    expected = {m.replace(".", "/") + ".py" for m in mypyc_build.modules(mypyc_build.REPO)}
    skipped = {m.replace(".", "/") + ".py" for m in [*mypyc_build.INTERPRETED, "minilsm.demo"]}
    assert "minilsm/sstable/reader.py" in files and "minilsm/db.py" in files
    assert files == expected - skipped
    assert not out.exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    "argv",
    [
        ["--out", str(mypyc_build.REPO)],
        ["--out", str(mypyc_build.REPO / "bench" / "mypyc-out")],  # build products never land in the work tree
        ["--out", "{full}"],  # not empty
        ["--out", "{empty}", "--interpreted", "minilsm.nosuch"],
    ],
)
def test_refuses_bad_arguments_before_writing_anything(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("mine")
    argv = [a.format(full=tmp_path / "full", empty=tmp_path / "empty") for a in argv]
    with pytest.raises(SystemExit):
        mypyc_build.main(argv)
    assert (tmp_path / "full" / "keep").read_text() == "mine"
    assert not (tmp_path / "empty").exists()
    assert not (mypyc_build.REPO / "bench" / "mypyc-out").exists()
