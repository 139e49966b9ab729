"""Read one shard: a ``.rox`` file of the current format, or one of the original ``ROXXEL02`` files.

Opening a shard reads its header, metadata and footer (a few KiB) and never the token
data; the tokens are a memory map, so a slice of ``Shard.tokens`` is a zero-copy view.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any, BinaryIO

import numpy as np

from roxxel.format import layout
from roxxel.format.atomic import mount_of
from roxxel.format.blocks import ALGORITHMS, BlockChecks
from roxxel.format.errors import (
    BadSignatureError,
    BlockChecksumError,
    ChecksumMismatchError,
    CorruptShardError,
    ShardNotFoundError,
    TruncatedShardError,
)
from roxxel.format.mapped import MappedFile, open_regular, storage_errors

_VERIFY_CHUNK = 8 << 20
_MAX_DATA_OFFSET = 1 << 24  # metadata is a few KiB; a larger data offset means a garbage header


class Shard(MappedFile):
    """A memory-mapped shard of the current format (see :mod:`roxxel.format.layout`).

    Attributes:
        path: the file.
        dtype: token dtype (``uint8``, ``uint16`` or ``uint32``), or for float data ``float16``,
            ``bfloat16`` or ``float32``; little-endian.
        num_tokens: tokens in the shard.
        num_documents: documents in the shard (each ends with the EOS token when the
            dataset has one).
        metadata: the JSON metadata (dtype, vocab_size, eos_id, tokenizer, counts,
            writer_version; earlier shards also their ``created`` time).
        sha256: hex SHA-256 stored in the footer.
        nbytes: file size in bytes.

    Raises (on construction):
        ShardNotFoundError: the file does not exist.
        BadSignatureError: it is not a Roxxel shard.
        TruncatedShardError: it is shorter than its header says (names the region), or empty.
        CorruptShardError: header, metadata and footer disagree.
        ShardReadError: the storage failed a read.

    Reads (``pread_into``, ``read_pieces``) raise ``ShardChangedError`` when the file changed
    since it was opened (see :mod:`roxxel.format.mapped`).
    """

    legacy = False
    _VIEWS = ("_tokens", "_index")

    def __init__(self, path: str, *, _file: BinaryIO | None = None):
        self.path = path
        with contextlib.ExitStack() as stack:
            stack.enter_context(storage_errors(path))
            f = _file if _file is not None else stack.enter_context(_open(path))
            size = self.nbytes = os.fstat(f.fileno()).st_size
            if not size:
                raise TruncatedShardError(_empty_message(path), path)
            f.seek(0)
            head = f.read(layout.HEADER.size)
            if len(head) < layout.HEADER.size:
                raise TruncatedShardError(
                    f"{path}: truncated inside the header ({size} bytes, a header is "
                    f"{layout.HEADER.size}); the shard was not completely written or copied - re-copy or re-pack it",
                    path,
                )
            (magic, major, minor, meta_len, data_offset, num_tokens, num_documents, index_offset, dtype_name, crc) = (
                layout.HEADER.unpack(head)
            )
            if magic != layout.SIGNATURE:
                raise BadSignatureError(f"{path}: not a Roxxel shard (no {layout.SIGNATURE.decode()} signature)", path)
            meta_bytes = b""
            if layout.HEADER.size + meta_len <= size:
                f.seek(layout.HEADER.size)
                meta_bytes = f.read(meta_len)
            crc_ok = len(meta_bytes) == meta_len and layout.header_crc(head, meta_bytes) == crc
            if major > layout.FORMAT_VERSION[0] and crc_ok:
                raise CorruptShardError(
                    f"{path}: shard format version {major}.{minor} is newer than this Roxxel "
                    f"reads ({layout.FORMAT_VERSION[0]}.x); upgrade roxxel",
                    path,
                )
            plausible = (
                major <= layout.FORMAT_VERSION[0]
                and data_offset % layout.DATA_ALIGNMENT == 0
                and layout.HEADER.size + meta_len <= data_offset <= _MAX_DATA_OFFSET
                and layout.dtype_for_code(dtype_name) is not None
            )
            if len(meta_bytes) < meta_len and plausible:
                raise TruncatedShardError(_truncated_message(path, "metadata", size, data_offset), path)
            if not crc_ok:
                raise CorruptShardError(
                    f"{path}: header checksum mismatch: the file has the {layout.SIGNATURE.decode()} signature but "
                    "its header or metadata is damaged (or it is not really a shard) - re-copy or re-pack it",
                    path,
                )
            self.metadata: dict[str, Any] = json.loads(meta_bytes.decode("utf-8"))
            row = layout.dtype_for_code(dtype_name)
            if row is None:
                name = dtype_name.rstrip(b"\0").decode("ascii", "replace")
                raise CorruptShardError(f"{path}: unknown dtype {name!r} in the header - re-pack the shard", path)
            self.dtype = row.numpy
            expected_index = layout.index_offset_for(data_offset, num_tokens, self.dtype.itemsize)
            if index_offset != expected_index or data_offset % layout.DATA_ALIGNMENT:
                raise CorruptShardError(f"{path}: inconsistent offsets in the header - re-pack the shard", path)
            data_bytes = num_tokens * self.dtype.itemsize
            block_bytes, algorithm = self._block_spec(path, (major, minor))
            blocks = layout.num_blocks(data_bytes, block_bytes)
            expected_size = layout.file_size_for(index_offset, num_documents, blocks)
            if size < expected_size:
                region = _region_at(size, data_offset, index_offset, num_documents)
                raise TruncatedShardError(_truncated_message(path, region, size, expected_size), path)
            if size > expected_size:
                raise CorruptShardError(
                    f"{path}: {size - expected_size} unexpected bytes after the footer ({size} bytes, header says "
                    f"{expected_size}); the file was appended to or overwritten - re-pack it",
                    path,
                )
            f.seek(size - layout.FOOTER.size)
            sha, f_tokens, f_docs, end = layout.FOOTER.unpack(f.read(layout.FOOTER.size))
            fd = os.dup(f.fileno())  # reads go through the descriptor checked here (no reopen)
            self._fd = fd
            self._remember(fd)  # what must not change while the shard is read
        if end != layout.END_SIGNATURE or (f_tokens, f_docs) != (num_tokens, num_documents):
            raise CorruptShardError(
                f"{path}: footer does not match the header; the shard is corrupt - re-pack it", path
            )
        self.version = (major, minor)
        self.num_tokens = num_tokens
        self.num_documents = num_documents
        self.sha256 = sha.hex()
        self.data_offset = data_offset
        self._index_offset = index_offset
        self._tokens: np.ndarray | None = None
        self._index: np.ndarray | None = None
        if block_bytes:
            table = index_offset + num_documents * layout.INDEX_DTYPE.itemsize
            self._blocks = BlockChecks(path, data_offset, data_bytes, block_bytes, table, algorithm)
        self._index_crc = self._index_spec(path, algorithm)

    def _block_spec(self, path: str, version: tuple[int, int]) -> tuple[int, str]:
        """Block size and algorithm of the stored checksums: ``(0, "")`` for a 1.0 shard (it has none)."""
        spec = self.metadata.get("block_checksums")
        if version < layout.BLOCK_CHECKSUM_VERSION and spec is None:
            return 0, ""
        if (
            not isinstance(spec, dict)
            or spec.get("algorithm") not in ALGORITHMS
            or not isinstance(spec.get("block_bytes"), int)
            or spec["block_bytes"] < 1
            or spec["block_bytes"] % self.dtype.itemsize
        ):
            raise CorruptShardError(
                f"{path}: format {version[0]}.{version[1]} shard with a missing or malformed "
                f"block_checksums entry ({spec!r}; algorithms read: {', '.join(ALGORITHMS)}) - "
                "re-pack the shard",
                path,
            )
        return spec["block_bytes"], spec["algorithm"]

    def _index_spec(self, path: str, algorithm: str) -> int | None:
        """The document index's stored checksum (``block_checksums.index``), or None for a shard written without one."""
        crc = (self.metadata.get("block_checksums") or {}).get("index")
        if crc is None:
            return None
        if not isinstance(crc, int) or isinstance(crc, bool) or not 0 <= crc < 2**32 or not algorithm:
            raise CorruptShardError(
                f"{path}: malformed document index checksum in block_checksums ({crc!r}) - re-pack the shard", path
            )
        return crc

    # -- memory map -------------------------------------------------------------------
    @property
    def tokens(self) -> np.ndarray:
        """All tokens, shape ``(num_tokens,)``, a read-only zero-copy view of the file."""
        if self._tokens is None:
            self._tokens = np.frombuffer(self._map(), self.dtype, self.num_tokens, self.data_offset)
        return self._tokens

    @property
    def document_starts(self) -> np.ndarray:
        """Token offset of each document's first token, shape ``(num_documents,)``, uint64 view."""
        if self._index is None:
            index = self._index_view()
            self._check_index_bytes(index)
            _check_index(self.path, index, self.num_tokens)  # also for shards without an index checksum
            self._index = index
        return self._index

    def _index_view(self) -> np.ndarray:
        """The document index as stored (uint64, a view of the map), not yet checked."""
        return np.frombuffer(self._map(), layout.INDEX_DTYPE, self.num_documents, self._index_offset)

    def _check_index_bytes(self, index: np.ndarray) -> None:
        """The index against its stored checksum, before any document boundary is used (once per open)."""
        if self._index_crc is None or self._blocks is None:
            return
        actual = ALGORITHMS[self._blocks.algorithm](index.view(np.uint8).data)
        if actual != self._index_crc:
            name = self._blocks.algorithm.upper().replace("CRC", "CRC-")
            raise CorruptShardError(
                f"{self.path}: the document index fails its {name} check (stored {self._index_crc:08x}, read "
                f"{actual:08x}); the shard is damaged - run `roxxel verify` on the dataset, then re-copy the "
                "shard from its source or re-pack it",
                self.path,
            )

    def document_bounds(self, i: int) -> tuple[int, int]:
        """``(start, stop)`` token offsets of document ``i`` within this shard."""
        starts = self.document_starts
        stop = int(starts[i + 1]) if i + 1 < self.num_documents else self.num_tokens
        return int(starts[i]), stop

    def compute_sha256(self) -> str:
        """Recompute the content SHA-256 in the layout's order by reading the file (not the map)."""
        h = hashlib.sha256()
        end = self.nbytes - layout.FOOTER.size
        with storage_errors(self.path), open(self.path, "rb") as f:
            _hash_range(f, self.data_offset, end, h)
            _hash_range(f, 0, self.data_offset, h)
        return h.hexdigest()

    def verify(self, expected_sha256: str | None = None) -> None:
        """Check the content checksum (and the document index's order).

        Raises:
            ChecksumMismatchError: the data differs from what was written (a
                ``BlockChecksumError`` names the first damaged block of a 1.1 shard).
            CorruptShardError: the document index is not increasing from 0.
        """
        actual = self.compute_sha256()
        for label, want in (("footer", self.sha256), ("manifest", expected_sha256)):
            if want is not None and actual != want:
                raise ChecksumMismatchError(
                    f"{self.path}: checksum mismatch (SHA-256 {actual}, {label} says {want}){self._damaged_block()}; "
                    "the shard is corrupt - re-copy or re-pack it",
                    self.path,
                )
        _check_index(self.path, self.document_starts, self.num_tokens)

    def _damaged_block(self) -> str:
        """Where the block checksums place the damage (", first damaged token block: N"), if they can."""
        if self._blocks is None:
            return ""
        blocks = self._blocks
        try:
            self.with_descriptor(blocks.check_all)
        except BlockChecksumError as e:
            return f", first damaged token block: {str(e).split('token block ')[1].split(' fails')[0]}"
        try:
            self._check_index_bytes(self._index_view())
        except CorruptShardError:
            return ", every token block matches its checksum: the damage is in the document index"
        return ", every token block matches its checksum: the damage is in the header, index or checksums"

    def __repr__(self) -> str:
        return (
            f"Shard({self.path!r}, tokens={self.num_tokens}, documents={self.num_documents}, dtype={self.dtype.name})"
        )


