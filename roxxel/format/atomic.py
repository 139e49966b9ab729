"""Atomic file creation: write under a temporary name in the same directory, fsync, rename.

A reader therefore sees either the old file, or the complete new one, never a prefix:
``os.replace`` is atomic on POSIX file systems (and on GCS FUSE, where it is a
copy-then-delete of a finished object, a partial object never carries the final name).
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import IO, Iterator

TMP_MARK = ".tmp-"


def temp_name(path: str) -> str:
    """Hidden sibling name for ``path`` used while it is being written (``.name.tmp-PID``)."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}{TMP_MARK}{os.getpid()}")


def is_temp_name(name: str) -> bool:
    """True for names produced by :func:`temp_name` (used to clean up after a killed writer)."""
    return name.startswith(".") and TMP_MARK in name


def fsync_dir(directory: str) -> None:
    """Make a rename durable by syncing its directory (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems (FUSE, tmpfs variants) do not support fsync on directories
    finally:
        os.close(fd)


def commit(tmp_path: str, final_path: str) -> None:
    """Rename a finished temporary file to its final name and sync the directory."""
    os.replace(tmp_path, final_path)
    fsync_dir(os.path.dirname(final_path))


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "wb") -> Iterator[IO]:
    """Open ``path`` for writing atomically: the final name appears only if the block succeeds.

    Raises whatever the block raises; the temporary file is removed in that case.
    """
    tmp = temp_name(path)
    f = open(tmp, mode)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        commit(tmp, path)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def filesystem_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the file system that holds ``path`` (``"ext4"``, ``"tmpfs"``, ``"fuse.gcsfuse"``, ...).

    Read from the Linux kernel's ``/proc/self/mountinfo`` (field layout from the kernel's
    proc(5): mount point 5th, file system type first after the ``-``): the longest mount
    point above the path's real path, the last mounted where two are equal. None where that
    file cannot be read (another OS) or no mount holds the path.
    """
    found = _mount_entry(path, mountinfo)
    return found[1] if found else None


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> tuple[str, str | None]:
    """``(mount point, file system type)`` of the file system that holds ``path``, for messages.

    From ``/proc/self/mountinfo`` as :func:`filesystem_type`; where that cannot be read, the
    mount point is found by walking up the real path with ``os.path.ismount`` (type None).
    """
    found = _mount_entry(path, mountinfo)
    if found:
        return found
    here = os.path.realpath(path)
    while not os.path.ismount(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    return here, None


def _mount_entry(path: str, mountinfo: str) -> tuple[str, str] | None:
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    found = None
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 7 or "-" not in fields[6:]:
            continue
        mount = _unescape_octal(fields[4])
        inside = real == mount or real.startswith(mount if mount.endswith("/") else mount + "/")
        if inside and (found is None or len(mount) >= len(found[0])):
            found = mount, fields[fields.index("-", 6) + 1]
    return found


def _unescape_octal(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are written as ``\\ooo``."""
    if "\\" not in field:
        return field
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def is_fuse(path: str) -> bool:
    """Whether ``path`` is on a FUSE file system other than a local block device's
    (``fuse``, ``fuse.gcsfuse``, ``fuse.s3fs``...; not ``fuseblk``). GCS FUSE, in its default
    (staged) write mode, uploads the whole file written so far on every ``fsync``."""
    kind = filesystem_type(path)
    return kind is not None and (kind == "fuse" or kind.startswith("fuse."))
