"""The ``.rox`` shard format: layout, writer (atomic), reader (memory-mapped), original ``ROXXEL02`` reader, manifest."""

from roxxel.format.dataset_writer import DatasetWriter
from roxxel.format.errors import (
    BadSignatureError,
    BlockChecksumError,
    ChecksumMismatchError,
    CorruptShardError,
    DatasetExistsError,
    DatasetLockedError,
    DtypeMismatchError,
    EmptyDatasetError,
    IncompleteDatasetError,
    RoxxelFormatError,
    ShardChangedError,
    ShardNotFoundError,
    ShardReadError,
    TruncatedShardError,
)
from roxxel.format.legacy import LegacyShard
from roxxel.format.manifest import MANIFEST_NAME, Manifest, ShardEntry
from roxxel.format.shard import Shard, open_shard
from roxxel.format.shard_writer import ShardWriter

__all__ = [
    "BadSignatureError",
    "BlockChecksumError",
    "ChecksumMismatchError",
    "CorruptShardError",
    "DatasetExistsError",
    "DatasetLockedError",
    "DtypeMismatchError",
    "EmptyDatasetError",
    "IncompleteDatasetError",
    "RoxxelFormatError",
    "ShardChangedError",
    "ShardNotFoundError",
    "ShardReadError",
    "TruncatedShardError",
    "LegacyShard",
    "MANIFEST_NAME",
    "Manifest",
    "ShardEntry",
    "Shard",
    "open_shard",
    "DatasetWriter",
    "ShardWriter",
]
