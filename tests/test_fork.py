"""A process forked while a store is open: the store stays the parent's, and nothing the child does harms it.

Each scenario runs in a script of its own (a fresh interpreter forks, not the test runner), and the parent
process of that script checks the store afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import minilsm

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(minilsm.__file__)))


def run_script(body: str) -> str:
    """Run `body` in a new interpreter that imports this checkout's minilsm; its stdout, after it succeeded."""
    script = f"import sys\nsys.path[:0] = [{_PACKAGE_ROOT!r}]\n" + textwrap.dedent(body)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


@pytest.mark.parametrize("child_ends", ["close", "exit"])
@pytest.mark.parametrize("background", [True, False])
def test_a_forked_child_that_closes_or_drops_its_copy_leaves_the_parent_holding_the_lock(
    db_path: str, child_ends: str, background: bool
) -> None:
    """Was: the child's copy of the directory's flock unlocked the parent's (the two share it), so another
    process opened the store under the parent, and the parent's acknowledged writes after that were lost."""
    out = run_script(f"""
        import os, subprocess, minilsm
        db = minilsm.DB({db_path!r}, background={background})
        db.put(b"a", b"1")
        pid = os.fork()
        if pid == 0:
            if {child_ends == "close"}:
                db.close()
            sys.exit(0)  # an ordinary exit: every object of the child is dropped
        assert os.waitpid(pid, 0)[1] == 0
        probe = "import minilsm\\ntry:\\n    minilsm.DB({db_path!r})\\nexcept minilsm.LockError:\\n    print('locked')"
        print(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip())
        db.put(b"c", b"3")
        db.close()
        with minilsm.DB({db_path!r}) as db:
            print(list(db.iterator()))
    """)
    assert out.splitlines() == ["locked", "[(b'a', b'1'), (b'c', b'3')]"]


def test_a_forked_child_that_outlives_a_crashed_parent_keeps_no_checkpoint_s_lock(db_path: str) -> None:
    """Was: a child forked while a checkpoint held its staging directory's lock kept that lock (flock belongs to
    the open file description, which the child's inherited descriptor shares) after the parent crashed, so every
    checkpoint to that target was refused until the child exited.  (The store's own lock the child's closed
    store lets go of already.)"""
    target = db_path + "-copy"
    crash = textwrap.dedent(f"""
        import os, signal, sys, threading
        sys.path[:0] = [{_PACKAGE_ROOT!r}]
        import minilsm
        from minilsm.fs import FileSystem

        linking = threading.Event()

        class HoldsTheCheckpoint(FileSystem):
            def link(self, src, dst):
                linking.set()
                threading.Event().wait()  # the staging directory's lock held until the crash

        db = minilsm.DB({db_path!r}, fs=HoldsTheCheckpoint(), background=False)
        for i in range(100):
            db.put(b"k%03d" % i, b"v")
        db.flush()
        threading.Thread(target=db.checkpoint, args=({target!r},), daemon=True).start()
        linking.wait()
        if os.fork() == 0:
            sys.stdin.read()  # lives on until the test lets it go
            os._exit(0)
        os.kill(os.getpid(), signal.SIGKILL)  # the parent crashes mid-checkpoint
    """)
    with subprocess.Popen([sys.executable, "-W", "ignore", "-c", crash], stdin=subprocess.PIPE) as parent:
        assert parent.stdin is not None
        try:
            assert parent.wait(60) == -signal.SIGKILL
            with minilsm.DB(db_path) as db:  # while the child lives on
                db.checkpoint(target)
            with minilsm.DB(target, create_if_missing=False) as copy:
                assert dict(copy.iterator()) == {b"k%03d" % i: b"v" for i in range(100)}
        finally:
            parent.stdin.close()  # the child's stdin too: it exits


