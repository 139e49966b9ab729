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

Each dtype is one row of :data:`SHARD_DTYPES` (its name, header code, kind, aliases); what a
dataset allows (an EOS id, vocabulary checks, decoding to text) follows from the row's kind.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass
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

DTYPE_CODE_BYTES = 8  # the header's dtype field (see HEADER)


class Kind(enum.Enum):
    """What a shard's values are; it decides which features of a dataset apply to them."""

    TOKEN_IDS = "token ids"  # ids of a tokenizer's vocabulary
    BYTES = "bytes"  # token ids that are bytes: text byte for byte when no tokenizer is recorded
    FLOAT_ARRAYS = "float arrays"  # numbers (features, embeddings, targets): no vocabulary, no EOS


@dataclass(frozen=True)
class ShardDtype:
    """One dtype a shard may hold: a row of :data:`SHARD_DTYPES`.

    Attributes:
        name: numpy's name for it; the header stores it as :attr:`code`.
        kind: what the values are (:class:`Kind`); the properties below follow from it.
        aliases: requested dtypes written as this one (the original API's signed integers:
            ids are never negative, and the unsigned type of the same width holds twice the range).
        legacy_names: dtype names of original ``ROXXEL02`` shards read as this one. The
            original stored vocabularies up to 65,535 ids as ``int16``, which wraps ids >=
            32,768 negative; read as ``uint16``, the same bits give every id back.
    """

    name: str
    kind: Kind
    aliases: tuple[str, ...] = ()
    legacy_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.name) > DTYPE_CODE_BYTES:
            raise ValueError(f"dtype name {self.name!r} does not fit the header's {DTYPE_CODE_BYTES} bytes")

    @property
    def numpy(self) -> np.dtype:
        """The little-endian numpy dtype of the stored values."""
        return np.dtype(self.name).newbyteorder("<")

    @property
    def code(self) -> bytes:
        """What the header's dtype field holds: the name, NUL-padded to 8 bytes."""
        return self.name.encode("ascii").ljust(DTYPE_CODE_BYTES, b"\0")

    @property
    def ids(self) -> bool:
        """Whether the values are token ids (of a vocabulary, or bytes), not float arrays."""
        return self.kind is not Kind.FLOAT_ARRAYS

    @property
    def eos_allowed(self) -> bool:
        """Whether an EOS id may end each document (and ``outputs='documents'`` can find them)."""
        return self.ids

    @property
    def vocab_checked(self) -> bool:
        """Whether the values are checked against a vocabulary (a writer's, a curriculum's, a model's)."""
        return self.ids

    @property
    def decodes(self) -> bool:
        """Whether ``roxxel cat`` decodes a document to text (else it prints the values)."""
        return self.ids

    @property
    def bytes_without_tokenizer(self) -> bool:
        """Whether ids are bytes when no tokenizer is recorded (``roxxel cat`` writes them as they are)."""
        return self.kind is Kind.BYTES

    @property
    def id_limit(self) -> int:
        """Ids the dtype holds (``2**bits``); 0 for float arrays, which hold none."""
        return 2 ** (8 * self.numpy.itemsize) if self.ids else 0


SHARD_DTYPES: tuple[ShardDtype, ...] = (
    ShardDtype("uint8", Kind.BYTES, aliases=("int8",)),
    ShardDtype("uint16", Kind.TOKEN_IDS, aliases=("int16",), legacy_names=("int16",)),
    ShardDtype("uint32", Kind.TOKEN_IDS, aliases=("int32", "int64", "uint64")),
    ShardDtype("float16", Kind.FLOAT_ARRAYS),
    ShardDtype("bfloat16", Kind.FLOAT_ARRAYS),
    ShardDtype("float32", Kind.FLOAT_ARRAYS),
)
"""Every dtype a shard's header may name, one row each: a new dtype is a new row."""

_BY_NAME = {row.name: row for row in SHARD_DTYPES}
_BY_CODE = {row.code: row for row in SHARD_DTYPES}
_BY_REQUEST = {name: row for row in SHARD_DTYPES for name in (row.name, *row.aliases)}
_BY_LEGACY_NAME = {name: row for row in SHARD_DTYPES for name in row.legacy_names}
if len(_BY_REQUEST) != sum(1 + len(row.aliases) for row in SHARD_DTYPES):
    raise ImportError("SHARD_DTYPES names one dtype (or alias) in two rows")

