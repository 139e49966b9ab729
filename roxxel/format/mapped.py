"""What both shard formats share: a lazily opened memory map, ``pread`` copies, and page release."""

from __future__ import annotations

import mmap
import os

import numpy as np

from roxxel.format.errors import TruncatedShardError


class MappedFile:
    """Base of :class:`~roxxel.format.shard.Shard` and :class:`~roxxel.format.legacy.LegacyShard`.

    Subclasses set ``path``, ``dtype`` and ``_data_offset`` (byte offset of token 0), and
    list their cached views in ``_VIEWS`` so :meth:`close` can drop them.
    """

    _VIEWS: tuple[str, ...] = ()
    path: str
    dtype: np.dtype
    _data_offset: int
    _mmap: mmap.mmap | None = None
    _fd: int | None = None

    def _map(self) -> mmap.mmap:
        if self._mmap is None:
            with open(self.path, "rb") as f:
                self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._mmap

    def pread_into(self, out: np.ndarray, start: int) -> None:
        """Copy tokens ``[start, start + len(out))`` into ``out`` (1-D, C-contiguous, this shard's dtype) with ``pread``.

        Unlike slicing the memory map, a read maps no pages into the process, so copying
        through a whole dataset leaves the RSS where it was.

        Raises:
            TruncatedShardError: the file ended early (it shrank after opening).
        """
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        buf = out.data.cast("B")  # the array's own buffer (C-contiguous), as bytes
        offset = self._data_offset + start * self.dtype.itemsize
        while len(buf):
            n = os.preadv(self._fd, [buf], offset)
            if n <= 0:
                raise TruncatedShardError(f"{self.path}: file ended while reading (was it truncated after opening?)", self.path)
            buf, offset = buf[n:], offset + n

    def release(self) -> None:
        """Drop this process's mapped pages (they stay in the page cache; views stay valid).

        Reading through a memory map counts the touched pages in the process RSS; calling
        this after a pass keeps host RAM flat whatever the dataset size.
        """
        if self._mmap is not None:
            self._mmap.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        """Close the file and forget the mapping; it is unmapped once no view of it is alive."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for name in self._VIEWS:
            setattr(self, name, None)
        self._mmap = None