def open_shard(path: str):
    """Open a shard of either format: :class:`Shard` or :class:`~roxxel.format.legacy.LegacyShard`.

    Raises:
        ShardNotFoundError: the file does not exist.
        BadSignatureError: it is not a shard of either format.
        TruncatedShardError: it is shorter than its header or footer says, or empty (0 bytes: said so).
        CorruptShardError: its header, metadata and footer disagree.
        ShardReadError: the storage failed a read (names the mount and whether a retry can help).
    """
    from roxxel.format.legacy import LegacyShard

    with storage_errors(path), _open(path) as f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            raise TruncatedShardError(_empty_message(path), path)
        head = f.read(layout.HEADER.size)
        if head.startswith(layout.SIGNATURE):
            return Shard(path, _file=f)
        if size >= 8:
            f.seek(size - 8)
            if f.read(8) == layout.LEGACY_SIGNATURE:
                return LegacyShard(path, _file=f)
    if layout.SIGNATURE.startswith(head) and head:
        raise TruncatedShardError(_truncated_message(path, "header", size, layout.HEADER.size), path)
    raise BadSignatureError(
        f"{path}: not a Roxxel shard (neither the {layout.SIGNATURE.decode()} signature at the start nor "
        f"the original {layout.LEGACY_SIGNATURE.decode()} signature at the end); it is another kind of file, "
        "or an original-format shard whose footer was cut off",
        path,
    )


