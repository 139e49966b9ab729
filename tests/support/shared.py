"""What the pytest-xdist workers of one test run make once and share."""

from __future__ import annotations

import contextlib
import fcntl
import os


@contextlib.contextmanager
def made_once(tmp_path_factory, name: str):
    """A path shared by every pytest-xdist worker of the run (the directory above their own
    temporary roots), held under a lock: the first worker makes what it names while the
    others wait, then find it made."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # pytest-xdist: each worker's basetemp is a folder of the run's
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on an error
        yield shared / name
