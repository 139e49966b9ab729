"""Read-only access to shards written by the original Roxxel (signature ``ROXXEL02``).

Layout, as the published ``roxxel`` 0.9.x writes it: the data bytes (uniform blocks of
``block_size`` bytes, the last one padded), then one ``int64`` end offset per block, then
a 32-byte footer ``<q total_records, <q raw_data_size, 8-byte dtype name, 8-byte
signature>``. There is no checksum and no document index: a *document* here is one
block (the original's "record"), exactly as its ``__len__``/``__getitem__`` counted them.

The original stored vocabularies of up to 65,535 ids as ``int16``, which wraps ids >=
32,768 to negative numbers. Because the wrap keeps the bits, those shards are exposed as
``uint16`` and every id reads back correctly (the ``uint16`` row's ``legacy_names`` in
:data:`roxxel.format.layout.SHARD_DTYPES`).
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

import numpy as np

from roxxel.format.errors import CorruptShardError, TruncatedShardError
from roxxel.format.layout import legacy_dtype
from roxxel.format.mapped import MappedFile

FOOTER = struct.Struct("<qq8s8s")


class LegacyShard(MappedFile):
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
    _VIEWS = ("_tokens", "_ends")
    data_offset = 0
    sha256 = None
    version = (0, 2)

    def __init__(self, path: str, *, _file: BinaryIO):
        """Read by :func:`~roxxel.format.shard.open_shard`, from ``_file`` (the shard opened by it)."""
        self.path = path
        self.nbytes = _size = os.fstat(_file.fileno()).st_size
        if _size < FOOTER.size:
            raise TruncatedShardError(f"{path}: truncated original-format shard ({_size} bytes)", path)
        _file.seek(_size - FOOTER.size)
        total_records, raw_size, dtype_bytes, _ = FOOTER.unpack(_file.read(FOOTER.size))
        self._fd = os.dup(_file.fileno())  # reads go through this descriptor (no reopen)
        self._remember(self._fd)  # what must not change while the shard is read
        expected = raw_size + 8 * total_records + FOOTER.size
        if total_records < 0 or raw_size < 0 or expected != _size:
            raise TruncatedShardError(
                f"{path}: original-format shard is {_size} bytes but its footer implies {expected} "
                "(truncated or damaged); re-copy it from its source",
                path,
            )
        stored = dtype_bytes.rstrip(b"\0").decode("ascii")
        self.stored_dtype = np.dtype(stored)
        self.dtype = legacy_dtype(stored)
        if raw_size % self.dtype.itemsize:
            raise CorruptShardError(f"{path}: data size {raw_size} is not a multiple of {stored}'s item size", path)
        self.num_tokens = raw_size // self.dtype.itemsize
        self.num_documents = total_records
        self._raw_size = raw_size
        self._tokens: np.ndarray | None = None
        self._ends: np.ndarray | None = None
        ends = self.block_end_offsets
        self.block_size = int(ends[0]) if total_records else 0
        self.metadata = {
            "format": "ROXXEL02",
            "dtype": self.dtype.name,
            "stored_dtype": stored,
            "block_size": self.block_size,
            "num_tokens": self.num_tokens,
            "num_documents": total_records,
            "vocab_size": None,
            "eos_id": None,
            "tokenizer": None,
        }

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
        """``(start, stop)`` token offsets of block ``i`` within this shard."""
        ends = self.block_end_offsets
        start = 0 if i == 0 else int(ends[i - 1])
        return start // self.dtype.itemsize, int(ends[i]) // self.dtype.itemsize

    def verify(self, expected_sha256: str | None = None) -> None:
        """Structural check only (the original format has no checksum): block offsets increase to the data size.

        Raises:
            CorruptShardError: the block offsets are inconsistent.
        """
        ends = self.block_end_offsets
        if len(ends) and (np.any(np.diff(ends) <= 0) or ends[0] <= 0 or ends[-1] != self._raw_size):
            raise CorruptShardError(
                f"{self.path}: block offsets of the original-format shard are inconsistent", self.path
            )

    def __repr__(self) -> str:
        return f"LegacyShard({self.path!r}, tokens={self.num_tokens}, blocks={self.num_documents}, dtype={self.dtype.name})"
