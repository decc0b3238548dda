"""Removing a store: `destroy_store`, as plyvel's `destroy_db` and LevelDB's `DestroyDB`.

Only the store's own files go: its tables and logs, the manifest, the lock, the temporary files and scratch
directories a crash can leave.  Anything else in the directory (a file of the application's, the `lost/` of
a repair) stays, and so does the directory then; an empty one is removed.  The store must be closed: the
lock is taken first, so a store open in any process is refused and loses nothing.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from minilsm.check import closed_store, is_store_temp_file, is_table_or_log
from minilsm.db import store_path
from minilsm.manifest import LOCK_NAME, MANIFEST_NAME
from minilsm.options import Options
from minilsm.worker import is_scratch_name, remove_scratch


def destroy_store(path: str | os.PathLike[str], options: Options | None = None, **kwargs: Any) -> None:
    """Remove the store at `path` (see the module docstring).  A path that does not exist is fine: nothing to do.

    Raises `NotFoundError` if the directory holds no store (nothing is removed), `LockError` if the store is
    open, `ValueError` if `path` is empty (as `DB` does: not the working directory).  O(files).
    """
    fs = Options.make(options, **kwargs).fs
    path = store_path(path)
    if not fs.exists(path):
        return
    with closed_store(fs, path, "destroy") as names:
        for name in names:
            file = f"{path}/{name}"
            if is_scratch_name(name):
                remove_scratch(fs, file)
            # A directory by such a name is not the store's (the store opens with one there): it stays, as
            # anything else does, rather than fail the destroy with the store half removed.
            elif (name == MANIFEST_NAME or is_table_or_log(name) or is_store_temp_file(name)) and not fs.is_dir(file):
                fs.remove(file)
        fs.remove(f"{path}/{LOCK_NAME}")  # while held, as the last of the store's files
    with contextlib.suppress(OSError):  # not empty: foreign files stay, and so does their directory
        fs.remove_dir(path)
