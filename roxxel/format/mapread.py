"""Rows read straight out of shards' memory maps, guarded: the fast path of the streamer's reads.

The native part (``_mapread.c``, built at install when a C compiler is there) gathers rows from
the map with the cast to the batch's dtype on the way, and computes the CRC-32C of blocks read
for the first time, with the GIL released. Compared with ``pread`` into a staging buffer and a
cast, it saves the kernel's copy out of the page cache and a pass over the batch
(``bench/stream.py``).

A read through a map of a file cut short after mapping raises SIGBUS (as do an I/O error and a
stale NFS handle under a map). The native reads catch it (see ``_mapread.c``) and say which row
or block faulted; :class:`MapRows` then reads that step again with ``pread``, which names the
problem in one line (:class:`~roxxel.format.errors.TruncatedShardError`,
:class:`~roxxel.format.errors.ShardReadError`). Without the native part (no compiler at
install, or ``ROXXEL_MAPREAD=0``), :data:`AVAILABLE` is False and the streamer reads with
``pread`` alone.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

try:
    if os.environ.get("ROXXEL_MAPREAD", "1") == "0":
        raise ImportError("turned off by ROXXEL_MAPREAD=0")
    from roxxel.format import _mapread  # type: ignore[attr-defined]
except ImportError as e:  # built without a C compiler, or turned off
    _mapread = None
    WHY_NOT: str | None = f"the native map reader is not available ({e}): rows are read with pread (slower)"
else:
    WHY_NOT = None

# The struct type codes the native gather takes: stored dtype -> code, and the batch dtypes it casts to.
_SOURCES = {np.dtype("<u2"): "H", np.dtype("<u4"): "I", np.dtype("<i4"): "i"}
_TARGETS = {np.dtype(np.int32): "i", np.dtype(np.int64): "q", np.dtype(np.uint16): "H", np.dtype(np.uint32): "I"}
_CAST = {("H", "i"), ("H", "q"), ("H", "H"), ("H", "I"), ("I", "i"), ("I", "q"), ("I", "I"), ("i", "i"), ("i", "q")}
_crc_ready: bool | None = None  # None: not looked for yet


def can_gather(stored: np.dtype, out: np.dtype) -> bool:
    """Whether rows stored as ``stored`` can be gathered into a batch of ``out`` natively."""
    if _mapread is None:
        return False
    pair = (_SOURCES.get(np.dtype(stored)), _TARGETS.get(np.dtype(out)))
    return pair in _CAST


def crc32c_ready() -> bool:
    """Whether the native reader can compute CRC-32C: it takes ``crc32c_extend`` from the copy of
    Google's crc32c library that the ``google_crc32c`` package loaded (its wheel bundles it)."""
    global _crc_ready
    if _crc_ready is None:
        _crc_ready = False
        if _mapread is not None:
            import google_crc32c  # noqa: F401  (loads the library)

            with open("/proc/self/maps") as f:
                paths = {line.split()[-1] for line in f if "libcrc32c" in line and "/" in line}
            for path in sorted(paths):
                try:
                    _mapread.set_crc32c(path)
                except OSError as e:
                    log.debug("%s", e)
                    continue
                _crc_ready = True
                break
    return _crc_ready


class CannotMap(Exception):
    """A shard's file cannot be memory-mapped (e.g. a FUSE mount with direct I/O: ENODEV)."""


def map_file(fd: int, length: int) -> Any:
    """A read-only shared map of the first ``length`` bytes of the file open as ``fd`` that holds no
    descriptor of its own (unlike :class:`mmap.mmap`); unmapped once the returned object is freed.

    Raises:
        CannotMap: the file system refused the map.
    """
    assert _mapread is not None
    try:
        return _mapread.map_file(fd, length)
    except (OSError, ValueError) as e:
        raise CannotMap(str(e)) from e


def mapping_address(mapping: Any) -> int:
    """The address of the first byte of a :func:`map_file` map."""
    assert _mapread is not None
    return _mapread.mapping_address(mapping)


def release(mapping: Any) -> None:
    """Drop a :func:`map_file` map's pages from this process (``MADV_DONTNEED``; they stay in the page cache)."""
    assert _mapread is not None
    _mapread.release(mapping)


def progress(done: np.ndarray) -> int:
    """``done[0]`` as the native :func:`crc32c` loop set it on another thread, read with acquire
    ordering, so that the checksums it counts are seen as written (weakly ordered CPUs too)."""
    assert _mapread is not None
    return _mapread.progress(done)


def file_pages_bytes() -> int:
    """Bytes of file pages this process has mapped and resident (``RssFile``+``RssShmem``: the third
    field of ``/proc/self/statm``, in pages)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[2]) * _PAGE


_PAGE = os.sysconf("SC_PAGE_SIZE")


def address(view: np.ndarray) -> int:
    """The address of ``view``'s first byte (natively where built: the numpy way builds a dict)."""
    if _address is not None:
        return _address(view)
    return int(view.__array_interface__["data"][0])


_address = getattr(_mapread, "address", None)  # (None: no native reader, or one built before it had address)


def gather(out: np.ndarray, sources: np.ndarray, stored: np.dtype) -> tuple[int | None, int | None]:
    """Copy ``out.shape[1]`` tokens of dtype ``stored`` from each address ``sources[r]`` (int64,
    C-contiguous) into ``out[r]`` (2-D, C-contiguous), cast to ``out.dtype`` (:func:`can_gather`
    must hold).

    Returns ``(None, the largest stored id copied)``, or ``(r, None)`` when row ``r``'s read
    raised SIGBUS (the file behind it was cut short, or its storage failed).
    """
    assert _mapread is not None
    codes = _CODES.get((stored, out.dtype))
    if codes is None:
        codes = _CODES[(stored, out.dtype)] = (_SOURCES[np.dtype(stored)], _TARGETS[np.dtype(out.dtype)])
    return _mapread.gather(out, sources, codes[0], codes[1], out.shape[1])


_CODES: dict[tuple[np.dtype, np.dtype], tuple[str, str]] = {}  # (stored, batch) dtypes -> gather's type codes


def crc32c(
    sources: np.ndarray, lengths: np.ndarray, out: np.ndarray | None = None, done: np.ndarray | None = None
) -> tuple[np.ndarray, int | None]:
    """The CRC-32C (uint32) of ``lengths[k]`` bytes at address ``sources[k]`` for each ``k``, into ``out``
    (a new array if None), and the index of the first range whose read raised SIGBUS (None: all
    read). ``done`` (int64, one element), if given, is set to ``k + 1`` once ``out[k]`` is, for
    another thread to follow. :func:`crc32c_ready` must hold.
    """
    assert _mapread is not None
    if out is None:
        out = np.empty(len(sources), np.uint32)
    sources, lengths = np.ascontiguousarray(sources, np.int64), np.ascontiguousarray(lengths, np.int64)
    faulted = _mapread.crc32c(out, sources, lengths) if done is None else _mapread.crc32c(out, sources, lengths, done)
    return out, faulted
