"""``ShardWriter``: one shard, streamed to a temporary file and given its final name once complete.

Token data is hashed (SHA-256, the footer's) and block-checksummed as it is written, inline or on
a background thread (:class:`roxxel.format.background._BackgroundChecksums`); :meth:`ShardWriter.finish`
writes the document index, the block checksums, the header and the footer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from array import array
from typing import Any, overload

import numpy as np

from roxxel._version import __version__
from roxxel.format import blocks, layout
from roxxel.format.atomic import commit, temp_name
from roxxel.format.background import _BackgroundChecksums
from roxxel.format.manifest import ShardEntry

_PLACEHOLDER_COUNT = 10**19  # widest count the JSON can hold; reserves room for the real ones
_PLACEHOLDER_CRC = 2**32 - 1  # widest checksum, for the same reason
_WRITE_BUFFER = 1 << 20


class ShardWriter:
    """Streams tokens into one shard file under a temporary name.

    Args:
        path: final path of the shard.
        dtype: token or float dtype (see :func:`roxxel.format.layout.normalize_dtype`).
        metadata: JSON-serialisable fields stored in the shard (vocab_size, eos_id, tokenizer, ...).
        checksums: hash and checksum the token data on this background thread (its arrays
            must then stay unchanged after :meth:`write`; :meth:`finish` waits for it), or
            inline when None.

    Call :meth:`start_document` before each document's tokens, :meth:`write` for its tokens
    (any number of times), then :meth:`finish`; :meth:`commit` renames it to ``path``.
    """

    def __init__(self, path: str, dtype, metadata: dict[str, Any], checksums: _BackgroundChecksums | None = None):
        self.path = path
        self.tmp_path = temp_name(path)
        self.dtype = layout.normalize_dtype(dtype)
        # No time stamp: the same documents give the same bytes (and SHA-256), so a dataset packed
        # again from the same inputs is the same dataset to a resume (the manifest keeps the time).
        self._metadata = dict(
            metadata,
            format="roxxel.shard",
            dtype=self.dtype.name,
            writer_version=__version__,
            block_checksums={"algorithm": blocks.DEFAULT_ALGORITHM, "block_bytes": layout.DEFAULT_BLOCK_BYTES},
        )
        reserve = len(self._metadata_json(_PLACEHOLDER_COUNT, _PLACEHOLDER_COUNT))
        self._data_offset = layout.align(layout.HEADER.size + reserve, layout.DATA_ALIGNMENT)
        self._file = open(self.tmp_path, "wb", buffering=_WRITE_BUFFER)
        self._file.seek(self._data_offset)
        self._hash = hashlib.sha256()
        self._block_crcs = array("I")
        self._block_checksum = blocks.ALGORITHMS[blocks.DEFAULT_ALGORITHM]
        self._crc = 0  # checksum of the current block so far
        self._in_block = 0  # bytes of the current block written
        self._starts = array("Q")
        self._checksums = checksums
        self.num_tokens = 0
        self.entry: ShardEntry | None = None

    @property
    def num_documents(self) -> int:
        """Documents started in this shard so far."""
        return len(self._starts)

    @property
    def nbytes(self) -> int:
        """Bytes the shard will take if finished now (approximately; the index and footer included)."""
        return self.nbytes_with(self.num_tokens, self.num_documents)

    @overload
    def nbytes_with(self, num_tokens: int, num_documents: int) -> int: ...

    @overload
    def nbytes_with(self, num_tokens: np.ndarray, num_documents: np.ndarray) -> np.ndarray: ...

    def nbytes_with(self, num_tokens, num_documents):
        """:attr:`nbytes` once the shard holds ``num_tokens`` tokens in ``num_documents`` documents
        (ints, or int64 arrays of as many candidates)."""
        data = num_tokens * self.dtype.itemsize
        return (
            self._data_offset
            + data
            + 8 * num_documents
            + 4 * (data // layout.DEFAULT_BLOCK_BYTES + 1)
            + layout.FOOTER.size
        )

    def start_document(self) -> None:
        """Mark the next token written as the first of a new document."""
        self._starts.append(self.num_tokens)

    def start_documents(self, offsets: np.ndarray) -> None:
        """Mark several documents at once: they start ``offsets`` (int64, ascending) tokens after the next one written."""
        self._starts.frombytes((offsets + self.num_tokens).astype(np.uint64).tobytes())

    def write(self, tokens: np.ndarray) -> None:
        """Append tokens (already in this shard's dtype, 1-D, C-contiguous) to the current document."""
        buf = np.ascontiguousarray(tokens).view(np.uint8).data  # as bytes: bfloat16 has no buffer format
        self._file.write(buf)
        if self._checksums is None:
            self._checksum(buf)
        else:
            self._checksums.submit(self._checksum, buf)
        self.num_tokens += len(tokens)

    def _checksum(self, buf: memoryview) -> None:
        """Add ``buf``, the next bytes of token data, to the shard's SHA-256 and block checksums."""
        self._hash.update(buf)  # releases the GIL (a buffer over 2 KiB): a background thread runs in parallel
        self._update_block_crcs(buf)

    def _update_block_crcs(self, buf: memoryview) -> None:
        block = layout.DEFAULT_BLOCK_BYTES
        while len(buf):
            take = min(block - self._in_block, len(buf))
            self._crc = self._block_checksum(buf[:take], self._crc)
            self._in_block += take
            buf = buf[take:]
            if self._in_block == block:
                self._block_crcs.append(self._crc)
                self._crc, self._in_block = 0, 0

    def _metadata_json(self, num_tokens: int, num_documents: int, index_crc: int = _PLACEHOLDER_CRC) -> bytes:
        meta = dict(self._metadata, num_tokens=num_tokens, num_documents=num_documents)
        meta["block_checksums"] = dict(meta["block_checksums"], index=index_crc)  # the document index's own
        return json.dumps(meta, sort_keys=True).encode("utf-8")

    def flush_to_os(self) -> int:
        """Hand the buffered bytes to the OS; returns the file's descriptor (to ``fdatasync`` them from elsewhere)."""
        self._file.flush()
        return self._file.fileno()

    def finish(self, sync: bool = True) -> ShardEntry:
        """Write the index, header and footer, and fsync. The file keeps its temporary name.

        With ``sync=False`` the file is left open and not yet durable: call :meth:`sync`
        (from any thread) before committing it.
        """
        if self._checksums is not None:
            self._checksums.wait()  # every byte written so far is hashed and checksummed
        f, h = self._file, self._hash
        data_end = self._data_offset + self.num_tokens * self.dtype.itemsize
        index_offset = layout.align(data_end, layout.INDEX_ALIGNMENT)
        pad = b"\0" * (index_offset - data_end)
        index = np.frombuffer(self._starts, dtype=np.uint64).astype(layout.INDEX_DTYPE, copy=False)
        if self._in_block:
            self._block_crcs.append(self._crc)
        crcs = np.frombuffer(self._block_crcs, dtype=np.uint32).astype(layout.BLOCK_CRC_DTYPE, copy=False)
        index_bytes = index.data.cast("B")
        for part in (pad, index_bytes, crcs.data.cast("B")):
            f.write(part)
            h.update(part)
        meta = self._metadata_json(self.num_tokens, self.num_documents, self._block_checksum(index_bytes))
        fields = (
            layout.SIGNATURE,
            *layout.FORMAT_VERSION,
            len(meta),
            self._data_offset,
            self.num_tokens,
            self.num_documents,
            index_offset,
            layout.dtype_name_bytes(self.dtype),
        )
        head = layout.HEADER.pack(*fields, layout.header_crc(layout.HEADER.pack(*fields, 0), meta))
        header_block = head + meta + b" " * (self._data_offset - len(head) - len(meta))
        h.update(header_block)
        f.write(layout.FOOTER.pack(h.digest(), self.num_tokens, self.num_documents, layout.END_SIGNATURE))
        f.seek(0)
        f.write(header_block)
        f.flush()
        size = os.fstat(f.fileno()).st_size
        self.entry = ShardEntry(os.path.basename(self.path), self.num_tokens, self.num_documents, size, h.hexdigest())
        if sync:
            self.sync()
        return self.entry

    def sync(self) -> None:
        """fsync and close a finished shard (see :meth:`finish`)."""
        os.fsync(self._file.fileno())
        self._file.close()

    @property
    def finished_entry(self) -> ShardEntry:
        """The manifest entry of a finished shard; ``RuntimeError`` before :meth:`finish`."""
        if self.entry is None:
            raise RuntimeError(f"{self.path}: shard not finished; call finish() before listing it")
        return self.entry

    def commit(self) -> None:
        """Give the finished shard its final name."""
        commit(self.tmp_path, self.path)

    def abort(self) -> None:
        """Close and delete the temporary file."""
        self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.tmp_path)
