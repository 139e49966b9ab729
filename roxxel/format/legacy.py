"""Read-only access to shards written by the original Roxxel (signature ``ROXXEL02``).

Layout, as the published ``roxxel`` 0.9.x writes it: the data bytes (uniform blocks of
``block_size`` bytes, the last one padded), then one ``int64`` end offset per block, then
a 32-byte footer ``<q total_records, <q raw_data_size, 8-byte dtype name, 8-byte
signature>``. There is no checksum and no document index: a *document* here is one
block (the original's "record"), exactly as its ``__len__``/``__getitem__`` counted them.

The original stored vocabularies of up to 65,535 ids as ``int16``, which wraps ids >=
32,768 to negative numbers. Because the wrap keeps the bits, those shards are exposed as
``uint16`` and every id reads back correctly.
"""

from __future__ import annotations

import mmap
import os
import struct

import numpy as np

from roxxel.format.errors import CorruptShardError, TruncatedShardError

FOOTER = struct.Struct("<qq8s8s")
_REINTERPRET = {"int16": "uint16"}


class LegacyShard:
    """A memory-mapped ``ROXXEL02`` shard, read-only. Same reading interface as :class:`~roxxel.format.shard.Shard`.

    Attributes:
        dtype: the stored dtype (``int16`` is exposed as ``uint16``, see the module docstring).
        num_tokens: items of ``dtype`` in the data region, padding included.
        num_documents: blocks (the original's records).
        block_size: bytes per block.

    Raises (on construction):
        TruncatedShardError: the file is shorter than its footer says.
        CorruptShardError: the footer or the block offsets are inconsistent.
    """

    legacy = True
    sha256 = None
    version = (0, 2)

    def __init__(self, path: str, *, _size: int):
        self.path = path
        self.nbytes = _size
        if _size < FOOTER.size:
            raise TruncatedShardError(f"{path}: truncated original-format shard ({_size} bytes)", path)
        with open(path, "rb") as f:
            f.seek(_size - FOOTER.size)
            total_records, raw_size, dtype_bytes, _ = FOOTER.unpack(f.read(FOOTER.size))
        expected = raw_size + 8 * total_records + FOOTER.size
        if total_records < 0 or raw_size < 0 or expected != _size:
            raise TruncatedShardError(
                f"{path}: original-format shard is {_size} bytes but its footer implies {expected} "
                "(truncated or damaged); re-copy it from its source", path)
        stored = dtype_bytes.rstrip(b"\0").decode("ascii")
        self.stored_dtype = np.dtype(stored)
        self.dtype = np.dtype(_REINTERPRET.get(stored, stored)).newbyteorder("<")
        if raw_size % self.dtype.itemsize:
            raise CorruptShardError(f"{path}: data size {raw_size} is not a multiple of {stored}'s item size", path)
        self.num_tokens = raw_size // self.dtype.itemsize
        self.num_documents = total_records
        self._raw_size = raw_size
        self._mmap: mmap.mmap | None = None
        self._fd: int | None = None
        self._tokens: np.ndarray | None = None
        self._ends: np.ndarray | None = None
        ends = self.block_end_offsets
        self.block_size = int(ends[0]) if total_records else 0
        self.metadata = {
            "format": "ROXXEL02", "dtype": self.dtype.name, "stored_dtype": stored,
            "block_size": self.block_size, "num_tokens": self.num_tokens, "num_documents": total_records,
            "vocab_size": None, "eos_id": None, "tokenizer": None,
        }

    def _map(self) -> mmap.mmap:
        if self._mmap is None:
            with open(self.path, "rb") as f:
                self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._mmap

    @property
    def tokens(self) -> np.ndarray:
        """The data region as ``dtype`` items, shape ``(num_tokens,)``, a zero-copy view."""
        if self._tokens is None:
            self._tokens = np.frombuffer(self._map(), self.dtype, self.num_tokens, 0)
        return self._tokens

    @property
    def block_end_offsets(self) -> np.ndarray:
        """The stored ``int64`` byte offset at which each block ends, shape ``(num_documents,)``."""
        if self._ends is None:
            self._ends = np.frombuffer(self._map(), "<i8", self.num_documents, self._raw_size)
        return self._ends

    @property
    def document_starts(self) -> np.ndarray:
        """Token offset of each block's start, shape ``(num_documents,)`` (computed, uint64)."""
        ends = self.block_end_offsets
        starts = np.zeros(len(ends), np.uint64)
        starts[1:] = ends[:-1] // self.dtype.itemsize
        return starts

    def document_bounds(self, i: int) -> tuple[int, int]:
        ends = self.block_end_offsets
        start = 0 if i == 0 else int(ends[i - 1])
        return start // self.dtype.itemsize, int(ends[i]) // self.dtype.itemsize

    def pread_into(self, out: np.ndarray, start: int) -> None:
        """Copy tokens ``[start, start + len(out))`` into ``out`` (1-D, this shard's dtype) with ``pread``.

        Unlike slicing the memory map, a read maps no pages into the process, so copying
        through a whole dataset leaves the RSS where it was.

        Raises:
            TruncatedShardError: the file ended early (it shrank after opening).
        """
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        buf = memoryview(out).cast("B")
        offset = 0 + start * self.dtype.itemsize
        while len(buf):
            n = os.preadv(self._fd, [buf], offset)
            if n <= 0:
                raise TruncatedShardError(f"{self.path}: file ended while reading (was it truncated after opening?)", self.path)
            buf, offset = buf[n:], offset + n

    def release(self) -> None:
        if self._mmap is not None:
            self._mmap.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        """Close the file and forget the mapping; it is unmapped once no view of it is alive."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._tokens = self._ends = None
        self._mmap = None

    def verify(self, expected_sha256: str | None = None) -> None:
        """Structural check only (the original format has no checksum): block offsets increase to the data size.

        Raises:
            CorruptShardError: the block offsets are inconsistent.
        """
        ends = self.block_end_offsets
        if len(ends) and (np.any(np.diff(ends) <= 0) or ends[0] <= 0 or ends[-1] != self._raw_size):
            raise CorruptShardError(f"{self.path}: block offsets of the original-format shard are inconsistent", self.path)

    def __repr__(self) -> str:
        return f"LegacyShard({self.path!r}, tokens={self.num_tokens}, blocks={self.num_documents}, dtype={self.dtype.name})"
