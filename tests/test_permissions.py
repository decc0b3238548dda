"""A store this user may read but not write: another user's store, or one on a read-only mount.

Run as an unprivileged user (``setpriv`` to uid 65534, nobody), since root passes every permission check; skipped
where the tests do not run as root, where ``setpriv`` is missing, or where that user cannot run this Python with
this package.  Found by the permissions audit: `minilsm check`, which only reads, refused such a store ("taking
its LOCK: Permission denied", as it opened the LOCK for writing before it locked it), and an open's refusal said
which file it could not write but not that an open needs write access, nor what can read the store instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

import minilsm

NOBODY = 65534
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(minilsm.__file__)))


def _interpreters() -> list[str]:
    """This Python, then the system's of the same version: a virtual environment's interpreter may lie under a
    directory the unprivileged user cannot enter (/root, as in CI), and its packages are found by path anyway."""
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    return [sys.executable] + ([system] if os.path.exists(system) else [])


def _search_path() -> str:
    """This package's root and the directories that hold its dependencies, for an interpreter outside the venv."""
    import sortedcontainers
    import xxhash

    deps = {os.path.dirname(os.path.dirname(os.path.abspath(m.__file__ or ""))) for m in (sortedcontainers, xxhash)}
    return os.pathsep.join([ROOT, *sorted(deps)])


_python: list[str] = []
"""The interpreter the unprivileged user can run, once the `nobody` fixture has found it."""


def _as_nobody(code: str, python: str | None = None) -> subprocess.CompletedProcess[str]:
    setpriv = shutil.which("setpriv")
    assert setpriv is not None
    return subprocess.run(
        [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python or _python[0], "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=_search_path()),
        cwd="/",
    )


@pytest.fixture(scope="module")
def nobody() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to run a store as an unprivileged user")
    errors = []
    for python in _interpreters():
        probe = _as_nobody("import minilsm, sortedcontainers, xxhash; print(minilsm.__file__)", python)
        if probe.returncode == 0 and probe.stdout.startswith(ROOT):
            _python[:] = [python]
            return
        errors.append(f"{python}: {probe.stderr[-200:]}")
    pytest.skip(f"the unprivileged user cannot run a Python with this package: {errors}")


@pytest.fixture
def read_only_store(nobody: None) -> Iterator[str]:
    """A closed store of root's, which nobody may read (directory 0555, files 0644) but not write."""
    tmp = tempfile.mkdtemp(prefix="minilsm-perm-", dir="/tmp")
    try:
        os.chmod(tmp, 0o755)
        path = f"{tmp}/db"
        with minilsm.DB(path, memtable_size=4096, background=False) as db:
            for i in range(300):
                db.put(b"k%03d" % i, b"v%03d" % i * 10)
        for name in os.listdir(path):
            os.chmod(f"{path}/{name}", 0o644)
        os.chmod(path, 0o555)
        yield path
    finally:
        shutil.rmtree(tmp)


_PROGRAM = """
import json, minilsm
path = {path!r}
out = {{}}
try:
    report = minilsm.check_store(path)
    out["check"] = [report.ok, str(report)]
except minilsm.Error as e:
    out["check"] = [type(e).__name__, str(e)]
try:
    minilsm.DB(path).close()
    out["open"] = "opened"
except minilsm.Error as e:
    out["open"] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""


def test_a_store_this_user_cannot_write_is_checked_and_its_open_refused_saying_why(read_only_store: str) -> None:
    before = sorted(os.listdir(read_only_store))
    run = _as_nobody(_PROGRAM.format(path=read_only_store))
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    ok, text = out["check"]
    assert ok is True, text  # was: StoreIOError "... taking its LOCK: [Errno 13] Permission denied"
    kind, text = out["open"]
    assert kind == "StoreIOError"
    assert "Permission denied" in text and f"{read_only_store}/" in text  # the file it could not write
    assert "needs read and write access" in text and "minilsm check" in text
    assert sorted(os.listdir(read_only_store)) == before  # nothing written, nothing removed
    with minilsm.DB(read_only_store) as db:  # root still opens it whole
        assert db.get(b"k007") == b"v007" * 10