def test_in_a_forked_child_the_store_is_closed_and_its_sweep_deletes_nothing_of_the_parent(db_path: str) -> None:
    """Was: an iterator closed in the child swept the directory by the child's stale version and deleted the
    tables the parent had written since the fork, so the store would not open again."""
    out = run_script(f"""
        import os, time, minilsm
        db = minilsm.DB({db_path!r}, background=False, memtable_size=4096)
        for i in range(2000):
            db.put(b"k%05d" % i, b"v" * 50)
        db.flush()
        it = db.iterator()
        next(it)
        db.compact_range()  # the iterator's version is now superseded: closing it sweeps obsolete files
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.read(r, 1)  # until the parent has written new tables
            said = []
            for call in (lambda: db.get(b"k00001"), lambda: db.put(b"x", b"y"), lambda: next(it), db.snapshot):
                try:
                    call()
                    said.append("no error")
                except minilsm.ClosedError as e:
                    said.append("forked" if "forked" in str(e) else str(e))
            it.close()
            db.close()
            print(" ".join(said), flush=True)
            os._exit(0)
        for i in range(2000, 4000):
            db.put(b"k%05d" % i, b"w" * 50)
        db.flush()
        os.write(w, b"x")
        assert os.waitpid(pid, 0)[1] == 0
        it.close()
        db.close()
        with minilsm.DB({db_path!r}) as db:
            print(sum(1 for _ in db.iterator()), db.get(b"k00001"), db.get(b"k03999"))
    """)
    assert out.splitlines() == ["forked forked forked forked", "4000 " + repr(b"v" * 50) + " " + repr(b"w" * 50)]


@pytest.mark.parametrize("lock", ["_mutex", "_item_deletes"])
def test_a_forked_child_closes_at_once_though_a_parent_thread_held_the_store_mutex_at_the_fork(
    db_path: str, lock: str
) -> None:
    """Was: the child inherited the mutex locked by a thread it does not have, and its close() waited forever.
    The lock of ``del db[key]`` too: the child's ``del``, the store's or a view's, raises ClosedError at once."""
    out = run_script(f"""
        import os, signal, threading, minilsm
        db = minilsm.DB({db_path!r})
        db.put(b"a", b"1")
        view = db.prefixed_db(b"")
        held, release = threading.Event(), threading.Event()
        def hold():
            with db.{lock}:
                held.set()
                release.wait()
        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)  # a hang ends the child with SIGALRM, which the parent reports
            for store in (db, view):
                try:
                    del store[b"a"]
                except minilsm.ClosedError:
                    pass
                else:
                    os._exit(3)
            db.close()
            os._exit(0)
        release.set()
        t.join()
        status = os.waitpid(pid, 0)[1]
        print("child exit status", status)
        print(db.get(b"a"))
        db.close()
    """)
    assert out.splitlines() == ["child exit status 0", "b'1'"]


def test_a_forked_childs_copy_of_a_file_being_written_writes_nothing_when_it_closes(tmp_path: Path) -> None:
    """What waits to be written (a table's unflushed blocks, a log record mid-append in another thread) is the
    parent's: the child writing it too would put it in the file twice."""
    path = os.path.join(tmp_path, "f")
    out = run_script(f"""
        import os
        from minilsm.fs import FileSystem
        f = FileSystem().open_writable({path!r})
        f.append(b"once")  # waits in the object until flushed
        pid = os.fork()
        if pid == 0:
            f.close()
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        f.close()
        print(open({path!r}, "rb").read())
    """)
    assert out.strip() == "b'once'"


def test_in_a_forked_child_the_parents_store_is_held_by_another_process(db_path: str) -> None:
    """The child's copy of the parent's lock stays the parent's (it closes without unlocking), so an open of the
    store in the child is refused as held by another process, not as open in this one; once the parent closes
    it, the child's own open makes it this process's."""
    out = run_script(f"""
        import os, minilsm
        def refusal():
            try:
                minilsm.DB({db_path!r}).close()
            except minilsm.LockError as e:
                return str(e)
            return "opened"
        db = minilsm.DB({db_path!r})
        to_child, to_parent = os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:
            print("child:", refusal(), flush=True)
            os.write(to_parent[1], b"x")
            os.read(to_child[0], 1)  # until the parent has closed the store
            with minilsm.DB({db_path!r}):
                print("child:", refusal(), flush=True)
            os._exit(0)
        os.read(to_parent[0], 1)
        print("parent:", refusal(), flush=True)
        db.close()
        os.write(to_child[1], b"x")
        assert os.waitpid(pid, 0)[1] == 0
        print("parent:", refusal())
    """)
    assert out.splitlines() == [
        f"child: {db_path} is already open (its LOCK is held by another process)",
        f"parent: {db_path} is already open in this process",
        f"child: {db_path} is already open in this process",
        "parent: opened",
    ]
