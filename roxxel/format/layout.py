"""The on-disk layout of a ``.rox`` shard (format version 1.1; 1.0 lacks the block checksums).

All integers are little-endian. Offsets are in bytes from the start of the file.

======================  ==========================================================
region                  contents
======================  ==========================================================
header (64 bytes)       ``HEADER``: signature ``ROXSHARD``, format version
                        (major, minor), metadata length, data offset, token count,
                        document count, index offset, token dtype name (8 bytes,
                        NUL-padded), CRC-32 of header bytes [0, 56) + metadata
metadata                UTF-8 JSON object (see ``Shard.metadata``), padded with
                        spaces up to ``data_offset``
token data              ``num_tokens`` tokens of the dtype, starting at
                        ``data_offset``, a multiple of 4096 so that ``np.memmap``
                        views are page-aligned and zero-copy
padding                 zero bytes up to the next multiple of 8
document index          ``num_documents`` uint64: token offset of each document's
                        first token (the first is 0; documents are contiguous)
block checksums (1.1)   one uint32 checksum per block of ``block_bytes`` bytes of the
                        token data (the last block may be shorter); the metadata's
                        ``block_checksums`` = ``{"algorithm": A, "block_bytes": N}``
                        says the region is there; ``A`` is ``"crc32c"`` (written
                        now) or ``"crc32"`` (the first 1.1 shards; still read).
                        Its ``"index"`` (written now; optional) is the checksum,
                        by ``A``, of the document index, checked on its first use
footer (56 bytes)       ``FOOTER``: SHA-256 of the contents, token count, document
                        count, end signature ``ROXSHEND``
======================  ==========================================================

Version 1.1 added the block checksums so that a reader can check each block of tokens the
first time it reads it, at a cost of one CRC-32 per block per process, instead of hashing
the whole shard. A 1.0 shard (no such region, no ``block_checksums`` key) still opens; its
tokens are checked only by ``verify`` (SHA-256).

The SHA-256 covers, in this order, the token data, the padding, the document index, the
block checksums and the header + metadata block ``[0, data_offset)``. That order lets a writer hash while
it streams tokens and fill the header in last. A file whose size differs from the one
the header implies is truncated (or has trailing garbage) and is refused on open.

Token dtypes are unsigned: ``uint16`` when the vocabulary fits in 65,536 ids, else
``uint32`` (``uint8`` when asked for raw bytes). The original Roxxel stored vocabularies
up to 65,535 ids as ``int16``, which turns every id >= 32,768 negative.

A shard may instead hold floating-point arrays (features, embeddings, regression targets,
as the original allowed): ``float16``, ``bfloat16`` (ml_dtypes' type, JAX's ``bfloat16``)
or ``float32``, little-endian, in the same layout; each "document" is one array. Such data
has no vocabulary and no EOS id; the block checksums and the SHA-256 cover its bytes the
same way.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import ml_dtypes  # registers numpy's "bfloat16" dtype name (installed with JAX)
import numpy as np

SIGNATURE = b"ROXSHARD"
END_SIGNATURE = b"ROXSHEND"
LEGACY_SIGNATURE = b"ROXXEL02"
FORMAT_VERSION = (1, 1)
BLOCK_CHECKSUM_VERSION = (1, 1)  # first version whose shards carry block checksums
DEFAULT_BLOCK_BYTES = 64 << 10  # CRC-32 granularity: cheap to check on a first read, 1/16384 of the data
BLOCK_CRC_DTYPE = np.dtype("<u4")

HEADER = struct.Struct("<8sHHIQQQQ8sI4x")
FOOTER = struct.Struct("<32sQQ8s")
assert HEADER.size == 64 and FOOTER.size == 56
HEADER_CRC_SPAN = 56  # the CRC covers header bytes [0, 56) (everything before the CRC itself)

DATA_ALIGNMENT = 4096
INDEX_ALIGNMENT = 8
INDEX_DTYPE = np.dtype("<u8")

TOKEN_DTYPES = ("uint8", "uint16", "uint32")
FLOAT_DTYPES = ("float16", "bfloat16", "float32")
ARRAY_DTYPES = TOKEN_DTYPES + FLOAT_DTYPES
"""Every dtype a shard's header may name."""
# Signed requests from the original API map to the unsigned dtype of the same width.
_SIGNED_TO_UNSIGNED = {"int8": "uint8", "int16": "uint16", "int32": "uint32", "int64": "uint32", "uint64": "uint32"}


