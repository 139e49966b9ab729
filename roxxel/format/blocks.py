"""Per-block checksums of a shard's token data, checked the first time each block is read.

A format-1.1 shard stores one checksum per ``block_bytes`` bytes of its token data: CRC-32C
(Castagnoli, hardware-accelerated through ``google_crc32c``, several GB/s) for shards written
by this version, CRC-32 (``zlib``, ~1 GB/s) for the first 1.1 shards; the metadata's
``block_checksums.algorithm`` names which. A
reader checks a block before any of its tokens leave the shard, once per process: a map
of checked blocks (one byte per block, 1/65536 of the data at the default block size)
makes every later read of that block free. A block read in full is checked on the bytes
just copied; the streamer reads the rest of a block it reads in part in the same ``preadv``
(:meth:`BlockChecks.edges`, :meth:`BlockChecks.check_read`), other reads read such a block
whole once more (from the page cache) to check it.
"""

from __future__ import annotations

import itertools
import os
import zlib

import google_crc32c
import numpy as np

from roxxel.format import layout
from roxxel.format.errors import BlockChecksumError, TruncatedShardError


def _crc32(data: bytes | memoryview, crc: int = 0) -> int:
    return zlib.crc32(data, crc)


def _crc32c(data: bytes | memoryview, crc: int = 0) -> int:
    # Its C extension refuses a memoryview (it takes only buffers without a release hook), but
    # takes a numpy array over the same bytes: no copy (bytes(data) copied every block).
    return google_crc32c.extend(crc, np.frombuffer(data, np.uint8))


ALGORITHMS = {"crc32": _crc32, "crc32c": _crc32c}  # name in the metadata -> checksum(data, crc=0)
DEFAULT_ALGORITHM = "crc32c"