def _open(path: str) -> BinaryIO:
    """:func:`~roxxel.format.mapped.open_regular`, with a missing file as :class:`ShardNotFoundError`."""
    try:
        return open_regular(path)
    except FileNotFoundError:
        raise ShardNotFoundError(f"shard not found: {path}") from None


def _empty_message(path: str) -> str:
    mount, fstype = mount_of(path)
    return (
        f"{path}: the file is empty (0 bytes) on the mount {mount}{f' ({fstype})' if fstype else ''}: a shard "
        "being copied, or on a network or FUSE mount a stale read of a file being written or replaced - wait for "
        "the copy to finish (or remount) and retry; if it stays empty, re-copy or re-pack the shard"
    )


def _region_at(size: int, data_offset: int, index_offset: int, num_documents: int) -> str:
    index_end = index_offset + num_documents * layout.INDEX_DTYPE.itemsize
    if size < data_offset:
        return "metadata"
    if size < index_offset:
        return "token data"
    if size < index_end:
        return "document index"
    return "footer"


def _truncated_message(path: str, region: str, size: int, expected: int) -> str:
    return (
        f"{path}: truncated inside the {region} ({size} bytes, expected {expected}); "
        "the shard was not completely written or copied - re-copy or re-pack it"
    )


def _hash_range(f, start: int, stop: int, h) -> None:
    f.seek(start)
    buf = bytearray(_VERIFY_CHUNK)
    view = memoryview(buf)
    left = stop - start
    while left > 0:
        n = f.readinto(view[: min(left, _VERIFY_CHUNK)])
        if not n:
            raise TruncatedShardError(f"{f.name}: file shrank while being verified", f.name)
        h.update(view[:n])
        left -= n


def _check_index(path: str, starts: np.ndarray, num_tokens: int) -> None:
    if len(starts) == 0:
        return
    if starts[0] != 0 or np.any(np.diff(starts.astype(np.int64)) < 0) or int(starts[-1]) > num_tokens:
        raise CorruptShardError(f"{path}: the document index is not increasing from 0 - re-pack the shard", path)