TOKEN_DTYPES = tuple(row.name for row in SHARD_DTYPES if row.ids)
FLOAT_DTYPES = tuple(row.name for row in SHARD_DTYPES if not row.ids)
ARRAY_DTYPES = tuple(row.name for row in SHARD_DTYPES)
"""Every dtype a shard's header may name."""


def shard_dtype(dtype: Any) -> ShardDtype:
    """The row of ``dtype`` (a numpy dtype or its name), as a dataset's stored dtype.

    A dtype outside the table can only come from an original ``ROXXEL02`` shard (``int32``,
    ``float64``, ...); it gets a row of its own: float arrays when it is floating-point, else ids.
    """
    d = np.dtype(dtype)
    row = _BY_NAME.get(d.name)
    if row is None:
        row = ShardDtype(d.name, Kind.FLOAT_ARRAYS if is_float(d) else Kind.TOKEN_IDS)
    return row


def dtype_for_code(code: bytes) -> ShardDtype | None:
    """The row whose :attr:`~ShardDtype.code` a header's 8-byte dtype field holds (None: no such dtype)."""
    return _BY_CODE.get(code)


def legacy_dtype(name: str) -> np.dtype:
    """The little-endian dtype to read an original ``ROXXEL02`` shard's stored ``name`` as (see :attr:`ShardDtype.legacy_names`)."""
    row = _BY_LEGACY_NAME.get(name)
    return row.numpy if row is not None else np.dtype(name).newbyteorder("<")


def align(n: int, to: int) -> int:
    """Smallest multiple of ``to`` that is >= ``n``."""
    return -(-n // to) * to


def token_dtype_for_vocab(vocab_size: int) -> np.dtype:
    """The narrowest token-id dtype that holds ``vocab_size`` ids: ``uint16`` for up to 65,536, else ``uint32``.

    Raises:
        ValueError: ``vocab_size`` is not positive or exceeds what the widest token-id dtype holds (2**32).
    """
    rows = sorted((row for row in SHARD_DTYPES if row.kind is Kind.TOKEN_IDS), key=lambda row: row.id_limit)
    if vocab_size < 1 or vocab_size > rows[-1].id_limit:
        raise ValueError(f"vocab_size must be in [1, 2**{rows[-1].id_limit.bit_length() - 1}], got {vocab_size}")
    return next(row.numpy for row in rows if vocab_size <= row.id_limit)


def normalize_token_dtype(dtype) -> np.dtype:
    """Map a requested dtype to the little-endian unsigned token dtype that stores it.

    ``int16``/``int32`` (the original Roxxel's choices) become ``uint16``/``uint32`` (a row's
    :attr:`~ShardDtype.aliases`).

    Raises:
        ValueError: the dtype is not an integer type (e.g. ``float32``): token shards hold ids.
    """
    row = _BY_REQUEST.get(np.dtype(dtype).name)
    if row is None or not row.ids:
        raise ValueError(
            f"token dtype must be one of {', '.join(TOKEN_DTYPES)} (or a signed integer type of the "
            f"same width), got {np.dtype(dtype).name!r}; float data is not a token stream"
        )
    return row.numpy


def is_float(dtype: Any) -> bool:
    """Whether ``dtype`` is a floating-point type (``bfloat16`` included, whose numpy kind is ``V``).

    For any numpy dtype (a requested batch dtype, an input array's); what a *stored* dtype
    allows is its row's (:func:`shard_dtype`).
    """
    d = np.dtype(dtype)
    return d.kind == "f" or d == np.dtype(ml_dtypes.bfloat16)


def normalize_dtype(dtype: Any) -> np.dtype:
    """Map a requested dtype to the little-endian dtype a shard stores it as.

    A row's name or one of its aliases (see :data:`SHARD_DTYPES`): integer types map as in
    :func:`normalize_token_dtype`; ``float16``, ``bfloat16`` and ``float32`` are kept.

    Raises:
        ValueError: another floating-point type (``float64``: cast to ``float32`` first; a
            silent downcast would lose precision) or a type that is neither.
    """
    d = np.dtype(dtype)
    row = _BY_REQUEST.get(d.name)
    if row is not None:
        return row.numpy
    if is_float(d):
        raise ValueError(
            f"float arrays are stored as {', '.join(FLOAT_DTYPES)}, got {d.name!r}; "
            "cast them (e.g. .astype(np.float32)) or pass dtype='float32'"
        )
    return normalize_token_dtype(d)  # raises: no row takes it


def dtype_name_bytes(dtype: np.dtype) -> bytes:
    """The dtype's header code: its row's :attr:`~ShardDtype.code` (the name, NUL-padded to 8 bytes)."""
    return shard_dtype(dtype).code


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
