"""What both shard formats share: a lazily opened memory map, ``pread`` copies (one range or many), and page release."""

from __future__ import annotations

import mmap
import os
import stat
from typing import BinaryIO

import numpy as np

from roxxel.format.blocks import BlockChecks
from roxxel.format.errors import RoxxelFormatError, TruncatedShardError


def open_regular(path: str) -> BinaryIO:
    """Open ``path`` for binary reading, refusing anything but a regular file.

    The open does not block (a FIFO or device would wait for a writer forever); the type
    is checked on the opened descriptor, so a file swapped in between cannot slip through.

    Raises:
        FileNotFoundError: no such file.
        RoxxelFormatError: a directory, FIFO, socket or device.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "directory" if stat.S_ISDIR(mode) else "FIFO" if stat.S_ISFIFO(mode) else "socket" \
                if stat.S_ISSOCK(mode) else "device"
            raise RoxxelFormatError(f"{path}: is a {kind}, not a regular file; a shard must be a regular file", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
    _blocks: BlockChecks | None = None  # set when the shard stores block checksums (format 1.1)
    check_blocks: bool = True  # check each block on its first read (off only for benchmarks)

    @property
    def has_block_checksums(self) -> bool:
        """True when reads are checked against stored per-block checksums (format 1.1 shards)."""
        return self._blocks is not None

    def _descriptor(self) -> int:
        if self._fd is None:
            with open_regular(self.path) as f:
                self._fd = os.dup(f.fileno())
        return self._fd

    def check_range(self, start: int, stop: int) -> None:
        """Check the blocks holding tokens ``[start, stop)`` not yet checked in this process.

        Raises:
            BlockChecksumError: a block is damaged (names the shard, the block and the fix).
        """
        if self._blocks is not None and self.check_blocks:
            size = self.dtype.itemsize
            self._blocks.check(self._descriptor(), start * size, stop * size)

    def check_pieces(self, starts: np.ndarray, counts: np.ndarray) -> None:
        """:meth:`check_range` for many token ranges ``[starts[k], starts[k] + counts[k])`` at once (int64 arrays).

        Raises:
            BlockChecksumError: a block is damaged.
        """
        if self._blocks is not None and self.check_blocks:
            size = self.dtype.itemsize
            self._blocks.check_pieces(self._descriptor(), starts * size, (starts + counts) * size)

    def read_pieces(self, out: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> None:
        """Copy token ranges ``[starts[k], starts[k] + counts[k])`` back to back into ``out`` (1-D, C-contiguous, this dtype).

        The blocks they touch are checked first in one vectorised lookup; then one ``pread``
        per range, nothing mapped (a page fault per newly touched page makes gathering out of
        the map slower on large datasets).

        Raises:
            BlockChecksumError: a block is damaged.
            TruncatedShardError: the file ended early (it shrank after opening).
        """
        self.check_pieces(starts, counts)
        fd = self._descriptor()
        size = self.dtype.itemsize
        view = out.view(np.uint8).data  # as bytes: bfloat16 has no buffer format
        base = self._data_offset
        pos = 0
        for a, c in zip(starts.tolist(), counts.tolist()):
            nbytes = c * size
            if os.preadv(fd, [view[pos:pos + nbytes]], base + a * size) != nbytes:  # short read: retry or raise
                self.pread_into(out[pos // size:pos // size + c], a)
            pos += nbytes

    def _map(self) -> mmap.mmap:
        if self._mmap is None:
            self._mmap = mmap.mmap(self._descriptor(), 0, access=mmap.ACCESS_READ)  # the map holds its own dup
        return self._mmap

    def pread_into(self, out: np.ndarray, start: int) -> None:
        """Copy tokens ``[start, start + len(out))`` into ``out`` (1-D, C-contiguous, this shard's dtype) with ``pread``.

        Unlike slicing the memory map, a read maps no pages into the process, so copying
        through a whole dataset leaves the RSS where it was.

        Raises:
            TruncatedShardError: the file ended early (it shrank after opening).
        """
        fd = self._descriptor()
        whole = buf = out.view(np.uint8).data  # as bytes: bfloat16 has no buffer format
        offset = self._data_offset + start * self.dtype.itemsize
        while len(buf):
            n = os.preadv(fd, [buf], offset)
            if n <= 0:
                raise TruncatedShardError(f"{self.path}: file ended while reading (was it truncated after opening?)", self.path)
            buf, offset = buf[n:], offset + n
        if self._blocks is not None and self.check_blocks:
            first = start * self.dtype.itemsize
            self._blocks.check(fd, first, first + len(whole), whole)

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

    def __del__(self, _close=os.close):
        # A dropped shard must not keep its descriptor open (the mmap closes itself).
        # os.close is bound at definition: at interpreter shutdown the os module's
        # attributes may already be None when the last reference goes.
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                _close(fd)
            except OSError:
                pass