class BlockChecks:
    """The block checksums of one shard and which blocks this process has checked.

    Args:
        path: the shard (for messages).
        data_offset: byte offset of token 0 in the file.
        data_bytes: bytes of token data.
        block_bytes: bytes per block (the last block may be shorter).
        table_offset: byte offset of the uint32 checksum table in the file.
        algorithm: ``"crc32c"`` or ``"crc32"`` (a key of :data:`ALGORITHMS`).
    """

    def __init__(
        self,
        path: str,
        data_offset: int,
        data_bytes: int,
        block_bytes: int,
        table_offset: int,
        algorithm: str = DEFAULT_ALGORITHM,
    ):
        self.path, self.data_offset, self.data_bytes = path, data_offset, data_bytes
        self.algorithm = algorithm
        self._checksum = ALGORITHMS[algorithm]
        self.block_bytes, self.table_offset = block_bytes, table_offset
        self.num_blocks = layout.num_blocks(data_bytes, block_bytes)
        self.checked = np.zeros(self.num_blocks, bool)
        self.unchecked = self.num_blocks  # blocks not yet checked: at 0 every read of the shard is free
        self._crcs: np.ndarray | None = None

    @property
    def loaded_crcs(self) -> np.ndarray | None:
        """The stored checksums (uint32, one per block) if :meth:`crcs` has read them, else None."""
        return self._crcs

    def crcs(self, fd: int) -> np.ndarray:
        """The stored checksum of every block, uint32, read on first use."""
        if self._crcs is None:
            raw = _pread(fd, self.num_blocks * layout.BLOCK_CRC_DTYPE.itemsize, self.table_offset, self.path)
            self._crcs = np.frombuffer(raw, layout.BLOCK_CRC_DTYPE)
        return self._crcs

    def check(self, fd: int, start: int, stop: int, copied: memoryview | None = None) -> None:
        """Check every not yet checked block that overlaps data bytes ``[start, stop)``.

        Args:
            fd: an open descriptor of the shard.
            start, stop: byte range of the token data that was (or is about to be) read.
            copied: the bytes ``[start, stop)`` as just read, if any: blocks they cover in full
                are checked on them, without a second read.

        Raises:
            BlockChecksumError: a block's bytes do not match its stored checksum.
        """
        if stop <= start:
            return
        b0, b1 = start // self.block_bytes, -(-stop // self.block_bytes)
        todo = np.flatnonzero(~self.checked[b0:b1])
        if not todo.size:
            return
        for b in (todo + b0).tolist():
            lo = b * self.block_bytes
            hi = min(lo + self.block_bytes, self.data_bytes)
            self._check_block(
                fd, b, copied[lo - start : hi - start] if copied is not None and start <= lo and hi <= stop else None
            )

    def _check_block(self, fd: int, b: int, data=None) -> None:
        """Check block ``b`` on ``data`` (its bytes, if already read) or on a fresh read; mark it checked."""
        lo = b * self.block_bytes
        hi = min(lo + self.block_bytes, self.data_bytes)
        if data is None:
            data = _pread(fd, hi - lo, self.data_offset + lo, self.path)
        self.settle(fd, b, self._checksum(data))

    def settle(self, fd: int, b: int, actual: int) -> None:
        """Block ``b``'s bytes have checksum ``actual`` (computed by the caller, e.g. the streamer's checking
        thread): mark it checked, or raise naming the shard and the block.

        Args:
            fd: an open descriptor of the shard (the stored checksums are read through it on first use).
            b: the block's index.
            actual: the checksum of the block's bytes, by :attr:`algorithm`.

        Raises:
            BlockChecksumError: ``actual`` differs from the stored checksum.
        """
        stored = int(self.crcs(fd)[b])
        if actual != stored:
            lo = b * self.block_bytes
            hi = min(lo + self.block_bytes, self.data_bytes)
            name = self.algorithm.upper().replace("CRC", "CRC-")
            raise BlockChecksumError(
                f"{self.path}: token block {b} (data bytes {lo}-{hi}) fails its {name} check (stored "
                f"{stored:08x}, read {actual:08x}); the shard is damaged - run `roxxel verify` on the "
                "dataset, then re-copy the shard from its source or re-pack it",
                self.path,
            )
        if not self.checked[b]:  # (one block: the scalar form of mark, on the pread path's first reads)
            self.checked[b] = True
            self.unchecked -= 1

    def mark(self, blocks: np.ndarray) -> None:
        """Record ``blocks`` (distinct int indices, checked elsewhere: the streamer's checking thread) as
        checked in this process; those already marked are not counted again in ``unchecked``."""
        new = blocks[~self.checked[blocks]]
        self.checked[new] = True
        self.unchecked -= len(new)

    def edges(self, start: int, stop: int) -> tuple[int, int]:
        """Bytes before ``start`` and after ``stop`` that complete the unchecked blocks data bytes
        ``[start, stop)`` cover only in part: read with the range (one ``preadv``), they let
        :meth:`check_read` check those blocks without reading them again. ``(0, 0)`` when none.
        """
        size = self.block_bytes
        first, last = start // size, (stop - 1) // size
        head = start - first * size if start % size and not self.checked[first] else 0
        end = min((last + 1) * size, self.data_bytes)
        tail = end - stop if stop < end and not self.checked[last] else 0
        return head, tail

    def check_read(self, fd: int, start: int, parts: list[memoryview]) -> None:
        """Check the unchecked blocks wholly inside the bytes just read: data bytes from ``start``
        on, in ``parts`` back to back (e.g. the :meth:`edges` and the range between them).

        A block split over two parts is checked by extending its checksum over both (CRC
        arithmetic: nothing is copied). Blocks only partly inside are left unchecked.

        Raises:
            BlockChecksumError: a block's bytes do not match its stored checksum.
        """
        size = self.block_bytes
        ends = list(itertools.accumulate(len(p) for p in parts))
        stop = start + ends[-1]
        b_first = -(-start // size)
        b_stop = self.num_blocks if stop >= self.data_bytes else stop // size  # (the last block may be shorter)
        if b_first >= b_stop or self.checked[b_first:b_stop].all():
            return
        for b in range(b_first, b_stop):
            if self.checked[b]:
                continue
            lo, hi = b * size - start, min((b + 1) * size, self.data_bytes) - start  # the block within the parts
            crc, part_lo = 0, 0
            for part, part_hi in zip(parts, ends):
                if part_lo < hi and lo < part_hi:
                    crc = self._checksum(part[max(lo, part_lo) - part_lo : min(hi, part_hi) - part_lo], crc)
                part_lo = part_hi
            self.settle(fd, b, crc)

    def check_pieces(self, fd: int, starts: np.ndarray, stops: np.ndarray) -> None:
        """:meth:`check` for many byte ranges ``[starts[k], stops[k])`` at once (int64 arrays, non-empty ranges).

        The common case, every block already checked, costs a few vectorised lookups in the
        map of checked blocks, whatever the number of ranges.
        """
        if not len(starts) or not self.unchecked:
            return
        b0, b1 = starts // self.block_bytes, (stops - 1) // self.block_bytes
        checked = self.checked
        if int((b1 - b0).max()) <= 1:
            if checked[b0].all() and checked[b1].all():
                return
            blocks = np.union1d(b0, b1)
        else:  # ranges longer than a block: every block they cover
            blocks = np.unique(np.concatenate([np.arange(a, z + 1) for a, z in zip(b0.tolist(), b1.tolist())]))
        for b in blocks[~checked[blocks]].tolist():
            self._check_block(fd, b)

    def check_all(self, fd: int) -> None:
        """Check every block (``verify``), whether or not it was checked before."""
        self.checked[:] = False
        self.unchecked = self.num_blocks
        step = max(1, (8 << 20) // self.block_bytes) * self.block_bytes
        for start in range(0, self.data_bytes, step):
            stop = min(start + step, self.data_bytes)
            self.check(fd, start, stop, memoryview(_pread(fd, stop - start, self.data_offset + start, self.path)))


def _pread(fd: int, n: int, offset: int, path: str) -> bytes:
    data = os.pread(fd, n, offset)
    if len(data) < n:
        raise TruncatedShardError(f"{path}: file ended while reading (was it truncated after opening?)", path)
    return data
