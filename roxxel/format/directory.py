"""A dataset directory while a writer owns it: the lock that keeps one writer per dataset, the marker
that says a pack or append has not finished (and which shards it was committing), and the time
stamps they record.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import time

from roxxel.format.atomic import atomic_write
from roxxel.format.errors import DatasetLockedError


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _make_directory(directory: str) -> None:
    """``os.makedirs(directory, exist_ok=True)``, failing in one line that names the directory
    (the bare errno text named only a path)."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        clear = type(err)(
            f"cannot create the dataset directory {directory!r}: "
            f"{err.strerror or err}; choose a directory you can write to"
        )
        clear.errno = err.errno
        raise clear from None


def _write_marker(path: str, pending: list[str]) -> None:
    with atomic_write(path, "w") as f:
        json.dump({"pid": os.getpid(), "started": _now(), "pending_shards": pending}, f)


def pending_shards(marker_path: str) -> list[str]:
    """Shard names an unfinished append was committing (empty for a pack's marker or an old marker)."""
    try:
        with open(marker_path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return []
    names = raw.get("pending_shards") if isinstance(raw, dict) else None
    return [n for n in names if isinstance(n, str) and "/" not in n] if isinstance(names, list) else []


def _lock(path: str, timeout: float) -> int:
    """Take an exclusive ``flock`` on ``path`` (created if needed); returns its descriptor.

    The holder unlinks the file before releasing it (so no lock file is left behind); a
    waiter that then wins the lock on the unlinked file sees that its inode is no longer
    the one at ``path`` and starts over.

    Raises:
        DatasetLockedError: still held by another writer after ``timeout`` seconds (names its pid).
    """
    deadline = time.monotonic() + timeout
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
                os.close(fd)
                raise DatasetLockedError(
                    f"{os.path.dirname(path)}: another pack or append into this dataset is running ({holder}); "
                    "wait for it to finish and run this one again (roxxel pack --wait-lock SECONDS waits)",
                    path,
                ) from None
            os.close(fd)
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            continue
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # locked a file its holder had just removed: take the new one
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {_now()}\n".encode(), 0)
    return fd


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