def align(n: int, to: int) -> int:
    """Smallest multiple of ``to`` that is >= ``n``."""
    return -(-n // to) * to


def token_dtype_for_vocab(vocab_size: int) -> np.dtype:
    """``uint16`` for vocabularies of up to 65,536 ids, else ``uint32``.

    Raises:
        ValueError: ``vocab_size`` is not positive or exceeds 2**32.
    """
    if vocab_size < 1 or vocab_size > 2**32:
        raise ValueError(f"vocab_size must be in [1, 2**32], got {vocab_size}")
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


def normalize_token_dtype(dtype) -> np.dtype:
    """Map a requested dtype to the little-endian unsigned token dtype that stores it.

    ``int16``/``int32`` (the original Roxxel's choices) become ``uint16``/``uint32``: ids are
    never negative, and an unsigned type of the same width holds twice the range.

    Raises:
        ValueError: the dtype is not an integer type (e.g. ``float32``): token shards hold ids.
    """
    name = np.dtype(dtype).name
    name = _SIGNED_TO_UNSIGNED.get(name, name)
    if name not in TOKEN_DTYPES:
        raise ValueError(
            f"token dtype must be one of {', '.join(TOKEN_DTYPES)} (or a signed integer type of the "
            f"same width), got {np.dtype(dtype).name!r}; float data is not a token stream"
        )
    return np.dtype(name).newbyteorder("<")


def is_float(dtype: Any) -> bool:
    """Whether ``dtype`` is a floating-point type (``bfloat16`` included, whose numpy kind is ``V``)."""
    d = np.dtype(dtype)
    return d.kind == "f" or d == np.dtype(ml_dtypes.bfloat16)


def normalize_dtype(dtype: Any) -> np.dtype:
    """Map a requested dtype to the little-endian dtype a shard stores it as.

    Integer types map as in :func:`normalize_token_dtype`; ``float16``, ``bfloat16`` and
    ``float32`` are kept.

    Raises:
        ValueError: another floating-point type (``float64``: cast to ``float32`` first; a
            silent downcast would lose precision) or a type that is neither.
    """
    d = np.dtype(dtype)
    if is_float(d):
        if d.name not in FLOAT_DTYPES:
            raise ValueError(f"float arrays are stored as {', '.join(FLOAT_DTYPES)}, got {d.name!r}; "
                             "cast them (e.g. .astype(np.float32)) or pass dtype='float32'")
        return dtype_from_name(d.name)
    return normalize_token_dtype(d)


def dtype_from_name(name: str) -> np.dtype:
    """The little-endian dtype a header names (``"uint16"``, ``"bfloat16"``, ...)."""
    return np.dtype(name).newbyteorder("<")


def dtype_name_bytes(dtype: np.dtype) -> bytes:
    """The dtype's name, NUL-padded to the 8 bytes the header holds."""
    return np.dtype(dtype).name.encode("ascii").ljust(8, b"\0")


def header_crc(header_prefix: bytes, metadata: bytes) -> int:
    """CRC-32 over header bytes [0, 56) and the metadata JSON (cheap check made on every open)."""
    return zlib.crc32(metadata, zlib.crc32(header_prefix[:HEADER_CRC_SPAN])) & 0xFFFFFFFF


def index_offset_for(data_offset: int, num_tokens: int, itemsize: int) -> int:
    """Byte offset of the document index: after the token data, 8-aligned."""
    return align(data_offset + num_tokens * itemsize, INDEX_ALIGNMENT)


def num_blocks(data_bytes: int, block_bytes: int) -> int:
    """Blocks of ``block_bytes`` (the last one shorter) that cover ``data_bytes`` bytes of tokens."""
    return -(-data_bytes // block_bytes) if block_bytes else 0


def file_size_for(index_offset: int, num_documents: int, blocks: int = 0) -> int:
    """Total file size implied by the header: index, block checksums (1.1), then the footer."""
    return index_offset + num_documents * INDEX_DTYPE.itemsize + blocks * BLOCK_CRC_DTYPE.itemsize + FOOTER.size
